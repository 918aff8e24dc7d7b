"""sglang_bench's runner end to end against a tiny fake SGLang server on loopback (success and
every failure path, each bounded in time), its check-mode plan and its event-loop lag monitor."""

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest
from loopback import free_port

from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_runner as runner
from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_workload as wl

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fixtures" / "bench"))
from fake_sglang import FakeServerThread  # noqa: E402


# ------------------------------------------------------------------ against the fake server
BASE = {"concurrency": [1, 3], "input_len": 8, "output_len": 20, "num_prompts": 6,
        "timeout": 10}


def _run(url, **kw):
    cfg = dict(BASE, url=url)
    cfg.update(kw)
    return runner.run_benchmark(cfg)


def test_generate_end_to_end_counts_and_accept_length():
    with FakeServerThread(tokens_per_chunk=3, ttft=0.02, chunk_gap=0.004) as f:
        res = _run(f.url, flush_cache=True)
        sent = f.fake.requests
    lv = res["by_concurrency"]["3"]
    assert [x["concurrency"] for x in res["levels"]] == [1, 3]
    assert lv["completed"] == 6 and lv["failed"] == 0
    assert lv["total_output_tokens"] == 6 * 20
    assert lv["server_output_tokens"] == 6 * 20  # the counters exclude the warmup
    # 20 tokens = 1 + 19 -> chunks 1,3,3,3,3,3,3,1: 7 verify calls for 19 tokens after the first
    assert lv["accept_length_source"] == "metrics_counters"
    assert lv["counter_accept_length"] == pytest.approx(20 / 7.0)
    assert lv["request_accept_length"] == pytest.approx(20 / 7.0)
    assert lv["server_accept_length_after"] == pytest.approx(20 / 7.0)  # flushed before level
    assert lv["tokens_per_chunk"] == pytest.approx(20 / 8.0)
    assert lv["ttft_ms"]["p50"] >= 20.0
    # chunk gaps ~4 ms spread over 3 tokens: per-token ITL well below the chunk gap
    assert lv["itl_ms"]["p50"] < lv["chunk_gap_ms"]["p50"] / 2
    # warmup: C requests per level, not counted
    assert sent == (1 + 6) + (3 + 6)
    assert res["server"]["metrics"] is True
    assert res["server"]["effective_max_running_requests"] == 24  # the limit the server really runs with
    # the fake server shares this process (and its GIL), so client-limit warnings may appear
    assert [w for w in res["warnings"] if "limited by the benchmark client" not in w] == []


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_openai_endpoints(endpoint):
    with FakeServerThread(tokens_per_chunk=2) as f:
        res = _run(f.url, endpoint=endpoint, concurrency=[2], num_prompts=4)
    lv = res["levels"][0]
    assert lv["completed"] == 4 and lv["total_output_tokens"] == 80
    assert res["server"]["model"] == "fake-model"
    assert lv["tokens_per_chunk"] == pytest.approx(20 / 11.0)


def test_read_until_close_streams():
    with FakeServerThread(chunked=False) as f:
        res = _run(f.url, concurrency=[2], num_prompts=4)
    assert res["levels"][0]["completed"] == 4


def test_repeats_give_confidence_intervals():
    with FakeServerThread() as f:
        res = _run(f.url, concurrency=[2], num_prompts=4, repeats=3)
    lv = res["levels"][0]
    assert len(lv["repeats"]) == 3 and lv["completed"] == 12
    assert lv["server_output_tokens"] == lv["total_output_tokens"] == 12 * 20
    ci = lv["ci"]["output_throughput"]
    assert ci["n"] == 3 and ci["low"] <= ci["mean"] <= ci["high"]


def test_dataset_prompts_and_duration_mode():
    prompts = wl.load_jsonl(['{"prompt": "a b c", "output_len": 5}', '"d e"'])
    with FakeServerThread(chunk_gap=0.002) as f:
        # long enough for a few requests on a loaded machine (0.3 s once finished none)
        res = _run(f.url, prompts=prompts, concurrency=[2], num_prompts=None, duration=2.0)
    lv = res["levels"][0]
    assert lv["completed"] >= 4 and lv["failed"] == 0
    assert res["config"]["ignore_eos"] is False and res["config"]["dataset_prompts"] == 2
    assert "prompts" not in res["config"]


def test_unreachable_server_is_a_clear_error():
    t0 = time.time()
    with pytest.raises(runner.BenchError) as exc:
        _run("http://127.0.0.1:%d" % free_port())
    assert "cannot reach the SGLang server" in str(exc.value)
    assert time.time() - t0 < 5


@pytest.mark.parametrize("key", [None, "wrong"])
def test_wrong_api_key(key):
    with FakeServerThread(api_key="secret") as f:
        with pytest.raises(runner.BenchError) as exc:
            _run(f.url, api_key=key)
    assert "HTTP 401" in str(exc.value) and "api_key" in str(exc.value)


def test_right_api_key():
    with FakeServerThread(api_key="secret") as f:
        res = _run(f.url, api_key="secret", concurrency=[1], num_prompts=2)
    assert res["levels"][0]["completed"] == 2
    assert "secret" not in json.dumps(res)


