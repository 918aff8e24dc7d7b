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

from ansible_collections.blackwell.sglang.plugins.module_utils.bench_metrics import (
    accept_length_high_deeper, accept_lengths_by_depth)
from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import as_number as _num, level_metrics

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - ansible is always present where filters run
    class AnsibleFilterError(Exception):
        pass


OBJECTIVES = ("latency", "throughput", "slo")
STRATEGIES = ("sweep", "adaptive")
SEARCH_LEVELS = ("judged", "all")
# The reason of a launch that completes a contender's table at every level (mtp_tune_complete).
COMPLETE_REASON = "levels "
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


def mtp_tune_levels(levels, objective="latency", level=None, search="judged"):
    """Validate the concurrency list and return ``{"levels", "level", "search"}``.

    ``level`` is the concurrency the objective is judged at (None: the slo objective judged over
    every level); ``search`` the levels each launch of the search benchmarks: with
    ``search=judged`` only the judged level, since no other figure moves a decision (the winner
    and the candidates tied with it are measured at every level afterwards, mtp_tune_complete);
    with ``search=all`` (or the slo objective without a level) every level.

    Fails when the list is empty, holds a non-integer, or does not contain the level the
    objective is judged at (checked before any restart, so a typo costs nothing).
    """
    if search not in SEARCH_LEVELS:
        raise AnsibleFilterError("mtp_tune_search_levels must be one of %s, got %r" % (", ".join(SEARCH_LEVELS), search))
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
    return {"levels": lv, "level": lvl, "search": [lvl] if (search == "judged" and lvl is not None) else lv}


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


def _repeats(node, figure):
    """How many benchmark repeats a figure is the mean of (1 without a confidence interval)."""
    ci = ((node or {}).get("ci") or {}).get(figure) if isinstance(node, dict) else None
    n = _num(ci.get("n")) if isinstance(ci, dict) else None
    return int(n) if n and n >= 1 else 1


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
    res = {"value": None, "low": None, "high": None, "level": None, "feasible": False, "reason": "",
           "n": 0, "half": None}
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
            fig = "decode_tps_per_request_mean" if tps_stat == "mean" else "decode_tps_per_request_p50"
            cand = (tps, _repeats(node, fig), c)
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
            cand = (m["output_throughput"], _repeats(node, "output_throughput"), c)
        if best is None or cand[0] > best[0]:
            best = cand
    if best is None:
        res["reason"] = "; ".join(reasons) or "no level to judge"
        return res
    # The band of one figure is the operator's noise (the half-width of one measurement),
    # narrowed by the square root of the repeats it averages.  A Student-t interval over 2 or 3
    # repeats is wider than the noise it estimates (t = 12.7 at n = 2) and would make clearly
    # worse settings "ties", so it is not used to decide.
    half = noise / math.sqrt(best[1])
    res.update(value=best[0], low=best[0] * (1.0 - half), high=best[0] * (1.0 + half), level=best[2],
               feasible=True, n=best[1], half=half,
               reason="noise band +/-%.2g%% (%d repeat%s)" % (half * 100, best[1], "" if best[1] == 1 else "s"))
    return res


# --------------------------------------------------------------------------- per-candidate state

def _fit_classes(classes):
    if classes in (None, ""):
        return DEFAULT_FIT_CLASSES
    return tuple(str(c).lower() for c in classes)


def _state(attempts, fit=None, fit_classes=()):
    """Per candidate key: its attempts, the deciding attempt, and the next fit launch if one is due.

    ``fit`` is the plan of mtp_tune_fit_ladder (None: no fit search).  The fit search of a
    candidate that failed on memory bisects the lever its failure class names for the largest
    setting that starts: each launch that starts raises the lower end, each that fails lowers
    the upper end, until the two meet.
    """
    states = {}
    for att in attempts or []:
        key = att.get("key") or candidate_key(att["candidate"])
        st = states.setdefault(key, {"attempts": [], "ok": None, "pending": None, "done": False, "fit": None})
        st["attempts"].append(att)
    for key, st in states.items():
        oks = [a for a in st["attempts"] if a.get("status") == "ok"]
        st["ok"] = oks[-1] if oks else None
        last = st["attempts"][-1]
        if last.get("status") == "skipped":
            st["done"] = True
            continue
        if fit:
            st["fit"] = _fit_progress(st["attempts"], fit, fit_classes)
            if st["fit"] and st["fit"]["next"] is not None:
                st["pending"] = st["fit"]["next"]
                continue
        st["done"] = True
    return states


def mtp_tune_measured(attempts, candidates, levels=None):
    """Keys of candidates already decided in ``attempts`` (resume): measured at every level
    in ``levels`` (a re-run that adds a level re-measures), or failed for good."""
    keys = set(c["key"] for c in candidates or [])
    want = [str(c) for c in (levels or [])]
    out = []
    for key, st in _state(attempts).items():
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


# --------------------------------------------------------------------------- fit search

# What frees the memory each failure class ran out of, in SGLang 0.5.23
# (srt/mem_cache/kv_cache_configurator.py):
# - oom_kv_cache: the KV budget is what the pools leave after the weights; with speculation the
#   hybrid state pool keeps one intermediate state per running request and draft token, so
#   fewer running requests free it (captured graph batch sizes are clamped to
#   max_running_requests too, model_executor/runner/base_cuda_graph_runner.py
#   get_batch_sizes_to_capture);
# - cuda_graph_capture / cuda_oom: graph capture runs in the headroom mem_fraction_static
#   leaves, sized by the largest captured batch x tokens per slot: a smaller
#   cuda-graph-max-bs-decode frees it without capping how many requests run;
# - oom_hybrid_state: with the radix cache on (the default) the state pool is solved from the
#   memory budget alone (_handle_max_mamba_cache), so no running-request limit helps; only a
#   larger mem_fraction_static or fewer draft tokens (a cheaper candidate) do.  Without the
#   radix cache the pool is max_running_requests slots: map it to max_running_requests then;
# - oom_weights: the weights leave no budget under mem_fraction_static for the pools.  With the
#   radix cache on the tuner does not raise the fraction (the failure ends the candidate's fit
#   search; dearer drafts of its lane are not launched).  With --disable-radix-cache the state
#   pool is max_running_requests slots plus one intermediate state per draft token, taken before
#   KV, so fewer running requests leave KV its budget again: both hybrid classes map to
#   max_running_requests then (RADIX_OFF_FIT_LEVERS).
DEFAULT_FIT_LEVERS = {
    "oom_weights": None,
    "oom_hybrid_state": None,
    "oom_kv_cache": "max_running_requests",
    "cuda_graph_capture": "cuda_graph_max_bs",
    "cuda_oom": "cuda_graph_max_bs",
}
RADIX_OFF_FIT_LEVERS = {"oom_weights": "max_running_requests", "oom_hybrid_state": "max_running_requests"}
# SGLang 0.5.23 sets max_running_requests to 48 when speculative decoding is on and the
# operator left it unset (arg_groups/speculative_hook.py).
SPEC_DEFAULT_MRR = 48


