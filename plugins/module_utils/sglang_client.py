# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Streaming load generator for SGLang servers: stdlib only (Python >= 3.9), runs on the node.

Why hand-written: a node's Python has no aiohttp/httpx, and a benchmark client must not be the
bottleneck. The client speaks HTTP/1.1 (keep-alive, Content-Length and chunked bodies) and SSE
by hand on asyncio *transports/protocols* (the layer under asyncio streams): bytes are parsed in
``data_received`` callbacks, with no per-chunk coroutine switch or StreamReader copy. Each
received batch of bytes is stamped once with ``time.perf_counter()``; all SSE events in it share
that stamp (they arrived together). Connections are pooled and reused between requests.

Every request has a deadline (``timeout``); a connection that misbehaves (bad status line, bad
chunk framing, malformed SSE JSON, close mid-stream) is closed, never reused, and the request is
recorded as failed with a one-line reason. Nothing here raises into the caller for a per-request
problem; ``ClientError`` is raised only by the single-shot helpers (``request``).
"""

from __future__ import absolute_import, division, print_function

import asyncio
import functools
import gc
import json
import random
import time

from ansible_collections.blackwell.sglang.plugins.module_utils import bench_metrics as bm

try:  # Python >= 3.9 everywhere we run; keep the import explicit for readers
    from urllib.parse import urlsplit
except ImportError:  # pragma: no cover
    from urlparse import urlsplit  # type: ignore

__metaclass__ = type

_now = time.perf_counter

ENDPOINT_PATHS = {
    "generate": "/generate",
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}


class ClientError(Exception):
    """A request that could not be carried out (connect, timeout, protocol)."""


class ProtocolError(Exception):
    pass


# ------------------------------------------------------------------ SSE
class SSEParser:
    """Incremental Server-Sent Events parser.

    feed(bytes) returns the complete events' data payloads (bytes, multi-line data joined by
    b"\\n"); lines may be split anywhere across feeds; LF, CRLF and CR line ends are accepted;
    comments (":...") and fields other than data are ignored.
    """

    __slots__ = ("_buf", "_data", "_skip_lf")

    def __init__(self):
        self._buf = b""
        self._data = None
        self._skip_lf = False

    def feed(self, chunk):
        if self._skip_lf and chunk:
            # the previous feed ended with CR, already taken as a line end: drop the LF of CRLF
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            self._skip_lf = buf.endswith(b"\r")
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        events = []
        data = self._data
        for line in lines:
            if not line:
                if data is not None:
                    events.append(data)
                    data = None
                continue
            if line[:5] == b"data:":
                value = line[6:] if line[5:6] == b" " else line[5:]
                data = value if data is None else data + b"\n" + value
            # comments and other fields (event:, id:, retry:) carry nothing we use
        self._data = data
        return events

    def pending(self):
        """True when bytes or an undispatched event are buffered (stream cut mid-event)."""
        return bool(self._buf) or self._data is not None


# ------------------------------------------------------------------ HTTP/1.1 response parsing
class ResponseParser:
    """Incremental HTTP/1.1 response parser. feed() returns body bytes as they become available;
    .headers_done, .status, .headers, .complete and .keep_alive describe the response."""

    __slots__ = ("_buf", "headers_done", "status", "reason", "headers", "complete", "keep_alive",
                 "_mode", "_remaining", "_chunk_state", "head_request")

    def __init__(self, head_request=False):
        self._buf = b""
        self.headers_done = False
        self.status = None
        self.reason = ""
        self.headers = {}
        self.complete = False
        self.keep_alive = True
        self._mode = None  # "length" | "chunked" | "close"
        self._remaining = 0
        self._chunk_state = "size"  # size | data | data_crlf | trailer
        self.head_request = head_request

    def feed(self, data):
        if not self.headers_done:
            self._buf += data
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > 65536:
                    raise ProtocolError("response headers larger than 64 KiB")
                return b""
            head, data = self._buf[:end], self._buf[end + 4:]
            self._buf = b""
            self._parse_head(head)
            if self.complete:
                return b""
        if not data:
            return b""
        if self._mode == "length":
            take = data[: self._remaining]
            self._remaining -= len(take)
            if self._remaining == 0:
                self.complete = True
            return take
        if self._mode == "close":
            return data
        return self._feed_chunked(data)

    def _feed_chunked(self, data):
        out = []
        buf = self._buf + data if self._buf else data
        pos = 0
        n = len(buf)
        while pos < n and not self.complete:
            st = self._chunk_state
            if st == "data":
                take = min(self._remaining, n - pos)
                out.append(buf[pos:pos + take])
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._chunk_state = "data_crlf"
            elif st == "data_crlf":
                if n - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise ProtocolError("bad chunk terminator in chunked body")
                pos += 2
                self._chunk_state = "size"
            elif st == "size":
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > 1024:
                        raise ProtocolError("chunk size line too long")
                    break
                line = buf[pos:eol].split(b";", 1)[0].strip()
                pos = eol + 2
                try:
                    size = int(line, 16)
                except ValueError:
                    raise ProtocolError("bad chunk size %r in chunked body" % line[:40])
                if size < 0:
                    raise ProtocolError("negative chunk size")
                if size == 0:
                    self._chunk_state = "trailer"
                else:
                    self._remaining = size
                    self._chunk_state = "data"
            else:  # trailer: lines until an empty one
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                if eol == pos:
                    self.complete = True
                pos = eol + 2
        self._buf = buf[pos:] if pos < n and not self.complete else b""
        return b"".join(out) if len(out) != 1 else out[0]

    def _parse_head(self, head):
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ProtocolError("not an HTTP/1.x response: %r" % lines[0][:60])
        try:
            self.status = int(parts[1])
        except ValueError:
            raise ProtocolError("bad status line %r" % lines[0][:60])
        self.reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
        for line in lines[1:]:
            k, sep, v = line.partition(b":")
            if sep:
                self.headers[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
        self.headers_done = True
        conn = self.headers.get("connection", "").lower()
        if conn == "close" or parts[0] == b"HTTP/1.0" and conn != "keep-alive":
            self.keep_alive = False
        te = self.headers.get("transfer-encoding", "").lower()
        if self.head_request or self.status in (204, 304) or 100 <= self.status < 200:
            self.complete = True
        elif "chunked" in te:
            self._mode = "chunked"
        elif "content-length" in self.headers:
            try:
                self._remaining = int(self.headers["content-length"])
            except ValueError:
                raise ProtocolError("bad Content-Length")
            self._mode = "length"
            if self._remaining == 0:
                self.complete = True
        else:
            self._mode = "close"
            self.keep_alive = False

    def finish_on_close(self):
        """The peer closed: a read-until-close body ends here; anything else was cut short."""
        if self.headers_done and self._mode == "close":
            self.complete = True
        return self.complete


# ------------------------------------------------------------------ stream handlers
_DECODER = json.JSONDecoder()
_META_KEY = b'"meta_info":'


def _fast_meta(data):
    """meta_info of a /generate chunk without decoding the cumulative text and output_ids
    before it (those grow with every token, so a full json.loads per chunk is O(n^2) per
    request and dominates the client's CPU). SGLang writes meta_info as the last key; inside
    JSON strings quotes are escaped, so the unescaped key cannot come from generated text.
    Returns None when the chunk does not have that shape (the caller then parses it fully)."""
    i = data.rfind(_META_KEY)
    if i <= 0 or data[:1] != b"{":
        return None
    try:
        tail = data[i + len(_META_KEY):].decode("utf-8").lstrip()
        meta, end = _DECODER.raw_decode(tail)
    except ValueError:
        return None
    if tail[end:].strip() != "}" or not isinstance(meta, dict):
        return None
    return meta


class GenerateStream:
    """Consumes SGLang /generate SSE events: cumulative meta_info.completion_tokens per event."""

    __slots__ = ("rec", "_last", "done", "error")

    def __init__(self, rec):
        self.rec = rec
        self._last = 0
        self.done = False
        self.error = None

    def event(self, data, t):
        if data == b"[DONE]":
            self.done = True
            return
        meta = _fast_meta(data)
        try:
            if meta is None:
                obj = json.loads(data)
                if "error" in obj:
                    err = obj["error"]
                    msg = err.get("message") if isinstance(err, dict) else err
                    self.error = "server error in stream: %s" % (str(msg)[:200],)
                    return
                meta = obj["meta_info"]
            n = int(meta["completion_tokens"])
        except ValueError:
            self.error = "malformed stream chunk (not JSON): %r" % (data[:80],)
            return
        except (KeyError, TypeError, AttributeError):
            self.error = "malformed stream chunk (no meta_info.completion_tokens): %r" % (data[:80],)
            return
        new = n - self._last
        if new > 0:
            self.rec["chunks"].append((t, new))
            self._last = n
        rec = self.rec
        rec["output_tokens"] = n
        pt = meta.get("prompt_tokens")
        if pt is not None:
            rec["prompt_tokens"] = pt
        if meta.get("finish_reason") is not None:
            rec["finish_reason"] = meta["finish_reason"]
            sal = meta.get("spec_accept_length")
            if sal is not None:
                rec["spec_accept_length"] = sal
            svc = meta.get("spec_verify_ct")
            if svc is not None:
                rec["spec_verify_ct"] = svc
            hist = meta.get("spec_correct_drafts_histogram")
            if isinstance(hist, list):
                rec["spec_hist"] = hist


class OpenAIStream:
    """Consumes OpenAI-style SSE (completions or chat). Token counts come from usage
    (continuous_usage_stats, which SGLang supports); a server without it gets one token per
    content-bearing chunk, corrected by the final usage block."""

    __slots__ = ("rec", "_last", "done", "error", "chat", "_counted")

    def __init__(self, rec, chat):
        self.rec = rec
        self._last = 0
        self._counted = 0  # chunks counted as one token each (no per-chunk usage)
        self.done = False
        self.error = None
        self.chat = chat

    def _spread(self):
        """Without per-chunk usage, the final usage block gives the true total n. Keep one token
        on the first chunk (it arrives at TTFT) and spread the other n - 1 evenly over the later
        chunks, so per-token ITL and TPOT use the server's count, not the chunk count."""
        chunks = self.rec["chunks"]
        n = self.rec.get("output_tokens") or 0
        if not self._counted or len(chunks) < 2 or n <= len(chunks):
            return
        rest, m = n - 1, len(chunks) - 1
        base, extra = divmod(rest, m)
        self.rec["chunks"] = [chunks[0][:1] + (1,)] + [
            (t, base + (1 if i < extra else 0)) for i, (t, dummy) in enumerate(chunks[1:])]
        self.rec["tokens_per_chunk_estimated"] = True

    def event(self, data, t):
        if data == b"[DONE]":
            self.done = True
            self._spread()
            return
        try:
            obj = json.loads(data)
            if not isinstance(obj, dict):
                raise AttributeError
            if "error" in obj:
                err = obj["error"]
                msg = err.get("message") if isinstance(err, dict) else err
                self.error = "server error in stream: %s" % (str(msg)[:200],)
                return
            choices = obj.get("choices") or []
            usage = obj.get("usage")
        except ValueError:
            self.error = "malformed stream chunk (not JSON): %r" % (data[:80],)
            return
        except AttributeError:
            self.error = "malformed stream chunk (not an object): %r" % (data[:80],)
            return
        has_content = False
        try:
            for ch in choices:
                if self.chat:
                    d = ch.get("delta") or {}
                    if d.get("content") or d.get("reasoning_content"):
                        has_content = True
                elif ch.get("text"):
                    has_content = True
                if ch.get("finish_reason") is not None:
                    self.rec["finish_reason"] = ch["finish_reason"]
        except AttributeError:
            self.error = "malformed stream chunk (bad choices): %r" % (data[:80],)
            return
        rec = self.rec
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            n = int(usage["completion_tokens"])
            if usage.get("prompt_tokens") is not None:
                rec["prompt_tokens"] = usage["prompt_tokens"]
            if self._counted:
                # earlier chunks had no usage: this is the total, spread at [DONE]
                if has_content:
                    self._counted += 1
                    rec["chunks"].append((t, 1))
                rec["output_tokens"] = max(n, self._counted)
                return
            new = n - self._last
            if new > 0 and (has_content or choices):
                rec["chunks"].append((t, new))
                self._last = n
            elif new > 0 and not choices:
                # the final usage-only block: fix the total without inventing a chunk
                self._last = n
            rec["output_tokens"] = n
        elif has_content:
            self._counted += 1
            rec["chunks"].append((t, 1))
            rec["output_tokens"] = max(rec.get("output_tokens") or 0, self._counted)


# ------------------------------------------------------------------ connection
class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self):
        self.transport = None
        self.parser = None
        self.sse = None
        self.handler = None
        self.body = None
        self.waiter = None
        self.closed = False
        self.error = None

    def connection_made(self, transport):
        self.transport = transport

    def start(self, raw, handler, head=False):
        self.parser = ResponseParser(head_request=head)
        self.sse = None
        self.handler = handler
        self.body = []
        self.error = None
        self.waiter = asyncio.get_event_loop().create_future()
        self.transport.write(raw)
        return self.waiter

    def _finish(self, error=None):
        if error is not None and self.error is None:
            self.error = error
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def data_received(self, data):
        if self.waiter is None or self.waiter.done():
            # bytes outside a request: the connection is out of step; drop it
            self.closed = True
            self.transport.close()
            return
        t = _now()
        p = self.parser
        try:
            body = p.feed(data)
        except ProtocolError as exc:
            self._abort(str(exc))
            return
        if body:
            if self.handler is not None and p.status == 200:
                if self.sse is None:
                    self.sse = SSEParser()
                h = self.handler
                for ev in self.sse.feed(body):
                    h.event(ev, t)
                    if h.error is not None:
                        self._abort(h.error)
                        return
            elif self.handler is None or sum(len(b) for b in self.body) < 65536:
                # an error body of a streamed request is read for its message only
                self.body.append(body)
        if p.complete:
            if not p.keep_alive:
                self.closed = True
                self.transport.close()
            self._finish()

    def _abort(self, msg):
        self.closed = True
        self.transport.close()
        self._finish(msg)

    def connection_lost(self, exc):
        self.closed = True
        p = self.parser
        if self.waiter is not None and not self.waiter.done():
            if p is not None and p.finish_on_close():
                self._finish()
            else:
                what = "connection closed by server"
                if p is not None and p.headers_done and self.handler is not None:
                    what += " mid-stream"
                elif p is None or not p.headers_done:
                    what += " before a response"
                if exc is not None:
                    what += " (%s)" % (exc,)
                self._finish(what)


