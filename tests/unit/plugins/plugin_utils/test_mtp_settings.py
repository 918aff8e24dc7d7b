"""Unit tests of plugins/plugin_utils/mtp_settings.py, moved from tests/unit/plugins/filter/test_mtp_tune.py."""


import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import mtp_tune_next
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import (
    mtp_tune_candidates, mtp_tune_levels, spec_from, TuneSpec)


def test_candidates_topk1_draft_is_steps_plus_one_sorted_and_deduplicated():
    cands = mtp_tune_candidates([4, 1, "3", 4, 10.0])
    assert [c["steps"] for c in cands] == [1, 3, 4, 10]
    assert all(c["topk"] == 1 and c["draft_tokens"] == c["steps"] + 1 for c in cands)
    assert cands[2]["key"] == "s4-k1-d5"


@pytest.mark.parametrize("bad", [[], None, "3,4", [1, "x"], [0, 2], [2.5], [True], {"a": 1}])
def test_candidates_bad_steps_fail_clearly(bad):
    with pytest.raises(AnsibleFilterError, match="mtp_tune_steps"):
        mtp_tune_candidates(bad)


def test_candidates_empty_topk_list_is_refused_not_taken_for_the_default():
    with pytest.raises(AnsibleFilterError, match=r"mtp_tune_topk is empty: give at least one EAGLE topk, e\.g\. \[1\]"):
        mtp_tune_candidates([3, 4], topk=[])
    # unset still means the default
    assert [c["topk"] for c in mtp_tune_candidates([3], topk=None)] == [1]


def test_candidates_topk_above_one_needs_draft_tokens_in_range():
    with pytest.raises(AnsibleFilterError, match="mtp_tune_draft_tokens"):
        mtp_tune_candidates([3], topk=[1, 4])
    cands = mtp_tune_candidates([3], topk=[1, 4], draft_tokens=[4, 8, 16])
    keys = [c["key"] for c in cands]
    # 16 > 3*4+1 is not a valid tree for steps 3, topk 4; topk 1 ignores the list.
    assert keys == ["s3-k1-d4", "s3-k4-d4", "s3-k4-d8"]


def test_levels_default_objective_levels_and_missing_level():
    assert mtp_tune_levels([32, 1, 4], "latency") == {"levels": [1, 4, 32], "level": 1, "search": [1]}
    assert mtp_tune_levels([32, 1, 4], "throughput") == {"levels": [1, 4, 32], "level": 32, "search": [32]}
    assert mtp_tune_levels([1, 8], "slo")["level"] is None
    # the slo objective without a level is judged over every level: the search measures them all
    assert mtp_tune_levels([1, 8], "slo")["search"] == [1, 8]
    assert mtp_tune_levels([1, 8], "slo", 8)["search"] == [8]
    assert mtp_tune_levels([32, 1, 4], "latency", None, "all")["search"] == [1, 4, 32]
    with pytest.raises(AnsibleFilterError, match="mtp_tune_search_levels must be one of judged, all"):
        mtp_tune_levels([1, 4], "latency", None, "some")
    with pytest.raises(AnsibleFilterError, match="not in mtp_tune_concurrency"):
        mtp_tune_levels([4, 16], "latency")
    with pytest.raises(AnsibleFilterError, match="not in mtp_tune_concurrency"):
        mtp_tune_levels([1, 16], "throughput", 32)
    with pytest.raises(AnsibleFilterError, match="empty"):
        mtp_tune_levels([], "latency")
    with pytest.raises(AnsibleFilterError, match="integer"):
        mtp_tune_levels([1, "many"], "latency")
    with pytest.raises(AnsibleFilterError, match="mtp_tune_objective"):
        mtp_tune_levels([1], "fastest")


def test_spec_defaults_and_normalisation():
    assert spec_from(None) == spec_from({}) == spec_from("") == TuneSpec(
        objective="latency", level=None, levels=(), slo_min_tps=None, slo_max_ttft_p99_ms=None, noise=0.015,
        strategy="climb", seed=3, probe_ends="high", fit_retry=False, fit_classes=None, max_launches=None,
        remeasure_launches=0, noise_launches=0, verify_tolerance=0.05, converge=False,
        cap_levers=(), kv_need=None)
    # what -e gives (strings) reads as what the inventory gives; null and empty take the default
    spec = spec_from({"objective": "slo", "level": "8", "levels": ["32", 1, 8, 8], "slo_min_tps": "60",
                      "slo_max_ttft_p99_ms": "1500.5", "noise": "0.02", "seed": None, "probe_ends": True,
                      "fit_retry": "yes", "fit_classes": ["oom_kv_cache"], "max_launches": "", "noise_launches": 2.0,
                      "converge": "true"})
    assert (spec.level, spec.levels, spec.slo_min_tps, spec.slo_max_ttft_p99_ms) == (8, (1, 8, 32), 60, 1500.5)
    assert (spec.noise, spec.seed, spec.probe_ends, spec.fit_retry) == (0.02, 3, "both", True)
    assert (spec.fit_classes, spec.max_launches, spec.noise_launches, spec.converge) == (("oom_kv_cache",), None, 2, True)
    assert spec_from({"probe_ends": False}).probe_ends == "none"
    assert spec_from(spec) is spec and spec.replace(level=1).level == 1 and spec.level == 8


@pytest.mark.parametrize("bad,match", [
    ({"objective": "fastest"}, "mtp_tune_objective must be one of latency, throughput, slo"),
    ({"strategy": "random"}, "mtp_tune_strategy"),
    ({"probe_ends": "middle"}, "mtp_tune_probe_ends must be one of both, high, low, none"),
    ({"level": "one"}, "mtp_tune_level must be an integer"),
    ({"levels": "1,4"}, "mtp_tune_concurrency must be a list"),
    ({"levels": [1, "x"]}, "mtp_tune_concurrency item must be an integer"),
    ({"slo_min_tps": "fast"}, "mtp_tune_slo_min_tps must be a number"),
    ({"noise": -0.1}, "mtp_tune_noise must be >= 0"),
    ({"verify_tolerance": "tight"}, "mtp_tune_verify_tolerance must be a number"),
    ({"seed": 2.5}, "mtp_tune_seed must be an integer"),
    ({"fit_retry": "maybe"}, "mtp_tune_fit_retry must be true or false"),
    ({"converge": "later"}, "mtp_tune_converge must be true or false"),
    ({"fit_classes": "oom_kv_cache"}, "mtp_tune_fit_classes must be a list"),
    ({"max_launches": True}, "mtp_tune_max_launches must be an integer"),
    ({"min_gain": 0.03}, "the tuning spec has no key min_gain; its keys are objective, level"),
    (["latency"], "the tuning spec must be a dict"),
])
def test_spec_refuses_bad_input_naming_the_variable(bad, match):
    with pytest.raises(AnsibleFilterError, match=match):
        spec_from(bad)
    # every filter that takes the spec checks it the same way, before deciding anything
    with pytest.raises(AnsibleFilterError, match=match):
        mtp_tune_next([], mtp_tune_candidates([3]), None, bad)
