"""The simulator's HTTP shapes against the pinned SGLang wheel's own source.

The wheel is read, never imported (no torch here): small pure functions of the release (the
/generate schema decoders, SamplingParams.verify, should_include_usage) are compiled out of
its files and run on the same inputs as the simulator's code; the shapes (field lists,
defaults, key orders, message templates) are read from its AST. Any drift of what the
simulator relies on fails here, naming the release file.
"""

import ast
import json
import math
import sys
import types
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "sim"))

from sglang_sim import api_contract, server  # noqa: E402

VERSION = "0.5.23"


@pytest.fixture(scope="module")
def wheel():
    import sglang_release

    try:
        path = sglang_release.wheel_path(VERSION)
    except sglang_release.ReleaseUnavailable as exc:
        pytest.skip("sglang %s wheel unavailable: %s" % (VERSION, exc))
    with zipfile.ZipFile(path) as zf:
        files = {}

        def read(name):
            if name not in files:
                files[name] = zf.read("sglang/" + name).decode("utf-8")
            return files[name]

        yield read


def _tree(wheel, name):
    return ast.parse(wheel(name), filename=name)


def _top(tree, name):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return node
    raise AssertionError("%s not found at the top level" % name)


def _method(cls, name):
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    raise AssertionError("%s.%s not found" % (cls.name, name))


def _fields(cls):
    """Annotated fields of a class body, in order, with their default (a literal or None)."""
    out = []
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            try:
                default = ast.literal_eval(node.value) if node.value is not None else None
            except ValueError:
                default = ast.unparse(node.value)
            out.append((node.target.id, default))
    return out


def _has(text, snippet):
    """snippet occurs in text, whitespace runs compared as one space."""
    return " ".join(snippet.split()) in " ".join(text.split())


def _compile(tree, names, namespace):
    """Run the release's top-level definitions `names` into namespace (and return it)."""
    mod = ast.Module(body=[_top(tree, n) for n in names], type_ignores=[])
    exec(compile(mod, "<sglang wheel>", "exec"), namespace)
    return namespace


# ---------------------------------------------------------------- /generate contract gate
class _Structs(dict):
    """Namespace for the release's decoders: a msgspec Struct constructor becomes dict(**kw)."""

    def __missing__(self, key):
        import builtins

        if hasattr(builtins, key):
            return getattr(builtins, key)
        if key[:1].isupper():
            return lambda **kw: dict(kw)
        raise KeyError(key)


@pytest.fixture(scope="module")
def release_decoders(wheel):
    tree = _tree(wheel, "api/v1/api_types.py")
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)
             and (n.name.startswith("_") or n.name.startswith("decode_"))]
    names += [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name) and t.id.startswith("_FIELDS_")]
    ns = _Structs(Any=object, Dict=dict, List=list, Tuple=tuple, Optional=None)
    src = wheel("api/v1/api_types.py")
    error_cls = ast.Module(body=[_top(tree, "JsonContractError")], type_ignores=[])
    exec(compile(error_cls, "<sglang wheel>", "exec"), ns)
    _compile(tree, names, ns)
    assert "class JsonContractError(ValueError)" in src

    def release(body):
        try:
            ns["decode_GenerateRequest"](body)
        except ns["JsonContractError"] as exc:
            return str(exc)
        return None

    return ns, release


def test_sampling_params_fields_and_defaults(wheel, release_decoders):
    """api/v1/api_types.py: _FIELDS_SamplingParams (the 400's list) and SamplingParams defaults."""
    ns, _release = release_decoders
    assert ns["_FIELDS_SamplingParams"] == api_contract.SAMPLING_PARAMS_FIELDS
    assert ns["_FIELDS_WatermarkRequestConfig"] == api_contract._WATERMARK_FIELDS
    defaults = dict(_fields(_top(_tree(wheel, "api/v1/api_types.py"), "SamplingParams")))
    for key, value in api_contract.SAMPLING_PARAMS_DEFAULTS.items():
        assert defaults[key] == value, key
    assert set(api_contract._SP_CHECKS) == set(ns["_FIELDS_SamplingParams"])
    gen_fields = [f for f, _d in _fields(_top(_tree(wheel, "api/v1/api_types.py"), "GenerateRequest"))]
    assert set(api_contract.GENERATE_FIELDS) <= set(gen_fields)