def mtp_tune_fit_ladder(cuda_graph_max_bs=None, max_running_requests=None, bs_floor=4, mrr_floor=1,
                        default_bs=512, default_mrr=SPEC_DEFAULT_MRR, levers=None, allow_capped=False,
                        radix_cache=True):
    """The fit search's plan: where each lever starts and how low it may go.

    A candidate that fails on memory is relaunched with the lever its failure class names
    (``levers``: class -> ``max_running_requests`` | ``cuda_graph_max_bs``; default
    DEFAULT_FIT_LEVERS), bisecting for the largest setting that starts in at most
    ceil(log2(range)) + 1 launches.  Unset values start from what SGLang 0.5.23 really uses:
    48 running requests with speculation, and a captured graph batch no larger than that
    (captured sizes are clamped to max_running_requests, so a larger setting changes nothing).
    ``mrr_floor`` is the highest concurrency the objective is judged at: fewer running requests
    would queue that load, so a unit capped below it is not converged unless ``allow_capped``.
    ``radix_cache`` false (the unit passes ``--disable-radix-cache``) sizes the hybrid state pool
    from max_running_requests, so the weights and state classes get that lever by default.
    """
    mrr_given = None if max_running_requests in (None, "") else _int(max_running_requests, "max_running_requests")
    mrr = mrr_given if mrr_given is not None else _int(default_mrr, "default_mrr")
    bs = _int(cuda_graph_max_bs if cuda_graph_max_bs not in (None, "") else default_bs, "cuda_graph_max_bs")
    floor = _int(bs_floor, "bs_floor")
    mfloor = _int(mrr_floor, "mrr_floor")
    if bs < 1 or floor < 1 or mfloor < 1 or mrr < 1:
        raise AnsibleFilterError("fit values must be >= 1 (cuda_graph_max_bs %r, max_running_requests %r, "
                                 "floors %r/%r)" % (bs, mrr, floor, mfloor))
    lev = dict(DEFAULT_FIT_LEVERS)
    if radix_cache is False or str(radix_cache).lower() in ("false", "no", "0"):
        lev.update(RADIX_OFF_FIT_LEVERS)
    if levers not in (None, ""):
        if not isinstance(levers, dict):
            raise AnsibleFilterError("mtp_tune_fit_levers must be a mapping of failure class to lever, got %r" % (levers,))
        for cls, lever in levers.items():
            if lever not in (None, "", "none", "max_running_requests", "cuda_graph_max_bs"):
                raise AnsibleFilterError(
                    "mtp_tune_fit_levers[%s] must be max_running_requests, cuda_graph_max_bs or none, got %r" % (cls, lever))
            lev[str(cls).lower()] = None if lever in (None, "", "none") else lever
    return {"cuda_graph_max_bs": min(bs, mrr), "max_running_requests": mrr, "bs_floor": min(floor, mrr),
            "mrr_floor": 1 if allow_capped else mfloor, "judged_floor": mfloor, "levers": lev,
            "allow_capped": bool(allow_capped)}


def mtp_tune_capped(server, fit, levels=None):
    """The running-request limit a launched server really has, when it is below the highest
    concurrency the objective is judged at and the plan does not allow a capped unit; else None.

    ``server`` is sglang_bench's ``server`` (``effective_max_running_requests`` from the
    scheduler's internal state: SGLang 0.5.23 lowers the limit itself when the KV or hybrid
    state pool is short, logging "max_running_requests is capped to N" / "was reduced from the
    requested"); ``fit`` the plan of mtp_tune_fit_ladder.
    """
    eff = (server or {}).get("effective_max_running_requests") if isinstance(server, dict) else None
    if eff in (None, "") or not isinstance(fit, dict):
        return None
    floor = fit.get("judged_floor") or (max(int(c) for c in levels) if levels else None)
    if floor is None or fit.get("allow_capped"):
        return None
    eff = _int(eff, "effective_max_running_requests")
    return eff if eff < int(floor) else None


def _fit_progress(atts, fit, fit_classes):
    """Bisection state of one candidate's fit search: ``{"lever", "ok", "fail", "next", "capped"}``.

    ``next`` is the overrides of the next launch, None when the search is over (or never began).
    """
    first = None
    for att in atts:
        cls = str(att.get("failure_class") or "").lower()
        if att.get("status") == "failed" and cls in fit_classes:
            first = att
            break
    if first is None:
        return None
    lever = (fit.get("levers") or {}).get(str(first.get("failure_class")).lower())
    if lever is None:
        return {"lever": None, "ok": None, "fail": None, "next": None, "capped": False}
    start = {"max_running_requests": fit["max_running_requests"], "cuda_graph_max_bs": fit["cuda_graph_max_bs"]}
    floor = fit["mrr_floor"] if lever == "max_running_requests" else fit["bs_floor"]
    ok, fail = floor - 1, None
    for att in atts:
        ov = att.get("overrides") or {}
        val = ov.get(lever)
        val = start[lever] if val in (None, "") else int(val)
        if att.get("status") == "ok":
            ok = max(ok, val)
        elif att.get("status") == "failed":
            if str(att.get("failure_class") or "").lower() not in fit_classes:
                return {"lever": lever, "ok": None, "fail": val, "next": None, "capped": False}
            fail = val if fail is None else min(fail, val)
    out = {"lever": lever, "ok": ok if ok >= floor else None, "fail": fail, "next": None,
           "capped": lever == "max_running_requests" and ok >= floor and ok < fit["judged_floor"]}
    if fail is not None and fail - ok > 1:
        mid = (ok + fail) // 2
        nxt = dict(start)
        nxt[lever] = mid
        if lever == "max_running_requests":
            nxt["cuda_graph_max_bs"] = min(start["cuda_graph_max_bs"], mid)
        out["next"] = nxt
    return out


# --------------------------------------------------------------------------- search

def _seed_index(cands, seed):
    if not cands:
        return None
    seed = _int(seed, "mtp_tune_seed")
    return min(range(len(cands)), key=lambda i: (abs(cands[i]["steps"] - seed), cands[i]["steps"]))


