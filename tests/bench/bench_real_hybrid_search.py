"""The tuner's search on a landscape it was not designed on: the real hybrid MoE (prints figures;
not a test).

The landscape is what SGLang 0.5.17 measured on the lent H100 (tests/fixtures/real-sglang/hybrid/,
the trimmed Qwen3.5-MoE hybrid with its own MTP head, accept length pinned per depth at p = 0.8):
per depth 1, 2, 3, 4, 5, 6, 8 and 12, per level C = 1, 4, 16, 32, the per-request and aggregate
tok/s and the accept length of its launches (the mean where a depth was launched twice). Those
are the only candidates: nothing is interpolated.

Every tune launches each candidate afresh, drawing its own noise (the relaunch spread measured on
the real depths launched twice, per level and figure), and is told twice that noise, as the role
tells the search ``mtp_tune_noise``. The search (``mtp_tune_next`` / ``mtp_tune_pick_best``, as the
role drives them) and the sweep never share a measurement. Per objective: how often each one's
winner is the landscape's best or within the tie band of it, its mean regret, and its launches;
and whether the landscape keeps the model the search's bounds rest on (the verify round's time
convex in depth, the accept length concave).

Other acceptance models (``--accept-p``): the launches pinned the accept length, so the draft and
the verify did the same work whatever was accepted, and what a launch measured beyond the pin is
its verify round's time (accept length over tok/s). A landscape at another per-token acceptance
p keeps those round times and takes the chain's accept length at p (``mtp_search.chain_tau``):
every figure of depth k scaled by tau(k, p) / tau(k, 0.8). That rests on the round time not
depending on what is accepted (true of the pinned kernels; a few more KV tokens per round at a
higher p are not modelled). The measured landscape is p = 0.8; other rows are derived from it,
labelled so.

    .venv/bin/python tests/bench/bench_real_hybrid_search.py [--tunes 40] [--seed 1] [--accept-p 0.8,0.6,0.9]
"""

from __future__ import print_function

import argparse
import contextlib
import json
import math
import os
import random
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import bench_mtp_search as bms  # noqa: E402  pylint: disable=wrong-import-position

FIX = os.path.join(ROOT, "tests", "fixtures", "real-sglang", "hybrid")
OBJECTIVES = (("latency", 1), ("throughput", 4), ("throughput", 16), ("throughput", 32))


def load(fixture_dir=FIX):
    """{depth: {level: [(per-request tok/s, aggregate tok/s, accept length), ...]}} of every
    benchmarked speculative start (launches of one depth side by side)."""
    out = {}
    for name in sorted(os.listdir(fixture_dir)):
        if not (name.startswith("bench_hyb_experts32_s") and name.endswith(".json")):
            continue
        label = name[len("bench_"):-len(".json")]
        depth = int(label.split("_s")[1].split("_")[0])
        if depth == 0:
            continue
        with open(os.path.join(fixture_dir, name)) as f:
            data = json.load(f)
        for lv in data["levels"]:
            out.setdefault(depth, {}).setdefault(lv["concurrency"], []).append(
                (lv["decode_tps_per_request"]["mean"], lv["output_throughput"], lv["accept_length"]))
    return out


PINNED_P = 0.8  # device.sh RS_ACC_P of every benchmarked start


def at_acceptance(real, p):
    """The measured landscape with the chain's accept length at per-token acceptance ``p`` in place
    of the pinned one, round times kept (see the module docstring)."""
    from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_search  # noqa: E402 pylint: disable=import-outside-toplevel
    out = {}
    for k, levels in real.items():
        r = mtp_search.chain_tau(k, p) / mtp_search.chain_tau(k, PINNED_P)
        out[k] = {c: [(pr * r, ag * r, acc * r) for pr, ag, acc in pts] for c, pts in levels.items()}
    return out


