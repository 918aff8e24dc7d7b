# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decision logic of the MTP/EAGLE tuning loop, as pure functions exposed as Jinja filters.

The role ``mtp_tune`` only moves data around (restart, wait, benchmark, record); every decision
(which candidate next, whether to retry smaller, who won, whether a converged server still
performs) is made here so that it can be unit-tested without a server.

Vocabulary
----------
candidate
    ``{"steps": int, "topk": int, "draft_tokens": int, "key": "s4-k1-d5"}``.
attempt
    one server launch (or a resumed record of one): ``{"key", "candidate", "overrides",
    "fit_rung", "status": "ok"|"failed", "failure_class", "journal_tail", "metrics": {C: {...}},
    "timings": {...}}``.  ``metrics`` is the ``sglang_bench`` fact as returned (keyed by the
    concurrency as a string); the extraction below tolerates flat (``ttft_p99_ms``) and nested
    (``ttft_ms: {p99: ..}``) spellings so that the stored raw record stays the source of truth.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import as_number as _num, level_metrics

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - ansible is always present where filters run
    class AnsibleFilterError(Exception):
        pass


OBJECTIVES = ("latency", "throughput", "slo")
STRATEGIES = ("sweep", "adaptive")
# Failure classes (sglang_service_wait's names) whose cause shrinks with fewer running requests
# (the hybrid state pool, the budget it leaves) or a smaller CUDA-graph batch (capture); only
# those are worth a fit-retry (bad_args, port_in_use, no_gpu or a timeout would fail the same way
# again).
DEFAULT_FIT_CLASSES = ("oom_weights", "oom_hybrid_state", "oom_kv_cache", "cuda_graph_capture", "cuda_oom")


# --------------------------------------------------------------------------- helpers

def _int(value, what):
    """Strict integer: booleans and non-integral floats are refused (YAML `yes` is not 1)."""
    if isinstance(value, bool):
        raise AnsibleFilterError("%s must be an integer, got %r" % (what, value))
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        return int(value.strip())
    raise AnsibleFilterError("%s must be an integer, got %r" % (what, value))


def _frac(value, what, default):
    if value is None or value == "":
        return default
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError("%s must be a number (a fraction, 0.03 = 3 %%), got %r" % (what, value))
    if out < 0 or math.isnan(out):
        raise AnsibleFilterError("%s must be >= 0, got %r" % (what, value))
    return out


def candidate_key(candidate):
    return "s%d-k%d-d%d" % (candidate["steps"], candidate["topk"], candidate["draft_tokens"])


def _cost(candidate):
    # Draft tokens set the verify width (compute and CUDA-graph memory); at equal width fewer
    # steps means fewer draft forwards.  This is the order "cheaper wins a tie" refers to.
    return (candidate["draft_tokens"], candidate["steps"], candidate["topk"])


# --------------------------------------------------------------------------- candidates

def mtp_tune_candidates(steps, topk=None, draft_tokens=None):
    """Normalise the operator's lists into candidates ordered from cheapest to dearest.

    ``steps`` is a list of positive integers; ``topk`` a list (default ``[1]``).  With topk 1,
    SGLang forces draft tokens to steps + 1, so that is what is rendered.  With topk > 1 the
    draft tree size must be given in ``draft_tokens`` (each value within steps+1 .. steps*topk+1,
    the range SGLang's own bench_speculative keeps); pairs outside that range are dropped.
    """
    if steps is None or isinstance(steps, (str, bytes, dict)) or not hasattr(steps, "__iter__"):
        raise AnsibleFilterError("mtp_tune_steps must be a non-empty list of integers, got %r" % (steps,))
    steps_list = [_int(s, "mtp_tune_steps item") for s in steps]
    if not steps_list:
        raise AnsibleFilterError("mtp_tune_steps is empty: give at least one speculative step count, e.g. [3, 4, 5]")
    bad = [s for s in steps_list if s < 1]
    if bad:
        raise AnsibleFilterError("mtp_tune_steps items must be >= 1, got %r" % bad)
    topks = [1] if topk in (None, "", []) else topk
    if isinstance(topks, (str, bytes, dict)) or not hasattr(topks, "__iter__"):
        topks = [topks]
    topks = [_int(k, "mtp_tune_topk item") for k in topks]
    if any(k < 1 for k in topks):
        raise AnsibleFilterError("mtp_tune_topk items must be >= 1, got %r" % topks)
    drafts = [] if draft_tokens in (None, "") else draft_tokens
    if isinstance(drafts, (str, bytes, dict)) or not hasattr(drafts, "__iter__"):
        drafts = [drafts]
    drafts = [_int(d, "mtp_tune_draft_tokens item") for d in drafts]
    if any(k > 1 for k in topks) and not drafts:
        raise AnsibleFilterError(
            "mtp_tune_topk has a value > 1: give mtp_tune_draft_tokens too (SGLang needs the draft "
            "tree size when topk > 1; only topk 1 implies draft tokens = steps + 1)")
    out = {}
    for k in topks:
        for s in steps_list:
            if k == 1:
                pairs = [s + 1]
            else:
                pairs = [d for d in drafts if s + 1 <= d <= s * k + 1]
            for d in pairs:
                cand = {"steps": s, "topk": k, "draft_tokens": d}
                cand["key"] = candidate_key(cand)
                out[cand["key"]] = cand
    if not out:
        raise AnsibleFilterError(
            "no valid candidate: every mtp_tune_draft_tokens value is outside steps+1 .. steps*topk+1")
    return sorted(out.values(), key=_cost)


