"""A tuned per-load schedule (``mtp_tune_schedule``) against static depths, per concurrency
(simulator figures).

Each landscape is tuned by the role's own functions (``mtp_tune_next`` with ``schedule: true``, which
runs mtp_schedule.schedule_next, and ``mtp_tune_winner``, which runs schedule_winner), once per seed,
every launch measured at every level with independent noise (sim perf.noisy, 1.2 % per figure):

- a static launch on the simulator's throughput model (sim/sglang_sim/perf.py) at the running-request
  cap its start has on the memory model (sim/sglang_sim/memory.py), its journal lines read back by
  the role's parser (journal.pool_facts) so the cap levers work as on a node;
- a schedule launch (the tuned one and SGLang's default config) through the simulator's copy of the
  release's adaptive dynamics (perf.adaptive_run: the routed slot's step in force per batch, its EMA
  moving it among the slot's candidates), at the cap of the schedule's own start (the pools sized for
  the deepest candidate, adaptive.max_draft_tokens), for DECODE_STEPS decode steps per level.

Landscapes: the operator's node (4 x RTX PRO 6000, Qwen3.5-122B-A10B, tp 4) at the synthetic
acceptance (0.99) and the realistic one (0.72); the H100 trim of bench_cap_levers (no_buffer,
acceptance 0.8); two made-up round-time models where the best depth falls with load (no memory
model: nothing caps them).

Per landscape and level it prints (medians over SEEDS seeds; figures without launch noise: the
static model, and the adaptive run with a fixed seed): the best static (a sweep of every depth x
ratio lever value that keeps the KV need), the tuned schedule, SGLang's default config, the best
single static (highest worst ratio to each level's best); whether the schedule is within the tie
band of each level's best static; its gain over the best single static at that static's weakest
level; the verdict; launches against a sweep; the cost (graph memory, runtime states, start time,
KV tokens, cap) of the schedule against the single static; and the neighbour-set variant (each slot's
candidates = its winner and the winner's neighbours), which checks the claim that one candidate per
slot is better at realistic acceptance.

    .venv/bin/python tests/bench/bench_schedule.py            # 5 landscapes x 5 seeds, 2.5 min on a shared 2-core machine
    .venv/bin/python tests/bench/bench_schedule.py --seeds 3
"""

from __future__ import absolute_import, division, print_function

import argparse
import collections
import json
import math
import os
import pathlib
import random
import statistics
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sim"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from sglang_sim import adaptive, memory, perf, server_args  # noqa: E402  pylint: disable=wrong-import-position

from bench_cap_levers import KIND_CLASS, nodes, start  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.blackwell.sglang.plugins.module_utils import journal  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.blackwell.sglang.plugins.plugin_utils import (  # noqa: E402  pylint: disable=wrong-import-position
    mtp_cap, mtp_schedule, spec_schedule)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import mtp_tune_next  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import (  # noqa: E402  pylint: disable=wrong-import-position
    mtp_tune_candidates, spec_from)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_winner import mtp_tune_winner  # noqa: E402  pylint: disable=wrong-import-position

LEVELS = [1, 4, 8, 16, 32]
STEPS = [1, 2, 3, 4, 5, 6, 7, 8]
NOISE = 0.015  # mtp_tune_noise's default: the band the verdict uses
BAND = math.sqrt(2.0) * NOISE
DECODE_STEPS = 1000
DRAWS = 16000
# The truth's lever values (bench_cap_levers' grid without the replay, which the searches here do not use)
RATIOS = [{}, {"mamba_full_memory_ratio": 1.0}, {"mamba_full_memory_ratio": 2.0}, {"mamba_full_memory_ratio": 4.0},
          {"mamba_full_memory_ratio": 8.0}]
# sim/sglang_sim/_rank.py Rank.run: a start's phases in units of the load time (config.py load_seconds
# 20 s): weights 0.05 + 0.65, the draft's 0.05, pools 0.05, the startup graphs 0.15, and 0.05 per
# further adaptive runtime state (AdaptiveController.init_states).
LOAD_S = 20.0
START_UNITS = 0.95
STATE_UNITS = 0.05


