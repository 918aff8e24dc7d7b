"""Whether a node's new setting held during the rollout (plugins/plugin_utils/rollout_gate.py): smoke
check, failure budget, the unit's steadiness, a failed node's record; moved from
tests/unit/plugins/filter/test_rollout.py."""

import pytest

from ansible_collections.blackwell.sglang.plugins.plugin_utils import rollout_gate as f
from ansible_collections.blackwell.sglang.plugins.plugin_utils import rollout_summary
from rollout_cases import Err, level, results


BENCH = {"1": level(1, 270.0, 268.0), "8": level(8, 180.0, 1200.0), "levels": []}


def test_smoke_passes_absolute_floors():
    got = f.rollout_smoke_check(BENCH, [1, 8], min_tok_s=250, min_aggregate_tok_s=1000)
    assert got["ok"], got["reasons"]
    assert [(c["level"], c["figure"], c["ok"]) for c in got["checks"]] == [
        (1, "decode_tps_mean", True), (8, "output_throughput", True)]
    assert got["figures"]["8"]["output_throughput"] == 1200.0


def test_smoke_below_absolute_floor_fails_with_reason():
    got = f.rollout_smoke_check(BENCH, [1, 8], min_tok_s=275)
    assert not got["ok"]
    assert got["reasons"] == ["C=1 decode_tps_mean 270.0 below the floor 275.0 (rollout_min_tok_s)"]


def test_smoke_relative_to_tuned_figures():
    tuned = {"1": {"decode_tps_mean": 277.0, "output_throughput": 277.0},
             "8": {"decode_tps_mean": 190.0, "output_throughput": 1300.0}}
    ok = f.rollout_smoke_check(BENCH, ["1", "8"], tuned=tuned, max_regression_pct=10)
    assert ok["ok"], ok["reasons"]  # 270 >= 249.3 and 1200 >= 1170
    bad = f.rollout_smoke_check(BENCH, [1, 8], tuned=tuned, max_regression_pct=5)
    assert not bad["ok"] and len(bad["reasons"]) == 1 and "C=8 output_throughput" in bad["reasons"][0]
    # A level the tuning run never measured is simply not compared.
    only_c1 = f.rollout_smoke_check(BENCH, [1, 8], tuned={"1": tuned["1"]}, max_regression_pct=5)
    assert only_c1["ok"] and len(only_c1["checks"]) == 1


def test_smoke_failed_requests_or_missing_level_fail_without_floors():
    bench = {"1": level(1, 270.0, 268.0, failed=2), "levels": [level(8, 0.0, 0.0, completed=0)]}
    got = f.rollout_smoke_check(bench, [1, 8, 16])
    assert not got["ok"]
    assert got["reasons"] == ["C=1: 2 request(s) failed", "C=8: no request completed",
                              "level C=16 missing from the smoke bench"]
    assert f.rollout_smoke_check({}, [1])["reasons"] == ["level C=1 missing from the smoke bench"]


@pytest.mark.parametrize("kwargs,msg", [
    ({"concurrency": []}, "at least one level"),
    ({"concurrency": [0]}, ">= 1"),
    ({"concurrency": [1], "min_tok_s": -5}, "rollout_min_tok_s"),
    ({"concurrency": [1], "max_regression_pct": 100}, "below 100"),
    ({"concurrency": [1], "min_aggregate_tok_s": "lots"}, "rollout_min_aggregate_tok_s"),
])
def test_smoke_rejects_bad_settings(kwargs, msg):
    with pytest.raises(Err, match=msg):
        f.rollout_smoke_check(BENCH, **kwargs)


def test_budget_zero_stops_at_first_failure():
    assert not f.rollout_budget(results("updated", "updated"), 3, 0)["spent"]
    got = f.rollout_budget(results("updated", "rolled_back"), 3, 0)
    assert got["spent"] and got["failed"] == 1 and got["allowed"] == 0 and got["failed_hosts"] == ["n2"]


def test_budget_is_a_share_of_the_whole_fleet():
    # 10 nodes, 20%: two failures are allowed, the third spends the budget (like Ansible: "greater than").
    assert f.rollout_budget(results("rolled_back", "failed"), 10, 20) == {
        "total": 10, "failed": 2, "allowed": 2, "spent": False, "max_fail_percentage": 20.0,
        "failed_hosts": ["n1", "n2"]}
    assert f.rollout_budget(results("rolled_back", "failed", "rollback_failed"), 10, "20")["spent"]
    assert not f.rollout_budget(results("rolled_back", "failed", "rolled_back"), 3, 100)["spent"]


