"""sglang_bench's transport: SSE and HTTP/1.1 parsing on canned byte streams (split at every
boundary), the stream handlers and their fast meta_info path, and the client's URL checks."""

import json

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_transport as tp


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
    assert _feed_all(tp.SSEParser(), SSE, cut) == SSE_EXPECTED


def test_sse_parser_every_two_way_split():
    for i in range(len(SSE) + 1):
        p = tp.SSEParser()
        assert p.feed(SSE[:i]) + p.feed(SSE[i:]) == SSE_EXPECTED, i


def test_sse_parser_cr_only_and_pending():
    p = tp.SSEParser()
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
    p = tp.ResponseParser()
    got = b""
    for i in range(0, len(raw), cut):
        got += p.feed(raw[i:i + cut])
    assert p.status == 200 and p.complete and p.keep_alive
    assert got == b"".join(body_parts)


def test_response_parser_content_length_and_close():
    p = tp.ResponseParser()
    body = p.feed(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 5\r\nConnection: close\r\n\r\nnope!")
    assert p.status == 401 and p.reason == "Unauthorized" and body == b"nope!"
    assert p.complete and not p.keep_alive


def test_response_parser_read_until_close():
    p = tp.ResponseParser()
    assert p.feed(b"HTTP/1.1 200 OK\r\n\r\nabc") == b"abc"
    assert not p.complete
    assert p.finish_on_close() and p.complete


def test_response_parser_errors():
    with pytest.raises(tp.ProtocolError):
        tp.ResponseParser().feed(b"SSH-2.0-OpenSSH\r\n\r\n")
    p = tp.ResponseParser()
    with pytest.raises(tp.ProtocolError):
        p.feed(HEAD + b"zz\r\nabc\r\n")
    p = tp.ResponseParser()
    with pytest.raises(tp.ProtocolError):
        p.feed(HEAD + b"3\r\nabcXX")
    p = tp.ResponseParser()
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
    rec = tp.new_record()
    h = tp.GenerateStream(rec)
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
    h = tp.GenerateStream(tp.new_record())
    h.event(data, 0.0)
    assert needle in h.error


def test_openai_stream_usage_and_fallback():
    rec = tp.new_record()
    h = tp.OpenAIStream(rec, chat=True)
    ev = {"choices": [{"delta": {"content": "ab"}, "finish_reason": None}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    h.event(json.dumps(ev).encode(), 0.1)
    ev["usage"]["completion_tokens"] = 4
    h.event(json.dumps(ev).encode(), 0.2)
    h.event(json.dumps({"choices": [], "usage": {"completion_tokens": 4}}).encode(), 0.3)
    h.event(b"[DONE]", 0.3)
    assert rec["chunks"] == [(0.1, 1), (0.2, 3)] and rec["output_tokens"] == 4
    # a server without usage per chunk: one token per content chunk
    rec = tp.new_record()
    h = tp.OpenAIStream(rec, chat=False)
    for t in (0.1, 0.2, 0.3):
        h.event(json.dumps({"choices": [{"text": "a"}]}).encode(), t)
    assert rec["output_tokens"] == 3 and len(rec["chunks"]) == 3
    h.event(b"42", 0.4)
    assert "not an object" in h.error


# ------------------------------------------------------------------ fast meta_info path
@pytest.mark.parametrize("compact", [True, False])
def test_fast_meta_matches_full_parse(compact):
    sep = (",", ":") if compact else (", ", ": ")
    obj = {"text": 'he said "meta_info": {"completion_tokens": 999}', "output_ids": [1, 2, 3],
           "meta_info": {"completion_tokens": 3, "finish_reason": None}}
    data = json.dumps(obj, separators=sep).encode()
    assert tp._fast_meta(data) == obj["meta_info"]


@pytest.mark.parametrize("data", [
    b'{"meta_info": {"completion_tokens": 3}, "text": "x"}',   # not the last key
    b'{"meta_info": {"completion_tokens": 3}',                  # truncated outer object
    b'{"meta_info": [1, 2]}',                                   # not an object
    b'{"text": "x"}',
    b'garbage "meta_info": {"completion_tokens": 3}}',
])
def test_fast_meta_declines_other_shapes(data):
    assert tp._fast_meta(data) is None


def test_generate_stream_falls_back_to_full_parse():
    rec = tp.new_record()
    h = tp.GenerateStream(rec)
    h.event(b'{"meta_info": {"completion_tokens": 2, "finish_reason": null}, "text": "ab"}', 0.5)
    assert h.error is None and rec["output_tokens"] == 2
    h.event(b'{"meta_info": {"completion_tokens": 3}', 0.6)
    assert "not JSON" in h.error


def test_openai_stream_without_per_chunk_usage_spreads_the_total():
    rec = tp.new_record()
    h = tp.OpenAIStream(rec, chat=False)
    for t in (0.1, 0.2, 0.3):
        h.event(json.dumps({"choices": [{"text": "abcd"}]}).encode(), t)
    h.event(json.dumps({"choices": [], "usage": {"prompt_tokens": 5,
                                                 "completion_tokens": 10}}).encode(), 0.3)
    h.event(b"[DONE]", 0.3)
    # first chunk keeps its token (TTFT); the other 9 go 5 + 4 over the later chunks
    assert rec["chunks"] == [(0.1, 1), (0.2, 5), (0.3, 4)]
    assert rec["output_tokens"] == 10 and rec["tokens_per_chunk_estimated"]
    assert rec["prompt_tokens"] == 5


# ------------------------------------------------------------------ client
def test_client_rejects_https_and_bad_urls():
    with pytest.raises(tp.ClientError):
        tp.Client("https://127.0.0.1:1")
    with pytest.raises(tp.ClientError):
        tp.Client("http://")
