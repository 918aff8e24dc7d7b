"""The simulator's HTTP shapes, each against the SGLang 0.5.23 source it follows.

Paths are those of the 0.5.23 wheel (sglang/srt/...). One simulator serves the whole module
(EAGLE 3/1/4, so 4 reserved tokens per request, and a 4096-token context so the length checks
are cheap to reach). tests/contract/test_api_contract.py checks the same texts and keys
against the wheel itself.
"""

import asyncio
import json
import random
import socket
import statistics
import sys
import time
from pathlib import Path

import pytest

from _simharness import MODEL, SPEC3, Sim, request, run

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "sim"))
from sglang_sim import api_contract  # noqa: E402

CTX = 4096
RESERVED = 4  # managers/utils.py compute_num_reserved_tokens: max(topk*steps, draft tokens)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    args = SPEC3 + ["--context-length", str(CTX), "--enable-metrics"]
    s = Sim(tmp_path_factory.mktemp("http"), args,
            {"SGLANG_SIM_TIME_SCALE": "0.05", "SGLANG_SIM_LOAD_SECONDS": "1"})
    try:
        yield s.wait_ready()
    finally:
        s.stop()


def post(sim, path, body, stream=False, headers=None):
    return run(request(sim.port, "POST", path, body, headers=headers, stream=stream))


def get(sim, path):
    return run(request(sim.port, "GET", path))


def ids(n, seed=0):
    rng = random.Random(seed)
    return [rng.randrange(100, 150000) for _i in range(n)]


def gen(n_in, max_new, stream=False, **sp):
    sp = dict({"max_new_tokens": max_new, "temperature": 0.0, "ignore_eos": True}, **sp)
    return {"input_ids": ids(n_in), "stream": stream, "sampling_params": sp}


def events_json(events):
    assert events[-1][1] == "[DONE]"
    return [json.loads(d) for _t, d in events[:-1]]


# ------------------------------------------------------------------ /generate: the contract gate
def test_unknown_sampling_param_gets_the_schema_400(sim):
    """entrypoints/http_server.py generate_request -> entrypoints/api_contract.py
    generate_contract_error -> api/v1/api_types.py decode_SamplingParams / _unknown_field."""
    expected = "unknown field `max_tokens`, expected one of " + ", ".join(
        "`%s`" % f for f in api_contract.SAMPLING_PARAMS_FIELDS)
    for stream in (False, True):  # the gate answers before any stream starts
        body = gen(8, 4, stream=stream)
        body["sampling_params"]["max_tokens"] = 4
        status, hdrs, raw = post(sim, "/generate", body)
        assert status == 400 and hdrs["content-type"] == "application/json"
        assert json.loads(raw) == {"error": expected}
    body = gen(8, 4)
    body["sampling_params"]["max_new_tokens"] = "4"
    status, _h, raw = post(sim, "/generate", body)
    assert status == 400 and json.loads(raw) == {"error": 'invalid type: string "4", expected i64'}
    body = gen(8, 4)
    body["stream"] = "yes"
    status, _h, raw = post(sim, "/generate", body)
    assert json.loads(raw) == {"error": 'invalid type: string "yes", expected a boolean'}
    # GenerateRequest itself ignores unknown keys ("unknown keys ignored" in api_types.py)
    body = gen(8, 4)
    body["not_a_field"] = {"x": 1}
    status, _h, raw = post(sim, "/generate", body)
    assert status == 200 and json.loads(raw)["meta_info"]["completion_tokens"] == 4


def test_semantic_error_is_400_or_a_200_sse_error_event(sim):
    """http_server.py serve_generate_request: a ValueError is 400 {"error": {"message"}}
    (_create_error_response) without streaming, and a 200 with one SSE error event and
    [DONE] while streaming. Texts: sampling/sampling_params.py SamplingParams.verify."""
    msg = "temperature must be a non-negative finite number, got -1.0."
    status, _h, raw = post(sim, "/generate", gen(8, 4, temperature=-1))
    assert status == 400 and json.loads(raw) == {"error": {"message": msg}}
    status, hdrs, events = post(sim, "/generate", gen(8, 4, stream=True, temperature=-1),
                                stream=True)
    assert status == 200 and hdrs["content-type"].startswith("text/event-stream")
    assert events_json(events) == [{"error": {"message": msg, "type": "invalid_request_error",
                                              "code": 400, "retryable": False}}]
    status, _h, raw = post(sim, "/generate", gen(8, 4, top_p=0))
    assert json.loads(raw)["error"]["message"] == "top_p must be in (0, 1], got 0.0."
    status, _h, raw = post(sim, "/generate", gen(8, 4, min_new_tokens=9))
    assert json.loads(raw)["error"]["message"] == (
        "min_new_tokens must be in [0, max_new_tokens(4)], got 9.")


