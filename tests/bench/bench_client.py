"""Benchmark of sglang_bench's own client (not a timed test; prints figures).

Mode `ceiling` (default): starts the simulator (or, with --server fake, the tiny fake server of
tests/fixtures/bench) pinned to one core, runs our stdlib client pinned to another core at N
concurrent streams and prints
  * the output tok/s it achieved, its CPU share of its core, its event-loop lag p99,
  * its ceiling: tokens it can process per CPU-second of its one core (tok/s / CPU share),
  * its accuracy: tokens it counted vs the server's own counter (sglang:generation_tokens_total
    delta from /metrics over the same requests).

Mode `compare` (--compare): in the same run and against the same server, also runs an
established client from the registries and prints the ratio of our figures to theirs.
SGLang's own `python -m sglang.benchmark.serving` is tried first, from `sglang==0.5.23
--no-deps` in .cache/bench-venv (installed on demand); if it cannot be imported without the
whole GPU stack the script says which import failed and falls back to AIPerf
(`aiperf profile`), installed into the same venv.

Run: .venv/bin/python tests/bench/bench_client.py [--streams 256] [--compare]
On a 2-core machine the server gets core 0 and the client core 1 (taskset), so neither measures
the other's load.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
VENV = CACHE / "bench-venv"
COLLECTIONS = CACHE / "collections"
FAKE = ROOT / "tests" / "fixtures" / "bench" / "fake_sglang.py"
SIM_DIR = ROOT / "sim"
MODEL = "Qwen/Qwen3.5-122B-A10B"
sys.path.insert(0, str(ROOT / "tests"))
from loopback import free_port  # noqa: E402


def log(msg):
    sys.stderr.write("[bench] %s\n" % msg)
    sys.stderr.flush()


def taskset(core):
    if core is None or not shutil.which("taskset"):
        return []
    return ["taskset", "-c", str(core)]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:  # loopback only
        return r.status, r.read()


def server_tokens(url):
    """The server's own generated-token counter (None if it has no /metrics)."""
    try:
        status, body = http_get(url + "/metrics")
    except OSError:
        return None
    if status != 200:
        return None
    total = 0.0
    found = False
    for line in body.decode().splitlines():
        if line.startswith("sglang:generation_tokens_total"):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    return total if found else None


# ------------------------------------------------------------------ server
class Server:
    def __init__(self, kind, core, time_scale, max_running):
        self.kind = kind
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.tmp = tempfile.mkdtemp(prefix="bench-sim-")
        env = dict(os.environ)
        if kind == "sim":
            env.update(SGLANG_SIM_TIME_SCALE=str(time_scale), SGLANG_SIM_LOAD_SECONDS="1",
                       SGLANG_SIM_STATE_DIR=os.path.join(self.tmp, "state"),
                       SGLANG_SIM_DEV_DIR=os.path.join(self.tmp, "dev"),
                       # room for --max-running-requests = streams: this benchmarks the
                       # client, so the simulated GPUs get enough memory for every stream
                       SGLANG_SIM_GPU_MEMORY_MIB=str(env.get("SGLANG_SIM_GPU_MEMORY_MIB",
                                                             "400000")),
                       SGLANG_SIM_CONFIG=os.path.join(self.tmp, "none.json"),
                       PYTHONPATH=str(SIM_DIR) + os.pathsep + env.get("PYTHONPATH", ""))
            os.makedirs(env["SGLANG_SIM_STATE_DIR"])
            os.makedirs(env["SGLANG_SIM_DEV_DIR"])
            cmd = [sys.executable, "-m", "sglang_sim.launch_server", "--model-path", MODEL,
                   "--tp-size", "4", "--port", str(self.port), "--enable-metrics",
                   "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                   "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
                   "--max-running-requests", str(max_running)]
        else:
            cmd = [sys.executable, str(FAKE), "--port", str(self.port), "--tokens-per-chunk", "4",
                   "--ttft", "0.002", "--chunk-gap", "0.004"]
        self.cmd = taskset(core) + cmd
        self.logf = open(os.path.join(self.tmp, "server.log"), "wb")
        # own process group, so the server's rank children are ended with it
        self.proc = subprocess.Popen(self.cmd, env=env, stdout=self.logf,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout=120):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SystemExit("server exited with %s; log: %s"
                                 % (self.proc.returncode, self.tail()))
            try:
                path = "/health_generate" if self.kind == "sim" else "/health"
                if http_get(self.url + path, timeout=10)[0] == 200:
                    return time.time() - t0
            except OSError:
                pass
            time.sleep(0.3)
        raise SystemExit("server not ready after %ss; log: %s" % (timeout, self.tail()))

    def tail(self):
        try:
            with open(os.path.join(self.tmp, "server.log"), "rb") as fh:
                return fh.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the group this script started
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.logf.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


