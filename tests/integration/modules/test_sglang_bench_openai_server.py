"""sglang_bench against a generic OpenAI-compatible server that is neither SGLang nor the
simulator (tests/fixtures/openai_server): what the module does when token-id prompts are
refused, outputs end short, a share of requests fail, or nothing completes; warmup shape; error
grouping; text prompts calibrated to input_len by the server's own token count.

The module runs through its AnsibleModule entry point, as a playbook task would."""

import http.client
import json
import sys
import time
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.blackwell.sglang.plugins.modules import sglang_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures" / "openai_server"))
from openai_server import OpenAIServerThread, count_text_tokens  # noqa: E402


class Exit(Exception):
    def __init__(self, kind, kwargs):
        Exception.__init__(self, kind)
        self.kind = kind
        self.result = kwargs


@pytest.fixture(autouse=True)
def _capture(monkeypatch):
    def exit_json(self, **kw):
        raise Exit("exit", kw)

    def fail_json(self, msg, **kw):
        kw["msg"] = msg
        raise Exit("fail", kw)
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)


BASE = {"concurrency": [1, 4], "num_prompts": 8, "input_len": 64, "output_len": 12,
        "timeout": 20}


def run(url, **args):
    with patch_module_args(dict(BASE, url=url, **args)):
        with pytest.raises(Exit) as exc:
            sglang_bench.main()
    return exc.value


def measured(log):
    """Requests of the log that were not calibration/format probes (they ask 1 token)."""
    return [e for e in log if e["max_tokens"] != 1]


# ------------------------------------------------------------------ the server itself
def test_server_timing_is_what_it_was_told():
    """Read one stream with http.client (not our client) and time it: the fixture's TTFT and
    ITL are the truth the other figures are compared with."""
    with OpenAIServerThread(ttft=0.05, itl=0.01) as s:
        conn = http.client.HTTPConnection("127.0.0.1", s.server.port, timeout=10)
        body = json.dumps({"model": "m", "prompt": "a b c", "max_tokens": 11, "stream": True})
        t0 = time.perf_counter()
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        stamps = []
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: ") and b'"text"' in line:
                stamps.append(time.perf_counter() - t0)
        conn.close()
    assert len(stamps) == 11
    assert 0.045 <= stamps[0] <= 0.09
    itl = (stamps[-1] - stamps[0]) / 10
    assert 0.0095 <= itl <= 0.013


def test_server_tokenizer_and_rejections():
    assert count_text_tokens("do consectetur") == 1 + 3
    with OpenAIServerThread(reject_token_ids=True, api_key="k") as s:
        conn = http.client.HTTPConnection("127.0.0.1", s.server.port, timeout=10)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": [1, 2], "max_tokens": 2}),
                     {"Authorization": "Bearer k"})
        resp = conn.getresponse()
        assert resp.status == 422
        assert json.loads(resp.read())["detail"][0]["input"] == [1, 2]  # the echo to strip
        conn.request("GET", "/v1/models")
        resp = conn.getresponse()
        assert resp.status == 401
        resp.read()
        conn.close()


# ------------------------------------------------------------------ the module against it
def test_token_ids_refused_auto_switches_to_text_and_honours_input_len():
    with OpenAIServerThread(reject_token_ids=True) as s:
        res = run(s.url, endpoint="completions", input_len=200, num_prompts=12)
        log = s.server.log
    assert res.kind == "exit", res.result.get("msg")
    wl = res.result["workload"]
    assert wl["prompt_format"] == "text"
    assert "rejected a token-id prompt (HTTP 422" in wl["prompt_format_reason"]
    # the server's tokenizer counts about 2 tokens per word here: calibration halves the words
    assert 80 <= wl["words"] <= 120 and wl["calibration"][0]["words"] == 200
    for lv in res.result["levels"]:
        assert lv["completed"] == 12 and lv["failed"] == 0
        # actual prompt tokens, from usage, within 3 % of the asked 200
        assert abs(lv["prompt_tokens_per_request"] - 200) <= 6, lv["prompt_tokens_per_request"]
    assert all(e["kind"] == "text" for e in measured(log))