class Client:
    """Pooled asyncio HTTP/1.1 client bound to one base URL."""

    def __init__(self, url, api_key=None, timeout=600.0, connect_timeout=10.0):
        parts = urlsplit(url)
        if parts.scheme not in ("http", ""):
            raise ClientError("only http:// URLs are supported (got %r); the benchmark talks to "
                              "the server on the node's own loopback" % (url,))
        if not parts.hostname:
            raise ClientError("url %r has no host" % (url,))
        self.host = parts.hostname
        self.port = parts.port or 80
        self.base_path = parts.path.rstrip("/")
        self.api_key = api_key
        self.timeout = float(timeout)
        self.connect_timeout = float(min(connect_timeout, timeout))
        self._idle = []
        self._all = set()
        hosthdr = self.host if self.port == 80 else "%s:%d" % (self.host, self.port)
        if ":" in self.host and not self.host.startswith("["):
            hosthdr = "[%s]:%d" % (self.host, self.port)
        self._host_header = hosthdr

    # -- connections
    async def _get_conn(self, deadline):
        while self._idle:
            c = self._idle.pop()
            if not c.closed:
                return c
            self._all.discard(c)
        loop = asyncio.get_event_loop()
        budget = min(self.connect_timeout, max(0.001, deadline - _now()))
        try:
            dummy, conn = await asyncio.wait_for(
                loop.create_connection(_Conn, self.host, self.port), budget)
        except asyncio.TimeoutError:
            raise ClientError("connect to %s:%d timed out after %.1fs"
                              % (self.host, self.port, budget))
        except OSError as exc:
            raise ClientError("cannot connect to %s:%d: %s"
                              % (self.host, self.port, exc.strerror or exc))
        self._all.add(conn)
        return conn

    def _release(self, conn):
        if conn.closed or conn.error is not None:
            self._all.discard(conn)
            if conn.transport is not None:
                conn.transport.close()
        else:
            self._idle.append(conn)

    def close(self):
        for c in list(self._all):
            if c.transport is not None:
                c.transport.close()
        self._all.clear()
        self._idle = []

    def _raw(self, method, path, body=None, accept=None):
        lines = ["%s %s%s HTTP/1.1" % (method, self.base_path, path),
                 "Host: %s" % self._host_header,
                 "User-Agent: blackwell.sglang-bench",
                 "Connection: keep-alive"]
        if accept:
            lines.append("Accept: %s" % accept)
        if self.api_key:
            lines.append("Authorization: Bearer %s" % self.api_key)
        if body is not None:
            lines.append("Content-Type: application/json")
            lines.append("Content-Length: %d" % len(body))
        elif method in ("POST", "PUT"):
            lines.append("Content-Length: 0")
        raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return raw + body if body is not None else raw

    # -- one-shot request (server_info, metrics, flush_cache)
    async def request(self, method, path, payload=None, timeout=None):
        """Returns (status, headers, body_bytes); raises ClientError when no response came."""
        timeout = self.timeout if timeout is None else timeout
        deadline = _now() + timeout
        body = json.dumps(payload).encode() if payload is not None else None
        for attempt in (0, 1):
            reused = bool(self._idle)
            conn = await self._get_conn(deadline)
            fut = conn.start(self._raw(method, path, body), None, head=(method == "HEAD"))
            try:
                await asyncio.wait_for(asyncio.shield(fut), max(0.001, deadline - _now()))
            except asyncio.TimeoutError:
                conn.closed = True
                self._release(conn)
                raise ClientError("%s %s timed out after %.1fs" % (method, path, timeout))
            if conn.error is not None:
                self._release(conn)
                # a pooled connection the server had already closed: retry once on a fresh one
                if attempt == 0 and reused and conn.parser.status is None:
                    continue
                raise ClientError("%s %s: %s" % (method, path, conn.error))
            p = conn.parser
            data = b"".join(conn.body)
            self._release(conn)
            return p.status, p.headers, data
        raise ClientError("%s %s failed" % (method, path))  # pragma: no cover

    async def get_json(self, path, timeout=None):
        status, dummy, data = await self.request("GET", path, timeout=timeout)
        obj = None
        if status == 200:
            try:
                obj = json.loads(data)
            except ValueError:
                obj = None
        return status, obj, data

    # -- streamed generation request
    async def stream(self, path, payload_bytes, handler, rec, timeout=None):
        """Send one streaming request; fill rec (ok/error/start/ttft/e2e/chunks/...)."""
        timeout = self.timeout if timeout is None else timeout
        raw = self._raw("POST", path, payload_bytes, accept="text/event-stream")
        rec["start"] = t0 = _now()
        deadline = t0 + timeout
        conn = None
        try:
            for attempt in (0, 1):
                reused = bool(self._idle)
                conn = await self._get_conn(deadline)
                if attempt == 1:
                    rec["start"] = t0 = _now()
                fut = conn.start(raw, handler)
                try:
                    await asyncio.wait_for(asyncio.shield(fut), max(0.001, deadline - _now()))
                except asyncio.TimeoutError:
                    conn.closed = True
                    # the token count stays out of the message, so timeouts group together
                    rec["error"] = "timed out after %.1fs" % (timeout,)
                    rec["tokens_at_error"] = rec.get("output_tokens") or 0
                    return rec
                if (conn.error is not None and attempt == 0 and reused
                        and conn.parser.status is None):
                    # keep-alive race: the server closed the idle socket as we wrote to it
                    self._release(conn)
                    conn = None
                    continue
                break
            _stream_outcome(conn, handler, rec)
            return rec
        except ClientError as exc:
            rec["error"] = str(exc)
            return rec
        finally:
            if conn is not None:
                self._release(conn)
            if not rec.get("ok"):
                rec["chunks"] = []


