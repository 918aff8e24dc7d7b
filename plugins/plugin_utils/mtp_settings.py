# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a tuning run is asked to do: its candidates, its concurrency levels, and the spec every
decision of the mtp_tune filters is taken under (objective, judged level, SLO limits, noise floor,
search settings).  Controller-side library of plugins/filter/mtp_tune.py.

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
spec
    a TuneSpec (spec_from): what the decisions are asked, the same for every call of a run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
from collections import namedtuple

from collections.abc import Mapping

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - ansible is always present where filters run
    class AnsibleFilterError(Exception):
        pass


OBJECTIVES = ("latency", "throughput", "slo")
# The server settings that move a hybrid model's running-request cap (the state pool's size),
# in the ServerArgs spelling the overrides use; the last one changes the kernels' arithmetic, so
# it is adopted only after the greedy check (mtp_numerics).
CAP_LEVERS = ("mamba_full_memory_ratio", "max_mamba_cache_size", "enable_linear_replayssm_spec")
NUMERICS_LEVERS = ("enable_linear_replayssm_spec",)
STRATEGIES = ("sweep", "adaptive", "climb")
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

    ``steps`` is a list of positive integers; ``topk`` a non-empty list (None: ``[1]``).  With topk 1,
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
    topks = [1] if topk in (None, "") else topk
    if isinstance(topks, (str, bytes, dict)) or not hasattr(topks, "__iter__"):
        topks = [topks]
    topks = [as_int(k, "mtp_tune_topk item") for k in topks]
    if not topks:
        # an empty list is a mistake, not "the default": say so before any launch
        raise AnsibleFilterError("mtp_tune_topk is empty: give at least one EAGLE topk, e.g. [1] (the default; "
                                 "values above 1 also need mtp_tune_draft_tokens)")
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


# --------------------------------------------------------------------------- the spec

# Each key of the spec, its default, and the role variable it comes from (named in an error, so
# the operator knows what to fix).
SPEC_KEYS = (
    ("objective", "latency", "mtp_tune_objective"),
    ("level", None, "mtp_tune_level"),
    ("levels", (), "mtp_tune_concurrency"),
    ("slo_min_tps", None, "mtp_tune_slo_min_tps"),
    ("slo_max_ttft_p99_ms", None, "mtp_tune_slo_max_ttft_p99_ms"),
    ("noise", 0.015, "mtp_tune_noise"),
    ("strategy", "climb", "mtp_tune_strategy"),
    ("seed", 3, "mtp_tune_seed"),
    ("probe_ends", "high", "mtp_tune_probe_ends"),
    ("fit_retry", False, "mtp_tune_fit_retry"),
    ("fit_classes", None, "mtp_tune_fit_classes"),
    ("max_launches", None, "mtp_tune_max_launches"),
    ("remeasure_launches", 0, "mtp_tune_remeasure_launches"),
    ("noise_launches", 0, "mtp_tune_noise_launches"),
    ("verify_tolerance", 0.05, "mtp_tune_verify_tolerance"),
    ("converge", False, "mtp_tune_converge"),
    ("cap_levers", (), "mtp_tune_cap_levers"),
    ("kv_need", None, "mtp_tune_cap_kv_tokens"),
    ("schedule", False, "mtp_tune_schedule"),
    ("schedule_default", True, "mtp_tune_schedule_default"),
)
SPEC_FIELDS = tuple(k for k, _d, _v in SPEC_KEYS)
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0", "")


# The keys added last default as in SPEC_KEYS when a TuneSpec is built without them (a spec
# written before them, as the tests of the other keys spell one out).
_LATE_DEFAULTS = (False, True)


class TuneSpec(namedtuple("TuneSpec", SPEC_FIELDS, defaults=_LATE_DEFAULTS)):
    """What every decision of a tuning run is taken under; built by spec_from, never by hand.

    ``level``: the concurrency the objective is judged at (None: the objective's default, or for
    slo every level); ``levels``: the run's concurrency levels (sorted, each once), which
    mtp_tune_complete measures a contender at; ``fit_classes``: the failure classes a fit retry is
    for, as given (None: the defaults of each use); ``converge``: the run ends by converging the
    node on the winner, whose smoke benchmark then completes the winner's table (mtp_tune_complete
    leaves the winner to it).  The rest as the role variables of the same
    name (``mtp_tune_<key>``).
    """

    __slots__ = ()

    def replace(self, **changes):
        """The same spec with ``changes`` (a decision judged at another level, or under the noise
        measured on the node)."""
        return self._replace(**changes)


def _absent(value):
    return value is None or (isinstance(value, str) and value.strip() == "")


def _choice(value, choices, default, var):
    if _absent(value):
        return default
    if value not in choices:
        raise AnsibleFilterError("%s must be one of %s, got %r" % (var, ", ".join(choices), value))
    return value


def _number(value, var):
    """A limit: None when unset, else the number given (an integer stays one, so a message that
    quotes it reads as the operator wrote it)."""
    if _absent(value):
        return None
    if isinstance(value, bool):
        raise AnsibleFilterError("%s must be a number, got %r" % (var, value))
    if isinstance(value, (int, float)):
        return value
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise AnsibleFilterError("%s must be a number, got %r" % (var, value))


def _limit(value, var, unit):
    """An SLO limit: None when unset, else a number > 0 (a limit of zero or below can never be met,
    or is met by everything)."""
    out = _number(value, var)
    if out is not None and (math.isnan(float(out)) or out <= 0):
        raise AnsibleFilterError("%s must be a number > 0 (%s), got %r: give the limit the objective slo "
                                 "judges by, or leave it null" % (var, unit, value))
    return out


