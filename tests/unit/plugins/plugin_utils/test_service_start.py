"""What a failed start leaves on the node (plugins/plugin_utils/service_start.py)."""

import pytest

from ansible_collections.blackwell.sglang.plugins.plugin_utils import service_start as f

MISSING = {"ready": False, "failure_class": "model_missing",
           "failure_line": "2026-12-03T05:00:00+0000 n python[9]: huggingface_hub.errors.HFValidationError: "
                           "Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/models/x'.",
           "hint": "SGLang found no model at sglang_service_model_path: fix the path."}


@pytest.mark.parametrize("failed,changed,existed,enabled,action", [
    (False, True, True, True, "none"),
    (True, True, True, False, "none"),
    (True, True, True, True, "restore"),
    (True, True, False, True, "stop"),     # a new node: nothing earlier
    (True, False, True, True, "stop"),     # the unit already was this one
    (True, False, False, True, "stop"),
])
def test_rollback_action(failed, changed, existed, enabled, action):
    assert f.sglang_service_rollback_action(failed, changed, existed, enabled) == action


def test_report_of_a_ready_start_is_not_a_failure():
    assert f.sglang_service_start_report({"ready": True}, "none") == {"failed": False}


def test_report_quotes_the_line_and_names_the_class_and_the_rollback():
    rep = f.sglang_service_start_report(MISSING, "restore", {"ready": True}, "sglang-qwen.service")
    assert rep["failed"] and rep["failure_class"] == "model_missing" and rep["serving"] == "previous"
    assert "'/models/x'" in rep["failure_line"] and rep["failure_line"] in rep["msg"]
    assert rep["msg"].startswith("sglang-qwen.service did not start: model_missing (journal: `")
    assert "Rolled back to the previous unit, which generates tokens again." in rep["msg"]
    assert "Hint: SGLang found no model" in rep["msg"]


def test_report_of_a_rollback_that_failed_too():
    rep = f.sglang_service_start_report({"ready": False, "failure_class": "port_in_use",
                                         "failure_line": "OSError: [Errno 98] address already in use"},
                                        "restore", {"ready": False, "failure_class": "port_in_use"})
    assert rep["serving"] == "none" and rep["rollback_failure_class"] == "port_in_use"
    assert "did not come back either (port_in_use)" in rep["msg"]


def test_report_without_an_earlier_unit_and_without_a_line():
    rep = f.sglang_service_start_report({"ready": False}, "stop")
    assert rep["failure_class"] == "unknown" and rep["failure_line"] is None
    assert rep["serving"] == "none" and "unit was stopped and its GPUs freed" in rep["msg"]
    assert "journal:" not in rep["msg"]
    assert f.sglang_service_start_report({"ready": False}, "bogus")["action"] == "none"


def test_long_lines_are_folded_and_cut():
    rep = f.sglang_service_start_report({"ready": False, "failure_line": "x  y\n" * 200}, "stop")
    assert len(rep["failure_line"]) == 300 and rep["failure_line"].endswith("...")
    assert "\n" not in rep["failure_line"]


@pytest.mark.parametrize("text,url", [
    ("[Service]\nExecStart=/opt/v/bin/python -m sglang.launch_server --model-path m --port 30001\n",
     "http://127.0.0.1:30001"),
    ("[Service]\nExecStart=/p -m s --host 0.0.0.0 \\\n  --port=31000 --tp-size 4\n", "http://127.0.0.1:31000"),
    ("ExecStart=/p -m s --host :: --port 1\n", "http://[::1]:1"),
    ("ExecStart=/p -m s --host 192.0.2.5\n", "http://192.0.2.5:30000"),
    ("[Unit]\nDescription=no exec\n", "http://fallback:1"),
    (None, "http://fallback:1"),
])
def test_unit_base_url(text, url):
    assert f.sglang_service_unit_base_url(text, "http://fallback:1") == url


# --- sglang_service_result ---------------------------------------------------------------------

def test_result_of_a_ready_wait():
    wait = {"changed": False, "ready": True, "seconds": 12.5, "generated_tokens": 4, "failure_class": None,
            "journal_tail": [], "msg": "ready", "unit": "sglang-qwen.service"}
    r = f.sglang_service_result(wait, "sglang-qwen.service", True)
    assert r["waited"] is True and r["ready"] is True and r["unit_changed"] is True
    assert r["seconds"] == 12.5 and r["generated_tokens"] == 4
    assert r["rollback"] == "none" and r["rollback_ready"] is None and r["rollback_journal_tail"] == []


def test_result_without_a_wait_is_not_ready_nor_failed():
    for wait in (None, {}, {"skipped": True, "changed": False}, "junk"):
        r = f.sglang_service_result(wait, "sglang-qwen.service")
        assert r["waited"] is False and r["ready"] is None and r["failure_class"] is None
        assert r["journal_tail"] == [] and r["unit_changed"] is False


def test_result_of_a_failed_start_rolled_back():
    wait = {"ready": False, "failure_class": "oom_kv_cache", "failure_line": "RuntimeError: Not enough memory",
            "hint": "lower --mem-fraction-static", "journal_tail": ["a", "b"], "seconds": 30}
    back = {"ready": True, "seconds": 20, "journal_tail": []}
    r = f.sglang_service_result(wait, "sglang-qwen.service", True, "restore", back)
    assert r["ready"] is False and r["failure_class"] == "oom_kv_cache" and r["journal_tail"] == ["a", "b"]
    assert r["rollback"] == "restore" and r["rollback_ready"] is True and r["rollback_failure_class"] is None
    failed_back = f.sglang_service_result(wait, "sglang-qwen.service", True, "restore", {"ready": False, "journal_tail": ["x"]})
    assert failed_back["rollback_ready"] is False and failed_back["rollback_failure_class"] == "unknown"
    assert failed_back["rollback_journal_tail"] == ["x"]
    stopped = f.sglang_service_result(wait, "sglang-qwen.service", False, "stop", back)
    assert stopped["rollback"] == "stop" and stopped["rollback_ready"] is None


def test_result_carries_the_state_pool_of_the_wait():
    pool = {"hybrid": True, "max_mamba_cache_size": 51, "max_running_requests": 10}
    r = f.sglang_service_result({"ready": True, "pool": pool}, "sglang-qwen.service")
    assert r["pool"] == pool
    assert f.sglang_service_result(r, "sglang-qwen.service")["pool"] == pool
    assert f.sglang_service_result(None, "sglang-qwen.service")["pool"] == {}


def test_result_carries_an_earlier_result_over():
    wait = {"ready": False, "failure_class": "bad_args", "journal_tail": ["x"], "seconds": 3, "hint": "h"}
    first = f.sglang_service_result(wait, "sglang-qwen.service", True)
    again = f.sglang_service_result(first, "sglang-qwen.service", first["unit_changed"], "restore", {"ready": True})
    for key in f.WAIT_FIELDS:
        assert again[key] == first[key], key
    assert again["unit_changed"] is True and again["rollback_ready"] is True
    assert f.sglang_service_result(first, "u", True, "bogus")["rollback"] == "none"
