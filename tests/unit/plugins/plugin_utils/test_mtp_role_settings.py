"""Unit tests of plugins/plugin_utils/mtp_role_settings.py."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import mtp_tune_fit_ladder
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_resume import mtp_tune_fingerprint
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_role_settings import (
    FIT_KEYS, mtp_tune_fit_plan, mtp_tune_winner_line, mtp_tune_workload)


def _fit(**kw):
    out = {"cuda_graph_max_bs": None, "max_running_requests": None, "bs_floor": 4, "mrr_floor": 32,
           "default_bs": 512, "default_mrr": 48, "levers": None, "allow_capped": False, "radix_cache": False}
    out.update(kw)
    return out


def test_fit_plan_is_the_ladder_of_the_same_arguments():
    settings = _fit(cuda_graph_max_bs=64, max_running_requests=40)
    assert mtp_tune_fit_plan(settings) == mtp_tune_fit_ladder(*[settings[k] for k in FIT_KEYS])
    assert mtp_tune_fit_plan(settings) != mtp_tune_fit_plan(_fit())


def test_fit_plan_defaults_what_is_left_out_and_names_what_is_unknown():
    assert mtp_tune_fit_plan({"mrr_floor": 8}) == mtp_tune_fit_ladder(mrr_floor=8)
    with pytest.raises(AnsibleFilterError, match="has mrr_flor, not among"):
        mtp_tune_fit_plan(_fit(mrr_flor=3))
    with pytest.raises(AnsibleFilterError, match="_mtp_tune_fit_settings"):
        mtp_tune_fit_plan([1, 2])


def test_winner_line_of_a_static_winner():
    winner = {"candidate": {"steps": 3, "topk": 1, "draft_tokens": 4}, "decided_by": "sweep",
              "overrides": {"cuda_graph_max_bs": 8, "max_running_requests": None}}
    assert mtp_tune_winner_line(winner) == "steps=3 topk=1 draft=4 {'cuda_graph_max_bs': 8} (sweep)"


def test_winner_line_names_a_schedule_by_its_label():
    config = {"1": {"candidate_steps": [4]}, "4": {"candidate_steps": [3]}}
    winner = {"candidate": {"steps": 4, "topk": 1, "draft_tokens": 5}, "decided_by": "schedule",
              "overrides": {"speculative_adaptive": True, "speculative_adaptive_config": config}}
    line = mtp_tune_winner_line(winner)
    assert line == "steps=4 topk=1 draft=5 schedule 1:4 4:3 {} (schedule)"
    assert "candidate_steps" not in line


def test_winner_line_without_a_winner():
    assert mtp_tune_winner_line(None) == "none"
    assert mtp_tune_winner_line({}) == "none"


BENCH = {"input_len": 128, "output_len": 32, "dataset": "random", "temperature": 0.0, "time_scale": 0.05}


def test_workload_is_the_fingerprint_of_the_same_arguments():
    settings = {"bench": BENCH, "model": "Qwen/Q", "release": "0.5.23", "tp": 4, "dataset_sha256": None, "levels": [4, 1]}
    assert mtp_tune_workload(settings) == mtp_tune_fingerprint(BENCH, "Qwen/Q", "0.5.23", 4, None, [4, 1])
    assert mtp_tune_workload(dict(settings, tp=2))["tp"] == 2
    assert mtp_tune_workload({"bench": BENCH})["model"] is None


def test_workload_names_an_unknown_key():
    with pytest.raises(AnsibleFilterError, match="has modle, not among"):
        mtp_tune_workload({"bench": BENCH, "modle": "Qwen/Q"})
    with pytest.raises(AnsibleFilterError, match="_mtp_tune_workload_settings"):
        mtp_tune_workload(BENCH)