BODIES = [
    {}, {"text": "hi"}, {"text": 5}, {"text": ["a", 1]}, {"input_ids": [1, 2]}, {"input_ids": "12"},
    {"input_ids": [[1], [2, "x"]]}, {"input_ids": [1.5]}, {"input_ids": []}, {"stream": "yes"},
    {"stream": None}, {"rid": 7}, {"rid": ["a", "b"]}, {"unknown_top": 1},
    {"sampling_params": None}, {"sampling_params": []}, {"sampling_params": "x"},
    {"sampling_params": [{"max_new_tokens": 1}, {"bad": 1}]},
    {"sampling_params": {"max_tokens": 5}}, {"sampling_params": {"max_new_tokens": "5"}},
    {"sampling_params": {"max_new_tokens": 5.0}}, {"sampling_params": {"max_new_tokens": True}},
    {"sampling_params": {"max_new_tokens": None}}, {"sampling_params": {"temperature": "0"}},
    {"sampling_params": {"temperature": 0}}, {"sampling_params": {"temperature": None}},
    {"sampling_params": {"top_k": 2.5}}, {"sampling_params": {"ignore_eos": 1}},
    {"sampling_params": {"stop": ["a", 3]}}, {"sampling_params": {"stop": 3}},
    {"sampling_params": {"stop_token_ids": [1, "2"]}}, {"sampling_params": {"logit_bias": {"1": "x"}}},
    {"sampling_params": {"logit_bias": []}}, {"sampling_params": {"choice": "a"}},
    {"sampling_params": {"watermark": {"enabled": True, "nope": 1}}},
    {"sampling_params": {"watermark": {"context_window": "3"}}},
    {"sampling_params": {"custom_params": {"anything": [1]}}}, {"sampling_params": {"n": -1}},
    {"sampling_params": {"json_schema": {}}}, {"return_logprob": [True, 1]},
    {"logprob_start_len": "0"}, {"top_logprobs_num": [1, 2.0]}, {"return_text_in_logprobs": 0},
    {"sampling_params": {"temperature": 1e400}}, {"sampling_params": {"min_new_tokens": -3}},
]


@pytest.mark.parametrize("body", BODIES, ids=[json.dumps(b)[:60] for b in BODIES])
def test_contract_gate_same_verdict_and_text(release_decoders, body):
    """entrypoints/api_contract.py generate_contract_error <- api_types.py decode_GenerateRequest:
    the simulator refuses exactly what the release refuses, with the same text."""
    _ns, release = release_decoders
    assert api_contract.generate_contract_error(body) == release(body)


def test_contract_gate_wiring(wheel):
    """http_server.py generate_request: the gate's 400 body is {"error": <text>}; a ValueError
    while streaming is one SSE error event with these keys, then [DONE]."""
    src = wheel("srt/entrypoints/http_server.py")
    assert 'return ORJSONResponse(status_code=400, content={"error": contract_error})' in src
    assert "contract_error = generate_contract_error(await request.json())" in src
    tree = ast.parse(src)
    serve = _top(tree, "serve_generate_request")
    events = [n for n in ast.walk(serve) if isinstance(n, ast.Dict)
              and [getattr(k, "value", None) for k in n.keys] == ["error"]]
    assert events, "serve_generate_request has no {'error': ...} SSE event"
    inner = events[0].values[0]
    assert [k.value for k in inner.keys] == ["message", "type", "code", "retryable"]
    assert inner.values[1].value == "invalid_request_error"
    assert inner.values[3].value is False
    assert '"frontend": "python"' in src
    assert 'yield b"data: [DONE]\\n\\n"' in src
    err = ast.unparse(_top(tree, "_create_error_response"))
    assert "{'error': {'message': str(e)}}" in err


# ---------------------------------------------------------------- semantic checks
def _verify_release(wheel):
    tree = _tree(wheel, "srt/sampling/sampling_params.py")
    cls = _top(tree, "SamplingParams")
    fn = _method(cls, "verify")
    ns = {"math": math, "get_request_reasoning_end_token_ids": lambda *a, **k: None}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "<sglang wheel>", "exec"), ns)
    src = wheel("srt/sampling/sampling_params.py")
    # the __init__ rewrites the simulator repeats before verify
    assert "_SAMPLING_EPS = 1e-6" in src and "TOP_K_ALL = 1 << 30" in src
    assert "if 0 <= self.temperature < _SAMPLING_EPS:" in src
    return ns["verify"]