def _stream_outcome(conn, handler, rec):
    """Fill rec from a streamed request whose response ended: the error, or (ok) the chunk
    times relative to its start, TTFT and e2e."""
    p = conn.parser
    if conn.error is not None and p.status in (None, 200):
        rec["error"] = conn.error
    elif p.status != 200:
        # the body often echoes the prompt back: keep only its normalised message
        msg = bm.error_body_message(b"".join(conn.body)) or p.reason or "(empty body)"
        rec["error"] = "HTTP %s %s: %s" % (p.status, p.reason, msg)
        rec["error_message"] = msg
        rec["http_status"] = p.status
    elif handler.error is not None:
        rec["error"] = handler.error
    elif not handler.done:
        if conn.sse is not None and conn.sse.pending():
            rec["error"] = "stream ended mid-event (truncated SSE data)"
        else:
            rec["error"] = "stream ended without [DONE]"
    else:
        chunks = rec["chunks"]
        if not chunks:
            rec["error"] = "stream finished without any output token"
        else:
            base = rec["start"]
            rec["chunks"] = [(t - base, k) for t, k in chunks]
            rec["ttft"] = rec["chunks"][0][0]
            rec["e2e"] = rec["chunks"][-1][0]
            rec["ok"] = True


# ------------------------------------------------------------------ workload
_WORDS = ("alpha", "beta", "gamma", "delta", "kernel", "tensor", "river", "stone", "cloud",
          "green", "vector", "matrix", "signal", "buffer", "packet", "token", "shard", "graph",
          "orbit", "lambda", "socket", "thread", "queue", "cache")


