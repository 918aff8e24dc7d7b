"""The mtp_tune filters' registry (plugins/filter/mtp_tune.py) publishes every decision."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.blackwell.sglang.plugins.filter import mtp_tune as filters
from ansible_collections.blackwell.sglang.plugins.filter import mtp_tune_checks as filters_checks
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import spec_from


@pytest.mark.parametrize("key, var", [("slo_min_tps", "mtp_tune_slo_min_tps"),
                                      ("slo_max_ttft_p99_ms", "mtp_tune_slo_max_ttft_p99_ms")])
@pytest.mark.parametrize("value", [-5, "-5", 0, "0", -0.5])
def test_slo_limits_of_zero_or_below_are_refused_naming_the_variable(key, var, value):
    # whatever the objective: the run checks its spec before any restart (tasks/preflight.yml)
    for objective in ("slo", "latency"):
        problems = filters_checks.FilterModule().filters()["mtp_tune_spec_problems"]({"objective": objective, key: value})
        assert len(problems) == 1 and problems[0].startswith("%s must be a number > 0" % var), problems
        with pytest.raises(AnsibleFilterError, match=var):
            spec_from({"objective": objective, key: value})
    assert filters_checks.FilterModule().filters()["mtp_tune_spec_problems"]({"objective": "slo", key: 300}) == []


def test_filters_are_registered():
    names = filters.FilterModule().filters()
    for n in ("mtp_tune_candidates", "mtp_tune_next", "mtp_tune_complete", "mtp_tune_winner",
              "mtp_tune_fit_ladder", "mtp_tune_verify", "mtp_tune_progress", "mtp_tune_attempt"):
        assert callable(names[n])
    # the library's inner decisions are not filters: no role asks for them
    for n in ("mtp_tune_score", "mtp_tune_rank", "mtp_tune_pick_best", "mtp_tune_unverified", "mtp_tune_resume"):
        assert n not in names