def test_malformed_chunks_are_counted_failures():
    with FakeServerThread(malformed_every=5) as f:
        res = _run(f.url, concurrency=[2], num_prompts=4, fail_on_empty_level=False)
    lv = res["levels"][0]
    assert lv["failed"] == 4 and lv["completed"] == 0
    assert lv["measured"] is False and lv["failure_rate"] == 1.0
    assert list(lv["errors"]) == ["malformed stream chunk (not JSON): b'{not json at all'"]
    assert lv["error_groups"] == [{"status": None, "count": 4,
                                   "message": "malformed stream chunk (not JSON): "
                                              "b'{not json at all'"}]
    assert any("C=2: no request completed (4 of 4 failed" in w for w in res["warnings"])


def test_empty_level_fails_by_default_and_names_it():
    with FakeServerThread(malformed_every=5) as f:
        with pytest.raises(runner.BenchError) as exc:
            _run(f.url, concurrency=[2, 4], num_prompts=4)
    msg = str(exc.value)
    assert "no request completed at concurrency 2: 4 of 4 failed" in msg
    assert "malformed stream chunk" in msg and "(x4)" in msg
    # it stops there: the later level is not run, the empty one is returned
    assert [lv["concurrency"] for lv in exc.value.partial["levels"]] == [2]


def test_truncated_stream_is_a_counted_failure():
    with FakeServerThread(bad_tail=True) as f:
        res = _run(f.url, concurrency=[1], num_prompts=2, warmup=0, fail_on_empty_level=False)
    lv = res["levels"][0]
    assert lv["failed"] == 2
    assert any("closed by server mid-stream" in e or "truncated" in e for e in lv["errors"])


def test_server_dying_mid_run_keeps_partial_results():
    # warmup 1 + 6 measured at C=1, then 3 warmup + some measured at C=3 before it dies
    with FakeServerThread(die_after=10) as f:
        t0 = time.time()
        with pytest.raises(runner.BenchError) as exc:
            _run(f.url)
    assert time.time() - t0 < 10
    assert "stopped answering during concurrency 3" in str(exc.value)
    part = exc.value.partial
    assert [lv["concurrency"] for lv in part["levels"]] == [1, 3]
    assert part["levels"][0]["completed"] == 6
    dead = part["levels"][1]
    assert dead["failed"] > 0 and dead["server_lost"]


def test_hanging_server_times_out():
    with FakeServerThread(hang=True) as f:
        t0 = time.time()
        res = _run(f.url, concurrency=[2], num_prompts=2, warmup=0, timeout=0.5,
                   fail_on_empty_level=False)
        elapsed = time.time() - t0
    lv = res["levels"][0]
    # the tokens received before the deadline stay out of the message, so timeouts group
    assert lv["failed"] == 2 and lv["errors"] == {"timed out after 0.5s": 2}
    assert elapsed < 5


def test_requests_that_time_out_in_the_client_name_the_timeout_not_a_lost_server():
    # the server answers /health and /server_info at once, but each request needs longer than the
    # client's deadline: that is the `timeout` option's doing, and the message says so
    with FakeServerThread(hang=True) as f:
        with pytest.raises(runner.BenchError) as exc:
            _run(f.url, concurrency=[2], num_prompts=2, warmup=0, timeout=0.25)
    msg = str(exc.value)
    assert "stopped answering" not in msg
    assert "timeout=0.25s" in msg and "Raise `timeout`" in msg
    assert not exc.value.partial["levels"][0]["server_lost"]


def test_the_health_check_after_failures_has_its_own_deadline(monkeypatch):
    # a 1 ms request deadline must not be the deadline of the /health check that decides whether
    # the server is lost
    asked = []
    real = runner.tp.Client.request

    async def request(self, method, path, payload=None, timeout=None):
        if path == "/health":
            asked.append(timeout)
        return await real(self, method, path, payload, timeout)

    monkeypatch.setattr(runner.tp.Client, "request", request)
    with FakeServerThread(hang=True) as f:
        with pytest.raises(runner.BenchError):
            _run(f.url, concurrency=[1], num_prompts=1, warmup=0, timeout=0.2)
    assert asked == [runner.HEALTH_PROBE_S]


# ------------------------------------------------------------------ check mode, event-loop lag
def test_loop_lag_monitor_sees_a_blocked_loop():
    async def main():
        mon = runner.LoopLagMonitor(interval=0.005)
        mon.start()
        await asyncio.sleep(0.03)
        time.sleep(0.05)  # block the loop on purpose
        await asyncio.sleep(0.03)
        return await mon.stop()
    lag = asyncio.new_event_loop().run_until_complete(main())
    assert lag > 0.02


def test_plan_for_check_mode():
    cfg = dict(runner.DEFAULTS, concurrency=[1, 8], ignore_eos=True)
    p = runner.plan(cfg)
    assert [lv["requests"] for lv in p["levels"]] == [10, 40]
    assert [lv["warmup_requests"] for lv in p["levels"]] == [1, 8]
    assert p["path"] == "/generate"
