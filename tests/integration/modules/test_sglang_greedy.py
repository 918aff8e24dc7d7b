"""sglang_greedy against the simulator (real processes on loopback) and against a small independent server
(tests/fixtures/openai_server), with the outputs judged by mtp_tune_greedy_compare as the tuner does.

The module runs through its AnsibleModule entry point, as a playbook task would."""

import sys
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from loopback import free_port

from ansible_collections.blackwell.sglang.plugins.modules import sglang_greedy
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_numerics import mtp_tune_greedy_compare

TESTS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TESTS / "integration" / "sim"))
sys.path.insert(0, str(TESTS / "fixtures" / "openai_server"))
from _simharness import Sim  # noqa: E402
from openai_server import OpenAIServerThread  # noqa: E402

KEY = "greedy-check-secret-key"


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


def run(url, **args):
    with patch_module_args(dict(url=url, timeout=30, **args)):
        with pytest.raises(Exit) as exc:
            sglang_greedy.main()
    return exc.value


def ok(url, **args):
    got = run(url, **args)
    assert got.kind == "exit", got.result
    return got.result


@pytest.fixture
def launch(tmp_path):
    """Start a simulator (tp 4, the operator's hybrid model) with EAGLE steps/1/steps+1 and extra flags/env;
    one at a time, each stopped before the next starts, all stopped (by pid) at the end."""
    sims = []

    def start(steps, extra=(), env=None):
        for old in sims:
            old.stop()
        base = tmp_path / ("launch%d" % len(sims))
        base.mkdir()
        spec = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(steps),
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)]
        sim = Sim(base, spec + list(extra), env)
        sims.append(sim)
        sim.wait_ready(60)
        return "http://127.0.0.1:%d" % sim.port

    yield start
    for sim in sims:
        sim.stop()


# ------------------------------------------------------------------ the simulator
def test_same_prompts_same_ids_across_launches_and_depths(launch):
    """Greedy output is the prompt's: steps 1 and steps 5 with the lever (no fault) give the same ids."""
    ref = ok(launch(1))
    assert len(ref["outputs"]) == 8 and ref["digest_of"] == "output_ids" and ref["prompt_source"] == "builtin"
    assert all(len(o["output_ids"]) == 32 and o["finish_reason"] == "length" for o in ref["outputs"])
    assert len(set(tuple(o["output_ids"]) for o in ref["outputs"])) == 8
    assert all(len(o["text"].split()) == 32 for o in ref["outputs"])
    again = ok(launch(5, ["--enable-linear-replayssm-spec", "--api-key", KEY]), api_key=KEY)
    assert again["digest"] == ref["digest"]
    assert KEY not in repr(again)
    verdict = mtp_tune_greedy_compare(ref, again)
    assert verdict == {"checked": True, "differ": 0, "of": 8, "first_divergence": [], "ok": True,
                       "compared": "output_ids"}
    # given prompts, token ids and text, the same way
    given = [[101, 202, 303, 404], "Hello there, how are you?"]
    a = ok(launch(2), prompts=given, max_new_tokens=12)
    assert a["prompt_source"] == "given" and [len(o["output_ids"]) for o in a["outputs"]] == [12, 12]
    b = ok(launch(4), prompts=given, max_new_tokens=12)
    assert mtp_tune_greedy_compare(a, b)["ok"] is True


def test_drift_fault_makes_the_lever_refused(launch):
    """SGLANG_SIM_REPLAYSSM_DRIFT=0.5 with the lever: the prompts the knob picks diverge where it says, and the
    compare counts them; the knob alone, without the lever, changes nothing."""
    from sglang_sim import scheduler, tokenizer
    ref = ok(launch(3))
    fault = {"SGLANG_SIM_REPLAYSSM_DRIFT": "0.5"}
    assert ok(launch(3, env=fault))["digest"] == ref["digest"]
    drifted = ok(launch(3, ["--enable-linear-replayssm-spec"], env=fault))
    verdict = mtp_tune_greedy_compare(ref, drifted)
    expected = []
    for i, prompt in enumerate(sglang_greedy.BUILTIN_PROMPTS[:8]):
        at = scheduler.drift_point(scheduler.prompt_hash(tokenizer.encode(prompt)), 0.5)
        if at is not None:
            expected.append({"index": i, "token": at})
    assert 0 < len(expected) < 8  # the built-in prompts split under this fraction
    assert verdict["ok"] is False and verdict["of"] == 8
    assert verdict["differ"] == len(expected) and verdict["first_divergence"] == expected


