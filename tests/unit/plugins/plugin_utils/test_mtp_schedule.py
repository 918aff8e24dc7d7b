# -*- coding: utf-8 -*-
"""Tuning a per-load schedule (plugins/plugin_utils/mtp_schedule.py): the schedule derived from
each level's best static, checked against the simulator's copy of SGLang 0.5.23's routing
(sim/sglang_sim/adaptive.py, which shares no code with it); the launch sequence on made-up
landscapes; the verdict against the best single static; the dispatch of mtp_tune_next and
mtp_tune_winner on ``spec.schedule``."""

import json
import math

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import journal
from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_cap, mtp_schedule, spec_schedule
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_record import mtp_tune_attempt
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import mtp_tune_pick_best
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import (
    mtp_tune_complete, mtp_tune_cut_short, mtp_tune_next, mtp_tune_smoke_levels)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import (
    AnsibleFilterError, mtp_tune_candidates, spec_from)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_winner import mtp_tune_winner

from sglang_sim import adaptive
from sim_starts import operator_start

LEVELS = (1, 4, 8, 16, 32)
STEPS = [1, 2, 3, 4, 5, 6, 7, 8]
CANDS = mtp_tune_candidates(STEPS)


# --------------------------------------------------------------------------- a made-up landscape

def chain_tau(steps, alpha):
    return (1 - alpha ** (steps + 1)) / (1 - alpha)


def moving(steps, level):
    """Aggregate tok/s of a static depth at a level: each draft token costs more the more requests
    share the verify, so the best depth falls with load (deep at C=1, shallow at C=32)."""
    return level * chain_tau(steps, 0.85) / (6 + 0.5 * steps + level * (0.1 + 0.2 * (steps + 1) ** 1.5 / 3)) * 1000


def flat(steps, level):
    """A landscape whose best depth is the same at every level: no schedule can beat a static."""
    return level / (1 + 0.05 * level) * chain_tau(steps, 0.8) / (6 + 1.2 * steps) * 1000


def routed_steps(conf, start, level, graph_bs=None, tmp_path=None):
    """The step the release runs a batch of ``level`` requests at (sim adaptive: pad, then route)."""
    path = tmp_path / ("cfg-%d.json" % abs(hash(json.dumps(conf, sort_keys=True))))
    path.write_text(json.dumps(conf))
    params = adaptive.AdaptiveParams(start, str(path))
    params.set_cuda_graph_bs(graph_bs)
    return params.steps_for_batch(level)


def metrics(figures):
    return dict((str(c), {"concurrency": c, "output_throughput": v, "decode_tps_per_request": {"mean": v / c},
                          "accept_length": 2.0, "completed": 4 * c, "failed": 0}) for c, v in figures.items())


def measure(nxt, land, tmp_path, levels=LEVELS):
    """An attempt record of a launch on ``land``: a static depth everywhere, a schedule at the step
    the release routes each level to (SGLang's default config: its start step, where the single
    candidate slots pin nothing, as an approximation good enough for the table)."""
    ov = nxt["overrides"]
    if mtp_schedule.schedule_kind(nxt) == "tuned":
        conf = ov[mtp_schedule.CONFIG]
        figs = dict((c, land(routed_steps(conf, nxt["candidate"]["steps"], c, tmp_path=tmp_path), c)) for c in levels)
    else:
        figs = dict((c, land(nxt["candidate"]["steps"], c)) for c in levels)
    return mtp_tune_attempt({"next": nxt, "ready": True, "bench": {"failed": False, "by_concurrency": metrics(figs)}})


def spec(**kw):
    out = {"schedule": True, "objective": "throughput", "levels": LEVELS, "strategy": "climb", "seed": 3}
    out.update(kw)
    return spec_from(out)


def run(land, tmp_path, limit=80, **kw):
    atts = []
    for _i in range(limit):
        nxt = mtp_tune_next(atts, CANDS, None, spec(**kw))
        if nxt is None:
            return atts
        atts.append(measure(nxt, land, tmp_path))
    pytest.fail("the schedule run did not end in %d launches" % limit)


def sweep_winners(land, tmp_path):
    """Each level's best static over every candidate (the per-level sweep), by the same tie rule."""
    atts = [measure({"candidate": c, "overrides": {}, "fit_rung": None, "reason": "sweep"}, land, tmp_path) for c in CANDS]
    return dict((lv, mtp_tune_pick_best(atts, mtp_schedule.level_spec(spec(), lv))["winner"]["candidate"]["steps"])
                for lv in LEVELS)


