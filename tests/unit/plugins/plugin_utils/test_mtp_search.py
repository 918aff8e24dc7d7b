"""Unit tests of plugins/plugin_utils/mtp_search.py, moved from tests/unit/plugins/filter/test_mtp_tune.py."""

import random

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import candidate_states
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import mtp_tune_node_noise, mtp_tune_pick_best
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import (
    Lane, mtp_tune_complete, mtp_tune_next, mtp_tune_smoke_levels, narrower_bound, tree_bound)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import (
    mtp_tune_candidates, mtp_tune_levels, spec_from)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_winner import mtp_tune_model_check, mtp_tune_winner
from mtp_tune_cases import _att, _chain, _rounds, _shape, _tps, _tree_att, launch, LEVELS, tune


def test_remeasure_only_the_tied_contenders_within_the_budget():
    cands = mtp_tune_candidates([3, 4])
    atts = [_att(3, {"1": {"decode_tps_per_request": {"mean": 100.0}, "failed": 0}}),
            _att(4, {"1": {"decode_tps_per_request": {"mean": 101.0}, "failed": 0}})]
    assert mtp_tune_next(atts, cands, spec={"strategy": "sweep"}) is None  # no budget: no re-measurement
    nxt = mtp_tune_next(atts, cands, spec={"strategy": "sweep", "remeasure_launches": 1})
    assert nxt["reason"].startswith("remeasure 1/1") and nxt["candidate"]["key"] in ("s3-k1-d4", "s4-k1-d5")
    atts.append(dict(_att(nxt["candidate"]["steps"], {"1": {"decode_tps_per_request": {"mean": 100.5}, "failed": 0}}),
                     reason=nxt["reason"]))
    assert mtp_tune_next(atts, cands, spec={"strategy": "sweep", "remeasure_launches": 1}) is None  # budget spent
    clear = atts[:1] + [_att(4, {"1": {"decode_tps_per_request": {"mean": 120.0}, "failed": 0}})]
    assert mtp_tune_next(clear, cands, spec={"strategy": "sweep", "remeasure_launches": 3}) is None  # nothing overlaps


def test_sweep_with_fit_retry_recovers_steps_10():
    atts, best = tune("sweep", "latency", fit_retry=True)
    s10 = [a for a in atts if a["key"] == "s10-k1-d11"]
    assert s10[0]["status"] == "failed" and s10[-1]["status"] == "ok"
    assert best["winner"]["key"] == "s4-k1-d5"  # it fits, but it does not win


@pytest.mark.parametrize("objective,winner", [("latency", "s4-k1-d5"), ("throughput", "s3-k1-d4")])
def test_adaptive_picks_the_sweep_winner_with_fewer_launches(objective, winner):
    sweep_atts, sweep_best = tune("sweep", objective)
    adapt_atts, adapt_best = tune("adaptive", objective)
    assert sweep_best["winner"]["key"] == winner
    assert adapt_best["winner"]["key"] == winner
    assert len(sweep_atts) == 8  # every candidate once; steps=10 fails (no fit-retry)
    assert len(adapt_atts) < len(sweep_atts)


@pytest.mark.parametrize("name,values,best", [
    ("slow climb to 8", [100, 101.5, 103, 104.5, 106, 107.5, 110.5, 104], 8),
    ("two peaks at 2 and 8", [80, 100, 95, 90, 88, 92, 107, 98], 8),
    ("3 ~ 4 above an optimum at 1", [110, 100, 99, 99.5, 97, 95, 92, 90], 1),
    ("monotone down", [142, 134, 126, 118, 110, 102, 86, 70], 1),
    ("optimum at the dear end", [60, 70, 78, 84, 88, 91, 95, 100], 10),
])
def test_adaptive_finds_the_best_where_the_old_climb_stopped(name, values, best):
    _atts, got = _shape(values)
    assert got == best, name


@pytest.mark.parametrize("values", [
    [95, 105, 110, 111, 111.5, 111, 104, 96],
    [100, 118, 112, 120, 126, 119, 108, 98],
    [130, 140, 138, 136, 133, 130, 124, 118],
    [110, 100, 99, 99.5, 97, 95, 92, 90],
])
def test_adaptive_ends_on_a_measured_local_optimum(values):
    """Whatever the model predicted, the winner's neighbours in the list were measured, and so were
    the neighbours of every candidate within the band of the top."""
    steps = [1, 2, 3, 4, 5, 6, 8, 10]
    atts, got = _shape(values)
    measured = set(a["candidate"]["steps"] for a in atts)
    top = max(values)
    i = steps.index(got)
    assert values[i] >= top * (1 - 2 ** 0.5 * 0.015)
    near = [j for j, v in enumerate(values) if j in [steps.index(m) for m in measured]
            and v >= max(values[steps.index(m)] for m in measured) * (1 - 2 ** 0.5 * 0.015)]
    for j in near:
        for k in (j - 1, j + 1):
            if 0 <= k < len(steps):
                assert steps[k] in measured, (values, sorted(measured))