def caps(fixture_dir=FIX):
    """{depth: running-request cap} of the benchmarked starts (their logs' max_running_requests)."""
    out = {}
    for name in sorted(os.listdir(fixture_dir)):
        if name.startswith("mem_hyb_experts32_s") and "_f" not in name:
            depth = int(name[len("mem_hyb_experts32_s"):].split("_")[0].split(".")[0])
            with open(os.path.join(fixture_dir, name)) as f:
                for line in f:
                    if "max_running_requests=" in line and "max_total_num_tokens=" in line:
                        out[depth] = int(line.split("max_running_requests=")[1].split(",")[0])
    return out


def relaunch_cv(real):
    """Per level, the relative spread of one launch of a figure (per-request, aggregate): from the
    depths launched twice, sqrt of the mean of (a - b)^2 / 2 over their means squared."""
    cv = {}
    for level in sorted({c for d in real.values() for c in d}):
        for idx in (0, 1):
            sq = [((pts[0][idx] - pts[1][idx]) / statistics.mean((pts[0][idx], pts[1][idx]))) ** 2 / 2
                  for d in real.values() for c, pts in d.items() if c == level and len(pts) > 1]
            cv[(level, idx)] = math.sqrt(statistics.mean(sq)) if sq else None
    return cv


def landscape(real, objective, level):
    steps = sorted(real)

    def figures(k, c):
        pts = real[k][c]
        return tuple(statistics.mean(p[i] for p in pts) for i in range(3))
    return {"name": "real H100 hybrid, %s at C=%d" % (objective, level), "objective": objective,
            "level": level, "figures": figures, "levels": sorted(real[steps[0]]), "steps": steps}


def measure_with(cv):
    """bench_mtp_search.measure with the measured spread of each level and figure."""
    def measure(land, cand, rng, _cv):
        out = {}
        for c in land["levels"]:
            pr, ag, acc = bms._figures(land, cand, c)  # pylint: disable=protected-access
            pr *= 1.0 + rng.gauss(0.0, cv[(c, 0)] or 0.0)
            ag *= 1.0 + rng.gauss(0.0, cv[(c, 1)] or 0.0)
            out[str(c)] = {"output_throughput": ag, "decode_tps_per_request": {"mean": pr, "p50": pr},
                           "accept_length": acc, "failed": 0, "completed": 4 * c}
        return out
    return measure


def tune(land, strategy, rng, noise, cap_of=None):
    """bench_mtp_search.tune with each launch's record carrying its running-request cap
    (``running_cap``, as mtp_record reads it from the server), or none (``cap_of`` None)."""
    cands = bms.candidates_of(bms.NEW, land)
    spec = dict(strategy=strategy, seed=3, **bms.judged(land, noise))
    attempts = []
    for _i in range(len(cands) + 60):
        nxt = bms.next_launch(bms.NEW, attempts, cands, spec)
        if nxt is None:
            break
        cand = nxt["candidate"]
        att = {"key": cand["key"], "candidate": cand, "overrides": nxt["overrides"], "fit_rung": nxt["fit_rung"],
               "reason": nxt["reason"], "status": "ok", "metrics": bms.measure(land, cand, rng, 0.0)}
        if cap_of is not None:
            att["running_cap"] = cap_of[cand["steps"]]
        attempts.append(att)
    best = bms.pick_best(bms.NEW, attempts, spec)
    return attempts, best["winner"]["key"], best


class MonotoneOnly(object):
    """While active, the search's Lane bounds an unmeasured depth's round time by monotony alone
    (``convex=False``, the bound mtp_winner calls sound): what the search would cost if it stopped
    assuming each extra draft step costs at least what the one before did, which the real round at
    C = 1 and 4 does not keep (its marginal cost falls with depth)."""

    def __enter__(self):
        from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_search  # noqa: E402 pylint: disable=import-outside-toplevel
        self.init = mtp_search.Lane.__init__
        self.saved = self.init.__defaults__
        self.init.__defaults__ = (False,)
        return self

    def __exit__(self, *exc):
        self.init.__defaults__ = self.saved
        return False


