# -*- coding: utf-8 -*-
"""A per-load schedule in the attempt record (mtp_record.mtp_tune_attempt) and in the re-run's
check of the node's record (mtp_noop): the record keeps which schedule a launch served and its
config; a node whose record serves a schedule is not at a static winner, nor at another
schedule, nor is a static node at a schedule winner."""

from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_noop as n
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_record import mtp_tune_attempt
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
