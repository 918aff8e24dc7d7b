"""HTTP side of the simulator: a minimal asyncio HTTP/1.1 server with SGLang's routes.

Routes, bodies and error shapes follow sglang/srt/entrypoints/http_server.py (0.5.23):
native /generate (+ streaming with cumulative text/output_ids), /health,
/health_generate, /model_info, /server_info (+ deprecated /get_* spellings),
/flush_cache, /metrics (with --enable-metrics), and the OpenAI-compatible /v1/models,
/v1/completions and /v1/chat/completions. --api-key is checked like SGLang's
middleware (Authorization: Bearer; /health*, /ready and /metrics exempt).
"""

import asyncio
import json
import math
import os
import time
import uuid
from http import HTTPStatus

from sglang_sim import SGLANG_VERSION, _proc, perf, tokenizer
from sglang_sim.scheduler import Request

HEALTH_CHECK_TIMEOUT = 20.0
MAX_BODY = 64 * 1024 * 1024
_AUTH_EXEMPT = ("/health", "/health_generate", "/ready", "/metrics")


class HTTPError(Exception):
    def __init__(self, status, body, content_type="application/json"):
        super().__init__(status)
        self.status = status
        self.body = body
        self.content_type = content_type


def _json(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _openai_error(message, status=400, err_type="BadRequestError"):
    return HTTPError(status, _json({"object": "error", "message": message, "type": err_type,
                                    "param": None, "code": status}))


def _validation_error(message):
    # SGLang turns FastAPI's 422 into 400 with an OpenAI-style ErrorResponse.
    return HTTPError(400, _json({"object": "error", "message": message, "type": "Bad Request",
                                 "param": None, "code": 400}))


def _native_error(message, status=400):
    return HTTPError(status, _json({"error": {"message": message}}))


class Server(object):
    def __init__(self, args, scheduler, settings, plan, startup_time, log_prefix=""):
        self.args = args
        self.sched = scheduler
        self.settings = settings
        self.plan = plan
        self.startup_time = startup_time
        self.status = "Starting"
        self.scale = settings["time_scale"]
        self.model_name = args["served_model_name"]
        self.steps = args.get("speculative_num_steps") or 0
        self.spec = args.get("speculative_algorithm") is not None
        self.api_key = args.get("api_key")
        self.server = None
        self.log_prefix = log_prefix

    def log(self, msg):
        _proc.log(msg, self.log_prefix)

    # ------------------------------------------------------------------ HTTP core
    async def handle(self, reader, writer):
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    await self._send(writer, 431, b"", "text/plain", False)
                    return
                lines = head.decode("latin-1").split("\r\n")
                try:
                    method, target, version = lines[0].split(" ", 2)
                except ValueError:
                    await self._send(writer, 400, b"Bad Request", "text/plain", False)
                    return
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
                if version == "HTTP/1.0" and headers.get("connection", "").lower() == "keep-alive":
                    keep = True
                body = b""
                if headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits 1 s for it
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    body = await self._read_chunked(reader)
                else:
                    try:
                        length = int(headers.get("content-length", "0") or 0)
                    except ValueError:
                        length = -1
                    if length < 0:
                        await self._send(writer, 400, b"Invalid Content-Length", "text/plain", False)
                        return
                    if length > MAX_BODY:
                        await self._send(writer, 413, b"", "text/plain", False)
                        return
                    if length:
                        body = await reader.readexactly(length)
                path, _sep, query = target.partition("?")
                try:
                    keep = await self.dispatch(method, path, query, headers, body, writer, keep)
                except HTTPError as exc:
                    await self._send(writer, exc.status, exc.body, exc.content_type, keep)
                except (ConnectionError, asyncio.IncompleteReadError):
                    return
                except Exception as exc:  # a bug must not print a traceback per request
                    self.log("[http_server] Error: %s: %s" % (type(exc).__name__, exc))
                    await self._send(writer, 500, _json({"error": {"message": "%s: %s" % (
                        type(exc).__name__, exc)}}), "application/json", False)
                    return
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, RuntimeError):
            return
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def _read_chunked(self, reader):
        out = []
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return b"".join(out)
            out.append(await reader.readexactly(size))
            await reader.readline()

    async def _send(self, writer, status, body, content_type="application/json", keep=True,
                    extra=None):
        reason = HTTPStatus(status).phrase
        hdr = ["HTTP/1.1 %d %s" % (status, reason), "content-type: %s" % content_type,
               "content-length: %d" % len(body), "server: uvicorn",
               "date: %s" % time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())]
        if not keep:
            hdr.append("connection: close")
        if extra:
            hdr.extend(extra)
        writer.write(("\r\n".join(hdr) + "\r\n\r\n").encode() + body)
        await writer.drain()

    def _start_stream(self, writer):
        hdr = ("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
               "transfer-encoding: chunked\r\nserver: uvicorn\r\ncache-control: no-cache\r\n\r\n")
        writer.write(hdr.encode())

    @staticmethod
    def _chunk(data):
        return b"%x\r\n%s\r\n" % (len(data), data)

    # ------------------------------------------------------------------ routing
    async def dispatch(self, method, path, query, headers, body, writer, keep):
        if self.api_key and path not in _AUTH_EXEMPT:
            auth = headers.get("authorization", "")
            if auth != "Bearer " + self.api_key:
                self.access(writer, method, path, 401)
                raise HTTPError(401, _json({"error": "Unauthorized"}))
        route = ROUTES.get(path)
        if route is None:
            self.access(writer, method, path, 404)
            raise HTTPError(404, _json({"detail": "Not Found"}))
        methods, name = route
        if method not in methods:
            raise HTTPError(405, _json({"detail": "Method Not Allowed"}))
        handler = getattr(self, name)
        kwargs = {"path": path} if name == "r_health" else {}
        try:
            result = await handler(method=method, query=query, headers=headers, body=body,
                                   writer=writer, keep=keep, **kwargs)
        except HTTPError as exc:
            self.access(writer, method, path, exc.status)
            raise
        if result is None:  # a streamed response already went out
            self.access(writer, method, path, 200)
            return keep
        status, payload, ctype = result
        self.access(writer, method, path, status)
        await self._send(writer, status, payload, ctype, keep)
        return keep

    def access(self, writer, method, path, status):
        """uvicorn's access log line."""
        peer = writer.get_extra_info("peername") or ("127.0.0.1", 0)
        _proc.raw_log('INFO:     %s:%d - "%s %s HTTP/1.1" %d %s'
                      % (peer[0], peer[1], method, path, status, HTTPStatus(status).phrase))

    def _parse_json(self, headers, body, openai=False):
        ctype = headers.get("content-type", "")
        if openai and ctype and "application/json" not in ctype:
            raise _validation_error(
                "[{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: Only "
                "'application/json' is allowed\", 'type': 'value_error'}]")
        try:
            obj = json.loads(body.decode("utf-8")) if body else None
        except (ValueError, UnicodeDecodeError) as exc:
            errors = [{"type": "json_invalid", "loc": ["body", getattr(exc, "pos", 0)],
                       "msg": "JSON decode error", "input": {},
                       "ctx": {"error": getattr(exc, "msg", str(exc))}}]
            raise _validation_error("%s %s" % (errors, errors))
        if not isinstance(obj, dict):
            errors = [{"type": "model_attributes_type", "loc": ["body"],
                       "msg": "Input should be a valid dictionary or object to extract fields from",
                       "input": obj}]
            raise _validation_error("%s" % (errors,))
        return obj

    # ------------------------------------------------------------------ simple routes
    async def r_health(self, method, query, headers, body, writer, keep, path="/health"):
        if self.status == "Starting" or self.status == "Shutdown":
            return 503, b"", "text/plain"
        if (os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "1").lower() in ("0", "false")
                and path == "/health"):
            return 200, b"", "text/plain"
        req = Request(self.sched.new_rid(), [0], 1, False, 0.0, False, self.sched.seed,
                      log_metrics=False, steps=self.steps)
        tic = time.time()
        self.sched.submit(req)
        # Like SGLang: poll once a second for any response from the scheduler.
        timeout = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", HEALTH_CHECK_TIMEOUT))
        while time.time() < tic + timeout * self.scale:
            await asyncio.sleep(min(1.0 * self.scale, 1.0))
            if self.sched.last_receive > tic:
                self.sched.abort(req)
                self.status = "Up"
                return 200, b"", "text/plain"
        self.sched.abort(req)
        self.log("Health check failed. Server couldn't get a response from detokenizer for last "
                 "%d seconds." % timeout)
        return 503, b"", "text/plain"

    async def r_ready(self, method, query, headers, body, writer, keep):
        return (200 if self.status == "Up" else 503), b"", "text/plain"

    def model_info(self):
        from sglang_sim.config import lookup_model
        m = lookup_model(self.args["model_path"])[1]
        return {
            "model_path": self.args["model_path"],
            "served_model_name": self.model_name,
            "tokenizer_path": self.args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": self.args["load_format"],
            "reasoning_parser": self.args["reasoning_parser"],
            "tool_call_parser": self.args["tool_call_parser"],
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": m["model_type"],
            "architectures": m["architectures"],
        }

    async def r_model_info(self, method, query, headers, body, writer, keep):
        return 200, _json(self.model_info()), "application/json"

    async def r_get_model_info(self, **kw):
        self.log("Endpoint '/get_model_info' is deprecated and will be removed in a future "
                 "version. Please use '/model_info' instead.")
        return await self.r_model_info(**kw)

    def server_info(self):
        # 0.5.23 answers with every resolved argument, the API key included (the route needs the
        # key): srt/entrypoints/http_server.py server_info -> srt/utils/common.py
        # build_server_info (ServerArgs.resolved_dict; redact_watermark_secrets hides watermark
        # keys only).
        info = {k: v for k, v in self.args.items() if not k.startswith("_")}
        p = self.plan
        state = {
            "last_gen_throughput": self.sched.last_gen_throughput,
            "memory_usage": {
                "weight": round((p["weights_mib"] + p["draft_weights_mib"]) / 1024, 2),
                "kvcache": round(p["kv_mib"] / 1024, 2),
                "token_capacity": p["max_total_num_tokens"],
                "graph": round(p.get("graph_mib", 0) / 1024, 2),
            },
            "effective_max_running_requests_per_dp": self.sched.mrr,
        }
        if self.spec:
            state["avg_spec_accept_length"] = self.sched.avg_accept_length()
            state["speculative_num_steps"] = self.steps
        info.update({
            "max_total_num_tokens": p["max_total_num_tokens"],
            "max_req_input_len": self.sched.context_len - 1,
            "internal_states": [state],
            "startup_time": self.startup_time,
            "version": SGLANG_VERSION,
            "frontend": "http",
            "sim": {"time_scale": self.scale, "profile": self.settings["profile"],
                    "note": "wall-clock figures measured by a client are time_scale x the "
                            "simulated ones: multiply client tok/s by time_scale"},
        })
        return info

    async def r_server_info(self, method, query, headers, body, writer, keep):
        return 200, _json(self.server_info()), "application/json"

    async def r_get_server_info(self, **kw):
        self.log("Endpoint '/get_server_info' is deprecated and will be removed in a future "
                 "version. Please use '/server_info' instead.")
        return await self.r_server_info(**kw)

    async def r_flush_cache(self, method, query, headers, body, writer, keep):
        if not self.sched.idle():
            msg = ("Cache not flushed because there are pending requests. #queue-req: %d, "
                   "#running-req: %d\n" % (len(self.sched.waiting), len(self.sched.running)))
            return 400, msg.encode(), "text/plain; charset=utf-8"
        self.sched.reset_spec_metrics()
        self.log("Cache flushed successfully!")
        msg = ("Cache flushed.\nPlease check backend logs for more details. (When there are "
               "running or waiting requests, the operation will not be performed.)\n")
        return 200, msg.encode(), "text/plain; charset=utf-8"

    async def r_models(self, method, query, headers, body, writer, keep):
        card = {"id": self.model_name, "object": "model", "created": int(self.startup_time),
                "owned_by": "sglang", "root": self.model_name, "parent": None,
                "max_model_len": self.sched.context_len}
        return 200, _json({"object": "list", "data": [card]}), "application/json"

    async def r_metrics(self, method, query, headers, body, writer, keep):
        if not self.args.get("enable_metrics"):
            raise HTTPError(404, _json({"detail": "Not Found"}))
        return 200, self.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8"

    def metrics_text(self):
        s = self.sched
        labels = 'engine_type="unified",model_name="%s",tp_rank="0"' % self.model_name
        out = []

        def metric(name, kind, help_, value, extra=""):
            out.append("# HELP sglang:%s %s" % (name, help_))
            out.append("# TYPE sglang:%s %s" % (name, kind))
            if isinstance(value, dict):  # per is_streaming label
                for key in sorted(value):
                    lab = labels + ',is_streaming="%s"' % key
                    out.append("sglang:%s{%s} %s" % (name, lab, _fmt(value[key])))
                return
            lab = labels + ("," + extra if extra else "")
            out.append("sglang:%s{%s} %s" % (name, lab, _fmt(value)))

        def hist(name, help_, hists):
            out.append("# HELP sglang:%s %s" % (name, help_))
            out.append("# TYPE sglang:%s histogram" % name)
            if not isinstance(hists, dict):
                hists = {None: hists}
            for key in sorted(hists, key=str):
                h = hists[key]
                lab = labels + (',is_streaming="%s"' % key if key else "")
                acc = 0
                for b, c in zip(h.buckets, h.counts):
                    acc += c
                    out.append('sglang:%s_bucket{%s,le="%s"} %s' % (name, lab, _fmt(float(b)), _fmt(float(acc))))
                out.append('sglang:%s_bucket{%s,le="+Inf"} %s' % (name, lab, _fmt(float(h.count))))
                out.append("sglang:%s_count{%s} %s" % (name, lab, _fmt(float(h.count))))
                out.append("sglang:%s_sum{%s} %s" % (name, lab, _fmt(h.sum)))

        p = self.plan
        metric("num_running_reqs", "gauge", "The number of running requests.", len(s.running))
        metric("num_queue_reqs", "gauge", "The number of requests in the waiting queue.", len(s.waiting))
        metric("gen_throughput", "gauge", "The generation throughput (token/s).", s.last_gen_throughput)
        used = sum(r.prompt_len + len(r.output_ids) for r in s.running)
        metric("token_usage", "gauge", "The token usage.", used / float(max(p["max_total_num_tokens"], 1)))
        metric("cache_hit_rate", "gauge", "The prefix cache hit rate.", 0.0)
        metric("max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.",
               p["max_total_num_tokens"])
        metric("weight_memory_usage_gb", "gauge", "Weight memory usage (GB).",
               round((p["weights_mib"] + p["draft_weights_mib"]) / 1024, 2))
        metric("kv_cache_memory_usage_gb", "gauge", "KV cache memory usage (GB).", round(p["kv_mib"] / 1024, 2))
        metric("graph_memory_usage_gb", "gauge", "CUDA graph memory usage (GB).",
               round(p.get("graph_mib", 0) / 1024, 2), 'phase="decode"')
        metric("startup_available_gpu_memory_gb", "gauge", "Available GPU memory at startup (GB).",
               round(p.get("avail_after_graph_mib", 0) / 1024, 2))
        metric("num_retracted_reqs", "gauge", "The number of retracted requests.", 0)
        if self.spec:
            # Gauges refreshed each decode log window (40 steps), like SGLang's; before the
            # first window, the lifetime value.
            acc = s.last_accept_length
            rate = s.last_accept_rate
            if acc is None:
                acc = s.avg_accept_length() or 0.0
                rate = (acc - 1) / self.steps if self.steps and acc else 0.0
            metric("spec_accept_length", "gauge", "The average acceptance length of speculative decoding.", acc)
            metric("spec_accept_rate", "gauge", "The average acceptance rate of speculative decoding.", rate)
            metric("spec_num_steps", "gauge", "The number of speculative decoding steps.", self.steps)
            metric("spec_num_draft_tokens", "gauge", "The number of speculative draft tokens.",
                   self.args.get("speculative_num_draft_tokens"))
        metric("prompt_tokens_total", "counter", "Number of prefill tokens processed.", s.prompt_tokens_total)
        metric("generation_tokens_total", "counter", "Number of generation tokens processed.",
               s.generation_tokens_total)
        metric("num_requests_total", "counter", "Number of requests processed.", s.num_requests_total)
        metric("spec_verify_calls_total", "counter", "Number of speculative verify forward calls.",
               float(s.spec_verify_calls_total))
        hist("time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft)
        hist("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", s.itl)
        hist("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", s.e2e)
        return "\n".join(out) + "\n"

    # ------------------------------------------------------------------ generation
    def _sampling(self, sp, openai=False):
        """Validate sampling params like SamplingParams.verify()."""
        max_new = sp.get("max_new_tokens", 128)
        temperature = sp.get("temperature", 1.0)
        ignore_eos = sp.get("ignore_eos", False)
        if temperature is None:
            temperature = 1.0
        if max_new is None:
            max_new = 128
        if not isinstance(max_new, int) or isinstance(max_new, bool):
            raise ValueError("max_new_tokens must be an integer, got %r." % (max_new,))
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) \
                or not math.isfinite(temperature) or temperature < 0:
            raise ValueError("temperature must be a non-negative finite number, got %s." % (temperature,))
        if max_new < 0:
            raise ValueError("max_new_tokens must be at least 0, got %d." % max_new)
        top_p = sp.get("top_p", 1.0)
        if top_p is not None and (not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0):
            raise ValueError("top_p must be in (0, 1], got %s." % (top_p,))
        return max_new, float(temperature), bool(ignore_eos)

    def _prompt(self, text=None, input_ids=None):
        if input_ids is not None:
            if not isinstance(input_ids, list) or not all(
                    isinstance(i, int) and not isinstance(i, bool) for i in input_ids):
                raise ValueError("input_ids must be a list of integers.")
            for i in input_ids:
                if i < 0 or i >= tokenizer.VOCAB_SIZE:
                    raise ValueError("Token id %d is out of vocabulary (vocab size %d)."
                                     % (i, tokenizer.VOCAB_SIZE))
            return input_ids, False
        if not isinstance(text, str):
            raise ValueError("text must be a string.")
        words = tokenizer.split_words(text)
        return tokenizer.encode(text), perf.is_realistic_text(words)

    def _check_len(self, ids, max_new):
        ctx = self.sched.context_len
        if len(ids) >= ctx:
            raise ValueError("The input (%d tokens) is longer than the model's context length "
                             "(%d tokens)." % (len(ids), ctx))

    def _new_request(self, ids, realistic, max_new, temperature, ignore_eos, rid=None, sink=None):
        return Request(rid or self.sched.new_rid(), ids, max_new, ignore_eos, temperature,
                       realistic, self.sched.seed, sink=sink, steps=self.steps)

    def meta_info(self, req):
        m = {
            "id": req.rid,
            "finish_reason": req.finish_reason,
            "prompt_tokens": req.prompt_len,
            "weight_version": "default",
            "total_retractions": 0,
            "completion_tokens": len(req.output_ids),
            "cached_tokens": req.cached_tokens,
        }
        if self.spec and req.verify_ct > 0:
            proposed = req.verify_ct * (self.args["speculative_num_draft_tokens"] - 1)
            m["spec_accept_rate"] = req.correct_drafts / float(proposed) if proposed else 0.0
            m["spec_accept_length"] = len(req.output_ids) / float(req.verify_ct)
            m["spec_num_correct_drafts"] = req.correct_drafts
            m["spec_num_proposed_drafts"] = proposed
            m["spec_verify_ct"] = req.verify_ct
            m["spec_correct_drafts_histogram"] = list(req.hist)
        if req.finished:
            m["e2e_latency"] = (req.last_token_at or time.time()) - req.created
        return m

    def _generate_out(self, req):
        return ('{"text":"%s","output_ids":[%s],"meta_info":%s}'
                % (req.text, req.ids_str, json.dumps(self.meta_info(req), separators=(",", ":")))
                ).encode()

    async def r_generate(self, method, query, headers, body, writer, keep):
        obj = self._parse_json(headers, body)
        if self.status == "Starting" and not obj.get("_warmup"):
            pass  # SGLang queues requests that arrive before warmup ends
        text, input_ids = obj.get("text"), obj.get("input_ids")
        if (text is None) == (input_ids is None):
            raise _native_error("Either text or input_ids should be provided.")
        if isinstance(text, list) or (isinstance(input_ids, list) and input_ids and
                                      isinstance(input_ids[0], list)):
            raise _native_error("sglang_sim does not support batched /generate requests.")
        sp = obj.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise _validation_error("sampling_params must be an object")
        try:
            max_new, temperature, ignore_eos = self._sampling(sp)
            ids, realistic = self._prompt(text, input_ids)
            self._check_len(ids, max_new)
        except ValueError as exc:
            raise _native_error(str(exc))
        rid = obj.get("rid")
        if rid is not None and not isinstance(rid, str):
            raise _native_error("rid must be a string.")
        stream = bool(obj.get("stream", False))
        if not stream:
            req = self._new_request(ids, realistic, max_new, temperature, ignore_eos, rid)
            self.sched.submit(req)
            await req.done
            return 200, self._generate_out(req), "application/json"

        chunk = self._chunk

        def sink(req, delta, n):
            if n:
                writer.write(chunk(b"data: " + self._generate_out(req) + b"\n\n"))

        req = self._new_request(ids, realistic, max_new, temperature, ignore_eos, rid,
                                _guarded(writer, sink))
        self._start_stream(writer)
        self.sched.submit(req)
        await self._finish_stream(req, writer, [])
        return None

    async def _finish_stream(self, req, writer, tail):
        try:
            while not req.done.done():
                await asyncio.wait({req.done}, timeout=0.5)
                if writer.is_closing():
                    self.sched.abort(req)
                    return
                try:
                    await writer.drain()
                except ConnectionError:
                    self.sched.abort(req)
                    return
            out = b"".join(self._chunk(t) for t in tail)
            writer.write(out + self._chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, RuntimeError):
            self.sched.abort(req)

    # ------------------------------------------------------------------ OpenAI
    def _oai_common(self, obj):
        model = obj.get("model")
        max_new = obj.get("max_completion_tokens", obj.get("max_tokens"))
        sp = {"max_new_tokens": max_new, "temperature": obj.get("temperature", 1.0),
              "ignore_eos": obj.get("ignore_eos", False), "top_p": obj.get("top_p", 1.0)}
        try:
            max_new, temperature, ignore_eos = self._sampling(sp, openai=True)
        except ValueError as exc:
            raise _openai_error(str(exc))
        n = obj.get("n", 1)
        if n not in (1, None):
            raise _openai_error("sglang_sim supports n=1 only.")
        so = obj.get("stream_options") or {}
        include_usage = bool(isinstance(so, dict) and so.get("include_usage"))
        return model, max_new, temperature, ignore_eos, bool(obj.get("stream", False)), include_usage

    def _usage(self, req):
        return {"prompt_tokens": req.prompt_len, "total_tokens": req.prompt_len + len(req.output_ids),
                "completion_tokens": len(req.output_ids), "prompt_tokens_details": None,
                "reasoning_tokens": 0}

    @staticmethod
    def _oai_finish(req):
        fr = req.finish_reason or {}
        if fr.get("type") == "stop":
            return "stop", fr.get("matched")
        if fr.get("type") == "length":
            return "length", None
        if fr.get("type") == "abort":
            return "abort", None
        return None, None

    async def r_completions(self, method, query, headers, body, writer, keep):
        obj = self._parse_json(headers, body, openai=True)
        if "prompt" not in obj:
            raise _validation_error("[{'type': 'missing', 'loc': ('body', 'prompt'), "
                                    "'msg': 'Field required', 'input': %r}]" % (obj,))
        if "model" not in obj:
            raise _validation_error("[{'type': 'missing', 'loc': ('body', 'model'), "
                                    "'msg': 'Field required', 'input': %r}]" % (obj,))
        model, max_new, temperature, ignore_eos, stream, include_usage = self._oai_common(obj)
        if max_new is None:
            max_new = 16  # OpenAI's completions default
        prompt = obj["prompt"]
        try:
            if isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
                ids, realistic = self._prompt(input_ids=prompt)
            elif isinstance(prompt, str):
                ids, realistic = self._prompt(text=prompt)
            elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                ids, realistic = self._prompt(text=prompt[0])
            else:
                raise ValueError("prompt must be a string, a list with one string, or a list of token ids.")
            self._check_len(ids, max_new)
        except ValueError as exc:
            raise _openai_error(str(exc))
        cid = "cmpl-" + uuid.uuid4().hex
        created = int(time.time())
        if not stream:
            req = self._new_request(ids, realistic, max_new, temperature, ignore_eos)
            self.sched.submit(req)
            await req.done
            fr, matched = self._oai_finish(req)
            out = {"id": req.rid, "object": "text_completion", "created": created,
                   "model": self.model_name,
                   "choices": [{"index": 0, "text": req.text, "logprobs": None,
                                "finish_reason": fr, "matched_stop": matched}],
                   "usage": self._usage(req), "metadata": {"weight_version": "default"}}
            return 200, _json(out), "application/json"
        prefix = ('{"id":"%s","object":"text_completion","created":%d,"model":%s,'
                  '"choices":[{"index":0,"text":' % (cid, created, json.dumps(self.model_name)))

        def sink(req, delta, n):
            if delta:
                writer.write(self._chunk(
                    b"data: " + (prefix + '"%s","logprobs":null,"finish_reason":null,'
                                 '"matched_stop":null}],"usage":null}' % delta).encode() + b"\n\n"))

        req = self._new_request(ids, realistic, max_new, temperature, ignore_eos, None,
                                _guarded(writer, sink))
        self._start_stream(writer)
        self.sched.submit(req)
        tail = _LazyTail(lambda: self._completion_tail(req, prefix, cid, created, include_usage))
        await self._finish_stream(req, writer, tail)
        return None

    def _completion_tail(self, req, prefix, cid, created, include_usage):
        fr, matched = self._oai_finish(req)
        out = [b"data: " + (prefix + '"","logprobs":null,"finish_reason":%s,"matched_stop":%s}],'
                            '"usage":null}' % (json.dumps(fr), json.dumps(matched))).encode() + b"\n\n"]
        if include_usage:
            out.append(b"data: " + _json({"id": cid, "object": "text_completion", "created": created,
                                          "model": self.model_name, "choices": [],
                                          "usage": self._usage(req)}) + b"\n\n")
        return out

    async def r_chat(self, method, query, headers, body, writer, keep):
        obj = self._parse_json(headers, body, openai=True)
        for field in ("messages", "model"):
            if field not in obj:
                raise _validation_error("[{'type': 'missing', 'loc': ('body', '%s'), "
                                        "'msg': 'Field required', 'input': %r}]" % (field, obj))
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise _openai_error("Messages cannot be empty. Please provide at least one message.")
        model, max_new, temperature, ignore_eos, stream, include_usage = self._oai_common(obj)
        parts = []
        for m in msgs:
            if not isinstance(m, dict) or "role" not in m:
                raise _validation_error("[{'type': 'missing', 'loc': ('body', 'messages'), "
                                        "'msg': 'Field required'}]")
            c = m.get("content")
            if isinstance(c, list):
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            # Chat template of Qwen-style models: <|im_start|>role\ncontent<|im_end|>
            parts.append("<|im_start|>%s\n%s<|im_end|>" % (m["role"], c or ""))
        parts.append("<|im_start|>assistant\n")
        text = "\n".join(parts)
        try:
            ids, realistic = self._prompt(text=text)
            if max_new is None:
                max_new = max(self.sched.context_len - len(ids), 0)
            self._check_len(ids, max_new)
        except ValueError as exc:
            raise _openai_error(str(exc))
        realistic = perf.is_realistic_text(tokenizer.split_words(
            " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))))
        cid = uuid.uuid4().hex
        created = int(time.time())
        if not stream:
            req = self._new_request(ids, realistic, max_new, temperature, ignore_eos)
            self.sched.submit(req)
            await req.done
            fr, matched = self._oai_finish(req)
            out = {"id": cid, "object": "chat.completion", "created": created, "model": self.model_name,
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": req.text,
                                                        "reasoning_content": None, "tool_calls": None},
                                "logprobs": None, "finish_reason": fr, "matched_stop": matched}],
                   "usage": self._usage(req), "metadata": {"weight_version": "default"}}
            return 200, _json(out), "application/json"
        prefix = ('{"id":"%s","object":"chat.completion.chunk","created":%d,"model":%s,'
                  '"choices":[{"index":0,"delta":' % (cid, created, json.dumps(self.model_name)))
        first = [True]

        def sink(req, delta, n):
            if first[0]:
                first[0] = False
                writer.write(self._chunk(b"data: " + (prefix + '{"role":"assistant","content":""},'
                                                      '"logprobs":null,"finish_reason":null}],'
                                                      '"usage":null}').encode() + b"\n\n"))
            if delta:
                writer.write(self._chunk(b"data: " + (prefix + '{"content":"%s"},"logprobs":null,'
                                                      '"finish_reason":null}],"usage":null}' % delta
                                                      ).encode() + b"\n\n"))

        req = self._new_request(ids, realistic, max_new, temperature, ignore_eos, None,
                                _guarded(writer, sink))
        self._start_stream(writer)
        self.sched.submit(req)
        tail = _LazyTail(lambda: self._chat_tail(req, prefix, cid, created, include_usage))
        await self._finish_stream(req, writer, tail)
        return None

    def _chat_tail(self, req, prefix, cid, created, include_usage):
        fr, matched = self._oai_finish(req)
        out = [b"data: " + (prefix + '{},"logprobs":null,"finish_reason":%s,"matched_stop":%s}],'
                            '"usage":null}' % (json.dumps(fr), json.dumps(matched))).encode() + b"\n\n"]
        if include_usage:
            out.append(b"data: " + _json({"id": cid, "object": "chat.completion.chunk",
                                          "created": created, "model": self.model_name,
                                          "choices": [], "usage": self._usage(req)}) + b"\n\n")
        return out


