"""Unit tests for the rollout filters: what to roll out, reading units back, smoke floors, the
failure budget and the fleet summary."""

import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.blackwell.sglang.plugins.filter import rollout as f
from ansible_collections.blackwell.sglang.plugins.filter import service as svc
from ansible_collections.blackwell.sglang.plugins.module_utils import mtp_report

Err = f.AnsibleFilterError


# --------------------------------------------------------------------------- fixtures

def level(c, decode, agg, failed=0, completed=8):
    """A level the way sglang_bench returns it (nested decode stats)."""
    return {"concurrency": c, "completed": completed, "failed": failed, "output_throughput": agg,
            "decode_tps_per_request": {"mean": decode, "p50": decode}, "ttft_ms": {"p99": 80.0}}


def attempt(steps, status="ok", metrics=None, overrides=None, failure_class=None):
    cand = {"steps": steps, "topk": 1, "draft_tokens": steps + 1, "key": "s%d-k1-d%d" % (steps, steps + 1)}
    att = {"key": cand["key"], "candidate": cand, "overrides": overrides or {}, "status": status,
           "failure_class": failure_class, "metrics": metrics if status == "ok" else {}}
    return att


def results_doc(host="gpu-a1", winner_steps=4, overrides=None):
    """A results.json in the schema mtp_report writes (validated by mtp_report itself)."""
    atts = [
        attempt(3, metrics={"1": level(1, 234.0, 234.0), "16": level(16, 120.0, 1900.0)}),
        attempt(4, metrics={"1": level(1, 277.0, 277.0), "16": level(16, 100.0, 1596.0)}),
        attempt(10, status="failed", failure_class="oom_kv_cache"),
    ]
    if overrides:
        atts.append(attempt(winner_steps, metrics={"1": level(1, 281.0, 281.0)}, overrides=overrides))
    win = [a for a in atts if a["candidate"]["steps"] == winner_steps and a["overrides"] == (overrides or {})][0]
    doc = {"schema": 1, "host": host, "run": "r1", "settings": {"concurrency": [1, 16]}, "attempts": atts,
           "winner": {"key": win["key"], "candidate": win["candidate"], "overrides": overrides or {},
                      "score": {"value": 277.0}, "decided_by": "beats the runner-up beyond noise", "tied": []}}
    mtp_report.validate(doc)
    return doc


def as_item(doc, path="results/mtp_tune/r1/gpu-a1/results.json"):
    return {"path": path, "text": mtp_report.render_json(doc)}


# --------------------------------------------------------------------------- rollout_requested

def test_requested_from_extra_vars_derives_draft_tokens():
    got = f.rollout_requested("4")  # extra vars arrive as strings
    assert (got["speculative_num_steps"], got["speculative_eagle_topk"], got["speculative_num_draft_tokens"]) == (4, 1, 5)
    assert got["source"] == "extra_vars" and got["overrides"] == {} and got["label"] == "steps=4 topk=1 draft=5"


def test_requested_topk_above_one_needs_draft_tokens():
    with pytest.raises(Err, match="num_draft_tokens is required"):
        f.rollout_requested(3, topk=4)
    got = f.rollout_requested(3, topk=4, draft_tokens=8)
    assert got["speculative_num_draft_tokens"] == 8


@pytest.mark.parametrize("kwargs,msg", [
    ({}, "nothing to roll out"),
    ({"steps": 0}, ">= 1"),
    ({"steps": "four"}, "must be an integer"),
    ({"steps": True}, "must be an integer"),
    ({"topk": 2}, "num_steps is required"),
    ({"steps": 4, "draft_tokens": 7}, "steps \\+ 1"),
])
def test_requested_rejects_bad_input(kwargs, msg):
    with pytest.raises(Err, match=msg):
        f.rollout_requested(**kwargs)


def test_requested_refuses_two_sources():
    tuned = f.rollout_tuned_setting([as_item(results_doc())])
    with pytest.raises(Err, match="not both"):
        f.rollout_requested(5, tuned=tuned)