def _chain_tau(k, alpha):
    """Tokens per verify round of a chain draft of depth ``k`` accepted with probability alpha."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def _alpha_of(k, tau):
    """The per-token acceptance that gives accept length ``tau`` at depth ``k`` (bisection)."""
    tau = min(max(float(tau), 1.0), float(k + 1))
    lo, hi = 0.0, 1.0
    for _i in range(40):
        mid = (lo + hi) / 2.0
        if _chain_tau(k, mid) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


class _Lane(object):
    """What the launches of one topk lane say about the unmeasured candidates.

    Each launch gives, per concurrency level, per-request and aggregate tok/s and the accept
    length; dividing accept length by a rate gives a time per verify round.  The round time
    grows with the draft depth and, on every server the project knows, at a non-decreasing rate
    (each extra draft token costs at least what the previous one did); the accept length follows
    the chain model, capped at depths shallower than a launch by that launch's histogram of
    correct drafts.  Together they bound every unmeasured candidate's figure from above; where
    the measured points contradict the convexity beyond the noise, only the monotone bound is
    used, and where they contradict monotony, no bound at all (the candidate must be measured).
    """

    def __init__(self, lane, states, objective, level, noise, slo_min_tps, convex=True):
        self.lane = lane
        self.noise = noise
        self.use_convex = convex
        self.objective = objective
        self.slo_min = None if slo_min_tps in (None, "") else float(slo_min_tps)
        self.points = {}  # x (draft tokens - 1) -> {c: (t_pr, t_ag)}
        self.tau = {}
        alphas = []
        measured_levels = set()
        chain = all(c["topk"] == 1 for c in lane)
        self.chain = chain
        for cand in lane:
            st = states.get(cand["key"])
            if not st or st.get("ok") is None:
                continue
            x = cand["draft_tokens"] - 1
            ok = st["ok"]
            levels = {}
            taus = []
            for key in (ok.get("metrics") or {}):
                if not str(key).isdigit():
                    continue
                m = level_metrics(_level(ok, key))
                if m["failed"]:
                    continue
                if m["accept_length"] is not None and m["accept_length"] > 0:
                    taus.append(float(m["accept_length"]))
                levels[int(key)] = m
                measured_levels.add(int(key))
            if not levels:
                continue
            tau = sorted(taus)[len(taus) // 2] if taus else None
            if tau is not None and chain and x >= 1:
                alphas.append(_alpha_of(x, tau))
            self.tau[x] = tau
            self.points[x] = levels
        self.alpha = sum(alphas) / len(alphas) if alphas else None
        # Optimistic end of the acceptance: the highest point estimate plus the noise.
        self.alpha_hi = min(1.0, max(alphas) + 2 * noise) if alphas else 1.0
        for x in self.tau:
            if self.tau[x] is None:
                self.tau[x] = _chain_tau(x, self.alpha if self.alpha is not None else 1.0)
        self.tau_cap = self._histogram_caps(lane, states) if chain else {}
        self.levels = sorted(measured_levels)
        self.series = {}
        for c in self.levels:
            for kind, field in (("pr", "decode_tps_mean"), ("ag", "output_throughput")):
                pts = {}
                for x, lv in self.points.items():
                    m = lv.get(c)
                    if m is not None and m[field]:
                        pts[x] = self.tau[x] / float(m[field])
                self.series[(c, kind)] = self._trust(pts)

    @staticmethod
    def _histogram_caps(lane, states):
        """Upper ends of the accept length at other depths than a launch's, from that launch's
        histogram of correct drafts: shallower ones from ``accept_length_bounds_by_depth`` of
        sglang_bench, deeper ones from ``accept_length_high_deeper`` (what concavity and the
        stretches between wrong guesses allow). Counted, not fitted, so far tighter than the
        chain model's acceptance widened by the noise. Per launch the highest over its levels,
        then the lowest over the launches. The interval counts verify rounds only; the server's
        accept length also counts each request's first token, so each cap is scaled by the
        launch's own ratio of the two."""
        caps = {}
        deepest = max(c["draft_tokens"] - 1 for c in lane) if lane else 0
        for cand in lane:
            st = states.get(cand["key"])
            ok = (st or {}).get("ok")
            if not ok:
                continue
            x = cand["draft_tokens"] - 1
            mine = {}
            for key, node in (ok.get("metrics") or {}).items():
                if not str(key).isdigit() or not isinstance(node, dict):
                    continue
                hist, bounds = node.get("accept_histogram"), node.get("accept_length_bounds_by_depth")
                tau = level_metrics(node)["accept_length"]
                if not hist or len(hist) < 2 or not isinstance(bounds, dict) or not tau or sum(hist) <= 0:
                    continue
                per_round = accept_lengths_by_depth(hist)[str(len(hist) - 1)]
                scale = max(1.0, float(tau) / per_round)
                for depth, pair in bounds.items():
                    k = _num(depth)
                    if k is None or int(k) >= x or not isinstance(pair, (list, tuple)) or len(pair) != 2:
                        continue
                    high = _num(pair[1])
                    if high:
                        mine[int(k)] = max(mine.get(int(k), 0.0), high * scale)
                for k in range(x + 1, deepest + 1):
                    high = accept_length_high_deeper(hist, k, level_metrics(node)["completed"] or 0)
                    if high:
                        mine[k] = max(mine.get(k, 0.0), high * scale)
            for k, high in mine.items():
                caps[k] = min(caps.get(k, float("inf")), high)
        return caps

    def _trust(self, pts):
        n = self.noise
        xs = sorted(pts)
        mono = all(pts[b] * (1 + n) >= pts[a] * (1 - n) for a, b in zip(xs, xs[1:]))
        convex = mono and self.use_convex
        for a, b, c in zip(xs, xs[1:], xs[2:]):
            left = (pts[b] * (1 - n) - pts[a] * (1 + n)) / (b - a)
            right = (pts[c] * (1 + n) - pts[b] * (1 - n)) / (c - b)
            if left > right:
                convex = False
        return {"pts": pts, "xs": xs, "mono": mono, "convex": convex}

    def _t_low(self, series, x):
        """Lower bound of the round time at x (0.0: no bound)."""
        if not series["mono"]:
            return 0.0
        n = self.noise
        pts = series["pts"]
        left = [a for a in series["xs"] if a < x]
        right = [a for a in series["xs"] if a > x]
        low = pts[left[-1]] * (1 - n) if left else 0.0
        if series["convex"]:
            for i, a in enumerate(left):
                for b in left[i + 1:]:
                    slope = (pts[b] * (1 - n) - pts[a] * (1 + n)) / (b - a)
                    low = max(low, pts[b] * (1 - n) + (x - b) * slope)
            for i, a in enumerate(right):
                for b in right[i + 1:]:
                    slope = (pts[b] * (1 + n) - pts[a] * (1 - n)) / (b - a)
                    low = max(low, pts[a] * (1 - n) - (a - x) * slope)
        return max(low, 0.0)

    def _tau_high(self, x):
        if x in self.tau_cap:
            # Counted from a launch's histogram, sound under both models of where a draft's
            # mistakes come from. The chain model's geometric decay is not a bound: on the real
            # self-draft sweep depth 6 accepted 1.84, above what it allows from depth 2 (1.83).
            high = self.tau_cap[x] * (1 + self.noise)
        else:
            high = _chain_tau(x, self.alpha_hi) if self.chain else float(x + 1)
        right = [a for a in sorted(self.tau) if a > x]
        if right:
            high = min(high, self.tau[right[0]] * (1 + self.noise))
        return high

    def _rate_high(self, x, c, kind):
        series = self.series.get((c, kind))
        if series is None or not series["pts"]:
            return float("inf")
        low = self._t_low(series, x)
        return self._tau_high(x) / low if low > 0 else float("inf")

    def _t_mid(self, series, x):
        """Round time at x by linear interpolation of the measured points, extended above the
        dearest; below the cheapest it is taken flat (the most monotony allows): a cheaper
        candidate is predicted at the least it could reach, and reached by rule 2 if at all."""
        pts, xs = series["pts"], series["xs"]
        left = [a for a in xs if a < x]
        right = [a for a in xs if a > x]
        if left and right:
            a, b = left[-1], right[0]
        elif len(left) >= 2:
            a, b = left[-2], left[-1]
        else:
            return pts[xs[0]]
        return max(pts[a] + (x - a) * (pts[b] - pts[a]) / float(b - a), 1e-12)

    def predict(self, cand, level):
        """The figure the model expects (chain acceptance at the fitted alpha, interpolated round time)."""
        x = cand["draft_tokens"] - 1
        if not self.levels:
            return None
        if self.objective == "slo":
            return None
        c = level if level is not None else (1 if self.objective == "latency" else self.levels[-1])
        series = self.series.get((c, "pr" if self.objective == "latency" else "ag"))
        if series is None or not series["pts"]:
            return None
        tau = _chain_tau(x, self.alpha) if (self.chain and self.alpha is not None) else float(x + 1)
        return tau / self._t_mid(series, x)

    def bound(self, cand, level):
        """Upper bound of the candidate's objective figure (inf: unbounded; None: cannot be feasible)."""
        x = cand["draft_tokens"] - 1
        if not self.levels:
            return float("inf")
        if self.objective == "latency":
            c = level if level is not None else 1
            return self._rate_high(x, c, "pr")
        if self.objective == "throughput":
            c = level if level is not None else self.levels[-1]
            return self._rate_high(x, c, "ag")
        best = None
        for c in ([level] if level is not None else self.levels):
            if self.slo_min is not None and self._rate_high(x, c, "pr") < self.slo_min:
                continue
            agg = self._rate_high(x, c, "ag")
            best = agg if best is None else max(best, agg)
        return best


