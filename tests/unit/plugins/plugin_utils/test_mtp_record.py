"""Unit tests of plugins/plugin_utils/mtp_record.py, moved from tests/unit/plugins/filter/test_mtp_tune.py."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_record import mtp_tune_attempt
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates


def _launch(**kw):
    nxt = {"candidate": mtp_tune_candidates([4])[0], "overrides": {}, "fit_rung": None, "reason": "sweep"}
    out = {"next": nxt, "run": "R", "workload": {"levels": [1]}, "ready": True, "cap": None, "judged_floor": 4,
           "started": "2026-12-04T21:00:00Z", "launch_s": "12.5", "wall_s": 40.0,
           "wait": {"ready": True, "seconds": 11.0},
           "bench": {"failed": False, "by_concurrency": {"1": {"concurrency": 1, "completed": 10}},
                     "levels": [{"concurrency": 1, "completed": 10}], "duration_s": 20.0, "server": {"tp_size": 4},
                     "bench_warnings": ["w"]}}
    out.update(kw)
    return out


def test_attempt_record_of_a_measured_launch():
    att = mtp_tune_attempt(_launch())
    assert att["key"] == "s4-k1-d5" and att["status"] == "ok" and att["failure_class"] is None
    assert att["metrics"] == {"1": {"concurrency": 1, "completed": 10}} and att["bench_warnings"] == ["w"]
    assert att["timings"] == {"started": "2026-12-04T21:00:00Z", "launch_s": 12.5, "wait_s": 11.0, "bench_s": 20.0,
                              "wall_s": 40.0}
    assert att["hint"] is None and att["journal_tail"] == [] and att["server"] == {"tp_size": 4}
    assert att["run"] == "R" and att["workload"] == {"levels": [1]} and att["reason"] == "sweep"


def test_attempt_record_of_each_failure():
    down = mtp_tune_attempt(_launch(ready=False, bench={"skipped": True},
                                    wait={"ready": False, "failure_class": "oom_kv_cache", "failure_line": "L",
                                          "hint": "H", "journal_tail": ["a", "b"]}))
    assert (down["status"], down["failure_class"], down["failure_line"], down["hint"]) == ("failed", "oom_kv_cache", "L", "H")
    assert down["journal_tail"] == ["a", "b"] and down["metrics"] == {}
    # a wait that names no class, or never ran
    assert mtp_tune_attempt(_launch(ready="False", wait={}, bench={}))["failure_class"] == "unknown"
    capped = mtp_tune_attempt(_launch(cap=3))
    assert capped["failure_class"] == "capped" and "capped max_running_requests to 3, below the floor of 4" in \
        capped["failure_line"]
    # a benchmark that failed keeps the levels it finished
    half = mtp_tune_attempt(_launch(bench={"failed": True, "msg": "server lost", "levels": [
        {"concurrency": 1, "completed": 10}, {"concurrency": 8, "completed": 0}]}))
    assert half["failure_class"] == "bench_failed" and half["failure_line"] == "server lost"
    assert sorted(half["metrics"]) == ["1", "8"] and half["journal_tail"] == []
    with pytest.raises(AnsibleFilterError, match="mtp_tune_attempt needs a dict"):
        mtp_tune_attempt({"ready": True})
