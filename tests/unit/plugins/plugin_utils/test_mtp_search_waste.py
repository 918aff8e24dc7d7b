# -*- coding: utf-8 -*-
"""The search wastes no launch it can know is wasted, and says what it did.

Driven on the simulator's throughput model (sim/sglang_sim/perf.py, the operator's node) with what
its memory model (sim/sglang_sim/memory.py, rtx-pro-6000-x4, Qwen3.5-122B, tp 4) says of starting
each step count, written out here as tables (tests/bench/bench_mtp_search.py operator_bench runs the
memory model itself):

- radix cache on: 0.5.23 starts every step count and caps the running requests by itself, at 14 for
  steps 8 and 12 for steps 10 (tests/bench/sim_memory_table.py), below 16, the floor of an slo
  judged over C=1..16: recorded as failed ``capped``;
- radix cache off: steps 8 and up leave the weights no KV budget at 48 running requests
  (``oom_weights``, mapped to max_running_requests) and start with fewer.
"""

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import render_summary
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import mtp_tune_fit_ladder
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import mtp_tune_pick_best
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import mtp_tune_cut_short, mtp_tune_next
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_winner import mtp_tune_winner

perf = pytest.importorskip("sglang_sim.perf", reason="the simulator package (sim/) is not importable")

STEPS = [1, 2, 3, 4, 5, 6, 8, 10]
SLO_LEVELS = [1, 2, 4, 8, 16]
LEVELS = [1, 2, 4, 8, 16, 32]


def capped_from(first):
    """Radix cache on: SGLang caps the running requests below the judged floor from ``first`` steps on."""
    def start(steps, mrr):
        return ("capped", None) if steps >= first else (None, mrr)
    return start


def fits_below(limits):
    """Radix cache off: ``limits[steps]`` is the most running requests that start (absent: 48 do)."""
    def start(steps, mrr):
        return ("oom_weights", None) if mrr > limits.get(steps, 48) else (None, mrr)
    return start


def run(strategy, objective, start, steps=None, levels=None, slo_min_tps=None, alpha=perf.ALPHA_SYNTHETIC,
        radix=True, max_launches=None, level=None):
    """A tune as the role runs it with mtp_tune_fit_retry on; returns (attempts, spec, plan, candidates)."""
    steps = STEPS if steps is None else steps
    levels = LEVELS if levels is None else levels
    floor = 1 if objective == "latency" else max(levels)
    plan = mtp_tune_fit_ladder(None, None, 4, floor, radix_cache=radix)
    cands = mtp_tune_candidates(list(steps))
    spec = {"strategy": strategy, "objective": objective, "levels": list(levels), "level": level, "seed": 3,
            "fit_retry": True, "slo_min_tps": slo_min_tps, "max_launches": max_launches}
    atts = []
    for _i in range(100):
        nxt = mtp_tune_next(atts, cands, plan, spec)
        if nxt is None:
            break
        cand, ov = nxt["candidate"], nxt["overrides"] or {}
        cls, running = start(cand["steps"], ov.get("max_running_requests") or plan["max_running_requests"])
        att = {"key": cand["key"], "candidate": cand, "overrides": ov, "fit_rung": nxt["fit_rung"],
               "reason": nxt["reason"], "label": nxt["label"]}
        if cls:
            att.update(status="failed", failure_class=cls)
        else:
            att.update(status="ok", metrics=dict(
                (str(c), {"output_throughput": perf.aggregate_tps(c, cand["steps"], alpha, 1.0, running),
                          "decode_tps_per_request": {"mean": perf.per_request_tps(c, cand["steps"], alpha, 1.0, running)},
                          "accept_length": perf.expected_accept_length(cand["steps"], alpha), "failed": 0,
                          "completed": 4 * c}) for c in levels))
        atts.append(att)
    else:
        pytest.fail("the search did not end")
    return atts, spec, plan, cands


def steps_of(atts, **match):
    return [a["candidate"]["steps"] for a in atts if all(a.get(k) == v for k, v in match.items())]


def winner_key(atts, spec):
    return (mtp_tune_pick_best(atts, spec)["winner"] or {}).get("key")


# ---------------------------------------------------------------------------- slo: cheaper first

@pytest.mark.parametrize("steps", [STEPS, list(range(1, 17))])
def test_slo_climb_launches_the_cheaper_open_candidate_before_the_dearer(steps):
    """Under an slo nothing is predicted, and the climb used to launch the dearest candidate its bounds
    left open: steps 10 then 8 (16 down to 8 on steps 1..16), each capped, before steps 6 closed the
    rest. Cheaper first, steps 6 is launched and the bounds close everything dearer."""
    start = capped_from(8)
    atts, spec, _plan, _cands = run("climb", "slo", start, steps=steps, levels=SLO_LEVELS, slo_min_tps=60.0,
                                    alpha=perf.ALPHA_REALISTIC)
    assert steps_of(atts, failure_class="capped") == [], [a["label"] for a in atts]
    assert steps_of(atts) == [3, 2, 1, 6]
    sweep, _s, _p, _c = run("sweep", "slo", start, steps=steps, levels=SLO_LEVELS, slo_min_tps=60.0,
                            alpha=perf.ALPHA_REALISTIC)
    assert winner_key(atts, spec) == winner_key(sweep, spec) == "s2-k1-d3"


