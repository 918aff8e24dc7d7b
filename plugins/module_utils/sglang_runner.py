# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Runner of sglang_bench's load generator, stdlib only (Python >= 3.9), runs on the node.

``run_benchmark`` runs a whole benchmark: preflight of the server, the synthetic workload fitted
to it (prompt form, words per text prompt), then each concurrency level: per repeat a warmup, an
optional cache flush and the measured requests, with exactly C in flight (``run_requests``)
while the client watches its own CPU and event-loop lag. Requests go through
``sglang_transport``, their bodies come from ``sglang_workload``, the figures are judged by
``sglang_results``.
"""

from __future__ import absolute_import, division, print_function

import asyncio
import gc
import time

from ansible_collections.blackwell.sglang.plugins.module_utils import bench_metrics as bm
from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_results as rs
from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_transport as tp
from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_workload as wl

__metaclass__ = type

_now = time.perf_counter


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


def plan(cfg):
    """What a run would do (check mode): levels, request counts and the request shape."""
    levels = []
    for c in cfg["concurrency"]:
        warm = c if cfg.get("warmup") is None else cfg["warmup"]
        item = {"concurrency": c, "warmup_requests": warm, "repeats": cfg["repeats"]}
        if cfg.get("duration"):
            item["duration_s"] = cfg["duration"]
        else:
            item["requests"] = wl.prompts_needed(cfg, c)
        levels.append(item)
    return {"url": cfg["url"], "endpoint": cfg["endpoint"],
            "path": tp.ENDPOINT_PATHS[cfg["endpoint"]], "levels": levels,
            "prompt_format": cfg.get("prompt_format", "auto"),
            "dataset": cfg["dataset"], "input_len": cfg["input_len"],
            "output_len": cfg["output_len"], "temperature": cfg["temperature"],
            "ignore_eos": cfg["ignore_eos"], "flush_cache": cfg["flush_cache"]}


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


# ------------------------------------------------------------------ requests at one concurrency
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
            rec = tp.new_record()
            records.append(rec)
            body = payload_for(i)
            if isinstance(body, tuple):
                body, rec["asked_output_len"] = body
            await client.stream(path, body, tp.make_handler(endpoint, rec), rec, timeout=timeout)
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


# ------------------------------------------------------------------ the server before measuring
async def _scrape(client, path, timeout):
    try:
        if path == "/metrics":
            status, dummy, data = await client.request("GET", path, timeout=timeout)
            return bm.parse_prometheus(data.decode("utf-8", "replace")) if status == 200 else None
        status, obj, dummy = await client.get_json(path, timeout=timeout)
        return obj if status == 200 else None
    except tp.ClientError:
        return None


# Seconds the server gets to answer /health when a repeat had failures: its own deadline, not the
# request `timeout`, so that requests timing out in the client are not taken for a lost server.
HEALTH_PROBE_S = 5.0


def client_timeout_message(cfg, what):
    """The message for requests that hit the client's own deadline (the `timeout` option)."""
    return ("%s did not finish within timeout=%gs, the client's deadline for each request (the "
            "module's `timeout` option), at %s; the server was not given the time to answer. Raise "
            "`timeout` (default 600) above the longest request the workload makes"
            % (what, cfg["timeout"], cfg["url"]))


def _is_client_timeout(exc, cfg, client, cap):
    """True when ``exc`` is a request that ran out of the `timeout` deadline itself, not of a
    shorter limit of its own: ``cap`` for the request, the client's connect timeout for a connect
    (a connect that times out under its own 10 s limit is an unreachable server)."""
    text = str(exc)
    if "timed out after" not in text:
        return False
    if text.startswith("connect to"):
        cap = min(cap, client.connect_timeout)
        return float(cfg["timeout"]) <= cap
    return float(cfg["timeout"]) < cap


