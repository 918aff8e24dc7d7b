# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""What binds under load: each candidate's running-request cap, and the levers that lift it.

On a hybrid model (linear attention + full attention) every draft token adds per-request state,
so the state pool's running-request cap falls with depth and a load above it queues. The
search reads the pool from a launch's log (sglang_service_wait's ``pool``) and predicts the cap
of any other depth and lever value with the release's formulas (mtp_state_pool). Before a
candidate is launched it gets the least lever change that holds the judged load (``lifted``);
a launch that came back capped is launched again lifted (``lift_relaunch``). A lever that
changes the kernels' arithmetic is adopted only when the greedy check finds the same tokens as
without it (``mtp_tune_numerics_plan``; the refusal is ``failure_class: numerics``).

Controller-side library of plugins/filter/mtp_tune.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_state_pool
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import (
    CAP_LEVERS, NUMERICS_LEVERS, cap_target, candidate_key, spec_from)

_ARGV = {"mamba_full_memory_ratio": "--mamba-full-memory-ratio", "max_mamba_cache_size": "--max-mamba-cache-size",
         "enable_linear_replayssm_spec": "--enable-linear-replayssm-spec"}


# A launch with levers that failed so: the release refused them on this node (bad_args) or the
# greedy check did (numerics).
_REFUSING = ("numerics", "bad_args")


def levers_of(overrides):
    """The cap levers an override set holds (those set), as ``{key: value}``."""
    return dict((k, v) for k, v in (overrides or {}).items() if k in CAP_LEVERS and v not in (None, False, ""))


def lever_words(levers):
    """``--mamba-full-memory-ratio 4.0``: the levers as the server's argv spells them."""
    words = []
    for key in CAP_LEVERS:
        if key in levers:
            words.append(_ARGV[key] if levers[key] is True else "%s %s" % (_ARGV[key], levers[key]))
    return " ".join(words)


def _launched(att):
    out = {"draft_tokens": att["candidate"]["draft_tokens"]}
    out.update(dict((k, v) for k, v in (att.get("overrides") or {}).items() if v is not None))
    return out


def pool_reference(attempts):
    """The latest launch whose start logged the state pool: ``(pool, launched)`` or (None, None)."""
    for att in reversed(list(attempts or [])):
        pool = att.get("pool")
        if isinstance(pool, dict) and pool.get("max_mamba_cache_size") and isinstance(att.get("candidate"), dict):
            return pool, _launched(att)
    return None, None


def refused_levers(attempts):
    """Levers the release (bad_args) or the greedy check (numerics) refused on this node: never
    tried again in the run."""
    out = set()
    for att in attempts or []:
        if att.get("failure_class") in _REFUSING:
            out.update(levers_of(att.get("overrides")))
    return out


def predicted_cap(attempts, candidate, overrides=None):
    """The cap the pool model predicts for ``candidate`` with ``overrides``; None without a pool."""
    pool, launched = pool_reference(attempts)
    if pool is None:
        return None
    setting = {"draft_tokens": candidate["draft_tokens"]}
    setting.update(dict((k, v) for k, v in (overrides or {}).items() if v is not None))
    got = mtp_state_pool.predict(pool, launched, setting)
    return None if not got else got.get("cap")


def _allowed(attempts, spec, candidate):
    refused = refused_levers(attempts)
    out = [lev for lev in spec.cap_levers if lev not in refused]
    if candidate.get("topk", 1) > 1:
        # the release serves the replay for a chain draft only (topk 1)
        out = [lev for lev in out if lev != "enable_linear_replayssm_spec"]
    return out


def lifted(nxt, attempts, spec):
    """``nxt`` (a search choice) with the least lever change that holds the judged load, when the
    pool model says its cap would not; unchanged without levers, a pool reading or a target.

    Without levers the candidate would queue the judged load; the lifted server runs the same
    depth with the load running, so it is what can win there (a lever that only moves memory
    between the state and KV pools costs no compute). A candidate no lever can lift is launched
    as it is, its reason saying it will queue."""
    spec = spec_from(spec)
    target = cap_target(spec)
    if not spec.cap_levers or target is None or levers_of(nxt.get("overrides")):
        return nxt
    pool, launched = pool_reference(attempts)
    if pool is None:
        return nxt
    cand = nxt["candidate"]
    setting = {"draft_tokens": cand["draft_tokens"]}
    setting.update((k, v) for k, v in (nxt.get("overrides") or {}).items() if v is not None)
    plain = mtp_state_pool.predict(pool, launched, setting)
    if not plain or plain.get("cap") is None:
        return nxt
    nxt = dict(nxt)
    if plain["cap"] >= target:
        nxt["predicted_cap"] = plain["cap"]
        return nxt
    lev = mtp_state_pool.lift(pool, launched, cand["draft_tokens"], target, spec.kv_need, _allowed(attempts, spec, cand))
    if not lev:
        nxt["predicted_cap"] = plain["cap"]
        nxt["reason"] = "%s; cap %d < C=%d and no lever holds it (queue-bound)" % (nxt.get("reason"), plain["cap"], target)
        return nxt
    overrides = dict(nxt.get("overrides") or {})
    overrides.update(lev)
    after = mtp_state_pool.predict(pool, launched, dict(setting, **lev)) or {}
    nxt["overrides"] = overrides
    nxt["predicted_cap"] = after.get("cap")
    nxt["reason"] = "%s; lifted: cap %d < C=%d without levers, %s with %s" % (
        nxt.get("reason"), plain["cap"], target, after.get("cap", "?"), lever_words(lev))
    return nxt