def test_slo_climb_a_capped_cheaper_candidate_rules_out_the_dearer():
    """Where steps 6 is capped too, its launch rules out 8 and 10 (cannot_fit): one capped launch
    instead of three."""
    atts, spec, _plan, _cands = run("climb", "slo", capped_from(6), levels=SLO_LEVELS, slo_min_tps=60.0,
                                    alpha=perf.ALPHA_REALISTIC)
    assert steps_of(atts, failure_class="capped") == [6]
    assert winner_key(atts, spec) == "s2-k1-d3"


def test_slo_adaptive_after_its_end_probe_goes_cheapest_first():
    """The adaptive search probes the dear end by design (capped); after it, what the bounds leave open
    goes cheapest first, not down from the top (15, 14, ... 8, each capped, before)."""
    atts, spec, _plan, _cands = run("adaptive", "slo", capped_from(8), steps=list(range(1, 17)),
                                    levels=SLO_LEVELS, slo_min_tps=60.0, alpha=perf.ALPHA_REALISTIC)
    assert steps_of(atts, failure_class="capped") == [16]
    assert winner_key(atts, spec) == "s2-k1-d3"


def test_sweep_skips_what_a_cheaper_capped_launch_proves_cannot_fit():
    atts, spec, _plan, _cands = run("sweep", "slo", capped_from(8), levels=SLO_LEVELS, slo_min_tps=60.0,
                                    alpha=perf.ALPHA_REALISTIC)
    assert steps_of(atts) == [1, 2, 3, 4, 5, 6, 8]
    assert winner_key(atts, spec) == "s2-k1-d3"


# ---------------------------------------------------------------------------- fit: stop when it cannot win

LIMITS = {8: 44, 9: 40, 10: 36, 11: 32, 12: 28, 13: 24, 14: 20, 15: 16, 16: 12}


def test_fit_bisection_stops_once_the_candidate_cannot_win():
    """Latency at C=1 over steps 1..16, radix cache off: the climb launches steps 12 (its bound left it
    open), which fails at 48 running requests and starts at 24. Its figure at C=1 is what any larger
    limit gives, below the best beyond the band: the bisection used to run on to 28 (six fit launches
    of eleven), it now stops there."""
    atts, spec, _plan, _cands = run("climb", "latency", fits_below(LIMITS), steps=list(range(1, 17)), radix=False)
    assert steps_of(atts) == [3, 4, 5, 6, 12, 12], [a["label"] for a in atts]
    assert [a["status"] for a in atts if a["candidate"]["steps"] == 12] == ["failed", "ok"]
    assert winner_key(atts, spec) == "s4-k1-d5"


def test_sweep_fit_stops_at_the_first_start_of_a_candidate_that_cannot_win():
    atts, spec, _plan, _cands = run("sweep", "latency", fits_below(LIMITS), steps=list(range(1, 17)), radix=False)
    for k in range(8, 17):
        # bisecting down from 48: 24 starts for steps 8-13, 14-16 need 12 first; then nothing more
        assert [a["status"] for a in atts if a["candidate"]["steps"] == k] == (
            ["failed", "ok"] if k <= 13 else ["failed", "failed", "ok"]), k
    assert winner_key(atts, spec) == "s4-k1-d5"


def test_fit_of_a_candidate_that_can_win_still_finds_the_largest_setting_that_starts():
    """The winner's own fit search runs to its end: nothing changes where it can win."""
    limits = {4: 30, 5: 30, 6: 30, 8: 30, 10: 30}
    atts, spec, _plan, _cands = run("climb", "latency", fits_below(limits), radix=False)
    best = mtp_tune_pick_best(atts, spec)
    assert best["winner"]["key"] == "s4-k1-d5"
    assert best["winner"]["overrides"]["max_running_requests"] == 30


def test_fit_below_the_judged_load_goes_on_while_a_larger_setting_could_win():
    """Throughput at C=32 with a capped unit allowed: a start at 24 running requests queues the load,
    so a larger setting may do better and the bisection goes on to the largest that starts."""
    cands = mtp_tune_candidates([3])
    plan = mtp_tune_fit_ladder(None, None, 4, 32, allow_capped=True)
    spec = {"strategy": "sweep", "objective": "throughput", "level": 32, "fit_retry": True}
    atts = []
    while True:
        nxt = mtp_tune_next(atts, cands, plan, spec)
        if nxt is None:
            break
        mrr = (nxt["overrides"] or {}).get("max_running_requests") or 48
        att = {"key": "s3-k1-d4", "candidate": cands[0], "overrides": nxt["overrides"], "fit_rung": nxt["fit_rung"]}
        if mrr > 30:
            att.update(status="failed", failure_class="oom_kv_cache")
        else:
            att.update(status="ok", metrics={"32": {"output_throughput": perf.aggregate_tps(32, 3, max_running_requests=mrr),
                                                    "decode_tps_per_request": {"mean": 50.0}, "failed": 0}})
        atts.append(att)
    assert max(a["overrides"].get("max_running_requests", 48) for a in atts if a["status"] == "ok") == 30


