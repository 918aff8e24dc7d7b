# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Metric math for the sglang_bench module: pure functions, stdlib only, Python >= 3.9.

Definitions follow SGLang's ``sglang.benchmark.serving`` where it has one (names included), so
figures compare with bench_serving's output:

* ``ttft`` = first byte of the first token-bearing chunk - request sent.
* ``e2e`` (``e2e_latency``) = last chunk - request sent.
* ``tpot`` = (e2e - ttft) / (n - 1), n = output tokens as counted by the server (requests with n < 2
  have no TPOT), exactly bench_serving's ``tpot_ms``.
* ``decode_tps`` (per-request decode rate) = (n - 1) / (e2e - ttft) = 1 / tpot. The first token is
  produced by prefill and arrives at TTFT, so the decode phase produces n - 1 tokens in e2e - ttft.
  This is "output tokens / (e2e - TTFT)" with the first token taken out (it equals
  AIPerf's "output token throughput per user"). GuideLLM's and llmperf's per-request tok/s divide
  by the whole e2e (TTFT included) and read lower; do not compare them 1:1.
* ``itl`` per token: a chunk that carries k new tokens after a gap g contributes k values g / k
  (speculative decoding sends several tokens per chunk), as bench_serving does for its sglang
  backend. ``chunk_gap`` keeps the raw gaps between token-bearing chunks.
* ``output_throughput`` = sum of output tokens of completed requests / wall duration of the level
  (first request sent -> last request finished); ``request_throughput`` = completed / duration.
* percentiles use numpy's default "linear" method (what bench_serving calls via np.percentile).
"""

from __future__ import absolute_import, division, print_function

import json
import math
import re

__metaclass__ = type

PERCENTILES = (50, 90, 99)


# ---------------------------------------------------------------- basic statistics
def percentile(values, q):
    """numpy.percentile(values, q) with the default 'linear' method; None for no values."""
    if not values:
        return None
    if q < 0 or q > 100:
        raise ValueError("percentile must be within [0, 100], got %r" % (q,))
    data = sorted(values)
    if len(data) == 1:
        return float(data[0])
    pos = (len(data) - 1) * (q / 100.0)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(data) - 1)
    frac = pos - lo
    return float(data[lo] + (data[hi] - data[lo]) * frac)


def mean(values):
    if not values:
        return None
    return float(math.fsum(values) / len(values))


def stdev(values):
    """Sample standard deviation (n - 1); None below two values."""
    if len(values) < 2:
        return None
    m = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def summarize(values, scale=1.0, percentiles=PERCENTILES):
    """{'mean', 'p50', 'p90', 'p99'} of values multiplied by scale (None entries when empty)."""
    out = {"mean": None}
    for q in percentiles:
        out["p%d" % q] = None
    if not values:
        return out
    out["mean"] = mean(values) * scale
    for q in percentiles:
        out["p%d" % q] = percentile(values, q) * scale
    return out


# ---------------------------------------------------------------- Student-t
def _betacf(a, b, x):
    """Continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    if abs(d) < tiny:
        d = tiny
    d = 1.0 / d
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = tiny if abs(d) < tiny else d
        c = 1.0 + aa / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = tiny if abs(d) < tiny else d
        c = 1.0 + aa / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a, b, x):
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log(1.0 - x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """CDF of Student's t with df degrees of freedom."""
    if df <= 0:
        raise ValueError("degrees of freedom must be positive")
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t > 0 else tail


def t_ppf(p, df):
    """Quantile of Student's t (bisection on t_cdf; |error| < 1e-10)."""
    if not 0.0 < p < 1.0:
        raise ValueError("probability must be within (0, 1)")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    hi = 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
        if hi > 1e12:
            return float("inf")
    return bisect_up(lambda t: t_cdf(t, df), p, 0.0, hi, iterations=200, rel_tol=1e-12)


def bisect_up(fn, target, lo, hi, iterations=60, rel_tol=0.0):
    """Where the non-decreasing ``fn`` reaches ``target`` within [lo, hi], by bisection: the
    midpoint after ``iterations`` halvings, or once the interval is below ``rel_tol`` of hi."""
    for dummy in range(iterations):
        mid = (lo + hi) / 2.0
        if fn(mid) < target:
            lo = mid
        else:
            hi = mid
        if rel_tol and hi - lo < rel_tol * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def confidence_interval(values, confidence=0.95):
    """Student-t confidence interval of the mean of values (e.g. one figure over repeats).

    Returns {'mean', 'low', 'high', 'half_width', 'n', 'confidence'}; with fewer than two values
    low/high/half_width are None (one run says nothing about its own spread).
    """
    vals = [float(v) for v in values if v is not None]
    out = {"mean": mean(vals), "low": None, "high": None, "half_width": None,
           "n": len(vals), "confidence": confidence}
    if len(vals) < 2:
        return out
    sd = stdev(vals)
    half = t_ppf(0.5 + confidence / 2.0, len(vals) - 1) * sd / math.sqrt(len(vals))
    out.update(low=out["mean"] - half, high=out["mean"] + half, half_width=half)
    return out


# ---------------------------------------------------------------- per request
def request_times(rec):
    """Derived per-request figures of one completed record.

    rec: {'ttft': s, 'e2e': s, 'output_tokens': n, 'chunks': [(t_since_send_s, new_tokens), ...]}
    Returns {'tpot', 'decode_tps', 'itl': [...], 'chunk_gaps': [...]} (seconds / tokens per s);
    tpot and decode_tps are None when n < 2 or the decode phase took no measurable time.
    """
    n = rec.get("output_tokens") or 0
    ttft, e2e = rec.get("ttft"), rec.get("e2e")
    tpot = decode_tps = None
    if n >= 2 and ttft is not None and e2e is not None and e2e > ttft:
        tpot = (e2e - ttft) / (n - 1)
        decode_tps = (n - 1) / (e2e - ttft)
    itl, gaps = [], []
    prev = None
    for t, k in rec.get("chunks") or ():
        if k <= 0:
            continue
        if prev is not None:
            gap = t - prev
            gaps.append(gap)
            itl.extend([gap / k] * k)
        prev = t
    return {"tpot": tpot, "decode_tps": decode_tps, "itl": itl, "chunk_gaps": gaps}


# ---------------------------------------------------------------- accepted-length histogram
def add_histograms(hists):
    """Sum per-request histograms of different lengths. SGLang 0.5.23 grows each request's list
    only as far as the largest count seen (srt/managers/schedule_batch.py
    ``update_spec_correct_drafts_histogram``), so lists of one level differ in length."""
    out = []
    for h in hists:
        for i, v in enumerate(h):
            if i >= len(out):
                out.append(0)
            out[i] += int(v)
    return out


def accept_lengths_by_depth(hist):
    """Accept length each shallower chain depth would have had under the ROUND-START model, from
    one launch's histogram.

    ``hist[j]`` counts verify rounds in which exactly j draft tokens were correct (bonus token
    excluded). If acceptance depends only on a draft token's place in its round (EAGLE/MTP heads
    reading their own hidden states), a round with j correct drafts at the launched depth would
    have accepted min(j, k) at depth k, plus the bonus token: ``{k: mean(min(j, k) + 1)}`` for
    k = 1 .. len(hist) - 1 (string keys), or None without a histogram. The mean is per verify
    round, as SGLang's own accept length (completion tokens / verify rounds) is, less the first
    token, which comes from the prefill and no round. One of the two models bounded by
    ``accept_length_bounds_by_depth``.
    """
    if not hist:
        return None
    rounds = float(sum(hist))
    if rounds <= 0:
        return None
    return dict((str(k), sum(n * (min(j, k) + 1) for j, n in enumerate(hist)) / rounds)
                for k in range(1, len(hist)))


def _ceil_div(a, b):
    return -(-a // b)


def accept_length_bounds_by_depth(hist, requests=0):
    """[low, high] accept length each shallower chain depth k would have had, from the histogram
    of one launch at depth K = len(hist) - 1 with topk 1; ``{str(k): [low, high]}`` or None.

    Two models of where a draft token's correctness comes from, and the interval covers both:

    - PREFIX model (a draft model reading tokens, STANDALONE; also any draft whose mistakes sit at
      places in the output, the easy and hard stretches of a real text): the draft's guess for an
      output position is right or wrong whatever round it falls in. Every wrong position ends a
      round at every depth, so the output splits there into stretches decoded independently: a
      round with j < K correct drafts is a stretch of j + 1 positions, which depth k decodes in
      ceil((j + 1) / (k + 1)) rounds. A round with all K correct ends on the target's bonus token,
      whose own draft guess was never checked: the stretch may run on into the next round. Taken
      alone it needs ceil((K + 1) / (k + 1)) rounds (high bound on rounds), merged at best
      floor((K + 1) / (k + 1)) (low bound). The last round of each request is cut by the output
      limit, one round each way per request (``requests``).
    - ROUND-START model (EAGLE/MTP heads, acceptance set by the place in the round):
      ``accept_lengths_by_depth``, exact.

    The per-round figure from the round-start model alone is what this function replaced: on the
    real self-draft sweep (tests/fixtures/real-sglang/live/tune_sweep.json) it fell 2-11 % below
    every shallower launch's measured accept length, and the prefix bounds held all 28 pairs.
    """
    if not hist or len(hist) < 2:
        return None
    K = len(hist) - 1
    positions = sum((j + 1) * n for j, n in enumerate(hist))
    if positions <= 0 or sum(hist) <= 0:
        return None
    requests = max(0, int(requests or 0))
    start = accept_lengths_by_depth(hist)
    out = {}
    for k in range(1, K + 1):
        b = k + 1
        partial = sum(n * _ceil_div(j + 1, b) for j, n in enumerate(hist[:K]))
        most = partial + hist[K] * _ceil_div(K + 1, b) + requests
        least = max(1, partial + hist[K] * ((K + 1) // b) - requests)
        low, high = positions / float(most), positions / float(least)
        # the interval holds both models: the round-start figure widens it where it falls outside
        exact = start[str(k)]
        out[str(k)] = [max(1.0, min(low, exact)), max(high, exact)]
    return out


def accept_length_high_deeper(hist, depth, requests=0):
    """The most accept length per verify round a DEEPER chain depth (``depth`` > K = len(hist) - 1,
    topk 1) could have, from one launch's histogram at K; None without one. Sound under both models
    of ``accept_length_bounds_by_depth``, the larger of the two:

    - ROUND-START model: the k-th draft token adds P(the first k are correct), which never grows
      with k (the accept length is concave in depth): each token past K adds at most the share of
      rounds in which all K were correct, ``hist[K] / rounds``.
    - PREFIX model: the output splits at the positions whose draft guess is wrong; every round with
      fewer than K correct drafts ends such a stretch, so depth k needs at least one round per
      stretch, and at least positions / (k + 1) rounds in all (the all-correct rounds' bonus
      positions taken as correct guesses, the stretches as long as they can be), less one cut
      round per request.
    """
    if not hist or len(hist) < 2:
        return None
    K = len(hist) - 1
    rounds = float(sum(hist))
    positions = sum((j + 1) * n for j, n in enumerate(hist))
    if rounds <= 0 or positions <= 0 or depth <= K:
        return None
    round_start = positions / rounds + (depth - K) * hist[K] / rounds
    stretches = sum(hist[:K])
    least = max(1.0, max(float(stretches), positions / float(depth + 1)) - max(0, int(requests or 0)))
    return max(round_start, positions / least)


# ---------------------------------------------------------------- steady state
def steady_state(records, concurrency, ratio=0.9, bridge=0.005):
    """Output throughput over the longest interval with >= ceil(ratio * concurrency) requests in
    flight (SGLang's steady_state idea), so ramp-up and drain do not bias high-C figures.

    records carry 'start' (absolute s), 'e2e' and 'chunks'. A closed-loop client replaces a
    finished request a few microseconds later, so dips below the threshold shorter than `bridge`
    seconds (wall clock) do not end the window. Returns None when no such window exists.
    """
    done = [r for r in records if r.get("ok") and r.get("e2e")]
    if not done or concurrency < 1:
        return None
    threshold = max(1, int(math.ceil(ratio * concurrency - 1e-9)))
    deltas = {}
    for r in done:
        deltas[r["start"]] = deltas.get(r["start"], 0) + 1
        end = r["start"] + r["e2e"]
        deltas[end] = deltas.get(end, 0) - 1
    intervals = []
    inflight, win_start = 0, None
    for t in sorted(deltas):
        before = inflight
        inflight += deltas[t]
        if before < threshold <= inflight:
            win_start = t
        elif before >= threshold > inflight and win_start is not None:
            if intervals and win_start - intervals[-1][1] < bridge:
                intervals[-1] = (intervals[-1][0], t)
            else:
                intervals.append((win_start, t))
            win_start = None
    best = None
    for iv in intervals:
        if best is None or iv[1] - iv[0] > best[1] - best[0]:
            best = iv
    if best is None or best[1] <= best[0]:
        return None
    lo, hi = best
    tokens = 0
    for r in done:
        for t, k in r.get("chunks") or ():
            ts = r["start"] + t
            if lo < ts <= hi:
                tokens += k
    return {"window_s": hi - lo, "output_tokens": tokens,
            "output_throughput": tokens / (hi - lo), "concurrency_threshold": threshold}


# ---------------------------------------------------------------- level
def level_metrics(records, duration, concurrency, time_scale=1.0, steady_ratio=0.9):
    """Aggregate figures for one concurrency level.

    records: per-request dicts ('ok', 'error', 'start', 'ttft', 'e2e', 'output_tokens',
    'prompt_tokens', 'chunks', 'spec_accept_length', 'spec_verify_ct').
    duration: wall seconds of the level. time_scale: the simulator's speed factor; measured times
    are divided by it (and rates multiplied) so figures read in the simulated server's seconds.
    """
    if time_scale <= 0:
        raise ValueError("time_scale must be positive")
    ok = [r for r in records if r.get("ok")]
    failed = [r for r in records if not r.get("ok")]
    sim_duration = duration / time_scale if duration else 0.0
    out_tokens = sum(int(r.get("output_tokens") or 0) for r in ok)
    in_tokens = sum(int(r.get("prompt_tokens") or 0) for r in ok)
    ttfts, e2es, tpots, dtps, itls, gaps = [], [], [], [], [], []
    for r in ok:
        d = request_times(r)
        if r.get("ttft") is not None:
            ttfts.append(r["ttft"])
        e2es.append(r["e2e"])
        if d["tpot"] is not None:
            tpots.append(d["tpot"])
            dtps.append(d["decode_tps"])
        itls.extend(d["itl"])
        gaps.extend(d["chunk_gaps"])
    ms = 1000.0 / time_scale
    m = {
        "concurrency": concurrency,
        "completed": len(ok),
        "failed": len(failed),
        "duration_s": sim_duration,
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "output_throughput": (out_tokens / sim_duration) if sim_duration > 0 else None,
        "request_throughput": (len(ok) / sim_duration) if sim_duration > 0 else None,
        "ttft_ms": summarize(ttfts, ms),
        "e2e_latency_ms": summarize(e2es, ms),
        "tpot_ms": summarize(tpots, ms),
        "itl_ms": summarize(itls, ms),
        "chunk_gap_ms": summarize(gaps, ms),
        "decode_tps_per_request": {
            "mean": (mean(dtps) * time_scale) if dtps else None,
            "p50": (percentile(dtps, 50) * time_scale) if dtps else None,
        },
        # bench_serving's "Concurrency": mean number of requests in flight
        "mean_concurrency": (math.fsum(e2es) / duration) if duration else None,
        "tokens_per_chunk": (out_tokens / sum(len(r.get("chunks") or ()) for r in ok))
        if ok and any(r.get("chunks") for r in ok) else None,
    }
    ss = steady_state(records, concurrency, steady_ratio)
    if ss:
        ss = dict(ss, window_s=ss["window_s"] / time_scale,
                  output_throughput=ss["output_throughput"] * time_scale)
    m["steady_state"] = ss
    accepts = [r["spec_accept_length"] for r in ok if r.get("spec_accept_length") is not None]
    verify = [(r.get("output_tokens") or 0, r["spec_verify_ct"]) for r in ok
              if r.get("spec_verify_ct")]
    if verify:
        # token-weighted like the server's counters: sum(tokens) / sum(verify calls)
        m["request_accept_length"] = sum(v[0] for v in verify) / float(sum(v[1] for v in verify))
    else:
        m["request_accept_length"] = mean(accepts)
    hists = [r["spec_hist"] for r in ok if r.get("spec_hist")]
    m["accept_histogram"] = add_histograms(hists) if hists else None
    m["accept_length_bounds_by_depth"] = accept_length_bounds_by_depth(m["accept_histogram"],
                                                                       len(hists))
    groups = error_groups(failed)
    m["errors"] = dict((g["key"], g["count"]) for g in groups)
    m["error_groups"] = [dict((k, g[k]) for k in ("status", "message", "count")) for g in groups]
    total = len(ok) + len(failed)
    m["failure_rate"] = (len(failed) / float(total)) if total else None
    # what the server gave against what was asked: a server that ignores ignore_eos or caps
    # max_tokens makes every per-token figure describe shorter requests than the caller meant
    asked = [r["asked_output_len"] for r in ok if r.get("asked_output_len")]
    m["output_tokens_per_request"] = (out_tokens / float(len(ok))) if ok else None
    m["output_len_asked"] = mean(asked)
    m["short_outputs"] = sum(1 for r in ok if r.get("asked_output_len")
                             and int(r.get("output_tokens") or 0) < r["asked_output_len"])
    counted = [int(r["prompt_tokens"]) for r in ok if r.get("prompt_tokens") is not None]
    m["prompt_tokens_per_request"] = mean(counted)
    reasons = {}
    for r in ok:
        fr = r.get("finish_reason")
        if fr is not None:
            key = fr if isinstance(fr, str) else (fr.get("type") if isinstance(fr, dict) else None)
            key = str(key or fr)
            reasons[key] = reasons.get(key, 0) + 1
    m["finish_reasons"] = reasons
    return m


# ---------------------------------------------------------------- errors
ERROR_MESSAGE_LIMIT = 160
_QUOTED = re.compile("|".join(("b?'(?:[^'\\\\]|\\\\.){32,}'", 'b?"(?:[^"\\\\]|\\\\.){32,}"')), re.S)
_BRACKETED = re.compile(r"\[[^\[\]]{24,}\]", re.S)
_SPACES = re.compile(r"\s+")


def normalise_message(msg, limit=ERROR_MESSAGE_LIMIT):
    """One error message made fit to group on: prompts a server echoes back (long quoted strings,
    long lists such as token ids) elided, whitespace collapsed, length bounded."""
    text = msg if isinstance(msg, str) else str(msg)
    text = _QUOTED.sub("'…'", text)
    # innermost brackets first, so a list of lists collapses too
    for dummy in range(4):
        new = _BRACKETED.sub("[…]", text)
        if new == text:
            break
        text = new
    text = _SPACES.sub(" ", text).strip()
    if len(text) > limit:
        text = text[:limit - 1].rstrip() + "…"
    return text


def _message_of(obj, depth=0):
    """The human message inside an error body of the usual shapes: OpenAI's
    {"error": {"message": ...}}, FastAPI's {"detail": "..."} or {"detail": [{"loc", "msg",
    "input"}]} (the validation "input" is the request echoed back, so it is left out), or
    {"message": ...}."""
    if depth > 4:
        return None
    if isinstance(obj, str):
        return obj
    if isinstance(obj, dict):
        for key in ("error", "detail", "message", "msg"):
            if key in obj:
                got = _message_of(obj[key], depth + 1)
                if got:
                    return got
        return None
    if isinstance(obj, list):
        parts = []
        for item in obj[:3]:
            if isinstance(item, dict) and "msg" in item:
                loc = item.get("loc")
                where = ".".join(str(x) for x in loc) if isinstance(loc, list) else ""
                parts.append(("%s: %s" % (where, item["msg"])) if where else str(item["msg"]))
            else:
                got = _message_of(item, depth + 1)
                if got:
                    parts.append(got)
        return "; ".join(parts) or None
    return None


def error_body_message(body):
    """The normalised message of an HTTP error body (bytes or str; JSON or plain text)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    text = (body or "").strip()
    msg = None
    if text[:1] in ("{", "["):
        try:
            msg = _message_of(json.loads(text))
        except ValueError:
            msg = None
    return normalise_message(msg if msg else text)


def error_groups(failed):
    """Failed records grouped by HTTP status and normalised message, most frequent first:
    [{'key', 'status', 'message', 'count'}]. 'key' reads "HTTP 400: message" (or the message
    alone for a failure without a status)."""
    counts = {}
    order = []
    for r in failed:
        status = r.get("http_status")
        message = normalise_message(r.get("error_message") or r.get("error") or "unknown error")
        k = (status, message)
        if k not in counts:
            counts[k] = 0
            order.append(k)
        counts[k] += 1
    out = []
    for status, message in order:
        key = ("HTTP %s: %s" % (status, message)) if status is not None else message
        out.append({"key": key, "status": status, "message": message,
                    "count": counts[(status, message)]})
    out.sort(key=lambda g: -g["count"])
    return out


# ---------------------------------------------------------------- server counters
_PROM_LINE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfINFaN]+)(\s+-?\d+)?\s*$')


def parse_prometheus(text):
    """Sum every sample of each metric name over its labels: {'name': float}. Comments, histogram
    buckets and unparsable lines are skipped (a scrape is advisory, never fatal)."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        mo = _PROM_LINE.match(line)
        if not mo:
            continue
        try:
            val = float(mo.group(3))
        except ValueError:
            continue
        if math.isnan(val):
            continue
        out[mo.group(1)] = out.get(mo.group(1), 0.0) + val
    return out


GEN_TOKENS = "sglang:generation_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"


def counter_accept_length(before, after):
    """Interval accept length = delta generation tokens / delta verify calls (None if unknown).

    before/after: parse_prometheus() dicts. A counter that went backwards (server restarted in
    between) makes the interval unknown rather than negative."""
    if not before or not after:
        return None
    try:
        dtok = after[GEN_TOKENS] - before[GEN_TOKENS]
        dver = after[VERIFY_CALLS] - before[VERIFY_CALLS]
    except KeyError:
        return None
    if dver <= 0 or dtok < 0:
        return None
    return dtok / dver


def server_info_accept_length(info):
    """internal_states[0].avg_spec_accept_length from /server_info (lifetime average; reset by
    /flush_cache on an idle server)."""
    if not isinstance(info, dict):
        return None
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        val = states[0].get("avg_spec_accept_length")
        if isinstance(val, (int, float)):
            return float(val)
    return None


def client_limit(cpu_fraction, lag_p99_ms, cpu_threshold=0.85, lag_threshold_ms=5.0):
    """(client_limited, reason) from the client's own CPU share of one core and event-loop lag."""
    reasons = []
    if cpu_fraction is not None and cpu_fraction > cpu_threshold:
        reasons.append("client CPU at %.0f%% of one core (> %.0f%%)"
                       % (cpu_fraction * 100, cpu_threshold * 100))
    if lag_p99_ms is not None and lag_p99_ms > lag_threshold_ms:
        # lag also grows when other processes take the client's core: either way the client's
        # timestamps were late, so its latencies are not the server's alone
        reasons.append("event-loop lag p99 %.1f ms (> %.1f ms): the client did not run on time "
                       "(its own load or other processes on its core)"
                       % (lag_p99_ms, lag_threshold_ms))
    return (bool(reasons), "; ".join(reasons) if reasons else None)