def test_requested_from_tuning_winner_keeps_overrides_and_figures():
    tuned = f.rollout_tuned_setting([as_item(results_doc(winner_steps=5, overrides={"cuda_graph_max_bs": 64}))])
    got = f.rollout_requested(None, None, None, tuned=tuned)
    assert got["speculative_num_steps"] == 5 and got["overrides"] == {"cuda_graph_max_bs": 64}
    assert got["source"] == "mtp_tune" and got["tuned"]["1"]["decode_tps_mean"] == 281.0
    assert got["label"] == "steps=5 topk=1 draft=6 [cuda_graph_max_bs=64]"
    assert got["tuned_from"]["host"] == "gpu-a1"


# --------------------------------------------------------------------------- rollout_tuned_setting

def test_tuned_setting_reads_winner_and_its_figures():
    got = f.rollout_tuned_setting([as_item(results_doc())])
    assert (got["steps"], got["topk"], got["draft_tokens"], got["key"]) == (4, 1, 5, "s4-k1-d5")
    assert got["figures"]["1"]["decode_tps_mean"] == 277.0
    assert got["figures"]["16"]["output_throughput"] == 1596.0


def test_tuned_setting_several_hosts_same_winner_is_fine():
    got = f.rollout_tuned_setting([as_item(results_doc("a")), as_item(results_doc("b"), "x/b/results.json")])
    assert got["steps"] == 4


def test_tuned_setting_different_winners_need_a_choice():
    docs = [as_item(results_doc("a", 4)), as_item(results_doc("b", 3), "x/b/results.json")]
    with pytest.raises(Err, match="different winners per host"):
        f.rollout_tuned_setting(docs)
    assert f.rollout_tuned_setting(docs, host="b")["steps"] == 3


def test_tuned_setting_without_winner_or_files():
    doc = results_doc()
    doc["winner"] = None
    with pytest.raises(Err, match="has no winner"):
        f.rollout_tuned_setting([as_item(doc)])
    with pytest.raises(Err, match="no results.json found in /srv/results/x"):
        f.rollout_tuned_setting([], source="/srv/results/x")
    with pytest.raises(Err, match="not valid JSON"):
        f.rollout_tuned_setting([{"path": "r.json", "text": "{broken"}])
    with pytest.raises(Err, match="not a tune_mtp.yml results file"):
        f.rollout_tuned_setting([{"path": "r.json", "text": json.dumps({"schema": 7})}])
    with pytest.raises(Err, match="no results file for host zz"):
        f.rollout_tuned_setting([as_item(results_doc())], host="zz")


# --------------------------------------------------------------------------- rollout_unit_settings

def test_unit_settings_read_back_from_the_service_roles_comment():
    settings = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                "tp_size": 4, "kv_cache_dtype": "bf16"}
    unit = "# Ansible managed\n# sglang-settings: %s\n[Service]\nExecStart=/x -m sglang.launch_server\n" % (
        svc.sglang_service_summary(settings))
    got = f.rollout_unit_settings(unit)
    assert got["read_from"] == "settings_comment"
    assert (got["speculative_num_steps"], got["speculative_num_draft_tokens"], got["tp_size"]) == (3, 4, 4)
    assert f.rollout_at_setting(got, f.rollout_requested(3)) is True
    assert f.rollout_at_setting(got, f.rollout_requested(4)) is False


def test_unit_settings_from_a_hand_written_unit():
    # The operator's own unit, from before the collection, with a continued ExecStart line.
    unit = ("[Service]\nExecStart=/opt/venv/bin/python -m sglang.launch_server --model-path Qwen/Qwen3.5 \\\n"
            "  --tp 4 --kv-cache-dtype bf16 --speculative-algorithm nextn --speculative-num-steps=5 \\\n"
            "  --cuda-graph-max-bs 128\nRestart=always\n")
    got = f.rollout_unit_settings(unit)
    assert got["read_from"] == "exec_start"
    assert got["speculative_algorithm"] == "NEXTN"
    assert (got["speculative_num_steps"], got["speculative_eagle_topk"], got["speculative_num_draft_tokens"]) == (5, 1, 6)
    assert (got["tp_size"], got["cuda_graph_max_bs"]) == (4, 128)
    req = f.rollout_requested(5)
    assert f.rollout_at_setting(got, req)
    req["overrides"] = {"cuda_graph_max_bs": 64}
    assert not f.rollout_at_setting(got, req)


