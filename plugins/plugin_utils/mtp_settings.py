# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a tuning run is asked to do: its candidates and its concurrency levels, and the checks of
the operator's input.  Controller-side library of plugins/filter/mtp_tune.py.

Vocabulary
----------
candidate
    ``{"steps": int, "topk": int, "draft_tokens": int, "key": "s4-k1-d5"}``.
attempt
    one server launch (or a resumed record of one): ``{"key", "candidate", "overrides",
    "fit_rung", "status": "ok"|"failed", "failure_class", "journal_tail", "metrics": {C: {...}},
    "timings": {...}}``.  ``metrics`` is the ``sglang_bench`` fact as returned (keyed by the
    concurrency as a string); the extraction tolerates flat (``ttft_p99_ms``) and nested
    (``ttft_ms: {p99: ..}``) spellings so that the stored raw record stays the source of truth.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - ansible is always present where filters run
    class AnsibleFilterError(Exception):
        pass


OBJECTIVES = ("latency", "throughput", "slo")
STRATEGIES = ("sweep", "adaptive")
SEARCH_LEVELS = ("judged", "all")
PROBE_ENDS = ("both", "high", "low", "none")


# --------------------------------------------------------------------------- helpers

def as_int(value, what):
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


def as_fraction(value, what, default):
    """A fraction >= 0 (0.03 = 3 %); ``default`` when unset."""
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
    """``s4-k1-d5``: steps, topk and draft tokens of a candidate."""
    return "s%d-k%d-d%d" % (candidate["steps"], candidate["topk"], candidate["draft_tokens"])


def cost(candidate):
    """The order of candidates from cheapest to dearest."""
    # Draft tokens set the verify width (compute and CUDA-graph memory); at equal width fewer
    # steps means fewer draft forwards.  This is the order "cheaper wins a tie" refers to.
    return (candidate["draft_tokens"], candidate["steps"], candidate["topk"])


# --------------------------------------------------------------------------- candidates and levels

def mtp_tune_candidates(steps, topk=None, draft_tokens=None):
    """Normalise the operator's lists into candidates ordered from cheapest to dearest.

    ``steps`` is a list of positive integers; ``topk`` a list (default ``[1]``).  With topk 1,
    SGLang forces draft tokens to steps + 1, so that is what is rendered.  With topk > 1 the
    draft tree size must be given in ``draft_tokens`` (each value within steps+1 .. steps*topk+1,
    the range SGLang's own bench_speculative keeps); pairs outside that range are dropped.
    """
    if steps is None or isinstance(steps, (str, bytes, dict)) or not hasattr(steps, "__iter__"):
        raise AnsibleFilterError("mtp_tune_steps must be a non-empty list of integers, got %r" % (steps,))
    steps_list = [as_int(s, "mtp_tune_steps item") for s in steps]
    if not steps_list:
        raise AnsibleFilterError("mtp_tune_steps is empty: give at least one speculative step count, e.g. [3, 4, 5]")
    bad = [s for s in steps_list if s < 1]
    if bad:
        raise AnsibleFilterError("mtp_tune_steps items must be >= 1, got %r" % bad)
    topks = [1] if topk in (None, "", []) else topk
    if isinstance(topks, (str, bytes, dict)) or not hasattr(topks, "__iter__"):
        topks = [topks]
    topks = [as_int(k, "mtp_tune_topk item") for k in topks]
    if any(k < 1 for k in topks):
        raise AnsibleFilterError("mtp_tune_topk items must be >= 1, got %r" % topks)
    drafts = [] if draft_tokens in (None, "") else draft_tokens
    if isinstance(drafts, (str, bytes, dict)) or not hasattr(drafts, "__iter__"):
        drafts = [drafts]
    drafts = [as_int(d, "mtp_tune_draft_tokens item") for d in drafts]
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
    return sorted(out.values(), key=cost)


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
    lv = sorted(set(as_int(c, "mtp_tune_concurrency item") for c in levels))
    if not lv:
        raise AnsibleFilterError("mtp_tune_concurrency is empty: give the concurrency levels to benchmark, e.g. [1, 4, 16, 32]")
    if lv[0] < 1:
        raise AnsibleFilterError("mtp_tune_concurrency items must be >= 1, got %r" % lv)
    if objective not in OBJECTIVES:
        raise AnsibleFilterError("mtp_tune_objective must be one of %s, got %r" % (", ".join(OBJECTIVES), objective))
    if level in (None, ""):
        lvl = {"latency": 1, "throughput": lv[-1], "slo": None}[objective]
    else:
        lvl = as_int(level, "mtp_tune_level")
    if lvl is not None and lvl not in lv:
        raise AnsibleFilterError(
            "objective %s is judged at concurrency %d, which is not in mtp_tune_concurrency %r: "
            "add it to the list or set mtp_tune_level to one of the listed levels" % (objective, lvl, lv))
    return {"levels": lv, "level": lvl, "search": [lvl] if (search == "judged" and lvl is not None) else lv}