def test_adaptive_jumps_where_the_model_predicts_a_gain():
    """A monotone climb: after the seed and the dear end, the model predicts nothing in between
    above the end, so only the end's neighbour is verified (no walk up the list)."""
    atts, got = _shape([105, 110, 115, 120, 125, 130, 140, 150])
    assert got == 10
    assert [a["candidate"]["steps"] for a in atts] == [3, 10, 8]


def test_adaptive_keeps_searching_after_a_small_gain():
    """A step up that gains less than the old min_gain no longer ends the search."""
    cands = mtp_tune_candidates([1, 2, 3, 4, 5])
    atts = [_att(3, {"1": {"decode_tps_per_request": {"mean": 90.0}, "failed": 0}}),
            _att(4, {"1": {"decode_tps_per_request": {"mean": 90.5}, "failed": 0}})]
    assert mtp_tune_next(atts, cands, spec={"strategy": "adaptive"}) is not None


def test_adaptive_bounds_prune_what_cannot_win():
    """Convex round times on a chain draft: after the seed, the dear end and the neighbours the
    bounds leave open, the rest is proved unable to win and never launched."""
    atts, got = _shape([100, 128, 145, 172, 150, 135, 120, 105])
    assert got == 4 and len(atts) < 8
    assert atts[0]["reason"] == "adaptive: seed" and "dearest end" in atts[1]["reason"]
    with pytest.raises(AnsibleFilterError, match="mtp_tune_probe_ends"):
        mtp_tune_next([], mtp_tune_candidates([3]), spec={"strategy": "adaptive", "probe_ends": "middle"})


def test_adaptive_skips_candidates_a_cheaper_failure_proves_cannot_fit():
    cands = mtp_tune_candidates([3, 8, 10])
    # Hypothetical node where 8 already OOMs at every rung: 10 must not be launched.
    atts = [launch({"candidate": cands[0], "overrides": {}, "fit_rung": None}),
            {"key": "s8-k1-d9", "candidate": cands[1], "status": "failed", "failure_class": "oom_kv_cache"}]
    # 3 is the seed, 8 failed above it (so the climb would stop anyway); a climb from 8 itself:
    assert mtp_tune_next(atts, cands, spec={"strategy": "adaptive", "seed": 3}) is None
    atts2 = [{"key": "s8-k1-d9", "candidate": cands[1], "status": "failed", "failure_class": "oom_kv_cache"}]
    nxt = mtp_tune_next(atts2, cands, spec={"strategy": "adaptive", "seed": 8})
    assert nxt["candidate"]["steps"] == 3  # walks down, never up into 10
    assert mtp_tune_next(atts2, cands, spec={"strategy": "sweep", "seed": 8})["candidate"]["steps"] == 3


def test_adaptive_seed_failure_walks_down():
    cands = mtp_tune_candidates([1, 2, 3, 4])
    atts = [{"key": "s3-k1-d4", "candidate": cands[2], "status": "failed", "failure_class": "oom_kv_cache"}]
    assert mtp_tune_next(atts, cands, spec={"strategy": "adaptive"})["candidate"]["steps"] == 2


def test_adaptive_seed_not_in_list_uses_nearest_and_max_launches_bounds():
    cands = mtp_tune_candidates([2, 6, 10])
    assert mtp_tune_next([], cands, spec={"strategy": "adaptive", "seed": 3})["candidate"]["steps"] == 2
    atts = [launch({"candidate": cands[0], "overrides": {}, "fit_rung": None})]
    assert mtp_tune_next(atts, cands, spec={"strategy": "adaptive", "max_launches": 1}) is None
    atts[0]["resumed"] = True  # resumed records are not launches of this run
    assert mtp_tune_next(atts, cands, spec={"strategy": "adaptive", "max_launches": 1}) is not None


def test_adaptive_slo_objective_matches_sweep():
    kw = {"slo_min_tps": 60.0, "slo_max_ttft_p99_ms": 2000}
    s_atts, s_best = tune("sweep", "slo", **kw)
    a_atts, a_best = tune("adaptive", "slo", **kw)
    assert a_best["winner"]["key"] == s_best["winner"]["key"]
    assert len(a_atts) < len(s_atts)


def test_adaptive_agrees_with_sweep_under_noise():
    """Benchmark noise (CV 1 %): adaptive and sweep runs agree on the winner, or their winners
    are statistically tied (what §8 counts as agreement)."""
    agree = 0
    for seed in range(20):
        for objective in ("latency", "throughput"):
            _sw_attempts, sw = tune("sweep", objective, rng=random.Random(seed), cv=0.01)
            _ad_attempts, ad = tune("adaptive", objective, rng=random.Random(1000 + seed), cv=0.01)
            truth = {"latency": "s4-k1-d5", "throughput": "s3-k1-d4"}[objective]
            if ad["winner"]["key"] == sw["winner"]["key"] or ad["winner"]["key"] in sw["tied"] + [truth]:
                agree += 1
    assert agree >= 38, agree