def random_prompts(n, input_len, seed, as_text):
    """n distinct synthetic prompts: token-id lists of exactly input_len ids, or (as_text) text
    of input_len words (the caller turns a token target into a word count, see calibrate_words).
    Distinct prompts keep the prefix cache from helping."""
    rng = random.Random(seed)
    out = []
    for dummy in range(n):
        if as_text:
            out.append({"text": " ".join(rng.choice(_WORDS) for dummy in range(input_len))})
        else:
            out.append({"input_ids": [rng.randint(1000, 30000) for dummy in range(input_len)]})
    return out


def load_jsonl(lines, source="dataset"):
    """Parse JSONL prompt lines -> list of prompt dicts with one of text / input_ids / messages
    and optional output_len. Raises ValueError with the line number for a bad line."""
    prompts = []
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s:
            continue
        try:
            obj = json.loads(s)
        except ValueError as exc:
            raise ValueError("%s line %d is not valid JSON (%s): %r" % (source, i, exc, s[:60]))
        item = {}
        if isinstance(obj, str):
            item["text"] = obj
        elif isinstance(obj, dict):
            if isinstance(obj.get("messages"), list) and obj["messages"]:
                item["messages"] = obj["messages"]
            elif isinstance(obj.get("prompt"), str):
                item["text"] = obj["prompt"]
            elif isinstance(obj.get("text"), str):
                item["text"] = obj["text"]
            elif isinstance(obj.get("input_ids"), list):
                item["input_ids"] = obj["input_ids"]
            else:
                raise ValueError("%s line %d has none of prompt, text, messages or input_ids"
                                 % (source, i))
            for key in ("output_len", "max_tokens", "max_new_tokens"):
                if obj.get(key) is not None:
                    try:
                        item["output_len"] = int(obj[key])
                    except (TypeError, ValueError):
                        raise ValueError("%s line %d: %s must be an integer" % (source, i, key))
                    break
        else:
            raise ValueError("%s line %d must be a JSON object or string" % (source, i))
        prompts.append(item)
    if not prompts:
        raise ValueError("%s holds no prompts (empty file)" % (source,))
    return prompts