# --------------------------------------------------------------------------- the schedule

def test_slots_merge_runs_of_one_winner_with_keys_at_the_geometric_mean():
    slots = mtp_schedule.schedule_slots([8, 4, 4, 3, 3], LEVELS)
    assert [(s["key"], s["levels"], s["steps"]) for s in slots] == [
        (1, [1], 8), (int(math.ceil(math.sqrt(1 * 4))), [4, 8], 4), (int(math.ceil(math.sqrt(8 * 16))), [16, 32], 3)]
    conf, start = mtp_schedule.derive_config([8, 4, 4, 3, 3], LEVELS)
    assert conf == {"1": {"candidate_steps": [8]}, "2": {"candidate_steps": [4]}, "12": {"candidate_steps": [3]}}
    assert start == 8
    # one winner everywhere: one slot
    assert mtp_schedule.derive_config([3] * 5, LEVELS)[0] == {"1": {"candidate_steps": [3]}}


@pytest.mark.parametrize("winners,graph_bs", [
    ([8, 6, 5, 3, 2], None),
    ([8, 6, 5, 3, 2], [1, 2, 4, 8, 12, 16, 24, 32, 40, 48]),
    ([7, 7, 4, 4, 1], [1, 2, 3, 4, 5, 6, 7, 8, 16, 32]),
    ([2, 3, 4, 5, 6], [1, 4, 8, 16, 32]),
])
def test_each_level_routes_to_its_own_winner_by_the_release_routing(tmp_path, winners, graph_bs):
    conf, start = mtp_schedule.derive_config(winners, LEVELS, graph_bs)
    assert spec_schedule.problems(conf) == []
    assert start in conf["1"]["candidate_steps"]
    if graph_bs:
        # keys between graph sizes would act at the next one: every key is one
        assert all(int(k) in graph_bs for k in conf if k != "1")
    for level, steps in zip(LEVELS, winners):
        assert routed_steps(conf, start, level, graph_bs, tmp_path) == steps, (level, conf)
    # the release accepts the start step (it must be among the candidates)
    path = tmp_path / "start.json"
    path.write_text(json.dumps(conf))
    assert adaptive.AdaptiveParams(start, str(path)).slots[1].current_steps == start


def test_levels_that_pad_to_one_graph_size_are_refused_naming_the_variable():
    with pytest.raises(AnsibleFilterError, match="mtp_tune_concurrency"):
        mtp_schedule.derive_config([8, 4], [4, 8], graph_bs=[1, 8, 32])


def test_neighbour_variant_gives_each_slot_its_winner_and_neighbours():
    conf, start = mtp_schedule.derive_config([8, 4, 4, 3, 3], LEVELS, neighbours=STEPS)
    assert conf == {"1": {"candidate_steps": [7, 8]}, "2": {"candidate_steps": [3, 4, 5]},
                    "12": {"candidate_steps": [2, 3, 4]}}
    assert start == 8


def test_spec_flags_parse_as_the_other_flags():
    assert spec_from({}).schedule is False and spec_from({}).schedule_default is True
    got = spec_from({"schedule": "yes", "schedule_default": "false"})
    assert got.schedule is True and got.schedule_default is False
    with pytest.raises(AnsibleFilterError, match="mtp_tune_schedule_default"):
        spec_from({"schedule_default": "maybe"})


# --------------------------------------------------------------------------- the launches