def test_unknown_strategy():
    cands = mtp_tune_candidates([3])
    with pytest.raises(AnsibleFilterError, match="mtp_tune_strategy must be one of sweep, adaptive, climb, got 'random'"):
        mtp_tune_next([], cands, spec={"strategy": "random"})


def _sim_tune(strategy, objective, perf, rng=None):
    """Drive the search with the simulator's calibrated throughput model (default profile).

    With ``rng`` every figure of every launch gets the sim's own noise drawn from it: give each
    run its own generator, so that two strategies never share a measurement.
    """
    def sim_bench(cand):
        out = {}
        for c in LEVELS:
            pr = perf.per_request_tps(c, cand["steps"])
            ag = perf.aggregate_tps(c, cand["steps"])
            acc = perf.expected_accept_length(cand["steps"])
            if rng is not None:
                pr, ag, acc = perf.noisy(rng, pr), perf.noisy(rng, ag), perf.noisy(rng, acc, 0.005)
            out[str(c)] = {"output_throughput": ag, "decode_tps_per_request": {"mean": pr, "p50": pr},
                           "accept_length": acc, "failed": 0, "ci": None}
        return out

    cands = mtp_tune_candidates([1, 2, 3, 4, 5, 6, 8, 10])
    attempts = []
    while True:
        nxt = mtp_tune_next(attempts, cands, spec={"strategy": strategy, "objective": objective})
        if nxt is None:
            break
        cand = nxt["candidate"]
        if cand["steps"] >= 10:  # the sim's default profile: OOM at init with graph bs 512
            attempts.append({"key": cand["key"], "candidate": cand, "status": "failed",
                             "failure_class": "oom_kv_cache"})
        else:
            attempts.append({"key": cand["key"], "candidate": cand, "status": "ok", "metrics": sim_bench(cand)})
    return attempts, mtp_tune_pick_best(attempts, {"objective": objective})


@pytest.mark.parametrize("objective,winner", [("latency", "s4-k1-d5"), ("throughput", "s3-k1-d4")])
def test_sim_default_profile_adaptive_matches_sweep(objective, winner):
    perf = pytest.importorskip("sglang_sim.perf", reason="the simulator package (sim/) is not importable")
    sweep, sweep_best = _sim_tune("sweep", objective, perf)
    adapt, adapt_best = _sim_tune("adaptive", objective, perf)
    assert sweep_best["winner"]["key"] == adapt_best["winner"]["key"] == winner
    assert len(adapt) < len(sweep) == 8


@pytest.mark.parametrize("objective,winner,most", [("latency", "s4-k1-d5", 4), ("throughput", "s3-k1-d4", 3)])
def test_climb_on_the_simulator_takes_the_sweep_winner_and_leaves_nothing_open(objective, winner, most):
    """The simulator keeps the stated model: the climb walks from the seed to the peak, measures its
    neighbours, and the bounds then rule out the rest (no dear-end probe, no jump)."""
    perf = pytest.importorskip("sglang_sim.perf", reason="the simulator package (sim/) is not importable")
    adapt, _best = _sim_tune("adaptive", objective, perf)
    climb, best = _sim_tune("climb", objective, perf)
    assert best["winner"]["key"] == winner
    assert len(climb) <= most < len(adapt)
    assert all(a["candidate"]["steps"] < 10 for a in climb)
    cands = mtp_tune_candidates([1, 2, 3, 4, 5, 6, 8, 10])
    assert mtp_tune_winner(climb, {"objective": objective}, candidates=cands)["unverified"] == []
    assert all(str(mtp_tune_next(climb[:i], cands, spec={"strategy": "climb", "objective": objective})["reason"])
               .startswith(("adaptive: seed", "climb: ")) for i in range(len(climb)))


def test_climb_on_a_long_list_launches_where_a_guess_closes_the_most():
    """Steps 1..16 at acceptance 0.99, the verify round dearer by 2.2-2.3 units a draft token from
    steps 5 on (0.3 below): a peak at 4 with near-ties behind it. The climb measures the ties'
    neighbours (3..7), then what the noise still leaves open far up the list is closed by one launch
    (the candidate whose predicted figure would leave the fewest open), not walked: 6 launches,
    where adaptive probes 16 and walks down the near-ties to 4 (12)."""
    steps = list(range(1, 17))
    alpha = 0.99
    rounds = dict((k, 10 + 0.3 * k if k <= 4 else 13.4 + 2.3 * (k - 5)) for k in steps)
    values = [_chain(k, alpha) / rounds[k] * 1000.0 for k in steps]
    atts, got = _shape(values, steps=steps, alpha=alpha, strategy="climb")
    assert got == 4
    reasons = [a["reason"] for a in atts]
    assert sum(1 for r in reasons if r.startswith("climb: could reach")) == 1
    cands = mtp_tune_candidates(steps)
    assert mtp_tune_winner(atts, {"objective": "latency"}, candidates=cands)["unverified"] == []
    assert len(atts) <= 6 < len(_shape(values, steps=steps, alpha=alpha)[0]), reasons