def _guarded(writer, sink):
    """A sink that refuses to write to a closed connection (the scheduler then aborts)."""
    def guarded(req, delta, n):
        if writer.is_closing():
            raise ConnectionResetError("client disconnected")
        sink(req, delta, n)
    return guarded


class _LazyTail(object):
    """Final SSE events, built only once the request finished."""

    def __init__(self, fn):
        self.fn = fn

    def __iter__(self):
        return iter(self.fn())


def _fmt(v):
    if v is None:
        return "NaN"
    return repr(float(v))


ROUTES = {
    "/health": (("GET",), "r_health"),
    "/health_generate": (("GET",), "r_health"),
    "/ready": (("GET",), "r_ready"),
    "/model_info": (("GET",), "r_model_info"),
    "/get_model_info": (("GET",), "r_get_model_info"),
    "/server_info": (("GET",), "r_server_info"),
    "/get_server_info": (("GET",), "r_get_server_info"),
    "/flush_cache": (("GET", "POST"), "r_flush_cache"),
    "/generate": (("POST", "PUT"), "r_generate"),
    "/metrics": (("GET",), "r_metrics"),
    "/v1/models": (("GET",), "r_models"),
    "/v1/completions": (("POST",), "r_completions"),
    "/v1/chat/completions": (("POST",), "r_chat"),
}