SAMPLING = [
    {}, {"temperature": -1.0}, {"temperature": float("inf")}, {"top_p": 0.0}, {"top_p": 1.5},
    {"min_p": 2.0}, {"top_k": 0}, {"frequency_penalty": 3.0}, {"presence_penalty": -2.5},
    {"repetition_penalty": 0.0}, {"repetition_penalty": 2.5}, {"min_new_tokens": -1},
    {"max_new_tokens": -5}, {"max_new_tokens": 3, "min_new_tokens": 4}, {"beam_width": 0},
    {"logit_bias": {"999999999": 1.0}}, {"json_schema": "{}", "regex": "a"},
]


@pytest.mark.parametrize("sp", SAMPLING, ids=[json.dumps(s) for s in SAMPLING])
def test_sampling_verify_same_text(wheel, sp):
    """sampling/sampling_params.py SamplingParams.verify, run from the wheel on the same values."""
    verify = _verify_release(wheel)
    attrs = {"beam_width": None, "temperature": 0.7, "top_p": 1.0, "min_p": 0.0, "top_k": 1 << 30,
             "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
             "min_new_tokens": 0, "max_new_tokens": 16, "logit_bias": None, "sampling_seed": None,
             "custom_params": None, "json_schema": None, "regex": None, "ebnf": None,
             "structural_tag": None}
    attrs.update(sp)
    try:
        verify(types.SimpleNamespace(**attrs), server.tokenizer.VOCAB_SIZE)
        theirs = None
    except ValueError as exc:
        theirs = str(exc)
    try:
        server.Server._verify(dict(attrs))
        ours = None
    except ValueError as exc:
        ours = str(exc)
    assert ours == theirs