def test_climb_falls_back_to_launching_where_the_launches_break_the_model():
    """A round that gets faster with depth (outside the model) switches the bounds off: the climb
    launches what they would have excluded and finds the optimum at 1 past the shoulder at 3-4."""
    atts, got = _shape([110, 100, 99, 99.5, 97, 95, 92, 90], strategy="climb")
    assert got == 1
    cands = mtp_tune_candidates([1, 2, 3, 4, 5, 6, 8, 10])
    assert not mtp_tune_model_check(atts, cands, {"objective": "latency"})["holds"]


def test_climb_replays_the_real_h200_sweep_like_the_sweep():
    """tests/fixtures/real-sglang/live/tune_sweep.json replayed (SGLang 0.5.17, self-draft, steps
    1..8 at C=1, one launch each): its rounds get faster with depth beyond the 1.5 % noise floor,
    so the climb's bounds fall back and it launches all eight, ending on the sweep's winner; the
    adaptive search, which probes and predicts, ends after five with three left open."""
    import json
    import os
    live = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "real-sglang", "live")
    with open(os.path.join(live, "tune_sweep.json")) as f:
        by_key = dict((a["key"], dict(a, resumed=False)) for a in json.load(f)["attempts"])
    cands = mtp_tune_candidates(list(range(1, 9)))
    out = {}
    for strategy in ("sweep", "adaptive", "climb"):
        atts = []
        while True:
            nxt = mtp_tune_next(atts, cands, spec={"strategy": strategy})
            if nxt is None:
                break
            atts.append(by_key[nxt["candidate"]["key"]])
        out[strategy] = (len(atts), mtp_tune_winner(atts, candidates=cands))
    assert out["climb"][0] == out["sweep"][0] == 8
    assert out["climb"][1]["key"] == out["sweep"][1]["key"] == "s5-k1-d6"
    assert not out["climb"][1]["model"]["holds"] and out["climb"][1]["unverified"] == []
    assert out["adaptive"][0] < 8 and out["adaptive"][1]["unverified"]


def test_climb_misses_a_second_peak_the_model_forbids():
    """What the climb gives up against adaptive: a second, higher peak (outside the model, where
    the figure is single-peaked) beyond a valley its launches never reach goes unseen; adaptive's
    dear-end probe finds it."""
    values = [80, 100, 95, 90, 88, 92, 107, 98]
    _atts, got = _shape(values, strategy="climb")
    assert got == 2
    assert _shape(values)[1] == 8


def test_sim_default_profile_with_its_noise_adaptive_agrees_with_sweep():
    """Per-figure noise of 1.2 % (the sim's own), drawn independently for every run: the
    adaptive winner is within the tie band of the true best about as often as the sweep's, and
    an adaptive run agrees with a sweep (same winner or winners within the band) about as often
    as two sweeps with their own noise agree with each other."""
    perf = pytest.importorskip("sglang_sim.perf", reason="the simulator package (sim/) is not importable")
    band = 2 ** 0.5 * 0.015
    truth = {}
    for objective in ("latency", "throughput"):
        _a, best = _sim_tune("sweep", objective, perf)
        truth[objective] = dict((r["key"], r["score"]["value"]) for r in best["ranking"] if r["score"]["value"])
    within = {"sweep": 0, "adaptive": 0}
    agree = {"sweep/sweep": 0, "adaptive/sweep": 0}
    runs = 0
    for seed in range(50):
        for objective in ("latency", "throughput"):
            vals = truth[objective]
            top = max(vals.values())
            keys = {}
            for i, strategy in enumerate(("sweep", "sweep2", "adaptive")):
                _atts, best = _sim_tune(strategy.rstrip("2"), objective, perf,
                                        random.Random("%d-%s-%d" % (seed, objective, i)))
                keys[strategy] = best["winner"]["key"]
            for strategy in ("sweep", "adaptive"):
                within[strategy] += vals[keys[strategy]] >= top * (1 - band)
            agree["sweep/sweep"] += abs(vals[keys["sweep"]] / vals[keys["sweep2"]] - 1) <= band
            agree["adaptive/sweep"] += abs(vals[keys["sweep"]] / vals[keys["adaptive"]] - 1) <= band
            runs += 1
    assert within["adaptive"] >= 0.85 * runs and within["adaptive"] >= within["sweep"] - 5, within
    assert agree["adaptive/sweep"] >= agree["sweep/sweep"] - 8, agree