def test_unit_settings_absent_or_unreadable():
    assert f.rollout_unit_settings(None) is None
    assert f.rollout_unit_settings("") is None
    assert f.rollout_unit_settings("[Unit]\nDescription=x\n") == {"read_from": "unreadable"}
    assert not f.rollout_at_setting(None, f.rollout_requested(3))


# --------------------------------------------------------------------------- rollout_smoke_check

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


# --------------------------------------------------------------------------- rollout_budget

def results(*outcomes):
    return [{"host": "n%d" % i, "outcome": o} for i, o in enumerate(outcomes, 1)]


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


# --------------------------------------------------------------------------- summary

def test_summary_rows_in_inventory_order_with_missing_hosts():
    req = f.rollout_requested(4)
    recs = [
        {"host": "n2", "outcome": "rolled_back",
         "old": {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4},
         "new": {"speculative_num_steps": 4, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 5},
         "serving": "old", "failure_class": "oom_kv_cache", "reason": "server did not start",
         "journal_tail": ["RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."]},
        {"host": "n1", "outcome": "updated", "serving": "new",
         "smoke": {"ok": True, "figures": {"1": {"decode_tps_mean": 277.2, "output_throughput": 270.0},
                                           "8": {"decode_tps_mean": 190.0, "output_throughput": 1400.4}}}},
    ]
    budget = f.rollout_budget(recs, 4, 0)
    s = f.rollout_summary(recs, ["n1", "n2", "n3", "n4"], req, budget,
                          {"run_id": "20261202T150000Z", "in_progress": ["n3"], "hosts": ["n1"], "serial": 1})
    assert s["run"] == {"run_id": "20261202T150000Z", "in_progress": ["n3"], "serial": 1}
    assert [n["host"] for n in s["nodes"]] == ["n1", "n2", "n3", "n4"]
    assert [n["outcome"] for n in s["nodes"]] == ["updated", "rolled_back", "in_progress", "skipped"]
    assert s["status"] == "stopped_by_failure_budget" and not s["complete"]
    assert s["counts"] == {"updated": 1, "rolled_back": 1, "in_progress": 1, "skipped": 1}
    md = f.rollout_summary_markdown(s)
    assert md.startswith("# SGLang rollout 20261202T150000Z\n")
    assert "| n1 | updated | - | - | new | - | C1 277/270 · C8 190/1400 ✓ |  |" in md
    assert "| n2 | rolled_back | steps=3 topk=1 draft=4 | steps=4 topk=1 draft=5 | old | - | - | oom_kv_cache: server did not start |" in md
    assert "RuntimeError: Not enough memory" in md
    assert "1 of 4 nodes failed, 0 allowed" in md and "status: **stopped_by_failure_budget**" in md
    back = json.loads(f.rollout_summary_json(s))
    assert back["nodes"][1]["failure_class"] == "oom_kv_cache"


def test_summary_complete_and_check_mode():
    recs = results("updated", "unchanged")
    s = f.rollout_summary(recs, ["n1", "n2"], f.rollout_requested(4), f.rollout_budget(recs, 2, 0), {"id": "x"})
    assert s["complete"] and s["status"] == "complete"
    s = f.rollout_summary(results("would_update", "unchanged"), ["n1", "n2"], check_mode=True)
    assert s["status"] == "check_mode" and not s["complete"]


def test_summary_rejects_unknown_outcome_and_nan():
    with pytest.raises(Err, match="unknown rollout outcome"):
        f.rollout_summary([{"host": "a", "outcome": "great"}], ["a"])
    text = f.rollout_summary_json({"x": float("nan")})
    assert json.loads(text) == {"x": None}


def test_label_without_speculation():
    assert f.setting_label(None) == "-"
    assert f.setting_label({"speculative_algorithm": None}) == "no speculation"


def test_filters_are_exposed():
    names = set(f.FilterModule().filters())
    assert {"rollout_requested", "rollout_tuned_setting", "rollout_unit_settings", "rollout_smoke_check",
            "rollout_budget", "rollout_summary", "rollout_summary_markdown", "rollout_summary_json"} <= names