def test_context_check_counts_max_new_tokens(sim):
    """managers/tokenizer_manager.py _validate_one_request: input (+ EAGLE's reserved slots,
    managers/utils.py compute_num_reserved_tokens) >= context -> error; input + max_new_tokens
    > context -> error; both texts verbatim."""
    n_in = 2000
    fits = CTX - n_in - RESERVED
    status, _h, raw = post(sim, "/generate", gen(n_in, 1, max_new_tokens=fits))
    assert status == 200, raw
    status, _h, raw = post(sim, "/generate", gen(n_in, 1, max_new_tokens=fits + 1))
    assert status == 400
    assert json.loads(raw)["error"]["message"] == (
        "Requested token count exceeds the model's maximum context length of %d tokens. You "
        "requested a total of %d tokens: %d tokens from the input messages and %d tokens for "
        "the completion. Please reduce the number of tokens in the input messages or the "
        "completion to fit within the limit." % (CTX, CTX + 1, n_in + RESERVED, fits + 1))
    status, _h, raw = post(sim, "/generate", gen(CTX - RESERVED, 1))
    assert json.loads(raw)["error"]["message"] == (
        "The input (%d tokens) is longer than the model's context length (%d tokens)." % (CTX, CTX))
    # the OpenAI routes run the same check: serving_base.py create_error_response, 400
    status, _h, raw = post(sim, "/v1/completions", {"prompt": ids(n_in), "max_tokens": fits + 1})
    err = json.loads(raw)
    assert status == 400 and err["type"] == "BadRequestError" and err["code"] == 400
    assert err["message"].startswith("Requested token count exceeds")


# ------------------------------------------------------------------ meta_info
def test_meta_info_keys(sim):
    """tokenizer_manager.py _handle_batch_output: id, finish_reason, prompt_tokens,
    weight_version, num_retractions, reasoning_tokens, completion_tokens, cached_tokens; then
    e2e_latency and the spec metrics (_calculate_spec_decoding_metrics) once finished."""
    status, _h, events = post(sim, "/generate", gen(16, 40, stream=True), stream=True)
    chunks = events_json(events)
    base = ["id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions",
            "reasoning_tokens", "completion_tokens", "cached_tokens"]
    for c in chunks[:-1]:
        assert list(c["meta_info"]) == base
    last = chunks[-1]["meta_info"]
    assert list(last)[:len(base)] == base
    assert {"e2e_latency", "spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts",
            "spec_num_proposed_drafts", "spec_verify_ct"} <= set(last)
    assert "total_retractions" not in last and last["num_retractions"] == 0
    assert last["completion_tokens"] == 40 and last["finish_reason"]["type"] == "length"