def test_per_level_searches_then_the_schedule_once_then_the_default(tmp_path):
    atts = run(moving, tmp_path)
    kinds = [mtp_schedule.schedule_kind(a) for a in atts]
    assert kinds[-2:] == ["tuned", "default"] and kinds.count("tuned") == 1 and kinds.count("default") == 1
    static = atts[:-2]
    assert all(k is None for k in kinds[:-2])
    # each level's winner is the per-level sweep's, found with fewer launches than one search per
    # level from scratch would use, and far fewer than the sweep of every candidate
    truth = sweep_winners(moving, tmp_path)
    assert len(set(truth.values())) >= 3  # the landscape does move with load
    got = mtp_schedule.level_winners(atts, spec())
    assert dict((lv, r["candidate"]["steps"]) for lv, r in got.items()) == truth
    alone = 0
    for lv in LEVELS:
        one = []
        while True:
            nxt = mtp_tune_next(one, CANDS, None, mtp_schedule.level_spec(spec(), lv))
            if nxt is None:
                break
            one.append(measure(nxt, moving, tmp_path))
        alone += len(one)
    assert len(static) < alone
    assert len(set(a["key"] for a in static)) == len(static)  # no static launched twice
    tuned = atts[-2]
    conf, start = mtp_schedule.derive_config([truth[lv] for lv in LEVELS], LEVELS)
    assert tuned["overrides"][mtp_schedule.CONFIG] == conf and tuned["candidate"]["steps"] == start
    assert tuned["key"] == "%s+adaptive-%s" % (tuned["candidate"]["key"], spec_schedule.digest(conf)[:8])
    assert tuned["reason"].startswith("schedule C=1: s%d" % truth[1])
    dflt = atts[-1]
    assert dflt["overrides"] == {"speculative_adaptive": True, "speculative_adaptive_config": None}
    assert dflt["candidate"]["steps"] == 3 and dflt["key"] == "s3-k1-d4+adaptive-default"


def test_the_default_is_left_out_when_not_asked_for(tmp_path):
    atts = run(moving, tmp_path, schedule_default=False)
    assert [mtp_schedule.schedule_kind(a) for a in atts].count("default") == 0
    assert mtp_schedule.schedule_kind(atts[-1]) == "tuned"


def test_a_resumed_run_relaunches_nothing_it_measured(tmp_path):
    atts = run(moving, tmp_path)
    resumed = [dict(a, resumed=True) for a in atts]
    assert mtp_tune_next(resumed, CANDS, None, spec()) is None
    # an older record keyed by its start candidate alone is still that schedule
    old = [dict(a, key=a["candidate"]["key"]) for a in resumed]
    assert mtp_tune_next(old, CANDS, None, spec()) is None
    # without the schedule's launch the resumed run launches exactly it
    nxt = mtp_tune_next(resumed[:-2], CANDS, None, spec())
    assert nxt["schedule"] == "tuned" and nxt["overrides"] == atts[-2]["overrides"]


@pytest.mark.parametrize("budget", [1, 3, 7])
def test_max_launches_counts_every_launch_of_the_run(tmp_path, budget):
    atts = run(moving, tmp_path, max_launches=budget)
    assert len(atts) == budget
    full = run(moving, tmp_path)
    statics = sum(1 for a in full if mtp_schedule.schedule_kind(a) is None)
    atts = run(moving, tmp_path, max_launches=statics + 1)
    assert [mtp_schedule.schedule_kind(a) for a in atts][-1] == "tuned" and len(atts) == statics + 1


def test_nothing_to_complete_and_a_cut_short_run_names_its_next_launch(tmp_path):
    atts = run(moving, tmp_path, max_launches=4)
    assert mtp_tune_complete(atts, spec(max_launches=4)) is None
    cut = mtp_tune_cut_short(atts, CANDS, None, spec(max_launches=4))
    assert cut["launches"] == 4 and cut["next"] == mtp_tune_next(atts, CANDS, None, spec())["label"]
    full = run(moving, tmp_path)
    assert mtp_tune_cut_short(full, CANDS, None, spec(max_launches=len(full))) is None


def test_a_node_fault_ends_the_run(tmp_path):
    atts = [dict(measure({"candidate": CANDS[2], "overrides": {}, "fit_rung": None, "reason": "x"}, moving, tmp_path),
                 status="failed", failure_class="port_in_use", failure_line="address already in use",
                 port_holders=[{"pid": 1, "comm": "other"}])]
    atts[0]["node_fault"] = {"class": "port_in_use", "cause": "held", "line": "x", "holders": []}
    assert mtp_tune_next(atts, CANDS, None, spec()) is None


# --------------------------------------------------------------------------- cap levers

def _start(steps, overrides=None):
    """(plan, journal lines) of a start on the operator's node (sim memory model, 4 x RTX PRO 6000)."""
    return operator_start(steps, overrides)[:2]


def _pooled(steps, figs, overrides=None):
    plan, lines = _start(steps, overrides)
    cand = mtp_schedule.chain(steps)
    return {"key": cand["key"], "candidate": cand, "overrides": dict(overrides or {}), "status": "ok",
            "pool": journal.pool_facts(lines), "running_cap": plan["max_running_requests"], "reason": "test",
            "metrics": metrics(figs)}


