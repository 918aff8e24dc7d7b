"""Benchmark of the tuner's search and fit search (prints figures; not a test).

Search: over a library of landscapes (the simulator's throughput model, sim/sglang_sim/perf.py,
for every GPU profile at acceptance 0.99 and 0.72, judged for latency at C=1 and throughput at
C=32; plus made-up shapes the search was not designed on), each strategy is driven through
``mtp_tune_next`` / ``mtp_tune_pick_best`` exactly as the role drives it:

- noise-free: launches and regret of adaptive against the sweep's winner;
- noisy: ``--tunes`` tunes per landscape, every launch drawing its own noise (``--cv``), the
  tuner told ``mtp_tune_noise = 2 x cv`` (a 95 % half-width); how often the true best wins
  where it leads the runner-up by at least twice the tie band.

The joint space, steps x topk {1, 2, 4} x draft tokens: the simulator's landscapes with a draft
tree added (made up in the tree part: the simulator models topk 1 only), launches against the
grid's sweep, misses, and winners under untold noise.

The same landscapes run through the adaptive search of other git refs when git has them
(``--baseline REF [REF ...]``, default ``main``; ``--baseline none`` skips it).

Fit search: for steps 6..16 on the simulator's memory model (sim/sglang_sim/memory.py, default
profile and model), the launches of the fit search until the largest setting that starts, against
a brute-force walk over every value, and the target ceil(log2(range)) + 1.

    .venv/bin/python tests/bench/bench_mtp_search.py [--tunes 20] [--cv 0.025] [--probe-ends both]
"""

from __future__ import print_function

import argparse
import atexit
import importlib
import importlib.util
import itertools
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
# Importing the test setup makes the checkout importable as the collection, and sim/ as sglang_sim.
import conftest  # noqa: E402,F401 pylint: disable=unused-import

from sglang_sim import perf, memory, config  # noqa: E402

# The tuner's library (plugins/plugin_utils/mtp_*.py), as one namespace of its public names.
MTP_MODULES = ("mtp_settings", "mtp_score", "mtp_fit", "mtp_search", "mtp_winner")


def _namespace(package):
    ns = types.SimpleNamespace()
    for name in MTP_MODULES:
        mod = importlib.import_module("%s.%s" % (package, name))
        for attr in dir(mod):
            if not attr.startswith("_"):
                setattr(ns, attr, getattr(mod, attr))
    return ns


NEW = _namespace("ansible_collections.blackwell.sglang.plugins.plugin_utils")

STEPS = [1, 2, 3, 4, 5, 6, 8, 10]
LEVELS = [1, 2, 4, 8, 16, 32]


# --------------------------------------------------------------------------- landscapes

def sim_landscape(profile, alpha, objective):
    factor = perf.speed_factor(profile)

    def figures(k, c):
        return (perf.per_request_tps(c, k, alpha, factor), perf.aggregate_tps(c, k, alpha, factor),
                perf.expected_accept_length(k, alpha))
    level = 1 if objective == "latency" else 32
    return {"name": "sim %s a=%.2f %s" % (profile, alpha, objective), "objective": objective, "level": level,
            "figures": figures, "levels": LEVELS}


# Made-up objective figures (per-request tok/s at C=1) over STEPS, with a chain acceptance of
# 0.9; each is checked to be physical (the time per verify round never falls with depth).
MADE_UP = {
    "monotone up": [105, 110, 115, 120, 125, 130, 140, 150],
    "monotone down": [142, 134, 126, 118, 110, 102, 86, 70],
    "slow climb to 8": [100, 101.5, 103, 104.5, 106, 107.5, 110.5, 104],
    "plateau": [90, 97, 100, 100.5, 100.3, 100.6, 100.2, 99.8],
    "two peaks 2 and 8": [80, 100, 95, 90, 88, 92, 107, 98],
    "3 ~ 4 above optimum at 1": [110, 100, 99, 99.5, 97, 95, 92, 90],
    "optimum at the dear end": [60, 70, 78, 84, 88, 91, 95, 100],
    "near-equal neighbours 4 ~ 5": [120, 160, 185, 200, 201, 190, 170, 150],
    "sharp peak at 6": [100, 104, 108, 112, 116, 125, 110, 100],
    "clear peak at 4": [100, 128, 145, 172, 150, 135, 120, 105],
    "cliff after 2": [120, 170, 140, 130, 125, 120, 115, 110],
}
# Held out: added after the search was designed and never tuned on, to show whether the design
# generalises rather than fits the shapes above.
HELD_OUT = {
    "held out: plateau, then a drop": [95, 105, 110, 111, 111.5, 111, 104, 96],
    "held out: shoulder 2, peak 5": [100, 118, 112, 120, 126, 119, 108, 98],
    "held out: peak 2, slow decline": [130, 140, 138, 136, 133, 130, 124, 118],
}


def made_up_landscape(name, values, alpha=0.9):
    table = dict(zip(STEPS, values))
    rounds = [perf.expected_accept_length(k, alpha) / table[k] for k in STEPS]
    assert all(b >= a for a, b in zip(rounds, rounds[1:])), "%s is not physical" % name

    def figures(k, c):
        return table[k], table[k], perf.expected_accept_length(k, alpha)
    return {"name": "made-up: " + name, "objective": "latency", "level": 1, "figures": figures, "levels": [1]}


def library():
    out = []
    for profile in sorted(perf.PROFILE_SPEED):
        for alpha in (perf.ALPHA_SYNTHETIC, perf.ALPHA_REALISTIC):
            for objective in ("latency", "throughput"):
                out.append(sim_landscape(profile, alpha, objective))
    for name, values in list(MADE_UP.items()) + list(HELD_OUT.items()):
        out.append(made_up_landscape(name, values))
    return out


# The joint space steps x topk x draft tokens. The simulator models topk 1 only (its chain,
# sim/sglang_sim/perf.py); these landscapes extend it with a draft tree, so they are made up in the
# tree part and labelled so. The draft ranks the right token first with probability alpha and
# each lower rank with a geometric share of the rest (RANK_TAIL); like EAGLE-2 in SGLang, every
# step expands topk children of each of the topk best nodes so far, and the draft tokens - 1 best
# of all expanded nodes (by path probability) are verified. Step time: the simulator's, with the
# draft chain's per-request cost growing with topk and the verify pass over draft tokens.
JOINT_TOPK = (1, 2, 4)
JOINT_DRAFTS = (4, 6, 8, 12, 16)
RANK_TAIL = 0.5
TOPK_DRAFT_COST = 0.25


def tree_accept_length(steps, topk, draft_tokens, alpha, tail=RANK_TAIL):
    """Expected tokens per verify round of an EAGLE-2 style draft tree (see above)."""
    ranks = [alpha] + [(1.0 - alpha) * tail * (1.0 - tail) ** (i - 1) for i in range(1, topk)]
    beam, expanded = [1.0], []
    for _step in range(steps):
        children = sorted((p * q for p in beam for q in ranks), reverse=True)
        expanded.extend(children)
        beam = children[:topk]
    return 1.0 + sum(sorted(expanded, reverse=True)[:draft_tokens - 1])


def tree_step_ms(batch, steps, topk, draft_tokens, factor):
    t = (perf.T0 + perf.TD * steps + batch * (perf.TB + perf.TK2 * steps * steps * (1 + TOPK_DRAFT_COST * (topk - 1)))
         + perf.TQ * (batch * draft_tokens) ** 2)
    if draft_tokens - 1 > perf.FAST_VERIFY_MAX_STEPS:
        t += (draft_tokens - 1 - perf.FAST_VERIFY_MAX_STEPS) * (perf.TP0 + perf.TP1 * batch)
    return t * factor


