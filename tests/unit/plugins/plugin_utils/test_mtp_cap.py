# -*- coding: utf-8 -*-
"""What binds under load: the search reads the state pool from a launch's journal and lifts a
candidate whose running-request cap is below the judged load (plugins/plugin_utils/mtp_cap.py, its
use by mtp_tune_next, the attempt record and the node-fault rule).

Every start here is the simulator's memory model (sim/sglang_sim/memory.py, which follows SGLang
0.5.23's kv_cache_configurator) and its journal lines are the ones the simulated rank prints, so
the pool model is checked against an implementation it does not share code with."""

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import journal
from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_cap
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import mtp_tune_fit_ladder
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_node import node_fault_of
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_record import mtp_tune_attempt
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import mtp_tune_next
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import (
    AnsibleFilterError, mtp_tune_candidates, spec_from)

from sim_starts import operator_start


def _start(steps, overrides=None, topk=1, draft=None):
    """(plan, journal lines, args) of a start on the operator's node (4 x RTX PRO 6000, tp 4)."""
    return operator_start(steps, overrides, topk, draft)


def _attempt(cand, overrides, level, status=None, failure_class=None, fps=1000.0):
    plan, lines, _a = _start(cand["steps"], overrides)
    cap = plan["max_running_requests"]
    att = {"key": cand["key"], "candidate": cand, "overrides": dict(overrides), "pool": journal.pool_facts(lines),
           "running_cap": cap, "reason": "test"}
    if status is None:
        status, failure_class = ("failed", "capped") if cap < level else ("ok", None)
    att.update(status=status, failure_class=failure_class)
    if status == "ok":
        att["metrics"] = {str(level): {"output_throughput": fps, "decode_tps_per_request": {"mean": fps / level},
                                       "accept_length": 2.0, "failed": 0, "completed": 4 * level}}
    return att


def _spec(level=32, levers=("mamba_full_memory_ratio",), **kw):
    out = {"strategy": "climb", "objective": "throughput" if level > 1 else "latency", "level": level,
           "levels": [level], "seed": 3, "cap_levers": list(levers), "kv_need": 2048 * level}
    out.update(kw)
    return out


CANDS = mtp_tune_candidates([2, 3, 4, 8])
FIT = mtp_tune_fit_ladder(None, None, 4, 32, 512, 48)


def _cand(steps):
    return next(c for c in CANDS if c["steps"] == steps)


def test_the_seed_reads_the_pool_as_it_is():
    nxt = mtp_tune_next([], CANDS, FIT, _spec())
    assert nxt["candidate"]["steps"] == 3 and not mtp_cap.levers_of(nxt["overrides"])


def test_a_capped_launch_is_launched_again_with_the_lever_that_holds_the_load():
    first = _attempt(_cand(3), {}, 32)
    assert first["status"] == "failed" and first["running_cap"] < 32  # 22 on 0.5.23's defaults
    nxt = mtp_tune_next([first], CANDS, FIT, _spec())
    assert nxt["candidate"]["steps"] == 3 and nxt["reason"].startswith("lift s3-k1-d4")
    ratio = nxt["overrides"]["mamba_full_memory_ratio"]
    plan, _l, _a = _start(3, nxt["overrides"])
    # the release, fed the lifted setting, holds the load, and the KV pool still holds its context
    assert plan["max_running_requests"] >= 32 and plan["max_total_num_tokens"] >= 2048 * 32
    assert nxt["predicted_cap"] == plan["max_running_requests"]
    # the least change: a visibly smaller ratio would not hold it
    smaller, _l, _a = _start(3, {"mamba_full_memory_ratio": round(float(ratio) * 0.8, 2)})
    assert smaller["max_running_requests"] < 32


def test_later_depths_are_launched_lifted_from_the_start():
    atts = [_attempt(_cand(3), {}, 32)]
    atts.append(_attempt(_cand(3), mtp_tune_next(atts, CANDS, FIT, _spec())["overrides"], 32, fps=1979))
    nxt = mtp_tune_next(atts, CANDS, FIT, _spec())
    assert nxt["candidate"]["steps"] in (2, 4)
    assert "lifted: cap" in nxt["reason"] and nxt["overrides"].get("mamba_full_memory_ratio")
    plan, _l, _a = _start(nxt["candidate"]["steps"], nxt["overrides"])
    assert plan["max_running_requests"] >= 32