def test_the_schedule_is_lifted_for_its_deepest_slot_at_the_top_level():
    top = 24
    assert _start(8)[0]["max_running_requests"] < top  # the deepest slot's step alone would queue the top level
    atts = [_pooled(3, {1: 200.0, top: 1800.0}), _pooled(8, {1: 300.0, top: 900.0})]
    sp = spec(levels=[1, top], strategy="sweep", cap_levers=["mamba_full_memory_ratio"], schedule_default=False)
    cands = mtp_tune_candidates([3, 8])
    # the search judged at the top level sees the launches made for C=1 capped below it and
    # launches them again lifted, as a search of that level alone would have from the start
    figs = {3: {1: 200.0, top: 2000.0}, 8: {1: 300.0, top: 1000.0}}
    for steps in (3, 8):
        nxt = mtp_tune_next(atts, cands, None, sp)
        assert nxt["reason"].startswith("C=%d: " % top) and "lifted: cap" in nxt["reason"] and "schedule" not in nxt
        assert nxt["candidate"]["steps"] == steps and mtp_cap.levers_of(nxt["overrides"])
        atts.append(_pooled(steps, figs[steps], nxt["overrides"]))
    s3_ratio = atts[2]["overrides"]["mamba_full_memory_ratio"]
    nxt = mtp_tune_next(atts, cands, None, sp)
    assert nxt["schedule"] == "tuned"
    assert nxt["overrides"][mtp_schedule.CONFIG] == {"1": {"candidate_steps": [8]}, "5": {"candidate_steps": [3]}}
    levers = mtp_cap.levers_of(nxt["overrides"])
    # the pools are sized for the deepest candidate (8 + 1 draft tokens): it holds the top level
    # with the schedule's levers, not with the shallow slot's own
    assert levers["mamba_full_memory_ratio"] > s3_ratio
    assert mtp_cap.predicted_cap(atts, mtp_schedule.chain(8), levers) >= top
    assert mtp_cap.predicted_cap(atts, mtp_schedule.chain(8), {"mamba_full_memory_ratio": s3_ratio}) < top
    assert "s8 at C=%d lifted" % top in nxt["reason"]
    # and the default config's deepest tier (7) is lifted where the levers allow
    dflt = mtp_schedule.default_launch(atts, sp, nxt)
    assert mtp_cap.predicted_cap(atts, mtp_schedule.chain(7), mtp_cap.levers_of(dflt["overrides"])) >= top
    assert "s7 holds C=%d" % top in dflt["reason"]


def test_the_best_single_static_is_measured_lifted_for_the_top_level_as_it_would_be_served():
    top = 24
    sp = spec(levels=[1, top], cap_levers=["mamba_full_memory_ratio"])
    # s3 ran capped at 22 (measured for C=1): its C=24 figure is its queue's
    atts = [_pooled(3, {1: 200.0, top: 1800.0}), _pooled(8, {1: 230.0, top: 900.0}, {"mamba_full_memory_ratio": 8.0})]
    assert mtp_schedule.single_static(mtp_schedule.statics(atts), sp)["key"] == "s3-k1-d4"
    nxt = mtp_schedule.single_lift(atts, sp)
    assert nxt["candidate"]["key"] == "s3-k1-d4" and "best single static" in nxt["reason"]
    assert mtp_cap.predicted_cap(atts, nxt["candidate"], nxt["overrides"]) >= top
    atts.append(_pooled(3, {1: 200.0, top: 2000.0}, nxt["overrides"]))
    assert mtp_schedule.single_lift(atts, sp) is None
    # without levers the queue is what the node gives: nothing to lift
    assert mtp_schedule.single_lift(atts[:2], spec(levels=[1, top])) is None


def test_slot_winners_levers_are_united_and_said():
    atts = [_pooled(8, {1: 300.0, 32: 900.0}, {"mamba_full_memory_ratio": 2.0}),
            _pooled(3, {1: 200.0, 32: 2000.0}, {"mamba_full_memory_ratio": 4.0})]
    nxt = mtp_schedule.tuned_launch(atts, spec(levels=[1, 32]))
    assert nxt["overrides"]["mamba_full_memory_ratio"] == 4.0
    assert "union" in nxt["reason"]


