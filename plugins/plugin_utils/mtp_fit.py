# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Launches that do not fit in memory: the state of each candidate's launches, the fit search's
plan (mtp_tune_fit_ladder) and bisection, the server SGLang capped, and the candidates a cheaper
failure proves cannot fit.  Controller-side library of plugins/filter/mtp_tune.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import (
    AnsibleFilterError, as_int, candidate_key)


# Failure classes (sglang_service_wait's names) whose cause shrinks with fewer running requests
# (the hybrid state pool, the budget it leaves) or a smaller CUDA-graph batch (capture); only
# those are worth a fit-retry (bad_args, port_in_use, no_gpu or a timeout would fail the same way
# again).
DEFAULT_FIT_CLASSES = ("oom_weights", "oom_hybrid_state", "oom_kv_cache", "cuda_graph_capture", "cuda_oom")


# --------------------------------------------------------------------------- per-candidate state

def fit_classes_of(classes):
    """The failure classes a fit retry is for, lower case (None or empty: DEFAULT_FIT_CLASSES)."""
    if classes in (None, ""):
        return DEFAULT_FIT_CLASSES
    return tuple(str(c).lower() for c in classes)


def candidate_states(attempts, fit=None, fit_classes=()):
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
        # a launch handed out in this round of a pool (mtp_pool): decided until its result joins
        if last.get("status") in ("skipped", "pending"):
            st["done"] = True
            continue
        if fit:
            st["fit"] = fit_progress(st["attempts"], fit, fit_classes)
            if st["fit"] and st["fit"]["next"] is not None:
                st["pending"] = st["fit"]["next"]
                continue
        st["done"] = True
    return states


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
    mrr_given = None if max_running_requests in (None, "") else as_int(max_running_requests, "max_running_requests")
    mrr = mrr_given if mrr_given is not None else as_int(default_mrr, "default_mrr")
    bs = as_int(cuda_graph_max_bs if cuda_graph_max_bs not in (None, "") else default_bs, "cuda_graph_max_bs")
    floor = as_int(bs_floor, "bs_floor")
    mfloor = as_int(mrr_floor, "mrr_floor")
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
    eff = as_int(eff, "effective_max_running_requests")
    return eff if eff < int(floor) else None


def fit_progress(atts, fit, fit_classes):
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


def cannot_fit(cand, states, fit_classes):
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