def _cannot_fit(cand, states, fit_classes):
    """True when a cheaper candidate of the same topk failed for good on memory: a wider draft
    tree needs at least as much memory, so launching this one would only fail again."""
    for st in states.values():
        if not st["done"] or st["ok"] is not None:
            continue
        last = st["attempts"][-1]
        if str(last.get("failure_class") or "").lower() not in tuple(fit_classes) + ("capped",):
            continue
        other = last.get("candidate") or {}
        if other.get("topk") == cand["topk"] and other.get("draft_tokens", 0) <= cand["draft_tokens"] \
                and other.get("steps", 0) <= cand["steps"]:
            return True
    return False


def _can_win(ub, cand, best, band):
    """Whether a candidate whose figure is at most ``ub`` could still end as the winner."""
    if ub is None:
        return False
    top, winner = best["top"], best["winner"]
    if top is None:
        return True
    if ub < top["score"]["value"] * (1.0 - band):
        return False  # worse than the top beyond the band: never wins, not even a tie
    if winner is not None and _cost(cand) > _cost(winner["candidate"]) \
            and ub <= winner["score"]["value"] / (1.0 - band):
        return False  # would tie with a cheaper winner at best
    return True


PROBE_ENDS = ("both", "high", "low", "none")


def _acq(ub, pred):
    """Where the next launch is worth most: halfway between what the model expects there and
    the most it could be (an unbounded candidate first: only a measurement bounds it)."""
    if pred is None or ub == float("inf"):
        return ub
    return (ub + pred) / 2.0


def _adaptive_lane(lane, states, seed_idx, probe_ends, best, args):
    """Next candidate of one lane and why, or (None, None) when the search of the lane is over.

    After the seed and the ends ``probe_ends`` names, two rules in turn:

    1. among the candidates the chain-model bounds leave able to win, the one the model
       predicts highest, while that prediction beats the best measured figure (round time
       interpolated between the measured points at the judged level, or extended above them,
       and taken flat below the cheapest; accept length from the fitted chain acceptance).
       This finds a second peak or the far end of a climb without walking to it;
    2. the unmeasured neighbours in the list of the best measured candidate and of every
       candidate within the noise band of it, bounds or not: the answer is then a measured
       local optimum, also where the round times bend the other way than the bounds assume.
    """
    objective, level, noise, slo_min_tps = args
    if lane[seed_idx]["key"] not in states:
        return lane[seed_idx], "adaptive: seed"
    model = _Lane(lane, states, objective, level, noise, slo_min_tps)
    band = math.sqrt(2.0) * noise
    open_ = {}
    for i, cand in enumerate(lane):
        if cand["key"] in states:
            continue
        ub = model.bound(cand, level)
        if _can_win(ub, cand, best, band):
            open_[i] = (ub, model.predict(cand, level))
    keys = [c["key"] for c in lane]
    top = best["top"]
    ref = keys.index(top["key"]) if top and top["key"] in keys else seed_idx
    # Every candidate within the band of the top counts as a best: a near-tie may hide the
    # climb on its other side.
    tops = [ref]
    if top is not None:
        for row in best["ranking"]:
            sc = row["score"]
            if sc["value"] is not None and row["key"] in keys and row["key"] != top["key"] \
                    and sc["value"] >= top["score"]["value"] * (1.0 - _band(noise, top["score"], sc)):
                tops.append(keys.index(row["key"]))
    near = set()
    for i in tops:
        for step in (-1, 1):
            j = i + step
            while 0 <= j < len(lane) and lane[j]["key"] not in states:
                j += step
            if abs(j - i) > 1:
                near.add(i + step)
    near = sorted(near)
    ends = []
    if probe_ends in ("both", "high"):
        ends.append(len(lane) - 1)
    if probe_ends in ("both", "low"):
        ends.append(0)
    for idx in ends:
        if lane[idx]["key"] not in states:
            return lane[idx], "adaptive: the list's %s end" % ("dearest" if idx else "cheapest")
    if top is not None and open_:
        preds = [(p if p is not None else ub, i) for i, (ub, p) in open_.items()]
        val, i = max(preds, key=lambda r: (r[0], -abs(r[1] - ref)))
        if val > top["score"]["value"]:
            return lane[i], "adaptive: predicted %.1f, could reach %.1f" % (val, open_[i][0])
    if near:
        def _rank(i):
            pred = open_.get(i, (None, -1.0))[1]
            return (pred is None, -(pred or 0.0), i)
        i = sorted(near, key=_rank)[0]
        return lane[i], "adaptive: next to the best"
    if top is None and open_:
        return lane[min(open_)], "adaptive: nothing measured yet"
    return None, None


