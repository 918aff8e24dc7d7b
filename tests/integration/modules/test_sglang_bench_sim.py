"""sglang_bench against the simulator (real processes on loopback).

The simulator is started with the operator's real SGLang flags (EAGLE 3/1/4, tp 4) and runs
20x faster than real time; the module's `time_scale` turns the measured figures back into the
simulated server's seconds, so they are compared with the simulator's own cost model
(sglang_sim.perf), i.e. with the operator's table (C=1, steps 3: ~234 tok/s per request).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from loopback import free_port

ROOT = Path(__file__).resolve().parents[3]
SIM = ROOT / "sim"
MODEL = "Qwen/Qwen3.5-122B-A10B"
TIME_SCALE = 0.05


from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_runner as runner  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_transport as tp  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_workload as wl  # noqa: E402


class Sim:
    def __init__(self, tmp_path, extra=(), steps=3):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        state, dev = tmp_path / "state", tmp_path / "dev"
        state.mkdir(exist_ok=True)
        dev.mkdir(exist_ok=True)
        env = dict(os.environ, SGLANG_SIM_TIME_SCALE=str(TIME_SCALE),
                   SGLANG_SIM_LOAD_SECONDS="1", SGLANG_SIM_STATE_DIR=str(state),
                   SGLANG_SIM_DEV_DIR=str(dev), SGLANG_SIM_CONFIG=str(tmp_path / "none.json"),
                   PYTHONPATH=str(SIM) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "sglang_sim.launch_server", "--model-path", MODEL,
               "--tp-size", "4", "--port", str(self.port), "--enable-metrics",
               "--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(steps),
               "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
               str(steps + 1)] + list(extra)
        self.log = open(tmp_path / "sim.log", "wb")
        self.logpath = tmp_path / "sim.log"
        # own session: the server and its rank children form one group we can end together
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_ready(self, timeout=60):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise AssertionError("sim exited %s: %s" % (self.proc.returncode,
                                                            self.logpath.read_text()[-2000:]))
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError("sim not ready: %s" % self.logpath.read_text()[-2000:])

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                self.kill()
        self.log.close()


@pytest.fixture
def sim(tmp_path):
    s = Sim(tmp_path)
    try:
        s.wait_ready()
        yield s
    finally:
        s.stop()


def _perf():
    sys.path.insert(0, str(SIM))
    from sglang_sim import perf
    return perf


def _server_hist(url):
    """{name: (sum, count)} of the server's own latency histograms (simulated seconds)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    from ansible_collections.blackwell.sglang.plugins.module_utils import bench_metrics as bm
    m = bm.parse_prometheus(text)
    out = {}
    for name in ("time_to_first_token", "inter_token_latency", "e2e_request_latency"):
        out[name] = (m.get("sglang:%s_seconds_sum" % name, 0.0),
                     m.get("sglang:%s_seconds_count" % name, 0.0))
    return out


def test_generate_against_sim_matches_server_side_timing(sim):
    """Our client's figures against the server's own view of the same requests: token counts
    exactly, mean latencies within a few percent (warmup off, so the server's histograms see
    only the measured requests)."""
    perf = _perf()
    levels = []
    for c in (1, 4):
        before = _server_hist(sim.url)
        res = runner.run_benchmark({"url": sim.url, "concurrency": [c], "num_prompts": 8,
                                    "input_len": 64, "output_len": 128, "time_scale": TIME_SCALE,
                                    "flush_cache": True, "timeout": 60, "warmup": 0})
        after = _server_hist(sim.url)
        lv = res["levels"][0]
        levels.append(lv)
        srv = dict((k, (after[k][0] - before[k][0]) / max(1.0, after[k][1] - before[k][1]))
                   for k in after)
        assert lv["failed"] == 0, lv["errors"]
        assert lv["completed"] == 8
        assert lv["total_output_tokens"] == 8 * 128
        # every token we counted, the server counted
        assert lv["server_output_tokens"] == lv["total_output_tokens"]
        # EAGLE steps 3 -> accept length in [1, 4]; temperature 0 synthetic: near 4
        assert 3.5 <= lv["request_accept_length"] <= 4.0
        assert lv["tokens_per_chunk"] > 2.0
        # per-token ITL spreads each chunk gap over its tokens: its mean is the decode time per
        # token, i.e. TPOT (all requests have n = 128 and a one-token first chunk)
        assert lv["itl_ms"]["mean"] == pytest.approx(lv["tpot_ms"]["mean"], rel=1e-6)
        # the server's own view (simulated seconds) vs ours (measured / time_scale)
        ttft_s, itl_s, e2e_s = (srv[k] * 1000 for k in ("time_to_first_token",
                                                        "inter_token_latency",
                                                        "e2e_request_latency"))
        print("C=%d ours ttft %.1f itl %.3f e2e %.1f | server ttft %.1f itl %.3f e2e %.1f (ms)"
              % (c, lv["ttft_ms"]["mean"], lv["itl_ms"]["mean"], lv["e2e_latency_ms"]["mean"],
                 ttft_s, itl_s, e2e_s))
        assert lv["itl_ms"]["mean"] == pytest.approx(itl_s, rel=0.08)
        assert lv["e2e_latency_ms"]["mean"] - lv["ttft_ms"]["mean"] == pytest.approx(
            e2e_s - ttft_s, rel=0.08)
        # the server starts its clock once it has parsed the request; ours includes the HTTP
        # exchange (connects too: warmup is off), a few real ms that time_scale magnifies
        # 20x, and more on a busy 2-core machine: bound it at 20 real ms
        assert -1.0 / TIME_SCALE < lv["ttft_ms"]["mean"] - ttft_s < 20.0 / TIME_SCALE
    # and the simulator's cost model (the operator's table: ~234 tok/s per request at C=1,
    # steps 3). Loose: at 20x speed on a busy 2-core machine the sim's steps run late.
    want = perf.per_request_tps(1, 3)
    got = levels[0]["decode_tps_per_request"]["p50"]
    assert 0.7 * want < got < 1.1 * want, (got, want)
    # the server-side counters: in SGLang 0.5.23 both are added per finished request
    # (metrics_collector.observe_one_finished_request: generation tokens and the request's
    # spec_verify_ct), so their delta ratio is the token-weighted per-request accept length
    for lv in levels:
        assert lv["accept_length_source"] == "metrics_counters"
        if lv["counter_accept_length"] > 4.0:
            pytest.xfail("the simulator counts sglang:spec_verify_calls_total once per batch "
                         "step, not per request verify as SGLang 0.5.23 does (counter accept "
                         "length %.2f at C=%d)" % (lv["counter_accept_length"], lv["concurrency"]))
        assert lv["counter_accept_length"] == pytest.approx(lv["request_accept_length"],
                                                            rel=1e-6)


