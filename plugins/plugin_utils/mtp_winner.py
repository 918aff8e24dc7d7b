# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""The winner as results.json keeps it (mtp_tune_winner), with what the search left open: the
candidates never measured that could still win (mtp_tune_unverified) and whether the launches agree
with the model its bounds rest on (mtp_tune_model_check).  Controller-side library of
plugins/filter/mtp_tune.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import (
    candidate_states, cannot_fit, fit_classes_of)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import (
    mtp_tune_node_noise, mtp_tune_pick_best, under_node_noise)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import Lane, can_win, tighter_bound, tree_bound
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import spec_from


def mtp_tune_unverified(attempts, candidates, spec=None):
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

    A candidate is listed when ``bound`` leaves it able to end as the winner, by the rule the
    search prunes with (can_win): a candidate dearer than the winner above its figure by more
    than the tie band (``sqrt(2) x noise``; within it, the cheaper winner keeps a tie), a cheaper
    one within the band of the top; no measurement shows it cannot win, and a landscape that
    matches every measurement exists where it does.  Candidates a cheaper one proved cannot fit
    are left out.
    Returns ``[{"key", "steps", "topk", "draft_tokens", "bound", "gain", "bound_convex",
    "gain_convex", "convex_rules_out"}]`` in list order; ``gain`` is ``bound`` over the winner's
    figure, minus one; ``convex_rules_out``: ``bound_convex`` leaves it unable to win.
    """
    spec = under_node_noise(attempts, spec_from(spec))
    noise = spec.noise
    classes = fit_classes_of(spec.fit_classes)
    best = mtp_tune_pick_best(attempts, spec)
    winner = best["winner"]
    if winner is None or not candidates:
        return []
    value = winner["score"]["value"]
    band = math.sqrt(2.0) * noise
    states = candidate_states(attempts, None, classes)
    lanes = {}
    for cand in candidates:
        lanes.setdefault(cand["topk"], []).append(cand)
    out = []
    chain = lanes.get(1)
    chain_sound = Lane(chain, states, spec, convex=False) if chain else None
    chain_convex = Lane(chain, states, spec, convex=True) if chain else None
    for topk in sorted(lanes):
        lane = lanes[topk]
        sound = Lane(lane, states, spec, convex=False)
        convex = Lane(lane, states, spec, convex=True)
        for cand in lane:
            if cand["key"] in states or cannot_fit(cand, states, classes):
                continue
            # a draft tree is bounded by the chain and the smaller drafts too (tree_bound)
            ub = tighter_bound(sound.bound(cand), tree_bound(cand, chain_sound, states, spec))
            if not can_win(ub, cand, best, band):
                continue
            ubc = tighter_bound(convex.bound(cand), tree_bound(cand, chain_convex, states, spec))
            out.append({"key": cand["key"], "steps": cand["steps"], "topk": cand["topk"],
                        "draft_tokens": cand["draft_tokens"], "bound": _finite(ub, 3),
                        "gain": _finite(None if ub is None else ub / value - 1.0, 4),
                        "bound_convex": _finite(ubc, 3),
                        "gain_convex": _finite(None if ubc is None else ubc / value - 1.0, 4),
                        "convex_rules_out": not can_win(ubc, cand, best, band)})
    return out


def mtp_tune_model_check(attempts, candidates, spec=None):
    """Whether the launches agree with the model the search's bounds rest on.

    Per topk lane and judged series (time per verify round at the judged level, from the accept
    length and the rate): a round that gets faster with more draft tokens beyond the noise breaks
    monotony (no bound is used there); a bend the other way (an extra draft token costing less than
    the one before, beyond the noise) breaks convexity (only the monotone bound is used there). A
    chain's accept length that rises more with a draft token than with the one before breaks its
    concavity (its bound is not used). A
    change of server configuration between launches (a fitted running-request cap or graph batch)
    is such a bend as the model sees it. Returns ``{"holds", "broken": [text]}``.
    """
    spec = under_node_noise(attempts, spec_from(spec))
    objective, level = spec.objective, spec.level
    states = candidate_states(attempts)
    lanes = {}
    for cand in candidates or []:
        lanes.setdefault(cand["topk"], []).append(cand)
    broken = []
    for topk in sorted(lanes):
        lane = Lane(lanes[topk], states, spec, convex=True)
        if lane.chain and not lane.tau_concave:
            broken.append("topk %s: the accept length rose more with a draft token than with the one before (draft "
                          "tokens %s); its concavity bound is not used" % (
                              topk, ", ".join(str(x + 1) for x in sorted(lane.tau))))
        for (c, kind), series in sorted(lane.series.items()):
            judged = c == (level if level is not None else c) and kind == ("pr" if objective == "latency" else "ag")
            if not judged or len(series["xs"]) < 2:
                continue
            depths = ", ".join(str(x + 1) for x in series["xs"])
            if series.get("queue_bound"):
                capped = ", ".join("%d (cap %d)" % (x + 1, lane.caps[x]) for x in series["xs"]
                                   if x in lane.caps and lane.caps[x] < c)
                broken.append("topk %s at C=%s: draft tokens %s ran capped below the load, each depth its own batch; "
                              "no bound is used there" % (topk, c, capped))
            elif not series["mono"]:
                broken.append("topk %s at C=%s: a verify round got faster with more draft tokens (draft tokens %s); "
                              "no bound is used there" % (topk, c, depths))
            elif not series["convex"] and len(series["xs"]) >= 3:
                broken.append("topk %s at C=%s: an extra draft token cost less than the one before (draft tokens %s); "
                              "only the monotone bound is used there" % (topk, c, depths))
    return {"holds": not broken, "broken": broken}


def _finite(x, digits):
    """A rounded figure for results.json, None for no figure or no bound (JSON has no infinity)."""
    return None if x is None or math.isinf(x) else round(x, digits)


def mtp_tune_winner(attempts, spec=None, previous=None, now=None, candidates=None):
    """The winner as stored in results.json (compact), or None, decided under ``spec`` (a
    TuneSpec, or what spec_from takes).

    ``margin`` is the winner's relative lead over the runner-up (negative when it won a tie
    trailing the top within the band), ``band`` the tie band of that comparison and
    ``interval`` the winner's own band.  ``decided_at`` is kept from ``previous`` (the stored
    winner) when the same setting still wins, so a re-run that changes nothing also writes
    nothing new.  With ``candidates`` (the run's list), ``unverified`` lists the candidates never
    measured that the model does not rule out (mtp_tune_unverified, those it leaves open with a
    convex round time where the measurements agree with convexity), ``model_rules_out`` those only
    the convexity rules out, and ``model`` whether the measurements agree with the model
    (mtp_tune_model_check). With ``spec.schedule`` the per-load schedule's verdict instead, with
    the same keys and its table (mtp_schedule.schedule_winner).
    """
    spec = spec_from(spec)
    if spec.schedule:
        # imported here: mtp_schedule uses this module's checks per level
        from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_schedule import schedule_winner
        return schedule_winner(attempts, spec, previous, now, candidates)
    best = mtp_tune_pick_best(attempts, spec)
    w = best["winner"]
    if w is None:
        return None
    cand = dict((k, w["candidate"][k]) for k in ("steps", "topk", "draft_tokens"))
    out = {"key": w["key"], "candidate": cand, "overrides": w["overrides"] or {}, "score": w["score"],
           "decided_by": best["decided_by"], "tied": best["tied"],
           "runner_up": best["runner_up"]["key"] if best["runner_up"] else None, "decided_at": now,
           "margin": best["margin"], "band": best["band"],
           "interval": [w["score"]["low"], w["score"]["high"]],
           "noise": mtp_tune_node_noise(attempts, spec)}
    if candidates:
        rows = mtp_tune_unverified(attempts, candidates, spec)
        # The stated model (accept length concave in depth, verify-round time non-decreasing and
        # convex within one configuration) is what the search's bounds rest on: what it rules
        # out is not open; what only a landscape outside it could make win is named apart.
        out["unverified"] = [u for u in rows if not u["convex_rules_out"]]
        out["model_rules_out"] = [u for u in rows if u["convex_rules_out"]]
        out["model"] = mtp_tune_model_check(attempts, candidates, spec)
    prev = previous if isinstance(previous, dict) else {}
    if prev.get("key") == out["key"] and (prev.get("overrides") or {}) == out["overrides"] and prev.get("decided_at"):
        out["decided_at"] = prev["decided_at"]
    return out