# ------------------------------------------------------------------ our client
def client_run(args):
    """Child mode: run one level with our module_utils client and print its level dict."""
    sys.path.insert(0, str(COLLECTIONS))
    from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_runner as runner
    cfg = {"url": args.url, "concurrency": [args.streams], "num_prompts": args.requests,
           "input_len": args.input_len, "output_len": args.output_len, "timeout": 300,
           "endpoint": args.endpoint, "warmup": args.streams}
    res = runner.run_benchmark(cfg)
    print(json.dumps({"level": res["levels"][0], "warnings": res["warnings"]}))


def run_ours(url, args):
    link = COLLECTIONS / "ansible_collections" / "blackwell" / "sglang"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(ROOT, target_is_directory=True)
    cmd = taskset(args.client_core) + [
        sys.executable, __file__, "--client-run", "--url", url, "--streams", str(args.streams),
        "--requests", str(args.requests), "--input-len", str(args.input_len),
        "--output-len", str(args.output_len), "--endpoint", args.endpoint]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if out.returncode != 0:
        raise SystemExit("our client failed: %s" % out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ established clients
def venv_python():
    return str(VENV / "bin" / "python")


def pip(*pkgs):
    log("pip install %s (into %s)" % (" ".join(pkgs), VENV))
    r = subprocess.run([venv_python(), "-m", "pip", "install", "-q"] + list(pkgs),
                       capture_output=True, text=True, timeout=1800, check=False)
    if r.returncode != 0:
        raise RuntimeError("pip install %s failed: %s" % (" ".join(pkgs), r.stderr[-1500:]))


def ensure_venv():
    if not (VENV / "bin" / "python").exists():
        py = shutil.which("python3.11") or sys.executable
        log("creating %s with %s" % (VENV, py))
        subprocess.run([py, "-m", "venv", str(VENV)], check=True)


# import name -> PyPI name, for the modules sglang.benchmark.serving pulls in transitively
PIP_NAMES = {"zmq": "pyzmq", "yaml": "pyyaml", "PIL": "pillow",
             "tvm_ffi": "apache-tvm-ffi==0.1.11", "compressed_tensors": "compressed-tensors"}
# never chased: GPU kernel packages (no point on a machine without GPUs)
GPU_ONLY = {"flashinfer", "sgl_kernel", "sglang_kernel", "cuda", "deep_gemm", "flash_mla"}


def try_sglang_import(max_rounds=40):
    """Install sglang==0.5.23 --no-deps plus serving.py's direct light imports, then chase the
    import chain one missing module at a time. Returns (None, chain) when importable, else
    (exact failing import, chain); chain lists every 'import X (at file:line)' that failed."""
    ensure_venv()
    probe = [venv_python(), "-c", "import sglang.benchmark.serving"]
    chain = []
    for dummy in range(max_rounds):
        r = subprocess.run(probe, capture_output=True, text=True, check=False)
        if r.returncode == 0:
            return None, chain
        if "No module named 'sglang'" in r.stderr:
            pip("sglang==0.5.23", "--no-deps")
            pip("aiohttp", "msgspec", "numpy", "orjson", "requests", "tqdm")
            continue
        failure = describe_import_error(r.stderr)
        chain.append(failure)
        missing = None
        if "No module named '" in r.stderr:
            missing = r.stderr.split("No module named '")[-1].split("'")[0].split(".")[0]
        if missing is None or missing in GPU_ONLY:
            return failure, chain
        try:
            pip(PIP_NAMES.get(missing, missing))
        except RuntimeError as exc:
            return "%s; installing it failed: %s" % (failure, str(exc)[-300:]), chain
    return "gave up after %d missing modules" % max_rounds, chain


def describe_import_error(stderr):
    """'<module> (imported from <file>:<line>)' from a traceback's last frames."""
    lines = stderr.strip().splitlines()
    err = lines[-1] if lines else "unknown error"
    where = ""
    for ln in reversed(lines):
        s = ln.strip()
        if s.startswith('File "') and "site-packages/sglang/" in s:
            path = s.split('"')[1].split("site-packages/")[-1]
            where = "%s:%s" % (path, s.split("line ")[1].split(",")[0])
            break
    return "%s (at %s)" % (err, where) if where else err


def run_sglang_serving(url, args):
    make_tokenizer()
    out_file = os.path.join(tempfile.mkdtemp(prefix="sglang-serving-"), "out.jsonl")
    cmd = taskset(args.client_core) + [
        venv_python(), "-m", "sglang.benchmark.serving", "--backend", "sglang",
        "--base-url", url, "--model", "default", "--tokenizer", str(TOKENIZER),
        "--dataset-name", "random-ids", "--num-prompts", str(args.requests),
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--random-range-ratio", "1.0", "--max-concurrency", str(args.streams),
        "--warmup-requests", str(args.streams), "--disable-tqdm", "--output-file", out_file]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env, check=False)
    if r.returncode != 0 or not os.path.exists(out_file):
        raise RuntimeError("sglang.benchmark.serving failed (rc %s): %s"
                           % (r.returncode, (r.stderr or r.stdout)[-2500:]))
    with open(out_file) as fh:
        data = json.loads(fh.read().strip().splitlines()[-1])
    shutil.rmtree(os.path.dirname(out_file), ignore_errors=True)
    return data


