"""Depth + state-pool levers against depth alone, per judged concurrency (simulator figures).

On a hybrid model each draft token adds per-request state, so the running-request cap falls with
depth and a load above it queues. This bench tunes each judged level twice with the role's own
search (``mtp_tune_next`` / ``mtp_tune_pick_best``, climb): with depth alone (the collection before
the levers; a capped candidate measured with its queue, ``mtp_tune_fit_allow_capped``) and with
``mtp_tune_cap_levers``. Every launch starts on the simulator's memory model (sim/sglang_sim/memory.py,
which follows SGLang 0.5.23's kv_cache_configurator), its journal lines are the ones the simulated
rank prints, read back by the role's own parser (journal.pool_facts), and it is measured on the
simulator's throughput model at the running-request limit it really has (sim/sglang_sim/perf.py,
with the replay's step factor). Nodes:

- the operator's node (4 x RTX PRO 6000, Qwen3.5-122B-A10B, tp 4, 0.5.23's 5 slots per request) at
  the synthetic acceptance (0.99) and the realistic one (0.72);
- an H100-sized node serving the trimmed Qwen3.5-MoE hybrid of tests/fixtures/qwen3_5_moe_trimmed
  under no_buffer (3 slots per request, as SGLang 0.5.17 served it), acceptance 0.8: the shape of
  the real table (cap 18 at steps 1 falling to 7 at steps 8).

Per node and level it prints the best figure and setting of each search, the gain, the launches,
and the truth: a sweep of every depth x lever value (none; ratio 1, 2, 4, 8; replay; both).
Then what the levers cost: the winner's KV tokens against the same depth without levers.

    .venv/bin/python tests/bench/bench_cap_levers.py
"""

from __future__ import absolute_import, division, print_function

import json
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sim"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from sglang_sim import config, memory, perf, server_args  # noqa: E402  pylint: disable=wrong-import-position

from bench_mtp_search import KIND_CLASS, NEW  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.blackwell.sglang.plugins.module_utils import journal  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_cap  # noqa: E402  pylint: disable=wrong-import-position

STEPS = [1, 2, 3, 4, 5, 6, 8, 10]
LEVELS = [1, 4, 8, 16, 32]
H100_MIB = 81559
TRIMMED = ROOT / "tests/fixtures/qwen3_5_moe_trimmed/config.json"
NO_BUFFER = ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"]
LEVER_GRID = [{}, {"mamba_full_memory_ratio": 1.0}, {"mamba_full_memory_ratio": 2.0}, {"mamba_full_memory_ratio": 4.0},
              {"mamba_full_memory_ratio": 8.0}, {"enable_linear_replayssm_spec": True},
              {"enable_linear_replayssm_spec": True, "mamba_full_memory_ratio": 2.0}]
SEARCHES = [("depth alone", []), ("+ratio", ["mamba_full_memory_ratio"]),
            ("+ratio, replay", ["mamba_full_memory_ratio", "enable_linear_replayssm_spec"])]


def nodes():
    op_gpu = config.gpus({"profile": "rtx-pro-6000-x4", "gpu_memory_mib": None, "gpu_count": None})[0]
    op_model = config.lookup_model("Qwen/Qwen3.5-122B-A10B")[1]
    h_gpu = config.gpus({"profile": "h200-x1", "gpu_memory_mib": H100_MIB, "gpu_count": None})[0]
    h_model = config.model_from_hf_config(json.loads(TRIMMED.read_text()))
    op = {"gpu": op_gpu, "model": op_model, "path": "Qwen/Qwen3.5-122B-A10B", "tp": 4, "extra": [],
          "factor": perf.speed_factor("rtx-pro-6000-x4")}
    h100 = {"gpu": h_gpu, "model": h_model, "path": "/models/trimmed", "tp": 1, "extra": NO_BUFFER,
            "factor": perf.speed_factor("h200-x1", params=h_model["params"], tp_size=1)}
    return [("operator node, acceptance 0.99 (synthetic)", dict(op, alpha=0.99)),
            ("operator node, acceptance 0.72 (realistic)", dict(op, alpha=0.72)),
            ("H100, trimmed Qwen3.5-MoE, no_buffer (0.5.17's 3 slots), acceptance 0.8", dict(h100, alpha=0.8))]


