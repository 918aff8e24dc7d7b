"""The rollout filters' registry (plugins/filter/rollout.py) publishes every decision."""

from ansible_collections.blackwell.sglang.plugins.filter import rollout as f


def test_filters_are_exposed():
    names = set(f.FilterModule().filters())
    assert {"rollout_requested", "rollout_tuned_setting", "rollout_unit_settings", "rollout_smoke_check",
            "rollout_budget", "rollout_summary", "rollout_summary_markdown", "rollout_summary_json",
            "rollout_start_failure", "rollout_failure", "rollout_stop_reason"} <= names