def test_token_ids_forced_on_a_refusing_server_fails_naming_the_level():
    with OpenAIServerThread(reject_token_ids=True) as s:
        res = run(s.url, endpoint="completions", prompt_format="token_ids")
    assert res.kind == "fail"
    msg = res.result["msg"]
    assert "no request completed at concurrency 1: 8 of 8 failed" in msg
    # grouped: one key with the count, the echoed token ids left out
    assert "HTTP 422: body.prompt: Input should be a valid string (x8)" in msg
    assert "prompt_format=text" in msg
    lv = res.result["levels"]
    assert len(lv) == 1 and lv[0]["measured"] is False
    assert lv[0]["error_groups"] == [{"status": 422, "count": 8,
                                      "message": "body.prompt: Input should be a valid string"}]


def test_empty_level_tolerated_when_asked():
    with OpenAIServerThread(reject_token_ids=True) as s:
        res = run(s.url, endpoint="completions", prompt_format="token_ids",
                  fail_on_empty_level=False)
    assert res.kind == "exit"
    assert [lv["measured"] for lv in res.result["levels"]] == [False, False]
    assert [lv["output_throughput"] for lv in res.result["levels"]] == [0.0, 0.0]
    assert sum("no request completed" in w for w in res.result["bench_warnings"]) == 2


def test_auto_keeps_token_ids_where_the_server_takes_them():
    with OpenAIServerThread() as s:
        res = run(s.url, endpoint="completions")
        log = s.server.log
    assert res.kind == "exit"
    assert res.result["workload"]["prompt_format"] == "token_ids"
    assert all(e["kind"] == "token_ids" and e["prompt_tokens"] == 64 for e in measured(log))
    assert res.result["levels"][0]["prompt_tokens_per_request"] == 64


def test_failure_share_groups_errors_and_flags_the_level():
    with OpenAIServerThread(fail_rate=0.25) as s:
        res = run(s.url, endpoint="chat", num_prompts=16)
    assert res.kind == "exit"
    for lv in res.result["levels"]:
        assert lv["failed"] >= 3 and lv["completed"] >= 11
        assert lv["failure_rate_exceeded"] is True
        # every 500 echoes its own prompt; grouped they are one key
        assert list(lv["errors"]) == ["HTTP 500: internal error while generating for prompt '…'"]
        assert lv["error_groups"][0]["status"] == 500
    warn = [w for w in res.result["bench_warnings"] if "above max_failure_rate" in w]
    assert len(warn) == 2 and "(x" in warn[0]


def test_failure_share_within_max_failure_rate_is_not_a_warning():
    with OpenAIServerThread(fail_rate=0.25) as s:
        res = run(s.url, endpoint="chat", num_prompts=16, max_failure_rate=0.5)
    assert res.kind == "exit"
    assert not any(lv["failure_rate_exceeded"] for lv in res.result["levels"])
    assert not any("failed" in w for w in res.result["bench_warnings"])


def test_short_outputs_under_ignore_eos_warn():
    with OpenAIServerThread(cut_at=5) as s:
        res = run(s.url, endpoint="completions", output_len=12)
    assert res.kind == "exit"
    lv = res.result["levels"][0]
    assert lv["output_tokens_per_request"] == 5 and lv["output_len_asked"] == 12
    assert lv["short_outputs"] == 8 and lv["ended_short"] is True
    assert lv["finish_reasons"] == {"stop": 8}
    assert any("ended short of the asked output length under ignore_eos (mean 5.0 tokens per "
               "request, 12.0 asked)" in w for w in res.result["bench_warnings"])


def test_short_outputs_without_ignore_eos_are_normal(tmp_path):
    ds = tmp_path / "p.jsonl"
    ds.write_text('"write a poem"\n{"prompt": "and another", "output_len": 12}\n')
    with OpenAIServerThread(cut_at=5) as s:
        res = run(s.url, endpoint="completions", dataset=str(ds))
    assert res.kind == "exit"
    assert res.result["levels"][0]["ended_short"] is False
    assert not any("ended short" in w for w in res.result["bench_warnings"])


