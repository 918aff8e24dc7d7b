"""What a failed start leaves on the node (plugins/filter/service_start.py)."""

import pytest

from ansible_collections.blackwell.sglang.plugins.filter import service_start as f

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