@pytest.mark.parametrize("strategy", ["sweep", "adaptive"])
def test_noise_launches_relaunch_the_first_setting_before_the_search_goes_on(strategy):
    cands = mtp_tune_candidates([1, 2, 3, 4, 5])
    first = mtp_tune_next([], cands, spec={"strategy": strategy, "noise_launches": 2})
    assert first["reason"] in ("sweep", "adaptive: seed")
    atts = [dict(_tps(first["candidate"]["steps"], 100.0), reason=first["reason"])]
    for n, value in ((1, 80.0), (2, 90.0)):
        nxt = mtp_tune_next(atts, cands, spec={"strategy": strategy, "noise_launches": 2})
        assert nxt["reason"].startswith("noise %d/2: %s again" % (n, first["candidate"]["key"]))
        assert nxt["candidate"] == first["candidate"] and nxt["overrides"] == {}
        atts.append(dict(_tps(first["candidate"]["steps"], value), reason=nxt["reason"]))
    after = mtp_tune_next(atts, cands, spec={"strategy": strategy, "noise_launches": 2})
    assert not after["reason"].startswith("noise")
    # the three launches now set the noise every later decision uses
    assert mtp_tune_node_noise(atts)["measured"] == pytest.approx(1 / 9.0)  # 100, 80, 90: +-10 of 90
    # without the option, or before anything measured, nothing is relaunched
    assert not mtp_tune_next(atts[:1], cands, spec={"strategy": strategy})["reason"].startswith("noise")
    failed = [dict(atts[0], status="failed", failure_class="cuda_oom")]
    assert not (mtp_tune_next(failed, cands, spec={"strategy": strategy, "noise_launches": 2}) or {}).get("reason", "").startswith("noise")
    with pytest.raises(Exception, match="mtp_tune_noise_launches"):
        mtp_tune_next(atts[:1], cands, spec={"strategy": strategy, "noise_launches": "lots"})


def _only(metrics, levels):
    return dict((k, v) for k, v in metrics.items() if int(k) in levels)


def tune_judged(objective, levels, steps=(1, 2, 3, 4, 5, 6, 8, 10), level=None, max_launches=None, rng=None,
                cv=0.0, strategy="adaptive", **kw):
    """The role's loop with mtp_tune_search_levels=judged: the search's launches benchmark the
    plan's search levels, then mtp_tune_complete relaunches contenders at every level."""
    plan = mtp_tune_levels(list(levels), objective, level)
    cands = mtp_tune_candidates(list(steps))
    # one spec for every decision, as the role's _mtp_tune_spec
    spec = dict(kw, objective=objective, level=plan["level"], levels=plan["levels"], strategy=strategy, seed=3,
                max_launches=max_launches)
    attempts = []
    for _round in range(60):
        nxt = mtp_tune_next(attempts, cands, spec=spec)
        if nxt is None and plan["search"] != plan["levels"]:
            nxt = mtp_tune_complete(attempts, spec)
        if nxt is None:
            break
        att = launch(nxt, rng, cv)
        att["reason"] = nxt["reason"]
        if att["status"] == "ok":
            att["metrics"] = _only(att["metrics"], nxt.get("levels") or plan["search"])
        attempts.append(att)
    else:
        pytest.fail("search did not terminate")
    best = mtp_tune_pick_best(attempts, spec)
    return plan, attempts, best


@pytest.mark.parametrize("objective,strategy", [("latency", "adaptive"), ("throughput", "adaptive"),
                                                ("latency", "sweep")])
def test_judged_search_finds_the_all_level_winner_and_completes_its_table(objective, strategy):
    """Searching at the judged level alone decides as searching at every level did (the other
    levels never enter a decision), then the winner is launched once more and measured at all."""
    levels = (1, 4, 16, 32)
    kw = dict(steps=(1, 2, 3, 4, 5, 6, 8))
    plan, attempts, best = tune_judged(objective, levels, strategy=strategy, **kw)
    full_attempts, full_best = tune(strategy, objective, steps=kw["steps"], level=plan["level"])
    searched = [a for a in attempts if not a["reason"].startswith("levels ")]
    assert [a["key"] for a in searched] == [a["key"] for a in full_attempts]
    searched_winner = mtp_tune_pick_best(searched, {"objective": objective, "level": plan["level"]})["winner"]["key"]
    assert searched_winner == full_best["winner"]["key"]
    # the completing launches are measurements too: two launches narrow a contender's band, so a
    # tie of the search may be decided by them (the final winner has its table all the same)
    assert any(a["key"] == best["winner"]["key"] and len(a["metrics"]) == len(levels) for a in attempts
               if a["status"] == "ok")
    assert all(set(a["metrics"]) == {str(plan["level"])} for a in searched if a["status"] == "ok")
    completing = [a for a in attempts if a["reason"].startswith("levels ")]
    assert completing and completing[0]["key"] == searched_winner
    assert set(completing[0]["metrics"]) == set(str(c) for c in levels)
    # every contender tied with the winner got its table too, each once
    for key in [best["winner"]["key"]] + best["tied"]:
        assert sum(1 for a in completing if a["key"] == key) == 1
    # benchmark work (level runs): the search's plus the completing launches', against every level at
    # every launch; here 13/20, 8/16 and 15/28 (each completing launch also costs a model load)
    runs = sum(len(a["metrics"]) for a in attempts if a["status"] == "ok")
    assert runs <= 0.7 * sum(len(a["metrics"]) for a in full_attempts if a["status"] == "ok")