def test_warmup_has_the_measured_shape_with_a_text_dataset(tmp_path):
    """A text dataset on completions: warmup prompts are dataset text too (not token ids, which
    this server refuses), with the level's ignore_eos and output capped at warmup_output_len."""
    ds = tmp_path / "p.jsonl"
    ds.write_text("\n".join(json.dumps({"prompt": "lorem ipsum dolor sit amet %d" % i})
                            for i in range(6)))
    with OpenAIServerThread(reject_token_ids=True) as s:
        res = run(s.url, endpoint="completions", dataset=str(ds), concurrency=[3],
                  num_prompts=6, warmup_output_len=4)
        log = s.server.log
    assert res.kind == "exit", res.result.get("msg")
    assert all(e["status"] == 200 and e["kind"] == "text" for e in log)
    warm, meas = log[:3], log[3:]
    assert [e["max_tokens"] for e in warm] == [4, 4, 4]
    assert [e["max_tokens"] for e in meas] == [12] * 6
    assert {e["ignore_eos"] for e in warm} == {e["ignore_eos"] for e in meas} == {False}
    assert not any("warmup" in w for w in res.result["bench_warnings"])


def test_generate_warmup_shape_and_a_server_without_generate():
    with OpenAIServerThread() as s:
        res = run(s.url, endpoint="generate", concurrency=[2], num_prompts=4)
        log = s.server.log
    # no /generate on this server: every request 404s, and the module says so
    assert res.kind == "fail" and "HTTP 404" in res.result["msg"]
    with OpenAIServerThread(generate=True) as s:
        res = run(s.url, endpoint="generate", concurrency=[2], num_prompts=4)
        log = s.server.log
    assert res.kind == "exit"
    assert [(e["kind"], e["prompt_tokens"], e["max_tokens"]) for e in log[:2]] == \
        [("token_ids", 64, 12)] * 2
    assert all(e["ignore_eos"] is True for e in log)


def test_chat_text_prompts_calibrated_with_the_template():
    with OpenAIServerThread() as s:
        res = run(s.url, endpoint="chat", input_len=120, num_prompts=12)
    assert res.kind == "exit"
    wl = res.result["workload"]
    assert wl["prompt_format"] == "text" and wl["calibration"]
    for lv in res.result["levels"]:
        assert abs(lv["prompt_tokens_per_request"] - 120) <= 4


def test_final_usage_only_spreads_the_total():
    with OpenAIServerThread(continuous_usage=False, ttft=0.01, itl=0.004) as s:
        res = run(s.url, endpoint="completions", concurrency=[1], output_len=20)
    assert res.kind == "exit"
    lv = res.result["levels"][0]
    assert lv["total_output_tokens"] == 8 * 20 and lv["output_tokens_per_request"] == 20
    assert 3.5 <= lv["itl_ms"]["p50"] <= 6


def test_prompt_format_token_ids_on_chat_is_refused():
    res = run("http://127.0.0.1:1", endpoint="chat", prompt_format="token_ids")
    assert res.kind == "fail" and "does not fit endpoint=chat" in res.result["msg"]


@pytest.mark.parametrize("rate", [-0.1, 1.5])
def test_max_failure_rate_bounds(rate):
    res = run("http://127.0.0.1:1", max_failure_rate=rate)
    assert res.kind == "fail" and "max_failure_rate" in res.result["msg"]


def test_dataset_and_prompt_format_must_agree(tmp_path):
    ids = tmp_path / "ids.jsonl"
    ids.write_text('{"input_ids": [1, 2, 3]}\n')
    text = tmp_path / "text.jsonl"
    text.write_text('"hello there"\n')
    with OpenAIServerThread() as s:
        res = run(s.url, endpoint="completions", dataset=str(ids), prompt_format="text")
        assert res.kind == "fail" and "dataset has input_ids lines" in res.result["msg"]
        res = run(s.url, endpoint="completions", dataset=str(text), prompt_format="token_ids")
        assert res.kind == "fail" and "no tokenizer" in res.result["msg"]
        res = run(s.url, endpoint="completions", dataset=str(ids), concurrency=[1],
                  num_prompts=2)
        log = s.server.log
    assert res.kind == "exit"
    assert res.result["workload"] == {"synthetic": False, "prompt_format": "token_ids",
                                      "prompt_format_reason": "as written in the dataset"}
    assert {e["kind"] for e in log} == {"token_ids"}