def joint_landscape(profile, alpha, objective):
    factor = perf.speed_factor(profile)

    def cand_figures(cand, c):
        batch = min(c, 48)
        acc = tree_accept_length(cand["steps"], cand["topk"], cand["draft_tokens"], alpha)
        pr = acc / tree_step_ms(batch, cand["steps"], cand["topk"], cand["draft_tokens"], factor) * 1000.0
        return pr, batch * pr, acc
    level = 1 if objective == "latency" else 32
    return {"name": "joint %s a=%.2f %s" % (profile, alpha, objective), "objective": objective, "level": level,
            "cand_figures": cand_figures, "levels": LEVELS, "grid": (STEPS, list(JOINT_TOPK), list(JOINT_DRAFTS))}


def joint_library():
    return [joint_landscape(profile, alpha, objective) for profile in sorted(perf.PROFILE_SPEED)
            for alpha in (perf.ALPHA_SYNTHETIC, perf.ALPHA_REALISTIC) for objective in ("latency", "throughput")]


# --------------------------------------------------------------------------- driving a tuner

def measure(land, cand, rng, cv):
    out = {}
    for c in land["levels"]:
        pr, ag, acc = _figures(land, cand, c)
        if rng is not None:
            pr *= 1.0 + rng.gauss(0.0, cv)
            ag *= 1.0 + rng.gauss(0.0, cv)
            acc *= 1.0 + rng.gauss(0.0, cv / 2.0)
        out[str(c)] = {"output_throughput": ag, "decode_tps_per_request": {"mean": pr, "p50": pr},
                       "accept_length": acc, "failed": 0, "completed": 4 * c}
    return out


def _figures(land, cand, c):
    """(per-request tok/s, aggregate tok/s, accept length) of ``cand`` at concurrency ``c``."""
    if "cand_figures" in land:
        return land["cand_figures"](cand, c)
    return land["figures"](cand["steps"], c)


def candidates_of(mod, land):
    """The candidate list a tune of ``land`` searches (the joint grid's, or STEPS with topk 1)."""
    if "grid" in land:
        return mod.mtp_tune_candidates(*land["grid"])
    return mod.mtp_tune_candidates(STEPS)


def judged(land, noise=0.015):
    """The spec of a tune on ``land``: its objective and level, and the noise the tuner is told."""
    return {"objective": land["objective"], "level": land["level"], "noise": noise}


def next_launch(mod, attempts, cands, spec, fit_ladder=None):
    """``mod``'s next launch under ``spec`` (a dict of the spec's keys), whichever API that tuner has:
    the spec (plugins/plugin_utils/mtp_settings.py spec_from) or, in refs from before it, positional
    arguments and keywords."""
    if hasattr(mod, "spec_from"):
        return mod.mtp_tune_next(attempts, cands, fit_ladder, spec)
    kw = dict(spec)
    return mod.mtp_tune_next(attempts, cands, kw.pop("strategy", "adaptive"), 0.03, kw.pop("objective", "latency"),
                             kw.pop("level", None), kw.pop("seed", 3), fit_ladder=fit_ladder, **kw)


def pick_best(mod, attempts, spec):
    """``mod``'s winner under ``spec``, whichever API that tuner has (see next_launch)."""
    if hasattr(mod, "spec_from"):
        return mod.mtp_tune_pick_best(attempts, spec)
    return mod.mtp_tune_pick_best(attempts, spec.get("objective", "latency"), spec.get("level"), spec.get("slo_min_tps"),
                                  spec.get("slo_max_ttft_p99_ms"), spec.get("noise", 0.015))


# The checkout's search that the figures below call "adaptive" (--strategy: adaptive or climb).
SEARCH = "adaptive"


def tune(mod, land, strategy, rng=None, cv=0.0, noise=0.015, **kw):
    cands = candidates_of(mod, land)
    if strategy == "adaptive" and mod is NEW:
        strategy = SEARCH
    spec = dict(kw, strategy=strategy, seed=3, **judged(land, noise))
    attempts = []
    for _i in range(len(cands) + 60):
        nxt = next_launch(mod, attempts, cands, spec)
        if nxt is None:
            break
        cand = nxt["candidate"]
        attempts.append({"key": cand["key"], "candidate": cand, "overrides": nxt["overrides"],
                         "fit_rung": nxt["fit_rung"], "reason": nxt["reason"], "status": "ok",
                         "metrics": measure(land, cand, rng, cv)})
    best = pick_best(mod, attempts, spec)
    return attempts, best["winner"]["key"]


def truth(land):
    """True figure per candidate key, the true top and the sweep's noise-free winner."""
    cands = candidates_of(NEW, land)
    vals = {}
    for cand in cands:
        pr, ag, _acc = _figures(land, cand, land["level"])
        vals[cand["key"]] = pr if land["objective"] == "latency" else ag
    return vals


def keeps_model(land):
    """Whether ``land`` keeps the stated model over its chain candidates at the judged level (the
    role README's): the accept length concave in the draft depth, and the time per verify round
    (accept length over the judged figure) non-decreasing and convex in it. A landscape outside it
    may defeat the search's bounds; the noise figures are given for both kinds apart."""
    steps = sorted(set(c["steps"] for c in candidates_of(NEW, land) if c["topk"] == 1))
    idx = 0 if land["objective"] == "latency" else 1
    pts = []
    for k in steps:
        fig = _figures(land, {"steps": k, "topk": 1, "draft_tokens": k + 1, "key": "s%d-k1-d%d" % (k, k + 1)},
                       land["level"])
        pts.append((k, fig[2], fig[2] / fig[idx]))
    eps = 1e-9
    for (xa, ta, ra), (xb, tb, rb), (xc, tc, rc) in zip(pts, pts[1:], pts[2:]):
        if (tc - tb) / (xc - xb) > (tb - ta) / (xb - xa) + eps or (rc - rb) / (xc - xb) < (rb - ra) / (xb - xa) - eps:
            return False
    return all(rb >= ra - eps for (_xa, _ta, ra), (_xb, _tb, rb) in zip(pts, pts[1:]))


def _git_show(ref, path):
    try:
        return subprocess.check_output(["git", "-C", ROOT, "show", "%s:%s" % (ref, path)], stderr=subprocess.DEVNULL)
    except (subprocess.CalledProcessError, OSError):
        return None


def _load_library(ref):
    """The tuner's library of a ref that has plugins/plugin_utils/mtp_*.py, as its own package (its
    imports of the library rewritten to that package; module_utils stay the checkout's)."""
    package = "mtp_baseline_%s" % "".join(ch if ch.isalnum() else "_" for ch in ref)
    base = tempfile.mkdtemp(prefix="mtp-baseline-")
    atexit.register(shutil.rmtree, base, True)
    os.makedirs(os.path.join(base, package, "plugin_utils"))
    for init in (os.path.join(base, package, "__init__.py"), os.path.join(base, package, "plugin_utils", "__init__.py")):
        open(init, "w").close()
    for name in MTP_MODULES:
        src = _git_show(ref, "plugins/plugin_utils/%s.py" % name)
        if src is None:
            return None
        src = src.replace(b"ansible_collections.blackwell.sglang.plugins.plugin_utils", package.encode() + b".plugin_utils")
        with open(os.path.join(base, package, "plugin_utils", name + ".py"), "wb") as fh:
            fh.write(src)
    sys.path.insert(0, base)
    return _namespace(package + ".plugin_utils")