def test_complete_stops_at_the_launch_budget_and_never_repeats_a_failed_completion():
    cands = mtp_tune_candidates([3, 4])
    a3 = launch({"candidate": cands[0], "overrides": {}, "fit_rung": None})
    a4 = launch({"candidate": cands[1], "overrides": {}, "fit_rung": None})
    for a in (a3, a4):
        a["metrics"] = _only(a["metrics"], (1,))
    nxt = mtp_tune_complete([a3, a4], {"levels": [1, 4, 16], "objective": "latency", "level": 1})
    assert nxt["candidate"]["key"] == "s4-k1-d5" and nxt["levels"] == [1, 4, 16]
    assert nxt["reason"].startswith("levels C=1,4,16: s4-k1-d5, the winner") and "(levels C=1,4,16" in nxt["label"]
    assert mtp_tune_complete([a3, a4], {"levels": [1, 4, 16], "objective": "latency", "level": 1, "max_launches": 2}) is None
    failed = {"key": "s4-k1-d5", "candidate": cands[1], "overrides": {}, "status": "failed",
              "failure_class": "crash", "reason": nxt["reason"]}
    assert mtp_tune_complete([a3, a4, failed], {"levels": [1, 4, 16], "objective": "latency", "level": 1}) is None
    # already measured at every level (a search at every level, or a resumed table): nothing to complete
    b4 = launch({"candidate": cands[1], "overrides": {}, "fit_rung": None})
    assert mtp_tune_complete([a3, b4], {"levels": [1, 4, 16, 32], "objective": "latency", "level": 1}) is None
    # nothing measured yet, or nothing to complete
    assert mtp_tune_complete([], {"levels": [1, 4], "objective": "latency", "level": 1}) is None
    assert mtp_tune_complete([a3, a4], {"levels": [], "objective": "latency", "level": 1}) is None


def test_complete_measures_the_tied_contenders_after_the_winner():
    cands = mtp_tune_candidates([4, 5])
    a4 = launch({"candidate": cands[0], "overrides": {}, "fit_rung": None})
    a5 = launch({"candidate": cands[1], "overrides": {}, "fit_rung": None})
    for a in (a4, a5):
        a["metrics"] = _only(a["metrics"], (1,))
    # steps 4 and 5 are 1.8 % apart at C=1: a tie at the default band, the cheaper 4 wins
    first = mtp_tune_complete([a4, a5], {"levels": [1, 16], "objective": "latency", "level": 1})
    assert first["candidate"]["key"] == "s4-k1-d5" and "the winner" in first["reason"]
    done4 = dict(launch(first), reason=first["reason"])
    second = mtp_tune_complete([a4, a5, done4], {"levels": [1, 16], "objective": "latency", "level": 1})
    assert second["candidate"]["key"] == "s5-k1-d6" and "tied with the winner" in second["reason"]
    done5 = dict(launch(second), reason=second["reason"])
    assert mtp_tune_complete([a4, a5, done4, done5], {"levels": [1, 16], "objective": "latency", "level": 1}) is None


def test_complete_leaves_the_winner_to_the_converge_and_completes_its_ties():
    """With the converge on, the winner's table is the converged server's smoke (no launch of its
    own); a tie is still launched again, before the converge."""
    cands = mtp_tune_candidates([4, 5])
    a4 = launch({"candidate": cands[0], "overrides": {}, "fit_rung": None})
    a5 = launch({"candidate": cands[1], "overrides": {}, "fit_rung": None})
    for a in (a4, a5):
        a["metrics"] = _only(a["metrics"], (1,))
    spec = {"levels": [1, 16], "objective": "latency", "level": 1, "converge": True}
    # steps 4 and 5 tie at C=1 (1.8 % apart), the cheaper 4 wins: only 5 is launched again
    first = mtp_tune_complete([a4, a5], spec)
    assert first["candidate"]["key"] == "s5-k1-d6" and "tied with the winner" in first["reason"]
    done5 = dict(launch(first), reason=first["reason"])
    assert mtp_tune_complete([a4, a5, done5], spec) is None
    winner = mtp_tune_winner([a4, a5, done5], spec)
    # the winner was measured at C=1 only: its smoke measures both levels; judged alone once complete
    assert mtp_tune_smoke_levels(winner, [a4, a5, done5], spec) == [1, 16]
    assert mtp_tune_smoke_levels(winner, [a4, a5, done5], dict(spec, converge=False)) == [1]
    full4 = launch({"candidate": cands[0], "overrides": {}, "fit_rung": None})
    assert mtp_tune_smoke_levels(winner, [a4, a5, full4], spec) == [1]
    # another setting of the same candidate (a fitted one) does not complete the winner's table
    fitted = dict(full4, overrides={"cuda_graph_max_bs": 8})
    assert mtp_tune_smoke_levels(winner, [a4, a5, fitted], spec) == [1, 16]
    assert mtp_tune_smoke_levels(None, [a4], spec) == [] and mtp_tune_smoke_levels({}, [], spec) == []
    # a winner without a judged level (nothing to compare) is measured at every level
    assert mtp_tune_smoke_levels({"key": "s4-k1-d5", "score": {}}, [], spec) == [1, 16]