def start(node, steps, overrides, cache):
    """(failure class or None, plan, journal lines) of one start on the simulator's memory model."""
    key = (steps, tuple(sorted(overrides.items())))
    if key in cache:
        return cache[key]
    argv = ["--model-path", node["path"], "--tp-size", str(node["tp"]), "--kv-cache-dtype", "bf16",
            "--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)] + node["extra"]
    for k, v in sorted(overrides.items()):
        if k == "enable_linear_replayssm_spec":
            argv += ["--enable-linear-replayssm-spec"] if v else []
        elif v is not None:
            argv += ["--" + k.replace("_", "-"), str(v)]
    args, _w = server_args.resolve(server_args.parse(argv), node["gpu"]["memory_mib"], model=node["model"])
    try:
        plan = memory.plan(node["gpu"], node["model"], args, capture_bs=server_args.capture_batch_sizes(
            args["cuda_graph_max_bs_decode"], True))
    except memory.OOMError as exc:
        cache[key] = (KIND_CLASS.get(exc.kind, "cuda_oom"), None, [], args)
        return cache[key]
    # the rank's own lines (sim/sglang_sim/_rank.py), as the journal holds them
    half = plan["kv_mib"] / 1024.0 / 2
    lines = list(plan.get("warnings", [])) + list(plan.get("mamba_log", [])) + [
        "KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB" % (plan["max_total_num_tokens"], half, half),
        "max_total_num_tokens=%d, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=%d, "
        "context_len=262144, available_gpu_mem=1.00 GB" % (plan["max_total_num_tokens"], plan["max_running_requests"])]
    cache[key] = (None, plan, lines, args)
    return cache[key]


def figure(node, steps, plan, args, level):
    """Aggregate tok/s at ``level`` (per-request tok/s at C=1) with the cap the start really has."""
    cap = plan["max_running_requests"]
    factor = node["factor"] * perf.replayssm_factor(node["model"], args)
    if level == 1:
        return perf.per_request_tps(1, steps, node["alpha"], factor, cap)
    return perf.aggregate_tps(level, steps, node["alpha"], factor, cap)


def tune(node, level, levers, cache):
    objective = "latency" if level == 1 else "throughput"
    cands = NEW.mtp_tune_candidates(STEPS)
    spec = {"strategy": "climb", "objective": objective, "level": level, "levels": [level], "seed": 3,
            "cap_levers": levers, "kv_need": 2048 * level}
    plan_fit = NEW.mtp_tune_fit_ladder(None, None, 4, level, 512, 48, allow_capped=not levers)
    atts = []
    for _i in range(60):
        nxt = NEW.mtp_tune_next(atts, cands, plan_fit, spec)
        if nxt is None:
            break
        cand, ov = nxt["candidate"], dict((k, v) for k, v in (nxt["overrides"] or {}).items() if v is not None)
        cls, plan, lines, args = start(node, cand["steps"], ov, cache)
        att = {"key": cand["key"], "candidate": cand, "overrides": ov, "fit_rung": nxt["fit_rung"],
               "reason": nxt["reason"], "pool": journal.pool_facts(lines) if lines else {}}
        if cls:
            att.update(status="failed", failure_class=cls, running_cap=None)
        else:
            cap = plan["max_running_requests"]
            att["running_cap"] = cap
            if cap < level and levers:
                att.update(status="failed", failure_class="capped")
            else:
                v = figure(node, cand["steps"], plan, args, level)
                acc = perf.expected_accept_length(cand["steps"], node["alpha"])
                att.update(status="ok", metrics={str(level): {
                    "output_throughput": v, "decode_tps_per_request": {"mean": v, "p50": v}, "accept_length": acc,
                    "failed": 0, "completed": 4 * level}})
        atts.append(att)
    best = NEW.mtp_tune_pick_best(atts, spec)
    win = best["winner"]
    if win is None:
        return None, atts
    row = next(a for a in reversed(atts) if a["key"] == win["key"] and a["status"] == "ok")
    return row, atts


def truth(node, level, cache):
    best = None
    for steps in STEPS:
        for ov in LEVER_GRID:
            cls, plan, _lines, args = start(node, steps, ov, cache)
            if cls or (ov and plan["max_total_num_tokens"] < 2048 * level):
                continue
            v = figure(node, steps, plan, args, level)
            if best is None or v > best[0]:
                best = (v, steps, ov)
    return best


def label(att):
    lev = mtp_cap.lever_words(mtp_cap.levers_of(att["overrides"])) if att else ""
    return "s%d%s" % (att["candidate"]["steps"], (" " + lev) if lev else "") if att else "-"


def value(att, level):
    return att["metrics"][str(level)]["output_throughput"] if att else float("nan")


def main():
    gains, sweep_launches, search_launches = [], 0, 0
    for name, node in nodes():
        cache = {}
        print("\n%s" % name)
        print("| C | depth alone | +ratio | gain | launches | +ratio, replay | gain | launches | truth (sweep of %d) |"
              % (len(STEPS) * len(LEVER_GRID)))
        print("|---|---|---|---|---|---|---|---|---|")
        for level in LEVELS:
            cells = []
            alone = None
            for _s, levers in SEARCHES:
                row, atts = tune(node, level, levers, cache)
                launches = sum(1 for a in atts if a["status"] in ("ok", "failed"))
                if not levers:
                    alone = row
                    cells.append("%.0f %s (%d launches)" % (value(row, level), label(row), launches))
                    continue
                gain = value(row, level) / value(alone, level) - 1
                gains.append((name, level, _s, gain))
                search_launches += launches
                sweep_launches += len(STEPS) * len(LEVER_GRID)
                cells += ["%.0f %s" % (value(row, level), label(row)), "%+.1f %%" % (100 * gain), str(launches)]
            t = truth(node, level, cache)
            cells.append("%.0f s%d %s" % (t[0], t[1], mtp_cap.lever_words(t[2])) if t else "-")
            print("| %d | %s |" % (level, " | ".join(cells)))
        # what the levers cost: KV tokens of the judged-level winner against its depth without levers
        print("cost at C=32 (+ratio's winner): ", end="")
        row, _a = tune(node, 32, ["mamba_full_memory_ratio"], cache)
        if row:
            _c, lifted, _l, _x = start(node, row["candidate"]["steps"], row["overrides"], cache)
            _c, plain, _l, _x = start(node, row["candidate"]["steps"], {}, cache)
            print("KV tokens %d -> %d (%.0f %%), state pool %.1f -> %.1f GiB, cap %d -> %d"
                  % (plain["max_total_num_tokens"], lifted["max_total_num_tokens"],
                     100.0 * lifted["max_total_num_tokens"] / plain["max_total_num_tokens"],
                     plain["mamba_mib"] / 1024, lifted["mamba_mib"] / 1024, plain["max_running_requests"],
                     lifted["max_running_requests"]))
        else:
            print("-")
    worst = min(g for _n, _l, _s, g in gains)
    ahead = [(n, lv, s, g) for n, lv, s, g in gains if g > 0.005]
    print("\n-- depth+levers at least matches depth alone at every level: %s (worst %+.2f %%)"
          % ("yes" if worst > -0.005 else "NO", 100 * worst))
    print("-- ahead where the cap binds: %d of %d (node, level, search) cells, median gain there %+.1f %%"
          % (len(ahead), len(gains), 100 * statistics.median([g for _n, _l, _s, g in ahead]) if ahead else 0))
    print("-- launches: %d for the lever searches against %d for sweeps of depth x levers (%.0f %%)"
          % (search_launches, sweep_launches, 100.0 * search_launches / sweep_launches))
    print("   start time: the simulator's start does not depend on the levers (a real start's does not"
          " either beyond allocation); not modelled here.")


if __name__ == "__main__":
    main()
