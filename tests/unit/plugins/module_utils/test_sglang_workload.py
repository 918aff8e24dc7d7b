"""sglang_bench's workload: dataset parsing, request bodies per endpoint, synthetic prompts."""

import json

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_workload as wl


def test_load_jsonl_shapes():
    lines = ['"plain string"', "", '{"prompt": "p", "max_tokens": 5}',
             '{"messages": [{"role": "user", "content": "hi"}]}', '{"input_ids": [1, 2]}']
    got = wl.load_jsonl(lines)
    assert got[0] == {"text": "plain string"}
    assert got[1] == {"text": "p", "output_len": 5}
    assert "messages" in got[2] and got[3] == {"input_ids": [1, 2]}


@pytest.mark.parametrize("lines,needle", [
    ([], "empty"),
    (["", "   "], "empty"),
    (['{"prompt": "a"}', "not json"], "line 2 is not valid JSON"),
    (['{"foo": 1}'], "line 1 has none of"),
    (["[1, 2]"], "line 1 must be a JSON object"),
    (['{"prompt": "a", "output_len": "many"}'], "output_len must be an integer"),
])
def test_load_jsonl_errors(lines, needle):
    with pytest.raises(ValueError) as exc:
        wl.load_jsonl(lines)
    assert needle in str(exc.value)


def test_build_payloads():
    g = json.loads(wl.build_payload("generate", {"input_ids": [1, 2]}, 8, 0.0, True))
    assert g == {"input_ids": [1, 2], "stream": True,
                 "sampling_params": {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True}}
    c = json.loads(wl.build_payload("completions", {"text": "hi", "output_len": 3}, 8, 0.5,
                                    False, "m"))
    assert c["prompt"] == "hi" and c["max_tokens"] == 3 and c["model"] == "m"
    assert c["stream_options"]["continuous_usage_stats"] is True
    ch = json.loads(wl.build_payload("chat", {"text": "hi"}, 8, 0.0, True, "m"))
    assert ch["messages"] == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError):
        wl.build_payload("generate", {"messages": []}, 8, 0.0, True)
    with pytest.raises(ValueError):
        wl.build_payload("chat", {"input_ids": [1]}, 8, 0.0, True)


def test_random_prompts_deterministic_and_distinct():
    a = wl.random_prompts(3, 16, 42, False)
    assert a == wl.random_prompts(3, 16, 42, False)
    assert len(a[0]["input_ids"]) == 16 and a[0] != a[1]
    assert len(wl.random_prompts(1, 5, 1, True)[0]["text"].split()) == 5
