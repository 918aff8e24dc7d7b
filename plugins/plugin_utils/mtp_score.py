# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Judging launches: one attempt's score, the node's noise, the ranking and the winner under the
noise-band tie rule, and after the search the smoke bench's verdict and the progress line.
Controller-side library of plugins/filter/mtp_tune.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math

from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import as_number as _num, level_metrics
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import (
    AnsibleFilterError, as_int, candidate_key, cost, spec_from)


# --------------------------------------------------------------------------- metrics

def mtp_tune_level_metrics(level):
    """Flatten one ``sglang_bench`` level into the figures the tuner reasons about (None where absent)."""
    return level_metrics(level)


def level_of(attempt, c):
    """The benchmark's figures of ``attempt`` at concurrency ``c`` (keyed by a string or an int)."""
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

def mtp_tune_score(attempt, spec=None, tps_stat="mean"):
    """Score one attempt for the objective of ``spec`` (a TuneSpec, or what spec_from takes).

    Returns ``{"value", "low", "high", "level", "feasible", "reason"}``; ``value`` is None when
    the attempt failed, misses the level, or (slo) meets the constraints at no level.

    - latency: per-request decode tok/s (``tps_stat``: mean or p50) at ``level`` (default 1);
    - throughput: aggregate output tok/s at ``level`` (default: the highest measured level);
    - slo: the best aggregate over the levels (or only ``level``) where per-request tok/s >=
      ``slo_min_tps`` and/or TTFT p99 <= ``slo_max_ttft_p99_ms``; p99 on purpose, a mean hides
      the tail the SLO is about.

    The band is ``spec.noise`` narrowed by the square root of the repeats.
    """
    spec = spec_from(spec)
    objective, level, noise = spec.objective, spec.level, spec.noise
    slo_min_tps, slo_max_ttft_p99_ms = spec.slo_min_tps, spec.slo_max_ttft_p99_ms
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
        levels = [as_int(level, "level")] if level not in (None, "") else measured
    else:
        if level in (None, ""):
            level = 1 if objective == "latency" else (measured[-1] if measured else None)
        levels = [as_int(level, "level")] if level is not None else []
    best = None
    reasons = []
    for c in levels:
        node = level_of(attempt, c)
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


# --------------------------------------------------------------------------- choosing

def deciding_attempts(attempts):
    """The deciding attempt per candidate: its last successful launch, else its last failure."""
    out = {}
    for att in attempts or []:
        key = att.get("key") or candidate_key(att["candidate"])
        prev = out.get(key)
        if prev is None or att.get("status") == "ok" or prev.get("status") != "ok":
            out[key] = att
    return out


def tie_band(noise, *scores):
    """Relative tie band of a difference between figures: their half-widths in quadrature."""
    halves = [sc.get("half") if sc.get("half") is not None else noise for sc in scores]
    return math.sqrt(sum(h * h for h in halves))


def mtp_tune_node_noise(attempts, spec=None):
    """Launch-to-launch noise measured on the node, and the noise the decisions use.

    Every candidate launched more than once with the same settings (a re-measurement, a resumed
    run's repeat) is a sample of how far one launch's figure moves on this node: the pooled
    relative standard deviation over them (degrees of freedom: launches less groups) is the
    measured noise. ``spec.noise`` (mtp_tune_noise) is a floor: ``used`` is the larger of the two, so a node
    noisier than the setting widens every band, and a quiet one never narrows it below what the
    operator allowed. On a real H200 a tiny model at C=1 moved 15 % between launches of one
    setting (tests/gpu/real_sglang/README.md), ten times the default floor.

    Returns ``{"floor", "measured", "dof", "groups", "used", "source"}``; ``measured`` is None
    without a repeated launch.
    """
    spec = spec_from(spec)
    floor = spec.noise
    groups = {}
    for att in attempts or []:
        if att.get("status") != "ok":
            continue
        # as JSON text: a schedule launch's overrides hold its config, a dict (not hashable)
        key = (att.get("key") or candidate_key(att["candidate"]),
               json.dumps(att.get("overrides") or {}, sort_keys=True, default=str))
        sc = mtp_tune_score(att, spec)
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


def under_node_noise(attempts, spec):
    """``spec`` with the noise the decisions use: the node's measured noise where it is above the floor."""
    return spec.replace(noise=mtp_tune_node_noise(attempts, spec)["used"])


