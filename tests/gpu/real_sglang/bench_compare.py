"""The collection's benchmark beside SGLang's own, on one live server, in one call.

For each endpoint (/generate, /v1/chat/completions) and concurrency level, the collection's
client (``plugins/module_utils/sglang_client.run_benchmark``, the code the ``sglang_bench``
module runs) and the release's ``python -m sglang.benchmark.serving`` send the same workload
(input and output length, number of prompts, temperature 0, EOS ignored) to the same server,
one after the other, collection first, then SGLang's, then the collection again: the two
collection runs bracket SGLang's, so their spread says how much of a difference is the server
drifting rather than the clients disagreeing.

Writes ``bench_compare.json`` (every figure of both tools) and prints a table.

Usage (on the GPU machine, server already up on --url):
  python3 bench_compare.py --url http://127.0.0.1:30000 --tokenizer /tmp/rs/models/target \
      --levels 1,8,32 --endpoints generate,chat --out $OUT
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def ours(url, endpoint, level, args):
    from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_client as sc
    cfg = {"url": url, "endpoint": endpoint, "concurrency": [level],
           "num_prompts": args.prompts_per_level * level if level > 1 else args.prompts_c1,
           "input_len": args.input_len, "output_len": args.output_len, "temperature": 0.0,
           "ignore_eos": True, "dataset": "random", "seed": args.seed, "timeout": 300.0,
           "model": args.model}
    t0 = time.time()
    res = sc.run_benchmark(cfg)
    lv = res["levels"][0]
    return {"tool": "collection", "wall_s": round(time.time() - t0, 2),
            "output_throughput": lv.get("output_throughput"),
            # bench_serving divides by the whole run; ours reports its steady-state window
            "output_throughput_whole": (lv["total_output_tokens"] / lv["duration_s"]
                                        if lv.get("duration_s") else None),
            "tpot_ms_mean": (lv.get("tpot_ms") or {}).get("mean"),
            "itl_ms_p50": (lv.get("itl_ms") or {}).get("p50"),
            "ttft_ms_mean": (lv.get("ttft_ms") or {}).get("mean"),
            "ttft_ms_p50": (lv.get("ttft_ms") or {}).get("p50"),
            "accept_length": lv.get("accept_length"),
            "completed": lv.get("completed"), "raw": lv, "workload": res.get("workload")}


def theirs(url, endpoint, level, args, out_dir):
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    out_file = os.path.join(out_dir, "bench_serving_%s_c%d.jsonl" % (endpoint, level))
    if os.path.exists(out_file):
        os.unlink(out_file)
    n = args.prompts_per_level * level if level > 1 else args.prompts_c1
    cmd = [sys.executable, "-m", "sglang.benchmark.serving",
           "--backend", "sglang" if endpoint == "generate" else "sglang-oai-chat",
           "--host", host, "--port", port, "--dataset-name", "random-ids",
           "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
           "--random-range-ratio", "1", "--num-prompts", str(n), "--max-concurrency", str(level),
           "--tokenizer", args.tokenizer, "--model", args.model or args.tokenizer,
           "--seed", str(args.seed), "--output-file", out_file, "--disable-tqdm",
           "--temperature", "0", "--warmup-requests", str(level)]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    wall = round(time.time() - t0, 2)
    with open(os.path.join(out_dir, "bench_serving_%s_c%d.txt" % (endpoint, level)), "w") as f:
        f.write(" ".join(cmd) + "\n\n" + proc.stdout + "\n" + proc.stderr)
    if proc.returncode or not os.path.exists(out_file):
        return {"tool": "bench_serving", "error": (proc.stderr or proc.stdout)[-2000:], "wall_s": wall}
    rec = json.loads(open(out_file).read().strip().splitlines()[-1])
    return {"tool": "bench_serving", "wall_s": wall,
            "output_throughput": rec.get("output_throughput"),
            "tpot_ms_mean": rec.get("mean_tpot_ms"), "itl_ms_p50": rec.get("median_itl_ms"),
            "ttft_ms_mean": rec.get("mean_ttft_ms"), "ttft_ms_p50": rec.get("median_ttft_ms"),
            "accept_length": rec.get("accept_length"), "completed": rec.get("completed"),
            "raw": rec}


def rel(a, b):
    if a is None or b in (None, 0):
        return None
    return round((a - b) / b * 100.0, 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:30000")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--model", default=None, help="model name for the OpenAI endpoints")
    ap.add_argument("--levels", default="1,8,32")
    ap.add_argument("--endpoints", default="generate,chat")
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--prompts-c1", type=int, default=16)
    ap.add_argument("--prompts-per-level", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    import server  # pylint: disable=import-outside-toplevel
    server.import_collection()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for ep in args.endpoints.split(","):
        for level in [int(x) for x in args.levels.split(",")]:
            a = ours(args.url, ep, level, args)
            b = theirs(args.url, ep, level, args, args.out)
            c = ours(args.url, ep, level, args)
            row = {"endpoint": ep, "concurrency": level, "collection": [a, c], "bench_serving": b}

            def mean(k, runs=(a, c)):
                vals = [r.get(k) for r in runs]
                return None if None in vals else sum(vals) / float(len(vals))
            row["diff_pct"] = {k: rel(mean(k), b.get(k)) for k in
                               ("output_throughput", "tpot_ms_mean", "itl_ms_p50", "ttft_ms_mean")}
            row["diff_pct"]["output_throughput_whole"] = rel(mean("output_throughput_whole"),
                                                             b.get("output_throughput"))
            row["collection_spread_pct"] = {k: rel(c.get(k), a.get(k)) for k in
                                            ("output_throughput", "tpot_ms_mean")}
            rows.append(row)
            print("%-9s C=%-3d tok/s ours %s/%s theirs %s (%s%%)  TPOT ours %s/%s theirs %s (%s%%)  "
                  "accept ours %s theirs %s" % (
                      ep, level, _r(a.get("output_throughput")), _r(c.get("output_throughput")),
                      _r(b.get("output_throughput")), row["diff_pct"]["output_throughput"],
                      _r(a.get("tpot_ms_mean")), _r(c.get("tpot_ms_mean")), _r(b.get("tpot_ms_mean")),
                      row["diff_pct"]["tpot_ms_mean"], _r(a.get("accept_length")),
                      _r(b.get("accept_length"))), flush=True)
            if b.get("error"):
                print("  bench_serving failed:", b["error"][-600:], flush=True)
    path = os.path.join(args.out, "bench_compare%s.json" % (("_" + args.label) if args.label else ""))
    with open(path + ".part", "w") as f:
        json.dump({"rows": rows, "args": vars(args)}, f, indent=1, default=str)
    os.replace(path + ".part", path)


def _r(x):
    return None if x is None else round(x, 3)


if __name__ == "__main__":
    main()