def _labelled(nxt):
    cand = nxt["candidate"]
    ov = ", ".join("%s=%s" % (k, v) for k, v in sorted((nxt["overrides"] or {}).items()) if v is not None)
    nxt["label"] = "steps=%s topk=%s draft=%s%s (%s)" % (cand["steps"], cand["topk"], cand["draft_tokens"],
                                                         " [%s]" % ov if ov else "", nxt["reason"])
    return nxt


def _remeasure(attempts, best, budget):
    """A contender to measure again: the dearer of the top and the cheapest candidate tied with
    it, while their bands still overlap and the budget lasts."""
    if budget in (None, "") or _int(budget, "mtp_tune_remeasure_launches") <= 0:
        return None
    used = sum(1 for a in attempts if str(a.get("reason") or "").startswith("remeasure") and not a.get("resumed"))
    if used >= _int(budget, "mtp_tune_remeasure_launches"):
        return None
    if not best["tied"] or best["top"] is None or best["winner"] is None:
        return None
    pair = [best["top"], best["winner"]]
    row = min(pair, key=lambda r: (r["score"]["n"], _cost(r["candidate"])))
    return {"candidate": row["candidate"], "overrides": row["overrides"] or {}, "fit_rung": None,
            "reason": "remeasure %d/%s: %s ties %s within %.1f%%" % (
                used + 1, budget, best["winner"]["key"], best["top"]["key"], (best["band"] or 0) * 100)}


def _noise_relaunch(attempts, budget):
    """The run's first measured setting again, until it has been launched ``budget`` more times:
    the node's launch-to-launch spread, measured before the search prunes with it."""
    if budget in (None, "") or _int(budget, "mtp_tune_noise_launches") <= 0:
        return None
    used = sum(1 for a in attempts if str(a.get("reason") or "").startswith("noise ") and not a.get("resumed"))
    if used >= _int(budget, "mtp_tune_noise_launches"):
        return None
    first = next((a for a in attempts if a.get("status") == "ok" and not a.get("resumed")), None)
    if first is None:
        return None
    return {"candidate": first["candidate"], "overrides": first.get("overrides") or {}, "fit_rung": None,
            "reason": "noise %d/%s: %s again, to measure how far one launch moves on this node" % (
                used + 1, budget, first.get("key") or candidate_key(first["candidate"]))}