# --------------------------------------------------------------------------- the verdict

def _static(steps, figs):
    return mtp_tune_attempt({"next": {"candidate": mtp_schedule.chain(steps), "overrides": {}, "reason": "t"},
                             "ready": True, "bench": {"failed": False, "by_concurrency": metrics(figs)}})


def _sched(steps, conf, figs, kind="tuned"):
    nxt = {"candidate": mtp_schedule.chain(steps), "reason": "t",
           "overrides": {"speculative_adaptive": True, "speculative_adaptive_config": conf if kind == "tuned" else None}}
    nxt["key"] = mtp_schedule.attempt_key(nxt)
    return mtp_tune_attempt({"next": nxt, "ready": True, "bench": {"failed": False, "by_concurrency": metrics(figs)}})


CONF = {"1": {"candidate_steps": [6]}, "3": {"candidate_steps": [2]}}
# s6 best at C=1, s2 best at C=8; s4 the best single static (90 % of each)
STATICS = [_static(2, {1: 100.0, 8: 1000.0}), _static(4, {1: 135.0, 8: 900.0}), _static(6, {1: 150.0, 8: 700.0})]
SP = {"schedule": True, "objective": "throughput", "levels": [1, 8]}


def test_the_schedule_wins_only_beyond_the_band_and_never_losing_beyond_it():
    atts = STATICS + [_sched(6, CONF, {1: 149.0, 8: 995.0})]
    win = mtp_tune_winner(atts, SP)
    assert win["schedule"]["verdict"] == "schedule"
    assert win["key"] == "s6-k1-d7+adaptive-%s" % spec_schedule.digest(CONF)[:8]
    assert win["overrides"]["speculative_adaptive_config"] == CONF
    assert win["schedule"]["single_static"] == "s4-k1-d5"
    assert win["decided_by"].startswith("schedule: the schedule's weakest level (C=1, 99.3% of its best static) beats "
                                        "s4-k1-d5's (C=1, 90.0%) beyond the band")
    rows = dict((r["level"], r) for r in win["schedule"]["rows"])
    assert rows[1]["best_static"]["key"] == "s6-k1-d7" and rows[8]["best_static"]["key"] == "s2-k1-d3"
    assert rows[8]["schedule_tps"] == 995.0 and rows[8]["single_static_tps"] == 900.0
    # above at one level, below beyond the band at the other: the static wins, and says where
    atts = STATICS + [_sched(6, CONF, {1: 149.0, 8: 850.0})]
    win = mtp_tune_winner(atts, SP)
    assert win["schedule"]["verdict"] == "static" and win["key"] == "s4-k1-d5"
    assert "(C=8, 85.0% of its best static) is below s4-k1-d5's" in win["decided_by"]
    assert "below s4-k1-d5 beyond the band at C=8" in win["decided_by"]


def test_a_schedule_within_the_band_everywhere_is_no_reason_to_serve_one():
    atts = STATICS + [_sched(6, CONF, {1: 136.0, 8: 905.0})]
    win = mtp_tune_winner(atts, SP)
    assert win["schedule"]["verdict"] == "static" and win["key"] == "s4-k1-d5"
    assert "(C=8, 90.5% of its best static) is within the band of s4-k1-d5's (C=1, 90.0%)" in win["schedule"]["why"]
    # a noisier node widens the band: a 4 % gain is then a tie
    atts = STATICS + [_sched(6, CONF, {1: 140.0, 8: 936.0})]
    assert mtp_tune_winner(atts, SP)["schedule"]["verdict"] == "schedule"
    assert mtp_tune_winner(atts, dict(SP, noise=0.05))["schedule"]["verdict"] == "static"