def test_budget_unreachable_counts_only_when_asked():
    res = results("updated", "unreachable")
    assert not f.rollout_budget(res, 3, 0)["spent"]
    assert f.rollout_budget(res, 3, 0, count_unreachable=True)["spent"]


@pytest.mark.parametrize("pct", [-1, 101, "half", None])
def test_budget_rejects_bad_percentage(pct):
    with pytest.raises(Err, match="0 to 100"):
        f.rollout_budget([], 3, pct)


def _node_info(active="active", restarts=0, invocation="inv-1", status=None, watchdog=None, result="success"):
    """A sglang_node_info result built with the module's own serving_state."""
    from ansible_collections.blackwell.sglang.plugins.modules import sglang_node_info as ni
    unit = {"installed": True, "active_state": active, "n_restarts": restarts, "invocation_id": invocation,
            "result": result}
    return {"unit": unit, "serving": ni.serving_state(unit, status, watchdog)}


def test_unit_state_reads_the_units_own_record():
    st = f.rollout_unit_state(_node_info(
        restarts=2, status={"last_failure": {"class": "oom_weights", "line": "ValueError: Loaded weights leave no GPU memory",
                                             "time": "2026-12-03T10:00:00Z"}, "consecutive_failures": 0},
        watchdog={"invocation_id": "inv-1", "ready": True, "restarts_total": 1, "gave_up": False}))
    assert st["active"] and st["ready"] is True and st["restarts"] == 2
    assert st["last_failure_class"] == "oom_weights" and st["watchdog_restarts"] == 1 and not st["watchdog_gave_up"]
    braked = f.rollout_unit_state(_node_info(active="failed", result="start-limit-hit"))
    assert not braked["active"] and braked["start_limit_hit"] and braked["ready"] is False
    assert f.rollout_unit_state(None) is None
    assert f.rollout_unit_state({"failed": True, "msg": "cannot parse record"}) is None


@pytest.mark.parametrize("after,expect", [
    (dict(), ""),
    (dict(active="failed"), "is failed after the smoke bench"),
    (dict(restarts=1, status={"last_failure": {"class": "oom_kv_cache"}}), "restarted 1 time(s) during the smoke bench (last failure: oom_kv_cache)"),
    (dict(watchdog={"restarts_total": 1}), "wedge watchdog restarted the unit"),
    (dict(invocation="inv-2"), "started anew during the smoke bench"),
])
def test_unit_steady_names_what_broke(after, expect):
    ready = f.rollout_unit_state(_node_info())
    reason = f.rollout_unit_steady(ready, f.rollout_unit_state(_node_info(**after)))
    assert (expect in reason) if expect else reason == ""


def test_unit_steady_without_a_reading_says_nothing():
    assert f.rollout_unit_steady(None, f.rollout_unit_state(_node_info(active="failed"))) == ""
    assert f.rollout_unit_steady(f.rollout_unit_state(_node_info()), None) == ""


def test_summary_shows_the_units_own_view():
    unit = f.rollout_unit_state(_node_info(restarts=1, status={"last_failure": {"class": "oom_weights"}},
                                           watchdog={"invocation_id": "inv-1", "ready": True, "restarts_total": 2}))
    before = f.rollout_unit_state(_node_info(active="failed", result="start-limit-hit"))
    recs = [{"host": "n1", "outcome": "updated", "serving": "new", "unit": unit, "unit_before": before}]
    md = rollout_summary.rollout_summary_markdown(rollout_summary.rollout_summary(recs, ["n1"]))
    assert ("| new | active, tokens, 1 restart, last failure oom_weights, watchdog restarts 2, "
            "before: crash-loop brake hit |") in md


def test_failed_record_after_a_restore():
    rec = {"host": "n1"}
    back = {"rollback_ready": True, "rollback_failure_class": None, "rollback_journal_tail": list("abcdefghijkl")}
    r = f.rollout_failed_record(rec, "restore", "start", True, "oom", back)
    assert r["outcome"] == "rolled_back" and r["serving"] == "old" and r["host"] == "n1"
    assert r["rollback"] == {"ready": True, "failure_class": None, "journal_tail": list("cdefghijkl")}
    assert rec == {"host": "n1"}  # the record given is not changed
    lost = f.rollout_failed_record(rec, "restore", "smoke", True, "slow",
                                   {"rollback_ready": False, "rollback_failure_class": "timeout"})
    assert lost["outcome"] == "rollback_failed" and lost["serving"] == "none"
    assert lost["rollback"]["failure_class"] == "timeout"
    err = f.rollout_failed_record(rec, "restore", "start", True, "oom", None, False, "copy failed")
    assert err["outcome"] == "rollback_failed" and err["rollback"] == {"ready": False, "error": "copy failed"}