def test_adaptive_stops_the_fit_of_a_probe_the_bounds_rule_out():
    """Steps 10 failed on memory, and the launches beside it (a pool's round, or a resumed run's: steps
    3-8 around the peak at 4) rule it out before any of its fit launches started: none starts."""
    cands = mtp_tune_candidates(STEPS)
    spec = {"strategy": "adaptive", "objective": "latency", "fit_retry": True}
    plan = mtp_tune_fit_ladder(None, None, 4, 1)

    def ok(k):
        c = cands[STEPS.index(k)]
        return {"key": c["key"], "candidate": c, "overrides": {}, "status": "ok",
                "metrics": {"1": {"decode_tps_per_request": {"mean": perf.per_request_tps(1, k)},
                                  "output_throughput": perf.per_request_tps(1, k),
                                  "accept_length": perf.expected_accept_length(k), "failed": 0}}}
    dear = {"key": cands[-1]["key"], "candidate": cands[-1], "overrides": {}, "status": "failed",
            "failure_class": "oom_kv_cache"}
    atts = [ok(3), ok(4), ok(5), ok(6), ok(8), dear]
    nxt = mtp_tune_next(atts, cands, plan, spec)
    assert nxt is None or nxt["fit_rung"] is None, nxt["label"]


# ---------------------------------------------------------------------------- the record

def test_the_record_names_the_only_feasible_candidate():
    """An slo only steps 4 meets (280 tok/s at C=1 against >= 278): five measured, one feasible."""
    atts, spec, _plan, _cands = run("climb", "slo", capped_from(8), levels=SLO_LEVELS, slo_min_tps=278.0)
    best = mtp_tune_pick_best(atts, spec)
    assert best["winner"]["key"] == "s4-k1-d5"
    assert sum(1 for a in atts if a["status"] == "ok") == 5
    assert best["decided_by"] == "only feasible candidate of 5 measured"
    one = [a for a in atts if a["key"] == "s4-k1-d5"]
    assert mtp_tune_pick_best(one, spec)["decided_by"] == "only measured candidate"


# ---------------------------------------------------------------------------- the launch budget

def test_a_run_the_budget_ends_says_so_with_what_it_left_open():
    """The sweep over steps 1..16 with the radix cache off, cut at 12 launches inside the fit search of
    steps 9: the summary names the budget, the launch it would have made and what was left open."""
    limits = {8: 30, 9: 30, 10: 30}
    atts, spec, plan, cands = run("sweep", "latency", fits_below(limits), steps=list(range(1, 17)), radix=False,
                                  max_launches=10)
    assert len(atts) == 10
    cut = mtp_tune_cut_short(atts, cands, plan, spec)
    assert cut["max_launches"] == 10 and cut["launches"] == 10
    assert cut["next"].startswith("steps=9 topk=1 draft=10 [")
    assert [f["key"] for f in cut["fits"]] == ["s9-k1-d10"] and cut["fits"][0]["fails"] == 48
    assert cut["open"] == ["s%d-k1-d%d" % (k, k + 1) for k in range(10, 17)]
    doc = {"settings": {"candidates": [c["key"] for c in cands], "concurrency": LEVELS}, "attempts": atts,
           "winner": mtp_tune_winner(atts, spec), "cut_short": cut}
    text = render_summary(doc)
    assert "**Ended by mtp_tune_max_launches** (10 launches) before the search was over" in text
    assert "the fit search of s9-k1-d10 (max_running_requests: starts at -, fails at 48)" in text
    assert "s16-k1-d17" in text


def test_the_budget_is_not_named_where_the_search_ended_on_its_own():
    atts, spec, plan, cands = run("climb", "latency", fits_below({}), max_launches=30)
    assert mtp_tune_cut_short(atts, cands, plan, spec) is None
    # exactly at the budget, with nothing more to launch: not cut short either
    spec = dict(spec, max_launches=len(atts))
    assert mtp_tune_cut_short(atts, cands, plan, spec) is None
    # one launch less: cut short, with the launch it would have made
    short = dict(spec, max_launches=len(atts) - 1)
    cut = mtp_tune_cut_short(atts[:-1], cands, plan, short)
    assert cut["next"] == atts[-1]["label"]
    assert "Ended by mtp_tune_max_launches" not in render_summary({"attempts": atts, "cut_short": None})
