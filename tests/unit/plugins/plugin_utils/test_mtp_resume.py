"""The resume decisions (plugins/plugin_utils/mtp_resume.py): what a run keeps from an earlier one,
and how it picks up an interrupted one."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_resume as r
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_resume import mtp_tune_measured, mtp_tune_resume
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import mtp_tune_next
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates
from mtp_tune_cases import launch, LEVELS

BENCH = {"input_len": 128, "output_len": 128, "dataset": "random", "temperature": 0.0, "time_scale": 0.05}
WL = r.mtp_tune_fingerprint(BENCH, "Qwen/Q", "0.5.23", 4, None, [1, 4])
CANDS = mtp_tune_candidates([1, 3, 5])


def _ok(steps, wl=None, levels=(1, 4)):
    wl = WL if wl is None else wl
    return {"key": "s%d-k1-d%d" % (steps, steps + 1), "candidate": {"steps": steps, "topk": 1, "draft_tokens": steps + 1},
            "status": "ok", "metrics": dict((str(c), {"output_throughput": 10.0 * steps}) for c in levels), "workload": wl}


def _failed(steps, cls, wl=None):
    wl = WL if wl is None else wl
    return {"key": "s%d-k1-d%d" % (steps, steps + 1), "candidate": {"steps": steps, "topk": 1, "draft_tokens": steps + 1},
            "status": "failed", "failure_class": cls, "workload": wl}


def test_fingerprint_normalises_and_ignores_checksum_for_random():
    assert WL["levels"] == [1, 4] and WL["dataset_sha256"] is None and WL["tp"] == 4
    same = r.mtp_tune_fingerprint(dict(BENCH, input_len="128"), "Qwen/Q", "0.5.23", "4", "abc", ["4", 1])
    assert r.mtp_tune_fingerprint_diff(WL, same) == []
    assert same["input_len"] == 128 and isinstance(same["input_len"], int)
    assert r.mtp_tune_fingerprint(dict(BENCH, time_scale="0.05"))["time_scale"] == 0.05
    with pytest.raises(AnsibleFilterError):
        r.mtp_tune_fingerprint(dict(BENCH, output_len="many"))
    with pytest.raises(AnsibleFilterError):
        r.mtp_tune_fingerprint(BENCH, levels=["x"])


def test_diff_names_each_change():
    other = r.mtp_tune_fingerprint(dict(BENCH, input_len=256, dataset="/d.jsonl"), "Qwen/Q", "0.5.23", 4, "f00", [1, 8])
    diff = r.mtp_tune_fingerprint_diff(WL, other)
    assert "input_len 128 -> 256" in diff
    assert any(d.startswith("dataset random -> /d.jsonl") for d in diff)
    assert any(d.startswith("dataset_sha256") for d in diff)
    assert "levels [1, 4] lack [8]" in diff
    # fewer levels today: the measurement still covers them
    assert r.mtp_tune_fingerprint_diff(WL, dict(WL, levels=[1])) == []
    assert r.mtp_tune_fingerprint_diff(None, WL) == ["no workload recorded with the measurement"]


def test_same_dataset_name_new_content_is_a_mismatch():
    a = r.mtp_tune_fingerprint(dict(BENCH, dataset="/d.jsonl"), "m", "r", 1, "aaa", [1])
    b = r.mtp_tune_fingerprint(dict(BENCH, dataset="/d.jsonl"), "m", "r", 1, "bbb", [1])
    assert r.mtp_tune_fingerprint_diff(a, b) == ["dataset_sha256 aaa -> bbb"]


def test_plan_reuses_matching_measurements_only():
    other = dict(WL, output_len=256)
    loaded = {"attempts": [_ok(1), _ok(3, wl=other)]}
    plan = r.mtp_tune_resume_plan(loaded, CANDS, [1, 4], WL)
    assert [a["key"] for a in plan["attempts"]] == ["s1-k1-d2"]
    assert plan["attempts"][0]["resumed"] is True
    assert plan["mismatched"] == {"s3-k1-d4": ["output_len 256 -> 128"]}
    assert [a["key"] for a in plan["superseded"]] == ["s3-k1-d4"]
    assert plan["stop"] is None
    assert "another workload" in plan["message"] and "output_len 256 -> 128" in plan["message"]


def test_plan_stop_says_what_to_do():
    plan = r.mtp_tune_resume_plan({"attempts": [_ok(3, wl=dict(WL, model="x"))]}, CANDS, [1, 4], WL, "stop")
    assert "mtp_tune_resume_mismatch=measure" in plan["stop"] and "model x -> Qwen/Q" in plan["stop"]
    with pytest.raises(AnsibleFilterError):
        r.mtp_tune_resume_plan({}, CANDS, [1], WL, "ignore")


def test_plan_retries_bench_failed_but_keeps_final_failures():
    loaded = {"attempts": [_failed(1, "bench_failed"), _failed(5, "oom_kv_cache"), _ok(3)]}
    plan = r.mtp_tune_resume_plan(loaded, CANDS, [1, 4], WL)
    assert plan["retry"] == ["s1-k1-d2"]
    assert sorted(a["key"] for a in plan["attempts"]) == ["s3-k1-d4", "s5-k1-d6"]
    assert [a["key"] for a in plan["superseded"]] == ["s1-k1-d2"]
    # the retry classes are the operator's: none retried
    plan = r.mtp_tune_resume_plan(loaded, CANDS, [1, 4], WL, retry_classes=[])
    assert plan["retry"] == [] and len(plan["attempts"]) == 3


def test_plan_keeps_earlier_superseded_and_force_keeps_nothing():
    loaded = {"attempts": [_ok(1)], "superseded": [dict(_ok(3), workload=None)]}
    plan = r.mtp_tune_resume_plan(loaded, CANDS, [1, 4], WL)
    assert [a["key"] for a in plan["superseded"]] == ["s3-k1-d4"]
    assert r.mtp_tune_resume_plan(loaded, CANDS, [1, 4], WL, force=True)["attempts"] == []
    assert r.mtp_tune_resume_plan(None, CANDS, [1, 4], WL)["attempts"] == []
    with pytest.raises(AnsibleFilterError):
        r.mtp_tune_resume_plan({"attempts": "x"}, CANDS, [1], WL)


def test_runs_mark_a_running_predecessor_interrupted():
    runs = r.mtp_tune_runs(None, "A", "t0")
    assert runs == [{"id": "A", "started": "t0", "state": "running"}]
    assert r.mtp_tune_runs({"runs": runs}, "A", "t9") == runs  # joins once
    # a run that launches nothing does not join, but still says what happened before it
    assert r.mtp_tune_runs({"runs": runs}) == [{"id": "A", "started": "t0", "state": "interrupted"}]
    runs = r.mtp_tune_runs({"runs": runs}, "B", "t1")
    assert [(x["id"], x["state"]) for x in runs] == [("A", "interrupted"), ("B", "running")]
    done = r.mtp_tune_run_state(runs, "B", "finished", "t2")
    assert done[-1] == {"id": "B", "started": "t1", "state": "finished", "ended": "t2"}
    assert runs[-1]["state"] == "running"  # not changed in place
    assert r.mtp_tune_run_state(done, "C", "failed") == done
    assert r.mtp_tune_runs({"runs": done}) == done
    with pytest.raises(AnsibleFilterError):
        r.mtp_tune_run_state(runs, "B", "paused")


def test_active_plan():
    d = "/var/lib/sglang-mtp-tune/sglang-qwen.service"
    fresh = r.mtp_tune_active_plan(None, "x", "20260101T000000Z", d + "/")
    assert fresh["backup"] == d + "/20260101T000000Z.pre-mtp-tune" and not fresh["reuse_backup"]
    assert not fresh["restore_first"] and fresh["interrupted"] is None
    marker = {"run": "x", "run_id": "1", "backup": d + "/1.pre-mtp-tune", "unit_existed": True, "started": "t"}
    same = r.mtp_tune_active_plan(marker, "x", "2", d)
    assert same["backup"] == marker["backup"] and same["reuse_backup"] and same["unit_existed"]
    assert not same["restore_first"]
    other = r.mtp_tune_active_plan(marker, "y", "2", d)
    assert other["restore_first"] and other["backup"] == d + "/2.pre-mtp-tune" and not other["reuse_backup"]
    assert "restoring its pre-tuning unit" in other["message"]
    gone = r.mtp_tune_active_plan(dict(marker, unit_existed=False), "y", "2", d)
    assert "removing the unit" in gone["message"]


def test_bench_deadline():
    assert r.mtp_tune_bench_deadline([], 42) == 42.0
    with pytest.raises(AnsibleFilterError):
        r.mtp_tune_bench_deadline([], 0)
    assert r.mtp_tune_bench_deadline([], None, 600, [1, 4], 2) == 2460.0
    atts = [dict(_ok(1), timings={"bench_s": 10.0}), dict(_ok(3), timings={"bench_s": 20.0}),
            dict(_failed(5, "bench_failed"), timings={"bench_s": 900})]
    assert r.mtp_tune_bench_deadline(atts, None, 600, [1, 4]) == 120.0
    # a search at the judged level measured one level in 20 s; completing the winner's table at
    # six levels may take six times that
    judged = [dict(_ok(3, levels=(1,)), timings={"bench_s": 20.0})]
    assert r.mtp_tune_bench_deadline(judged, None, 600, [1]) == 120.0
    assert r.mtp_tune_bench_deadline(judged, None, 600, [1, 2, 4, 8, 16, 32]) == 420.0
    assert r.mtp_tune_bench_deadline(judged, None, 600) == 120.0


# ---------------------------------------------------------------------------- moved from tests/unit/plugins/filter/test_mtp_tune.py

def test_resume_keeps_decided_candidates_and_remeasures_missing_levels():
    cands = mtp_tune_candidates([3, 4, 10])
    atts = [launch({"candidate": c, "overrides": {}, "fit_rung": None}) for c in cands]
    assert [a["status"] for a in atts] == ["ok", "ok", "failed"]
    assert mtp_tune_measured(atts, cands, LEVELS) == ["s3-k1-d4", "s4-k1-d5", "s10-k1-d11"]
    del atts[1]["metrics"]["32"]
    assert mtp_tune_measured(atts, cands, LEVELS) == ["s3-k1-d4", "s10-k1-d11"]
    kept = mtp_tune_resume({"attempts": atts}, cands, LEVELS)
    assert [a["key"] for a in kept] == ["s3-k1-d4", "s10-k1-d11"] and all(a["resumed"] for a in kept)
    assert "resumed" not in atts[0]  # the loaded data is not mutated
    assert mtp_tune_resume({"attempts": atts}, cands, LEVELS, force=True) == []
    # a candidate no longer in the list is not resumed
    assert [a["key"] for a in mtp_tune_resume({"attempts": atts}, cands[:1], LEVELS)] == ["s3-k1-d4"]
    with pytest.raises(AnsibleFilterError, match="mtp_tune_force"):
        mtp_tune_resume({"attempts": "garbage"}, cands, LEVELS)
    # the search after a resume does not relaunch what is measured
    nxt = mtp_tune_next(kept, cands, spec={"strategy": "sweep"})
    assert nxt["candidate"]["key"] == "s4-k1-d5"
