"""The sglang_bench module: option validation, dataset errors, check mode, facts layout and
failure reporting (AnsibleModule exits captured, fake SGLang server on loopback)."""

import socket
import sys
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.blackwell.sglang.plugins.modules import sglang_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fixtures" / "bench"))
from fake_sglang import FakeServerThread  # noqa: E402


class Exit(Exception):
    def __init__(self, kind, kwargs):
        Exception.__init__(self, kind)
        self.kind = kind
        self.result = kwargs


@pytest.fixture(autouse=True)
def _capture(monkeypatch):
    def exit_json(self, **kw):
        exc = Exit("exit", kw)
        exc.module = self
        raise exc

    def fail_json(self, msg, **kw):
        kw["msg"] = msg
        exc = Exit("fail", kw)
        exc.module = self
        raise exc
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)


def run(args, check=False):
    if check:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(Exit) as exc:
            sglang_bench.main()
    return exc.value


def _dead_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d" % port


@pytest.mark.parametrize("args,needle", [
    ({"concurrency": [0]}, "concurrency levels must be >= 1"),
    ({"concurrency": [4, -2]}, "concurrency levels must be >= 1; got [-2]"),
    ({"concurrency": []}, "at least one level"),
    ({"num_prompts": 0}, "num_prompts must be >= 1"),
    ({"repeats": 0}, "repeats must be >= 1"),
    ({"timeout": 0}, "timeout must be > 0"),
    ({"time_scale": -1}, "time_scale must be > 0"),
    ({"duration": -5}, "duration must be > 0"),
    ({"confidence": 1.5}, "confidence must be between 0 and 1"),
    ({"warmup": -1}, "warmup must be >= 0"),
    ({"url": "https://127.0.0.1:30000"}, "url must start with http://"),
    ({"num_prompts": 5, "duration": 3}, "mutually exclusive"),
    ({"endpoint": "grpc"}, "value of endpoint must be one of"),
])
def test_bad_options_fail_clearly(args, needle):
    res = run(args)
    assert res.kind == "fail"
    assert needle in res.result["msg"]