def mtp_tune_levels(levels, objective="latency", level=None):
    """Validate the concurrency list and return ``(levels, objective level)`` as a dict.

    Fails when the list is empty, holds a non-integer, or does not contain the level the
    objective is judged at (checked before any restart, so a typo costs nothing).
    """
    if levels is None or isinstance(levels, (str, bytes, dict)) or not hasattr(levels, "__iter__"):
        raise AnsibleFilterError("mtp_tune_concurrency must be a non-empty list of integers, got %r" % (levels,))
    lv = sorted(set(_int(c, "mtp_tune_concurrency item") for c in levels))
    if not lv:
        raise AnsibleFilterError("mtp_tune_concurrency is empty: give the concurrency levels to benchmark, e.g. [1, 4, 16, 32]")
    if lv[0] < 1:
        raise AnsibleFilterError("mtp_tune_concurrency items must be >= 1, got %r" % lv)
    if objective not in OBJECTIVES:
        raise AnsibleFilterError("mtp_tune_objective must be one of %s, got %r" % (", ".join(OBJECTIVES), objective))
    if level in (None, ""):
        lvl = {"latency": 1, "throughput": lv[-1], "slo": None}[objective]
    else:
        lvl = _int(level, "mtp_tune_level")
    if lvl is not None and lvl not in lv:
        raise AnsibleFilterError(
            "objective %s is judged at concurrency %d, which is not in mtp_tune_concurrency %r: "
            "add it to the list or set mtp_tune_level to one of the listed levels" % (objective, lvl, lv))
    return {"levels": lv, "level": lvl}


# --------------------------------------------------------------------------- metrics

def mtp_tune_level_metrics(level):
    """Flatten one ``sglang_bench`` level into the figures the tuner reasons about (None where absent)."""
    return level_metrics(level)


def _level(attempt, c):
    metrics = (attempt or {}).get("metrics") or {}
    node = metrics.get(str(c))
    if node is None:
        node = metrics.get(c)
    return node


def _interval(value, ci, noise):
    """The band a figure could be in: the benchmark's CI when it repeated, else +/- noise."""
    if ci is not None:
        return (min(ci[0], value), max(ci[1], value))
    return (value * (1.0 - noise), value * (1.0 + noise))


# --------------------------------------------------------------------------- scoring