def mtp_tune_rank(attempts, spec=None):
    """Every candidate's score, best first (failed and infeasible last, cheapest first among them).

    A candidate measured more than once with the same settings (a re-measurement) is scored
    by the mean of its launches; its band narrows with the square root of the measurements.
    """
    spec = under_node_noise(attempts, spec_from(spec))
    noise = spec.noise
    atts = list(attempts or [])
    rows = []
    for key, att in deciding_attempts(atts).items():
        sc = mtp_tune_score(att, spec)
        if att.get("status") == "ok" and sc["value"] is not None:
            same = [a for a in atts if (a.get("key") or candidate_key(a["candidate"])) == key
                    and a.get("status") == "ok" and (a.get("overrides") or {}) == (att.get("overrides") or {})]
            if len(same) > 1:
                at_level = spec.replace(level=sc["level"])
                scs = [mtp_tune_score(a, at_level) for a in same]
                scs = [x for x in scs if x["value"] is not None]
                if scs:
                    n = sum(x["n"] for x in scs)
                    value = sum(x["value"] * x["n"] for x in scs) / n
                    half = noise / math.sqrt(n)
                    sc = dict(sc, value=value, low=value * (1 - half), high=value * (1 + half), n=n, half=half,
                              launches=len(scs), reason="mean of %d launches, band +/-%.2g%%" % (len(scs), half * 100))
        rows.append({"key": key, "candidate": att.get("candidate"), "overrides": att.get("overrides") or {},
                     "score": sc, "status": att.get("status")})
    rows.sort(key=lambda r: (r["score"]["value"] is None, -(r["score"]["value"] or 0.0), cost(r["candidate"])))
    return rows


def mtp_tune_pick_best(attempts, spec=None):
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
    spec = under_node_noise(attempts, spec_from(spec))
    noise = spec.noise
    rank = mtp_tune_rank(attempts, spec)
    scored = [r for r in rank if r["score"]["value"] is not None]
    out = {"winner": None, "runner_up": None, "tied": [], "decided_by": "no feasible candidate", "ranking": rank,
           "top": None, "margin": None, "band": None}
    if not scored:
        return out
    top = scored[0]
    out["top"] = top
    if len(scored) == 1:
        # measured but without a figure: missed the SLO, or failed requests at the judged level
        unscored = sum(1 for r in rank if r["status"] == "ok" and r["score"]["value"] is None)
        out.update(winner=top, decided_by="only feasible candidate of %d measured" % (unscored + 1) if unscored
                   else "only measured candidate")
        return out
    tied = [r for r in scored if r["score"]["value"] >= top["score"]["value"] * (1.0 - tie_band(noise, top["score"], r["score"]))]
    winner = min(tied, key=lambda r: cost(r["candidate"]))
    others = [r for r in scored if r is not winner]
    runner = others[0]
    band = tie_band(noise, winner["score"], runner["score"])
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


# --------------------------------------------------------------------------- after the search

# The first smoke is a screen: one that falls short of the tuned figure by more than one standard
# deviation of the difference is measured again on a fresh launch (a restart costs minutes, a play
# failed on noise costs a re-run). The verdict is the fresh launch's, one-sided 95 %: the first
# smoke was kept because it read low, so it does not vote again (averaged in, it fails more correct
# tunes for the same slow servers caught; tests/bench/bench_smoke_check.py, tests/bench/README.md).
VERIFY_Z_FIRST = 1.0
VERIFY_Z = 1.645
_SMOKE_KEY = "converged smoke"


def _smoke_attempt(level, lm):
    """A smoke benchmark as an attempt of its own setting, so mtp_tune_node_noise takes the pair of
    smokes as one more sample of the node's launch-to-launch noise (never pooled with the tuned
    launch: a converged server that really is slower would read as noise)."""
    return {"key": _SMOKE_KEY, "candidate": {}, "overrides": {}, "status": "ok", "metrics": {str(level): lm}}