def test_dataset_errors(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    res = run({"dataset": str(empty)})
    assert res.kind == "fail" and "holds no prompts (empty file)" in res.result["msg"]

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nthis is not json\n')
    res = run({"dataset": str(bad)})
    assert res.kind == "fail" and "line 2 is not valid JSON" in res.result["msg"]

    res = run({"dataset": str(tmp_path / "missing.jsonl")})
    assert res.kind == "fail" and "does not exist on the node" in res.result["msg"]

    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    res = run({"dataset": str(chat), "endpoint": "generate"})
    assert res.kind == "fail" and "use endpoint=chat" in res.result["msg"]

    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00bad")
    res = run({"dataset": str(binary)})
    assert res.kind == "fail" and "not UTF-8" in res.result["msg"]


def test_check_mode_sends_nothing(tmp_path):
    ds = tmp_path / "p.jsonl"
    ds.write_text('"a"\n"b"\n')
    with FakeServerThread() as f:
        res = run({"url": f.url, "concurrency": [1, 4], "dataset": str(ds), "api_key": "k"},
                  check=True)
        sent = f.fake.requests
    assert res.kind == "exit" and res.result["changed"] is False
    assert sent == 0
    wr = res.result["would_run"]
    assert [lv["requests"] for lv in wr["levels"]] == [10, 20]
    assert wr["ignore_eos"] is False  # dataset prompts end at EOS by default
    assert res.result["config"]["api_key_set"] is True
    assert "k" not in [v for v in res.result["config"].values() if isinstance(v, str)]


def test_success_facts_keyed_by_concurrency():
    with FakeServerThread(tokens_per_chunk=2) as f:
        res = run({"url": f.url, "concurrency": [1, 2], "input_len": 4, "output_len": 12,
                   "num_prompts": 4, "time_scale": 0.5})
    assert res.kind == "exit" and res.result["changed"] is False
    facts = res.result["ansible_facts"]["sglang_bench"]
    assert set(facts) >= {"1", "2", "levels", "config", "server", "duration_s", "warnings"}
    assert facts["2"]["concurrency"] == 2 and facts["2"]["completed"] == 4
    assert facts["1"] == facts["levels"][0]
    assert res.result["by_concurrency"]["2"]["total_output_tokens"] == 48
    assert res.result["config"]["time_scale"] == 0.5
    assert res.result["levels"][1]["accept_length_source"] == "metrics_counters"


def test_unreachable_server_fails_with_message():
    res = run({"url": _dead_url(), "concurrency": [1], "timeout": 3})
    assert res.kind == "fail"
    assert "cannot reach the SGLang server" in res.result["msg"]


def test_wrong_api_key_fails_with_message():
    with FakeServerThread(api_key="right") as f:
        res = run({"url": f.url, "api_key": "wrong", "concurrency": [1]})
    assert res.kind == "fail" and "HTTP 401" in res.result["msg"]
    assert "--api-key" in res.result["msg"]
    # the key is registered as a no_log value, so Ansible masks it in any output
    assert "wrong" in res.module.no_log_values
    assert "wrong" not in res.result["msg"]


def test_server_death_returns_partial_levels():
    with FakeServerThread(die_after=8) as f:
        res = run({"url": f.url, "concurrency": [1, 2, 4], "input_len": 4, "output_len": 8,
                   "num_prompts": 5, "timeout": 5})
    assert res.kind == "fail"
    assert "stopped answering during concurrency 2" in res.result["msg"]
    levels = res.result["levels"]
    assert levels[0]["completed"] == 5 and levels[0]["failed"] == 0
    assert levels[1]["failed"] > 0


def test_inline_dataset_lines():
    with FakeServerThread() as f:
        res = run({"url": f.url, "concurrency": [1], "num_prompts": 2, "output_len": 5,
                   "dataset": "agentic.jsonl", "dataset_src": "controller",
                   "dataset_lines": ['"a prompt"', "", '{"prompt": "b", "output_len": 3}']})
    assert res.kind == "exit"
    lv = res.result["levels"][0]
    assert lv["completed"] == 2 and lv["total_output_tokens"] == 5 + 3
    assert "dataset_lines" not in res.result["config"]
    assert res.result["config"]["dataset_prompts"] == 2


def test_inline_dataset_errors():
    res = run({"dataset": "x.jsonl", "dataset_lines": ["{bad"]})
    assert res.kind == "fail"
    assert "dataset x.jsonl (from the controller) line 1 is not valid JSON" in res.result["msg"]
    res = run({"dataset": "x.jsonl", "dataset_lines": []})
    assert res.kind == "fail" and "empty" in res.result["msg"]


def test_controller_dataset_without_action_plugin():
    res = run({"dataset": "x.jsonl", "dataset_src": "controller"})
    assert res.kind == "fail" and "action plugin" in res.result["msg"]


def test_unexpected_error_is_a_clean_failure(monkeypatch):
    from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_runner

    def boom(cfg):
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(sglang_runner, "run_benchmark", boom)
    res = run({"concurrency": [1]})
    assert res.kind == "fail"
    assert "failed unexpectedly (OSError" in res.result["msg"]
    assert "Traceback" in res.result["exception"]


def test_a_client_side_request_timeout_is_reported_as_such_not_as_a_lost_server():
    # 1 ms per request: every request times out in the client while the server answers; the
    # message names the option to raise, not "the server stopped answering"
    with FakeServerThread(tokens_per_chunk=2) as f:
        res = run({"url": f.url, "concurrency": [1, 2], "input_len": 4, "output_len": 12,
                   "num_prompts": 4, "timeout": 0.001})
    assert res.kind == "fail", res.result
    msg = res.result["msg"]
    assert "stopped answering" not in msg
    assert "timeout" in msg and "0.001" in msg
    assert "Traceback" not in msg