def test_a_candidate_the_load_does_not_cap_gets_no_lever():
    # judged at C=16: steps 3 holds 22 running requests on its own
    first = _attempt(_cand(3), {}, 16, fps=1597)
    nxt = mtp_tune_next([first], CANDS, mtp_tune_fit_ladder(None, None, 4, 16, 512, 48), _spec(16))
    assert nxt is not None and nxt["candidate"]["steps"] in (2, 4)
    assert not mtp_cap.levers_of(nxt["overrides"])
    assert nxt["predicted_cap"] >= 16


def test_without_levers_the_search_is_depth_alone():
    first = _attempt(_cand(3), {}, 32)
    nxt = mtp_tune_next([first], CANDS, FIT, _spec(levers=()))
    assert nxt is None or not mtp_cap.levers_of(nxt["overrides"])
    assert nxt is None or not nxt["reason"].startswith("lift")


def test_latency_at_one_request_never_lifts():
    first = _attempt(_cand(3), {}, 1, fps=234)
    nxt = mtp_tune_next([first], CANDS, mtp_tune_fit_ladder(None, None, 4, 1, 512, 48), _spec(1))
    assert nxt is not None and not mtp_cap.levers_of(nxt["overrides"])


def test_a_kv_need_no_lever_can_keep_leaves_the_candidate_queue_bound():
    first = _attempt(_cand(3), {}, 32)
    spec = _spec(kv_need=10 ** 9)
    assert mtp_cap.lift_relaunch([first], spec) is None
    nxt = mtp_tune_next([first], CANDS, FIT, spec)
    assert nxt is not None and not mtp_cap.levers_of(nxt["overrides"])
    assert "queue-bound" in nxt["reason"]


def test_a_lever_the_greedy_check_refused_is_never_used_again():
    spec = _spec(levers=("enable_linear_replayssm_spec", "mamba_full_memory_ratio"))
    first = _attempt(_cand(3), {}, 32)
    lift = mtp_tune_next([first], CANDS, FIT, spec)
    assert lift["overrides"].get("enable_linear_replayssm_spec") is True
    refused = _attempt(_cand(3), lift["overrides"], 32, status="failed", failure_class="numerics")
    again = mtp_tune_next([first, refused], CANDS, FIT, spec)
    assert again["candidate"]["steps"] == 3 and "greedy check" in again["reason"]
    assert not again["overrides"].get("enable_linear_replayssm_spec")
    assert again["overrides"].get("mamba_full_memory_ratio")
    assert mtp_cap.refused_levers([first, refused]) == {"enable_linear_replayssm_spec"}


def test_a_lever_the_release_refuses_is_the_settings_fault_not_the_nodes():
    att = {"status": "failed", "failure_class": "bad_args", "overrides": {"enable_linear_replayssm_spec": True},
           "failure_line": "ValueError: --enable-linear-replayssm-spec requires --speculative-eagle-topk 1",
           "journal_tail": []}
    assert node_fault_of(att) is None
    assert node_fault_of(dict(att, overrides={})) is not None


def test_a_tree_draft_is_never_lifted_with_the_replay():
    spec = spec_from(_spec(levers=("enable_linear_replayssm_spec",)))
    assert mtp_cap._allowed([], spec, {"topk": 4}) == []
    assert mtp_cap._allowed([], spec, {"topk": 1}) == ["enable_linear_replayssm_spec"]