# ------------------------------------------------------------------ an independent server
def test_against_an_independent_server():
    """A server that is not SGLang: the same answers twice; text compared when it returns no token ids; the API
    key sent and never echoed."""
    with OpenAIServerThread(generate=True, ttft=0.001, itl=0.0005, api_key=KEY) as s:
        one = ok(s.url, api_key=KEY, num_prompts=4, max_new_tokens=6)
        two = ok(s.url, api_key=KEY, num_prompts=4, max_new_tokens=6)
        log = list(s.server.log)
        bad = run(s.url, api_key="wrong", num_prompts=2)
    assert one["digest"] == two["digest"] and one["digest_of"] == "output_ids"
    assert [o["output_ids"] for o in one["outputs"]] == [list(range(6))] * 4
    assert all(e["path"] == "/generate" and e["max_tokens"] == 6 and e["ignore_eos"] is False for e in log)
    assert bad.kind == "fail" and "prompt 0: POST /generate answered HTTP 401" in bad.result["msg"]
    assert "outputs" not in bad.result and bad.result["answered"] == 0
    assert "wrong" not in repr(bad.result) and KEY not in repr(one)
    with OpenAIServerThread(generate=True, ttft=0.001, itl=0.0005, output_ids=False, cut_at=4) as s:
        short = ok(s.url, num_prompts=4, max_new_tokens=6)
    assert short["digest_of"] == "text" and all(o["output_ids"] is None for o in short["outputs"])
    verdict = mtp_tune_greedy_compare(one, short)
    assert verdict["compared"] == "text" and verdict["differ"] == 4 and verdict["of"] == 4
    assert verdict["first_divergence"][0] == {"index": 0, "token": None, "char": len(" tok" * 4)}


def test_errors_are_one_clear_message():
    port = free_port()
    got = run("http://127.0.0.1:%d" % port, num_prompts=2)
    assert got.kind == "fail" and "prompt 0: cannot connect to 127.0.0.1:%d" % port in got.result["msg"]
    assert "exception" not in got.result
    with OpenAIServerThread(generate=True, ttft=0.001, itl=0.0005, fail_rate=0.5) as s:  # every 2nd request: 500
        got = run(s.url, num_prompts=4, max_new_tokens=4)
    assert got.kind == "fail" and "prompt 1: POST /generate answered HTTP 500" in got.result["msg"]
    assert "outputs" not in got.result and got.result["answered"] == 1  # a partial answer is no answer
    with OpenAIServerThread() as s:  # OpenAI routes only
        got = run(s.url)
    assert got.kind == "fail" and "HTTP 404" in got.result["msg"] and "needs SGLang's native API" in got.result["msg"]
    for args, needle in [
        ({"url": "https://127.0.0.1:1"}, "url must start with http://"),
        ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
        ({"num_prompts": 17}, "num_prompts must be within 1..16"),
        ({"prompts": []}, "prompts is empty"),
        ({"prompts": ["ok", [1, -2]]}, "prompts[1] must be a non-empty string or a non-empty list of token ids"),
        ({"prompts": [""]}, "prompts[0] is an empty string"),
    ]:
        url = args.pop("url", "http://127.0.0.1:%d" % port)
        got = run(url, **args)
        assert got.kind == "fail" and needle in got.result["msg"], got.result


def test_key_read_on_the_node_from_the_config_file(tmp_path):
    """api_key_file: the key the service role wrote to the --config file is sent, never returned; a file
    that is not YAML fails naming the path, not the text."""
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text('# managed\napi-key: "%s"\n' % KEY)
    with OpenAIServerThread(generate=True, ttft=0.001, itl=0.0005, api_key=KEY) as s:
        good = ok(s.url, api_key_file=str(secrets), num_prompts=2, max_new_tokens=4)
        secrets.write_text("api-key: [%s\n" % KEY)
        broken = run(s.url, api_key_file=str(secrets), num_prompts=2)
        both = run(s.url, api_key=KEY, api_key_file=str(secrets), num_prompts=2)
    assert len(good["outputs"]) == 2 and KEY not in repr(good)
    assert broken.kind == "fail" and str(secrets) in broken.result["msg"] and KEY not in repr(broken.result)
    assert both.kind == "fail" and "mutually exclusive" in both.result["msg"]