async def _preflight(client, cfg, warnings):
    probe_t = min(cfg["timeout"], 30.0)
    try:
        status, info, raw = await client.get_json("/server_info", timeout=probe_t)
    except tp.ClientError as exc:
        if _is_client_timeout(exc, cfg, client, 30.0):
            raise BenchError(client_timeout_message(cfg, "GET /server_info") + ".")
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
        except tp.ClientError:
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
    rec = tp.new_record()
    body = wl.build_payload(ep, prompt, output_len, cfg["temperature"], True, cfg.get("model"))
    await client.stream(tp.ENDPOINT_PATHS[ep], body, tp.make_handler(ep, rec), rec,
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
    probe = wl.random_prompts(1, min(cfg["input_len"], 16), "probe-%s" % cfg["seed"], False)[0]
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
    prompts = wl.random_prompts(n, words, "calibrate-%s-%s" % (cfg["seed"], tag), True)
    bodies = [wl.build_payload(ep, p, 1, cfg["temperature"], True, cfg.get("model"))
              for p in prompts]
    recs = (await run_requests(client, tp.ENDPOINT_PATHS[ep], bodies.__getitem__, n, n, ep,
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


# ------------------------------------------------------------------ one level
async def _warm_up(client, cfg, c, rep, prompts, workload, level_warn):
    """The unmeasured requests before a repeat; a warning when every one of them failed."""
    n_warm = c if cfg.get("warmup") is None else int(cfg["warmup"])
    if n_warm <= 0:
        return
    ep = cfg["endpoint"]
    wpayloads = wl.warmup_payloads(ep, cfg, c, rep, prompts, workload, n_warm)
    wrecs = (await run_requests(client, tp.ENDPOINT_PATHS[ep], wpayloads.__getitem__, n_warm,
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
    except tp.ClientError as exc:
        level_warn.append("flush_cache before C=%d failed: %s" % (c, exc))


async def _measure_repeat(client, cfg, c, rep, prompts, server_has_info, workload, scrape_t):
    """One measured repeat of a level, between two scrapes of the server's counters; returns
    (its figures, its records)."""
    ep = cfg["endpoint"]
    m_before = await _scrape(client, "/metrics", scrape_t)
    i_before = await _scrape(client, "/server_info", scrape_t) if server_has_info else None
    count = wl.prompts_needed(cfg, c)
    deadline = None
    if cfg.get("duration"):
        # the duration is in the server's (simulated) seconds, like every reported figure
        deadline = _now() + float(cfg["duration"]) * cfg["time_scale"]
    payload_for = wl.measured_payloads(ep, cfg, c, rep, prompts, workload, count,
                                       deadline is not None)
    records, wall, cpu, lag = await run_requests(
        client, tp.ENDPOINT_PATHS[ep], payload_for, count, c, ep, deadline=deadline,
        timeout=cfg["timeout"], abort_after_conn_failures=max(4, c))
    m_after = await _scrape(client, "/metrics", scrape_t)
    i_after = await _scrape(client, "/server_info", scrape_t) if server_has_info else None
    m = bm.level_metrics(records, wall, c, cfg["time_scale"], cfg["steady_state_ratio"])
    rs.add_accept_length(m, m_before, m_after, i_before, i_after)
    rs.add_client_limit(m, cpu, lag)
    return m, records


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
                await client.request("GET", "/health", timeout=HEALTH_PROBE_S)
            except tp.ClientError:
                server_lost = True
                break
    level = rs.combine_repeats(reps, all_records, c, cfg)
    level["server_lost"] = server_lost
    rs.judge_level(level, cfg, workload, prompts is None)
    for w in level_warn:
        warnings.append(w)
    warnings.extend(level["level_warnings"])
    if level["client_limited"]:
        warnings.append("C=%d: figures may be limited by the benchmark client, not the server: %s"
                        % (c, level["client_limit_reason"]))
    return level


# ------------------------------------------------------------------ whole benchmark
async def _bench(cfg, warnings, workload):
    client = tp.Client(cfg["url"], cfg.get("api_key"), timeout=cfg["timeout"])
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
                    % (c, level["failed"], level["failed"], rs.most_common_error(level),
                       _hint(level, workload, cfg)), levels)
    finally:
        client.close()
    return server, levels


def _hint(level, workload, cfg):
    errors = level.get("errors") or {}
    timed_out = sum(n for k, n in errors.items() if str(k).startswith("timed out after"))
    # A request the client abandons at its deadline can leave the next one on that connection
    # with another error (a reset): most, not all, failures are then the deadline's.
    if errors and timed_out * 2 > sum(errors.values()):
        what = "Every failed request" if timed_out == sum(errors.values()) else "%d of %d failed requests" % (
            timed_out, sum(errors.values()))
        return " " + client_timeout_message(cfg, what) + " (the server still answered /health)."
    statuses = set(g["status"] for g in level.get("error_groups") or [])
    if workload.get("prompt_format") == "token_ids" and cfg["endpoint"] != "generate" and \
            statuses & set((400, 422)) and cfg.get("prompts") is None:
        return " The server may not take token-id prompts: set prompt_format=text."
    return ""


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
            exc.partial = rs.bench_result(full, None, exc.partial or [], warnings,
                                          time.time() - t0, workload)
            raise
    finally:
        try:
            loop.run_until_complete(asyncio.sleep(0))
        finally:
            asyncio.set_event_loop(None)
            loop.close()
    return rs.bench_result(full, server, levels, warnings, time.time() - t0, workload)