TOKENIZER = CACHE / "bench-tokenizer"


def ensure_aiperf():
    ensure_venv()
    r = subprocess.run([venv_python(), "-c", "import aiperf"], capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        pip("aiperf")
    make_tokenizer()


def make_tokenizer():
    """Both established clients need a Hugging Face tokenizer (to size prompts, draw random ids,
    re-count text); the hub is unreachable here, so build a small word-level one locally. The
    token ids only need a stable count: the server side (sim) reports its own token counts."""
    if (TOKENIZER / "tokenizer.json").exists():
        return
    code = r"""
import sys, os
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
words = ["w%d" % i for i in range(4000)]
vocab = {"[UNK]": 0, "[BOS]": 1, "[EOS]": 2}
for w in words:
    vocab[w] = len(vocab)
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="[BOS]",
                               eos_token="[EOS]")
fast.save_pretrained(sys.argv[1])
"""
    subprocess.run([venv_python(), "-c", code, str(TOKENIZER)], check=True)


def run_aiperf(url, args):
    outdir = tempfile.mkdtemp(prefix="aiperf-")
    cmd = taskset(args.client_core) + [
        str(VENV / "bin" / "aiperf"), "profile", "--model", "default", "--url", url,
        "--endpoint-type", "completions", "--streaming", "--concurrency", str(args.streams),
        "--request-count", str(args.requests),
        "--warmup-request-count", str(args.streams),
        "--synthetic-input-tokens-mean", str(args.input_len),
        "--synthetic-input-tokens-stddev", "0",
        "--output-tokens-mean", str(args.output_len), "--output-tokens-stddev", "0",
        "--extra-inputs", "ignore_eos:true", "--extra-inputs", "min_tokens:%d" % args.output_len,
        "--tokenizer", str(TOKENIZER), "--artifact-dir", outdir,
        "--ui-type", "none"]
    # not HF_HUB_OFFLINE: in offline mode AIPerf resolves every name through the hub cache and
    # rejects a local directory; a local directory is loaded without network access anyway
    env = dict(os.environ)
    env.pop("HF_HUB_OFFLINE", None)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env, check=False)
    if r.returncode != 0:
        raise RuntimeError("aiperf failed (rc %s): %s"
                           % (r.returncode, (r.stderr or r.stdout)[-2000:]))
    found = list(Path(outdir).rglob("profile_export_aiperf.json"))
    if not found:
        raise RuntimeError("aiperf wrote no profile_export_aiperf.json: %s" % r.stdout[-1500:])
    data = json.loads(found[0].read_text())
    shutil.rmtree(outdir, ignore_errors=True)
    return data