def _flag(value, var):
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise AnsibleFilterError("%s must be true or false, got %r" % (var, value))


def _list(value, var):
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise AnsibleFilterError("%s must be a list, got %r" % (var, value))
    return list(value)


def spec_problems(value):
    """What is wrong with the spec ``value`` (what spec_from refuses), as a list of messages naming
    the role variable to fix; [] when it is usable.  The role checks it before any restart."""
    try:
        spec_from(value)
    except AnsibleFilterError as exc:
        return [str(exc)]
    return []


def spec_from(value=None):
    """The TuneSpec of ``value``: a dict with any of SPEC_FIELDS (the role builds it once, as
    ``_mtp_tune_spec``), None for every default, or a TuneSpec (returned as it is).

    Keys left out, null or empty take their defaults; every value is checked here, once, and a
    bad one fails naming the role variable to fix.  ``objective``: latency, throughput or slo;
    ``strategy``: sweep or adaptive; ``probe_ends``: both, high, low or none (true = both,
    false = none); ``level``, ``seed``, ``max_launches``, ``remeasure_launches``,
    ``noise_launches``: integers; ``levels``: a list of integers; ``slo_min_tps``,
    ``slo_max_ttft_p99_ms``: numbers > 0; ``noise``, ``verify_tolerance``: fractions >= 0;
    ``fit_retry``, ``converge``: booleans; ``fit_classes``: a list of failure classes;
    ``cap_levers``: a list among CAP_LEVERS; ``kv_need``: the KV tokens a lifted candidate must keep;
    ``schedule``: tune a per-load schedule (mtp_schedule), ``schedule_default``: with it, also measure
    SGLang's default adaptive config (booleans).
    """
    if isinstance(value, TuneSpec):
        return value
    if _absent(value):
        value = {}
    if not isinstance(value, Mapping):
        raise AnsibleFilterError("the tuning spec must be a dict with keys among %s (the role passes _mtp_tune_spec), "
                                 "got %r" % (", ".join(SPEC_FIELDS), value))
    unknown = sorted(str(k) for k in value if k not in SPEC_FIELDS)
    if unknown:
        raise AnsibleFilterError("the tuning spec has no key %s; its keys are %s" % (
            ", ".join(unknown), ", ".join(SPEC_FIELDS)))
    var = dict((k, v) for k, _d, v in SPEC_KEYS)
    got = dict((k, value.get(k)) for k in SPEC_FIELDS)
    probe_ends = got["probe_ends"]
    if isinstance(probe_ends, bool):
        probe_ends = "both" if probe_ends else "none"
    levels = () if _absent(got["levels"]) else tuple(sorted(set(
        as_int(c, "%s item" % var["levels"]) for c in _list(got["levels"], var["levels"]))))
    fit_classes = None if _absent(got["fit_classes"]) else tuple(_list(got["fit_classes"], var["fit_classes"]))
    return TuneSpec(
        objective=_choice(got["objective"], OBJECTIVES, "latency", var["objective"]),
        level=None if _absent(got["level"]) else as_int(got["level"], var["level"]),
        levels=levels,
        slo_min_tps=_limit(got["slo_min_tps"], var["slo_min_tps"], "per-request tok/s"),
        slo_max_ttft_p99_ms=_limit(got["slo_max_ttft_p99_ms"], var["slo_max_ttft_p99_ms"], "milliseconds"),
        noise=as_fraction(got["noise"], var["noise"], 0.015),
        strategy=_choice(got["strategy"], STRATEGIES, "climb", var["strategy"]),
        seed=3 if _absent(got["seed"]) else as_int(got["seed"], var["seed"]),
        probe_ends=_choice(probe_ends, PROBE_ENDS, "high", var["probe_ends"]),
        fit_retry=_flag(got["fit_retry"], var["fit_retry"]),
        fit_classes=fit_classes,
        max_launches=None if _absent(got["max_launches"]) else as_int(got["max_launches"], var["max_launches"]),
        remeasure_launches=0 if _absent(got["remeasure_launches"]) else as_int(
            got["remeasure_launches"], var["remeasure_launches"]),
        noise_launches=0 if _absent(got["noise_launches"]) else as_int(got["noise_launches"], var["noise_launches"]),
        verify_tolerance=as_fraction(got["verify_tolerance"], var["verify_tolerance"], 0.05),
        converge=_flag(got["converge"], var["converge"]),
        cap_levers=_cap_levers(got["cap_levers"], var["cap_levers"]),
        kv_need=None if _absent(got["kv_need"]) else as_int(got["kv_need"], var["kv_need"]),
        schedule=_flag(got["schedule"], var["schedule"]),
        # on unless turned off: the default config's figures are what the tuned schedule is shown against
        schedule_default=True if _absent(got["schedule_default"]) else _flag(got["schedule_default"], var["schedule_default"]),
    )


def _cap_levers(value, var):
    """The levers the search may set to lift a capped candidate, in the operator's order of
    preference, each once."""
    if _absent(value):
        return ()
    out = []
    for item in _list(value, var):
        if item not in CAP_LEVERS:
            raise AnsibleFilterError("%s items must be among %s, got %r" % (var, ", ".join(CAP_LEVERS), item))
        if item not in out:
            out.append(item)
    return tuple(out)


def cap_target(spec):
    """The running requests a candidate must be able to hold: the concurrency the objective is
    judged at (every level's highest for slo without a level); None when the run has no levels."""
    if spec.level is not None:
        return spec.level
    if spec.objective == "latency":
        return 1
    return max(spec.levels) if spec.levels else None
