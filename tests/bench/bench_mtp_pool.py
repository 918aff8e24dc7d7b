"""Benchmark of tuning several identical nodes together (prints figures; not a test).

With ``q`` nodes, every round launches up to ``q`` candidates at once (plugins/plugin_utils/
mtp_pool.py: the sequential search asked ``q`` times, the proposals already handed out entered
as launches without a result), and the results join one pool. On the landscapes of
bench_mtp_search.py (the simulator's and the made-up shapes, steps 1..10 in 8 candidates; the
simulator's on steps 1..16), per ``q``:

- rounds of the pooled adaptive search against the sweep split over the nodes,
  ceil(candidates / q), and against the sequential adaptive search's launches / q + 1
  (the two bounds a pool is held to), worst landscape and sum;
- launches (the pool launches more than the sequential search: a round fills every node);
- winners off the tie band of the true best (noise-free; must be 0 where the sequential has 0);
- with independent noise per launch (``--cv``, the tuner not told it): tunes whose winner is within
  the band of the true best, pooled against the sequential adaptive and the sweep, each strategy on
  its own draws.

    .venv/bin/python tests/bench/bench_mtp_pool.py [--nodes 1 2 3 4] [--tunes 10] [--cv 0.025]
"""

from __future__ import print_function

import argparse
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_mtp_search as B  # noqa: E402  (puts the checkout on the path as the collection)

from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_pool  # noqa: E402

NEW = B.NEW  # the tuner's library (plugins/plugin_utils/mtp_*.py) as one namespace


def _attempt(land, nxt, rng, cv):
    cand = nxt["candidate"]
    return {"key": cand["key"], "candidate": cand, "overrides": nxt["overrides"], "fit_rung": nxt["fit_rung"],
            "reason": nxt["reason"], "status": "ok", "metrics": B.measure(land, cand, rng, cv)}


def tune_pool(land, strategy, q, rng=None, cv=0.0, noise=0.015, **kw):
    """A pooled tune on ``q`` nodes, driven through ``pool_next`` as the role drives it: each
    round every node asks for its launch from the same pool. Returns (attempts, rounds, winner key)."""
    cands = NEW.mtp_tune_candidates(B.STEPS)
    spec = dict(kw, strategy=B.SEARCH if strategy == "adaptive" else strategy, seed=3, **B.judged(land, noise))
    hosts = ["node%d" % i for i in range(q)]
    attempts, rounds = [], 0
    while rounds < 60:
        plans = [mtp_pool.pool_next(attempts, hosts, h, cands, None, spec) for h in hosts]
        if not plans[0]["more"]:
            break
        rounds += 1
        attempts.extend(_attempt(land, p["launch"], rng, cv) for p in plans if p["launch"] is not None)
    best = NEW.mtp_tune_pick_best(attempts, spec)
    return attempts, rounds, best["winner"]["key"]


def _off_band(vals, key, band):
    return vals[key] < max(vals.values()) * (1 - band) - 1e-9


def rounds_bench(lands, nodes, label, kw):
    band = math.sqrt(2) * 0.015
    n = len(B.STEPS)
    print("\n%s (%d landscapes, %d candidates), noise-free:" % (label, len(lands), n))
    cols = ("nodes", "rounds (sum, worst)", "sweep ceil(n/q), sum", "seq launches/q + 1", "launches sum",
            "off the band, pool / seq (outside the model)")
    print("   %-5s %-22s %-22s %-20s %-14s %s" % cols)
    seq = []
    cands = NEW.mtp_tune_candidates(B.STEPS)
    for land in lands:
        atts, key = B.tune(NEW, land, "adaptive", **kw)
        sweep, _key = B.tune(NEW, land, "sweep", **kw)
        holds = NEW.mtp_tune_model_check(sweep, cands, B.judged(land))["holds"]
        seq.append((len(atts), key, holds))
    for q in nodes:
        rows = []
        for land, (seq_n, seq_key, holds) in zip(lands, seq):
            atts, rounds, key = tune_pool(land, "adaptive", q, **kw)
            vals = B.truth(land)
            rows.append((rounds, len(atts), seq_n, _off_band(vals, key, band), _off_band(vals, seq_key, band), holds))
        sweep_rounds = int(math.ceil(n / float(q)))
        over_sweep = sum(1 for r in rows if r[0] > sweep_rounds)
        over_seq = sum(1 for r in rows if r[0] > r[2] / float(q) + 1)
        over_seq_ceil = sum(1 for r in rows if r[0] > math.ceil(r[2] / float(q)) + 1)
        print("   %-5d %-22s %-22s %-20s %-14d %d / %d (%d / %d)" % (
            q, "%d, %d" % (sum(r[0] for r in rows), max(r[0] for r in rows)),
            "%d, %d (over it: %d)" % (sweep_rounds, sweep_rounds * len(lands), over_sweep),
            "%.1f (over: %d, %d)" % (sum(r[2] / float(q) + 1 for r in rows), over_seq, over_seq_ceil),
            sum(r[1] for r in rows), sum(r[3] and r[5] for r in rows), sum(r[4] and r[5] for r in rows),
            sum(r[3] and not r[5] for r in rows), sum(r[4] and not r[5] for r in rows)))
    print("   (seq launches/q + 1: over it strictly, and over ceil(launches/q) + 1; %d of the landscapes break the "
          "model the search rests on)" % sum(1 for s_ in seq if not s_[2]))