def aiperf_figure(data, *names):
    """Average of the first AIPerf metric present among names (its JSON has 'avg' per tag)."""
    for name in names:
        item = data.get(name)
        if isinstance(item, dict) and item.get("avg") is not None:
            return float(item["avg"]), item.get("unit")
        if isinstance(data.get("records"), dict):
            item = data["records"].get(name)
            if isinstance(item, dict) and item.get("avg") is not None:
                return float(item["avg"]), item.get("unit")
    return None, None


# ------------------------------------------------------------------ report
def report_ours(tag, res, server_delta):
    lv = res["level"]
    cpu = lv["client_cpu_fraction"] or 0.0
    tps = lv["output_throughput"]
    ceiling = tps / cpu if cpu else float("nan")
    print("%s: %d streams, %d completed, %d failed" % (tag, lv["concurrency"], lv["completed"],
                                                       lv["failed"]))
    print("  output tok/s (wall)        : %.0f" % tps)
    print("  client CPU share of 1 core : %.1f%%" % (cpu * 100))
    print("  event-loop lag p99         : %.2f ms" % (lv["client_loop_lag_p99_ms"] or 0))
    print("  client ceiling (tok per CPU-s on one core): %.0f tok/s" % ceiling)
    print("  client_limited             : %s (%s)"
          % (lv["client_limited"], lv["client_limit_reason"]))
    counted = lv["total_output_tokens"]
    srv = lv.get("server_output_tokens")
    if srv is None:
        srv = server_delta
    if srv:
        print("  accuracy: client counted %d tokens, server counter %d -> error %.3f%%"
              % (counted, srv, 100.0 * (counted - srv) / srv))
    else:
        print("  accuracy: the server exposes no generation_tokens_total counter")
    print("  TTFT p50 %.1f ms, ITL p50 %.2f ms, chunk gap p50 %.2f ms, tokens/chunk %.2f"
          % (lv["ttft_ms"]["p50"], lv["itl_ms"]["p50"], lv["chunk_gap_ms"]["p50"],
             lv["tokens_per_chunk"] or 0))
    return tps, ceiling