def mtp_tune_next(attempts, candidates, strategy="adaptive", min_gain=0.03, objective="latency", level=None,
                  seed=3, fit_retry=False, fit_ladder=None, fit_classes=None, max_launches=None,
                  slo_min_tps=None, slo_max_ttft_p99_ms=None, noise=0.015, probe_ends="high",
                  remeasure_launches=0, noise_launches=0):
    """The next server launch, or None when the search is over.

    Returns ``{"candidate", "overrides", "fit_rung", "reason", "label"}``.  A pending fit launch
    of the last failed candidate comes first (bisection over the lever its failure class names,
    see mtp_tune_fit_ladder).  Then:

    - sweep: the cheapest candidate not yet decided;
    - adaptive: per topk lane, the candidate nearest ``seed``, then the list's ends
      (``probe_ends``: both, high, low or none), then branch and bound: every unmeasured
      candidate gets an upper bound from what the launches measured (accept length -> chain
      acceptance; time per verify round, non-decreasing in draft depth at a non-decreasing
      rate); candidates that cannot beat the best beyond the noise band (or could only tie a
      cheaper one) are dropped.  Of the rest, the one the chain model predicts highest is
      launched while that prediction beats the best; then the unmeasured neighbours of the best
      (and of any candidate within the band of it) are measured, so the answer is a measured
      local optimum.  The search ends when neither rule has a candidate left.  Never launches a
      candidate a cheaper one proved cannot fit.
    - then, with ``remeasure_launches``, the two contenders tied within the band are measured
      again (the band narrows with the square root of the measurements) until the budget ends.

    With ``noise_launches``, the run's first measured setting is launched that many more times
    before the search goes on: the spread between those launches is the node's noise
    (mtp_tune_node_noise), and every band and bound after it uses that when it is larger than
    ``noise``.

    ``min_gain`` is kept for compatibility with stored settings; the search no longer uses it.
    """
    if strategy not in STRATEGIES:
        raise AnsibleFilterError("mtp_tune_strategy must be sweep or adaptive, got %r" % (strategy,))
    _frac(min_gain, "mtp_tune_min_gain", 0.03)
    noise = _node_noise(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    if probe_ends in (None, ""):
        probe_ends = "high"
    if isinstance(probe_ends, bool):
        probe_ends = "both" if probe_ends else "none"
    if probe_ends not in PROBE_ENDS:
        raise AnsibleFilterError("mtp_tune_probe_ends must be one of %s, got %r" % (", ".join(PROBE_ENDS), probe_ends))
    fit = fit_ladder if (fit_retry and isinstance(fit_ladder, dict)) else None
    classes = _fit_classes(fit_classes)
    attempts = list(attempts or [])
    launches = sum(1 for a in attempts if a.get("status") in ("ok", "failed") and not a.get("resumed"))

    if max_launches not in (None, "") and launches >= _int(max_launches, "mtp_tune_max_launches"):
        return None
    states = _state(attempts, fit, classes)
    by_key = dict((c["key"], c) for c in candidates)
    # A pending fit launch finishes before anything else starts: its answer matters to the search.
    for att in reversed(attempts):
        key = att.get("key") or candidate_key(att["candidate"])
        st = states.get(key)
        if st and st["pending"] is not None and key in by_key:
            f = st["fit"]
            return _labelled({"candidate": by_key[key], "overrides": st["pending"], "fit_rung": len(st["attempts"]),
                              "reason": "fit %s=%s (starts at %s, fails at %s) after %s" % (
                                  f["lever"], st["pending"][f["lever"]], "-" if f["ok"] is None else f["ok"], f["fail"],
                                  st["attempts"][0].get("failure_class"))})
        break
    relaunch = _noise_relaunch(attempts, noise_launches)
    if relaunch:
        return _labelled(relaunch)
    best = mtp_tune_pick_best(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    if strategy == "sweep":
        for cand in candidates:
            if cand["key"] not in states:
                return _labelled({"candidate": cand, "overrides": {}, "fit_rung": None, "reason": "sweep"})
        nxt = _remeasure(attempts, best, remeasure_launches)
        return _labelled(nxt) if nxt else None
    lanes = {}
    for cand in candidates:
        lanes.setdefault(cand["topk"], []).append(cand)
    args = (objective, level, noise, slo_min_tps)
    for topk in sorted(lanes):
        lane = lanes[topk]
        seed_idx = _seed_index(lane, seed)
        while True:
            cand, reason = _adaptive_lane(lane, states, seed_idx, probe_ends, best, args)
            if cand is None:
                break
            if _cannot_fit(cand, states, classes):
                # Decide it without a launch and let the search move on.
                states[cand["key"]] = {"attempts": [{"candidate": cand, "status": "skipped"}], "ok": None,
                                       "pending": None, "done": True, "fit": None}
                continue
            return _labelled({"candidate": cand, "overrides": {}, "fit_rung": None, "reason": reason})
    nxt = _remeasure(attempts, best, remeasure_launches)
    return _labelled(nxt) if nxt else None


def mtp_tune_complete(attempts, levels, objective="latency", level=None, slo_min_tps=None,
                      slo_max_ttft_p99_ms=None, noise=0.015, max_launches=None):
    """After the search: the next contender to launch again and measure at every level, or None.

    A search that benchmarks only the judged level (``mtp_tune_search_levels=judged``) leaves
    the other levels of the report empty; the winner and every candidate tied with it within the
    band are then launched once more with the same settings and measured at all of ``levels``,
    winner first. That launch's judged figure joins the earlier ones like a re-measurement (it
    may move the decision: the new winner is completed in turn). A contender is completed once:
    a failed completing launch is not repeated. Stops at ``max_launches`` like the search.

    Returns ``{"candidate", "overrides", "fit_rung", "reason", "label", "levels"}`` or None.
    """
    want = sorted(set(_int(c, "mtp_tune_concurrency item") for c in (levels or [])))
    attempts = list(attempts or [])
    launches = sum(1 for a in attempts if a.get("status") in ("ok", "failed") and not a.get("resumed"))
    if max_launches not in (None, "") and launches >= _int(max_launches, "mtp_tune_max_launches"):
        return None
    best = mtp_tune_pick_best(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    if best["winner"] is None or not want:
        return None
    by_key = dict((r["key"], r) for r in best["ranking"])
    contenders = [best["winner"]] + [by_key[k] for k in best["tied"] if k != best["winner"]["key"] and k in by_key]
    for row in contenders:
        same = [a for a in attempts if (a.get("key") or candidate_key(a["candidate"])) == row["key"]
                and (a.get("overrides") or {}) == (row["overrides"] or {})]
        if any(str(a.get("reason") or "").startswith(COMPLETE_REASON) for a in same):
            continue
        if any(a.get("status") == "ok" and all(_level(a, c) is not None for c in want) for a in same):
            continue
        role = "the winner" if row is best["winner"] else "tied with the winner"
        nxt = _labelled({"candidate": row["candidate"], "overrides": row["overrides"] or {}, "fit_rung": None,
                         "reason": "%sC=%s: %s, %s, measured at every level for the report" % (
                             COMPLETE_REASON, ",".join(str(c) for c in want), row["key"], role)})
        nxt["levels"] = want
        return nxt
    return None


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def mtp_tune_attempt(launch):
    """The record of one launch as results.json keeps it: the one place its shape is written.

    ``launch`` holds what the role knows after a candidate: ``next`` (mtp_tune_next's or
    mtp_tune_complete's choice), ``run`` (the run id), ``workload`` (the fingerprint), ``ready``
    (the unit came up), ``wait`` (sglang_service_wait's result, {} when it did not run), ``bench``
    (sglang_bench's result, {} or skipped when the unit never came up), ``cap`` (mtp_tune_capped),
    ``judged_floor`` (the fit ladder's), ``started`` (ISO time), ``launch_s`` and ``wall_s``.

    ``status`` is ok when the unit came up, the benchmark ran and SGLang did not cap the running
    requests below the judged floor; otherwise ``failure_class`` says which: the service wait's
    class (``unknown`` when it had none), ``capped`` or ``bench_failed``, and ``failure_line``
    the line that says it. ``metrics`` maps each concurrency level (a string) to its figures:
    every level on success, and on a failed benchmark the levels it did finish.
    """
    if not isinstance(launch, dict) or not isinstance(launch.get("next"), dict):
        raise AnsibleFilterError("mtp_tune_attempt needs a dict with the launch's 'next' choice, got %r" % (launch,))
    nxt = launch["next"]
    wait = launch.get("wait") if isinstance(launch.get("wait"), dict) else {}
    bench = launch.get("bench") if isinstance(launch.get("bench"), dict) else {}
    ready = _truthy(launch.get("ready"))
    cap = launch.get("cap")
    if cap in ("", "None"):
        cap = None
    ok = ready and not _truthy(bench.get("failed", True)) and cap is None
    if ok:
        failure_class = failure_line = None
    elif not ready:
        failure_class, failure_line = wait.get("failure_class") or "unknown", wait.get("failure_line")
    elif cap is not None:
        failure_class = "capped"
        failure_line = ("SGLang capped max_running_requests to %s, below the floor of %s (the judged concurrency or "
                        "mtp_tune_fit_mrr_floor; mtp_tune_fit_allow_capped=true accepts it)"
                        % (cap, launch.get("judged_floor")))
    else:
        failure_class, failure_line = "bench_failed", bench.get("msg")
    levels = bench.get("levels") or []
    metrics = (bench.get("by_concurrency") if ok else
               dict((str(lv.get("concurrency")), lv) for lv in levels if isinstance(lv, dict)))
    launch_s = _num(launch.get("launch_s"))
    return {"key": nxt["candidate"]["key"], "candidate": nxt["candidate"], "overrides": nxt.get("overrides") or {},
            "fit_rung": nxt.get("fit_rung"), "reason": nxt.get("reason"), "run": launch.get("run"),
            "workload": launch.get("workload"), "status": "ok" if ok else "failed",
            "failure_class": failure_class, "failure_line": failure_line,
            "hint": None if ready else wait.get("hint"),
            "journal_tail": [] if ready else (wait.get("journal_tail") or []),
            "metrics": metrics or {}, "bench_warnings": bench.get("bench_warnings") or [],
            "server": bench.get("server"),
            "timings": {"started": launch.get("started"), "launch_s": launch_s, "wait_s": wait.get("seconds"),
                        "bench_s": bench.get("duration_s"), "wall_s": _num(launch.get("wall_s"))}}


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


def _band(noise, *scores):
    """Relative tie band of a difference between figures: their half-widths in quadrature."""
    halves = [sc.get("half") if sc.get("half") is not None else noise for sc in scores]
    return math.sqrt(sum(h * h for h in halves))


def mtp_tune_node_noise(attempts, objective="latency", level=None, slo_min_tps=None, slo_max_ttft_p99_ms=None,
                        noise=0.015):
    """Launch-to-launch noise measured on the node, and the noise the decisions use.

    Every candidate launched more than once with the same settings (a re-measurement, a resumed
    run's repeat) is a sample of how far one launch's figure moves on this node: the pooled
    relative standard deviation over them (degrees of freedom: launches less groups) is the
    measured noise. ``mtp_tune_noise`` is a floor: ``used`` is the larger of the two, so a node
    noisier than the setting widens every band, and a quiet one never narrows it below what the
    operator allowed. On a real H200 a tiny model at C=1 moved 15 % between launches of one
    setting (tests/gpu/real_sglang/README.md), ten times the default floor.

    Returns ``{"floor", "measured", "dof", "groups", "used", "source"}``; ``measured`` is None
    without a repeated launch.
    """
    floor = _frac(noise, "mtp_tune_noise", 0.015)
    groups = {}
    for att in attempts or []:
        if att.get("status") != "ok":
            continue
        key = (att.get("key") or candidate_key(att["candidate"]),
               tuple(sorted((att.get("overrides") or {}).items())))
        sc = mtp_tune_score(att, objective, level, slo_min_tps, slo_max_ttft_p99_ms, floor)
        if sc["value"]:
            groups.setdefault(key, []).append(float(sc["value"]))
    squares, dof, used_groups = 0.0, 0, []
    for (key, dummy), values in sorted(groups.items()):
        if len(values) < 2:
            continue
        m = sum(values) / len(values)
        squares += sum((v / m - 1.0) ** 2 for v in values)
        dof += len(values) - 1
        used_groups.append({"key": key, "launches": len(values)})
    measured = math.sqrt(squares / dof) if dof else None
    used = floor if measured is None else max(floor, measured)
    if measured is None:
        source = "assumed: no setting was launched twice on this node (mtp_tune_noise %.2g%%)" % (floor * 100)
    elif measured > floor:
        source = "measured: %.2g%% between launches of one setting (%d degree%s of freedom), above mtp_tune_noise %.2g%%" % (
            measured * 100, dof, "" if dof == 1 else "s", floor * 100)
    else:
        source = "floor: measured %.2g%% between launches (%d degree%s of freedom), below mtp_tune_noise %.2g%%" % (
            measured * 100, dof, "" if dof == 1 else "s", floor * 100)
    return {"floor": floor, "measured": measured, "dof": dof, "groups": used_groups, "used": used,
            "source": source}


def _node_noise(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise):
    return mtp_tune_node_noise(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)["used"]


def mtp_tune_rank(attempts, objective="latency", level=None, slo_min_tps=None, slo_max_ttft_p99_ms=None,
                  noise=0.015):
    """Every candidate's score, best first (failed and infeasible last, cheapest first among them).

    A candidate measured more than once with the same settings (a re-measurement) is scored
    by the mean of its launches; its band narrows with the square root of the measurements.
    """
    noise = _node_noise(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    atts = list(attempts or [])
    rows = []
    for key, att in _decided(atts).items():
        sc = mtp_tune_score(att, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
        if att.get("status") == "ok" and sc["value"] is not None:
            same = [a for a in atts if (a.get("key") or candidate_key(a["candidate"])) == key
                    and a.get("status") == "ok" and (a.get("overrides") or {}) == (att.get("overrides") or {})]
            if len(same) > 1:
                scs = [mtp_tune_score(a, objective, sc["level"], slo_min_tps, slo_max_ttft_p99_ms, noise) for a in same]
                scs = [x for x in scs if x["value"] is not None]
                if scs:
                    n = sum(x["n"] for x in scs)
                    value = sum(x["value"] * x["n"] for x in scs) / n
                    half = noise / math.sqrt(n)
                    sc = dict(sc, value=value, low=value * (1 - half), high=value * (1 + half), n=n, half=half,
                              launches=len(scs), reason="mean of %d launches, band +/-%.2g%%" % (len(scs), half * 100))
        rows.append({"key": key, "candidate": att.get("candidate"), "overrides": att.get("overrides") or {},
                     "score": sc, "status": att.get("status")})
    rows.sort(key=lambda r: (r["score"]["value"] is None, -(r["score"]["value"] or 0.0), _cost(r["candidate"])))
    return rows


def mtp_tune_pick_best(attempts, objective="latency", level=None, slo_min_tps=None, slo_max_ttft_p99_ms=None,
                       noise=0.015):
    """The winner, with the noise-band tie rule.

    The top scorer wins unless a cheaper candidate is within the noise band of it: the band of
    a difference is the two figures' half-widths in quadrature (``mtp_tune_noise`` per single
    measurement, narrowed by the square root of the repeats).  Inside the band the two are a
    tie and the cheapest of the tied (fewest draft tokens, then fewest steps) wins: it costs
    less memory and degrades more gently when real prompts accept fewer drafts.  A candidate
    worse than the top by more than the band never wins.

    Returns ``{"winner": row|None, "runner_up": row|None, "tied": [keys], "decided_by", "ranking",
    "top", "margin", "band"}``; ``margin`` is the winner's relative lead over the best candidate
    outside its tie group (negative: it trails the top within the band).
    """
    noise = _node_noise(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    rank = mtp_tune_rank(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    scored = [r for r in rank if r["score"]["value"] is not None]
    out = {"winner": None, "runner_up": None, "tied": [], "decided_by": "no feasible candidate", "ranking": rank,
           "top": None, "margin": None, "band": None}
    if not scored:
        return out
    top = scored[0]
    out["top"] = top
    if len(scored) == 1:
        out.update(winner=top, decided_by="only measured candidate")
        return out
    tied = [r for r in scored if r["score"]["value"] >= top["score"]["value"] * (1.0 - _band(noise, top["score"], r["score"]))]
    winner = min(tied, key=lambda r: _cost(r["candidate"]))
    others = [r for r in scored if r is not winner]
    runner = others[0]
    band = _band(noise, winner["score"], runner["score"])
    outside = [r for r in scored if r not in tied]
    if winner is top:
        margin = top["score"]["value"] / runner["score"]["value"] - 1.0
    else:
        margin = winner["score"]["value"] / top["score"]["value"] - 1.0
    out.update(winner=winner, runner_up=runner, band=band, margin=margin)
    if len(tied) == 1:
        out["decided_by"] = "beats %s by %.1f%% (band %.1f%%)" % (runner["key"], margin * 100, band * 100)
    else:
        out["tied"] = [r["key"] for r in tied]
        ahead = outside[0] if outside else None
        out["decided_by"] = "tie within the noise band with %s: the cheapest wins%s" % (
            ", ".join(r["key"] for r in tied if r is not winner),
            "; ahead of %s by %.1f%%" % (ahead["key"], (winner["score"]["value"] / ahead["score"]["value"] - 1) * 100)
            if ahead else "")
    return out


def mtp_tune_unverified(attempts, candidates, objective="latency", level=None, slo_min_tps=None,
                        slo_max_ttft_p99_ms=None, noise=0.015, fit_classes=None):
    """The candidates never measured that could still beat the winner by more than the tie band.

    An adaptive search (or a launch budget) ends without measuring every candidate, and then only
    what its bounds assume rules the rest out.  Two bounds per unmeasured candidate, both from the
    measured accept lengths (chain acceptance, at the most optimistic measured acceptance plus
    the noise) and times per verify round at the judged level:

    - ``bound``: assuming only that a verify round never gets faster with more draft tokens,
      which holds on every server; ``None`` where nothing cheaper was measured (no bound at all);
    - ``bound_convex``: assuming also that each extra draft token costs at least what the
      previous one did, which the search's own bounds use where the measured points agree
      (``None``: unbounded).

    A candidate is listed when ``bound`` exceeds the winner's figure by more than the tie band
    (``sqrt(2) x noise``); no measurement shows it cannot win, and a landscape that matches every
    measurement exists where it does.  Candidates a cheaper one proved cannot fit are left out.
    Returns ``[{"key", "steps", "topk", "draft_tokens", "bound", "gain", "bound_convex",
    "gain_convex", "convex_rules_out"}]`` in list order; ``gain`` is ``bound`` over the winner's
    figure, minus one; ``convex_rules_out``: ``bound_convex`` is within the band of the winner.
    """
    noise = _node_noise(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    classes = _fit_classes(fit_classes)
    best = mtp_tune_pick_best(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    winner = best["winner"]
    if winner is None or not candidates:
        return []
    value = winner["score"]["value"]
    band = math.sqrt(2.0) * noise
    states = _state(attempts, None, classes)
    lanes = {}
    for cand in candidates:
        lanes.setdefault(cand["topk"], []).append(cand)
    out = []
    for topk in sorted(lanes):
        lane = lanes[topk]
        sound = _Lane(lane, states, objective, level, noise, slo_min_tps, convex=False)
        convex = _Lane(lane, states, objective, level, noise, slo_min_tps, convex=True)
        for cand in lane:
            if cand["key"] in states or _cannot_fit(cand, states, classes):
                continue
            ub = sound.bound(cand, level)
            if ub is None or ub <= value * (1.0 + band):
                continue
            ubc = convex.bound(cand, level)
            out.append({"key": cand["key"], "steps": cand["steps"], "topk": cand["topk"],
                        "draft_tokens": cand["draft_tokens"], "bound": _finite(ub, 3),
                        "gain": _finite(None if ub is None else ub / value - 1.0, 4),
                        "bound_convex": _finite(ubc, 3),
                        "gain_convex": _finite(None if ubc is None else ubc / value - 1.0, 4),
                        "convex_rules_out": ubc is not None and ubc <= value * (1.0 + band)})
    return out


def mtp_tune_model_check(attempts, candidates, objective="latency", level=None, slo_min_tps=None,
                         slo_max_ttft_p99_ms=None, noise=0.015):
    """Whether the launches agree with the model the search's bounds rest on.

    Per topk lane and judged series (time per verify round at the judged level, from the accept
    length and the rate): a round that gets faster with more draft tokens beyond the noise breaks
    monotony (no bound is used there); a bend the other way (an extra draft token costing less than
    the one before, beyond the noise) breaks convexity (only the monotone bound is used there). A
    change of server configuration between launches (a fitted running-request cap or graph batch)
    is such a bend as the model sees it. Returns ``{"holds", "broken": [text]}``.
    """
    noise = _node_noise(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    states = _state(attempts)
    lanes = {}
    for cand in candidates or []:
        lanes.setdefault(cand["topk"], []).append(cand)
    broken = []
    for topk in sorted(lanes):
        lane = _Lane(lanes[topk], states, objective, level, noise, slo_min_tps, convex=True)
        for (c, kind), series in sorted(lane.series.items()):
            judged = c == (level if level is not None else c) and kind == ("pr" if objective == "latency" else "ag")
            if not judged or len(series["xs"]) < 2:
                continue
            depths = ", ".join(str(x + 1) for x in series["xs"])
            if not series["mono"]:
                broken.append("topk %s at C=%s: a verify round got faster with more draft tokens (draft tokens %s); "
                              "no bound is used there" % (topk, c, depths))
            elif not series["convex"] and len(series["xs"]) >= 3:
                broken.append("topk %s at C=%s: an extra draft token cost less than the one before (draft tokens %s); "
                              "only the monotone bound is used there" % (topk, c, depths))
    return {"holds": not broken, "broken": broken}


def _finite(x, digits):
    """A rounded figure for results.json, None for no figure or no bound (JSON has no infinity)."""
    return None if x is None or math.isinf(x) else round(x, digits)


def mtp_tune_winner(attempts, objective="latency", level=None, slo_min_tps=None, slo_max_ttft_p99_ms=None,
                    noise=0.015, previous=None, now=None, candidates=None, fit_classes=None):
    """The winner as stored in results.json (compact), or None.

    ``margin`` is the winner's relative lead over the runner-up (negative when it won a tie
    trailing the top within the band), ``band`` the tie band of that comparison and
    ``interval`` the winner's own band.  ``decided_at`` is kept from ``previous`` (the stored
    winner) when the same setting still wins, so a re-run that changes nothing also writes
    nothing new.  With ``candidates`` (the run's list), ``unverified`` lists the candidates never
    measured that the model does not rule out (mtp_tune_unverified, those it leaves open with a
    convex round time where the measurements agree with convexity), ``model_rules_out`` those only
    the convexity rules out, and ``model`` whether the measurements agree with the model
    (mtp_tune_model_check).
    """
    best = mtp_tune_pick_best(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)
    w = best["winner"]
    if w is None:
        return None
    cand = dict((k, w["candidate"][k]) for k in ("steps", "topk", "draft_tokens"))
    out = {"key": w["key"], "candidate": cand, "overrides": w["overrides"] or {}, "score": w["score"],
           "decided_by": best["decided_by"], "tied": best["tied"],
           "runner_up": best["runner_up"]["key"] if best["runner_up"] else None, "decided_at": now,
           "margin": best["margin"], "band": best["band"],
           "interval": [w["score"]["low"], w["score"]["high"]],
           "noise": mtp_tune_node_noise(attempts, objective, level, slo_min_tps, slo_max_ttft_p99_ms, noise)}
    if candidates:
        rows = mtp_tune_unverified(attempts, candidates, objective, level, slo_min_tps,
                                   slo_max_ttft_p99_ms, noise, fit_classes)
        # The stated model (accept length concave in depth, verify-round time non-decreasing and
        # convex within one configuration) is what the search's bounds rest on: what it rules
        # out is not open; what only a landscape outside it could make win is named apart.
        out["unverified"] = [u for u in rows if not u["convex_rules_out"]]
        out["model_rules_out"] = [u for u in rows if u["convex_rules_out"]]
        out["model"] = mtp_tune_model_check(attempts, candidates, objective, level, slo_min_tps,
                                            slo_max_ttft_p99_ms, noise)
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
            "mtp_tune_unverified": mtp_tune_unverified,
            "mtp_tune_next": mtp_tune_next,
            "mtp_tune_complete": mtp_tune_complete,
            "mtp_tune_attempt": mtp_tune_attempt,
            "mtp_tune_fit_ladder": mtp_tune_fit_ladder,
            "mtp_tune_measured": mtp_tune_measured,
            "mtp_tune_resume": mtp_tune_resume,
            "mtp_tune_verify": mtp_tune_verify,
            "mtp_tune_progress": mtp_tune_progress,
            "mtp_tune_key": candidate_key,
            "mtp_tune_capped": mtp_tune_capped,
        }