def test_the_numerics_plan_keeps_a_reference_and_checks_the_lever():
    spec = _spec(levers=("enable_linear_replayssm_spec",))
    plan = mtp_cap.mtp_tune_numerics_plan([], {"overrides": {}}, spec)
    assert plan["probe"] and plan["levers"] == [] and plan["reference"] is None
    ref3, ref4 = [{"index": 0, "output_ids": [1, 2, 3]}], [{"index": 0, "output_ids": [1, 2, 4]}]
    lever = {"enable_linear_replayssm_spec": True}
    atts = [{"key": "s3-k1-d4", "overrides": {}, "greedy": ref3},
            {"key": "s4-k1-d5", "overrides": {}, "greedy": ref4},
            {"key": "s3-k1-d4", "overrides": lever, "greedy": [{"index": 0, "output_ids": [9]}],
             "status": "failed", "numerics": {"ok": False, "levers": list(lever)}}]
    # the reference is a launch without the lever at the same depth, not the latest one
    plan = mtp_cap.mtp_tune_numerics_plan(atts, {"key": "s3-k1-d4", "overrides": lever}, spec)
    assert plan["levers"] == ["enable_linear_replayssm_spec"] and plan["reference"] == ref3
    assert plan["reference_key"] == "s3-k1-d4" and plan["passed"] is None
    # no launch of that depth: the latest at any depth, named
    plan = mtp_cap.mtp_tune_numerics_plan(atts, {"key": "s8-k1-d9", "overrides": lever}, spec)
    assert plan["reference"] == ref4 and plan["reference_key"] == "s4-k1-d5"
    # once the lever passed at one depth, the others adopt it without a probe
    passed = atts + [{"key": "s3-k1-d4", "overrides": lever, "status": "ok",
                      "numerics": {"ok": True, "levers": list(lever), "reference_key": "s3-k1-d4"}}]
    plan = mtp_cap.mtp_tune_numerics_plan(passed, {"key": "s8-k1-d9", "overrides": lever}, spec)
    assert plan["passed"] == "s3-k1-d4" and not plan["probe"]
    att = mtp_tune_attempt(_launch(plan, None))
    assert att["status"] == "ok" and att["numerics"]["ok"] and "passed the greedy check at s3-k1-d4" in att["numerics"]["why"]
    # a run that may not use such a lever runs no greedy prompts
    assert not mtp_cap.mtp_tune_numerics_plan(atts, {"overrides": {}}, _spec())["probe"]


def _launch(plan, greedy, **kw):
    out = {"next": {"candidate": _cand(3), "overrides": {"enable_linear_replayssm_spec": True}, "reason": "t"},
           "ready": True, "wait": {"pool": {"max_running_requests": 40}},
           "bench": {"failed": False, "by_concurrency": {"32": {}}, "server": {"effective_max_running_requests": 40}},
           "numerics_plan": plan, "greedy": greedy}
    out.update(kw)
    return out


def test_the_attempt_refuses_a_lever_whose_tokens_differ():
    ref = [{"index": 0, "output_ids": [1, 2, 3]}, {"index": 1, "output_ids": [4, 5]}]
    plan = {"probe": True, "levers": ["enable_linear_replayssm_spec"], "reference": ref}
    same = mtp_tune_attempt(_launch(plan, ref))
    assert same["status"] == "ok" and same["numerics"]["ok"] and same["running_cap"] == 40
    differ = mtp_tune_attempt(_launch(plan, [ref[0], {"index": 1, "output_ids": [4, 6]}]))
    assert differ["status"] == "failed" and differ["failure_class"] == "numerics"
    assert "1 of 2 greedy prompts" in differ["failure_line"]
    unchecked = mtp_tune_attempt(_launch(dict(plan, reference=None), ref))
    assert unchecked["failure_class"] == "numerics" and "not checked" in unchecked["failure_line"]


def test_the_running_cap_comes_from_the_scheduler_then_the_log():
    att = mtp_tune_attempt(_launch(None, None, bench={"failed": False, "by_concurrency": {"32": {}}}))
    assert att["running_cap"] == 40 and att["numerics"] is None and att["status"] == "ok"
    assert mtp_cap.queue_bound(dict(att, metrics={"16": {}, "64": {}})) == [64]


def test_cap_levers_are_checked():
    with pytest.raises(AnsibleFilterError, match="mtp_tune_cap_levers items must be among"):
        spec_from({"cap_levers": ["more_memory"]})
    assert spec_from({"cap_levers": ["mamba_full_memory_ratio", "mamba_full_memory_ratio"]}).cap_levers == (
        "mamba_full_memory_ratio",)