def mtp_tune_score(attempt, objective="latency", level=None, slo_min_tps=None, slo_max_ttft_p99_ms=None,
                   noise=0.015, tps_stat="mean"):
    """Score one attempt for an objective.

    Returns ``{"value", "low", "high", "level", "feasible", "reason"}``; ``value`` is None when
    the attempt failed, misses the level, or (slo) meets the constraints at no level.

    - latency: per-request decode tok/s (``tps_stat``: mean or p50) at ``level`` (default 1);
    - throughput: aggregate output tok/s at ``level`` (default: the highest measured level);
    - slo: the best aggregate over the levels (or only ``level``) where per-request tok/s >=
      ``slo_min_tps`` and/or TTFT p99 <= ``slo_max_ttft_p99_ms``; p99 on purpose, a mean hides
      the tail the SLO is about.
    """
    noise = _frac(noise, "mtp_tune_noise", 0.015)
    if objective not in OBJECTIVES:
        raise AnsibleFilterError("objective must be one of %s, got %r" % (", ".join(OBJECTIVES), objective))
    if tps_stat not in ("mean", "p50"):
        raise AnsibleFilterError("tps_stat must be mean or p50, got %r" % (tps_stat,))
    res = {"value": None, "low": None, "high": None, "level": None, "feasible": False, "reason": ""}
    if not attempt or attempt.get("status") != "ok":
        res["reason"] = "not measured" if not attempt else "failed: %s" % (attempt.get("failure_class") or "unknown")
        return res
    metrics = attempt.get("metrics") or {}
    measured = sorted(int(k) for k in metrics.keys() if str(k).lstrip("-").isdigit())
    if objective == "slo":
        if slo_min_tps in (None, "") and slo_max_ttft_p99_ms in (None, ""):
            raise AnsibleFilterError(
                "objective slo needs mtp_tune_slo_min_tps and/or mtp_tune_slo_max_ttft_p99_ms")
        levels = [_int(level, "level")] if level not in (None, "") else measured
    else:
        if level in (None, ""):
            level = 1 if objective == "latency" else (measured[-1] if measured else None)
        levels = [_int(level, "level")] if level is not None else []
    best = None
    reasons = []
    for c in levels:
        node = _level(attempt, c)
        if node is None:
            reasons.append("C=%d not measured" % c)
            continue
        m = mtp_tune_level_metrics(node)
        if m["failed"]:
            reasons.append("C=%d had %d failed requests" % (c, int(m["failed"])))
            continue
        tps = m["decode_tps_mean"] if tps_stat == "mean" else m["decode_tps_p50"]
        if objective == "latency":
            if tps is None:
                reasons.append("C=%d has no per-request tok/s" % c)
                continue
            ci = m["decode_tps_ci"] if tps_stat == "mean" else m["decode_tps_p50_ci"]
            cand = (tps, ci, c)
        else:
            if m["output_throughput"] is None:
                reasons.append("C=%d has no output_throughput" % c)
                continue
            if objective == "slo":
                if slo_min_tps not in (None, "") and (tps is None or tps < float(slo_min_tps)):
                    reasons.append("C=%d per-request %s tok/s < %s" % (c, "?" if tps is None else "%.1f" % tps, slo_min_tps))
                    continue
                ttft = m["ttft_p99_ms"]
                if slo_max_ttft_p99_ms not in (None, "") and (ttft is None or ttft > float(slo_max_ttft_p99_ms)):
                    reasons.append("C=%d TTFT p99 %s ms > %s" % (c, "?" if ttft is None else "%.0f" % ttft, slo_max_ttft_p99_ms))
                    continue
            cand = (m["output_throughput"], m["output_throughput_ci"], c)
        if best is None or cand[0] > best[0]:
            best = cand
    if best is None:
        res["reason"] = "; ".join(reasons) or "no level to judge"
        return res
    lo, hi = _interval(best[0], best[1], noise)
    res.update(value=best[0], low=lo, high=hi, level=best[2], feasible=True,
               reason="ci" if best[1] is not None else "noise band +/-%g%%" % (noise * 100))
    return res


# --------------------------------------------------------------------------- per-candidate state

def _fit_classes(classes):
    if classes in (None, ""):
        return DEFAULT_FIT_CLASSES
    return tuple(str(c).lower() for c in classes)


def _state(attempts, fit_retry, ladder_len, fit_classes):
    """Per candidate key: the attempts, the deciding attempt, and whether a fit-retry is pending."""
    states = {}
    for att in attempts or []:
        key = att.get("key") or candidate_key(att["candidate"])
        st = states.setdefault(key, {"attempts": [], "ok": None, "pending_rung": None, "done": False})
        st["attempts"].append(att)
    for key, st in states.items():
        oks = [a for a in st["attempts"] if a.get("status") == "ok"]
        if oks:
            st["ok"] = oks[-1]
            st["done"] = True
            continue
        last = st["attempts"][-1]
        if last.get("status") == "skipped":
            st["done"] = True
            continue
        rung = last.get("fit_rung")
        rung = -1 if rung is None else int(rung)
        cls = str(last.get("failure_class") or "").lower()
        if fit_retry and cls in fit_classes and rung + 1 < ladder_len:
            st["pending_rung"] = rung + 1
        else:
            st["done"] = True
    return states


