# -*- coding: utf-8 -*-
"""A per-load schedule in the attempt record (mtp_record.mtp_tune_attempt) and in the re-run's
check of the node's record (mtp_noop): the record keeps which schedule a launch served and its
config; a node whose record serves a schedule is not at a static winner, nor at another
schedule, nor is a static node at a schedule winner."""

from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_noop as n
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_record import mtp_tune_attempt
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_resume import mtp_tune_resume_plan
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates

# as the search builds it (int keys) and as the node's record keeps it (canonical)
TUNED = {1: {"candidate_steps": [4]}, 4: {"candidate_steps": [3]}}


def _launch(overrides, schedule=None):
    nxt = {"candidate": mtp_tune_candidates([4])[0], "overrides": overrides, "fit_rung": None, "reason": "schedule"}
    if schedule:
        nxt["schedule"] = schedule
    return {"next": nxt, "run": "R", "workload": {"levels": [1, 16]}, "ready": True, "cap": None, "judged_floor": 16,
            "started": "2026-12-07T15:00:00Z", "launch_s": 10.0, "wall_s": 30.0, "wait": {"ready": True, "seconds": 9.0},
            "bench": {"failed": False, "by_concurrency": {"1": {"concurrency": 1}, "16": {"concurrency": 16}},
                      "levels": [], "duration_s": 20.0}}


def test_the_record_keeps_the_schedule_and_its_config():
    tuned = mtp_tune_attempt(_launch({"speculative_adaptive": True, "speculative_adaptive_config": TUNED}, "tuned"))
    assert tuned["schedule"] == "tuned" and tuned["status"] == "ok"
    assert tuned["schedule_config"] == {"1": {"candidate_steps": [4]}, "4": {"candidate_steps": [3]}}
    # the overrides stay as the search gave them: the service role renders them
    assert tuned["overrides"]["speculative_adaptive_config"] == TUNED
    default = mtp_tune_attempt(_launch({"speculative_adaptive": True, "speculative_adaptive_config": None}, "default"))
    assert default["schedule"] == "default" and default["schedule_config"] is None
    # a choice that does not say which: from the config
    assert mtp_tune_attempt(_launch({"speculative_adaptive": "true", "speculative_adaptive_config": TUNED}))["schedule"] == "tuned"
    assert mtp_tune_attempt(_launch({"speculative_adaptive": True}))["schedule"] == "default"
    static = mtp_tune_attempt(_launch({}))
    assert "schedule" not in static and "schedule_config" not in static
    off = mtp_tune_attempt(_launch({"speculative_adaptive": None, "speculative_adaptive_config": None}))
    assert "schedule" not in off


def _record(**setting):
    base = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 4, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 5, "cuda_graph_max_bs": None, "max_running_requests": None,
            "speculative_adaptive": None, "speculative_adaptive_config": None}
    base.update(setting)
    return {"schema": 1, "setting": base, "provenance": {"by": "mtp_tune", "run": "schedule"}}


def _winner(overrides):
    return {"key": "s4-k1-d5", "candidate": {"steps": 4, "topk": 1, "draft_tokens": 5}, "overrides": overrides}


SCHEDULE_WINNER = _winner({"speculative_adaptive": True, "speculative_adaptive_config": TUNED})
SERVES_IT = _record(speculative_adaptive=True, speculative_adaptive_config=spec_schedule.canonical(TUNED))


def test_a_node_that_serves_the_winner_s_schedule_is_at_it():
    assert n._record_reasons(SERVES_IT, SCHEDULE_WINNER, "schedule") == []
    # as results.json gives the winner back (string keys) and the record keeps it (floats spelled out)
    spelled = _winner({"speculative_adaptive": "true",
                       "speculative_adaptive_config": {"4": {"candidate_steps": [3]}, "1": {"candidate_steps": [4]}}})
    assert n._record_reasons(SERVES_IT, spelled, "schedule") == []
    # SGLang's built-in schedule: no config on either side
    built_in = _record(speculative_adaptive=True)
    assert n._record_reasons(built_in, _winner({"speculative_adaptive": True, "speculative_adaptive_config": None}),
                             "schedule") == []


def test_a_node_that_serves_a_schedule_is_not_at_a_static_winner():
    # the static winner's overrides name no schedule: the record's must be off too
    assert n._record_reasons(SERVES_IT, _winner({}), "schedule") == [
        "the node's record serves a per-load schedule, the winner static steps"]
    assert n._record_reasons(_record(), _winner({}), "schedule") == []
    assert n._record_reasons(_record(speculative_adaptive=False), _winner({"speculative_adaptive": None}), "schedule") == []


def test_another_schedule_or_none_is_not_the_winner_s():
    other = _record(speculative_adaptive=True, speculative_adaptive_config={"1": {"candidate_steps": [3]}})
    assert n._record_reasons(other, SCHEDULE_WINNER, "schedule") == [
        "the node's record has the schedule 1:3, the winner 1:4 4:3"]
    assert n._record_reasons(_record(), SCHEDULE_WINNER, "schedule") == [
        "the node's record serves static steps, the winner is a per-load schedule"]
    built_in = _record(speculative_adaptive=True)
    assert n._record_reasons(built_in, SCHEDULE_WINNER, "schedule") == [
        "the node's record has the schedule SGLang's default, the winner 1:4 4:3"]