def _render(fn, names):
    """The f-strings of a release function, rendered with the given values."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ValueError":
            for arg in node.args:
                expr = ast.Expression(arg)
                try:
                    out.append(eval(compile(expr, "<sglang wheel>", "eval"), {}, dict(names)))
                except (NameError, AttributeError, TypeError):
                    continue
        elif isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "error_msg":
            try:
                out.append(eval(compile(ast.Expression(node.value), "<sglang wheel>", "eval"), {},
                                dict(names)))
            except (NameError, AttributeError, TypeError):
                continue
    return out


class _FakeSched(object):
    context_len = 4096


def _sim_server(reserved_args):
    srv = server.Server.__new__(server.Server)
    srv.args = reserved_args
    srv.steps = reserved_args.get("speculative_num_steps") or 0
    srv.sched = _FakeSched()
    return srv


def test_context_checks_same_text(wheel):
    """managers/tokenizer_manager.py _validate_one_request: both length errors, rendered from the
    release's own f-strings, and the input + max_new_tokens check switched on; managers/utils.py
    compute_num_reserved_tokens for EAGLE."""
    tree = _tree(wheel, "srt/managers/tokenizer_manager.py")
    cls = _top(tree, "TokenizerManager")
    fn = _method(cls, "_validate_one_request")
    srv = _sim_server({"speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                       "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4})
    ctx = _FakeSched.context_len
    with pytest.raises(ValueError) as long_input:
        srv._check_len([1] * (ctx - 2), 1)
    n = ctx - 2 + 4
    theirs = _render(fn, {"input_token_num": n, "self": types.SimpleNamespace(context_len=ctx)})
    assert str(long_input.value) in theirs
    with pytest.raises(ValueError) as total:
        srv._check_len([1] * 2000, 2093)
    n, max_new = 2004, 2093
    theirs = _render(fn, {"input_token_num": n, "max_new_tokens": max_new,
                          "total_tokens": n + max_new,
                          "self": types.SimpleNamespace(context_len=ctx)})
    assert str(total.value) in theirs
    assert srv._check_len([1] * 2000, 2092) == 2092
    assert "self.validate_total_tokens = True" in wheel("srt/managers/tokenizer_manager.py")
    reserved = ast.unparse(_top(_tree(wheel, "srt/managers/utils.py"), "compute_num_reserved_tokens"))
    assert "spec.speculative_eagle_topk * spec.speculative_num_steps" in reserved
    assert "max_speculative_num_draft_tokens()" in reserved and "is_eagle()" in reserved
    assert "Either text, input_ids or input_embeds should be provided." in wheel(
        "srt/managers/io_struct.py")


# ---------------------------------------------------------------- meta_info
def test_meta_info_keys(wheel):
    """tokenizer_manager.py _handle_batch_output: the meta_info keys every output has, in order,
    and the spec metrics computed only under `if state.finished:`."""
    tree = _tree(wheel, "srt/managers/tokenizer_manager.py")
    fn = _method(_top(tree, "TokenizerManager"), "_handle_batch_output")
    keys = []
    for node in ast.walk(fn):
        if (isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "meta_info"
                and isinstance(node.value, ast.Dict)):
            keys += [k.value for k in node.value.keys]
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and ast.unparse(node.func) == "meta_info.update"
                and isinstance(node.args[0], ast.Dict)
                and "completion_tokens" in [getattr(k, "value", None) for k in node.args[0].keys]):
            keys += [k.value for k in node.args[0].keys]
    srv = _sim_server({})
    srv.spec = False
    req = types.SimpleNamespace(rid="r", finish_reason=None, prompt_len=3, output_ids=[1],
                                cached_tokens=0, finished=False)
    assert list(srv.meta_info(req)) == keys
    finished = [n for n in ast.walk(fn) if isinstance(n, ast.If)
                and ast.unparse(n.test) == "state.finished"]
    assert any("_calculate_spec_decoding_metrics" in ast.unparse(n) for n in finished)
    assert any("e2e_latency" in ast.unparse(n) for n in finished)


# ---------------------------------------------------------------- OpenAI
def test_openai_request_defaults_and_usage_fields(wheel):
    """entrypoints/openai/protocol.py: DEFAULT_MODEL_NAME, the optional `model`, max_tokens 16,
    StreamOptions, UsageInfo's fields (the simulator's usage dict in the same order)."""
    tree = _tree(wheel, "srt/entrypoints/openai/protocol.py")
    assert ast.literal_eval(_top(tree, "DEFAULT_MODEL_NAME").value) == server.DEFAULT_MODEL_NAME
    completion = dict(_fields(_top(tree, "CompletionRequest")))
    assert "DEFAULT_MODEL_NAME" in completion["model"] and completion["max_tokens"] == 16
    assert "DEFAULT_MODEL_NAME" in dict(_fields(_top(tree, "ChatCompletionRequest")))["model"]
    assert [f for f, _d in _fields(_top(tree, "StreamOptions"))] == [
        "include_usage", "continuous_usage_stats"]
    req = types.SimpleNamespace(prompt_len=3, output_ids=[1, 2])
    assert list(server.Server._usage(req)) == [f for f, _d in _fields(_top(tree, "UsageInfo"))]
    assert [f for f, _d in _fields(_top(tree, "CompletionStreamResponse"))][:6] == [
        "id", "object", "created", "model", "choices", "usage"]
    assert [f for f, _d in _fields(_top(tree, "CompletionResponseStreamChoice"))][:5] == [
        "index", "text", "logprobs", "finish_reason", "matched_stop"]


def test_should_include_usage_same_verdict(wheel):
    """entrypoints/openai/utils.py should_include_usage, run from the wheel."""
    ns = _compile(_tree(wheel, "srt/entrypoints/openai/utils.py"), ["should_include_usage"],
                  {"StreamOptions": object})
    for so in (None, {}, {"include_usage": True}, {"continuous_usage_stats": True},
               {"include_usage": True, "continuous_usage_stats": True},
               {"include_usage": False, "continuous_usage_stats": False}):
        theirs = ns["should_include_usage"](
            types.SimpleNamespace(include_usage=(so or {}).get("include_usage", False),
                                  continuous_usage_stats=(so or {}).get("continuous_usage_stats",
                                                                        False))
            if so is not None else None, False)
        assert server.should_include_usage(so) == theirs, so


def test_openai_stream_shapes(wheel):
    """serving_completions.py: usage on each chunk when continuous_usage_stats, finish_reason on
    the content chunk, the final usage chunk with exclude_none. serving_chat.py + sse_utils.py:
    the role chunk, content chunks with usage, finish_reason in a chunk of its own after."""
    comp = wheel("srt/entrypoints/openai/serving_completions.py")
    tree = ast.parse(comp)
    stream = ast.unparse(_method(_top(tree, "OpenAIServingCompletion"), "_generate_completion_stream"))
    assert "finish_reason=finish_reason_type" in stream
    assert _has(stream, "if continuous_usage_stats: chunk.usage = ")
    assert "final_usage_chunk.model_dump_json(exclude_none=True)" in stream
    chat = ast.parse(wheel("srt/entrypoints/openai/serving_chat.py"))
    cstream = ast.unparse(_method(_top(chat, "OpenAIServingChat"), "_generate_chat_stream"))
    assert "role='assistant'" in cstream and "content=''" in cstream
    assert "for idx, finish_reason_data in finish_reasons.items():" in cstream
    assert "usage_chunk.model_dump_json()" in cstream
    sse = ast.parse(wheel("srt/entrypoints/openai/sse_utils.py"))
    delta = _top(sse, "StreamDelta")
    assert [f for f, _d in _fields(delta)] == ["reasoning_content", "role", "content"]
    assert "omit_defaults=True" in ast.unparse(delta).splitlines()[0]
    assert [f for f, _d in _fields(_top(sse, "StreamChoice"))] == [
        "index", "delta", "logprobs", "finish_reason", "matched_stop"]
    chunk = _top(sse, "StreamChunk")
    assert [f for f, _d in _fields(chunk)] == ["id", "object", "created", "model", "choices", "usage"]
    assert "omit_defaults=True" in ast.unparse(chunk).splitlines()[0]


# ---------------------------------------------------------------- /server_info, /metrics
def test_server_info_state_shapes(wheel):
    """scheduler_components/internal_state.py (avg_spec_accept_length only when not None),
    memory_usage.py build_memory_usage keys, graph_memory_usage.py GRAPH_MEMORY_USAGE_KEYS,
    metrics_collector.py graph_memory_usage_gb per phase."""
    spec = ast.unparse(_method(_top(_tree(wheel, "srt/managers/scheduler_components/internal_state.py"),
                                    "SchedulerInternalStateController"), "_add_speculative"))
    assert _has(spec, "if accept_length is not None: state['avg_spec_accept_length'] = accept_length")
    build = _top(_tree(wheel, "srt/managers/scheduler_components/memory_usage.py"), "build_memory_usage")
    ret = [n for n in ast.walk(build) if isinstance(n, ast.Return)][0].value
    srv = _sim_server({"tp_size": 4})
    srv.spec, srv.sched, srv.startup_time, srv.scale = True, types.SimpleNamespace(
        mrr=48, last_gen_throughput=0.0, avg_accept_length=lambda: None, context_len=4096), 0.0, 1.0
    srv.settings = {"profile": "x"}
    srv.plan = {"weights_mib": 1.0, "draft_weights_mib": 1.0, "kv_mib": 1.0, "max_total_num_tokens": 9,
                "graph_mib": 1024.0, "avail_after_graph_mib": 2.0}
    info = srv.server_info()
    mem = info["internal_states"][0]["memory_usage"]
    assert list(mem) == [k.value for k in ret.keys]
    assert "avg_spec_accept_length" not in info["internal_states"][0]
    keys = ast.literal_eval(_top(_tree(wheel, "srt/model_executor/graph_memory_usage.py"),
                                 "GRAPH_MEMORY_USAGE_KEYS").value)
    assert tuple(mem["graph"]) == keys == server.GRAPH_MEMORY_USAGE_KEYS
    assert info["frontend"] == "python"
    metrics = wheel("srt/observability/metrics_collector.py")
    assert 'name="sglang:graph_memory_usage_gb"' in metrics
    assert 'labelnames=list(labels.keys()) + ["phase"]' in metrics


# ---------------------------------------------------------------- accepted-length histogram
def test_correct_drafts_histogram_shape(wheel):
    """What sglang_bench reads for accept_length_bounds_by_depth: /generate meta_info carries each
    request's spec_correct_drafts_histogram (tokenizer_manager.py), index = correct drafts in a
    verify round, grown only as far as the largest count seen (schedule_batch.py
    update_spec_correct_drafts_histogram); the OpenAI endpoints pass it only inside
    spec_tokens_details, which a request must ask for (return_spec_tokens_details)."""
    tm = wheel("srt/managers/tokenizer_manager.py")
    assert 'meta_info["spec_correct_drafts_histogram"] = (' in tm
    upd = ast.unparse(_method(_top(_tree(wheel, "srt/managers/schedule_batch.py"), "Req"),
                              "update_spec_correct_drafts_histogram"))
    assert _has(upd, "if len(self.spec_correct_drafts_histogram) <= num_correct_drafts:")
    assert _has(upd, "self.spec_correct_drafts_histogram[num_correct_drafts] += 1")
    utils = wheel("srt/entrypoints/openai/utils.py")
    assert '"spec_correct_drafts_histogram",' in utils
    assert "return_spec_tokens_details: bool = False" in wheel("srt/entrypoints/openai/protocol.py")
    # the sim's lists have the same shape: tests/integration/sim/test_sim_e2e.py _check_stream