def load_baseline(ref):
    """The tuner of another git ref: its library (plugins/plugin_utils) or, before that existed, its
    one filter file (plugins/filter/mtp_tune.py); None where the ref has neither."""
    if ref in (None, "", "none"):
        return None
    if _git_show(ref, "plugins/plugin_utils/mtp_search.py") is not None:
        return _load_library(ref)
    src = _git_show(ref, "plugins/filter/mtp_tune.py")
    if src is None:
        return None
    tmp = tempfile.NamedTemporaryFile("wb", suffix=".py", delete=False)
    tmp.write(src)
    tmp.close()
    spec = importlib.util.spec_from_file_location("mtp_tune_baseline", tmp.name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    os.unlink(tmp.name)
    return mod


# --------------------------------------------------------------------------- the floor

def floor_launches(values, required, band):
    """The fewest launches any search of this family needs on one landscape, with hindsight.

    ``values``: the true figure per candidate, cheapest first; ``required``: indexes every search
    of the family launches whatever the landscape (the seed, the ends it probes).  A set of
    launches qualifies when its best measured candidate is within ``band`` of the true best and
    both its neighbours in the list are measured (a measured local optimum).  The smallest such
    set is what a search that knew the landscape in advance would launch: no search that keeps
    those rules can average fewer launches than these floors.
    """
    n = len(values)
    best = max(values)
    for size in range(max(1, len(required)), n + 1):
        for subset in itertools.combinations(range(n), size):
            chosen = set(subset)
            if not set(required) <= chosen:
                continue
            top = max(chosen, key=lambda i: values[i])
            if values[top] >= best * (1.0 - band) and all(j in chosen for j in (top - 1, top + 1) if 0 <= j < n):
                return size
    return n


def required_launches(probe_ends, seed=3):
    """Indexes into STEPS that the adaptive search launches on every landscape: the seed and the ends."""
    seed_idx = min(range(len(STEPS)), key=lambda i: (abs(STEPS[i] - seed), STEPS[i]))
    out = {seed_idx}
    if probe_ends in ("both", "high"):
        out.add(len(STEPS) - 1)
    if probe_ends in ("both", "low"):
        out.add(0)
    return out


def sound_floor(values, taus, band):
    """The fewest launches of any search that is right on every landscape a server can have.

    The one thing every server shares: a verify round never gets faster with more draft tokens.
    Then an unmeasured candidate k can reach at most fig(p) x tau(k) / tau(p), p the dearest
    measured candidate below it, and anything at all where nothing cheaper was measured.  A search
    that stops while some k could still beat its answer by more than the band is wrong on the
    landscape that puts k there (its twin, which matches every measurement, so the search ends the
    same way).  So a search right on every landscape must end with a set that leaves nothing
    open; the smallest such set, found with hindsight, is this floor.
    """
    n = len(values)
    for size in range(1, n + 1):
        for subset in itertools.combinations(range(n), size):
            chosen = set(subset)
            answer = max(chosen, key=lambda i: values[i])
            ok = True
            for k in range(n):
                if k in chosen:
                    continue
                below = [p for p in chosen if p < k]
                if not below or values[max(below)] * taus[k] / taus[max(below)] > values[answer] / (1.0 - band):
                    ok = False
                    break
            if ok:
                return size
    return n


def twin_landscape(land, measured, band):
    """A landscape that matches ``land`` on every measured step count and puts each unmeasured
    one as high as a non-decreasing time per verify round allows: flat from the dearest measured
    step count below it, or, below the cheapest measured, above the best measured figure by twice
    the band at every level.  The search sees the same figures on both, so it ends the same way."""
    levels = land["levels"]
    best = dict((c, [max(land["figures"](m, c)[i] for m in measured) for i in (0, 1)]) for c in levels)

    def figures(k, c):
        if k in measured:
            return land["figures"](k, c)
        tau = land["figures"](k, c)[2]
        below = [m for m in measured if m < k]
        if below:
            p = max(below)
            pr, ag, tau_p = land["figures"](p, c)
            return pr * tau / tau_p, ag * tau / tau_p, tau
        return best[c][0] * (1 + 2 * band), best[c][1] * (1 + 2 * band), tau
    return dict(land, name=land["name"] + " (twin)", figures=figures)


# --------------------------------------------------------------------------- search benchmark

def twin_check(land, atts, key, kw, band, out):
    """Run the checkout's adaptive search on the twin of ``land`` (see twin_landscape)."""
    cands = NEW.mtp_tune_candidates(STEPS)
    open_ = NEW.mtp_tune_unverified(atts, cands, judged(land))
    row = {"open": len(open_), "unbounded": sum(1 for u in open_ if u["bound"] is None), "fooled": False,
           "regret": 0.0}
    if open_:
        measured = set(a["candidate"]["steps"] for a in atts)
        twin = twin_landscape(land, measured, band)
        t_atts, t_key = tune(NEW, twin, "adaptive", **kw)
        same = [a["key"] for a in t_atts] == [a["key"] for a in atts] and t_key == key
        t_vals = truth(twin)
        regret = 1.0 - t_vals[t_key] / max(t_vals.values())
        row.update(fooled=same and regret > band + 1e-9, regret=regret)
    out.append(row)


def tune_until_settled(land, kw):
    """The adaptive search, then every candidate mtp_tune_unverified still lists (the one that could
    gain most first; no bound counts as most): right on every landscape a server can have."""
    cands = NEW.mtp_tune_candidates(STEPS)
    by_key = dict((c["key"], c) for c in cands)
    attempts, _key = tune(NEW, land, "adaptive", **kw)
    while True:
        open_ = NEW.mtp_tune_unverified(attempts, cands, judged(land))
        if not open_:
            break
        row = sorted(open_, key=lambda u: (u["gain"] is not None, -(u["gain"] or 0.0), u["steps"]))[0]
        cand = by_key[row["key"]]
        attempts.append({"key": cand["key"], "candidate": cand, "overrides": {}, "fit_rung": None,
                         "reason": "settle", "status": "ok", "metrics": measure(land, cand, None, 0.0)})
    best = NEW.mtp_tune_pick_best(attempts, judged(land))
    return attempts, best["winner"]["key"]


def bench_search(args):
    lands = library()
    algos = [("adaptive", NEW, {"probe_ends": args.probe_ends})]
    for ref in args.baseline:
        base = load_baseline(ref)
        if base is not None:
            algos.append(("%s adaptive" % ref, base, {}))
        elif ref not in ("", "none"):
            print("(baseline %s: no tuner there, skipped)" % ref)
    band0 = math.sqrt(2) * 0.015
    noisy_noise = 2 * args.cv
    band_n = math.sqrt(2) * noisy_noise
    print("Search: %d landscapes over steps %s; sweep = %d launches" % (len(lands), STEPS, len(STEPS)))
    print("noise-free tie band %.1f %% (mtp_tune_noise 0.015); noisy: cv %.1f %%, mtp_tune_noise %.3f, band %.1f %%, "
          "%d tunes each, judged where the best leads by >= %.1f %%" % (
              band0 * 100, args.cv * 100, noisy_noise, band_n * 100, args.tunes, 2 * band_n * 100))
    summary = {}
    keys = [c["key"] for c in NEW.mtp_tune_candidates(STEPS)]
    required = required_launches(args.probe_ends)
    floors = [floor_launches([truth(land)[k] for k in keys], required, band0) for land in lands]
    sounds = [sound_floor([truth(land)[k] for k in keys], [land["figures"](k, land["level"])[2] for k in STEPS], band0)
              for land in lands]
    twins = []
    for label, mod, kw in algos:
        print("\n== %s%s" % (label, " (probe_ends=%s)" % kw["probe_ends"] if kw else ""))
        print("%-42s %8s %6s %6s %9s %8s %7s %12s %11s %10s"
              % ("landscape", "launches", "floor", "sound", "regret%", "sweep", "lead%", "noisy best", "in band",
                 "noisy l."))
        tot_l = tot_s = fail_nf = judged = judged_ok = tot_in = tot_tunes = 0
        for li, land in enumerate(lands):
            vals = truth(land)
            ranked = sorted(vals, key=lambda k: -vals[k])
            top = ranked[0]
            lead = vals[top] / vals[ranked[1]] - 1.0
            _sw_atts, sw_key = tune(NEW, land, "sweep")
            atts, key = tune(mod, land, "adaptive", **kw)
            if mod is NEW:
                twin_check(land, atts, key, kw, band0, twins)
            regret = 1.0 - vals[key] / vals[top]
            fail = regret > band0 + 1e-9
            fail_nf += fail
            tot_l += len(atts)
            tot_s += len(STEPS)
            wins = inband = 0
            launches = []
            for t in range(args.tunes):
                rng = random.Random("%s-%s-%d" % (li, label, t))
                n_atts, n_key = tune(mod, land, "adaptive", rng=rng, cv=args.cv, noise=noisy_noise, **kw)
                wins += n_key == top
                inband += vals[n_key] >= vals[top] * (1 - band_n)
                launches.append(len(n_atts))
            is_judged = lead >= 2 * band_n
            if is_judged:
                judged += 1
                judged_ok += wins >= int(math.ceil(0.9 * args.tunes))
            tot_in += inband
            tot_tunes += args.tunes
            print("%-42s %8d %6d %6d %8.1f%s %8s %7.1f %9d/%-2d%s %8d/%-2d %10.1f" % (
                land["name"][:42], len(atts), floors[li], sounds[li], regret * 100, "!" if fail else " ", sw_key.split("-")[0],
                lead * 100, wins, args.tunes, "*" if is_judged else " ", inband, args.tunes,
                sum(launches) / float(len(launches))))
        summary[label] = (tot_l, tot_s, fail_nf, judged, judged_ok)
        print("-- %s: mean launches %.1f %% of the sweep; noise-free regret above the band on %d/%d landscapes; "
              "noisy: true best in >= %d/%d tunes on %d/%d judged landscapes (*)" % (
                  label, 100.0 * tot_l / tot_s, fail_nf, len(lands), int(math.ceil(0.9 * args.tunes)), args.tunes,
                  judged_ok, judged))
        print("   noisy winners within the band of the true best: %d/%d tunes" % (tot_in, tot_tunes))
    if twins:
        fooled = [t for t in twins if t["fooled"]]
        print("\nOpen questions of this checkout's adaptive search (noise-free): %d/%d landscapes end with candidates "
              "no measurement rules out (mtp_tune_unverified, %d candidates in all; %d of them unbounded: nothing "
              "cheaper measured). On the twin of each such landscape (the same measured figures, every unmeasured "
              "candidate as high as a non-decreasing round time allows) the search launches the same and misses: "
              "%d/%d, by %.1f %% to %.1f %% (median %.1f %%)." % (
                  sum(1 for t in twins if t["open"]), len(twins), sum(t["open"] for t in twins),
                  sum(t["unbounded"] for t in twins), len(fooled), sum(1 for t in twins if t["open"]),
                  min([t["regret"] for t in fooled] or [0]) * 100, max([t["regret"] for t in fooled] or [0]) * 100,
                  sorted(t["regret"] for t in fooled)[len(fooled) // 2] * 100 if fooled else 0.0))
    wall_bench(lands, algos[0][2])
    model_bench(lands, algos[0][2])
    long_list_bench(algos[0][2])
    print("\nNoise the tuner is not told (independent draws per launch and per strategy, %d tunes each):" % args.tunes)
    for cv in (0.025, 0.03):
        noise_bench(lands, algos[0][2], cv, args.tunes)
    joint_bench(algos[0][2], args.tunes)
    settled = [tune_until_settled(land, algos[0][2]) for land in lands]
    misses = sum(1 for land, (_a, k) in zip(lands, settled)
                 if truth(land)[k] < max(truth(land).values()) * (1.0 - band0) - 1e-9)
    print("Run on until nothing is open (adaptive, then every candidate mtp_tune_unverified lists): %.1f %% of the "
          "sweep, noise-free regret above the band on %d/%d" % (
              100.0 * sum(len(a) for a, _k in settled) / (len(STEPS) * len(lands)), misses, len(lands)))
    print("Sound floor (hindsight): the fewest launches of any search that is within the band on every landscape a "
          "server can have (a verify round never faster with more draft tokens): %d = %.1f %% of the sweep" % (
              sum(sounds), 100.0 * sum(sounds) / (len(STEPS) * len(lands))))
    print("\nFloor (hindsight): the fewest launches of any search that launches the seed (steps 3)%s and ends on a "
          "measured local optimum within the band of the true best: %d = %.1f %% of the sweep (column 'floor')" % (
              {"high": " and the dearest end", "low": " and the cheapest end", "both": " and both ends"}.get(
                  args.probe_ends, ""), sum(floors), 100.0 * sum(floors) / (len(STEPS) * len(lands))))
    for what, req in (("the seed alone", required_launches("none")),
                      ("the dearest end alone", {len(STEPS) - 1}),
                      ("neither (any start)", set())):
        fl = sum(floor_launches([truth(land)[k] for k in keys], req, band0) for land in lands)
        print("   the same, launching %s first: %d = %.1f %%" % (what, fl, 100.0 * fl / (len(STEPS) * len(lands))))
    return summary


def complete(mod, land, attempts, levels, rng=None, cv=0.0, noise=0.015, converge=False):
    """The role's completing launches after the search (mtp_tune_complete): each measured at
    every level; returns how many there were. With ``converge`` the winner is left to the
    converged server's smoke (spec key converge, in refs that have it)."""
    n = 0
    extra = {"converge": True} if converge else {}
    for _i in range(len(STEPS)):
        nxt = mod.mtp_tune_complete(attempts, dict(judged(land, noise), levels=levels, **extra))
        if nxt is None:
            break
        cand = nxt["candidate"]
        attempts.append({"key": cand["key"], "candidate": cand, "overrides": nxt["overrides"], "fit_rung": None,
                         "reason": nxt["reason"], "status": "ok", "metrics": measure(land, cand, rng, cv)})
        n += 1
    return n


# A node's benchmark per level (the role's default six levels, 1024 in / 1024 out: 4-10 min per
# launch over all six on the calibrated 122B node, DESIGN.md) and its model load.
WALL_LEVELS = (1, 2, 4, 8, 16, 32)
WALL_BENCH_MIN = 1.0
WALL_LOAD_MIN = (2.0, 5.0)


def wall_bench(lands, kw):
    """Wall time of a tune, noise-free, in the model above: the sweep benchmarking every launch at
    every level, against the adaptive search benchmarking the judged level only and then completing
    the winner and its ties at every level (mtp_tune_search_levels=judged)."""
    if not hasattr(NEW, "mtp_tune_complete"):
        return
    print("\nWall time (model: load %s min, benchmark %.0f min per level, %d levels), noise-free, per landscape "
          "summed:" % (" or ".join("%.0f" % x for x in WALL_LOAD_MIN), WALL_BENCH_MIN, len(WALL_LEVELS)))
    rows = []
    for land in lands:
        atts, _key = tune(NEW, land, "adaptive", **kw)
        for att in atts:  # the search's launches measured the judged level only
            att["metrics"] = {str(land["level"]): att["metrics"][str(land["level"])]}
        # the report's levels: the landscape's and one more, so every tune has a table to complete
        want = sorted(set(land["levels"]) | {land["level"], 2 * max(land["levels"])})
        done = complete(NEW, land, atts[:], want)
        ties = complete(NEW, land, atts[:], want, converge=True) if "converge" in NEW.SPEC_FIELDS else None
        rows.append((len(atts), done, ties))
    n = len(STEPS)
    smoke = WALL_BENCH_MIN  # the converge's smoke at the judged level, after any strategy
    for load in WALL_LOAD_MIN:
        full = load + WALL_BENCH_MIN * len(WALL_LEVELS)
        judged = load + WALL_BENCH_MIN
        sweep = n * full * len(lands)
        adaptive_all = sum(a * full for a, _k, _t in rows)
        adaptive_judged = sum(a * judged + k * full for a, k, _t in rows)
        print("   load %.0f min: sweep %.0f min; adaptive at every level %.1f %% of it; adaptive at the judged level "
              "+ completing %.1f %% (%d completing launches over %d landscapes)" % (
                  load, sweep, 100.0 * adaptive_all / sweep, 100.0 * adaptive_judged / sweep,
                  sum(k for _a, k, _t in rows), len(lands)))
        if rows and rows[0][2] is not None:
            # The converge restarts the winner after any strategy (load + smoke): the sweep's smoke
            # measures the judged level, the adaptive's every level of the winner's table.
            conv_extra = WALL_BENCH_MIN * (len(WALL_LEVELS) - 1)
            adaptive_conv = sum(a * judged + t * full + conv_extra for a, _k, t in rows)
            with_sweep = sweep + len(lands) * (load + smoke)
            with_adaptive = adaptive_conv + len(lands) * (load + smoke)
            print("      winner's table from the converge's smoke (ties completed by launches, %d over %d landscapes): "
                  "%.1f %% of the sweep; counting the converge's restart and smoke after both: %.1f %%" % (
                      sum(t for _a, _k, t in rows), len(lands), 100.0 * adaptive_conv / sweep,
                      100.0 * with_adaptive / with_sweep))


def model_bench(lands, kw):
    """After the adaptive search, noise-free: what the winner's report leaves open under the stated
    model (``unverified``), what only the model's convexity rules out, and on which landscapes the
    launches break the model (mtp_tune_model_check)."""
    cands = NEW.mtp_tune_candidates(STEPS)
    rows = []
    for land in lands:
        atts, _key = tune(NEW, land, "adaptive", **kw)
        w = NEW.mtp_tune_winner(atts, judged(land), candidates=cands)
        rows.append((land["name"], len(w["unverified"]), len(w["model_rules_out"]), w["model"]["holds"]))
    sim = [r for r in rows if r[0].startswith("sim ")]
    other = [r for r in rows if not r[0].startswith("sim ")]
    print("\nThe stated model after the adaptive search (noise-free): open under the model %d candidates on %d of %d "
          "sim landscapes (only the convexity rules out %d); made-up shapes: the launches break the model on %d of %d "
          "(open there: %d), and %d candidates stay open on the %d that keep it" % (
              sum(r[1] for r in sim), sum(1 for r in sim if r[1]), len(sim), sum(r[2] for r in sim),
              sum(1 for r in other if not r[3]), len(other), sum(r[1] for r in other if not r[3]),
              sum(r[1] for r in other if r[3]), sum(1 for r in other if r[3])))


def long_list_bench(kw, steps=tuple(range(1, 17))):
    """The adaptive search over a longer list (steps 1..16) on the simulator's landscapes (the
    made-up shapes have eight points only), noise-free: launches against the sweep, misses, and
    what stays open under the model."""
    global STEPS  # pylint: disable=global-statement
    saved = STEPS
    lands = [land for land in library() if land["name"].startswith("sim ")]
    STEPS = list(steps)
    try:
        cands = NEW.mtp_tune_candidates(STEPS)
        launches = misses = opened = open_lands = 0
        band = math.sqrt(2) * 0.015
        for land in lands:
            vals = truth(land)
            atts, key = tune(NEW, land, "adaptive", **kw)
            launches += len(atts)
            misses += vals[key] < max(vals.values()) * (1 - band) - 1e-9
            w = NEW.mtp_tune_winner(atts, judged(land), candidates=cands)
            opened += len(w["unverified"])
            open_lands += bool(w["unverified"])
        print("\nSteps %d..%d on the %d simulator landscapes (noise-free): launches %.1f %% of the sweep, winner off the "
              "band on %d, open under the model %d candidates on %d landscapes" % (
                  STEPS[0], STEPS[-1], len(lands), 100.0 * launches / (len(STEPS) * len(lands)), misses, opened,
                  open_lands))
    finally:
        STEPS = saved


def joint_bench(kw, tunes, cv=0.025):
    """The adaptive search over the joint grid (steps x topk x draft tokens) on the tree-extended
    simulator landscapes: launches against the sweep of the grid, per topk lane, misses noise-free,
    and with untold noise the winners within the band against the sweep's on their own draws."""
    lands = joint_library()
    n = len(candidates_of(NEW, lands[0]))
    band = math.sqrt(2) * 0.015
    launches = misses = 0
    by_topk = {}
    rows = []
    open_ = []
    for land in lands:
        vals = truth(land)
        atts, key = tune(NEW, land, "adaptive", **kw)
        launches += len(atts)
        won = NEW.mtp_tune_winner(atts, judged(land), candidates=candidates_of(NEW, land))
        open_.append(len(won["unverified"]))
        for att in atts:
            by_topk[att["candidate"]["topk"]] = by_topk.get(att["candidate"]["topk"], 0) + 1
        miss = vals[key] < max(vals.values()) * (1 - band) - 1e-9
        misses += miss
        rows.append((land["name"], len(atts), key, max(vals, key=vals.get), miss))
    print("\nJoint grid: steps %s x topk %s x draft tokens %s (the release's range steps+1 .. steps*topk+1): %d "
          "candidates; the simulator's landscapes with a draft tree (made up in the tree part), noise-free:" % (
              STEPS, list(JOINT_TOPK), list(JOINT_DRAFTS), n))
    for name, count, key, best, miss in rows:
        print("   %-42s %3d launches  winner %-10s best %-10s%s" % (name, count, key, best, "  MISS" if miss else ""))
    print("   launches %d of %d = %.1f %% of the sweep (per topk lane: %s); winner off the band on %d of %d" % (
        launches, n * len(lands), 100.0 * launches / (n * len(lands)),
        ", ".join("topk %d: %d" % (k, by_topk[k]) for k in sorted(by_topk)), misses, len(lands)))
    print("   open under the model after the search (the report's \"could still beat the winner\"): %d candidates on "
          "%d of %d landscapes" % (sum(open_), sum(1 for n_open in open_ if n_open), len(lands)))
    noise_bench(lands, kw, cv, tunes)


def noise_bench(lands, kw, cv, tunes, told=False):
    """Winners under launch noise the tuner is not told: every launch draws its own noise at
    ``cv``; the tuner keeps mtp_tune_noise's default floor (1.5 %) and relaunches its first setting
    once (mtp_tune_noise_launches 1) to measure the node. The sweep runs on its own draws (no
    measurement shared). Counts tunes whose winner is within the band (sqrt(2) x 2 cv) of the true
    best, per strategy, and the landscapes where adaptive does worse than the sweep by more than
    2 tunes in ``tunes``."""
    band = math.sqrt(2) * 2 * cv
    noise = 2 * cv if told else 0.015
    extra = {} if told else {"noise_launches": 1}
    tot = {"adaptive": 0, "sweep": 0}
    inside = {"adaptive": 0, "sweep": 0, "lands": 0}
    launches = {"adaptive": 0, "sweep": 0}
    worse = []
    for li, land in enumerate(lands):
        vals = truth(land)
        top = max(vals.values())
        keeps = keeps_model(land)
        inside["lands"] += keeps
        got = {}
        for strategy in ("adaptive", "sweep"):
            n = 0
            for t in range(tunes):
                rng = random.Random("noise-%s-%s-%d-%s" % (li, strategy, t, cv))
                args = dict(kw, **extra) if strategy == "adaptive" else dict(extra)
                atts, key = tune(NEW, land, strategy, rng=rng, cv=cv, noise=noise, **args)
                n += vals[key] >= top * (1 - band)
                launches[strategy] += len(atts)
            got[strategy] = n
            tot[strategy] += n
            inside[strategy] += n if keeps else 0
        if got["adaptive"] < got["sweep"] - 2:
            worse.append((land["name"], got["adaptive"], got["sweep"], "" if keeps else ", outside the model"))
    runs = tunes * len(lands)
    print("   cv %.1f %% (%s): winner within the band (%.1f %%) of the true best: adaptive %d/%d, sweep %d/%d; "
          "launches per tune %.1f vs %.1f; landscapes where adaptive is more than 2/%d worse: %d%s" % (
              cv * 100, "told: mtp_tune_noise %.3f" % noise if told else "not told: floor 1.5 %, 1 noise launch",
              band * 100, tot["adaptive"], runs, tot["sweep"], runs, launches["adaptive"] / float(runs),
              launches["sweep"] / float(runs), tunes, len(worse),
              (" (" + "; ".join("%s %d vs %d%s" % w for w in worse) + ")") if worse else ""))
    print("      on the %d landscapes that keep the model (keeps_model): adaptive %d/%d, sweep %d/%d" % (
        inside["lands"], inside["adaptive"], inside["lands"] * tunes, inside["sweep"], inside["lands"] * tunes))


# --------------------------------------------------------------------------- fit benchmark

KIND_CLASS = {"kv": "oom_kv_cache", "hybrid_state": "oom_hybrid_state", "hybrid_reqs": "oom_hybrid_state",
              "weights_budget": "oom_weights", "graph": "cuda_graph_capture"}


def fit_bench(profile="rtx-pro-6000-x4", model_path="Qwen/Qwen3.5-122B-A10B", tp=4, mem_fraction=None,
              allow_capped=False, gpu_mib=None, no_radix=False):
    """Fit search against the simulator's memory model, resolved like the sim server resolves a launch."""
    from sglang_sim import server_args
    prof = config.PROFILES[profile]
    gpu = {"memory_mib": gpu_mib or prof["memory_mib"], "reserved_mib": prof.get("reserved_mib", 0), "index": 0}
    _key, model = config.lookup_model(model_path)
    print("\nFit search on the simulator's memory model (%s%s, %s, tp %d%s%s)" % (
        profile, " at %d MiB" % gpu_mib if gpu_mib else "", model_path, tp,
        ", mem-fraction-static %s" % mem_fraction if mem_fraction else "", ", capped allowed" if allow_capped else "")
        + (", --disable-radix-cache" if no_radix else ""))

    caps = {}

    def starts(steps, mrr, bs):
        argv = ["--model-path", model_path, "--tp", str(tp), "--speculative-algorithm", "EAGLE",
                "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", str(steps + 1)]
        if mrr is not None:
            argv += ["--max-running-requests", str(mrr)]
        if bs is not None:
            argv += ["--cuda-graph-max-bs-decode", str(bs)]
        if mem_fraction is not None:
            argv += ["--mem-fraction-static", str(mem_fraction)]
        if no_radix:
            argv += ["--disable-radix-cache"]
        args, _warn = server_args.resolve(server_args.parse(argv), gpu["memory_mib"], model=model)
        try:
            p = memory.plan(gpu, model, args, capture_bs=server_args.capture_batch_sizes(
                args["cuda_graph_max_bs_decode"], True))
            caps[steps] = p.get("max_running_requests")
            return None
        except memory.OOMError as exc:
            return KIND_CLASS.get(exc.kind, "cuda_oom")

    # The plan as the role builds it for the unit: without the radix cache the weights and
    # hybrid-state classes get the running-request lever by default.
    plan = NEW.mtp_tune_fit_ladder(None, None, 4, 32, 512, 48, allow_capped=allow_capped, radix_cache=not no_radix)
    print("levers: %s" % ", ".join("%s -> %s" % (cls, lev or "none") for cls, lev in sorted(plan["levers"].items())))
    print("fit floor: max-running-requests >= %d (the judged concurrency, throughput at C=32), graph bs >= %d" % (
        plan["mrr_floor"], plan["bs_floor"]))
    print("%5s %-18s %-22s %9s %6s %8s %s"
          % ("steps", "first failure", "lever", "launches", "brute", "log2+1", "largest that starts: found / brute force"))
    all_ok = True
    for steps in range(6, 17):
        cand = NEW.mtp_tune_candidates([steps])[0]
        attempts = []
        for _i in range(40):
            nxt = NEW.mtp_tune_next(attempts, [cand], plan, {"strategy": "sweep", "fit_retry": True})
            if nxt is None:
                break
            ov = nxt["overrides"] or {}
            # The first launch runs at the plan's start (48 running requests, graphs clamped to it).
            cls = starts(steps, ov.get("max_running_requests") or plan["max_running_requests"],
                         ov.get("cuda_graph_max_bs") or plan["cuda_graph_max_bs"])
            attempts.append({"key": cand["key"], "candidate": cand, "overrides": ov, "fit_rung": nxt["fit_rung"],
                             "status": "failed" if cls else "ok", "failure_class": cls})
        first = attempts[0]["failure_class"] or "starts"
        prog = NEW.fit_progress(attempts, plan, NEW.DEFAULT_FIT_CLASSES) if attempts[0]["failure_class"] else None
        lever = prog["lever"] if prog else None
        if not lever:
            capped = caps.get(steps)
            print("%5d %-18s %-22s %9d %6s %8s %s" % (
                steps, first, "-", len(attempts), "-", "-",
                ("starts; SGLang caps running requests at %s%s" % (
                    capped, " (< the judged %d: not a candidate unless allowed)" % plan["judged_floor"]
                    if capped is not None and capped < plan["judged_floor"] else ""))
                if first == "starts" else "no lever: %s" % first))
            continue
        hi = plan[lever]
        floor = plan["mrr_floor"] if lever == "max_running_requests" else plan["bs_floor"]
        brute_v, brute = None, 1
        for v in range(hi - 1, floor - 1, -1):
            brute += 1
            ov = {"max_running_requests": v, "cuda_graph_max_bs": min(v, plan["cuda_graph_max_bs"])} \
                if lever == "max_running_requests" else {"max_running_requests": plan["max_running_requests"],
                                                         "cuda_graph_max_bs": v}
            if starts(steps, ov["max_running_requests"], ov["cuda_graph_max_bs"]) is None:
                brute_v = v
                break
        target = int(math.ceil(math.log2(hi - floor + 1))) + 1
        ok = len(attempts) <= target and prog["ok"] == brute_v
        all_ok &= ok
        print("%5d %-18s %-22s %9d %6d %8d %s / %s%s"
              % (steps, first, lever, len(attempts), brute, target, prog["ok"], brute_v, "" if ok else "  MISSED"))
    print("-- fit search within ceil(log2(range)) + 1 launches and on the brute force's setting: %s"
          % ("yes" if all_ok else "NO"))
    return all_ok


# --------------------------------------------------------------------------- the operator's node, end to end

OPERATOR_NODE = ("rtx-pro-6000-x4", "Qwen/Qwen3.5-122B-A10B", 4)


def operator_start(radix=True, profile=OPERATOR_NODE[0], model_path=OPERATOR_NODE[1], tp=OPERATOR_NODE[2]):
    """``start(steps, mrr, bs) -> (failure class or None, the running-request limit the server runs with)``
    on the simulator's memory model, resolved like the sim server resolves a launch (as fit_bench)."""
    from sglang_sim import server_args
    prof = config.PROFILES[profile]
    gpu = {"memory_mib": prof["memory_mib"], "reserved_mib": prof.get("reserved_mib", 0), "index": 0}
    _key, model = config.lookup_model(model_path)
    seen = {}

    def start(steps, mrr, bs):
        if (steps, mrr, bs) not in seen:
            seen[(steps, mrr, bs)] = _start(steps, mrr, bs)
        return seen[(steps, mrr, bs)]

    def _start(steps, mrr, bs):
        argv = ["--model-path", model_path, "--tp", str(tp), "--speculative-algorithm", "EAGLE",
                "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", str(steps + 1), "--max-running-requests", str(mrr),
                "--cuda-graph-max-bs-decode", str(bs)] + ([] if radix else ["--disable-radix-cache"])
        args, _warn = server_args.resolve(server_args.parse(argv), gpu["memory_mib"], model=model)
        try:
            plan = memory.plan(gpu, model, args, capture_bs=server_args.capture_batch_sizes(
                args["cuda_graph_max_bs_decode"], True))
        except memory.OOMError as exc:
            return KIND_CLASS.get(exc.kind, "cuda_oom"), None
        return None, plan.get("max_running_requests")
    return start


def operator_tune(mod, case, strategy, max_launches=30, starts=None):
    """One tune on the operator's node as the role runs it with mtp_tune_fit_retry on: every launch
    starts on the simulator's memory model (a failure is recorded with its class; a server SGLang
    capped below the judged concurrency as failed ``capped``, mtp_tune_capped) and is measured on its
    throughput model at the running-request limit it really has (sim/sglang_sim/perf.py).

    ``case``: {"objective", "levels", "slo_min_tps", "alpha", "radix", "steps"}. Returns (attempts,
    pick_best, fit plan, candidates, spec)."""
    levels = list(case["levels"])
    floor = 1 if case["objective"] == "latency" else max(levels)
    plan = mod.mtp_tune_fit_ladder(None, None, 4, floor, 512, 48, radix_cache=case["radix"])
    cands = mod.mtp_tune_candidates(list(case["steps"]))
    spec = {"strategy": strategy, "objective": case["objective"], "levels": levels, "seed": 3, "fit_retry": True,
            "slo_min_tps": case.get("slo_min_tps"), "max_launches": max_launches}
    start = starts or operator_start(case["radix"])
    factor = perf.speed_factor(OPERATOR_NODE[0])
    atts = []
    for _i in range(200):
        nxt = next_launch(mod, atts, cands, spec, plan)
        if nxt is None:
            break
        cand, ov = nxt["candidate"], nxt["overrides"] or {}
        mrr = ov.get("max_running_requests") or plan["max_running_requests"]
        cls, cap = start(cand["steps"], mrr, ov.get("cuda_graph_max_bs") or plan["cuda_graph_max_bs"])
        att = {"key": cand["key"], "candidate": cand, "overrides": ov, "fit_rung": nxt["fit_rung"],
               "reason": nxt["reason"], "label": nxt["label"]}
        if cls:
            att.update(status="failed", failure_class=cls)
        elif cap is not None and cap < plan["judged_floor"]:
            att.update(status="failed", failure_class="capped")
        else:
            running = min(cap or mrr, mrr)
            metrics = {}
            for c in levels:
                pr = perf.per_request_tps(c, cand["steps"], case["alpha"], factor, running)
                ag = perf.aggregate_tps(c, cand["steps"], case["alpha"], factor, running)
                metrics[str(c)] = {"output_throughput": ag, "decode_tps_per_request": {"mean": pr, "p50": pr},
                                   "accept_length": perf.expected_accept_length(cand["steps"], case["alpha"]),
                                   "failed": 0, "completed": 4 * c}
            att.update(status="ok", metrics=metrics)
        atts.append(att)
    return atts, pick_best(mod, atts, spec), plan, cands, spec


def _launch_line(atts):
    """``3 2 1 10c 8c 6``: steps per launch, c capped, f failed, * a fit launch."""
    return " ".join("%d%s%s" % (a["candidate"]["steps"], "" if a["status"] == "ok" else (
        "c" if a["failure_class"] == "capped" else "f"), "*" if a.get("fit_rung") else "") for a in atts)


def operator_cases():
    """The operator's node (rtx-pro-6000-x4, Qwen3.5-122B, tp 4) under every objective the role has:
    latency at C=1 and throughput at C=32 over C=1..32, slo (per-request >= 60 or 100 tok/s) over
    C=1..16 (its fit floor 16: with the radix cache on 0.5.23 caps steps 8 and up below it); radix
    cache on and off (off: steps 8 and up leave the weights no KV budget at 48 running requests and
    are fitted); acceptance 0.99 and 0.72; the role's default steps and 1..16."""
    out = []
    for steps in (STEPS, list(range(1, 17))):
        for radix in (True, False):
            for alpha in (perf.ALPHA_SYNTHETIC, perf.ALPHA_REALISTIC):
                for objective, levels, slo in (("latency", LEVELS, None), ("throughput", LEVELS, None),
                                               ("slo", LEVELS[:-1], 60.0), ("slo", LEVELS[:-1], 100.0)):
                    out.append({"objective": objective, "levels": levels, "slo_min_tps": slo, "alpha": alpha,
                                "radix": radix, "steps": steps})
    return out


def _case_name(case):
    return "%s%s a=%.2f radix %s steps %d..%d" % (
        case["objective"], " >= %g tok/s" % case["slo_min_tps"] if case["slo_min_tps"] else "", case["alpha"],
        "on" if case["radix"] else "off", case["steps"][0], case["steps"][-1])


def operator_bench(baselines):
    """Launches on the operator's node, fit search on, per strategy, against other refs' tuners
    (same cases, noise-free): launches, capped and failed launches, fit launches, winners (the same
    where the ref's was right), runs the 30-launch budget ended, and the record's decided_by."""
    cases = operator_cases()
    print("\nThe operator's node end to end (%s, %s, tp %d; fit search on, noise-free): %d cases (%s)" % (
        OPERATOR_NODE + (len(cases), "objective x radix cache x acceptance x steps list")))
    starts = {True: operator_start(True), False: operator_start(False)}
    mods = [("this", NEW)] + list(baselines)
    # the truth: the sweep of the oldest tuner given, with no launch budget (every candidate and every
    # fit search to its end)
    truth_of = [operator_tune(mods[-1][1], case, "sweep", max_launches=None, starts=starts[case["radix"]])[1]
                for case in cases]
    truth_of = [(b["winner"] or {}).get("key") for b in truth_of]
    for strategy in ("climb", "adaptive", "sweep"):
        print("  %s:" % strategy)
        winners = {}
        for label, mod in mods:
            tot = {"launches": 0, "capped": 0, "failed": 0, "fit": 0, "budget": 0, "right": 0}
            winners[label] = []
            for case, truth_key in zip(cases, truth_of):
                atts, best, _plan, _cands, _spec = operator_tune(mod, case, strategy, starts=starts[case["radix"]])
                tot["launches"] += len(atts)
                tot["capped"] += sum(1 for a in atts if a.get("failure_class") == "capped")
                tot["failed"] += sum(1 for a in atts if a["status"] == "failed" and a.get("failure_class") != "capped")
                tot["fit"] += sum(1 for a in atts if a.get("fit_rung"))
                tot["budget"] += len(atts) >= 30
                winners[label].append((best["winner"] or {}).get("key"))
                tot["right"] += winners[label][-1] == truth_key
            same = ""
            if label != "this":
                same = "; the same winner as this checkout's on %d/%d" % (
                    sum(1 for a, b in zip(winners[label], winners["this"]) if a == b), len(cases))
            print("    %-8s launches %4d (capped %3d, failed to start %3d, fit launches %3d); ended by the 30-launch "
                  "budget: %d; winner the unbudgeted sweep's: %d/%d%s" % (
                      label, tot["launches"], tot["capped"], tot["failed"], tot["fit"], tot["budget"], tot["right"],
                      len(cases), same))
    # each of the three wastes and the record, on the case that shows it
    slo = {"objective": "slo", "levels": LEVELS[:-1], "slo_min_tps": 60.0, "alpha": perf.ALPHA_REALISTIC, "radix": True}
    deep = {"levels": LEVELS, "slo_min_tps": None, "alpha": perf.ALPHA_SYNTHETIC, "radix": False, "steps": list(range(1, 17))}
    shown = (("climb under an slo", "climb", dict(slo, steps=STEPS)),
             ("the same, steps 1..16", "climb", dict(slo, steps=list(range(1, 17)))),
             ("fit bisection of what cannot win", "climb", dict(deep, objective="latency")),
             ("the sweep's fit bisections", "sweep", dict(deep, objective="throughput")),
             ("one feasible of several measured", "climb", dict(slo, slo_min_tps=278.0, alpha=perf.ALPHA_SYNTHETIC, steps=STEPS)))
    for what, strategy, case in shown:
        print("  %s (%s, %s):" % (what, strategy, _case_name(case)))
        for label, mod in mods:
            atts, best, _plan, _cands, _spec = operator_tune(mod, case, strategy, starts=starts[case["radix"]])
            winner = (best["winner"] or {}).get("key")
            print("    %-8s %2d launches: %s -> %s (%s)" % (label, len(atts), _launch_line(atts), winner, best["decided_by"]))
    case = shown[3][2]
    atts, _best, plan, cands, spec = operator_tune(NEW, case, "sweep", max_launches=20, starts=starts[False])
    cut = NEW.mtp_tune_cut_short(atts, cands, plan, spec)
    print("  a budget that ends the run (the sweep's case, mtp_tune_max_launches 20): %s" % cut)


def unchanged_bench(baselines, noisy=2, cv=0.025):
    """Whether this checkout's searches launch what another ref's launch on the landscapes above (no
    failure, no slo: what the operator-node fixes must leave alone): per strategy, over the 34
    landscapes, the joint grid's 20 and steps 1..16 on the simulator's 20, noise-free and ``noisy``
    tunes each with untold noise (the same draws for both refs, one noise launch in the last), the tunes
    whose launches (candidate and reason, in order) and winner are the same, and the winners that
    differ: within the band of the true best for each ref."""
    global SEARCH  # pylint: disable=global-statement
    search, SEARCH = SEARCH, "adaptive"  # each strategy by its own name, for both refs
    try:
        _unchanged(baselines, noisy, cv)
    finally:
        SEARCH = search


def _unchanged(baselines, noisy, cv):
    global STEPS  # pylint: disable=global-statement
    for ref, old in baselines:
        print("\nThe same launches as %s where nothing fails (the landscapes above, noise-free and %d noisy tunes "
              "each at cv %.1f %%):" % (ref, noisy, cv * 100))
        for strategy in ("climb", "adaptive", "sweep"):
            same = tunes = 0
            differ = []
            saved = STEPS
            for lands, steps in ((library(), saved), (joint_library(), saved),
                                 ([land for land in library() if land["name"].startswith("sim ")], list(range(1, 17)))):
                STEPS = steps
                try:
                    for li, land in enumerate(lands):
                        vals = truth(land)
                        for t in range(noisy + 1):
                            kw = {"noise_launches": 1} if t == noisy and t else {}
                            got = []
                            for mod in (NEW, old):
                                rng = random.Random("unchanged-%s-%s-%d" % (li, strategy, t)) if t else None
                                atts, key = tune(mod, land, strategy, rng=rng, cv=cv if t else 0.0, **kw)
                                got.append(([(a["key"], a["reason"]) for a in atts], key))
                            tunes += 1
                            if got[0] == got[1]:
                                same += 1
                            else:
                                band = math.sqrt(2) * (2 * cv if t else 0.015)
                                differ.append("%s (%s within the band: %s / %s)" % (
                                    land["name"], "tune %d" % t, vals[got[0][1]] >= max(vals.values()) * (1 - band),
                                    vals[got[1][1]] >= max(vals.values()) * (1 - band)))
                finally:
                    STEPS = saved
            print("   %-8s the same launches and winner on %d of %d tunes%s" % (
                strategy, same, tunes, ("; differ: " + "; ".join(differ)) if differ else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--tunes", type=int, default=20)
    ap.add_argument("--cv", type=float, default=0.025)
    ap.add_argument("--probe-ends", default="high", choices=NEW.PROBE_ENDS)
    ap.add_argument("--strategy", default=NEW.spec_from(None).strategy, choices=("adaptive", "climb"),
                    help="the checkout's search the figures call adaptive (mtp_tune_strategy)")
    ap.add_argument("--baseline", nargs="*", default=["main"],
                    help="git refs whose adaptive search runs on the same landscapes (none: only this checkout's)")
    ap.add_argument("--no-fit", action="store_true")
    ap.add_argument("--operator-only", action="store_true",
                    help="only the operator's node end to end (operator_bench), against --baseline")
    args = ap.parse_args()
    global SEARCH  # pylint: disable=global-statement
    SEARCH = args.strategy
    print("The checkout's search: mtp_tune_strategy %s" % SEARCH)
    if args.operator_only:
        baselines = [(ref, load_baseline(ref)) for ref in args.baseline if load_baseline(ref) is not None]
        operator_bench(baselines)
        unchanged_bench(baselines)
        return
    bench_search(args)
    if not args.no_fit:
        fit_bench()
        fit_bench("h200-x8", "Qwen/Qwen3.5-122B-A10B", 2)
        fit_bench("rtx-pro-6000-x4", "Qwen/Qwen3.5-122B-A10B", 4, gpu_mib=60000)
        fit_bench(no_radix=True)
        baselines = [(ref, load_baseline(ref)) for ref in args.baseline if load_baseline(ref) is not None]
        operator_bench(baselines)
        unchanged_bench(baselines)


if __name__ == "__main__":
    main()