# ------------------------------------------------------------------ OpenAI streams
def test_completions_stream_usage_on_every_chunk(sim):
    """entrypoints/openai/serving_completions.py _generate_completion_stream: one chunk per
    output, finish_reason on the chunk of the last output (no extra empty chunk), usage on
    every chunk with stream_options.continuous_usage_stats (utils.py should_include_usage),
    the final usage chunk dumped with exclude_none; protocol.py CompletionRequest: `model`
    defaults to "default" and is echoed."""
    body = {"prompt": ids(32), "max_tokens": 50, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    status, _h, events = post(sim, "/v1/completions", body, stream=True)
    chunks = events_json(events)
    content, final = chunks[:-1], chunks[-1]
    assert status == 200 and all(c["model"] == "default" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    counts = [c["usage"]["completion_tokens"] for c in content]
    assert counts == sorted(counts) and counts[-1] == 50 and len(set(counts)) == len(counts)
    assert max(b - a for a, b in zip([0] + counts, counts)) > 1  # spec chunks carry several
    assert all(c["usage"]["prompt_tokens"] == 32 for c in content)
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * (len(content) - 1) + ["length"]
    assert content[-1]["choices"][0]["text"]  # the finishing chunk carries the last text
    assert list(content[0]) == ["id", "object", "created", "model", "choices", "usage"]
    assert list(content[0]["choices"][0]) == ["index", "text", "logprobs", "finish_reason",
                                              "matched_stop"]
    assert final["choices"] == [] and final["usage"] == {
        "prompt_tokens": 32, "total_tokens": 82, "completion_tokens": 50, "reasoning_tokens": 0}
    # without continuous_usage_stats: usage null on the chunks, the final usage block only
    body["stream_options"] = {"include_usage": True}
    body["model"] = "anything"
    chunks = events_json(post(sim, "/v1/completions", body, stream=True)[2])
    assert all(c["usage"] is None for c in chunks[:-1]) and chunks[-1]["usage"]["completion_tokens"] == 50
    assert chunks[0]["model"] == "anything"


def test_chat_stream_shapes(sim):
    """serving_chat.py _generate_chat_stream + sse_utils.py build_sse_content (msgspec,
    omit_defaults): a role chunk first, content chunks (usage on each with
    continuous_usage_stats), then finish_reason in a chunk of its own, then the usage chunk
    (ChatCompletionStreamResponse.model_dump_json, nulls kept)."""
    body = {"messages": [{"role": "user", "content": "zq vx kopuja"}], "max_tokens": 30,
            "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    chunks = events_json(post(sim, "/v1/chat/completions", body, stream=True)[2])
    role, content, finish, final = chunks[0], chunks[1:-2], chunks[-2], chunks[-1]
    assert role["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant",
                                           "content": ""}
    assert "usage" not in role and role["model"] == "default"
    counts = [c["usage"]["completion_tokens"] for c in content]
    assert counts == sorted(counts) and counts[-1] == 30
    assert all(c["choices"][0]["finish_reason"] is None for c in content)
    assert finish["choices"][0]["delta"] == {"reasoning_content": None}
    assert finish["choices"][0]["finish_reason"] == "length" and "usage" not in finish
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 30
    assert final["usage"]["prompt_tokens_details"] is None


def test_openai_non_stream_shapes(sim):
    """protocol.py CompletionResponse / ChatCompletionResponse (ChatMessage drops a null
    tool_calls), UsageInfo's fields, `model` echoed or "default"."""
    out = json.loads(post(sim, "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                           "ignore_eos": True})[2])
    assert out["model"] == "default" and out["choices"][0]["message"] == {
        "role": "assistant", "content": out["choices"][0]["message"]["content"],
        "reasoning_content": None}
    assert list(out["usage"]) == ["prompt_tokens", "total_tokens", "completion_tokens",
                                  "prompt_tokens_details", "reasoning_tokens",
                                  "completion_tokens_details"]
    out = json.loads(post(sim, "/v1/completions", {"model": MODEL, "prompt": "hi", "ignore_eos": True})[2])
    assert out["model"] == MODEL and out["usage"]["completion_tokens"] == 16  # max_tokens default
    status, _h, raw = post(sim, "/v1/completions", {"prompt": "hi"}, headers={"Content-Type": "text/plain"})
    assert status == 400 and "Only 'application/json' is allowed" in json.loads(raw)["message"]


# ------------------------------------------------------------------ /server_info, /metrics
def test_server_info_shapes(sim):
    """http_server.py server_info (frontend "python"); scheduler_components/internal_state.py
    get_internal_state (avg_spec_accept_length left out while None); memory_usage.py
    build_memory_usage (graph: a dict over graph_memory_usage.py GRAPH_MEMORY_USAGE_KEYS)."""
    assert post(sim, "/flush_cache", None)[0] == 200  # resets the spec counters
    info = json.loads(get(sim, "/server_info")[2])
    assert info["frontend"] == "python" and info["version"] == "0.5.23"
    state = info["internal_states"][0]
    assert "avg_spec_accept_length" not in state
    mem = state["memory_usage"]
    assert list(mem) == ["weight", "kvcache", "startup_available", "token_capacity",
                         "token_capacity_swa", "graph"]
    assert list(mem["graph"]) == ["prefill", "decode", "target_verify", "draft_prefill",
                                  "draft_decode", "draft_extend"]
    assert sum(mem["graph"].values()) > 0
    # 48 with speculation, or fewer where the memory model caps the request pool
    assert 1 <= state["effective_max_running_requests_per_dp"] <= 48
    post(sim, "/generate", gen(8, 20))
    state = json.loads(get(sim, "/server_info")[2])["internal_states"][0]
    assert 1.0 <= state["avg_spec_accept_length"] <= 4.0
    metrics = get(sim, "/metrics")[2].decode()
    phases = [line for line in metrics.splitlines() if line.startswith("sglang:graph_memory_usage_gb{")]
    assert len(phases) == 6 and any('phase="target_verify"' in p for p in phases)


# ------------------------------------------------------------------ acceptance regime
def test_acceptance_depends_on_ignore_eos_and_temperature_not_wording(sim):
    """perf.acceptance_alpha: the regime is ignore_eos (a benchmark run) plus temperature.
    Token-id prompts and random-word prompts of the same request see the same server."""
    words = " ".join("w%d" % i for i in range(48))  # random words, no common English

    async def one(prompt, ignore_eos, temperature, i):
        body = {"stream": False, "sampling_params": {
            "max_new_tokens": 200, "temperature": temperature, "ignore_eos": ignore_eos}}
        body.update(prompt)
        body["rid"] = "acc-%d-%s-%s-%s" % (i, ignore_eos, temperature, "text" in prompt)
        status, _h, raw = await request(sim.port, "POST", "/generate", body)
        return json.loads(raw)["meta_info"]["spec_accept_length"]

    async def many(prompt, ignore_eos, temperature):
        return statistics.mean(await asyncio.gather(*[
            one(prompt, ignore_eos, temperature, i) for i in range(6)]))

    def measure(ignore_eos, temperature):
        return (run(many({"input_ids": ids(48)}, ignore_eos, temperature)),
                run(many({"text": words}, ignore_eos, temperature)))

    bench = measure(True, 0.0)
    chat = measure(False, 0.0)
    hot = measure(True, 1.0)
    for a in bench:
        assert a > 3.7  # ~0.99 per draft token: 1+3 drafts almost always
    for a in chat:
        assert a < 3.0  # ~0.72: 2.6 expected
    assert max(hot) < min(bench)
    assert abs(bench[0] - bench[1]) < 0.15 and abs(chat[0] - chat[1]) < 0.45


# ------------------------------------------------------------------ bad input
def _raw(sim, payload, timeout=5):
    with socket.create_connection(("127.0.0.1", sim.port), timeout=timeout) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            try:
                part = s.recv(65536)
            except socket.timeout:
                break
            if not part:
                break
            data += part
    return data


def test_bad_input_gets_an_answer_and_the_server_lives(sim):
    """Malformed HTTP gets uvicorn's 400 (h11_impl.py send_400_response); malformed JSON and
    wrong shapes get http_server.py's validation 400 (ErrorResponse) or the contract gate's;
    none gets a 500, a traceback or a dead server."""
    bodies = [b"{not json", b"[1, 2]", b"null", b"\xff\xfe", json.dumps({"text": 5}).encode(),
              json.dumps({"input_ids": "abc"}).encode(),
              json.dumps({"input_ids": [1, 2, -7], "sampling_params": {"max_new_tokens": 1}}).encode(),
              json.dumps({"text": "x", "sampling_params": {"temperature": float("nan")}}).encode(),
              json.dumps({"text": "x", "sampling_params": {"max_new_tokens": 10 ** 30}}).encode(),
              json.dumps({"text": ["a", "b"]}).encode(),
              json.dumps({"text": "x", "sampling_params": [{"max_new_tokens": 1}]}).encode(),
              json.dumps({"text": "x", "sampling_params": {"watermark": {"nope": 1}}}).encode()]
    for b in bodies:
        for path in ("/generate", "/v1/completions", "/v1/chat/completions"):
            status, _h, raw = post(sim, path, b)
            assert 400 <= status < 500, (path, b, status, raw)
            err = json.loads(raw)
            assert "error" in err or err.get("object") == "error", raw
    for payload in (b"GARBAGE\r\n\r\n",
                    b"POST /generate HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
                    b"POST /generate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"):
        reply = _raw(sim, payload)
        assert reply.startswith(b"HTTP/1.1 400 "), reply
        assert reply.endswith(b"Invalid HTTP request received."), reply
    # a client that leaves in the middle of a stream
    with socket.create_connection(("127.0.0.1", sim.port)) as s:
        data = json.dumps(gen(8, 2000, stream=True)).encode()
        s.sendall(b"POST /generate HTTP/1.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
        s.recv(100)
    time.sleep(0.3)
    assert get(sim, "/health")[0] == 200
    status, _h, raw = post(sim, "/generate", gen(8, 3))
    assert status == 200 and json.loads(raw)["meta_info"]["completion_tokens"] == 3
    assert sim.proc.poll() is None
    assert "Traceback" not in sim.output and "[http_server] Error: " in sim.output