def test_openai_completions_against_sim(sim):
    res = runner.run_benchmark({"url": sim.url, "endpoint": "completions", "concurrency": [2],
                                "num_prompts": 4, "input_len": 32, "output_len": 64,
                                "time_scale": TIME_SCALE, "timeout": 60})
    lv = res["levels"][0]
    assert lv["failed"] == 0, lv["errors"]
    assert lv["total_output_tokens"] == 4 * 64
    # usage comes per chunk (continuous_usage_stats) or, from servers that send it only at the
    # end, is spread over the chunks: either way per-token ITL averages to TPOT
    assert lv["itl_ms"]["mean"] == pytest.approx(lv["tpot_ms"]["mean"], rel=1e-6)
    assert lv["tokens_per_chunk"] > 2.0


def test_server_killed_mid_run_keeps_partial_results(sim):
    out = {}

    def run():
        try:
            runner.run_benchmark({"url": sim.url, "concurrency": [1, 2], "num_prompts": 4,
                                  "input_len": 16, "output_len": 4000, "time_scale": TIME_SCALE,
                                  "timeout": 30})
        except runner.BenchError as exc:
            out["exc"] = exc
    t = threading.Thread(target=run)
    t.start()
    time.sleep(3.0)
    sim.kill()
    t.join(60)
    assert not t.is_alive()
    exc = out.get("exc")
    assert exc is not None, "the benchmark should fail once the server is gone"
    assert "stopped answering" in str(exc)
    levels = exc.partial["levels"]
    assert levels and levels[-1]["failed"] > 0


def test_module_through_ansible(sim, tmp_path):
    """The real module path: ansible ad-hoc with the JSON callback, facts keyed by C."""
    ansible = ROOT / ".venv" / "bin" / "ansible"
    if not ansible.exists():
        pytest.skip("no controller venv at .venv (make venv)")
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    args = json.dumps({"url": sim.url, "concurrency": [1, 2], "num_prompts": 4,
                       "input_len": 16, "output_len": 32, "time_scale": TIME_SCALE})
    r = subprocess.run([str(ansible), "localhost", "-m", "blackwell.sglang.sglang_bench",
                        "-a", args], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    res = json.loads(r.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    facts = res["ansible_facts"]["sglang_bench"]
    assert facts["2"]["completed"] == 4 and res["changed"] is False


def test_wrong_api_key_against_sim(tmp_path):
    s = Sim(tmp_path, extra=["--api-key", "sekrit"])
    try:
        s.wait_ready()
        with pytest.raises(runner.BenchError) as exc:
            runner.run_benchmark({"url": s.url, "api_key": "nope", "concurrency": [1],
                                  "timeout": 10})
        assert "HTTP 401" in str(exc.value)
        res = runner.run_benchmark({"url": s.url, "api_key": "sekrit", "concurrency": [1],
                                    "num_prompts": 2, "input_len": 8, "output_len": 8,
                                    "time_scale": TIME_SCALE, "timeout": 30})
        assert res["levels"][0]["completed"] == 2
    finally:
        s.stop()
        shutil.rmtree(tmp_path / "state", ignore_errors=True)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_openai_token_counts_come_from_per_chunk_usage(sim, endpoint):
    """SGLang 0.5.23 fills `usage` on every chunk when the request sets
    stream_options.continuous_usage_stats (entrypoints/openai/serving_completions.py,
    serving_chat.py), and the client asks for it: so every token count is the server's own,
    chunk by chunk, and the one-token-per-chunk fallback (tokens_per_chunk_estimated) is never
    taken. Speculative chunks carry several tokens each, which only per-chunk usage can show."""
    import asyncio

    n_out = 48
    prompt = ({"input_ids": list(range(1000, 1032))} if endpoint == "completions"
              else {"text": "zq vx kopuja peboka"})
    payload = wl.build_payload(endpoint, prompt, n_out, 0.0, True)
    body = json.loads(payload)
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}

    async def go():
        client = tp.Client(sim.url, timeout=60)
        try:
            return await runner.run_requests(client, tp.ENDPOINT_PATHS[endpoint],
                                             lambda i: payload, 4, 2, endpoint, timeout=60)
        finally:
            client.close()

    records = asyncio.new_event_loop().run_until_complete(go())[0]
    assert len(records) == 4
    for rec in records:
        assert rec["ok"], rec["error"]
        assert "tokens_per_chunk_estimated" not in rec
        per_chunk = [n for _t, n in rec["chunks"]]
        assert sum(per_chunk) == rec["output_tokens"] == n_out
        assert max(per_chunk) > 1 and len(per_chunk) < n_out