def mtp_tune_measured(attempts, candidates, levels=None):
    """Keys of candidates already decided in ``attempts`` (resume): measured at every level
    in ``levels`` (a re-run that adds a level re-measures), or failed for good."""
    keys = set(c["key"] for c in candidates or [])
    want = [str(c) for c in (levels or [])]
    out = []
    for key, st in _state(attempts, False, 0, ()).items():
        if key not in keys or not st["done"]:
            continue
        if st["ok"] is not None:
            got = set(str(k) for k in (st["ok"].get("metrics") or {}))
            if not all(c in got for c in want):
                continue
        out.append(key)
    return [c["key"] for c in candidates if c["key"] in out]


def mtp_tune_resume(loaded, candidates, levels=None, force=False):
    """Attempts of a loaded results.json worth keeping for this run.

    Kept: attempts of candidates still in the list whose outcome is final (measured at all of
    today's levels, or failed); a candidate measured at fewer levels is re-measured.  With
    ``force`` nothing is kept (the writer sets the old file aside first).
    """
    if force or not loaded:
        return []
    atts = loaded.get("attempts") if isinstance(loaded, dict) else loaded
    if not isinstance(atts, list):
        raise AnsibleFilterError("results file has no 'attempts' list; set mtp_tune_force=true to start afresh")
    done = set(mtp_tune_measured(atts, candidates, levels))
    kept = []
    for att in atts:
        if (att.get("key") or candidate_key(att["candidate"])) in done:
            att = dict(att)
            att["resumed"] = True  # not a launch of this run: max_launches and the report count only new ones
            kept.append(att)
    return kept


# --------------------------------------------------------------------------- fit-retry ladder

