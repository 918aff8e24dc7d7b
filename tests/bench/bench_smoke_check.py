"""Benchmark of the converge's smoke check, mtp_tune_verify (prints figures; not a test).

Over the simulator's landscapes of tests/bench/bench_mtp_search.py (library(): every GPU profile at
acceptance 0.99 and 0.72, judged for latency at C=1 and throughput at C=32), each tune is driven
through the role's filters launch by launch (bench_mtp_search.tune: mtp_tune_next, then
mtp_tune_winner) with launch noise the tuner is not told (``--cv``; the tuner keeps the floor
mtp_tune_noise 1.5 % and, with ``--noise-launches 1``, relaunches its first setting once, as the
search bench's "not told" runs do). Then the converged server is benchmarked as converge.yml does:

- a correct converge: the smoke is a fresh launch of the winner (its true figure, its own noise);
  counted: plays that fail although the winner is within 2 % of the true best (target <= 3 % of
  tunes), and plays that fail at all;
- a converged server really ``--slower`` (10 %) slower than the winner's true figure (a wrong
  setting, a degraded node): counted: plays that fail (target >= 95 %).

"before" is the rule the role had (kept here only for comparison): fail when the smoke is below the
tuned figure by more than the larger of mtp_tune_verify_tolerance (5 %) and the tuned interval.
"after" is mtp_tune_verify of this checkout, with a second smoke on a fresh launch when it asks for
one (``remeasure``), as converge.yml runs it. Both see the same tunes and the same first smoke.

The bound: with the launch noise known exactly (an oracle no play has), the most plays a threshold
on the mean of k smokes can fail when the server is 10 % slower while failing at most 3 % of the
correct plays with a good winner: what no rule of this kind can beat, whatever its constants.

    .venv/bin/python tests/bench/bench_smoke_check.py [--tunes 40] [--cv 0.03] [--noise-launches 1]
"""

from __future__ import print_function

import argparse
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_mtp_search as search  # noqa: E402  (makes the checkout importable as the collection)

NEW = search.NEW
NEAR_BEST = 0.02
TARGET_FALSE = 0.03
TARGET_CAUGHT = 0.95


def sim_landscapes():
    return [land for land in search.library() if land["name"].startswith("sim ")]


def slowed(land, slower):
    """``land`` with every figure ``slower`` lower (the accept length as it was: a degraded node)."""
    if not slower:
        return land
    base = land["figures"]

    def figures(k, c):
        pr, ag, acc = base(k, c)
        return pr * (1.0 - slower), ag * (1.0 - slower), acc
    return dict(land, figures=figures)


def old_verify(level_metrics, tuned, objective, tol=0.05):
    """The check before: the larger of mtp_tune_verify_tolerance and the tuned interval, one-sided."""
    m = NEW.mtp_tune_level_metrics(level_metrics)
    value = m["decode_tps_mean"] if objective == "latency" else m["output_throughput"]
    ref = float(tuned["value"])
    band = max(tol, (ref - float(tuned.get("low") or ref)) / ref)
    return value / ref - 1.0 >= -band and not m["failed"]


def new_verify(land, cand, tuned, spec, attempts, rng, cv):
    """converge.yml's check: a first smoke, and a second on a fresh launch when the first asks for it.
    Returns (ok, remeasured)."""
    level = str(land["level"])
    first = search.measure(land, cand, rng, cv)[level]
    got = NEW.mtp_tune_verify(first, tuned, spec, attempts)
    if not got["remeasure"]:
        return got["ok"], False
    again = search.measure(land, cand, rng, cv)[level]
    return NEW.mtp_tune_verify(again, tuned, spec, attempts, first)["ok"], True


def tunes_of(lands, tunes, cv, noise_launches):
    """Every tune: (landscape, its winner's candidate, score, the attempts, the spec, true figure, true best)."""
    out = []
    for li, land in enumerate(lands):
        vals = search.truth(land)
        top = max(vals.values())
        for t in range(tunes):
            rng = random.Random("smoke-tune-%d-%d-%s-%d" % (li, t, cv, noise_launches))
            kw = {"noise_launches": noise_launches} if noise_launches else {}
            atts, _key = search.tune(NEW, land, "adaptive", rng=rng, cv=cv, noise=0.015, **kw)
            spec = dict(search.judged(land, 0.015), **kw)
            won = NEW.mtp_tune_winner(atts, spec)
            cand = [a["candidate"] for a in atts if a["key"] == won["key"]][0]
            out.append({"li": li, "land": land, "cand": cand, "score": won["score"], "attempts": atts, "spec": spec,
                        "true": vals[won["key"]], "top": top, "launches": won["score"].get("launches", 1)})
    return out


def judge(rows, cv, slower, draws):
    """Old and new verdicts on every tune, the converged server ``slower`` than the winner's truth;
    ``draws`` converges per tune (a smoke is cheap beside a tune), each with its own noise."""
    res = {"old": [0, 0], "new": [0, 0], "remeasured": 0, "n": len(rows) * draws}
    for i, row in enumerate(rows):
        land = slowed(row["land"], slower)
        near = row["true"] >= row["top"] * (1.0 - NEAR_BEST)
        for d in range(draws):
            # the same first smoke for both rules: the same stream, drawn first
            rng_old = random.Random("smoke-%d-%d-%s-%s" % (i, d, cv, slower))
            rng_new = random.Random("smoke-%d-%d-%s-%s" % (i, d, cv, slower))
            first = search.measure(land, row["cand"], rng_old, cv)[str(land["level"])]
            ok_old = old_verify(first, row["score"], land["objective"])
            ok_new, again = new_verify(land, row["cand"], row["score"], row["spec"], row["attempts"], rng_new, cv)
            for rule, ok in (("old", ok_old), ("new", ok_new)):
                res[rule][0] += not ok
                res[rule][1] += (not ok) and near
            res["remeasured"] += again
    return res