@pytest.mark.parametrize("stage,changed,active,serving", [
    ("smoke", False, False, "new"),    # up and unchanged: it still serves the setting it had
    ("smoke", True, False, "none"),
    ("steady", False, True, "new"),
    ("steady", False, False, "none"),
    ("start", False, True, "none"),
    ("render", False, False, "none"),
])
def test_failed_record_without_a_restore(stage, changed, active, serving):
    r = f.rollout_failed_record({}, "stop", stage, changed, "why", None, active)
    assert r["outcome"] == "failed" and r["serving"] == serving and "rollback" not in r
    tail = "no previous unit to roll back to" if changed else "the unit already had this setting, nothing to roll back to"
    assert r["reason"] == "why; " + tail


def _jinja_truncate(text):
    import jinja2
    return jinja2.Environment().from_string("{{ t | truncate(300) }}").render(t=text)


@pytest.mark.parametrize("text", ["short", "x" * 305, "x" * 306, ("word " * 80).strip(), "a" * 299 + " tail" * 3])
def test_reasons_are_cut_as_jinjas_truncate_cut_them(text):
    assert f._truncate(text) == _jinja_truncate(text)


def test_start_failure_none_when_ready():
    assert f.rollout_start_failure({"ready": True, "failure_class": "oom"}) == {}


def test_start_failure_from_the_service_result():
    res = {"ready": False, "failure_class": "cuda_oom", "failure_line": "torch.OutOfMemoryError: CUDA out of memory",
           "msg": "not ready", "hint": "lower mem_fraction_static", "journal_tail": ["l%d" % i for i in range(30)]}
    got = f.rollout_start_failure(res, 5)
    assert got == {"failure_class": "cuda_oom", "reason": "torch.OutOfMemoryError: CUDA out of memory",
                   "hint": "lower mem_fraction_static", "journal_tail": ["l25", "l26", "l27", "l28", "l29"]}
    assert f.rollout_start_failure(res, "3")["journal_tail"] == ["l27", "l28", "l29"]
    # no failure line: the message; neither: a sentence; no class: unknown
    assert f.rollout_start_failure({"ready": False, "msg": "timed out"}, 10)["reason"] == "timed out"
    bare = f.rollout_start_failure({"ready": False, "failure_class": "", "failure_line": ""}, 10)
    assert bare == {"failure_class": "unknown", "reason": "the server did not become ready", "hint": None,
                    "journal_tail": []}
    long_line = "word " * 100
    assert f.rollout_start_failure({"failure_line": long_line}, 10)["reason"] == _jinja_truncate(long_line)
    with pytest.raises(f.AnsibleFilterError, match="rollout_journal_lines"):
        f.rollout_start_failure({"ready": False}, "ten")


def test_failure_keeps_the_stages_own_description():
    start = {"failure_class": "cuda_oom", "reason": "oom"}
    assert f.rollout_failure(start, "start", None, "ignored") is start


def test_failure_below_floor_after_a_failed_smoke_bench():
    smoke = {"ok": False, "reasons": ["C=1 250 < 275 tok/s", "C=8 aggregate 900 < 1000"]}
    assert f.rollout_failure({}, "smoke", smoke, "Smoke bench below the floor") == {
        "failure_class": "below_floor", "reason": "C=1 250 < 275 tok/s; C=8 aggregate 900 < 1000"}
    # a smoke bench that passed, or none: the failed task's message, under the stage's class
    assert f.rollout_failure({}, "smoke", {"ok": True, "reasons": []}, "bench crashed") == {
        "failure_class": "smoke_error", "reason": "bench crashed"}
    assert f.rollout_failure({}, "render", None) == {"failure_class": "render_error", "reason": "task failed"}
    assert f.rollout_failure({}, "render", None, "x " * 200)["reason"] == _jinja_truncate("x " * 200)


def test_stop_reason_names_the_nodes_down_first():
    budget = {"failed": 2, "total": 4, "failed_hosts": ["n1", "n3"], "spent": True}
    assert f.rollout_stop_reason(budget, ["n3"], 0) == "a node could not be brought back (n3)"
    assert f.rollout_stop_reason(budget, [], 25) == (
        "failure budget spent: 2 of 4 nodes failed (n1, n3), max_fail_percentage 25")
    real = f.rollout_budget(results("rolled_back", "updated"), 2, 0)
    assert f.rollout_stop_reason(real, [], "0").startswith("failure budget spent: 1 of 2 nodes failed (")