def test_kind_tells_apart_nodes_of_another_model_or_tp():
    names = ["sglang_service_model_path", "sglang_service_tp"]
    rtx = {"sglang_service_model_path": "Qwen/Qwen3.5-122B-A10B", "sglang_service_tp": 4}
    rtx_str = {"sglang_service_model_path": "Qwen/Qwen3.5-122B-A10B", "sglang_service_tp": "4"}  # -e / ini vars
    b200 = {"sglang_service_model_path": "deepseek-ai/DeepSeek-V3-0324", "sglang_service_tp": 8}
    kinds = {f.rollout_kind(h, names) for h in (rtx, rtx_str)}
    assert kinds == {"sglang_service_model_path=Qwen/Qwen3.5-122B-A10B, sglang_service_tp=4"}
    assert f.rollout_kind(b200, names) not in kinds
    assert f.rollout_kind({}, names) == "sglang_service_model_path=unset, sglang_service_tp=unset"
    assert f.rollout_kind(rtx, []) == ""


def test_tuned_setting_carries_the_tuning_time_scale_to_the_smoke():
    # The smoke bench reads in the tuning benchmark's time base, so its figures compare with the
    # tuned ones; an older results file without it leaves the choice to the inventory.
    assert f.rollout_tuned_setting([as_item(results_doc())])["time_scale"] is None
    d = results_doc()
    d["settings"]["bench"] = {"time_scale": 0.5, "input_len": 256}
    tuned = f.rollout_tuned_setting([as_item(d)])
    assert tuned["time_scale"] == 0.5
    assert f.rollout_requested(tuned=tuned)["tuned_from"]["time_scale"] == 0.5


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
    md = f.rollout_summary_markdown(f.rollout_summary(recs, ["n1"]))
    assert ("| new | active, tokens, 1 restart, last failure oom_weights, watchdog restarts 2, "
            "before: crash-loop brake hit |") in md


# --------------------------------------------------------------------------- a failed node's record

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


# --------------------------------------------------------------------------- the cap levers

LEVERS = {"mamba_full_memory_ratio": 4.0, "max_mamba_cache_size": 96, "enable_linear_replayssm_spec": True}
LEVER_FLAGS = {"mamba_full_memory_ratio": "--mamba-full-memory-ratio", "max_mamba_cache_size": "--max-mamba-cache-size",
               "enable_linear_replayssm_spec": "--enable-linear-replayssm-spec"}


def test_a_tuned_winner_carries_the_cap_levers():
    overrides = dict(LEVERS, max_running_requests=64)
    tuned = f.rollout_tuned_setting([as_item(results_doc(winner_steps=5, overrides=overrides))])
    got = f.rollout_requested(None, None, None, tuned=tuned)
    assert got["overrides"] == overrides
    assert isinstance(got["overrides"]["mamba_full_memory_ratio"], float)
    assert got["overrides"]["enable_linear_replayssm_spec"] is True
    assert got["label"] == ("steps=5 topk=1 draft=6 [max_running_requests=64, mamba_full_memory_ratio=4.0, "
                            "max_mamba_cache_size=96, enable_linear_replayssm_spec=True]")


@pytest.mark.parametrize("key,value,msg", [
    ("mamba_full_memory_ratio", 0, "mamba_full_memory_ratio must be a number > 0, got 0"),
    ("mamba_full_memory_ratio", "much", "mamba_full_memory_ratio must be a number > 0"),
    ("mamba_full_memory_ratio", True, "mamba_full_memory_ratio must be a number > 0"),
    ("max_mamba_cache_size", 0, "max_mamba_cache_size must be >= 1"),
    ("max_mamba_cache_size", 2.5, "max_mamba_cache_size must be an integer"),
    ("enable_linear_replayssm_spec", "maybe", "enable_linear_replayssm_spec must be true or false"),
    ("enable_linear_replayssm_spec", 1, "enable_linear_replayssm_spec must be true or false"),
])
def test_a_winner_with_a_bad_lever_is_refused(key, value, msg):
    tuned = {"steps": 3, "topk": 1, "draft_tokens": 4, "overrides": {key: value}}
    with pytest.raises(Err, match=msg):
        f.rollout_requested(None, None, None, tuned=tuned)