def bound(rows, cv, smokes, slower, draws=4):
    """The oracle's bound (see the module docstring): the best fraction of 10 %-slower plays failed
    at <= 3 % false failures with a good winner, over thresholds c x band + z x spread."""
    best = (0.0, None)
    sims = []
    rng = random.Random("bound-%s-%d" % (cv, smokes))
    for row in rows:
        ref = row["score"]["value"]
        near = row["true"] >= row["top"] * (1.0 - NEAR_BEST)
        sw = cv / math.sqrt(row["score"].get("n") or 1)
        spread = math.sqrt(sw * sw + cv * cv / smokes)
        for _d in range(draws):
            good = sum(row["true"] * (1 + rng.gauss(0, cv)) for _s in range(smokes)) / smokes / ref - 1.0
            slow = sum(row["true"] * (1 - slower) * (1 + rng.gauss(0, cv)) for _s in range(smokes)) / smokes / ref - 1.0
            sims.append((good, slow, near, sw, spread))
    n = float(len(sims))
    for ck in (0.0, 0.25, 0.5, 0.75, 1.0):
        for zi in range(0, 25):
            z = 0.8 + 0.1 * zi
            false = sum(1 for g, _s, near, sw, sp in sims if near and g < -(ck * sw + z * sp)) / n
            if false > TARGET_FALSE:
                continue
            caught = sum(1 for _g, s, _n, sw, sp in sims if s < -(ck * sw + z * sp)) / n
            if caught > best[0]:
                best = (caught, (ck, z, false))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--tunes", type=int, default=40)
    ap.add_argument("--cv", type=float, nargs="*", default=[0.03, 0.025])
    ap.add_argument("--noise-launches", type=int, nargs="*", default=[1, 0],
                    help="the tuner's mtp_tune_noise_launches (1: as the search bench's untold runs; 0: the role's default)")
    ap.add_argument("--slower", type=float, default=0.10)
    ap.add_argument("--draws", type=int, default=5, help="converges (smoke checks) per tune, each with its own noise")
    ap.add_argument("--no-bound", action="store_true")
    args = ap.parse_args()
    lands = sim_landscapes()
    print("Smoke check (mtp_tune_verify) over %d simulator landscapes (%d latency, %d throughput) x %d tunes; the "
          "tuner is not told the noise (floor mtp_tune_noise 1.5 %%); targets: false failures with a winner within "
          "%.0f %% of the true best <= %.0f %% of tunes, a server %.0f %% slower failed >= %.0f %%; %d converges per tune" % (
              len(lands), sum(1 for land in lands if land["objective"] == "latency"),
              sum(1 for land in lands if land["objective"] != "latency"), args.tunes, NEAR_BEST * 100,
              TARGET_FALSE * 100, args.slower * 100, TARGET_CAUGHT * 100, args.draws))
    for cv in args.cv:
        for nl in args.noise_launches:
            rows = tunes_of(lands, args.tunes, cv, nl)
            good = judge(rows, cv, 0.0, args.draws)
            slow = judge(rows, cv, args.slower, args.draws)
            n = float(good["n"])
            near = sum(1 for r in rows if r["true"] >= r["top"] * (1 - NEAR_BEST))
            print("\n== launch noise %.1f %%, mtp_tune_noise_launches %d: %d tunes, winner within %.0f %% of the true "
                  "best in %d, winner measured twice in %d" % (
                      cv * 100, nl, len(rows), NEAR_BEST * 100, near, sum(1 for r in rows if r["launches"] > 1)))
            for rule, label in (("old", "before (5 % or the tuned interval, one smoke)"),
                                ("new", "after (the node's noise, re-measured once)")):
                false_near = good[rule][1] / n
                caught = slow[rule][0] / n
                print("   %-46s false failures, winner near the best: %5.1f %%%s (all false failures %5.1f %%); "
                      "%.0f %% slower caught: %5.1f %%%s" % (
                          label, false_near * 100, " ok" if false_near <= TARGET_FALSE else " MISSED",
                          good[rule][0] / n * 100, args.slower * 100, caught * 100,
                          " ok" if caught >= TARGET_CAUGHT else " MISSED"))
            print("   %-46s re-measured (a second launch): %.1f %% of correct plays, %.1f %% of slow ones" % (
                "", good["remeasured"] / n * 100, slow["remeasured"] / n * 100))
            if not args.no_bound:
                parts = []
                for k in (1, 2, 4):
                    caught, how = bound(rows, cv, k, args.slower)
                    detail = " (c %.2f, z %.1f)" % how[:2] if how else ""
                    parts.append("%d smoke%s %.1f %%%s" % (k, "" if k == 1 else "s", caught * 100, detail))
                print("   bound, the noise known exactly: %.0f %% slower caught at <= %.0f %% false failures with "
                      "%s" % (args.slower * 100, TARGET_FALSE * 100, ", ".join(parts)))


if __name__ == "__main__":
    main()
