"""sglang_bench's stdlib client: SSE and HTTP/1.1 parsing on canned byte streams (split at every
boundary), stream handlers, dataset parsing, and end-to-end behaviour against a tiny fake SGLang
server on loopback (success and every failure path, each bounded in time)."""

import asyncio
import json
import socket
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_client as sc

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fixtures" / "bench"))
from fake_sglang import FakeServerThread  # noqa: E402


# ------------------------------------------------------------------ SSE
def _feed_all(parser, data, cut):
    out = []
    for i in range(0, len(data), cut):
        out.extend(parser.feed(data[i:i + cut]))
    return out


SSE = (b"data: {\"a\": 1}\n\n"
       b": keep-alive comment\n\n"
       b"event: message\r\ndata: {\"b\": 2}\r\n\r\n"
       b"data:{\"c\": 3}\n\n"
       b"data: line1\ndata: line2\n\n"
       b"data: [DONE]\n\n")
SSE_EXPECTED = [b'{"a": 1}', b'{"b": 2}', b'{"c": 3}', b"line1\nline2", b"[DONE]"]


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 7, 13, 1000])
def test_sse_parser_any_split(cut):
    assert _feed_all(sc.SSEParser(), SSE, cut) == SSE_EXPECTED


def test_sse_parser_every_two_way_split():
    for i in range(len(SSE) + 1):
        p = sc.SSEParser()
        assert p.feed(SSE[:i]) + p.feed(SSE[i:]) == SSE_EXPECTED, i


def test_sse_parser_cr_only_and_pending():
    p = sc.SSEParser()
    assert p.feed(b"data: x\r\rdata: y\r") == [b"x"]
    assert p.pending()
    assert p.feed(b"\r") == [b"y"]
    assert not p.pending()


# ------------------------------------------------------------------ HTTP response parser
def _chunked(parts):
    return b"".join(b"%x\r\n%s\r\n" % (len(x), x) for x in parts) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("cut", [1, 2, 4, 9, 4096])
def test_response_parser_chunked_any_split(cut):
    body_parts = [b"data: {\"x\": 1}\n\n", b"data: [DO", b"NE]\n\n"]
    raw = HEAD + _chunked(body_parts)
    p = sc.ResponseParser()
    got = b""
    for i in range(0, len(raw), cut):
        got += p.feed(raw[i:i + cut])
    assert p.status == 200 and p.complete and p.keep_alive
    assert got == b"".join(body_parts)