def build_payload(endpoint, prompt, output_len, temperature, ignore_eos, model=None):
    """Request body (bytes) for one prompt on the chosen endpoint."""
    n = int(prompt.get("output_len") or output_len)
    if endpoint == "generate":
        if "messages" in prompt:
            raise ValueError("a 'messages' prompt needs endpoint=chat (the generate endpoint has "
                             "no chat template)")
        body = {"sampling_params": {"max_new_tokens": n, "temperature": temperature,
                                    "ignore_eos": ignore_eos},
                "stream": True}
        if "input_ids" in prompt:
            body["input_ids"] = prompt["input_ids"]
        else:
            body["text"] = prompt["text"]
    elif endpoint == "completions":
        if "messages" in prompt:
            raise ValueError("a 'messages' prompt needs endpoint=chat")
        body = {"model": model or "default",
                "prompt": prompt["input_ids"] if "input_ids" in prompt else prompt["text"],
                "max_tokens": n, "temperature": temperature, "ignore_eos": ignore_eos,
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    elif endpoint == "chat":
        if "messages" in prompt:
            messages = prompt["messages"]
        elif "text" in prompt:
            messages = [{"role": "user", "content": prompt["text"]}]
        else:
            raise ValueError("endpoint=chat needs text prompts, not input_ids")
        body = {"model": model or "default", "messages": messages, "max_tokens": n,
                "temperature": temperature, "ignore_eos": ignore_eos, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    else:
        raise ValueError("unknown endpoint %r" % (endpoint,))
    return json.dumps(body, separators=(",", ":")).encode()


def new_record():
    return {"ok": False, "error": None, "start": None, "ttft": None, "e2e": None,
            "output_tokens": 0, "prompt_tokens": None, "chunks": [],
            "spec_accept_length": None, "spec_verify_ct": None, "spec_hist": None,
            "asked_output_len": None}


def make_handler(endpoint, rec):
    if endpoint == "generate":
        return GenerateStream(rec)
    return OpenAIStream(rec, chat=(endpoint == "chat"))


# ------------------------------------------------------------------ client-side health
class LoopLagMonitor:
    """Measures event-loop scheduling delay: a task asks to wake every interval seconds and
    records how late it woke. A busy client shows a high p99 lag (its timestamps are late)."""

    def __init__(self, interval=0.01):
        self.interval = interval
        self.lags = []
        self._task = None

    async def _run(self):
        while True:
            t = _now()
            await asyncio.sleep(self.interval)
            self.lags.append(max(0.0, _now() - t - self.interval))

    def start(self):
        self.lags = []
        self._task = asyncio.ensure_future(self._run())

    async def stop(self):
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        return bm.percentile(self.lags, 99)


# ------------------------------------------------------------------ one level
async def run_requests(client, path, payload_for, count, concurrency, endpoint, deadline=None,
                       timeout=None, abort_after_conn_failures=None):
    """Run requests payload_for(0), payload_for(1), ... with exactly `concurrency` in flight
    (closed loop: a worker sends the next as soon as its previous one finished): `count` of
    them, or, with deadline (perf_counter seconds), as many as start before it. payload_for(i)
    gives the body bytes, or (body bytes, asked output tokens). Returns
    (records, wall_s, cpu_fraction, lag_p99_ms)."""
    records = []
    state = {"next": 0, "conn_fail_streak": 0, "stop": False}
    total = count

    async def worker():
        while not state["stop"]:
            i = state["next"]
            if deadline is None and i >= total:
                return
            if deadline is not None and _now() >= deadline:
                return
            state["next"] = i + 1
            rec = new_record()
            records.append(rec)
            body = payload_for(i)
            if isinstance(body, tuple):
                body, rec["asked_output_len"] = body
            await client.stream(path, body, make_handler(endpoint, rec), rec, timeout=timeout)
            if rec["ok"]:
                state["conn_fail_streak"] = 0
            elif rec["error"] and rec["error"].startswith("cannot connect"):
                state["conn_fail_streak"] += 1
                # a dead server fails fast; do not spin through the rest of the prompts
                if (abort_after_conn_failures is not None
                        and state["conn_fail_streak"] >= abort_after_conn_failures):
                    state["stop"] = True

    mon = LoopLagMonitor()
    # a full collection over tens of thousands of live records stalls the loop for tens of ms
    # and delays timestamps; records hold no reference cycles, so pause the cyclic GC meanwhile
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        mon.start()
        cpu0, t0 = time.process_time(), _now()
        await asyncio.gather(*[worker() for dummy in range(concurrency)])
        wall = _now() - t0
        cpu = time.process_time() - cpu0
        lag = await mon.stop()
    finally:
        if gc_was_enabled:
            gc.enable()
    ok = [r for r in records if r["ok"]]
    if ok:
        # level wall time as bench_serving: first send -> last completion
        first = min(r["start"] for r in records if r["start"] is not None)
        last = max(r["start"] + r["e2e"] for r in ok)
        wall_level = last - first
    else:
        wall_level = wall
    return records, wall_level, (cpu / wall if wall > 0 else None), \
        (lag * 1000.0 if lag is not None else None)


# ------------------------------------------------------------------ whole benchmark
class BenchError(Exception):
    """A benchmark that cannot go on; .partial holds the levels measured before it stopped."""

    def __init__(self, msg, partial=None):
        Exception.__init__(self, msg)
        self.partial = partial


DEFAULTS = {
    "url": "http://127.0.0.1:30000", "api_key": None, "endpoint": "generate", "model": None,
    "concurrency": [1, 2, 4, 8, 16, 32], "num_prompts": None, "duration": None, "warmup": None,
    "input_len": 1024, "output_len": 1024, "temperature": 0.0, "ignore_eos": None,
    "dataset": "random", "prompts": None, "seed": 42, "repeats": 1, "confidence": 0.95,
    "timeout": 600.0, "flush_cache": False, "time_scale": 1.0, "steady_state_ratio": 0.9,
    "warmup_output_len": 16, "prompt_format": "auto", "fail_on_empty_level": True,
    "max_failure_rate": 0.0,
}

# figures that get a Student-t interval over repeats: (path in the level dict, output key)
CI_FIGURES = (
    (("output_throughput",), "output_throughput"),
    (("request_throughput",), "request_throughput"),
    (("decode_tps_per_request", "mean"), "decode_tps_per_request_mean"),
    (("decode_tps_per_request", "p50"), "decode_tps_per_request_p50"),
    (("ttft_ms", "p50"), "ttft_ms_p50"),
    (("ttft_ms", "p99"), "ttft_ms_p99"),
    (("tpot_ms", "mean"), "tpot_ms_mean"),
    (("itl_ms", "p50"), "itl_ms_p50"),
    (("e2e_latency_ms", "p50"), "e2e_latency_ms_p50"),
    (("accept_length",), "accept_length"),
)


def prompts_needed(cfg, concurrency):
    if cfg.get("num_prompts"):
        return int(cfg["num_prompts"])
    # bench_serving's guidance: several times the concurrency, so ramp/drain are a small part
    return max(10, 5 * concurrency)


def plan(cfg):
    """What a run would do (check mode): levels, request counts and the request shape."""
    levels = []
    for c in cfg["concurrency"]:
        warm = c if cfg.get("warmup") is None else cfg["warmup"]
        item = {"concurrency": c, "warmup_requests": warm, "repeats": cfg["repeats"]}
        if cfg.get("duration"):
            item["duration_s"] = cfg["duration"]
        else:
            item["requests"] = prompts_needed(cfg, c)
        levels.append(item)
    return {"url": cfg["url"], "endpoint": cfg["endpoint"],
            "path": ENDPOINT_PATHS[cfg["endpoint"]], "levels": levels,
            "prompt_format": cfg.get("prompt_format", "auto"),
            "dataset": cfg["dataset"], "input_len": cfg["input_len"],
            "output_len": cfg["output_len"], "temperature": cfg["temperature"],
            "ignore_eos": cfg["ignore_eos"], "flush_cache": cfg["flush_cache"]}


async def _scrape(client, path, timeout):
    try:
        if path == "/metrics":
            status, dummy, data = await client.request("GET", path, timeout=timeout)
            return bm.parse_prometheus(data.decode("utf-8", "replace")) if status == 200 else None
        status, obj, dummy = await client.get_json(path, timeout=timeout)
        return obj if status == 200 else None
    except ClientError:
        return None


def _get(d, path):
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


async def _preflight(client, cfg, warnings):
    probe_t = min(cfg["timeout"], 30.0)
    try:
        status, info, raw = await client.get_json("/server_info", timeout=probe_t)
    except ClientError as exc:
        raise BenchError("cannot reach the SGLang server at %s (%s). Is it running and listening "
                         "there? Check `url` and the service's --host/--port." % (cfg["url"], exc))
    if status in (401, 403):
        raise BenchError("the server at %s rejected the request with HTTP %d: `api_key` must equal "
                         "the server's --api-key%s." % (cfg["url"], status,
                                                        "" if cfg.get("api_key") else
                                                        " (none was given)"))
    server = {"url": cfg["url"], "server_info": status == 200}
    if status != 200:
        warnings.append("GET /server_info answered HTTP %s; the server-side accept length from "
                        "/server_info is not available" % status)
        info = None
    elif not isinstance(info, dict):
        info = None
    if isinstance(info, dict):
        server["version"] = info.get("version")
        for key in ("model_path", "served_model_name", "tp_size", "speculative_algorithm",
                    "speculative_num_steps", "speculative_eagle_topk",
                    "speculative_num_draft_tokens", "max_running_requests", "enable_metrics"):
            if key in info:
                server[key] = info[key]
        # The running-request limit the server really runs with: 0.5.23 lowers it below the
        # requested/default one when the KV or hybrid state pool is short (scheduler's
        # get_internal_state, the key its own bench_one_batch_server reads).
        states = info.get("internal_states")
        if isinstance(states, list) and states and isinstance(states[0], dict):
            eff = states[0].get("effective_max_running_requests_per_dp")
            if isinstance(eff, int) and not isinstance(eff, bool) and eff > 0:
                server["effective_max_running_requests"] = eff
    metrics = await _scrape(client, "/metrics", probe_t)
    server["metrics"] = metrics is not None
    if metrics is None:
        warnings.append("the server has no /metrics (start it with --enable-metrics for per-level "
                        "accept length from counters); falling back to /server_info and "
                        "per-request meta_info")
    model = cfg.get("model")
    models = None
    if cfg["endpoint"] != "generate" or not is_sglang_info(info):
        try:
            st, models, dummy = await client.get_json("/v1/models", timeout=probe_t)
        except ClientError:
            st, models = None, None
        if st in (401, 403):
            raise BenchError("the server rejected the API key on /v1/models (HTTP %d): `api_key` "
                             "must equal the server's --api-key." % st)
    if cfg["endpoint"] != "generate" and not model:
        try:
            model = models["data"][0]["id"]
        except (TypeError, KeyError, IndexError):
            model = server.get("served_model_name") or server.get("model_path") or "default"
            warnings.append("could not read the model id from /v1/models; using %r" % (model,))
    server["model"] = model
    server["sglang"] = is_sglang_info(info) or is_sglang_models(models)
    return server, info


def is_sglang_info(info):
    """A /server_info body as SGLang's (sglang/srt/entrypoints/http_server.py, server_info():
    the server args with internal_states and version)."""
    return isinstance(info, dict) and "version" in info and (
        "internal_states" in info or "model_path" in info)


def is_sglang_models(models):
    """A /v1/models body as SGLang's (sglang/srt/entrypoints/openai/protocol.py, ModelCard:
    owned_by defaults to "sglang")."""
    try:
        return any(isinstance(m, dict) and m.get("owned_by") == "sglang" for m in models["data"])
    except (TypeError, KeyError):
        return False


async def _probe(client, ep, prompt, output_len, cfg):
    """One unmeasured streamed request; returns its record."""
    rec = new_record()
    body = build_payload(ep, prompt, output_len, cfg["temperature"], True, cfg.get("model"))
    await client.stream(ENDPOINT_PATHS[ep], body, make_handler(ep, rec), rec,
                        timeout=min(cfg["timeout"], 120.0))
    return rec


async def resolve_prompt_format(client, cfg, server, warnings):
    """('token_ids' | 'text', reason) for the synthetic workload on this endpoint and server."""
    ep, want = cfg["endpoint"], cfg.get("prompt_format") or "auto"
    if ep == "chat":
        return "text", "chat messages are text"
    if want != "auto":
        return want, "set by prompt_format"
    if ep == "generate":
        return "token_ids", "SGLang's /generate takes input_ids"
    if server.get("sglang"):
        return "token_ids", "the server is SGLang, whose completions take token-id prompts"
    # not SGLang: ask the server itself with one short token-id request
    probe = random_prompts(1, min(cfg["input_len"], 16), "probe-%s" % cfg["seed"], False)[0]
    rec = await _probe(client, ep, probe, 1, cfg)
    if rec.get("ok"):
        return "token_ids", "the server accepted a token-id prompt"
    status = rec.get("http_status")
    if status is not None and 400 <= status < 500:
        return "text", "the server rejected a token-id prompt (HTTP %s: %s)" % (
            status, bm.normalise_message(rec.get("error_message") or rec.get("error"), 80))
    warnings.append("probe of token-id prompts failed without an answer (%s); using text"
                    % bm.normalise_message(rec.get("error") or "unknown", 80))
    return "text", "the token-id probe failed"


async def _probe_mean_tokens(client, cfg, words, tag, n):
    """Mean server-counted prompt tokens of n distinct text prompts of `words` words (one output
    token each, sent together); (mean or None, first failed record or None)."""
    ep = cfg["endpoint"]
    prompts = random_prompts(n, words, "calibrate-%s-%s" % (cfg["seed"], tag), True)
    bodies = [build_payload(ep, p, 1, cfg["temperature"], True, cfg.get("model"))
              for p in prompts]
    recs = (await run_requests(client, ENDPOINT_PATHS[ep], bodies.__getitem__, n, n, ep,
                               timeout=min(cfg["timeout"], 120.0)))[0]
    counts = [r["prompt_tokens"] for r in recs if r.get("ok") and r.get("prompt_tokens") is not None]
    bad = [r for r in recs if not r.get("ok")]
    return (bm.mean([float(c) for c in counts]) if len(counts) == n else None,
            bad[0] if bad else None)


async def calibrate_words(client, cfg, warnings, max_steps=4, per_step=4):
    """Words per synthetic text prompt so that the server counts about input_len prompt tokens.

    The server's own tokenizer (and, on chat, its chat template) decides the count, so it is
    measured: `per_step` distinct probe prompts of w words with one output token each report
    their usage.prompt_tokens, whose mean is t (words differ in token count, so one prompt
    alone is noisy); two points give the linear fit t = a + b * w and the next w; a mean within
    one token or 0.5 % of the target ends it. Returns (words, probes) with probes a list of
    {'words', 'prompt_tokens'}; without a usage count the word count equals input_len."""
    target = int(cfg["input_len"])
    probes = []
    w = target
    for i in range(max_steps):
        t, bad = await _probe_mean_tokens(client, cfg, w, i, per_step)
        if t is None:
            if not probes:
                warnings.append("the server reported no prompt token count for a text prompt "
                                "(%s); synthetic prompts are %d words, not calibrated to "
                                "input_len tokens" % (
                                    "no usage" if bad is None else
                                    bm.normalise_message(bad.get("error") or "", 80), target))
                return target, probes
            break
        probes.append({"words": w, "prompt_tokens": round(t, 2)})
        if abs(t - target) <= max(1, 0.005 * target):
            return w, probes
        if len(probes) == 1:
            nxt = int(round(w * target / float(t))) if t > 0 else w * 2
        else:
            (w1, t1), (w2, t2) = [(p["words"], p["prompt_tokens"]) for p in probes[-2:]]
            slope = (t2 - t1) / float(w2 - w1) if w2 != w1 else 0.0
            if slope <= 0:
                break
            nxt = int(round(w2 + (target - t2) / slope))
        nxt = max(1, nxt)
        if nxt == w:
            break
        w = nxt
    best = min(probes, key=lambda p: abs(p["prompt_tokens"] - target))
    if abs(best["prompt_tokens"] - target) > max(2, 0.05 * target):
        warnings.append("synthetic text prompts reach %d prompt tokens at best for input_len %d "
                        "(the server's tokenizer or chat template sets the floor)"
                        % (best["prompt_tokens"], target))
    return best["words"], probes


def _random_payload(ep, cfg, ignore_eos, workload, seed, output_len, i):
    as_text = workload["prompt_format"] == "text"
    length = workload["words"] if as_text else cfg["input_len"]
    prompt = random_prompts(1, length, "%s-%d" % (seed, i), as_text)[0]
    return (build_payload(ep, prompt, output_len, cfg["temperature"], ignore_eos,
                          cfg.get("model")), output_len)


def _dataset_payload(ep, cfg, ignore_eos, prompt, cap=None):
    n = int(prompt.get("output_len") or cfg["output_len"])
    if cap is not None:
        n = min(n, cap)
    return (build_payload(ep, dict(prompt, output_len=n), n, cfg["temperature"], ignore_eos,
                          cfg.get("model")), n)


def _cycled(items, offset, i):
    return items[(i + offset) % len(items)]


def _warmup_payloads(ep, cfg, c, rep, prompts, workload, n_warm):
    # the measured requests' shape (endpoint, prompt form, input length, ignore_eos);
    # only the output is capped at warmup_output_len
    wlen = min(cfg["output_len"], cfg["warmup_output_len"])
    ignore_eos = cfg["ignore_eos"]
    if prompts is None:
        wmake = functools.partial(_random_payload, ep, cfg, ignore_eos, workload,
                                  "warm-%d-%d-%d" % (cfg["seed"], rep, c), wlen)
        return [wmake(i) for i in range(n_warm)]
    # from the end of the list, away from the prompts this level measures first
    return [_dataset_payload(ep, cfg, ignore_eos, prompts[-1 - (i % len(prompts))], wlen)
            for i in range(n_warm)]


def _measured_payloads(ep, cfg, c, rep, prompts, workload, count, bounded):
    """payload_for(i) of one repeat's measured requests (bounded: by a duration, not a count)."""
    ignore_eos = cfg["ignore_eos"]
    if prompts is None:
        make = functools.partial(_random_payload, ep, cfg, ignore_eos, workload,
                                 cfg["seed"] + 1000003 * rep + c, cfg["output_len"])
        # build payloads before the clock starts, so prompt generation is not measured
        # (a duration-bound level cannot know how many it needs: it builds them as it goes)
        return make if bounded else [make(i) for i in range(count)].__getitem__
    pre_all = [_dataset_payload(ep, cfg, ignore_eos, p) for p in prompts]
    return functools.partial(_cycled, pre_all, (rep * count) % len(pre_all))


async def _warm_up(client, cfg, c, rep, prompts, workload, level_warn):
    """The unmeasured requests before a repeat; a warning when every one of them failed."""
    n_warm = c if cfg.get("warmup") is None else int(cfg["warmup"])
    if n_warm <= 0:
        return
    ep = cfg["endpoint"]
    wpayloads = _warmup_payloads(ep, cfg, c, rep, prompts, workload, n_warm)
    wrecs = (await run_requests(client, ENDPOINT_PATHS[ep], wpayloads.__getitem__, n_warm,
                                min(c, n_warm), ep, timeout=cfg["timeout"],
                                abort_after_conn_failures=c))[0]
    bad = [r for r in wrecs if not r["ok"]]
    if bad and len(bad) == len(wrecs):
        top = bm.error_groups(bad)[0]
        level_warn.append("all %d warmup requests at C=%d failed: %s"
                          % (len(bad), c, top["key"]))


async def _flush_cache(client, c, scrape_t, level_warn):
    # after the warmup, so the server's lifetime average covers only measured requests
    try:
        st, dummy, body = await client.request("POST", "/flush_cache", timeout=scrape_t)
        if st != 200:
            level_warn.append("flush_cache before C=%d answered HTTP %s: %s"
                              % (c, st, body[:120].decode("utf-8", "replace").strip()))
    except ClientError as exc:
        level_warn.append("flush_cache before C=%d failed: %s" % (c, exc))


async def _measure_repeat(client, cfg, c, rep, prompts, server_has_info, workload, scrape_t):
    """One measured repeat of a level, between two scrapes of the server's counters; returns
    (its figures, its records)."""
    ep = cfg["endpoint"]
    m_before = await _scrape(client, "/metrics", scrape_t)
    i_before = await _scrape(client, "/server_info", scrape_t) if server_has_info else None
    count = prompts_needed(cfg, c)
    deadline = None
    if cfg.get("duration"):
        # the duration is in the server's (simulated) seconds, like every reported figure
        deadline = _now() + float(cfg["duration"]) * cfg["time_scale"]
    payload_for = _measured_payloads(ep, cfg, c, rep, prompts, workload, count,
                                     deadline is not None)
    records, wall, cpu, lag = await run_requests(
        client, ENDPOINT_PATHS[ep], payload_for, count, c, ep, deadline=deadline,
        timeout=cfg["timeout"], abort_after_conn_failures=max(4, c))
    m_after = await _scrape(client, "/metrics", scrape_t)
    i_after = await _scrape(client, "/server_info", scrape_t) if server_has_info else None
    m = bm.level_metrics(records, wall, c, cfg["time_scale"], cfg["steady_state_ratio"])
    _add_accept(m, m_before, m_after, i_before, i_after)
    _add_client_limit(m, cpu, lag)
    return m, records


def _add_client_limit(m, cpu, lag):
    limited, reason = bm.client_limit(cpu, lag)
    m["client_cpu_fraction"] = cpu
    m["client_loop_lag_p99_ms"] = lag
    m["client_limited"] = limited
    m["client_limit_reason"] = reason
    near, near_reason = bm.client_limit(cpu, lag, cpu_threshold=0.6, lag_threshold_ms=2.0)
    if near and not limited:
        # not limited yet, but say which limit is close so the reader can judge
        m["client_limit_reason"] = "close to the client's limit: " + near_reason


def _merge_repeats(reps, all_records, c, cfg):
    """One level's figures from several repeats: records pooled, throughputs averaged, the
    client's worst state kept, each repeat's headline figures listed."""
    walls = sum(r["duration_s"] for r in reps) * cfg["time_scale"]
    level = bm.level_metrics(all_records, walls, c, cfg["time_scale"],
                             cfg["steady_state_ratio"])
    level["output_throughput"] = bm.mean([r["output_throughput"] for r in reps
                                          if r["output_throughput"] is not None])
    level["request_throughput"] = bm.mean([r["request_throughput"] for r in reps
                                           if r["request_throughput"] is not None])
    ss = [r["steady_state"]["output_throughput"] for r in reps if r.get("steady_state")]
    level["steady_state"] = {"output_throughput": bm.mean(ss), "repeats_with_window": len(ss)}
    for key in ("accept_length", "accept_length_source", "counter_accept_length",
                "server_accept_length_before"):
        level[key] = reps[0].get(key) if key in ("accept_length_source",
                                                 "server_accept_length_before") else \
            bm.mean([r[key] for r in reps if r.get(key) is not None])
    level["server_accept_length_after"] = reps[-1].get("server_accept_length_after")
    srv = [r.get("server_output_tokens") for r in reps]
    level["server_output_tokens"] = sum(srv) if None not in srv else None
    level["client_cpu_fraction"] = max(r["client_cpu_fraction"] or 0 for r in reps)
    lags = [r["client_loop_lag_p99_ms"] for r in reps if r["client_loop_lag_p99_ms"] is not None]
    level["client_loop_lag_p99_ms"] = max(lags) if lags else None
    level["client_limited"] = any(r["client_limited"] for r in reps)
    level["client_limit_reason"] = "; ".join(sorted(set(
        r["client_limit_reason"] for r in reps if r["client_limit_reason"]))) or None
    level["repeats"] = []
    for r in reps:
        item = dict((out, _get(r, path_)) for path_, out in CI_FIGURES)
        item.update(completed=r["completed"], failed=r["failed"])
        level["repeats"].append(item)
    return level


def _combine_repeats(reps, all_records, c, cfg):
    level = reps[0] if len(reps) == 1 else _merge_repeats(reps, all_records, c, cfg)
    level["ci"] = {out: bm.confidence_interval([_get(r, path_) for r in reps],
                                               cfg["confidence"])
                   for path_, out in CI_FIGURES} if len(reps) > 1 else None
    return level


async def _run_level(client, cfg, c, prompts, server_has_info, warnings, workload):
    """One concurrency level: per repeat a warmup, an optional cache flush and the measured
    requests; a repeat with failures checks the server is still there. Returns the level's
    figures, judged; its warnings go to `warnings`."""
    scrape_t = min(cfg["timeout"], 30.0)
    level_warn = []
    reps = []
    all_records = []
    server_lost = False
    for rep in range(cfg["repeats"]):
        await _warm_up(client, cfg, c, rep, prompts, workload, level_warn)
        if cfg["flush_cache"]:
            await _flush_cache(client, c, scrape_t, level_warn)
        m, records = await _measure_repeat(client, cfg, c, rep, prompts, server_has_info,
                                           workload, scrape_t)
        reps.append(m)
        all_records.extend(records)
        if m["failed"]:
            try:
                await client.request("GET", "/health", timeout=min(5.0, cfg["timeout"]))
            except ClientError:
                server_lost = True
                break
    level = _combine_repeats(reps, all_records, c, cfg)
    level["server_lost"] = server_lost
    _judge_level(level, cfg, workload, prompts is None)
    for w in level_warn:
        warnings.append(w)
    warnings.extend(level["level_warnings"])
    if level["client_limited"]:
        warnings.append("C=%d: figures may be limited by the benchmark client, not the server: %s"
                        % (c, level["client_limit_reason"]))
    return level


def most_common_error(level):
    groups = level.get("error_groups") or []
    if not groups:
        return "none recorded"
    g = groups[0]
    key = ("HTTP %s: %s" % (g["status"], g["message"])) if g["status"] is not None \
        else g["message"]
    return "%s (x%d)" % (key, g["count"])


def _judge_level(level, cfg, workload, synthetic):
    """Flags and warnings of one measured level: failures against max_failure_rate, a level
    with no completed request, outputs shorter than asked under ignore_eos, prompts whose
    server-counted length is far from input_len."""
    c = level["concurrency"]
    out = []
    total = level["completed"] + level["failed"]
    level["measured"] = level["completed"] > 0
    rate = level.get("failure_rate")
    level["failure_rate_exceeded"] = bool(rate is not None and rate > cfg["max_failure_rate"])
    if not level["measured"]:
        out.append("C=%d: no request completed (%d of %d failed; most common: %s); the level "
                   "has no figures" % (c, level["failed"], total, most_common_error(level)))
    elif level["failure_rate_exceeded"]:
        out.append("C=%d: %d of %d requests failed (%.1f%%, above max_failure_rate %.1f%%); "
                   "most common: %s" % (c, level["failed"], total, 100.0 * rate,
                                        100.0 * cfg["max_failure_rate"], most_common_error(level)))
    short = level.get("short_outputs") or 0
    if short and cfg["ignore_eos"]:
        out.append("C=%d: %d of %d completed requests ended short of the asked output length "
                   "under ignore_eos (mean %.1f tokens per request, %.1f asked): the server "
                   "ignores ignore_eos or caps the output; the figures describe shorter requests"
                   % (c, short, level["completed"], level["output_tokens_per_request"] or 0.0,
                      level["output_len_asked"] or 0.0))
    level["ended_short"] = bool(short and cfg["ignore_eos"])
    ptr = level.get("prompt_tokens_per_request")
    if synthetic and ptr is not None and workload["prompt_format"] == "text":
        if abs(ptr - cfg["input_len"]) > max(2.0, 0.05 * cfg["input_len"]):
            out.append("C=%d: prompts averaged %.1f tokens as the server counts them, for "
                       "input_len %d" % (c, ptr, cfg["input_len"]))
    level["level_warnings"] = out


def _add_accept(m, m_before, m_after, i_before, i_after):
    ctr = bm.counter_accept_length(m_before, m_after)
    sb = bm.server_info_accept_length(i_before)
    sa = bm.server_info_accept_length(i_after)
    m["counter_accept_length"] = ctr
    # the server's own count of tokens generated during the level (accuracy cross-check)
    try:
        m["server_output_tokens"] = m_after[bm.GEN_TOKENS] - m_before[bm.GEN_TOKENS]
    except (TypeError, KeyError):
        m["server_output_tokens"] = None
    m["server_accept_length_before"] = sb
    m["server_accept_length_after"] = sa
    if ctr is not None:
        m["accept_length"], m["accept_length_source"] = ctr, "metrics_counters"
    elif m.get("request_accept_length") is not None:
        m["accept_length"], m["accept_length_source"] = m["request_accept_length"], \
            "request_meta_info"
    elif sa is not None:
        m["accept_length"], m["accept_length_source"] = sa, "server_info_lifetime"
    else:
        m["accept_length"], m["accept_length_source"] = None, None


async def _bench(cfg, warnings, workload):
    client = Client(cfg["url"], cfg.get("api_key"), timeout=cfg["timeout"])
    levels = []
    server = None
    try:
        server, info = await _preflight(client, cfg, warnings)
        if server.get("model") and not cfg.get("model"):
            cfg = dict(cfg, model=server["model"])
        workload.update(await _workload(client, cfg, server, warnings))
        for c in cfg["concurrency"]:
            level = await _run_level(client, cfg, c, cfg.get("prompts"), server["server_info"],
                                     warnings, workload)
            levels.append(level)
            codes = [k for k in level["errors"] if k.startswith("HTTP 401") or
                     k.startswith("HTTP 403")]
            if codes and level["completed"] == 0:
                raise BenchError("requests were rejected (%s): `api_key` must equal the server's "
                                 "--api-key" % codes[0], levels)
            if level["server_lost"] or (level["completed"] == 0 and level["failed"] and any(
                    k.startswith("cannot connect") for k in level["errors"])):
                raise BenchError(
                    "the server at %s stopped answering during concurrency %d (%d requests "
                    "completed, %d failed at that level); results up to that point are in "
                    "`levels`" % (cfg["url"], c, level["completed"], level["failed"]), levels)
            if not level["measured"] and cfg["fail_on_empty_level"]:
                raise BenchError(
                    "no request completed at concurrency %d: %d of %d failed, most common: %s.%s "
                    "Nothing was measured; the levels up to this one are in `levels` (set "
                    "fail_on_empty_level=false to record an empty level and go on)"
                    % (c, level["failed"], level["failed"], most_common_error(level),
                       _hint(level, workload, cfg)), levels)
    finally:
        client.close()
    return server, levels


def _hint(level, workload, cfg):
    statuses = set(g["status"] for g in level.get("error_groups") or [])
    if workload.get("prompt_format") == "token_ids" and cfg["endpoint"] != "generate" and \
            statuses & set((400, 422)) and cfg.get("prompts") is None:
        return " The server may not take token-id prompts: set prompt_format=text."
    return ""


async def _workload(client, cfg, server, warnings):
    """How the synthetic prompts are made on this server: prompt form and, for text, the word
    count that reaches input_len tokens."""
    out = {"synthetic": cfg.get("prompts") is None}
    if cfg.get("prompts") is not None:
        kinds = set("input_ids" if "input_ids" in p else "messages" if "messages" in p
                    else "text" for p in cfg["prompts"])
        want = cfg.get("prompt_format") or "auto"
        if want == "text" and "input_ids" in kinds:
            raise BenchError("prompt_format=text, but the dataset has input_ids lines; give text "
                             "prompts or set prompt_format=auto")
        if want == "token_ids" and kinds - set(["input_ids"]):
            raise BenchError("prompt_format=token_ids, but the dataset has text or messages "
                             "lines; the client has no tokenizer to turn them into ids")
        out["prompt_format"] = "token_ids" if kinds == set(["input_ids"]) else "text"
        out["prompt_format_reason"] = "as written in the dataset"
        return out
    fmt, why = await resolve_prompt_format(client, cfg, server, warnings)
    out["prompt_format"], out["prompt_format_reason"] = fmt, why
    if fmt == "text":
        words, probes = await calibrate_words(client, cfg, warnings)
        out["words"] = words
        out["calibration"] = probes
    return out


def run_benchmark(cfg):
    """Run the whole benchmark synchronously. cfg: DEFAULTS-shaped dict (validated by the
    caller). Returns the result dict; raises BenchError (with .partial) when it cannot go on."""
    full = dict(DEFAULTS)
    full.update({k: v for k, v in cfg.items() if v is not None or k in ("ignore_eos",)})
    if full["ignore_eos"] is None:
        full["ignore_eos"] = full.get("prompts") is None
    warnings = []
    workload = {}
    t0 = time.time()
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        try:
            server, levels = loop.run_until_complete(_bench(full, warnings, workload))
        except BenchError as exc:
            exc.partial = _result(full, None, exc.partial or [], warnings, time.time() - t0,
                                  workload)
            raise
    finally:
        try:
            loop.run_until_complete(asyncio.sleep(0))
        finally:
            asyncio.set_event_loop(None)
            loop.close()
    return _result(full, server, levels, warnings, time.time() - t0, workload)


def config_echo(cfg):
    out = {k: v for k, v in cfg.items() if k not in ("api_key", "prompts")}
    out["api_key_set"] = bool(cfg.get("api_key"))
    if cfg.get("prompts") is not None:
        out["dataset_prompts"] = len(cfg["prompts"])
    return out


def _result(cfg, server, levels, warnings, duration, workload=None):
    return {"levels": levels,
            "by_concurrency": dict((str(lv["concurrency"]), lv) for lv in levels),
            "config": config_echo(cfg), "server": server, "duration_s": duration,
            "workload": workload or {}, "warnings": warnings}