def mtp_tune_verify(level_metrics, tuned, spec=None, attempts=None, first=None):
    """Whether a smoke bench after converging is within the node's noise of the tuned figure.

    ``level_metrics``: the smoke bench's level dict; ``tuned``: the winner's score (from
    mtp_tune_score); ``attempts``: the launches the winner was decided over, whose repeated
    launches give the node's noise (mtp_tune_node_noise; without them, ``spec.noise``);
    ``first``: the first smoke's level dict when this call judges the re-measure after a restart.
    The figure is per-request tok/s for the latency objective, else the aggregate.

    The tuned figure and the smoke are each one launch of the same setting, so their difference
    moves by the two bands in quadrature (the spread): the noise over the square root of the tuned
    figure's measurements, and the noise of one launch.  The winner is the best of several noisy
    figures and reads high, so a first smoke is only a screen: short by more than
    ``VERIFY_Z_FIRST`` times the spread and ``spec.verify_tolerance``, ``remeasure`` asks for a
    second smoke on a fresh launch.  That call is the verdict: the second smoke may fall short by
    ``VERIFY_Z`` times the spread, under the noise pooled with the two smokes' own spread, and
    never less than ``spec.verify_tolerance``.  Returns ``{"ok", "remeasure", "value" (the
    judged smoke's figure), "values" (every smoke's), "tuned", "delta", "band", "noise", "reason",
    "message"}``.
    """
    spec = spec_from(spec)
    objective, tol = spec.objective, spec.verify_tolerance
    out = {"ok": False, "remeasure": False, "value": None, "values": [], "tuned": None, "delta": None,
           "band": None, "noise": None, "reason": "", "message": ""}
    if not tuned or tuned.get("value") is None:
        out.update(reason="no tuned figure", message="The winner has no tuned figure to compare the smoke with.")
        return out
    ref = float(tuned["value"])
    out["tuned"] = ref
    fig = "decode_tps_mean" if objective == "latency" else "output_throughput"
    smokes = ([first] if first is not None else []) + [level_metrics or {}]
    ms = [mtp_tune_level_metrics(lm or {}) for lm in smokes]
    values = [m[fig] for m in ms]
    if any(v is None for v in values) or not ref:
        out.update(values=values, reason="smoke bench returned no figure",
                   message="The smoke benchmark returned no %s figure at C=%s: see its failed requests." % (
                       "per-request tok/s" if objective == "latency" else "aggregate", tuned.get("level")))
        return out
    level = tuned.get("level")
    judged = spec.replace(level=level) if level is not None else spec
    extra = [_smoke_attempt(level, lm) for lm in smokes] if len(smokes) > 1 else []
    node = mtp_tune_node_noise(list(attempts or []) + extra, judged)
    noise = node["used"]
    n_tuned = max(1, int(_num(tuned.get("n")) or 1))
    value = values[-1]
    spread = math.sqrt(noise * noise / n_tuned + noise * noise)
    z = VERIFY_Z if first is not None else VERIFY_Z_FIRST
    band = max(tol, z * spread)
    delta = value / ref - 1.0
    failed = int(ms[-1]["failed"] or 0)
    ok = delta >= -band and not failed
    remeasure = not ok and not failed and first is None
    what = "%ssmoke %.1f vs tuned %.1f at C=%s: %+.1f%%, allowed -%.1f%% (%.3g x the noise %.2g%% over %d tuned " \
           "measurement%s and one smoke; %s)" % (
               "first smoke %.1f on the launch before, then " % values[0] if len(values) > 1 else "", value, ref, level,
               delta * 100, band * 100, z, noise * 100, n_tuned, "" if n_tuned == 1 else "s", node["source"])
    if failed:
        reason = "%s; %d failed request%s" % (what, failed, "" if failed == 1 else "s")
    elif ok:
        reason = "within the band: " + what
    else:
        reason = "below the band: " + what
    if ok:
        message = "The converged server performs like the tuned one (%s)." % what
    elif remeasure:
        message = ("The first smoke is below the band (%s); the winner reads high as the best of several noisy figures, "
                   "so the server is restarted and measured once more before judging." % what)
    elif failed:
        message = ("The converged server failed %d smoke request%s (%s): read its journal; the unit stays on the "
                   "winner." % (failed, "" if failed == 1 else "s", what))
    else:
        message = ("The converged server is slower than the tuned figure by more than the node's noise explains, "
                   "on two launches (%s). "
                   "The unit stays on the winner. If the node is slower than while it was tuned (other load, "
                   "clocks, a degraded GPU) or the unit is not the winner's, fix that and re-run; if the node is "
                   "this noisy, set mtp_tune_noise_launches (the band is then measured) or raise mtp_tune_noise." % what)
    out.update(ok=ok, remeasure=remeasure, value=value, values=values, delta=delta, band=band, noise=node,
               reason=reason, message=message)
    return out


def mtp_tune_progress(attempt, attempts, spec=None):
    """One compact line per launch for a person watching the run."""
    spec = spec_from(spec)
    cand = attempt.get("candidate") or {}
    head = "steps=%s topk=%s draft=%s" % (cand.get("steps"), cand.get("topk"), cand.get("draft_tokens"))
    schedule, ov = spec_schedule.split_overrides(attempt.get("overrides"))
    if schedule is not None:
        head += " schedule %s" % schedule
    if any(v is not None for v in ov.values()):
        head += " [%s]" % ", ".join("%s=%s" % (k, v) for k, v in sorted(ov.items()) if v is not None)
    if attempt.get("status") == "ok":
        parts = []
        for c in sorted((attempt.get("metrics") or {}), key=int):
            m = mtp_tune_level_metrics(level_of(attempt, c))
            tps = m["decode_tps_mean"]
            parts.append("C%s %s/%s" % (c, "-" if tps is None else "%.0f" % tps,
                                        "-" if m["output_throughput"] is None else "%.0f" % m["output_throughput"]))
        body = "ok, tok/s per-request/aggregate: " + " ".join(parts)
    else:
        body = "FAILED (%s)" % (attempt.get("failure_class") or "unknown")
    best = mtp_tune_pick_best(attempts, spec)
    if best["winner"]:
        w = best["winner"]
        tail = "best so far: %s (%s %.1f at C=%s)" % (w["key"], spec.objective, w["score"]["value"], w["score"]["level"])
    else:
        tail = "best so far: none"
    return "%s: %s | %s" % (head, body, tail)