def test_response_parser_content_length_and_close():
    p = sc.ResponseParser()
    body = p.feed(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 5\r\nConnection: close\r\n\r\nnope!")
    assert p.status == 401 and p.reason == "Unauthorized" and body == b"nope!"
    assert p.complete and not p.keep_alive


def test_response_parser_read_until_close():
    p = sc.ResponseParser()
    assert p.feed(b"HTTP/1.1 200 OK\r\n\r\nabc") == b"abc"
    assert not p.complete
    assert p.finish_on_close() and p.complete


def test_response_parser_errors():
    with pytest.raises(sc.ProtocolError):
        sc.ResponseParser().feed(b"SSH-2.0-OpenSSH\r\n\r\n")
    p = sc.ResponseParser()
    with pytest.raises(sc.ProtocolError):
        p.feed(HEAD + b"zz\r\nabc\r\n")
    p = sc.ResponseParser()
    with pytest.raises(sc.ProtocolError):
        p.feed(HEAD + b"3\r\nabcXX")
    p = sc.ResponseParser()
    p.feed(HEAD + b"5\r\nab")  # cut mid-chunk: not complete, not an error yet
    assert not p.complete and not p.finish_on_close()


# ------------------------------------------------------------------ stream handlers
def _gen_event(n, finish=False, **extra):
    meta = {"completion_tokens": n, "prompt_tokens": 4, "finish_reason": None}
    if finish:
        meta["finish_reason"] = {"type": "length"}
    meta.update(extra)
    return json.dumps({"text": "x" * n, "meta_info": meta}).encode()


def test_generate_stream_counts_cumulative_tokens_per_chunk():
    rec = sc.new_record()
    h = sc.GenerateStream(rec)
    h.event(_gen_event(1), 1.0)
    h.event(_gen_event(1), 1.05)  # no new token (e.g. a text-only update): not a chunk
    h.event(_gen_event(4), 1.1)
    h.event(_gen_event(7, True, spec_verify_ct=2, spec_accept_length=3.5,
                       spec_correct_drafts_histogram=[0, 0, 2]), 1.2)
    h.event(b"[DONE]", 1.2)
    assert h.done and h.error is None
    assert rec["chunks"] == [(1.0, 1), (1.1, 3), (1.2, 3)]
    assert rec["output_tokens"] == 7 and rec["prompt_tokens"] == 4
    assert rec["spec_verify_ct"] == 2 and rec["spec_accept_length"] == 3.5
    assert rec["spec_hist"] == [0, 0, 2]


@pytest.mark.parametrize("data,needle", [
    (b"{not json", "not JSON"),
    (b'{"text": "x"}', "completion_tokens"),
    (b'[1, 2]', "completion_tokens"),
    (b'{"error": {"message": "boom"}}', "server error in stream: boom"),
])
def test_generate_stream_malformed(data, needle):
    h = sc.GenerateStream(sc.new_record())
    h.event(data, 0.0)
    assert needle in h.error


def test_openai_stream_usage_and_fallback():
    rec = sc.new_record()
    h = sc.OpenAIStream(rec, chat=True)
    ev = {"choices": [{"delta": {"content": "ab"}, "finish_reason": None}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    h.event(json.dumps(ev).encode(), 0.1)
    ev["usage"]["completion_tokens"] = 4
    h.event(json.dumps(ev).encode(), 0.2)
    h.event(json.dumps({"choices": [], "usage": {"completion_tokens": 4}}).encode(), 0.3)
    h.event(b"[DONE]", 0.3)
    assert rec["chunks"] == [(0.1, 1), (0.2, 3)] and rec["output_tokens"] == 4
    # a server without usage per chunk: one token per content chunk
    rec = sc.new_record()
    h = sc.OpenAIStream(rec, chat=False)
    for t in (0.1, 0.2, 0.3):
        h.event(json.dumps({"choices": [{"text": "a"}]}).encode(), t)
    assert rec["output_tokens"] == 3 and len(rec["chunks"]) == 3
    h.event(b"42", 0.4)
    assert "not an object" in h.error


# ------------------------------------------------------------------ dataset and payloads
def test_load_jsonl_shapes():
    lines = ['"plain string"', "", '{"prompt": "p", "max_tokens": 5}',
             '{"messages": [{"role": "user", "content": "hi"}]}', '{"input_ids": [1, 2]}']
    got = sc.load_jsonl(lines)
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
        sc.load_jsonl(lines)
    assert needle in str(exc.value)


def test_build_payloads():
    g = json.loads(sc.build_payload("generate", {"input_ids": [1, 2]}, 8, 0.0, True))
    assert g == {"input_ids": [1, 2], "stream": True,
                 "sampling_params": {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True}}
    c = json.loads(sc.build_payload("completions", {"text": "hi", "output_len": 3}, 8, 0.5,
                                    False, "m"))
    assert c["prompt"] == "hi" and c["max_tokens"] == 3 and c["model"] == "m"
    assert c["stream_options"]["continuous_usage_stats"] is True
    ch = json.loads(sc.build_payload("chat", {"text": "hi"}, 8, 0.0, True, "m"))
    assert ch["messages"] == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError):
        sc.build_payload("generate", {"messages": []}, 8, 0.0, True)
    with pytest.raises(ValueError):
        sc.build_payload("chat", {"input_ids": [1]}, 8, 0.0, True)


def test_random_prompts_deterministic_and_distinct():
    a = sc.random_prompts(3, 16, 42, False)
    assert a == sc.random_prompts(3, 16, 42, False)
    assert len(a[0]["input_ids"]) == 16 and a[0] != a[1]
    assert len(sc.random_prompts(1, 5, 1, True)[0]["text"].split()) == 5


# ------------------------------------------------------------------ against the fake server
BASE = {"concurrency": [1, 3], "input_len": 8, "output_len": 20, "num_prompts": 6,
        "timeout": 10}


def _run(url, **kw):
    cfg = dict(BASE, url=url)
    cfg.update(kw)
    return sc.run_benchmark(cfg)


def test_generate_end_to_end_counts_and_accept_length():
    with FakeServerThread(tokens_per_chunk=3, ttft=0.02, chunk_gap=0.004) as f:
        res = _run(f.url, flush_cache=True)
        sent = f.fake.requests
    lv = res["by_concurrency"]["3"]
    assert [x["concurrency"] for x in res["levels"]] == [1, 3]
    assert lv["completed"] == 6 and lv["failed"] == 0
    assert lv["total_output_tokens"] == 6 * 20
    assert lv["server_output_tokens"] == 6 * 20  # the counters exclude the warmup
    # 20 tokens = 1 + 19 -> chunks 1,3,3,3,3,3,3,1: 7 verify calls for 19 tokens after the first
    assert lv["accept_length_source"] == "metrics_counters"
    assert lv["counter_accept_length"] == pytest.approx(20 / 7.0)
    assert lv["request_accept_length"] == pytest.approx(20 / 7.0)
    assert lv["server_accept_length_after"] == pytest.approx(20 / 7.0)  # flushed before level
    assert lv["tokens_per_chunk"] == pytest.approx(20 / 8.0)
    assert lv["ttft_ms"]["p50"] >= 20.0
    # chunk gaps ~4 ms spread over 3 tokens: per-token ITL well below the chunk gap
    assert lv["itl_ms"]["p50"] < lv["chunk_gap_ms"]["p50"] / 2
    # warmup: C requests per level, not counted
    assert sent == (1 + 6) + (3 + 6)
    assert res["server"]["metrics"] is True
    assert res["server"]["effective_max_running_requests"] == 24  # the limit the server really runs with
    # the fake server shares this process (and its GIL), so client-limit warnings may appear
    assert [w for w in res["warnings"] if "limited by the benchmark client" not in w] == []


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_openai_endpoints(endpoint):
    with FakeServerThread(tokens_per_chunk=2) as f:
        res = _run(f.url, endpoint=endpoint, concurrency=[2], num_prompts=4)
    lv = res["levels"][0]
    assert lv["completed"] == 4 and lv["total_output_tokens"] == 80
    assert res["server"]["model"] == "fake-model"
    assert lv["tokens_per_chunk"] == pytest.approx(20 / 11.0)


def test_read_until_close_streams():
    with FakeServerThread(chunked=False) as f:
        res = _run(f.url, concurrency=[2], num_prompts=4)
    assert res["levels"][0]["completed"] == 4


def test_repeats_give_confidence_intervals():
    with FakeServerThread() as f:
        res = _run(f.url, concurrency=[2], num_prompts=4, repeats=3)
    lv = res["levels"][0]
    assert len(lv["repeats"]) == 3 and lv["completed"] == 12
    assert lv["server_output_tokens"] == lv["total_output_tokens"] == 12 * 20
    ci = lv["ci"]["output_throughput"]
    assert ci["n"] == 3 and ci["low"] <= ci["mean"] <= ci["high"]


def test_dataset_prompts_and_duration_mode():
    prompts = sc.load_jsonl(['{"prompt": "a b c", "output_len": 5}', '"d e"'])
    with FakeServerThread(chunk_gap=0.002) as f:
        res = _run(f.url, prompts=prompts, concurrency=[2], num_prompts=None, duration=0.3)
    lv = res["levels"][0]
    assert lv["completed"] >= 4 and lv["failed"] == 0
    assert res["config"]["ignore_eos"] is False and res["config"]["dataset_prompts"] == 2
    assert "prompts" not in res["config"]


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_server_is_a_clear_error():
    t0 = time.time()
    with pytest.raises(sc.BenchError) as exc:
        _run("http://127.0.0.1:%d" % _free_port())
    assert "cannot reach the SGLang server" in str(exc.value)
    assert time.time() - t0 < 5


@pytest.mark.parametrize("key", [None, "wrong"])
def test_wrong_api_key(key):
    with FakeServerThread(api_key="secret") as f:
        with pytest.raises(sc.BenchError) as exc:
            _run(f.url, api_key=key)
    assert "HTTP 401" in str(exc.value) and "api_key" in str(exc.value)


def test_right_api_key():
    with FakeServerThread(api_key="secret") as f:
        res = _run(f.url, api_key="secret", concurrency=[1], num_prompts=2)
    assert res["levels"][0]["completed"] == 2
    assert "secret" not in json.dumps(res)


def test_malformed_chunks_are_counted_failures():
    with FakeServerThread(malformed_every=5) as f:
        res = _run(f.url, concurrency=[2], num_prompts=4, fail_on_empty_level=False)
    lv = res["levels"][0]
    assert lv["failed"] == 4 and lv["completed"] == 0
    assert lv["measured"] is False and lv["failure_rate"] == 1.0
    assert list(lv["errors"]) == ["malformed stream chunk (not JSON): b'{not json at all'"]
    assert lv["error_groups"] == [{"status": None, "count": 4,
                                   "message": "malformed stream chunk (not JSON): "
                                              "b'{not json at all'"}]
    assert any("C=2: no request completed (4 of 4 failed" in w for w in res["warnings"])


def test_empty_level_fails_by_default_and_names_it():
    with FakeServerThread(malformed_every=5) as f:
        with pytest.raises(sc.BenchError) as exc:
            _run(f.url, concurrency=[2, 4], num_prompts=4)
    msg = str(exc.value)
    assert "no request completed at concurrency 2: 4 of 4 failed" in msg
    assert "malformed stream chunk" in msg and "(x4)" in msg
    # it stops there: the later level is not run, the empty one is returned
    assert [lv["concurrency"] for lv in exc.value.partial["levels"]] == [2]


def test_truncated_stream_is_a_counted_failure():
    with FakeServerThread(bad_tail=True) as f:
        res = _run(f.url, concurrency=[1], num_prompts=2, warmup=0, fail_on_empty_level=False)
    lv = res["levels"][0]
    assert lv["failed"] == 2
    assert any("closed by server mid-stream" in e or "truncated" in e for e in lv["errors"])


def test_server_dying_mid_run_keeps_partial_results():
    # warmup 1 + 6 measured at C=1, then 3 warmup + some measured at C=3 before it dies
    with FakeServerThread(die_after=10) as f:
        t0 = time.time()
        with pytest.raises(sc.BenchError) as exc:
            _run(f.url)
    assert time.time() - t0 < 10
    assert "stopped answering during concurrency 3" in str(exc.value)
    part = exc.value.partial
    assert [lv["concurrency"] for lv in part["levels"]] == [1, 3]
    assert part["levels"][0]["completed"] == 6
    dead = part["levels"][1]
    assert dead["failed"] > 0 and dead["server_lost"]


def test_hanging_server_times_out():
    with FakeServerThread(hang=True) as f:
        t0 = time.time()
        res = _run(f.url, concurrency=[2], num_prompts=2, warmup=0, timeout=0.5,
                   fail_on_empty_level=False)
        elapsed = time.time() - t0
    lv = res["levels"][0]
    # the tokens received before the deadline stay out of the message, so timeouts group
    assert lv["failed"] == 2 and lv["errors"] == {"timed out after 0.5s": 2}
    assert elapsed < 5


def test_client_rejects_https_and_bad_urls():
    with pytest.raises(sc.ClientError):
        sc.Client("https://127.0.0.1:1")
    with pytest.raises(sc.ClientError):
        sc.Client("http://")


def test_loop_lag_monitor_sees_a_blocked_loop():
    async def main():
        mon = sc.LoopLagMonitor(interval=0.005)
        mon.start()
        await asyncio.sleep(0.03)
        time.sleep(0.05)  # block the loop on purpose
        await asyncio.sleep(0.03)
        return await mon.stop()
    lag = asyncio.new_event_loop().run_until_complete(main())
    assert lag > 0.02


def test_plan_for_check_mode():
    cfg = dict(sc.DEFAULTS, concurrency=[1, 8], ignore_eos=True)
    p = sc.plan(cfg)
    assert [lv["requests"] for lv in p["levels"]] == [10, 40]
    assert [lv["warmup_requests"] for lv in p["levels"]] == [1, 8]
    assert p["path"] == "/generate"


# ------------------------------------------------------------------ fast meta_info path
@pytest.mark.parametrize("compact", [True, False])
def test_fast_meta_matches_full_parse(compact):
    sep = (",", ":") if compact else (", ", ": ")
    obj = {"text": 'he said "meta_info": {"completion_tokens": 999}', "output_ids": [1, 2, 3],
           "meta_info": {"completion_tokens": 3, "finish_reason": None}}
    data = json.dumps(obj, separators=sep).encode()
    assert sc._fast_meta(data) == obj["meta_info"]


@pytest.mark.parametrize("data", [
    b'{"meta_info": {"completion_tokens": 3}, "text": "x"}',   # not the last key
    b'{"meta_info": {"completion_tokens": 3}',                  # truncated outer object
    b'{"meta_info": [1, 2]}',                                   # not an object
    b'{"text": "x"}',
    b'garbage "meta_info": {"completion_tokens": 3}}',
])
def test_fast_meta_declines_other_shapes(data):
    assert sc._fast_meta(data) is None


def test_generate_stream_falls_back_to_full_parse():
    rec = sc.new_record()
    h = sc.GenerateStream(rec)
    h.event(b'{"meta_info": {"completion_tokens": 2, "finish_reason": null}, "text": "ab"}', 0.5)
    assert h.error is None and rec["output_tokens"] == 2
    h.event(b'{"meta_info": {"completion_tokens": 3}', 0.6)
    assert "not JSON" in h.error


def test_openai_stream_without_per_chunk_usage_spreads_the_total():
    rec = sc.new_record()
    h = sc.OpenAIStream(rec, chat=False)
    for t in (0.1, 0.2, 0.3):
        h.event(json.dumps({"choices": [{"text": "abcd"}]}).encode(), t)
    h.event(json.dumps({"choices": [], "usage": {"prompt_tokens": 5,
                                                 "completion_tokens": 10}}).encode(), 0.3)
    h.event(b"[DONE]", 0.3)
    # first chunk keeps its token (TTFT); the other 9 go 5 + 4 over the later chunks
    assert rec["chunks"] == [(0.1, 1), (0.2, 5), (0.3, 4)]
    assert rec["output_tokens"] == 10 and rec["tokens_per_chunk_estimated"]
    assert rec["prompt_tokens"] == 5
