# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Transport of sglang_bench's load generator: HTTP/1.1 and SSE to an SGLang server, stdlib only
(Python >= 3.9), runs on the node.

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

What is sent is ``sglang_workload``'s; levels, repeats and the whole run are ``sglang_runner``'s.
"""

from __future__ import absolute_import, division, print_function

import asyncio
import json
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


def new_record():
    return {"ok": False, "error": None, "start": None, "ttft": None, "e2e": None,
            "output_tokens": 0, "prompt_tokens": None, "chunks": [],
            "spec_accept_length": None, "spec_verify_ct": None, "spec_hist": None,
            "asked_output_len": None}


def make_handler(endpoint, rec):
    if endpoint == "generate":
        return GenerateStream(rec)
    return OpenAIStream(rec, chat=(endpoint == "chat"))


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