def test_judged_search_with_the_converge_launches_one_fewer_and_ends_with_the_same_winner():
    """The role's loop with the converge on: the same search, one completing launch fewer (the
    winner's), and the winner's smoke measuring every level. The winner is then measured once less:
    a near-tie that two completing launches split (both measured twice, a narrower band; steps 5
    leads 4 by 1.8 % at C=1) stays a tie, and the cheaper of the two wins, within the band of the
    other."""
    levels = (1, 4, 16, 32)
    for objective in ("latency", "throughput"):
        _plan, off, best_off = tune_judged(objective, levels)
        plan, on, best_on = tune_judged(objective, levels, converge=True)
        search_off = [a["key"] for a in off if not a["reason"].startswith("levels ")]
        assert [a["key"] for a in on if not a["reason"].startswith("levels ")] == search_off
        completing_off = [a["key"] for a in off if a["reason"].startswith("levels ")]
        completing_on = [a["key"] for a in on if a["reason"].startswith("levels ")]
        assert completing_off[0] == mtp_tune_pick_best(
            [a for a in off if not a["reason"].startswith("levels ")], {"objective": objective, "level": plan["level"]}
        )["winner"]["key"]
        assert len(completing_on) == len(completing_off) - 1 and set(completing_on) <= set(completing_off)
        assert best_on["winner"]["key"] == best_off["winner"]["key"] or best_on["winner"]["key"] in best_off["tied"] \
            or best_off["winner"]["key"] in best_on["tied"]
        winner = mtp_tune_winner(on, dict(objective=objective, level=plan["level"], levels=plan["levels"]))
        assert mtp_tune_smoke_levels(winner, on, {"levels": plan["levels"], "converge": True}) == list(levels)


def test_judged_search_under_noise_stays_bounded_and_completes_the_final_winner():
    """With launch noise the completing launch moves the pooled figure and may change the winner;
    the new winner is completed in turn, and the loop ends."""
    for seed in range(12):
        rng = random.Random(seed)
        plan, attempts, best = tune_judged("latency", (1, 16, 32), rng=rng, cv=0.03)
        keys = [a["key"] for a in attempts if a["reason"].startswith("levels ")]
        assert len(keys) == len(set(keys))
        win = best["winner"]["key"]
        assert any(a["key"] == win and len(a["metrics"]) == 3 for a in attempts if a["status"] == "ok")


def test_a_tree_is_bounded_by_the_chain_and_by_smaller_drafts():
    """A tree of depth s accepts at most s + 1 tokens a round, and its round takes at least the
    chain's of that depth and any smaller draft's (no more steps, topk or draft tokens): the bound
    is (s + 1) / the slowest such round, less the noise."""
    cands = mtp_tune_candidates([3, 4, 5], topk=[1, 2], draft_tokens=[6, 8])
    by = dict((c["key"], c) for c in cands)
    atts = _rounds({3: 10.0, 4: 11.0, 5: 12.5})
    spec = spec_from({"objective": "latency", "level": 1})
    states = candidate_states(atts)
    chain = Lane([c for c in cands if c["topk"] == 1], states, spec)
    # from the chain's measured depth 4 (11 ms a round): 5 tokens / (11 ms x 0.985)
    assert chain.bound_wider(by["s4-k2-d6"]) == pytest.approx(5 / 0.011 / 0.985)
    assert narrower_bound(by["s4-k2-d6"], states, spec) == pytest.approx(5 / 0.011 / 0.985)
    assert narrower_bound(by["s5-k2-d8"], states, spec) == pytest.approx(6 / 0.0125 / 0.985)
    # a launched tree of depth 4 (14 ms) bounds the wider and deeper trees, not a shallower one
    atts.append(_tree_att(by["s4-k2-d6"], 14.0, 4.2))
    states = candidate_states(atts)
    assert narrower_bound(by["s4-k2-d8"], states, spec) == pytest.approx(5 / 0.014 / 0.985)
    assert narrower_bound(by["s5-k2-d8"], states, spec) == pytest.approx(6 / 0.014 / 0.985)
    assert narrower_bound(by["s5-k2-d6"], states, spec) == pytest.approx(6 / 0.014 / 0.985)
    assert narrower_bound(by["s3-k2-d6"], states, spec) == pytest.approx(4 / 0.010 / 0.985)
    # a launch of the same steps and topk with more draft tokens verifies a superset of the nodes:
    # its accept length (plus the noise) caps the narrower budget's, below steps + 1
    atts.append(_tree_att(by["s5-k2-d8"], 16.0, 4.4))
    states = candidate_states(atts)
    assert narrower_bound(by["s5-k2-d6"], states, spec) == pytest.approx(4.4 * 1.015 / 0.014 / 0.985)
    # not across depths: a shallower tree with a larger budget expands other nodes
    atts.append(_tree_att(by["s4-k2-d8"], 15.0, 3.0))
    assert narrower_bound(by["s5-k2-d6"], candidate_states(atts), spec) == pytest.approx(4.4 * 1.015 / 0.014 / 0.985)
    # the tighter of the two; nothing for a chain, or for the slo objective's several figures
    assert tree_bound(by["s4-k2-d8"], chain, states, spec) == pytest.approx(5 / 0.014 / 0.985)
    assert tree_bound(by["s4-k1-d5"], chain, states, spec) == float("inf")
    assert narrower_bound(by["s4-k2-d8"], states, {"objective": "slo", "slo_min_tps": 10}) == float("inf")
    # before any launch there is no bound
    assert narrower_bound(by["s4-k2-d8"], {}, spec) == float("inf")