def noise_bench(lands, nodes, cv, tunes, kw):
    band = math.sqrt(2) * 2 * cv
    print("\nNoise %.1f %% CV per launch, independent draws per tune and strategy, the tuner not told it "
          "(noise floor 1.5 %%, one relaunch of the first setting): tunes with the winner within %.1f %% of the "
          "true best, of %d" % (cv * 100, band * 100, tunes * len(lands)))
    kw = dict(kw, noise_launches=1)
    seeds = random.Random(20261205)
    draws = [[seeds.randrange(1 << 30) for _t in range(tunes)] for _land in lands]
    hits = {"sweep": 0, "adaptive": 0}
    for land, ds in zip(lands, draws):
        vals = B.truth(land)
        for d in ds:
            for strategy in ("sweep", "adaptive"):
                rng = random.Random(d * 7 + (strategy == "sweep"))
                _atts, key = B.tune(NEW, land, strategy, rng=rng, cv=cv, **kw)
                hits[strategy] += not _off_band(vals, key, band)
    print("   sequential: sweep %d, adaptive %d" % (hits["sweep"], hits["adaptive"]))
    for q in nodes:
        got = 0
        worse = 0
        for li, (land, ds) in enumerate(zip(lands, draws)):
            vals = B.truth(land)
            mine = sweep = 0
            for d in ds:
                rng = random.Random(d * 7 + 2 + q)
                _atts, _r, key = tune_pool(land, "adaptive", q, rng=rng, cv=cv, **kw)
                mine += not _off_band(vals, key, band)
                _atts, key = B.tune(NEW, land, "sweep", rng=random.Random(d * 11 + li), cv=cv, **kw)
                sweep += not _off_band(vals, key, band)
            got += mine
            worse += sweep - mine > max(1, tunes // 10)
        print("   pooled on %d nodes: adaptive %d; landscapes where it trails the sweep by more than %d tunes: %d"
              % (q, got, max(1, tunes // 10), worse))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--nodes", type=int, nargs="*", default=[1, 2, 3, 4])
    ap.add_argument("--tunes", type=int, default=10)
    ap.add_argument("--cv", type=float, default=0.025)
    ap.add_argument("--probe-ends", default="high", choices=NEW.PROBE_ENDS)
    ap.add_argument("--no-noise", action="store_true")
    ap.add_argument("--strategy", default=NEW.spec_from(None).strategy, choices=("adaptive", "climb"),
                    help="the search the figures call adaptive (mtp_tune_strategy)")
    args = ap.parse_args()
    B.SEARCH = args.strategy
    print("The checkout's search: mtp_tune_strategy %s" % B.SEARCH)
    kw = {"probe_ends": args.probe_ends}
    lands = B.library()
    rounds_bench(lands, args.nodes, "Library", kw)
    saved = B.STEPS
    B.STEPS = list(range(1, 17))
    try:
        rounds_bench([land for land in lands if land["name"].startswith("sim ")], args.nodes, "Steps 1..16, simulator",
                     kw)
    finally:
        B.STEPS = saved
    if not args.no_noise:
        noise_bench(lands, args.nodes, args.cv, args.tunes, kw)


if __name__ == "__main__":
    main()
