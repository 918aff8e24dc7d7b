"""The collection's benchmark beside SGLang's own, on one live server, in one call.

For each endpoint (/generate, /v1/chat/completions) and concurrency level, the collection's
client (``plugins/module_utils/sglang_runner.run_benchmark``, the code the ``sglang_bench``
module runs) and the release's ``python -m sglang.benchmark.serving`` send the same workload
(input and output length, number of prompts, temperature 0, EOS ignored) to the same server,
one after the other, collection first, then SGLang's, then the collection again: the two
collection runs bracket SGLang's, so their spread says how much of a difference is the server
drifting rather than the clients disagreeing.

With ``--same-prompts`` both tools send the same text prompts: a JSONL written once (text decoded
from seeded random token ids, re-encoded to check its length) that the collection reads as its
dataset and bench_serving as its ``custom`` dataset (conversations). Without it each tool draws
its own random prompts, and on a random-weight model the output, the accept length and the work
per token follow the prompt: the first real comparison differed by up to 11 % at C=1 that way.

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


def n_prompts(level, args):
    return args.prompts_per_level * level if level > 1 else args.prompts_c1


def write_same_prompts(args, count):
    """``count`` text prompts of about --input-len tokens: ours.jsonl ({"text"}) for the
    collection, and the texts themselves, from which each level writes bench_serving's file."""
    import random  # pylint: disable=import-outside-toplevel
    from transformers import AutoTokenizer  # pylint: disable=import-outside-toplevel
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    rng = random.Random(args.seed)
    texts = []
    while len(texts) < count:
        ids = [rng.randint(1000, min(30000, tok.vocab_size - 1)) for dummy in range(args.input_len)]
        text = tok.decode(ids)
        # trim to the asked length once re-encoded: both tools tokenize this same text
        enc = tok.encode(text, add_special_tokens=False)[:args.input_len]
        texts.append(tok.decode(enc))
    ours_path = os.path.join(args.out, "prompts_ours.jsonl")
    with open(ours_path, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    return ours_path, texts


def theirs_prompts(args, n, out_dir):
    """bench_serving's custom dataset for one level: exactly the ``n`` prompts the collection
    sends at that level. It shuffles what it reads and keeps ``--num-prompts`` of it, so a longer
    file would give it a different set of prompts than ours (same set, its own order)."""
    path = os.path.join(out_dir, "prompts_theirs_%d.jsonl" % n)
    with open(path, "w") as f:
        for t in args.same_prompts[1][:n]:
            f.write(json.dumps({"conversations": [{"role": "user", "content": t},
                                                  {"role": "assistant", "content": "ok ok"}]}) + "\n")
    return path


def drop_chunk_usage(wl):
    """``--no-chunk-usage``: the collection's chat and completions requests without
    ``continuous_usage_stats`` (only the final usage). An experiment, not a mode of the client: it
    counts tokens per chunk from that field, so without it the accept length and per-chunk figures
    are rougher; what it answers is whether a usage object per chunk costs the server time.
    wl is sglang_workload, where every request body of the client is built."""
    build = wl.build_payload

    def without(*a, **k):
        body = json.loads(build(*a, **k))
        if "stream_options" in body:
            body["stream_options"] = {"include_usage": True}
        return json.dumps(body, separators=(",", ":")).encode()
    wl.build_payload = without


def ours(url, endpoint, level, args):
    from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_runner as runner
    from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_workload as wl
    if args.no_chunk_usage and wl.build_payload.__name__ != "without":
        drop_chunk_usage(wl)
    cfg = {"url": url, "endpoint": endpoint, "concurrency": [level],
           "num_prompts": n_prompts(level, args),
           "input_len": args.input_len, "output_len": args.output_len, "temperature": 0.0,
           "ignore_eos": True, "dataset": "random", "seed": args.seed, "timeout": 300.0,
           "model": args.model}
    if args.same_prompts:
        with open(args.same_prompts[0]) as f:
            cfg["prompts"] = wl.load_jsonl(f.read().splitlines())[:cfg["num_prompts"]]
        cfg["prompt_format"] = "text"
    t0 = time.time()
    res = runner.run_benchmark(cfg)
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
    # one file per round (bench_serving appends to its output file), none overwritten
    stem = "bench_serving_%s_c%d" % (endpoint, level)
    rnd = 1 + sum(1 for f in os.listdir(out_dir) if f.startswith(stem) and f.endswith(".jsonl"))
    stem += "_r%d" % rnd
    out_file = os.path.join(out_dir, stem + ".jsonl")
    n = n_prompts(level, args)
    if args.same_prompts:
        data = ["--dataset-name", "custom", "--dataset-path", theirs_prompts(args, n, out_dir),
                "--sharegpt-output-len", str(args.output_len)]
    else:
        data = ["--dataset-name", "random-ids", "--random-input-len", str(args.input_len),
                "--random-output-len", str(args.output_len), "--random-range-ratio", "1"]
    cmd = [sys.executable, "-m", "sglang.benchmark.serving",
           "--backend", "sglang" if endpoint == "generate" else "sglang-oai-chat",
           "--host", host, "--port", port]
    cmd += data
    cmd += ["--num-prompts", str(n), "--max-concurrency", str(level),
            "--tokenizer", args.tokenizer, "--model", args.model or args.tokenizer,
            "--seed", str(args.seed), "--output-file", out_file, "--disable-tqdm",
            "--temperature", "0", "--warmup-requests", str(level)]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    wall = round(time.time() - t0, 2)
    with open(os.path.join(out_dir, stem + ".txt"), "w") as f:
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
    ap.add_argument("--same-prompts", action="store_true",
                    help="both tools send one set of text prompts (see the module's doc)")
    ap.add_argument("--no-chunk-usage", action="store_true",
                    help="the collection's requests without stream_options.continuous_usage_stats (experiment)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate the tools this many times per level (collection first and last)")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    import server  # pylint: disable=import-outside-toplevel
    server.import_collection()
    os.makedirs(args.out, exist_ok=True)
    if args.same_prompts:
        most = max(n_prompts(int(x), args) for x in args.levels.split(","))
        args.same_prompts = write_same_prompts(args, most)
    rows = []
    for ep in args.endpoints.split(","):
        for level in [int(x) for x in args.levels.split(",")]:
            # collection, then (bench_serving, collection) x rounds: the collection brackets
            # every bench_serving run, so the server's drift shows as the collection's spread
            runs, theirs_runs = [ours(args.url, ep, level, args)], []
            for dummy in range(max(1, args.rounds)):
                theirs_runs.append(theirs(args.url, ep, level, args, args.out))
                runs.append(ours(args.url, ep, level, args))
            mine, b = median_run(runs), median_run(theirs_runs)
            row = {"endpoint": ep, "concurrency": level, "collection": runs, "bench_serving": b,
                   "bench_serving_runs": theirs_runs if len(theirs_runs) > 1 else None,
                   "same_prompts": bool(args.same_prompts)}
            row["diff_pct"] = {k: rel(mine.get(k), b.get(k)) for k in
                               ("output_throughput", "tpot_ms_mean", "itl_ms_p50", "ttft_ms_mean")}
            row["diff_pct"]["output_throughput_whole"] = rel(mine.get("output_throughput_whole"),
                                                             b.get("output_throughput"))
            tps = [r["output_throughput"] for r in runs if r.get("output_throughput") is not None]
            row["collection_spread_pct"] = (round((max(tps) - min(tps)) / min(tps) * 100.0, 2)
                                            if len(tps) > 1 and min(tps) > 0 else None)
            rows.append(row)
            print("%-9s C=%-3d tok/s ours %s (median of %d, spread %s%%) theirs %s (%s%%)  TPOT ours %s "
                  "theirs %s (%s%%)  accept ours %s theirs %s" % (
                      ep, level, _r(mine.get("output_throughput")), len(runs), row["collection_spread_pct"],
                      _r(b.get("output_throughput")), row["diff_pct"]["output_throughput"],
                      _r(mine.get("tpot_ms_mean")), _r(b.get("tpot_ms_mean")), row["diff_pct"]["tpot_ms_mean"],
                      _r(mine.get("accept_length")), _r(b.get("accept_length"))), flush=True)
            if b.get("error"):
                print("  bench_serving failed:", b["error"][-600:], flush=True)
            # after every level: a call cut short by its time limit keeps what it measured
            save(rows, args)


def save(rows, args):
    label = (args.label or "") + ("_nochunkusage" if args.no_chunk_usage else "")
    path = os.path.join(args.out, "bench_compare%s.json" % (("_" + label) if label else ""))
    with open(path + ".part", "w") as f:
        saved = dict(vars(args), same_prompts=args.same_prompts[0] if args.same_prompts else False)
        json.dump({"rows": rows, "args": saved}, f, indent=1, default=str)
    os.replace(path + ".part", path)


def spread_pct(values):
    """(max - min) / min of the figures, in %, or None with fewer than two."""
    vals = [v for v in values if v is not None]
    if len(vals) < 2 or min(vals) <= 0:
        return None
    return (max(vals) - min(vals)) / min(vals) * 100.0


def judge(row, figure="output_throughput", tolerance=2.0):
    """The target on one level, stated against what the server allows.

    ``drift`` is the larger spread of either tool's own repeated runs on the same prompts (the
    collection's bracket every bench_serving run): how far the server moved between runs. Where
    it is within ``tolerance`` the level is judged and the two medians must agree within it; where
    the server moved more, no 2 % difference can be seen either way, and the medians must only
    agree within that drift (a client disagreeing by more than the server moves is wrong whatever
    the server did). Returns ``{"judged", "ok", "diff_pct", "drift_pct", "bound_pct"}``.
    """
    ours = [r.get(figure) for r in row.get("collection") or []]
    theirs = [r.get(figure) for r in (row.get("bench_serving_runs") or [row.get("bench_serving") or {}])]
    mine = median_run([dict(r, output_throughput=r.get(figure)) for r in row.get("collection") or []])
    b = median_run([dict(r, output_throughput=r.get(figure)) for r in
                    (row.get("bench_serving_runs") or [row.get("bench_serving") or {}])])
    diff = rel(mine.get(figure), b.get(figure))
    drift = max([x for x in (spread_pct(ours), spread_pct(theirs)) if x is not None] or [0.0])
    judged = drift <= tolerance
    bound = tolerance if judged else drift
    return {"judged": judged, "ok": diff is not None and abs(diff) <= bound, "diff_pct": diff,
            "drift_pct": round(drift, 2), "bound_pct": round(bound, 2)}


def median_run(runs):
    """The run whose output tok/s is the median of ``runs`` (the lower middle for an even count)."""
    ok = [r for r in runs if r.get("output_throughput") is not None]
    if not ok:
        return runs[0]
    ok.sort(key=lambda r: r["output_throughput"])
    return ok[(len(ok) - 1) // 2]


def _r(x):
    return None if x is None else round(x, 3)


if __name__ == "__main__":
    main()