def report_ratio(name, ours, theirs):
    """Side by side with bench_serving's own result JSON (same names and definitions)."""
    lv = ours["level"]
    rows = [
        ("output tok/s", lv["output_throughput"], theirs.get("output_throughput")),
        ("request/s", lv["request_throughput"], theirs.get("request_throughput")),
        ("completed", lv["completed"], theirs.get("completed")),
        ("total output tokens", lv["total_output_tokens"], theirs.get("total_output_tokens")),
        ("TTFT mean ms", lv["ttft_ms"]["mean"], theirs.get("mean_ttft_ms")),
        ("TTFT p99 ms", lv["ttft_ms"]["p99"], theirs.get("p99_ttft_ms")),
        ("TPOT mean ms", lv["tpot_ms"]["mean"], theirs.get("mean_tpot_ms")),
        ("ITL p50 ms (per token)", lv["itl_ms"]["p50"], theirs.get("median_itl_ms")),
        ("E2E p50 ms", lv["e2e_latency_ms"]["p50"], theirs.get("median_e2e_latency_ms")),
        # theirs reads /server_info's lifetime average; ours per request (meta_info); our
        # counter-delta figure is printed separately below
        ("accept length", lv["request_accept_length"], theirs.get("accept_length")),
    ]
    print("%-26s %12s %12s %8s" % ("figure", "ours", name.split()[0], "ratio"))
    for label, a, b in rows:
        ratio = (a / b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b \
            else float("nan")
        print("%-26s %12s %12s %8.3f" % (label, _fmt(a), _fmt(b), ratio))
    print("our accept length from /metrics counter deltas: %s (source %s)"
          % (_fmt(lv["counter_accept_length"]), lv["accept_length_source"]))


def _fmt(x):
    if isinstance(x, float):
        return "%.2f" % x
    return str(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--client-run", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--url")
    ap.add_argument("--server", choices=["sim", "fake"],
                    default="sim" if (SIM_DIR / "sglang_sim" / "launch_server.py").exists()
                    else "fake")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=512)
    ap.add_argument("--time-scale", type=float, default=0.01,
                    help="simulator speed (0.01 = 100x faster than real time)")
    ap.add_argument("--endpoint", default="generate", choices=["generate", "completions"])
    ap.add_argument("--server-core", type=int, default=0)
    ap.add_argument("--client-core", type=int, default=1)
    ap.add_argument("--compare", action="store_true",
                    help="also run an established client on the same server and print ratios")
    ap.add_argument("--established", choices=["auto", "sglang", "aiperf"], default="auto")
    args = ap.parse_args()
    if args.client_run:
        return client_run(args)

    server = Server(args.server, args.server_core, args.time_scale, max(48, args.streams))
    try:
        log("starting %s: %s" % (args.server, " ".join(server.cmd)))
        log("ready after %.1fs" % server.wait_ready())
        print("server: %s (core %s), client on core %s, %d streams, %d requests, in/out %d/%d, "
              "endpoint %s" % (args.server + (" time_scale=%g" % args.time_scale
                                              if args.server == "sim" else ""),
                               args.server_core, args.client_core, args.streams, args.requests,
                               args.input_len, args.output_len, args.endpoint))
        before = server_tokens(server.url)
        ours = run_ours(server.url, args)
        after = server_tokens(server.url)
        delta = (after - before) if before is not None and after is not None else None
        tps = report_ours("ours (blackwell.sglang sglang_bench client)", ours, delta)[0]
        if not args.compare:
            return 0
        which = args.established
        if which in ("auto", "sglang"):
            failure, chain = try_sglang_import()
            for step in chain:
                print("  sglang.benchmark.serving import chain: %s" % step)
            if failure is None:
                theirs = run_sglang_serving(server.url, args)
                report_ratio("sglang.benchmark.serving 0.5.23", ours, theirs)
                return 0
            print("sglang.benchmark.serving (sglang==0.5.23 --no-deps) cannot run here: %s"
                  % failure)
            if which == "sglang":
                return 1
        ensure_aiperf()
        data = run_aiperf(server.url, args)
        theirs, unit = aiperf_figure(data, "output_token_throughput")
        ttft = aiperf_figure(data, "time_to_first_token", "ttft")[0]
        itl = aiperf_figure(data, "inter_token_latency")[0]
        print("aiperf: output tok/s %s (%s), TTFT avg %s ms, ITL avg %s ms"
              % (theirs, unit, ttft, itl))
        lv = ours["level"]
        if theirs:
            print("ratio ours / aiperf output tok/s: %.3f" % (tps / theirs))
        if ttft:
            print("ratio ours / aiperf mean TTFT: %.3f" % (lv["ttft_ms"]["mean"] / ttft))
        if itl:
            # AIPerf's ITL is (e2e - TTFT) / (n - 1), i.e. our TPOT
            print("ratio ours (tpot mean) / aiperf ITL avg: %.3f" % (lv["tpot_ms"]["mean"] / itl))
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main() or 0)