def _steep(batch, steps, factor):
    """Made-up round time (ms): each draft token costs more the more requests share the verify."""
    return (6 + 0.5 * steps + batch * (0.1 + 0.2 * (steps + 1) ** 1.5 / 3)) * factor


def _deep(batch, steps, factor):
    """Made-up round time (ms) at high acceptance: the verify grows with the square of its tokens."""
    return (10 + 0.4 * steps + batch * 0.03 * (steps + 1) ** 2) * factor


def landscapes():
    out = []
    for name, node in nodes():
        out.append({"name": name, "node": node, "alpha": node["alpha"], "factor": node["factor"], "step_ms": None,
                    "levers": ["mamba_full_memory_ratio"]})
    out.append({"name": "made-up 'steep': acceptance 0.85, best depth 5 -> 2 with load", "node": None, "alpha": 0.85,
                "factor": 1.0, "step_ms": _steep, "levers": []})
    out.append({"name": "made-up 'deep': acceptance 0.95, best depth 8 -> 2 with load", "node": None, "alpha": 0.95,
                "factor": 1.0, "step_ms": _deep, "levers": []})
    return out


# --------------------------------------------------------------------------- one landscape's server

class Server(object):
    """What a launch of a setting gives on one landscape: its start (cap, memory) and its figures."""

    def __init__(self, land, tmp):
        self.land = land
        self.tmp = tmp
        self.cache = {}

    def static_start(self, steps, overrides):
        """(failure class, plan, journal lines, args) of a static start; made-up: no memory model."""
        if self.land["node"] is None:
            return None, None, [], {}
        return start(self.land["node"], steps, overrides, self.cache)

    def schedule_start(self, conf, steps, overrides):
        """The same for an adaptive start (``conf`` None: SGLang's default config)."""
        node = self.land["node"]
        if node is None:
            return None, None, [], {}
        key = ("adaptive", json.dumps(conf, sort_keys=True), steps, tuple(sorted(overrides.items())))
        if key in self.cache:
            return self.cache[key]
        argv = ["--model-path", node["path"], "--tp-size", str(node["tp"]), "--kv-cache-dtype", "bf16",
                "--speculative-algorithm", "NEXTN", "--speculative-adaptive", "--speculative-num-steps", str(steps)]
        if conf is not None:
            argv += ["--speculative-adaptive-config", self.config_file(conf)]
        argv += node["extra"]
        for k, v in sorted(overrides.items()):
            argv += ["--" + k.replace("_", "-"), str(v)]
        args, _w = server_args.resolve(server_args.parse(argv), node["gpu"]["memory_mib"], model=node["model"])
        try:
            plan = memory.plan(node["gpu"], node["model"], args, capture_bs=server_args.capture_batch_sizes(
                args["cuda_graph_max_bs_decode"], True))
        except memory.OOMError as exc:
            self.cache[key] = (KIND_CLASS.get(exc.kind, "cuda_oom"), None, [], args)
            return self.cache[key]
        half = plan["kv_mib"] / 1024.0 / 2
        lines = list(plan.get("warnings", [])) + list(plan.get("mamba_log", [])) + [
            "KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB" % (plan["max_total_num_tokens"], half, half),
            "max_total_num_tokens=%d, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=%d, "
            "context_len=262144, available_gpu_mem=1.00 GB" % (plan["max_total_num_tokens"], plan["max_running_requests"])]
        self.cache[key] = (None, plan, lines, args)
        return self.cache[key]

    def config_file(self, conf):
        path = os.path.join(self.tmp, "adaptive-%s.json" % spec_schedule.digest(conf))
        if not os.path.exists(path):
            with open(path, "w") as fh:
                fh.write(spec_schedule.text(conf))
        return path

    def cap(self, plan):
        return 10 ** 6 if plan is None else plan["max_running_requests"]

    def static_figure(self, steps, plan, level):
        """Aggregate tok/s (per request at C=1) of a static depth, no launch noise."""
        land = self.land
        cap = self.cap(plan)
        if land["step_ms"] is None:
            if level == 1:
                return perf.per_request_tps(1, steps, land["alpha"], land["factor"], cap)
            return perf.aggregate_tps(level, steps, land["alpha"], land["factor"], cap)
        batch = min(level, cap)
        return batch * perf.expected_accept_length(steps, land["alpha"]) / land["step_ms"](batch, steps, land["factor"]) * 1000

    def schedule_figure(self, conf, steps, plan, level, seed):
        """A schedule's tok/s at a level through the release's slot dynamics (perf.adaptive_run)."""
        path = None if conf is None else self.config_file(conf)
        policy = adaptive.AdaptiveParams(steps, path, log_init=False)
        # as many accepted-draft draws at every level, so C=1 is as steady as C=32
        run = perf.adaptive_run(level, policy, self.land["alpha"], self.land["factor"], self.cap(plan),
                                decode_steps=max(DECODE_STEPS, DRAWS // level), rng=random.Random(seed),
                                step_ms=self.land["step_ms"])
        return run["tps"]

    def launch(self, nxt, rng):
        """The attempt record of one launch, every level measured, each figure with its own noise."""
        cand = nxt["candidate"]
        ov = dict((k, v) for k, v in (nxt["overrides"] or {}).items() if v is not None or k == mtp_schedule.CONFIG)
        kind = mtp_schedule.schedule_kind(nxt)
        levers = mtp_cap.levers_of(ov)
        if kind is None:
            cls, plan, lines, _args = self.static_start(cand["steps"], ov)
        else:
            cls, plan, lines, _args = self.schedule_start(ov.get(mtp_schedule.CONFIG), cand["steps"], levers)
        att = {"key": nxt.get("key") or cand["key"], "candidate": cand, "overrides": nxt["overrides"],
               "fit_rung": nxt.get("fit_rung"), "reason": nxt["reason"], "pool": journal.pool_facts(lines) if lines else {}}
        if cls:
            att.update(status="failed", failure_class=cls, running_cap=None)
            return att
        att["running_cap"] = None if plan is None else plan["max_running_requests"]
        metrics = {}
        for level in LEVELS:
            if kind is None:
                v = self.static_figure(cand["steps"], plan, level)
            else:
                v = self.schedule_figure(ov.get(mtp_schedule.CONFIG), cand["steps"], plan, level, rng.random())
            v = perf.noisy(rng, v)
            metrics[str(level)] = {"output_throughput": v, "decode_tps_per_request": {"mean": v / level},
                                   "accept_length": perf.expected_accept_length(cand["steps"], self.land["alpha"]),
                                   "failed": 0, "completed": 4 * level}
        att.update(status="ok", metrics=metrics)
        return att


# --------------------------------------------------------------------------- truth and one tune

def truth(server):
    """Per level the best static (depth x ratio value keeping the KV need), and the best single static."""
    table = {}
    for steps in STEPS:
        for ov in (RATIOS if server.land["levers"] else [{}]):
            cls, plan, _l, _a = server.static_start(steps, ov)
            if cls:
                continue
            figs = {}
            for level in LEVELS:
                if plan is not None and ov and plan["max_total_num_tokens"] < 2048 * level:
                    continue
                figs[level] = server.static_figure(steps, plan, level)
            table[(steps, tuple(sorted(ov.items())))] = figs
    # on equal figures (no cap binds) the setting without a lever, then the cheaper
    best = dict((lv, max(((f[lv], k) for k, f in table.items() if lv in f),
                         key=lambda fk: (round(fk[0], 6), -len(fk[1][1]), -fk[1][0]))) for lv in LEVELS)
    worst = dict((k, min(f.get(lv, 0.0) / best[lv][0] for lv in LEVELS)) for k, f in table.items())
    single = max(worst, key=lambda k: (round(worst[k], 6), -len(k[1]), -k[0]))
    return best, single, table[single], worst[single]


def spec(land, **kw):
    out = {"schedule": True, "objective": "throughput", "levels": LEVELS, "strategy": "climb", "seed": 3,
           "cap_levers": land["levers"], "kv_need": 2048 * LEVELS[-1] if land["levers"] else None, "noise": NOISE}
    out.update(kw)
    return out


def tune(server, seed):
    """One schedule run on ``server``: (attempts, winner)."""
    rng = random.Random(seed)
    cands = mtp_tune_candidates(STEPS)
    sp = spec(server.land)
    atts = []
    for _i in range(80):
        nxt = mtp_tune_next(atts, cands, None, sp)
        if nxt is None:
            break
        atts.append(server.launch(nxt, rng))
    return atts, mtp_tune_winner(atts, sp)


def per_level_searches(server, seed):
    """The launches of one search per level from scratch (each measuring every level), for comparison."""
    rng = random.Random(seed)
    cands = mtp_tune_candidates(STEPS)
    total = 0
    for level in LEVELS:
        atts = []
        sp = mtp_schedule.level_spec(spec_from(spec(server.land)), level)
        for _i in range(40):
            nxt = mtp_tune_next(atts, cands, None, sp)
            if nxt is None:
                break
            atts.append(server.launch(nxt, rng))
        total += len(atts)
    return total


def plan_cost(plan):
    if plan is None:
        return None
    states = len(plan.get("adaptive_states") or [])
    return {"graph_gib": plan["graph_mib"] / 1024.0, "states": 1 + states, "start_s": LOAD_S * (START_UNITS + STATE_UNITS * states),
            "kv": plan["max_total_num_tokens"], "cap": plan["max_running_requests"]}


def one_land(land, seeds, tmp):
    server = Server(land, tmp)
    best, single_key, single_figs, single_worst = truth(server)
    weakest = min(LEVELS, key=lambda lv: single_figs.get(lv, 0.0) / best[lv][0])
    per = collections.defaultdict(list)
    summary = collections.defaultdict(list)
    configs = collections.Counter()
    for seed in range(seeds):
        atts, win = tune(server, seed)
        tuned = next((a for a in atts if mtp_schedule.schedule_kind(a) == "tuned"), None)
        dflt = next((a for a in atts if mtp_schedule.schedule_kind(a) == "default"), None)
        statics = [a for a in atts if mtp_schedule.schedule_kind(a) is None]
        summary["launches"].append(len(atts))
        summary["static launches"].append(len(statics))
        summary["schedule wins"].append(1 if win["schedule"]["verdict"] == "schedule" else 0)
        if tuned is None:
            continue
        conf = tuned["overrides"][mtp_schedule.CONFIG]
        configs[spec_schedule.label(conf)] += 1
        levers = mtp_cap.levers_of(tuned["overrides"])
        _c, tplan, _l, _a = server.schedule_start(conf, tuned["candidate"]["steps"], levers)
        dlev = mtp_cap.levers_of(dflt["overrides"]) if dflt else {}
        _c, dplan, _l, _a = server.schedule_start(None, mtp_schedule.DEFAULT_STEPS, dlev)
        winners = [mtp_schedule.level_winners(atts, spec_from(spec(land)))[lv] for lv in LEVELS]
        nconf, nstart = mtp_schedule.derive_config(winners, LEVELS, neighbours=STEPS)
        _c, nplan, _l, _a = server.schedule_start(nconf, nstart, levers)
        for lv in LEVELS:
            s = server.schedule_figure(conf, tuned["candidate"]["steps"], tplan, lv, 1000 + seed)
            d = server.schedule_figure(None, mtp_schedule.DEFAULT_STEPS, dplan, lv, 1000 + seed)
            n = server.schedule_figure(nconf, nstart, nplan, lv, 1000 + seed)
            per[(lv, "schedule")].append(s)
            per[(lv, "default")].append(d)
            per[(lv, "neighbours")].append(n)
        summary["gain at weakest"].append(per[(weakest, "schedule")][-1] / single_figs[weakest] - 1)
        summary["within band everywhere"].append(
            1 if all(per[(lv, "schedule")][-1] >= best[lv][0] * (1 - BAND) for lv in LEVELS) else 0)
        summary["cost"].append((plan_cost(tplan), plan_cost(nplan)))
        summary["verdict"].append(win["decided_by"])
        if seed == 0:
            summary["separate searches"].append(per_level_searches(server, seed))
    return {"best": best, "single": (single_key, single_figs, single_worst, weakest), "per": per, "summary": summary,
            "configs": configs, "server": server}


def _lab(key):
    steps, levers = key
    lev = mtp_cap.lever_words(dict(levers))
    return "s%d%s" % (steps, " " + lev.replace("--mamba-full-memory-ratio ", "ratio ") if lev else "")


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def report(land, res, seeds):
    best, per, summ = res["best"], res["per"], res["summary"]
    single_key, single_figs, single_worst, weakest = res["single"]
    print("\n## %s" % land["name"])
    print("tuned schedules (of %d seeds): %s" % (seeds, "; ".join("%s x%d" % kv for kv in res["configs"].most_common())))
    print("| C | best static | tuned schedule | / best | in band | SGLang default | / best | best single static %s | / best "
          "| neighbour set | / schedule |" % _lab(single_key))
    print("|---:|---|---:|---:|:-:|---:|---:|---:|---:|---:|---:|")
    for lv in LEVELS:
        b, key = best[lv]
        s, d, n = _med(per[(lv, "schedule")]), _med(per[(lv, "default")]), _med(per[(lv, "neighbours")])
        sf = single_figs.get(lv, float("nan"))
        print("| %d | %.0f %s | %.0f | %.3f | %s | %.0f | %.3f | %.0f | %.3f | %.0f | %.3f |" % (
            lv, b, _lab(key), s, s / b, "yes" if s >= b * (1 - BAND) else "NO", d, d / b, sf, sf / b, n, n / s))
    print("- best single static %s: worst level C=%d at %.1f %% of its best static; the schedule's gain there: %+.1f %% "
          "(median)" % (_lab(single_key), weakest, 100 * single_worst, 100 * _med(summ["gain at weakest"])))
    print("- schedule within the tie band (%.1f %%) of every level's best static: %d of %d seeds; verdict schedule: %d of %d"
          % (100 * BAND, sum(summ["within band everywhere"]), len(summ["within band everywhere"]),
             sum(summ["schedule wins"]), seeds))
    print("- verdict (seed 0): %s" % (summ["verdict"][0] if summ["verdict"] else "-"))
    print("- launches: %.0f (median; %.0f static) against %d for a sweep of every depth measuring every level and %d for "
          "one search per level from scratch" % (_med(summ["launches"]), _med(summ["static launches"]), len(STEPS),
                                                 summ["separate searches"][0] if summ["separate searches"] else 0))
    cost = summ["cost"][0] if summ["cost"] else (None, None)
    if cost[0] is not None:
        server = res["server"]
        _c, splan, _l, _a = server.static_start(single_key[0], dict(single_key[1]))
        st = plan_cost(splan)
        sc, nc = cost
        print("- cost (seed 0) vs the single static: graph memory %.2f vs %.2f GiB per rank (%d runtime states vs 1; "
              "neighbour set %.2f GiB, %d states), start %.1f vs %.1f s (sim load 20 s), KV tokens %d vs %d, cap %d vs %d"
              % (sc["graph_gib"], st["graph_gib"], sc["states"], nc["graph_gib"], nc["states"], sc["start_s"], st["start_s"],
                 sc["kv"], st["kv"], sc["cap"], st["cap"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--seeds", type=int, default=5)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for land in landscapes():
            res = one_land(land, opts.seeds, tmp)
            report(land, res, opts.seeds)


if __name__ == "__main__":
    main()