def round_shape(real, level):
    """Marginal verify-round time per draft step (ms) between measured depths at ``level``: round
    = accept length / per-request tok/s."""
    rounds = {k: statistics.mean(p[2] / p[0] * 1000.0 for p in real[k][level]) for k in sorted(real)}
    ks = sorted(rounds)
    return rounds, [(a, b, (rounds[b] - rounds[a]) / (b - a)) for a, b in zip(ks, ks[1:])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--tunes", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--accept-p", default="0.8,0.6,0.9",
                    help="per-token acceptance models, comma-separated (0.8: as measured; others derived)")
    args = ap.parse_args()
    measured = load()
    real = measured
    cv = relaunch_cv(real)
    capmap = caps()
    print("Real landscape: H100, SGLang 0.5.17, depths %s; relaunch spread per launch (per-request / aggregate):"
          % sorted(real))
    print("  " + ", ".join("C=%d %.1f / %.1f %%" % (c, 100 * (cv[(c, 0)] or 0), 100 * (cv[(c, 1)] or 0))
                           for c in sorted({c for c, _i in cv})))
    print("  running-request cap per depth: %s" % " ".join("%d:%d" % kv for kv in sorted(capmap.items())))
    for c in (1, 4):
        rounds, marg = round_shape(real, c)
        print("  C=%d round ms %s; per extra draft step %s" % (
            c, " ".join("%d:%.2f" % kv for kv in sorted(rounds.items())),
            " ".join("%d-%d:%.2f" % m for m in marg)))
    bms.STEPS = sorted(real)
    bms.measure = measure_with(cv)
    for p in [float(x) for x in args.accept_p.split(",")]:
        real = measured if p == PINNED_P else at_acceptance(measured, p)
        print("\nAcceptance p = %.2f (%s); accept length per depth %s" % (
            p, "as measured" if p == PINNED_P else "derived: the measured round times, the chain's accept length",
            " ".join("%d:%.2f" % (k, statistics.mean(pt[2] for pt in real[k][1])) for k in sorted(real))))
        table(real, cv, capmap, args, p == PINNED_P)


def table(real, cv, capmap, args, measured):
    """One markdown table of the strategies on ``real`` (the measured landscape: every variant;
    a derived one: the role's strategies and the sweep)."""
    variants = (("sweep", capmap), ("climb", capmap), ("adaptive", capmap),
                ("climb, monotone bounds", capmap), ("adaptive, monotone bounds", capmap),
                ("climb, caps not read", None), ("adaptive, caps not read", None))
    if not measured:
        variants = variants[:4]
    print("\n| objective | best (true) | within the band | keeps the model | strategy | best | in band | "
          "mean regret | launches (median) |")
    print("|---|---|---|---|---|---:|---:|---:|---:|")
    for objective, level in OBJECTIVES:
        land = landscape(real, objective, level)
        tv = bms.truth(land)
        vals = tv[0] if isinstance(tv, tuple) else tv
        best_key = max(vals, key=vals.get)
        noise = 2 * max(cv[(level, 0 if objective == "latency" else 1)] or 0.01, 0.005)
        band = [k for k, v in vals.items() if v >= vals[best_key] * (1 - noise)]
        keeps = bms.keeps_model(land)
        for strategy, cap_of in variants:
            rng = random.Random(args.seed * 1000 + level)
            wins = inband = 0
            regrets, launches = [], []
            for _t in range(args.tunes):
                with (MonotoneOnly() if "monotone" in strategy else contextlib.nullcontext()):
                    atts, key, _best = tune(land, strategy.split(",", maxsplit=1)[0], rng, noise, cap_of)
                wins += key == best_key
                inband += key in band
                regrets.append(1 - vals[key] / vals[best_key])
                launches.append(len(atts))
            print("| %s C=%d | %s (%.1f) | %s | %s | %s | %d/%d | %d/%d | %.2f %% | %d |" % (
                objective, level, best_key, vals[best_key], " ".join(sorted(band)), "yes" if keeps else "no",
                strategy, wins, args.tunes, inband, args.tunes, 100 * statistics.mean(regrets),
                statistics.median(launches)))


if __name__ == "__main__":
    main()
