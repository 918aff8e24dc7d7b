"""Decode speed of one started server at several concurrency levels, with the collection's client.

One run of ``sglang_runner.run_benchmark`` (the ``sglang_bench`` module's code) per level on
/generate, random token prompts, EOS ignored, every request of a level started together so the
batch holds C requests (or the server's running-request cap) from start to end. The JSON keeps
each level's figures: output tok/s, TPOT, ITL, accept length (the run's own, from each request's
``meta_info``) and the derived verify-round time ``tpot x accept_length``. Written after every
level, so a call cut short keeps what it measured.

Usage: python3 hybrid_bench.py --url http://127.0.0.1:30000 --levels 1,4,16,32 --out FILE
       [--label L] [--prompts 4,8,16,32] [--input-len 256] [--output-len 96]
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KEEP = ("concurrency", "completed", "failed", "duration_s", "output_throughput", "tpot_ms", "itl_ms",
        "ttft_ms", "accept_length", "accept_length_source", "request_accept_length", "mean_concurrency",
        "total_output_tokens", "decode_tps_per_request", "client_limited", "client_limit_reason",
        "steady_state", "server_accept_length_before", "server_accept_length_after", "level_warnings")


def round_ms(level):
    """Verify round time from the client's figures: a request emits ``accept_length`` tokens per
    round, so a round lasts TPOT x accept length (TPOT alone without speculation)."""
    tpot = (level.get("tpot_ms") or {}).get("mean")
    if tpot is None:
        return None
    return tpot * (level.get("accept_length") or 1.0)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:30000")
    ap.add_argument("--levels", default="1,4,16,32")
    ap.add_argument("--prompts", default="", help="requests per level, one per level (default: C, 4 at C=1)")
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=96)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    sys.path.insert(0, HERE)
    import server  # pylint: disable=import-outside-toplevel
    server.import_collection()
    from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_runner as runner  # pylint: disable=import-outside-toplevel
    levels = [int(x) for x in args.levels.split(",")]
    counts = [int(x) for x in args.prompts.split(",")] if args.prompts else [max(c, 4) for c in levels]
    rows = []
    for c, n in zip(levels, counts):
        cfg = {"url": args.url, "endpoint": "generate", "concurrency": [c], "num_prompts": n,
               "input_len": args.input_len, "output_len": args.output_len, "temperature": 0.0,
               "ignore_eos": True, "dataset": "random", "seed": args.seed, "timeout": 180.0,
               "fail_on_empty_level": False}
        t0 = time.time()
        try:
            res = runner.run_benchmark(cfg)
            lv = res["levels"][0]
            row = {k: lv.get(k) for k in KEEP}
        except Exception as exc:  # pylint: disable=broad-except
            row = {"concurrency": c, "error": "%s: %s" % (type(exc).__name__, exc)}
        row["requests"] = n
        row["wall_s"] = round(time.time() - t0, 2)
        row["round_ms"] = round_ms(row)
        rows.append(row)
        print("%s C=%-3d tok/s %s TPOT %s accept %s round %s ms (%s s)" % (
            args.label, c, _r(row.get("output_throughput")), _r((row.get("tpot_ms") or {}).get("mean")),
            _r(row.get("accept_length")), _r(row["round_ms"]), row["wall_s"]), flush=True)
        with open(args.out + ".part", "w") as f:
            json.dump({"label": args.label, "args": vars(args), "levels": rows}, f, indent=1, default=str)
        os.replace(args.out + ".part", args.out)


def _r(x):
    return None if x is None else round(x, 3)


if __name__ == "__main__":
    main()