def mtp_tune_fit_ladder(cuda_graph_max_bs=None, max_running_requests=None, bs_floor=4, mrr_floor=1,
                        default_bs=512, default_mrr=48):
    """Settings to retry a candidate that did not fit, in SGLang's documented OOM order.

    First the decode CUDA-graph batch size halves down to ``bs_floor`` (graph memory scales with
    batch x draft tokens), then, at that floor, ``--max-running-requests`` halves down to
    ``mrr_floor`` (KV reserved for running requests).  Unset values start from SGLang's own
    defaults on big GPUs (512 graph bs; 48 running requests once speculation is on).
    Each rung is ``{"cuda_graph_max_bs": int, "max_running_requests": int|None}``.
    """
    bs = _int(cuda_graph_max_bs if cuda_graph_max_bs not in (None, "") else default_bs, "cuda_graph_max_bs")
    floor = _int(bs_floor, "bs_floor")
    mfloor = _int(mrr_floor, "mrr_floor")
    if bs < 1 or floor < 1 or mfloor < 1:
        raise AnsibleFilterError("fit ladder values must be >= 1")
    mrr_given = None if max_running_requests in (None, "") else _int(max_running_requests, "max_running_requests")
    rungs = []
    cur = bs
    while cur > floor:
        cur = max(floor, cur // 2)
        rungs.append({"cuda_graph_max_bs": cur, "max_running_requests": mrr_given})
    last_bs = cur
    mrr = mrr_given if mrr_given is not None else _int(default_mrr, "default_mrr")
    while mrr > mfloor:
        mrr = max(mfloor, mrr // 2)
        rungs.append({"cuda_graph_max_bs": min(last_bs, mrr), "max_running_requests": mrr})
    return rungs


# --------------------------------------------------------------------------- search

def _seed_index(cands, seed):
    if not cands:
        return None
    seed = _int(seed, "mtp_tune_seed")
    return min(range(len(cands)), key=lambda i: (abs(cands[i]["steps"] - seed), cands[i]["steps"]))


def _climb(lane, scores, seed_idx, min_gain):
    """Next index to try in one lane (cheapest -> dearest), or None when the climb is over.

    ``scores``: index -> float (measured; infeasible counts 0.0) or None (failed for good).
    """
    n = len(lane)
    if seed_idx not in scores:
        return seed_idx
    ok = dict((i, s) for i, s in scores.items() if s is not None)
    if not ok:
        # Nothing started yet: deep speculation is what usually does not fit, so walk down.
        below = [i for i in range(min(scores)) if i not in scores]
        return below[-1] if below else None
    b = max(ok, key=lambda i: (ok[i], -i))
    if ok[b] <= 0:
        # Nothing meets the SLO yet: there is no slope to follow, so widen the search outward.
        above = list(range(max(scores) + 1, n))
        below = [i for i in range(min(scores)) if i not in scores]
        return above[0] if above else (below[-1] if below else None)
    up = b + 1
    if up < n and up not in scores:
        prev = b - 1
        if prev not in ok:
            return up
        if ok[prev] <= 0 or ok[b] / ok[prev] - 1.0 >= min_gain:
            return up
    down = b - 1
    if down >= 0 and down not in scores and (up >= n or up in scores):
        # The step above did not beat b (or there is none): the peak may lie below the seed.
        return down
    return None


def _cannot_fit(cand, states, fit_classes):
    """True when a cheaper candidate of the same topk failed for good on memory: a wider draft
    tree needs at least as much memory, so launching this one would only fail again."""
    for st in states.values():
        if not st["done"] or st["ok"] is not None:
            continue
        last = st["attempts"][-1]
        if str(last.get("failure_class") or "").lower() not in fit_classes:
            continue
        other = last.get("candidate") or {}
        if other.get("topk") == cand["topk"] and other.get("draft_tokens", 0) <= cand["draft_tokens"] \
                and other.get("steps", 0) <= cand["steps"]:
            return True
    return False


def _labelled(nxt):
    cand = nxt["candidate"]
    ov = ", ".join("%s=%s" % (k, v) for k, v in sorted((nxt["overrides"] or {}).items()) if v is not None)
    nxt["label"] = "steps=%s topk=%s draft=%s%s (%s)" % (cand["steps"], cand["topk"], cand["draft_tokens"],
                                                         " [%s]" % ov if ov else "", nxt["reason"])
    return nxt


def mtp_tune_next(attempts, candidates, strategy="adaptive", min_gain=0.03, objective="latency", level=None,
                  seed=3, fit_retry=False, fit_ladder=None, fit_classes=None, max_launches=None,
                  slo_min_tps=None, slo_max_ttft_p99_ms=None, noise=0.015):
    """The next server launch, or None when the search is over.

    Returns ``{"candidate", "overrides", "fit_rung", "reason", "label"}``.  A pending fit-retry of the
    last failed candidate comes first (same steps, next rung of ``fit_ladder``).  Then:

    - sweep: the cheapest candidate not yet decided;
    - adaptive: per topk lane a hill-climb from the candidate nearest ``seed``: climb while the
      last step gained >= ``min_gain``; stop at the first failure past the peak; go below the seed
      when the step above it did not improve; never launch a candidate a cheaper one proved
      cannot fit.
    """
    if strategy not in STRATEGIES:
        raise AnsibleFilterError("mtp_tune_strategy must be sweep or adaptive, got %r" % (strategy,))
    min_gain = _frac(min_gain, "mtp_tune_min_gain", 0.03)
    ladder = list(fit_ladder or [])
    classes = _fit_classes(fit_classes)
    attempts = list(attempts or [])
    launches = sum(1 for a in attempts if a.get("status") in ("ok", "failed") and not a.get("resumed"))
    if max_launches not in (None, "") and launches >= _int(max_launches, "mtp_tune_max_launches"):
        return None
    states = _state(attempts, bool(fit_retry), len(ladder), classes)
    by_key = dict((c["key"], c) for c in candidates)
    # A pending fit-retry finishes before anything else starts: its answer matters to the climb.
    for att in reversed(attempts):
        key = att.get("key") or candidate_key(att["candidate"])
        st = states.get(key)
        if st and st["pending_rung"] is not None and key in by_key:
            rung = st["pending_rung"]
            return _labelled({"candidate": by_key[key], "overrides": ladder[rung], "fit_rung": rung,
                              "reason": "fit-retry %d/%d after %s" % (rung + 1, len(ladder), att.get("failure_class"))})
        break
    if strategy == "sweep":
        for cand in candidates:
            if cand["key"] not in states:
                return _labelled({"candidate": cand, "overrides": {}, "fit_rung": None, "reason": "sweep"})
        return None
    lanes = {}
    for cand in candidates:
        lanes.setdefault(cand["topk"], []).append(cand)
    for topk in sorted(lanes):
        lane = lanes[topk]
        seed_idx = _seed_index(lane, seed)
        while True:
            scores = {}
            for i, cand in enumerate(lane):
                st = states.get(cand["key"])
                if st is None:
                    continue
                if st["ok"] is None:
                    scores[i] = None
                    continue
                sc = mtp_tune_score(st["ok"], objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
                scores[i] = sc["value"] if sc["value"] is not None else 0.0
            idx = _climb(lane, scores, seed_idx, min_gain)
            if idx is None:
                break
            cand = lane[idx]
            if _cannot_fit(cand, states, classes):
                # Decide it without a launch and let the climb move on.
                states[cand["key"]] = {"attempts": [{"candidate": cand, "status": "skipped"}], "ok": None,
                                       "pending_rung": None, "done": True}
                continue
            if idx == seed_idx:
                reason = "adaptive: seed"
            elif scores and idx > max(i for i in scores):
                reason = "adaptive: climbing"
            else:
                reason = "adaptive: below the seed"
            return _labelled({"candidate": cand, "overrides": {}, "fit_rung": None, "reason": reason})
    return None


# --------------------------------------------------------------------------- choosing

def _decided(attempts):
    """The deciding attempt per candidate: its last successful launch, else its last failure."""
    out = {}
    for att in attempts or []:
        key = att.get("key") or candidate_key(att["candidate"])
        prev = out.get(key)
        if prev is None or att.get("status") == "ok" or prev.get("status") != "ok":
            out[key] = att
    return out


def mtp_tune_rank(attempts, objective="latency", level=None, slo_min_tps=None, slo_max_ttft_p99_ms=None,
                  noise=0.015):
    """Every candidate's score, best first (failed and infeasible last, cheapest first among them)."""
    rows = []
    for key, att in _decided(attempts).items():
        sc = mtp_tune_score(att, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
        rows.append({"key": key, "candidate": att.get("candidate"), "overrides": att.get("overrides") or {},
                     "score": sc, "status": att.get("status")})
    rows.sort(key=lambda r: (r["score"]["value"] is None, -(r["score"]["value"] or 0.0), _cost(r["candidate"])))
    return rows


def mtp_tune_pick_best(attempts, objective="latency", level=None, slo_min_tps=None, slo_max_ttft_p99_ms=None,
                       noise=0.015):
    """The winner, with the CI-aware tie rule.

    The top scorer wins outright only when its interval lies above the runner-up's (beyond
    noise).  Otherwise every candidate whose interval overlaps the top one is a statistical tie,
    and the cheapest of them (fewest draft tokens, then fewest steps) wins: it costs less memory
    and degrades more gently when real prompts accept fewer drafts.

    Returns ``{"winner": row|None, "runner_up": row|None, "tied": [keys], "decided_by": ..., "ranking": rows}``.
    """
    rank = mtp_tune_rank(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    scored = [r for r in rank if r["score"]["value"] is not None]
    out = {"winner": None, "runner_up": None, "tied": [], "decided_by": "no feasible candidate", "ranking": rank}
    if not scored:
        return out
    top = scored[0]
    if len(scored) == 1:
        out.update(winner=top, decided_by="only measured candidate")
        return out
    tied = [r for r in scored if r["score"]["high"] >= top["score"]["low"]]
    if len(tied) == 1:
        out.update(winner=top, runner_up=scored[1], decided_by="beats the runner-up beyond noise")
        return out
    cheapest = min(tied, key=lambda r: _cost(r["candidate"]))
    others = [r for r in scored if r is not cheapest]
    out.update(winner=cheapest, runner_up=others[0] if others else None, tied=[r["key"] for r in tied],
               decided_by="tie within noise with %s: the cheapest wins" %
               ", ".join(r["key"] for r in tied if r is not cheapest))
    return out


def mtp_tune_winner(attempts, objective="latency", level=None, slo_min_tps=None, slo_max_ttft_p99_ms=None,
                    noise=0.015, previous=None, now=None):
    """The winner as stored in results.json (compact), or None.

    ``decided_at`` is kept from ``previous`` (the stored winner) when the same setting still
    wins, so a re-run that changes nothing also writes nothing new.
    """
    best = mtp_tune_pick_best(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    w = best["winner"]
    if w is None:
        return None
    cand = dict((k, w["candidate"][k]) for k in ("steps", "topk", "draft_tokens"))
    out = {"key": w["key"], "candidate": cand, "overrides": w["overrides"] or {}, "score": w["score"],
           "decided_by": best["decided_by"], "tied": best["tied"],
           "runner_up": best["runner_up"]["key"] if best["runner_up"] else None, "decided_at": now}
    prev = previous if isinstance(previous, dict) else {}
    if prev.get("key") == out["key"] and (prev.get("overrides") or {}) == out["overrides"] and prev.get("decided_at"):
        out["decided_at"] = prev["decided_at"]
    return out


def mtp_tune_verify(level_metrics, tuned, objective="latency", tolerance=0.05, noise=0.015):
    """Whether a smoke bench after converging is within noise of the tuned figure.

    ``level_metrics``: the smoke bench's level dict; ``tuned``: the winner's score (from
    mtp_tune_score).  Allowed deviation: the larger of ``tolerance`` and the tuned interval.
    """
    tol = _frac(tolerance, "mtp_tune_verify_tolerance", 0.05)
    if not tuned or tuned.get("value") is None:
        return {"ok": False, "value": None, "tuned": None, "delta": None, "reason": "no tuned figure"}
    m = mtp_tune_level_metrics(level_metrics or {})
    value = m["decode_tps_mean"] if objective == "latency" else m["output_throughput"]
    if value is None:
        return {"ok": False, "value": None, "tuned": tuned["value"], "delta": None,
                "reason": "smoke bench returned no figure"}
    ref = float(tuned["value"])
    band = max(tol, (ref - float(tuned.get("low") or ref)) / ref if ref else 0.0)
    delta = (value - ref) / ref if ref else 0.0
    ok = delta >= -band and not m["failed"]
    return {"ok": ok, "value": value, "tuned": ref, "delta": delta, "band": band,
            "reason": "within %.1f%%" % (band * 100) if ok else
            "%.1f%% below the tuned figure (allowed %.1f%%)" % (-delta * 100, band * 100)}


def mtp_tune_progress(attempt, attempts, objective="latency", level=None, slo_min_tps=None,
                      slo_max_ttft_p99_ms=None, noise=0.015):
    """One compact line per launch for a person watching the run."""
    cand = attempt.get("candidate") or {}
    head = "steps=%s topk=%s draft=%s" % (cand.get("steps"), cand.get("topk"), cand.get("draft_tokens"))
    ov = attempt.get("overrides") or {}
    if ov:
        head += " [%s]" % ", ".join("%s=%s" % (k, v) for k, v in sorted(ov.items()) if v is not None)
    if attempt.get("status") == "ok":
        parts = []
        for c in sorted((attempt.get("metrics") or {}), key=int):
            m = mtp_tune_level_metrics(_level(attempt, c))
            tps = m["decode_tps_mean"]
            parts.append("C%s %s/%s" % (c, "-" if tps is None else "%.0f" % tps,
                                        "-" if m["output_throughput"] is None else "%.0f" % m["output_throughput"]))
        body = "ok, tok/s per-request/aggregate: " + " ".join(parts)
    else:
        body = "FAILED (%s)" % (attempt.get("failure_class") or "unknown")
    best = mtp_tune_pick_best(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    if best["winner"]:
        w = best["winner"]
        tail = "best so far: %s (%s %.1f at C=%s)" % (w["key"], objective, w["score"]["value"], w["score"]["level"])
    else:
        tail = "best so far: none"
    return "%s: %s | %s" % (head, body, tail)


class FilterModule(object):
    """Filters of the MTP tuning loop."""

    def filters(self):
        return {
            "mtp_tune_candidates": mtp_tune_candidates,
            "mtp_tune_levels": mtp_tune_levels,
            "mtp_tune_level_metrics": mtp_tune_level_metrics,
            "mtp_tune_score": mtp_tune_score,
            "mtp_tune_rank": mtp_tune_rank,
            "mtp_tune_pick_best": mtp_tune_pick_best,
            "mtp_tune_winner": mtp_tune_winner,
            "mtp_tune_next": mtp_tune_next,
            "mtp_tune_fit_ladder": mtp_tune_fit_ladder,
            "mtp_tune_measured": mtp_tune_measured,
            "mtp_tune_resume": mtp_tune_resume,
            "mtp_tune_verify": mtp_tune_verify,
            "mtp_tune_progress": mtp_tune_progress,
            "mtp_tune_key": candidate_key,
        }
