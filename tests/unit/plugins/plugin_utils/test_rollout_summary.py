"""The rollout's fleet summary (plugins/plugin_utils/rollout_summary.py); moved from
tests/unit/plugins/filter/test_rollout.py."""

import json

import pytest

from ansible_collections.blackwell.sglang.plugins.plugin_utils import rollout_gate
from ansible_collections.blackwell.sglang.plugins.plugin_utils import rollout_setting as ro
from ansible_collections.blackwell.sglang.plugins.plugin_utils import rollout_summary as f
from rollout_cases import Err, results


def test_summary_rows_in_inventory_order_with_missing_hosts():
    req = ro.rollout_requested(4)
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
    budget = rollout_gate.rollout_budget(recs, 4, 0)
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
    s = f.rollout_summary(recs, ["n1", "n2"], ro.rollout_requested(4), rollout_gate.rollout_budget(recs, 2, 0), {"id": "x"})
    assert s["complete"] and s["status"] == "complete"
    s = f.rollout_summary(results("would_update", "unchanged"), ["n1", "n2"], check_mode=True)
    assert s["status"] == "check_mode" and not s["complete"]


def test_summary_rejects_unknown_outcome_and_nan():
    with pytest.raises(Err, match="unknown rollout outcome"):
        f.rollout_summary([{"host": "a", "outcome": "great"}], ["a"])
    text = f.rollout_summary_json({"x": float("nan")})
    assert json.loads(text) == {"x": None}