def test_every_override_reaches_the_service_role_and_its_record():
    # roles/rollout/tasks/node.yml hands each override over as sglang_service_<key>; the service role
    # must know the variable and record the key, or a winner's lever is lost on the way to the node.
    role = Path(__file__).resolve().parents[4] / "roles" / "service"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    for key in f.OVERRIDE_KEYS:
        assert "sglang_service_" + key in defaults, key
        assert key in svc.RECORD_KEYS, key
    node = (Path(__file__).resolve().parents[4] / "roles" / "rollout" / "tasks" / "node.yml").read_text()
    assert '"sglang_service_{{ item.key }}": "{{ item.value }}"' in node


def _rendered_unit(settings):
    """A unit as the service role renders it: the settings comment and the ExecStart argv."""
    flags = dict(LEVER_FLAGS, model_path="--model-path", tp_size="--tp-size", speculative_algorithm="--speculative-algorithm",
                 speculative_num_steps="--speculative-num-steps", speculative_eagle_topk="--speculative-eagle-topk",
                 speculative_num_draft_tokens="--speculative-num-draft-tokens", port="--port")
    argv = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"] + svc.sglang_service_args(settings, flags)
    return ("# Ansible managed\n# sglang-settings: %s\n[Service]\nExecStart=%s\n"
            % (svc.sglang_service_summary(settings), svc.sglang_systemd_exec(argv)))


def test_the_levers_read_back_from_a_rendered_unit():
    settings = dict({"model_path": "/m", "tp_size": 4, "port": 30000, "speculative_algorithm": "NEXTN",
                     "speculative_num_steps": 3}, **LEVERS)
    unit = _rendered_unit(settings)
    assert "--mamba-full-memory-ratio 4.0 --max-mamba-cache-size 96" in unit
    assert unit.rstrip().endswith("--enable-linear-replayssm-spec")
    from_comment = f.rollout_unit_settings(unit)
    no_comment = "\n".join(line for line in unit.splitlines() if "sglang-settings" not in line)
    from_flags = f.rollout_unit_settings(no_comment)
    assert (from_comment["read_from"], from_flags["read_from"]) == ("settings_comment", "exec_start")
    for got in (from_comment, from_flags):
        assert dict((k, got.get(k)) for k in LEVERS) == LEVERS, got
        assert got["speculative_num_steps"] == 3 and got["speculative_num_draft_tokens"] == 4
        req = f.rollout_requested(None, None, None, tuned={"steps": 3, "topk": 1, "draft_tokens": 4,
                                                           "overrides": dict(LEVERS)})
        assert f.rollout_at_setting(got, req)
        req["overrides"] = dict(LEVERS, mamba_full_memory_ratio=2.0)
        assert not f.rollout_at_setting(got, req)
    # without levers: none read back, and "off" is what a winner with ReplaySSM false asks for
    plain = f.rollout_unit_settings(_rendered_unit(dict(settings, **dict((k, None) for k in LEVERS))))
    assert not [k for k in LEVERS if plain.get(k) is not None]
    off = f.rollout_requested(None, None, None, tuned={"steps": 3, "topk": 1, "draft_tokens": 4,
                                                       "overrides": {"enable_linear_replayssm_spec": False}})
    assert f.rollout_at_setting(plain, off) and not f.rollout_at_setting(from_comment, off)


def test_a_hand_written_unit_with_the_levers_in_any_order():
    unit = ("[Service]\nExecStart=/v/bin/python -m sglang.launch_server --enable-linear-replayssm-spec \\\n"
            "  --speculative-algorithm NEXTN --speculative-num-steps 2 --mamba-full-memory-ratio=1.5 "
            "--max-mamba-cache-size 40\n")
    got = f.rollout_unit_settings(unit)
    assert got["enable_linear_replayssm_spec"] is True  # the bare switch takes no value word
    assert got["speculative_algorithm"] == "NEXTN" and got["speculative_num_steps"] == 2
    assert got["mamba_full_memory_ratio"] == 1.5 and got["max_mamba_cache_size"] == 40
