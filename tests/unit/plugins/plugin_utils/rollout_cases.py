"""Bench levels, tuning results and node outcomes the rollout unit tests share (moved from
tests/unit/plugins/filter/test_rollout.py)."""

from ansible_collections.blackwell.sglang.plugins.plugin_utils import rollout_setting as ro


Err = ro.AnsibleFilterError


def level(c, decode, agg, failed=0, completed=8):
    """A level the way sglang_bench returns it (nested decode stats)."""
    return {"concurrency": c, "completed": completed, "failed": failed, "output_throughput": agg,
            "decode_tps_per_request": {"mean": decode, "p50": decode}, "ttft_ms": {"p99": 80.0}}


def results(*outcomes):
    return [{"host": "n%d" % i, "outcome": o} for i, o in enumerate(outcomes, 1)]
