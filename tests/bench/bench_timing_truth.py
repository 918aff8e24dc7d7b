"""sglang_bench's timing figures beside the truth, on every endpoint.

The server is tests/fixtures/openai_server/openai_server.py (not SGLang, not the simulator) in
its own process, told its TTFT and inter-token latency (ITL); it streams one token per event
on an absolute schedule. The module's client (plugins/module_utils/sglang_runner.py) measures
it at each concurrency on /generate (SGLang's native shape, which this server also serves),
/v1/completions and /v1/chat/completions. Printed per endpoint and C: the module's TTFT, ITL,
per-request decode tok/s and aggregate output tok/s beside

    TTFT truth      = ttft                          (from the request body read to the first token)
    ITL truth       = itl
    decode truth    = 1 / itl                        ((n - 1) tokens in (n - 1) * itl)
    aggregate truth = C * n / (ttft + (n - 1) * itl) (closed loop, no gap between requests)

On a loaded machine the server's timers fire late, so it also reports what it actually served
(GET /stats: per request, first token written - body read, and the mean gap between its token
writes, on the same monotonic clock); the table gives the module's figure beside both, with the
difference to the served truth. "aggregate" reads below the truth by the per-request overhead
of client and server (the gap between one request's end and the next one's first byte), TTFT
above it by the loopback exchange and the client's parsing and wake-up.

    .venv/bin/python tests/bench/bench_timing_truth.py                  # C = 1 and 8
    .venv/bin/python tests/bench/bench_timing_truth.py --ttft 0.1 --itl 0.02 --concurrency 1 8 32

Only the standard library is needed (the collection is made importable from this checkout),
so it runs on a bare Python >= 3.9. The server runs in its own process group, ended at exit.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "fixtures" / "openai_server" / "openai_server.py"


def _import_client():
    base = Path(tempfile.mkdtemp(prefix="bench-truth-"))
    link = base / "ansible_collections" / "blackwell" / "sglang"
    link.parent.mkdir(parents=True)
    link.symlink_to(ROOT, target_is_directory=True)
    sys.path.insert(0, str(base))
    from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_runner
    return sglang_runner


def _taskset(core):
    return ["taskset", "-c", str(core)] if core is not None else []


def start_server(args):
    cmd = _taskset(args.server_core) + [sys.executable, str(SERVER), "--port", "0", "--ttft",
                                        str(args.ttft), "--itl", str(args.itl), "--generate"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, start_new_session=True, text=True)
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise SystemExit("the server did not start: %r" % line)
    return proc, "http://127.0.0.1:%d" % int(line.split()[1])


def stats(url, method="GET"):
    req = urllib.request.Request(url + "/stats", method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())["requests"]


def pct(ours, truth):
    if ours is None or not truth:
        return "n/a"
    return "%+.1f %%" % (100.0 * (ours - truth) / truth)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--ttft", type=float, default=0.05, help="server TTFT in s (default 0.05)")
    ap.add_argument("--itl", type=float, default=0.01, help="server ITL in s (default 0.01)")
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=6,
                    help="requests per level = rounds x C (at least 10)")
    ap.add_argument("--endpoints", nargs="+", default=["generate", "completions", "chat"])
    ap.add_argument("--server-core", type=int, help="pin the server to this core (taskset)")
    ap.add_argument("--client-core", type=int, help="pin this client to this core")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    if args.client_core is not None:
        os.sched_setaffinity(0, {args.client_core})
    runner = _import_client()
    proc, url = start_server(args)
    rows = []
    n = args.output_len
    try:
        for ep, c in [(ep, c) for ep in args.endpoints for c in args.concurrency]:
            stats(url, "DELETE")
            res = runner.run_benchmark({
                "url": url, "endpoint": ep, "concurrency": [c],
                "num_prompts": max(10, args.rounds * c), "input_len": args.input_len,
                "output_len": n, "timeout": 120.0, "seed": 7, "fail_on_empty_level": True})
            # the measured requests (warmup asks 16 tokens at most, calibration probes 1)
            served = [e for e in stats(url) if e["status"] == 200 and e["max_tokens"] == n]
            s_ttft = sum(e["served_ttft"] for e in served) / len(served)
            s_itl = sum(e["served_itl"] for e in served) / len(served)
            for lv in res["levels"]:
                if lv["failed"]:
                    print("warning: %s C=%d had %d failures: %s"
                          % (ep, c, lv["failed"], lv["errors"]))
                truth = {"ttft_ms": s_ttft * 1000.0, "itl_ms": s_itl * 1000.0,
                         "decode_tps": 1.0 / s_itl,
                         "aggregate_tps": c * n / (s_ttft + (n - 1) * s_itl)}
                nominal = {"ttft_ms": args.ttft * 1000.0, "itl_ms": args.itl * 1000.0,
                           "decode_tps": 1.0 / args.itl,
                           "aggregate_tps": c * n / (args.ttft + (n - 1) * args.itl)}
                ours = {"ttft_ms": lv["ttft_ms"]["mean"], "itl_ms": lv["itl_ms"]["mean"],
                        "decode_tps": lv["decode_tps_per_request"]["mean"],
                        "aggregate_tps": lv["output_throughput"]}
                rows.append({"endpoint": ep, "concurrency": c, "ours": ours, "truth": truth,
                             "set": nominal, "served_requests": len(served),
                             "ttft_p50_ms": lv["ttft_ms"]["p50"], "itl_p50_ms": lv["itl_ms"]["p50"],
                             "completed": lv["completed"], "failed": lv["failed"],
                             "prompt_format": res["workload"].get("prompt_format"),
                             "prompt_tokens_per_request": lv["prompt_tokens_per_request"],
                             "client_limited": lv["client_limited"],
                             "client_cpu_fraction": lv["client_cpu_fraction"]})
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    print("server: TTFT %.1f ms, ITL %.1f ms; in/out %d/%d tokens; %s"
          % (args.ttft * 1000, args.itl * 1000, args.input_len, n,
             time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())))
    print("Each cell: module / as served (module vs served) [as set].")
    print("| endpoint | C | req | prompt | TTFT ms | ITL ms | decode tok/s per request | "
          "aggregate tok/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        o, t, z = r["ours"], r["truth"], r["set"]
        cells = []
        for key, fmt in (("ttft_ms", "%.2f"), ("itl_ms", "%.3f"), ("decode_tps", "%.2f"),
                         ("aggregate_tps", "%.1f")):
            cells.append("%s / %s (%s) [%s]" % (fmt % o[key] if o[key] is not None else "n/a",
                                                fmt % t[key], pct(o[key], t[key]), fmt % z[key]))
        print("| %s | %d | %d | %s %.0f tok | %s |" % (
            r["endpoint"], r["concurrency"], r["completed"], r["prompt_format"],
            r["prompt_tokens_per_request"] or 0, " | ".join(cells)))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