# The real H100 hybrid at C=16 (tests/fixtures/real-sglang/hybrid, SGLang 0.5.17, accept length
# pinned at p = 0.8): aggregate tok/s and the state pool's running-request cap per depth. The cap
# falls with depth, so each depth above 1 ran its own smaller batch: not single-peaked.
REAL_C16 = {1: (878.0, 17, 1.78), 2: (676.6, 14, 2.58), 3: (699.5, 11, 2.91), 4: (769.9, 10, 3.31),
            5: (710.2, 9, 3.63), 6: (751.1, 8, 3.92), 8: (552.7, 6, 4.29), 12: (390.3, 4, 4.68)}


def _real_tune(spec, metrics_of, read_caps=True):
    """The search over REAL_C16's depths, each launch measuring ``metrics_of(depth)`` and, with
    ``read_caps``, carrying its running-request cap as mtp_record reads it from the server."""
    cands = mtp_tune_candidates(sorted(REAL_C16))
    atts = []
    while True:
        nxt = mtp_tune_next(atts, cands, None, spec)
        if nxt is None:
            break
        k = nxt["candidate"]["steps"]
        att = dict(_att(k, metrics_of(k)), reason=nxt["reason"])
        if read_caps:
            att["running_cap"] = REAL_C16[k][1]
        atts.append(att)
    return atts, mtp_tune_pick_best(atts, spec)


def _capped_tune(read_caps):
    def at_c16(k):
        agg, cap, tau = REAL_C16[k]
        return {"16": {"output_throughput": agg, "decode_tps_per_request": {"mean": agg / min(16, cap)},
                       "accept_length": tau, "failed": 0}}
    spec = {"strategy": "adaptive", "objective": "throughput", "level": 16, "noise": 0.03, "seed": 3}
    return _real_tune(spec, at_c16, read_caps)


def test_a_launch_capped_below_the_judged_load_leaves_nothing_to_the_model():
    atts, best = _capped_tune(read_caps=True)
    assert best["winner"]["candidate"]["steps"] == 1
    assert sorted(a["candidate"]["steps"] for a in atts) == sorted(REAL_C16)
    assert any("ran capped below the judged load" in a["reason"] for a in atts)
    check = mtp_tune_model_check(atts, mtp_tune_candidates(sorted(REAL_C16)),
                                 {"objective": "throughput", "level": 16, "noise": 0.03})
    assert not check["holds"] and any("ran capped below the load" in b for b in check["broken"])


def test_without_the_caps_the_same_landscape_ends_on_a_local_peak():
    # what the search did before it read running_cap: the climb around depth 4 looked finished
    atts, best = _capped_tune(read_caps=False)
    assert best["winner"]["candidate"]["steps"] != 1
    assert len(atts) < len(REAL_C16)


def test_caps_at_or_above_the_judged_load_keep_the_model():
    # the same launches at C=1 (every cap holds one request): the bounds stay in use
    def at_c1(k):
        tau = REAL_C16[k][2]
        return {"1": {"decode_tps_per_request": {"mean": 1000 * tau / (10.0 + 1.2 * k)}, "accept_length": tau,
                      "failed": 0}}
    atts, _best = _real_tune({"strategy": "adaptive", "objective": "latency", "level": 1, "noise": 0.03, "seed": 3},
                             at_c1)
    assert len(atts) < len(REAL_C16)
    assert not any("ran capped" in (a.get("reason") or "") for a in atts)