def lift_relaunch(attempts, spec):
    """The last launch again, lifted, when it ran capped below the judged load (or its lever failed
    the greedy check) and a lever the run may use holds the load; else None."""
    spec = spec_from(spec)
    target = cap_target(spec)
    attempts = [a for a in (attempts or []) if a.get("status") != "pending"]
    if not spec.cap_levers or target is None or not attempts:
        return None
    last = attempts[-1]
    if last.get("resumed") or not isinstance(last.get("candidate"), dict):
        return None
    refused = last.get("failure_class") in _REFUSING and bool(levers_of(last.get("overrides")))
    cap = last.get("running_cap")
    capped = cap is not None and int(cap) < target and last.get("failure_class") in (None, "capped")
    if not (refused or capped):
        return None
    if not refused and levers_of(last.get("overrides")):
        return None  # already lifted as far as the model said; the report marks it queue-bound
    key = last.get("key") or candidate_key(last["candidate"])
    pool = last.get("pool") if isinstance(last.get("pool"), dict) and last["pool"].get("max_mamba_cache_size") else None
    launched = _launched(last)
    if pool is None:
        pool, launched = pool_reference(attempts)
    if pool is None:
        return None
    lev = mtp_state_pool.lift(pool, launched, last["candidate"]["draft_tokens"], target, spec.kv_need,
                              _allowed(attempts, spec, last["candidate"]))
    base = dict((k, v) for k, v in (last.get("overrides") or {}).items() if k not in CAP_LEVERS)
    tried = [levers_of(a.get("overrides")) for a in attempts if (a.get("key") or candidate_key(a["candidate"])) == key]
    if lev and lev not in tried:
        after = mtp_state_pool.predict(pool, launched, dict({"draft_tokens": last["candidate"]["draft_tokens"]},
                                                            **dict(base, **lev))) or {}
        why = ("%s refused its lever" % ("the greedy check" if last.get("failure_class") == "numerics" else "SGLang")
               if refused else "it ran capped at %s < C=%d" % (cap, target))
        return {"candidate": last["candidate"], "overrides": dict(base, **lev), "fit_rung": None,
                "predicted_cap": after.get("cap"),
                "reason": "lift %s: %s; %s predicted with %s" % (key, why, after.get("cap", "?"), lever_words(lev))}
    if refused and {} not in tried:
        # measured as it is, queue-bound: the depth still has a figure
        return {"candidate": last["candidate"], "overrides": base, "fit_rung": None,
                "reason": "%s again without the refused lever (no other lever holds C=%d)" % (key, target)}
    return None


def _numerics_levers(att):
    return [k for k in levers_of((att or {}).get("overrides")) if k in NUMERICS_LEVERS]


def mtp_tune_numerics_plan(attempts, nxt, spec=None):
    """Whether the launch ``nxt`` runs the greedy check, and against what.

    Returns ``{"probe", "levers", "reference", "reference_key", "passed"}``. While the run may use a
    lever that changes numerics, every launch keeps its greedy outputs. A launch with such a lever
    is compared with a launch without it at the same depth (greedy speculative decoding is exact
    in theory, but a real GPU's arithmetic differs between draft depths: SGLang 0.5.17 on an H200
    gave the same 64 greedy tokens without speculation and at steps 3 for 19 tokens only,
    tests/fixtures/real-sglang/live/generate_*.json). Once the lever passed such a check in the
    run (``passed``: the key it passed at), other depths adopt it unchecked. Without either, the
    latest launch without the lever at any depth is the reference (``reference_key`` names it),
    where a difference may come from the depth: the lever is then refused, never adopted wrongly."""
    spec = spec_from(spec)
    levers = _numerics_levers(nxt)
    may = any(k in NUMERICS_LEVERS for k in spec.cap_levers)
    out = {"probe": bool(may or levers), "levers": levers, "reference": None, "reference_key": None, "passed": None}
    if not levers:
        return out
    key = nxt.get("key") or (candidate_key(nxt["candidate"]) if isinstance(nxt.get("candidate"), dict) else None)
    atts = list(attempts or [])
    for att in reversed(atts):
        num = att.get("numerics") or {}
        if att.get("status") == "ok" and num.get("ok") and set(levers) <= set(num.get("levers") or []):
            out["passed"] = num.get("reference_key") or att.get("key")
            out["probe"] = False
            return out
    refs = [a for a in atts if isinstance(a.get("greedy"), list) and a["greedy"] and not _numerics_levers(a)]
    same = [a for a in refs if (a.get("key") or candidate_key(a["candidate"])) == key]
    pick = (same or refs)[-1] if (same or refs) else None
    if pick is not None:
        out["reference"] = pick["greedy"]
        out["reference_key"] = pick.get("key") or candidate_key(pick["candidate"])
    return out


def queue_bound(attempt):
    """The measured levels of an attempt above its running cap, sorted."""
    cap = attempt.get("running_cap")
    if cap is None:
        return []
    return sorted(int(c) for c in (attempt.get("metrics") or {}) if str(c).isdigit() and int(c) > int(cap))