def test_one_noisy_level_below_does_not_undo_a_better_weakest_level():
    """Three levels: the schedule ties the best static at two and dips 2.5 % below the single static at
    the level where that one is strong; its weakest level still beats the single static's by 16 %."""
    levels = {"schedule": True, "objective": "throughput", "levels": [1, 8, 32]}
    stat = [_static(2, {1: 100.0, 8: 1000.0, 32: 3000.0}), _static(4, {1: 135.0, 8: 1000.0, 32: 2500.0}),
            _static(6, {1: 150.0, 8: 700.0, 32: 1800.0})]
    conf = {"1": {"candidate_steps": [6]}, "3": {"candidate_steps": [4]}, "16": {"candidate_steps": [2]}}
    atts = stat + [_sched(6, conf, {1: 145.0, 8: 975.0, 32: 2950.0})]
    win = mtp_tune_winner(atts, levels)
    assert win["schedule"]["verdict"] == "schedule"
    assert "below s4-k1-d5 beyond the band at C=8 (-2.5%)" in win["decided_by"]
    # its figure is the one where it gains most over that static (C=32, where s4 is weakest): the
    # converge's smoke measures there, and a schedule that stays at C=1's depth would show
    assert win["score"]["level"] == 32
    assert mtp_tune_smoke_levels(win, atts, dict(levels, converge=True)) == [32]
    # the same dip where the schedule is weakest decides against it
    win = mtp_tune_winner(stat + [_sched(6, conf, {1: 125.0, 8: 975.0, 32: 2950.0})], levels)
    assert win["schedule"]["verdict"] == "static" and win["key"] == "s4-k1-d5"


def test_without_a_schedule_launch_the_best_single_static_wins_and_says_why():
    win = mtp_tune_winner(STATICS, SP)
    assert win["key"] == "s4-k1-d5" and "no tuned schedule was measured" in win["decided_by"]
    assert win["schedule"]["key"] is None and win["schedule"]["config"] is None


def test_best_single_static_is_the_highest_worst_ratio_and_the_cheaper_of_a_tie():
    # s3 at 0.95/0.90 and s4 at 0.90/0.905: worst ratios 0.90 and 0.90 tie; the cheaper s3 wins
    atts = [_static(2, {1: 100.0, 8: 1000.0}), _static(3, {1: 142.5, 8: 900.0}), _static(4, {1: 135.0, 8: 905.0}),
            _static(6, {1: 150.0, 8: 700.0})]
    assert mtp_tune_winner(atts, SP)["schedule"]["single_static"] == "s3-k1-d4"
    # a clearly better worst level decides
    atts[2] = _static(4, {1: 145.0, 8: 960.0})
    assert mtp_tune_winner(atts, SP)["schedule"]["single_static"] == "s4-k1-d5"


def test_keys_never_mix_statics_and_schedules():
    sched = _sched(6, CONF, {1: 400.0, 8: 4000.0})
    dflt = _sched(3, None, {1: 300.0, 8: 3000.0}, kind="default")
    assert sched["key"].startswith("s6-k1-d7+adaptive-") and dflt["key"] == "s3-k1-d4+adaptive-default"
    # even an older record keyed by its start candidate is kept apart
    old = dict(sched, key="s6-k1-d7")
    win = mtp_tune_winner(STATICS + [old, dflt], SP)
    rows = dict((r["level"], r) for r in win["schedule"]["rows"])
    assert rows[1]["best_static"]["key"] == "s6-k1-d7" and rows[1]["best_static"]["tps"] == 150.0
    assert rows[8]["default_tps"] == 3000.0
    assert win["schedule"]["default_key"] == "s3-k1-d4+adaptive-default"
    assert win["key"] == sched["key"]
    assert mtp_schedule.level_winners(STATICS + [old, dflt], spec_from(SP))[8]["key"] == "s2-k1-d3"


def test_spec_schedule_off_changes_nothing():
    plain = {"objective": "throughput", "levels": [1, 8], "level": 8}
    assert mtp_tune_winner(STATICS, plain)["key"] == "s2-k1-d3"
    assert "schedule" not in mtp_tune_winner(STATICS, plain)


def test_the_end_to_end_verdict_on_a_moving_and_a_flat_landscape(tmp_path):
    atts = run(moving, tmp_path)
    win = mtp_tune_winner(atts, spec(), candidates=CANDS)
    assert win["schedule"]["verdict"] == "schedule" and win["key"] == atts[-2]["key"]
    assert all(r["schedule_tps"] >= r["best_static"]["tps"] * 0.97 for r in win["schedule"]["rows"])
    atts = run(flat, tmp_path)
    # one best depth everywhere: one slot at it, which equals that static: no reason to serve a schedule
    assert len(atts[-2]["overrides"][mtp_schedule.CONFIG]) == 1
    win = mtp_tune_winner(atts, spec(), candidates=CANDS)
    assert win["schedule"]["verdict"] == "static" and "+adaptive" not in win["key"]
