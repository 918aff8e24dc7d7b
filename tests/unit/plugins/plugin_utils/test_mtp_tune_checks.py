"""mtp_tune's server-free checks: the dataset before any launch, and advice that fits why no
candidate won (plugins/plugin_utils/mtp_tune_checks.py)."""

import pytest

from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_tune_checks as f


def test_dataset_ok():
    text = '"hello"\n{"prompt": "a", "output_len": 8}\n\n{"input_ids": [1, 2, 3]}\n{"text": "b", "max_tokens": 4}\n'
    assert f.mtp_tune_dataset_problems(text, "/d.jsonl") == []


@pytest.mark.parametrize("text,needle", [
    ("", "holds no prompts"),
    ('{"prompt": "a"}\nnot json\n', "line 2 is not valid JSON"),
    ('{"question": "a"}\n', "line 1 has none of prompt, text, messages or input_ids"),
    ('[1, 2]\n', "line 1 must be a JSON object or string"),
    ('{"prompt": "a", "output_len": "many"}\n', "output_len must be an integer"),
    ('{"prompt": "a", "output_len": 0}\n', "asks for 0 output tokens"),
    ('{"messages": [{"role": "user", "content": "hi"}]}\n', "'messages' list, which the generate endpoint cannot send"),
])
def test_dataset_problems_name_the_line(text, needle):
    problems = f.mtp_tune_dataset_problems(text, "/d.jsonl")
    assert len(problems) == 1 and needle in problems[0] and "/d.jsonl" in problems[0]


def test_chat_dataset_is_fine_for_the_chat_endpoint_and_unreadable_is_a_problem():
    assert f.mtp_tune_dataset_problems('{"messages": [{"role": "user", "content": "x"}]}', "d", "chat") == []
    assert f.mtp_tune_dataset_problems(None, "/d") == ["/d could not be read"]


def test_truncated_read_skips_the_partial_last_line():
    assert f.mtp_tune_dataset_problems('{"prompt": "a"}\n{"prom', "d", truncated=True) == []
    assert f.mtp_tune_dataset_problems('{"prompt": "a"}\n{"prom', "d", truncated=False) != []


def _failed(cls, key="s10"):
    return {"key": key, "status": "failed", "failure_class": cls}


def _ok(key="s3"):
    return {"key": key, "status": "ok", "failure_class": None}


def test_fit_retry_is_advised_only_for_memory_failures():
    hint = f.mtp_tune_no_winner_hint([_failed("oom_kv_cache"), _failed("cuda_graph_capture", "s8")])
    assert "try mtp_tune_fit_retry=true" in hint and hint.startswith("oom_kv_cache/cuda_graph_capture")
    for cls in ("model_missing", "port_in_use", "bad_args", "timeout", "unknown", "bench_failed"):
        assert "fit_retry" not in f.mtp_tune_no_winner_hint([_failed(cls)]), cls


def test_memory_failures_with_the_fit_search_on_name_other_levers():
    hint = f.mtp_tune_no_winner_hint([_failed("cuda_oom")], {"fit_retry": True})
    assert "fit_retry=true" not in hint and "mtp_tune_fit_bs_floor" in hint


def test_missing_model_gets_the_journal_hint():
    hint = f.mtp_tune_no_winner_hint([_failed("model_missing"), _failed("model_missing", "s4")])
    assert hint.count("model_missing") == 1 and "sglang_service_model_path" in hint


def test_impossible_slo_names_the_limits_not_memory():
    hint = f.mtp_tune_no_winner_hint([_ok("s1"), _ok("s3")], {"objective": "slo", "slo_min_tps": 9000, "slo_max_ttft_p99_ms": 1})
    assert "none met the SLO" in hint and "mtp_tune_slo_min_tps=9000" in hint
    assert "mtp_tune_slo_max_ttft_p99_ms=1" in hint and "fit_retry" not in hint


def test_mixed_reasons_are_all_named_and_nothing_measured_is_said():
    hint = f.mtp_tune_no_winner_hint([_ok(), _failed("oom_kv_cache")], {"objective": "slo", "slo_min_tps": 500})
    assert "oom_kv_cache" in hint and "none met the SLO" in hint
    assert "No candidate was measured" in f.mtp_tune_no_winner_hint([])


def test_no_winner_message_names_each_outcome_the_restore_the_report_and_the_advice():
    msg = f.mtp_tune_no_winner_message([_failed("oom_kv_cache", "s8-k1-d9"), _failed("capped", "s6-k1-d7")], {},
                                       True, "results/r/n/summary.md", 32)
    assert msg.startswith("No candidate started and finished its benchmark (s8-k1-d9: oom_kv_cache, s6-k1-d7: capped).")
    assert "The pre-tuning unit was restored." in msg and "See results/r/n/summary.md." in msg
    assert "mtp_tune_fit_retry=true" in msg
    assert msg.endswith("Or set mtp_tune_fit_allow_capped=true to accept a server SGLang capped below C=32.")


def test_no_winner_message_for_an_slo_nobody_met_and_nothing_restored():
    msg = f.mtp_tune_no_winner_message([_ok("s3-k1-d4")], {"objective": "slo", "slo_min_tps": 500})
    assert msg.startswith("No candidate met the SLO (s3-k1-d4: ran).")
    assert "restored" not in msg and "See " not in msg and "allow_capped" not in msg
    assert "mtp_tune_slo_min_tps=500" in msg
    assert "none launched" in f.mtp_tune_no_winner_message([])


@pytest.mark.parametrize("changed,previous,due", [
    (True, {"key": "s4", "verify": {"ok": True}}, True),     # restarted: measure it
    (False, {"key": "s4", "verify": {"ok": True}}, False),   # same unit, verified: the re-run stays idempotent
    (False, {"key": "s3", "verify": {"ok": True}}, True),    # verified for another setting
    (False, {"key": "s4", "verify": {"ok": False}}, True),   # the last smoke was off
    (False, {"key": "s4"}, True),                            # never verified
    (False, None, True),                                     # first run on the node
])
def test_smoke_due(changed, previous, due):
    assert f.mtp_tune_smoke_due("s4", changed, previous) is due
