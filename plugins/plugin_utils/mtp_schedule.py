# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Tuning a per-load schedule (SGLang's ``--speculative-adaptive`` with a config of its own): the
launches (schedule_next), the schedule built from each level's best static depth (derive_config)
and the verdict against the best single static setting (schedule_winner).

SGLang 0.5.23 routes each decode batch to the slot with the largest batch-size key at or below its
(graph-padded) size and runs that slot's step (speculative/adaptive_spec_params.py
AdaptiveSpeculativeParams; sim/sglang_sim/adaptive.py follows it). Each level's best static depth
is found by the existing search judged at that level (mtp_search.tune_next); the schedule pins
each level's slot to it. Every launch of a schedule run benchmarks every level, so the searches of
later levels reuse the launches of earlier ones.

Controller-side library of plugins/filter/mtp_tune.py (mtp_tune_next and mtp_tune_winner dispatch
here when ``spec.schedule``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import bisect
import math

from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import notation
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_cap import lever_words, levers_of, lifted, pool_reference
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_node import mtp_tune_node_fault
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import (
    mtp_tune_node_noise, mtp_tune_pick_best, mtp_tune_rank, tie_band, under_node_noise)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import labelled, tune_next
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import (
    CAP_LEVERS, AnsibleFilterError, candidate_key, cost, spec_from)

ADAPTIVE = "speculative_adaptive"
CONFIG = "speculative_adaptive_config"
# --speculative-num-steps must be one of the config's candidates (adaptive_spec_params.py
# MSG_STEPS_NOT_CANDIDATE); 3 is among DEFAULT_ADAPTIVE_CONFIG's (1, 3, 5, 7 / 0, 1, 3 / ...).
DEFAULT_STEPS = 3
# The deepest candidate of DEFAULT_ADAPTIVE_CONFIG: its pools are sized for 7 + 1 draft tokens.
DEFAULT_DEEPEST = 7


# --------------------------------------------------------------------------- attempts

def _on(value):
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def schedule_kind(attempt):
    """``tuned`` (a config of its own), ``default`` (SGLang's built-in config) or None (a static
    launch), from the attempt's (or a launch choice's) overrides."""
    ov = (attempt or {}).get("overrides") or {}
    if not _on(ov.get(ADAPTIVE)):
        return None
    return "default" if spec_schedule.canonical(ov.get(CONFIG)) is None else "tuned"


def chain(steps):
    """The topk-1 candidate of ``steps`` (draft tokens = steps + 1, as SGLang forces for a chain)."""
    cand = {"steps": int(steps), "topk": 1, "draft_tokens": int(steps) + 1}
    cand["key"] = candidate_key(cand)
    return cand


def attempt_key(attempt):
    """The key an attempt is kept under: its candidate's for a static launch,
    ``<candidate key>+adaptive-<digest8>`` for a tuned schedule, ``<candidate key>+adaptive-default``
    for SGLang's default config. A schedule launch runs the candidate's step only at its start, so
    its figures must never be ranked, resumed or journaled as that static candidate's."""
    base = candidate_key(attempt["candidate"]) if isinstance(attempt.get("candidate"), dict) else attempt.get("key")
    kind = schedule_kind(attempt)
    if kind is None:
        return attempt.get("key") or base
    if kind == "default":
        return "%s+adaptive-default" % base
    return "%s+adaptive-%s" % (base, spec_schedule.digest(attempt["overrides"][CONFIG])[:8])


def _keyed(attempts):
    """The attempts with their keys as attempt_key gives them (copies; the record may predate it)."""
    return [dict(a, key=attempt_key(a)) for a in attempts or [] if isinstance(a, dict)]


def statics(attempts):
    """The static launches of ``attempts`` (no adaptive schedule)."""
    return [a for a in attempts or [] if isinstance(a, dict) and schedule_kind(a) is None]


def level_spec(spec, level):
    """The spec a level is judged under on its own: aggregate output tok/s at that level (at C=1
    the one request's speed), the existing search and scoring, no schedule."""
    return spec.replace(objective="throughput", level=level, schedule=False)


def _launches(attempts):
    return sum(1 for a in attempts if a.get("status") in ("ok", "failed") and not a.get("resumed"))


# --------------------------------------------------------------------------- the schedule

def _steps_of(winner):
    if isinstance(winner, dict):
        cand = winner.get("candidate") if isinstance(winner.get("candidate"), dict) else winner
        return int(cand["steps"])
    return int(winner)


def _pad(sizes, batch):
    """adaptive_spec_params.py _pad_to_cuda_graph_bs: the smallest graph batch size >= ``batch``
    (itself beyond the largest)."""
    idx = bisect.bisect_left(sizes, batch)
    return sizes[idx] if idx < len(sizes) else batch


def _boundary(low, high, graph_bs):
    """The key of the slot that starts at level ``high`` after level ``low``: the geometric mean,
    rounded up (the figures move with log C), then up to the next graph batch size, since the
    release pads a batch to one before routing (a key between graph sizes acts at the next)."""
    key = int(math.ceil(math.sqrt(low * high)))
    if graph_bs:
        sizes = sorted(graph_bs)
        key = _pad(sizes, key)
        if _pad(sizes, low) >= key:
            raise AnsibleFilterError(
                "concurrency levels %d and %d pad to the same CUDA-graph batch size %d, so no schedule can give them "
                "different steps: drop one of them from mtp_tune_concurrency or give finer graph batch sizes"
                % (low, high, _pad(sizes, low)))
    return key


def schedule_slots(winners, levels, graph_bs=None):
    """The slots of a schedule: one per run of adjacent levels with the same winning step.
    ``winners``: per level of ``levels`` (same order) its winner: a step count, a candidate or a
    ranking row (``candidate``, ``overrides``). Returns ``[{"key", "levels", "steps", "winners"}]``
    in key order; the first key is 1 (every batch below the second key routes there)."""
    levels = list(levels or [])
    winners = list(winners or [])
    if not levels or len(winners) != len(levels):
        raise AnsibleFilterError("a schedule needs one winner per concurrency level (mtp_tune_concurrency), got %d "
                                 "winners for levels %r" % (len(winners), levels))
    pairs = sorted(zip(levels, winners), key=lambda p: p[0])
    slots = []
    for level, winner in pairs:
        steps = _steps_of(winner)
        if slots and slots[-1]["steps"] == steps:
            slots[-1]["levels"].append(level)
            slots[-1]["winners"].append(winner)
            continue
        key = 1 if not slots else _boundary(slots[-1]["levels"][-1], level, graph_bs)
        slots.append({"key": key, "levels": [level], "steps": steps, "winners": [winner]})
    return slots


def derive_config(winners, levels, graph_bs=None, neighbours=None):
    """``(config, start_steps)``: the adaptive config that runs each level at its winner's step.

    One slot per run of adjacent levels with the same winner; keys: "1", then between levels
    a < b at ceil(sqrt(a*b)), rounded up to a graph batch size of ``graph_bs`` when given
    (schedule_slots). Each slot's ``candidate_steps`` is its one winner: the release's EMA rule
    rises only while the accepted drafts per request exceed steps - 0.5, so with more than one
    candidate it drives towards depths where nearly every draft is accepted, shallower than the
    throughput optimum at realistic acceptance; with one it cannot move off the measured step.
    ``neighbours`` (the run's step list; tests/bench/bench_schedule.py measures the variant):
    each slot's candidates are its winner and the winner's neighbours in that list instead.
    ``start_steps`` is the first slot's step (the release refuses a start step that is not
    among the candidates)."""
    slots = schedule_slots(winners, levels, graph_bs)
    steps_list = sorted(set(int(s) for s in neighbours)) if neighbours else None
    config = {}
    for slot in slots:
        cands = [slot["steps"]]
        if steps_list and slot["steps"] in steps_list:
            i = steps_list.index(slot["steps"])
            cands = steps_list[max(0, i - 1):i + 2]
        config[str(slot["key"])] = {"candidate_steps": cands}
    return spec_schedule.canonical(config), slots[0]["steps"]


def _union_levers(sets):
    """One lever set that holds each of ``sets``: the largest value of each numeric lever, a flag on
    if any set has it on (the schedule's pools are one pool, shared by every slot's step)."""
    out = {}
    for levers in sets:
        for key, value in levers.items():
            if isinstance(value, bool):
                out[key] = bool(out.get(key)) or value
            else:
                out[key] = value if key not in out else max(out[key], value)
    return dict((k, out[k]) for k in CAP_LEVERS if k in out)


def _fit_overrides(overrides):
    """What a fit retry set (everything but the cap levers and the schedule itself)."""
    return dict((k, v) for k, v in (overrides or {}).items() if k not in CAP_LEVERS and k not in (ADAPTIVE, CONFIG))


def _level_text(levels):
    return "C=%d" % levels[0] if len(levels) == 1 else "C=%d-%d" % (levels[0], levels[-1])


def _label(nxt):
    cand = nxt["candidate"]
    conf = nxt["overrides"].get(CONFIG)
    levers = lever_words(levers_of(nxt["overrides"]))
    nxt["label"] = "steps=%s topk=%s draft=%s adaptive %s%s (%s)" % (
        cand["steps"], cand["topk"], cand["draft_tokens"], spec_schedule.label(conf),
        " [%s]" % levers if levers else "", nxt["reason"])
    return nxt


def level_winners(attempts, spec):
    """Each level's best static launch (mtp_tune_pick_best judged at that level over the static
    launches): ``{level: row or None}``."""
    spec = spec_from(spec)
    static = _keyed(statics(attempts))
    return dict((lv, mtp_tune_pick_best(static, level_spec(spec, lv))["winner"]) for lv in spec.levels)


def tuned_launch(attempts, spec, graph_bs=None):
    """The tuned schedule's launch from each level's best static, or None while a level has none.

    The candidate is the first slot's winner (its step is the start step); the overrides are the
    schedule and the cap levers: the union of the slot winners' (each was measured with them) and
    what holds the highest level at the deepest slot's step, since the release sizes the pools
    for the deepest candidate (adaptive.max_draft_tokens), found as for a static launch (lifted)."""
    spec = spec_from(spec)
    levels = list(spec.levels)
    static = _keyed(statics(attempts))
    best = level_winners(attempts, spec)
    if not levels or any(best[lv] is None for lv in levels):
        return None
    winners = [best[lv] for lv in levels]
    config, start = derive_config(winners, levels, graph_bs)
    slots = schedule_slots(winners, levels, graph_bs)
    sets = [levers_of(w["overrides"]) for w in winners]
    levers = _union_levers(sets)
    notes = []
    if len(set(tuple(sorted(s.items())) for s in sets)) > 1:
        notes.append("levers: the union of the slots' (%s)" % ", ".join(
            "%s %s" % (_level_text(s["levels"]), lever_words(levers_of(s["winners"][0]["overrides"])) or "none")
            for s in slots))
    deep = max(slots, key=lambda s: s["steps"])
    got = lifted({"candidate": chain(deep["steps"]), "overrides": {}, "fit_rung": None, "reason": "deepest slot"},
                 static, level_spec(spec, levels[-1]))
    if levers_of(got["overrides"]):
        levers = _union_levers([levers, levers_of(got["overrides"])])
        notes.append("s%d at C=%d %s" % (deep["steps"], levels[-1], got["reason"].split("; ", 1)[-1]))
    overrides = _fit_overrides(deep["winners"][0]["overrides"])
    overrides.update(levers)
    overrides.update({ADAPTIVE: True, CONFIG: config})
    reason = "schedule %s" % ", ".join("%s: s%d" % (_level_text(s["levels"]), s["steps"]) for s in slots)
    nxt = {"candidate": chain(start), "overrides": overrides, "fit_rung": None, "schedule": "tuned",
           "reason": "; ".join([reason] + notes)}
    if got.get("predicted_cap") is not None:
        nxt["predicted_cap"] = got["predicted_cap"]
    nxt["key"] = attempt_key(nxt)
    return _label(nxt)


def default_launch(attempts, spec, tuned=None):
    """SGLang's default config (no file: DEFAULT_ADAPTIVE_CONFIG), started at steps 3, with the
    levers that hold its deepest tier (7) at the highest level they can, else the tuned
    schedule's (``tuned``: tuned_launch's choice)."""
    spec = spec_from(spec)
    static = _keyed(statics(attempts))
    levers = levers_of((tuned or {}).get("overrides"))
    why = "levers as the tuned schedule's" if levers else ""
    for level in sorted(spec.levels, reverse=True):
        got = lifted({"candidate": chain(DEFAULT_DEEPEST), "overrides": {}, "fit_rung": None, "reason": ""},
                     static, level_spec(spec, level))
        cap = got.get("predicted_cap")
        if cap is None:
            break  # no pool reading: nothing predicts a cap, none to lift
        if cap >= level:
            levers = levers_of(got["overrides"])
            why = "s%d holds C=%d%s" % (DEFAULT_DEEPEST, level, " with %s" % lever_words(levers) if levers else "")
            break
    overrides = dict(levers)
    overrides.update({ADAPTIVE: True, CONFIG: None})
    nxt = {"candidate": chain(DEFAULT_STEPS), "overrides": overrides, "fit_rung": None, "schedule": "default",
           "reason": "SGLang's default adaptive config, for the table%s" % ("; " + why if why else "")}
    nxt["key"] = attempt_key(nxt)
    return _label(nxt)


def _launched(attempts, nxt):
    """Whether a launch of the same schedule exists (of this run or resumed: what it measured stands)."""
    kind = nxt["schedule"]
    want = spec_schedule.canonical(nxt["overrides"].get(CONFIG))
    return any(schedule_kind(a) == kind and spec_schedule.canonical(a["overrides"].get(CONFIG)) == want
               and a.get("status") in ("ok", "failed") for a in attempts)


def _view_at(static, lspec):
    """The static launches as a search judged at ``lspec.level`` sees them: a launch made for a lower
    level that ran capped below this one, without levers, where a lever would hold this level, is
    left out, so the search launches that depth again lifted (lifted) as a search of this level
    alone would have done from its first launch; its queued figure is not what the depth can do
    here. Without cap levers every launch is kept (its queued figure is what the node gives).
    Returns ``(view, keys left out)``."""
    if not lspec.cap_levers:
        return static, set()
    out, dropped = [], set()
    for att in static:
        cap = att.get("running_cap")
        if (att.get("status") == "ok" and cap not in (None, "") and int(cap) < lspec.level
                and not levers_of(att.get("overrides")) and isinstance(att.get("candidate"), dict)):
            got = lifted({"candidate": att["candidate"], "overrides": {}, "fit_rung": None, "reason": ""}, static, lspec)
            if levers_of(got.get("overrides")):
                dropped.add(att["key"])
                continue
        out.append(att)
    return out, dropped


def schedule_next(attempts, candidates, fit_ladder=None, spec=None, graph_bs=None):
    """The next launch of a schedule run (mtp_tune_next's shape, plus ``schedule`` and ``key`` on
    the two schedule launches), or None when the run is over.

    1. per level, in level order, the existing search (tune_next) over the static launches, judged
       at that level (level_spec); each launch measures every level, so a later level's search
       starts from every earlier launch (but a launch capped below the level that a lever would
       lift, _view_at);
    2. the best single static again, lifted for the highest level where its launch ran capped below
       it (single_lift): the fallback is judged as it would be served;
    3. then the tuned schedule (tuned_launch), once;
    4. then, with ``spec.schedule_default``, SGLang's default config (default_launch), once.

    ``spec.max_launches`` counts every launch of the run; a node fault ends it."""
    spec = spec_from(spec)
    attempts = [a for a in (attempts or []) if isinstance(a, dict)]
    if len(spec.levels) < 1:
        raise AnsibleFilterError("mtp_tune_schedule needs mtp_tune_concurrency: a list of >= 2 levels, each judged on its own")
    if mtp_tune_node_fault(attempts) is not None:
        return None
    if spec.max_launches is not None and _launches(attempts) >= spec.max_launches:
        return None
    static = _keyed(statics(attempts))
    for level in spec.levels:
        lspec = level_spec(spec, level).replace(max_launches=None)
        view, dropped = _view_at(static, lspec)
        nxt = tune_next(view, candidates, fit_ladder, lspec)
        if nxt is not None and dropped and not levers_of(nxt["overrides"]) \
                and (nxt["candidate"]["key"] in dropped or pool_reference(view)[0] is None):
            # the view may hold no pool reading (every launch capped below this level): lift
            # with what every launch read
            nxt = lifted(nxt, static, lspec)
        if nxt is not None:
            nxt = dict(nxt, reason="C=%d: %s" % (level, nxt["reason"]))
            ov = ", ".join("%s=%s" % (k, v) for k, v in sorted((nxt["overrides"] or {}).items()) if v is not None)
            cand = nxt["candidate"]
            nxt["label"] = "steps=%s topk=%s draft=%s%s (%s)" % (cand["steps"], cand["topk"], cand["draft_tokens"],
                                                                 " [%s]" % ov if ov else "", nxt["reason"])
            return nxt
    relift = single_lift(attempts, spec)
    if relift is not None:
        return relift
    tuned = tuned_launch(attempts, spec, graph_bs)
    if tuned is not None and not _launched(attempts, tuned):
        return tuned
    if spec.schedule_default:
        dflt = default_launch(attempts, spec, tuned)
        if not _launched(attempts, dflt):
            return dflt
    return None


# --------------------------------------------------------------------------- the verdict

def _rows_at(attempts, spec):
    """Every setting's score at the spec's level, by key (mtp_tune_rank: repeats averaged)."""
    return dict((r["key"], r) for r in mtp_tune_rank(attempts, spec) if r["score"]["value"] is not None)


def _pct(x):
    return "%+.1f%%" % (x * 100)


def single_static(static, spec):
    """The best single static of the static launches ``static`` (keyed): per level the best
    (mtp_tune_pick_best at that level, under the node's noise) and every static's ratio to it;
    the static with the highest worst ratio, the cheaper of those tied within the band.
    Returns ``{"key", "level" (its worst), "ratio", "tied", "lspec", "best", "ranks", "worst",
    "rows"}``, or None when no level has a figure."""
    levels = list(spec.levels)
    if not levels:
        return None
    lspec = dict((lv, under_node_noise(static, level_spec(spec, lv))) for lv in levels)
    best = dict((lv, mtp_tune_pick_best(static, lspec[lv])) for lv in levels)
    ranks = dict((lv, _rows_at(static, lspec[lv])) for lv in levels)
    if all(best[lv]["winner"] is None for lv in levels):
        return None
    # each static's worst ratio to its level's best; a level it has no figure at counts as 0
    worst = {}
    for key in set(k for lv in levels for k in ranks[lv]):
        ratios = []
        for lv in levels:
            top = best[lv]["top"]
            row = ranks[lv].get(key)
            ratios.append(row["score"]["value"] / top["score"]["value"] if (row and top) else 0.0)
        worst[key] = (min(ratios), levels[ratios.index(min(ratios))])
    rows = dict((k, r) for lv in levels for k, r in ranks[lv].items())
    band = math.sqrt(2.0) * max(lspec[lv].noise for lv in levels)
    top_worst = max(v[0] for v in worst.values())
    tied = [k for k, v in worst.items() if v[0] >= top_worst * (1.0 - band)]
    key = min(tied, key=lambda k: (cost(rows[k]["candidate"]), -worst[k][0]))
    return {"key": key, "level": worst[key][1], "ratio": worst[key][0], "tied": tied, "lspec": lspec, "best": best,
            "ranks": ranks, "worst": worst, "rows": rows}


def single_lift(attempts, spec):
    """The best single static again, lifted for the highest level, when its launch ran capped below
    that level and a lever the run may use holds it (the launch it would be served as); None else.
    The per-level searches leave it as the lower levels' searches launched it; the verdict then
    compares the schedule with what the static can do at every level, not with its queue."""
    spec = spec_from(spec)
    static = _keyed(statics(attempts))
    tab = single_static(static, spec)
    if tab is None or not spec.cap_levers:
        return None
    top = max(spec.levels)
    row = tab["rows"][tab["key"]]
    att = next((a for a in reversed(static) if a["key"] == row["key"] and a.get("status") == "ok"
                and (a.get("overrides") or {}) == (row["overrides"] or {})), None)
    cap = None if att is None else att.get("running_cap")
    if cap in (None, "") or int(cap) >= top:
        return None
    got = lifted({"candidate": row["candidate"], "overrides": _fit_overrides(row["overrides"]), "fit_rung": None,
                  "reason": "best single static %s again for C=%d (ran capped at %s)" % (row["key"], top, cap)},
                 static, level_spec(spec, top))
    lev = levers_of(got["overrides"])
    if not lev or any(a["key"] == row["key"] and levers_of(a.get("overrides")) == lev for a in static):
        return None
    return labelled(got)


def _schedule_figures(attempts, spec, lspec, kind):
    """The latest config of ``kind`` (tuned or default) with its scores per level (repeats of it
    averaged): (key, {level: row}), (None, {}) when none was measured. The tuned one is the config
    the per-level winners derive now, where it was measured."""
    atts = [a for a in attempts if schedule_kind(a) == kind and a.get("status") == "ok"]
    if kind == "tuned":
        want = tuned_launch(attempts, spec)
        want_key = want["key"] if want else None
        if want_key and any(a["key"] == want_key for a in atts):
            atts = [a for a in atts if a["key"] == want_key]
    if not atts:
        return None, {}
    key = atts[-1]["key"]
    out = {}
    for lv in spec.levels:
        row = _rows_at([a for a in atts if a["key"] == key], lspec[lv]).get(key)
        if row is not None:
            out[lv] = row
    return key, out


def _schedule_table(tab, sched, dflt, levels):
    """The report's rows (level, best static, single static, schedule, default, band) and the levels
    where the schedule is below / above the single static beyond that level's band: (gain, band)."""
    lspec, best, ranks, single = tab["lspec"], tab["best"], tab["ranks"], tab["key"]
    table, below, above = [], [], []
    for lv in levels:
        one = ranks[lv].get(single)
        srow = sched.get(lv)
        band = tie_band(lspec[lv].noise, *[r["score"] for r in (one, srow) if r is not None])
        top = best[lv]["winner"]
        table.append({"level": lv,
                      "best_static": None if top is None else {"key": top["key"], "label": notation(top),
                                                               "tps": round(top["score"]["value"], 2)},
                      "single_static_tps": None if one is None else round(one["score"]["value"], 2),
                      "schedule_tps": None if srow is None else round(srow["score"]["value"], 2),
                      "default_tps": None if lv not in dflt else round(dflt[lv]["score"]["value"], 2),
                      "band": round(band, 4)})
        if one is None or srow is None:
            continue
        gain = srow["score"]["value"] / one["score"]["value"] - 1.0
        if gain < -band:
            below.append((lv, gain, band))
        elif gain > band:
            above.append((lv, gain, band))
    return table, below, above


def _schedule_verdict(tab, sched_key, sched, table, below, above, levels):
    """Whether the tuned schedule wins, why (one line), and its weakest (ratio, level).

    The schedule is judged as the best single static was chosen: by its weakest level's ratio to
    that level's best static, against that static's weakest, beyond the widest band. One
    comparison, not one per level: with one launch each, "never below beyond the band at any
    level" fails a schedule that ties everywhere as often as noise puts one of several levels below
    (the bench measured 3 of 5 runs on a node where it gains)."""
    best, single = tab["best"], tab["key"]
    complete = bool(sched) and len(sched) == len(levels)
    s_worst = None
    if complete:
        ratios = [(sched[lv]["score"]["value"] / best[lv]["top"]["score"]["value"], lv) for lv in levels
                  if best[lv]["top"] is not None]
        s_worst = min(ratios) if ratios else None
    w1, lv1 = tab["worst"][single]
    band = max([t["band"] for t in table] or [0.0])
    wins = s_worst is not None and w1 > 0 and s_worst[0] / w1 - 1.0 > band
    if sched_key is None:
        return False, "no tuned schedule was measured", s_worst
    if not complete or s_worst is None:
        return False, "the tuned schedule has no figure at C=%s" % ", ".join(
            str(lv) for lv in levels if lv not in sched), s_worst
    lead = "the schedule's weakest level (C=%d, %.1f%% of its best static) VERB %s's (C=%d, %.1f%%)" % (
        s_worst[1], s_worst[0] * 100, single, lv1, w1 * 100)
    gain = s_worst[0] / w1 - 1.0 if w1 > 0 else 0.0
    if wins:
        why = lead.replace("VERB", "beats") + " beyond the band (%s, band %.1f%%)" % (_pct(gain), band * 100)
    elif gain < -band:
        why = lead.replace("VERB", "is below") + " (%s, band %.1f%%)" % (_pct(gain), band * 100)
    else:
        why = lead.replace("VERB", "is within the band of") + " (%s, band %.1f%%)" % (_pct(gain), band * 100)
    if below:
        why += "; below %s beyond the band at %s" % (single, ", ".join("C=%d (%s)" % (lv, _pct(g)) for lv, g, _b in below))
    if above and not wins:
        why += "; above it at %s" % ", ".join("C=%d (%s)" % (lv, _pct(g)) for lv, g, _b in above)
    return wins, why, s_worst


def schedule_winner(attempts, spec=None, previous=None, now=None, candidates=None):
    """mtp_tune_winner under ``spec.schedule``: the same keys, plus ``schedule`` (the table).

    Per level L the best static (mtp_tune_pick_best at L over the static launches) and each
    static's ratio to it, r_L. The best single static is the static measured at every level with
    the highest min_L r_L (ties within the band: the cheaper). The tuned schedule, measured at every
    level, wins iff its own min_L r_L beats the best single static's beyond the tie band (the
    widest of the levels' bands, tie_band of the two figures under the node's noise); else the
    best single static wins. ``why`` also names the levels where the schedule is below or above
    the single static beyond the band. None when nothing was measured."""
    spec = spec_from(spec)
    attempts = _keyed(attempts)
    static = statics(attempts)
    levels = list(spec.levels)
    tab = single_static(static, spec)
    if tab is None:
        return None
    lspec, ranks, worst, single = tab["lspec"], tab["ranks"], tab["worst"], tab["key"]
    sched_key, sched = _schedule_figures(attempts, spec, lspec, "tuned")
    default_key, dflt = _schedule_figures(attempts, spec, lspec, "default")
    table, below, above = _schedule_table(tab, sched, dflt, levels)
    wins, why, s_worst = _schedule_verdict(tab, sched_key, sched, table, below, above, levels)
    single_row = tab["rows"][single]
    if wins:
        # the schedule's figure is the one at the level where it gains most over the single static
        # (one exists: beating that static's weakest level beyond the band puts that level above
        # it): the converge's smoke check measures there, where a schedule that does not switch
        # would show
        lv = max(above, key=lambda t: t[1])[0]
        row = sched[lv]
        decided_by = "schedule: " + why
        runner_up, margin = single, s_worst[0] / worst[single][0] - 1.0
        band = max([t["band"] for t in table] or [0.0])
    else:
        lv = worst[single][1]
        row = ranks[lv].get(single) or single_row
        decided_by = "best single static %s (worst level C=%d at %.1f%% of its best static): %s" % (
            single, lv, worst[single][0] * 100, why)
        runner_up = sched_key
        margin = None
        if sched.get(lv) is not None:
            margin = row["score"]["value"] / sched[lv]["score"]["value"] - 1.0
        band = next(t["band"] for t in table if t["level"] == lv)
    sc = row["score"]
    cand = dict((k, row["candidate"][k]) for k in ("steps", "topk", "draft_tokens"))
    out = {"key": row["key"], "candidate": cand, "overrides": row["overrides"] or {}, "score": sc,
           "decided_by": decided_by, "tied": tab["tied"] if len(tab["tied"]) > 1 else [],
           "runner_up": runner_up, "decided_at": now, "margin": margin, "band": band,
           "interval": [sc["low"], sc["high"]], "noise": mtp_tune_node_noise(static, lspec[levels[-1]])}
    config = next((a["overrides"].get(CONFIG) for a in attempts if a["key"] == sched_key), None)
    out["schedule"] = {"levels": levels, "rows": table, "single_static": single, "single_static_label": notation(single_row),
                       "config": None if config is None else spec_schedule.canonical(config),
                       "label": None if config is None else spec_schedule.label(config),
                       "key": sched_key, "default_key": default_key, "verdict": "schedule" if wins else "static", "why": why}
    if candidates:
        _unverified(out, static, candidates, lspec, levels)
    prev = previous if isinstance(previous, dict) else {}
    if prev.get("key") == out["key"] and (prev.get("overrides") or {}) == out["overrides"] and prev.get("decided_at"):
        out["decided_at"] = prev["decided_at"]
    return out


def _unverified(out, static, candidates, lspec, levels):
    """The winner's ``unverified``, ``model_rules_out`` and ``model``: those of each level's search,
    each row naming its level (a candidate never measured that could beat that level's best)."""
    # imported here: mtp_winner dispatches to this module
    from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_winner import (
        mtp_tune_model_check, mtp_tune_unverified)
    unverified, rules_out, broken = [], [], []
    for lv in levels:
        for row in mtp_tune_unverified(static, candidates, lspec[lv]):
            (rules_out if row["convex_rules_out"] else unverified).append(dict(row, level=lv))
        broken.extend(b for b in mtp_tune_model_check(static, candidates, lspec[lv])["broken"] if b not in broken)
    out["unverified"] = unverified
    out["model_rules_out"] = rules_out
    out["model"] = {"holds": not broken, "broken": broken}