# ---------------------------------------------------------------------------- a whole schedule run, then its re-run

def _figures(nxt):
    """Aggregate tok/s at C=1 and C=16 of each launch (the sim's perf model at acceptance 0.77 on the
    operator's node, rounded): steps 4 best at C=1, steps 2 at C=16; a schedule serves each level
    at its slot's step, SGLang's default below both."""
    kind = nxt.get("schedule")
    if kind == "tuned":
        return {1: 178.0, 16: 1150.0}
    if kind == "default":
        return {1: 165.0, 16: 1008.0}
    return {2: {1: 143.0, 16: 1157.0}, 4: {1: 180.0, 16: 1027.0}}[nxt["candidate"]["steps"]]


def _schedule_run():
    from ansible_collections.blackwell.sglang.plugins.filter.mtp_tune import FilterModule as Tune
    from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_resume import mtp_tune_fingerprint
    tune = Tune().filters()
    bench = {"input_len": 64, "output_len": 64, "dataset": "random", "temperature": 1.5, "time_scale": 0.5}
    wl = mtp_tune_fingerprint(bench, "Qwen/Q", None, 4, None, [1, 16])
    spec = {"objective": "throughput", "level": 16, "levels": [1, 16], "strategy": "climb", "converge": True,
            "schedule": True, "schedule_default": True, "noise": 0.03}
    cands = mtp_tune_candidates([2, 4])
    attempts = []
    for _i in range(10):
        nxt = tune["mtp_tune_next"](attempts, cands, {}, spec)
        if nxt is None:
            break
        figs = _figures(nxt)
        by = dict((str(c), {"concurrency": c, "output_throughput": v, "completed": 5 * c, "failed": 0})
                  for c, v in figs.items())
        launch = dict(_launch({}), next=nxt, run="20261207T150000Z", workload=wl)
        launch["bench"] = {"failed": False, "by_concurrency": by, "levels": list(by.values()), "duration_s": 5.0}
        attempts.append(mtp_tune_attempt(launch))
    winner = tune["mtp_tune_winner"](attempts, spec, None, "2026-12-07T15:10:00Z", cands)
    settings = {"objective": "throughput", "concurrency": [1, 16], "schedule": True, "bench": bench}
    unit = "/etc/systemd/system/sglang-qwen.service"
    sha1 = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"
    inputs = n.mtp_tune_inputs_digest({"sglang_service_name": "qwen"})
    results = {"schema": 1, "run": "schedule", "settings": settings, "attempts": attempts, "winner": winner,
               "workload": wl, "superseded": [],
               "runs": [{"id": "20261207T150000Z", "state": "finished", "ended": "2026-12-07T15:12:00Z"}],
               "converge": {"key": winner["key"], "unit": unit, "unit_sha1": sha1, "inputs": inputs,
                            "verify": {"ok": True}, "at": "2026-12-07T15:11:00Z"}}
    # what the role's resume.yml keeps of the results for the re-run
    resume = mtp_tune_resume_plan(results, cands, [1, 16], wl)
    run = {"force": False, "pool": False, "converge": True, "run_name": "schedule", "settings": settings, "workload": wl,
           "resume": resume, "attempts": resume["attempts"],
           "candidates": cands, "ladder": {}, "spec": spec, "search_all_levels": True, "interrupted": False,
           "unit_path": unit, "inputs": inputs, "report": "/r/schedule/node/summary.md"}
    node = {"unit_exists": True, "unit_sha1": sha1, "ready": True, "unit": {"active_state": "active"},
            "record": _record(speculative_adaptive=True,
                              speculative_adaptive_config=spec_schedule.canonical(
                                  winner["overrides"].get("speculative_adaptive_config")))}
    return results, run, node


def test_a_rerun_of_a_converged_schedule_launches_nothing():
    from ansible_collections.blackwell.sglang.plugins.filter.mtp_resume import FilterModule as Resume
    noop = Resume().filters()["mtp_tune_noop"]
    results, run, node = _schedule_run()
    kinds = [a.get("schedule") for a in results["attempts"]]
    assert kinds == [None, None, "tuned", "default"], [a["key"] for a in results["attempts"]]
    assert results["attempts"][2]["schedule_config"] == {"1": {"candidate_steps": [4]}, "4": {"candidate_steps": [2]}}
    assert results["winner"]["schedule"]["verdict"] == "schedule", results["winner"]["schedule"]["why"]
    # the re-run keeps every launch, the schedules' too (their keys are not candidates')
    assert [a["key"] for a in run["attempts"]] == [a["key"] for a in results["attempts"]]
    assert all(a["resumed"] for a in run["attempts"]) and run["resume"]["superseded"] == []
    out = noop(results, run, node)
    assert out["skip"] is True and out["why"] == [], out
    assert "schedule=1:4 4:2" in out["message"] and "speculative_adaptive" not in out["message"]
    # the node serving static steps, or another schedule, goes on
    node["record"] = _record()
    assert noop(results, run, node)["why"] == ["the node's record serves static steps, the winner is a per-load schedule"]
    node["record"] = _record(speculative_adaptive=True, speculative_adaptive_config={"1": {"candidate_steps": [4]}})
    assert noop(results, run, node)["why"] == ["the node's record has the schedule 1:4, the winner 1:4 4:2"]
