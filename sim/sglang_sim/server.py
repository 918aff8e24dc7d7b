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
from http import HTTPStatus

from sglang_sim import SGLANG_VERSION, _proc, api_contract, tokenizer
from sglang_sim.scheduler import Request

HEALTH_CHECK_TIMEOUT = 20.0
GRAPH_MEMORY_USAGE_KEYS = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode",
                           "draft_extend")
# entrypoints/openai/protocol.py DEFAULT_MODEL_NAME: `model` is optional and echoed back.
DEFAULT_MODEL_NAME = "default"
MAX_BODY = 64 * 1024 * 1024
# uvicorn's answer to a request h11 cannot parse (protocols/http/h11_impl.py send_400_response)
_BAD_HTTP = b"Invalid HTTP request received."
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
                    await self._send(writer, 400, _BAD_HTTP, "text/plain; charset=utf-8", False)
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
                    try:
                        body = await self._read_chunked(reader)
                    except ValueError:
                        await self._send(writer, 400, _BAD_HTTP, "text/plain; charset=utf-8", False)
                        return
                else:
                    try:
                        length = int(headers.get("content-length", "0") or 0)
                    except ValueError:
                        length = -1
                    if length < 0:
                        await self._send(writer, 400, _BAD_HTTP, "text/plain; charset=utf-8", False)
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
        total = 0
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            total += size
            if size < 0 or total > MAX_BODY:
                raise ValueError("chunked body too large")
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
        # http_server.py validate_json_request (OpenAI routes): the media type must be JSON.
        media_type = headers.get("content-type", "").lower().split(";", 1)[0].strip()
        if openai and media_type != "application/json":
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
        req = Request(self.sched.new_rid(), [0], 1, False, 0.0, self.sched.seed,
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
        # managers/scheduler_components/internal_state.py get_internal_state: the resolved
        # args, then topology, memory_usage (memory_usage.py build_memory_usage) and, with
        # speculation, avg_spec_accept_length only once a verify ran (_average_accept_length
        # is None before, and None is left out).
        state = dict(info)
        state.update({
            "world_size": self.args.get("tp_size") or 1,
            "startup_time": self.startup_time,
            "effective_max_running_requests_per_dp": self.sched.mrr,
            "last_gen_throughput": self.sched.last_gen_throughput,
            "memory_usage": {
                "weight": round((p["weights_mib"] + p["draft_weights_mib"]) / 1024, 3),
                "kvcache": round(p["kv_mib"] / 1024, 3),
                "startup_available": round(p.get("avail_after_graph_mib", 0) / 1024, 3),
                "token_capacity": int(p["max_total_num_tokens"]),
                "token_capacity_swa": None,
                "graph": {k: round(v, 3) for k, v in self.graph_memory_gb().items()},
            },
        })
        if self.spec and self.args.get("speculative_adaptive"):
            # the tier in force (docs/advanced_features/adaptive_speculative_decoding.md;
            # eagle_worker_v2.py apply_runtime_state overrides the spec args)
            state["speculative_num_steps"] = self.sched.steps
            state["speculative_num_draft_tokens"] = self.sched.steps + 1
        if self.spec:
            accept_length = self.sched.avg_accept_length()
            if accept_length is not None:
                state["avg_spec_accept_length"] = accept_length
        info.update({
            "max_total_num_tokens": p["max_total_num_tokens"],
            "max_req_input_len": self.sched.context_len - 1,
            "internal_states": [state],
            "startup_time": self.startup_time,
            "version": SGLANG_VERSION,
            "frontend": "python",  # http_server.py server_info
            "sim": {"time_scale": self.scale, "profile": self.settings["profile"],
                    "note": "wall-clock figures measured by a client are time_scale x the "
                            "simulated ones: multiply client tok/s by time_scale"},
        })
        return info

    def graph_memory_gb(self):
        """model_executor/graph_memory_usage.py merge_graph_memory_usage: every phase of
        GRAPH_MEMORY_USAGE_KEYS, 0.0 where nothing was captured. A plan that splits its graph
        memory by phase (graph_phases_mib) is reported so; otherwise the capture is the
        target's decode graph, the verify graph under speculation."""
        phases = dict.fromkeys(GRAPH_MEMORY_USAGE_KEYS, 0.0)
        split = self.plan.get("graph_phases_mib")
        if split:
            for phase, mib in split.items():
                phases[phase] = phases.get(phase, 0.0) + mib / 1024.0
        else:
            phases["target_verify" if self.spec else "decode"] = self.plan.get("graph_mib", 0) / 1024.0
        return phases

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
        # metrics_collector.py: one graph_memory_usage_gb sample per phase
        out.append("# HELP sglang:graph_memory_usage_gb Memory used by captured device graphs in GB.")
        out.append("# TYPE sglang:graph_memory_usage_gb gauge")
        for phase, gb in self.graph_memory_gb().items():
            out.append('sglang:graph_memory_usage_gb{%s,phase="%s"} %s' % (labels, phase, _fmt(round(gb, 3))))
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
            metric("spec_num_steps", "gauge", "The number of speculative decoding steps.", self.sched.steps)
            metric("spec_num_draft_tokens", "gauge", "The number of speculative draft tokens.",
                   self.sched.draft_tokens)
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
    def _reserved_tokens(self):
        """managers/utils.py compute_num_reserved_tokens: EAGLE keeps its drafts in the output
        slots, so the context check counts max(topk x steps, draft tokens) more."""
        algo = (self.args.get("speculative_algorithm") or "").upper()
        if algo not in ("EAGLE", "EAGLE3", "NEXTN", "FROZEN_KV_MTP"):
            return 0
        return max((self.args.get("speculative_eagle_topk") or 1) * self.steps,
                   self.args.get("speculative_num_draft_tokens") or 0)

    def _check_len(self, ids, max_new):
        """tokenizer_manager.py _validate_one_request: input, then input + max_new_tokens,
        against the context length. Returns the max_new_tokens to run with (None: up to the
        context, as the scheduler caps it)."""
        ctx = self.sched.context_len
        n = len(ids) + self._reserved_tokens()
        if n >= ctx:
            raise ValueError("The input (%d tokens) is longer than the model's context length "
                             "(%d tokens)." % (n, ctx))
        if max_new is not None and max_new + n > ctx:
            raise ValueError(
                "Requested token count exceeds the model's maximum context length of %d tokens. "
                "You requested a total of %d tokens: %d tokens from the input messages and %d "
                "tokens for the completion. Please reduce the number of tokens in the input "
                "messages or the completion to fit within the limit." % (ctx, max_new + n, n, max_new))
        return ctx - n if max_new is None else max_new

    @staticmethod
    def _verify(sp):
        """sampling/sampling_params.py SamplingParams.__init__ + verify(): the same checks, in
        the same order, with the same texts (ValueError -> 400)."""
        temperature = sp.get("temperature", 1.0)
        top_k = sp.get("top_k", api_contract.SAMPLING_PARAMS_DEFAULTS["top_k"])
        if top_k is None:
            top_k = -1
        if temperature is not None and 0 <= temperature < 1e-6:  # greedy: top_k = 1
            temperature, top_k = 1.0, 1
        if top_k == -1:
            top_k = 1 << 30
        beam_width = sp.get("beam_width")
        if beam_width is not None and beam_width < 1:
            raise ValueError("beam_width must be at least 1, got %s." % beam_width)
        if not math.isfinite(temperature) or temperature < 0.0:
            raise ValueError("temperature must be a non-negative finite number, got %s." % temperature)
        top_p, min_p = sp.get("top_p", 1.0), sp.get("min_p", 0.0)
        if not 0.0 < top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1], got %s." % top_p)
        if not 0.0 <= min_p <= 1.0:
            raise ValueError("min_p must be in [0, 1], got %s." % min_p)
        if top_k < 1 or top_k == -1:
            raise ValueError("top_k must be -1 (disable) or at least 1, got %s." % top_k)
        for key in ("frequency_penalty", "presence_penalty"):
            v = sp.get(key, 0.0)
            if not -2.0 <= v <= 2.0:
                raise ValueError("%s must be in [-2, 2], got %s." % (key, v))
        rep = sp.get("repetition_penalty", 1.0)
        if not 0.0 < rep <= 2.0:
            raise ValueError("repetition_penalty must be in (0, 2] (1.0 = no penalty), got %s." % rep)
        min_new, max_new = sp.get("min_new_tokens", 0), sp.get("max_new_tokens")
        if not 0 <= min_new:
            raise ValueError("min_new_tokens must be in [0, max_new_tokens], got %s." % min_new)
        if max_new is not None:
            if max_new < 0:
                raise ValueError("max_new_tokens must be at least 0, got %s." % max_new)
            if not min_new <= max_new:
                raise ValueError("min_new_tokens must be in [0, max_new_tokens(%s)], got %s."
                                 % (max_new, min_new))
        for token_id in sp.get("logit_bias") or {}:
            try:
                ok = 0 <= int(token_id) < tokenizer.VOCAB_SIZE
            except ValueError:
                ok = False
            if not ok:
                raise ValueError("logit_bias must has keys in [0, %d], got %s."
                                 % (tokenizer.VOCAB_SIZE - 1, token_id))
        if sum(sp.get(k) is not None for k in ("json_schema", "regex", "ebnf", "structural_tag")) > 1:
            raise ValueError("Only one of json_schema, regex, ebnf, or structural_tag can be set.")
        if (sp.get("n") or 1) != 1:
            raise ValueError("sglang_sim supports n=1 only.")
        return temperature if top_k != 1 else 0.0

    @staticmethod
    def _prompt(text=None, input_ids=None):
        """Token ids of a prompt: input_ids win over text (tokenizer_manager._tokenize_one_request)."""
        if input_ids is not None:
            for i in input_ids:
                # 0.5.23 does not check this before the GPU does; the sim refuses instead of
                # pretending an embedding lookup out of range works.
                if i < 0 or i >= tokenizer.VOCAB_SIZE:
                    raise ValueError("Token id %d is out of vocabulary (vocab size %d)."
                                     % (i, tokenizer.VOCAB_SIZE))
            return list(input_ids)
        return tokenizer.encode(text)

    def _new_request(self, ids, max_new, temperature, ignore_eos, rid=None, sink=None):
        return Request(rid or self.sched.new_rid(), ids, max_new, ignore_eos, temperature,
                       self.sched.seed, sink=sink, steps=self.steps)

    def meta_info(self, req):
        """tokenizer_manager.py _handle_batch_output: the keys and their order; the spec
        metrics (_calculate_spec_decoding_metrics) and e2e_latency only once finished."""
        m = {
            "id": req.rid,
            "finish_reason": req.finish_reason,
            "prompt_tokens": req.prompt_len,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": len(req.output_ids),
            "cached_tokens": req.cached_tokens,
        }
        if req.finished:
            m["e2e_latency"] = (req.last_token_at or time.time()) - req.created
            if self.spec and req.verify_ct > 0:
                # the drafts proposed over its verifies (steps per verify; it moves under adaptive)
                proposed = req.proposed_drafts
                if proposed > 0:
                    m["spec_accept_rate"] = req.correct_drafts / float(proposed)
                    m["spec_accept_length"] = len(req.output_ids) / float(req.verify_ct)
                    m["spec_num_correct_drafts"] = req.correct_drafts
                    m["spec_num_proposed_drafts"] = proposed
                    m["spec_verify_ct"] = req.verify_ct
                if any(req.hist):
                    # 0.5.23 grows the list only to the largest count seen
                    # (schedule_batch.py update_spec_correct_drafts_histogram): no trailing zeros
                    last = max(i for i, n in enumerate(req.hist) if n)
                    m["spec_correct_drafts_histogram"] = list(req.hist[:last + 1])
        return m

    def _generate_out(self, req):
        return ('{"text":"%s","output_ids":[%s],"meta_info":%s}'
                % (req.text, req.ids_str, json.dumps(self.meta_info(req), separators=(",", ":")))
                ).encode()

    def _generate_args(self, obj):
        """What tokenizer_manager.generate_request checks after the contract gate, in its
        order: inputs present (io_struct._validate_inputs), context length, sampling params."""
        text, input_ids = obj.get("text"), obj.get("input_ids")
        if text is None and input_ids is None:
            raise ValueError("Either text, input_ids or input_embeds should be provided.")
        sp = obj.get("sampling_params")
        rid = obj.get("rid")
        if (isinstance(text, list) or isinstance(sp, list) or isinstance(rid, list)
                or (input_ids and isinstance(input_ids[0], list))):
            raise ValueError("sglang_sim does not support batched /generate requests.")
        sp = api_contract.decode_sampling_params(sp or {})
        ids = self._prompt(text, input_ids)
        max_new = self._check_len(ids, sp["max_new_tokens"])
        temperature = self._verify(sp)
        return ids, max_new, temperature, bool(sp["ignore_eos"]), rid

    async def r_generate(self, method, query, headers, body, writer, keep):
        obj = self._parse_json(headers, body)
        # http_server.py generate_request: the schema gate answers before anything else.
        contract_error = api_contract.generate_contract_error(obj)
        if contract_error is not None:
            raise HTTPError(400, _json({"error": contract_error}))
        stream = bool(obj.get("stream"))
        try:
            ids, max_new, temperature, ignore_eos, rid = self._generate_args(obj)
        except ValueError as exc:
            self.log("[http_server] Error: %s" % exc)
            if not stream:
                raise _native_error(str(exc))
            # serve_generate_request: a ValueError while streaming is an SSE error event in
            # a 200 response, then [DONE].
            event = {"error": {"message": str(exc), "type": "invalid_request_error",
                               "code": 400, "retryable": False}}
            self._start_stream(writer)
            writer.write(self._chunk(b"data: " + _json(event) + b"\n\n")
                         + self._chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
            return None
        if not stream:
            req = self._new_request(ids, max_new, temperature, ignore_eos, rid)
            self.sched.submit(req)
            await req.done
            return 200, self._generate_out(req), "application/json"

        chunk = self._chunk

        def sink(req, delta, n):
            if n:
                writer.write(chunk(b"data: " + self._generate_out(req) + b"\n\n"))

        req = self._new_request(ids, max_new, temperature, ignore_eos, rid, _guarded(writer, sink))
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
    @staticmethod
    def _oai_field_error(obj, field, kind):
        return _validation_error("[{'type': '%s_type', 'loc': ('body', '%s'), 'msg': 'Input should "
                                 "be a valid %s', 'input': %r}]" % (kind, field, kind, obj.get(field)))

    def _oai_common(self, obj, max_default):
        """protocol.py CompletionRequest / ChatCompletionRequest: defaults (model "default",
        temperature 1.0, top_p 1.0), then the sampling params tokenizer_manager checks."""
        model = obj.get("model", DEFAULT_MODEL_NAME)
        if not isinstance(model, str):
            raise self._oai_field_error(obj, "model", "string")
        max_new = obj.get("max_completion_tokens")
        if max_new is None:
            max_new = obj.get("max_tokens", max_default)
        for field, kind, ok in (
                ("max_tokens", "integer", lambda v: v is None or _is_int(v)),
                ("max_completion_tokens", "integer", lambda v: v is None or _is_int(v)),
                ("temperature", "number", _is_num),
                ("top_p", "number", _is_num),
                ("ignore_eos", "boolean", lambda v: isinstance(v, bool)),
                ("stream", "boolean", lambda v: isinstance(v, bool)),
                ("n", "integer", _is_int)):
            if field in obj and not ok(obj[field]):
                raise self._oai_field_error(obj, field, kind)
        so = obj.get("stream_options")
        if so is not None and not isinstance(so, dict):
            raise self._oai_field_error(obj, "stream_options", "dictionary")
        sp = {"max_new_tokens": max_new, "temperature": float(obj.get("temperature", 1.0)),
              "top_p": float(obj.get("top_p", 1.0)), "n": obj.get("n", 1)}
        ignore_eos = bool(obj.get("ignore_eos", False))
        include_usage, continuous = should_include_usage(so)
        return model, sp, ignore_eos, bool(obj.get("stream", False)), include_usage, continuous

    @staticmethod
    def _usage(req, stream_final=False):
        """usage_processor.py calculate_token_usage -> protocol.py UsageInfo (field order).
        The final usage chunk of a completions stream is dumped with exclude_none."""
        u = {"prompt_tokens": req.prompt_len, "total_tokens": req.prompt_len + len(req.output_ids),
             "completion_tokens": len(req.output_ids), "prompt_tokens_details": None,
             "reasoning_tokens": 0, "completion_tokens_details": None}
        if stream_final:
            u = {k: v for k, v in u.items() if v is not None}
        return u

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
        # protocol.py CompletionRequest: max_tokens defaults to 16
        model, sp, ignore_eos, stream, include_usage, continuous = self._oai_common(obj, 16)
        prompt = obj["prompt"]
        try:
            if isinstance(prompt, list) and all(_is_int(i) for i in prompt):
                ids = self._prompt(input_ids=prompt)
            elif isinstance(prompt, str):
                ids = self._prompt(text=prompt)
            elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                ids = self._prompt(text=prompt[0])
            elif isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
                raise ValueError("sglang_sim does not support batched prompts.")
            else:
                raise self._oai_field_error(obj, "prompt", "string")
            max_new = self._check_len(ids, sp["max_new_tokens"])
            temperature = self._verify(sp)
        except ValueError as exc:
            raise _openai_error(str(exc))
        created = int(time.time())
        if not stream:
            req = self._new_request(ids, max_new, temperature, ignore_eos)
            self.sched.submit(req)
            await req.done
            fr, matched = self._oai_finish(req)
            out = {"id": req.rid, "object": "text_completion", "created": created, "model": model,
                   "choices": [{"index": 0, "text": req.text, "logprobs": None,
                                "finish_reason": fr, "matched_stop": matched}],
                   "usage": self._usage(req), "metadata": {"weight_version": "default"}}
            return 200, _json(out), "application/json"
        rid = self.sched.new_rid()
        prefix = ('data: {"id":"%s","object":"text_completion","created":%d,"model":%s,'
                  '"choices":[{"index":0,"text":"' % (rid, created, json.dumps(model)))
        usage = self._usage

        # serving_completions.py _generate_completion_stream: one chunk per output of the
        # scheduler (its delta may be empty), finish_reason on the chunk that ends the
        # request, usage on every chunk with continuous_usage_stats (null otherwise).
        def sink(req, delta, n):
            if not n:
                return
            fr, matched = self._oai_finish(req) if req.finished else (None, None)
            writer.write(self._chunk(('%s%s","logprobs":null,"finish_reason":%s,"matched_stop":%s}],'
                                      '"usage":%s}\n\n' % (
                                          prefix, delta, json.dumps(fr), json.dumps(matched),
                                          json.dumps(usage(req), separators=(",", ":"))
                                          if continuous else "null")).encode()))

        req = self._new_request(ids, max_new, temperature, ignore_eos, rid, _guarded(writer, sink))
        self._start_stream(writer)
        self.sched.submit(req)
        tail = _LazyTail(lambda: self._completion_tail(req, model, created, include_usage))
        await self._finish_stream(req, writer, tail)
        return None

    def _completion_tail(self, req, model, created, include_usage):
        if not include_usage:
            return []
        return [b"data: " + _json({"id": req.rid, "object": "text_completion", "created": created,
                                   "model": model, "choices": [],
                                   "usage": self._usage(req, stream_final=True)}) + b"\n\n"]

    async def r_chat(self, method, query, headers, body, writer, keep):
        obj = self._parse_json(headers, body, openai=True)
        if "messages" not in obj:
            raise _validation_error("[{'type': 'missing', 'loc': ('body', 'messages'), "
                                    "'msg': 'Field required', 'input': %r}]" % (obj,))
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise _openai_error("Messages cannot be empty. Please provide at least one message.")
        model, sp, ignore_eos, stream, include_usage, continuous = self._oai_common(obj, None)
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
            ids = self._prompt(text=text)
            max_new = self._check_len(ids, sp["max_new_tokens"])
            temperature = self._verify(sp)
        except ValueError as exc:
            raise _openai_error(str(exc))
        created = int(time.time())
        if not stream:
            req = self._new_request(ids, max_new, temperature, ignore_eos)
            self.sched.submit(req)
            await req.done
            fr, matched = self._oai_finish(req)
            out = {"id": req.rid, "object": "chat.completion", "created": created, "model": model,
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": req.text,
                                                        "reasoning_content": None},
                                "logprobs": None, "finish_reason": fr, "matched_stop": matched}],
                   "usage": self._usage(req), "metadata": {"weight_version": "default"}}
            return 200, _json(out), "application/json"
        rid = self.sched.new_rid()
        # sse_utils.py build_sse_content (msgspec, omit_defaults): no usage key unless set,
        # reasoning_content always present in the delta.
        prefix = ('data: {"id":"%s","object":"chat.completion.chunk","created":%d,"model":%s,'
                  '"choices":[{"index":0,"delta":{"reasoning_content":null'
                  % (rid, created, json.dumps(model)))
        first = [True]
        usage = self._usage

        # serving_chat.py _generate_chat_stream: a role chunk on the first output, a content
        # chunk per output with text (usage on it with continuous_usage_stats), and
        # finish_reason in a chunk of its own after the last output.
        def sink(req, delta, n):
            if first[0]:
                first[0] = False
                writer.write(self._chunk((prefix + ',"role":"assistant","content":""},"logprobs":null,'
                                          '"finish_reason":null,"matched_stop":null}]}\n\n').encode()))
            if delta:
                tail = (',"usage":%s' % json.dumps(usage(req), separators=(",", ":"))
                        if continuous else "")
                writer.write(self._chunk((prefix + ',"content":"%s"},"logprobs":null,"finish_reason":'
                                          'null,"matched_stop":null}]%s}\n\n' % (delta, tail)
                                          ).encode()))

        req = self._new_request(ids, max_new, temperature, ignore_eos, rid, _guarded(writer, sink))
        self._start_stream(writer)
        self.sched.submit(req)
        tail = _LazyTail(lambda: self._chat_tail(req, prefix, model, created, include_usage))
        await self._finish_stream(req, writer, tail)
        return None

    def _chat_tail(self, req, prefix, model, created, include_usage):
        fr, matched = self._oai_finish(req)
        out = [(prefix + '},"logprobs":null,"finish_reason":%s,"matched_stop":%s}]}\n\n'
                % (json.dumps(fr), json.dumps(matched))).encode()]
        if include_usage:
            # ChatCompletionStreamResponse.model_dump_json(): nulls kept
            out.append(b"data: " + _json({"id": req.rid, "object": "chat.completion.chunk",
                                          "created": created, "model": model, "choices": [],
                                          "usage": self._usage(req)}) + b"\n\n")
        return out


def should_include_usage(stream_options, default_include_usage=False):
    """entrypoints/openai/utils.py should_include_usage: (include_usage, continuous_usage_stats).
    The server's default (--stream-response-default-include-usage) is off."""
    if stream_options:
        return (bool(stream_options.get("include_usage") or default_include_usage),
                bool(stream_options.get("continuous_usage_stats")))
    return default_include_usage, False


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


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
