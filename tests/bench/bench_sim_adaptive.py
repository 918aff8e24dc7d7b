"""SGLang 0.5.23's adaptive speculation against the best static depth, per concurrency (simulator
figures).

On the operator's node (4 x RTX PRO 6000, Qwen3.5-122B-A10B, tp 4, bf16 KV) at both acceptance
regimes, for each level C it prints the aggregate decode tok/s (per-request at C=1) of:

- the best static ``--speculative-num-steps`` (1..8) at that level, with the running-request cap
  its own start has (sim/sglang_sim/memory.py);
- an adaptive server with SGLang's default config (``--speculative-adaptive``, no config file:
  candidates 0, 1, 3, 5, 7), at the cap its start has, which is the cap of its deepest candidate
  (the state pool is sized for max + 1 draft tokens), run through the release's slot dynamics
  (sim/sglang_sim/adaptive.py) for 2000 decode steps per level with seeded acceptance draws
  (perf.adaptive_run; the warm-up is included). The median of 5 seeds is printed, with the step
  it spends most decode steps at.

    .venv/bin/python tests/bench/bench_sim_adaptive.py
"""

from __future__ import absolute_import, division, print_function

import pathlib
import random
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sim"))

from sglang_sim import adaptive, config, memory, perf, server_args  # noqa: E402  pylint: disable=wrong-import-position

MODEL = "Qwen/Qwen3.5-122B-A10B"
LEVELS = [1, 4, 8, 16, 32]
STATIC_STEPS = [1, 2, 3, 4, 5, 6, 7, 8]
SEEDS = 5


def start(argv):
    gpu = config.gpus({"profile": "rtx-pro-6000-x4", "gpu_memory_mib": None, "gpu_count": None})[0]
    model = config.lookup_model(MODEL)[1]
    base = ["--model-path", MODEL, "--tp-size", "4", "--kv-cache-dtype", "bf16", "--speculative-algorithm", "NEXTN"]
    args, _w = server_args.resolve(server_args.parse(base + argv), gpu["memory_mib"], model=model)
    plan = memory.plan(gpu, model, args, capture_bs=server_args.capture_batch_sizes(args["cuda_graph_max_bs_decode"], True))
    return args, plan


def static_figure(level, steps, alpha, factor, cap):
    if level == 1:
        return perf.per_request_tps(1, steps, alpha, factor, cap)
    return perf.aggregate_tps(level, steps, alpha, factor, cap)


def main():
    factor = perf.speed_factor("rtx-pro-6000-x4")
    caps = {}
    for steps in STATIC_STEPS:
        _a, plan = start(["--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
                          "--speculative-num-draft-tokens", str(steps + 1)])
        caps[steps] = plan["max_running_requests"]
    args, plan = start(["--speculative-adaptive"])
    cap = plan["max_running_requests"]
    print("operator node (rtx-pro-6000-x4, %s, tp 4); SGLang 0.5.23 default adaptive config, candidates %s, start steps %d"
          % (MODEL, args["_adaptive_candidate_steps"], args["speculative_num_steps"]))
    print("running-request cap: adaptive %d (= static steps %d: %d); static %s"
          % (cap, max(args["_adaptive_candidate_steps"]), caps[max(args["_adaptive_candidate_steps"])],
             ", ".join("%d:%d" % kv for kv in sorted(caps.items()))))
    print("graph memory per rank: adaptive %.0f MiB (%d states) vs static steps 3 %.0f MiB"
          % (plan["graph_mib"], 1 + len(plan["adaptive_states"]), start(["--speculative-num-steps", "3"])[1]["graph_mib"]))
    for alpha in (perf.ALPHA_SYNTHETIC, perf.ALPHA_REALISTIC):
        print()
        print("acceptance %.2f  (tok/s aggregate; per request at C=1)" % alpha)
        print("%4s  %-22s  %-30s  %s" % ("C", "best static (steps)", "adaptive default (step mostly)", "adaptive / best"))
        for level in LEVELS:
            best = max(STATIC_STEPS, key=lambda k, lv=level: static_figure(lv, k, alpha, factor, caps[k]))
            best_v = static_figure(level, best, alpha, factor, caps[best])
            runs = []
            for seed in range(SEEDS):
                policy = adaptive.AdaptiveParams(args["speculative_num_steps"])
                out = perf.adaptive_run(level, policy, alpha, factor, cap, rng=random.Random(seed))
                runs.append(out)
            tps = statistics.median(r["tps"] for r in runs)
            spent = {}
            for run in runs:
                for step, count in run["steps"].items():
                    spent[step] = spent.get(step, 0) + count
            mostly = max(spent.items(), key=lambda kv: kv[1])[0]
            print("%4d  %8.0f (%d)%11s  %8.0f (%d)%19s  %.3f" % (level, best_v, best, "", tps, mostly, "", tps / best_v))


if __name__ == "__main__":
    main()
