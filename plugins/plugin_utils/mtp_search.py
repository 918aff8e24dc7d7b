# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""The search: which launch comes next (mtp_tune_next: the sweep, or the adaptive search over the
model of each topk lane, Lane, that bounds and predicts the candidates not measured), and after
it the launches that complete the contenders' tables (mtp_tune_complete).  Controller-side library
of plugins/filter/mtp_tune.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.blackwell.sglang.plugins.module_utils.bench_metrics import (
    accept_length_high_deeper, accept_lengths_by_depth, bisect_up)
from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import as_number as _num, level_metrics
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_cap import lift_relaunch, lifted
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import (
    candidate_states, cannot_fit, fit_classes_of)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_node import mtp_tune_node_fault
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import (
    level_of, mtp_tune_pick_best, mtp_tune_score, tie_band, under_node_noise)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import (
    as_int, candidate_key, cost, spec_from)


# The reason of a launch that completes a contender's table at every level (mtp_tune_complete).
COMPLETE_REASON = "levels "


# --------------------------------------------------------------------------- search

def _seed_index(cands, seed):
    if not cands:
        return None
    seed = as_int(seed, "mtp_tune_seed")
    return min(range(len(cands)), key=lambda i: (abs(cands[i]["steps"] - seed), cands[i]["steps"]))


def chain_tau(k, alpha):
    """Tokens per verify round of a chain draft of depth ``k`` accepted with probability alpha."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def alpha_of(k, tau):
    """The per-token acceptance that gives accept length ``tau`` at depth ``k`` (bisection)."""
    tau = min(max(float(tau), 1.0), float(k + 1))
    return bisect_up(lambda alpha: chain_tau(k, alpha), tau, 0.0, 1.0, iterations=40)


class Lane(object):
    """What the launches of one topk lane say about the unmeasured candidates.

    Each launch gives, per concurrency level, per-request and aggregate tok/s and the accept
    length; dividing accept length by a rate gives a time per verify round.  The round time
    grows with the draft depth and, on every server the project knows, at a non-decreasing rate
    (each extra draft token costs at least what the previous one did); a chain's accept length
    is concave in the depth (below the line through two measured depths, outside them; the chain
    model at the highest measured acceptance where one depth was measured), and capped at other
    depths than a launch's by that launch's histogram of correct drafts.  Together they bound
    every unmeasured candidate's figure from above; where the measured points contradict the
    convexity beyond the noise, only the monotone bound is used, and where they contradict
    monotony, no bound at all (the candidate must be measured).

    ``spec`` (a TuneSpec, or what spec_from takes) gives the objective, the level it is judged at,
    the noise and the SLO's per-request floor.
    """

    def __init__(self, lane, states, spec, convex=True):
        spec = spec_from(spec)
        self.lane = lane
        self.noise = noise = spec.noise
        self.use_convex = convex
        self.objective = spec.objective
        self.level = spec.level
        self.slo_min = None if spec.slo_min_tps in (None, "") else float(spec.slo_min_tps)
        self.points = {}  # x (draft tokens - 1) -> {c: (t_pr, t_ag)}
        self.caps = {}  # x -> the launch's running-request cap, where its record has one
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
                m = level_metrics(level_of(ok, key))
                if m["failed"]:
                    continue
                if m["accept_length"] is not None and m["accept_length"] > 0:
                    taus.append(float(m["accept_length"]))
                levels[int(key)] = m
                measured_levels.add(int(key))
            if not levels:
                continue
            if ok.get("running_cap") not in (None, ""):
                self.caps[x] = int(ok["running_cap"])
            tau = sorted(taus)[len(taus) // 2] if taus else None
            if tau is not None and chain and x >= 1:
                alphas.append(alpha_of(x, tau))
            self.tau[x] = tau
            self.points[x] = levels
        self.alpha = sum(alphas) / len(alphas) if alphas else None
        # Optimistic end of the acceptance: the highest point estimate plus the noise.
        self.alpha_hi = min(1.0, max(alphas) + 2 * noise) if alphas else 1.0
        for x in self.tau:
            if self.tau[x] is None:
                self.tau[x] = chain_tau(x, self.alpha if self.alpha is not None else 1.0)
        self.tau_cap = self._histogram_caps(lane, states) if chain else {}
        self.tau_concave = chain and self._concave(self.tau, noise)
        self.levels = sorted(measured_levels)
        self.series = {}
        for c in self.levels:
            for kind, field in (("pr", "decode_tps_mean"), ("ag", "output_throughput")):
                pts = {}
                for x, lv in self.points.items():
                    m = lv.get(c)
                    if m is not None and m[field]:
                        pts[x] = self.tau[x] / float(m[field])
                self.series[(c, kind)] = self._trust(pts, self._queue_bound(pts, c))

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

    @staticmethod
    def _concave(taus, n):
        """Whether the measured accept lengths rise by no more with each draft token than with the
        one before, within the noise (the chain's k-th draft token adds the chance that the first
        k are all accepted, which never grows)."""
        xs = sorted(x for x in taus if taus[x] is not None)
        for a, b, c in zip(xs, xs[1:], xs[2:]):
            left = (taus[b] * (1 + n) - taus[a] * (1 - n)) / (b - a)
            right = (taus[c] * (1 - n) - taus[b] * (1 + n)) / (c - b)
            if right > left:
                return False
        return True

    def _queue_bound(self, pts, level):
        """Whether a launch of the series ran a smaller batch than ``level`` (its running cap below
        it). Its round was then timed at its cap, another server configuration than a deeper or
        shallower one's: on a hybrid the cap falls with depth, and the real H100 landscape
        (tests/bench/bench_real_hybrid_search.py) is not single-peaked there (C=16: depth 1 at
        878 tok/s, 2 at 677, 4 at 770). No bound of the model holds across it."""
        return any(x in self.caps and self.caps[x] < level for x in pts)

    def _trust(self, pts, queue_bound=False):
        n = self.noise
        xs = sorted(pts)
        if queue_bound:
            return {"pts": pts, "xs": xs, "mono": False, "convex": False, "queue_bound": True}
        mono = all(pts[b] * (1 + n) >= pts[a] * (1 - n) for a, b in zip(xs, xs[1:]))
        convex = mono and self.use_convex
        for a, b, c in zip(xs, xs[1:], xs[2:]):
            left = (pts[b] * (1 - n) - pts[a] * (1 + n)) / (b - a)
            right = (pts[c] * (1 + n) - pts[b] * (1 - n)) / (c - b)
            if left > right:
                convex = False
        return {"pts": pts, "xs": xs, "mono": mono, "convex": convex}

    def _t_low(self, series, x):
        """Lower bound of the round time at x (0.0: no bound); at a measured x, at least that
        measurement less the noise (bound_wider asks at the chain's measured depths)."""
        n = self.noise
        pts = series["pts"]
        own = pts[x] * (1 - n) if x in pts else 0.0
        if not series["mono"]:
            return own
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
        return max(low, own, 0.0)

    def _tau_high(self, x):
        if x in self.tau_cap:
            # Counted from a launch's histogram, sound under both models of where a draft's
            # mistakes come from. The chain model's geometric decay is not a bound: on the real
            # self-draft sweep depth 6 accepted 1.84, above what it allows from depth 2 (1.83).
            high = self.tau_cap[x] * (1 + self.noise)
        elif self.use_convex and self.tau_concave and len(self.tau) >= 2:
            # Two measured depths or more: the concavity bounds it (below); the chain's geometric
            # decay at the highest acceptance measured is no bound where the acceptance of later
            # draft positions given the earlier ones is higher than the first's.
            high = float(x + 1)
        else:
            high = chain_tau(x, self.alpha_hi) if self.chain else float(x + 1)
        right = [a for a in sorted(self.tau) if a > x]
        if right:
            high = min(high, self.tau[right[0]] * (1 + self.noise))
        if self.use_convex and self.tau_concave:
            high = min(high, self._tau_concave_high(x))
        return high

    def _tau_concave_high(self, x):
        """Upper end of the accept length at x from its concavity in the draft depth: outside two
        measured depths it lies below the line through them (each end widened by the noise). With
        the round time's convex lower bound this makes the figure single-peaked: a measured point
        below a cheaper one caps everything dearer at about its own figure, and the other way round."""
        n = self.noise
        xs = sorted(a for a in self.tau if self.tau[a] is not None)
        high = float("inf")
        for i, a in enumerate(xs):
            for b in xs[i + 1:]:
                if x > b:
                    slope = (self.tau[b] * (1 + n) - self.tau[a] * (1 - n)) / (b - a)
                    high = min(high, self.tau[b] * (1 + n) + (x - b) * max(slope, 0.0))
                elif x < a:
                    slope = (self.tau[b] * (1 - n) - self.tau[a] * (1 + n)) / (b - a)
                    high = min(high, self.tau[a] * (1 + n) - (a - x) * max(slope, 0.0))
        return high

    def _rate_high(self, x, c, kind, tau=None):
        series = self.series.get((c, kind))
        if series is None or not series["pts"]:
            return float("inf")
        low = self._t_low(series, x)
        return (self._tau_high(x) if tau is None else tau) / low if low > 0 else float("inf")

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

    def predict(self, cand):
        """The figure the model expects (chain acceptance at the fitted alpha, interpolated round time)."""
        x = cand["draft_tokens"] - 1
        level = self.level
        if not self.levels:
            return None
        if self.objective == "slo":
            return None
        c = level if level is not None else (1 if self.objective == "latency" else self.levels[-1])
        series = self.series.get((c, "pr" if self.objective == "latency" else "ag"))
        if series is None or not series["pts"] or series.get("queue_bound"):
            return None
        tau = chain_tau(x, self.alpha) if (self.chain and self.alpha is not None) else float(x + 1)
        return tau / self._t_mid(series, x)

    def bound(self, cand, x=None, tau=None):
        """Upper bound of the candidate's objective figure (inf: unbounded; None: cannot be feasible).

        ``x`` and ``tau``: bound the figure at this lane's depth ``x`` with accept length ``tau``
        instead of the candidate's own (bound_wider)."""
        x = cand["draft_tokens"] - 1 if x is None else x
        level = self.level
        if not self.levels:
            return float("inf")
        if self.objective == "latency":
            c = level if level is not None else 1
            return self._rate_high(x, c, "pr", tau)
        if self.objective == "throughput":
            c = level if level is not None else self.levels[-1]
            return self._rate_high(x, c, "ag", tau)
        best = None
        for c in ([level] if level is not None else self.levels):
            if self.slo_min is not None and self._rate_high(x, c, "pr", tau) < self.slo_min:
                continue
            agg = self._rate_high(x, c, "ag", tau)
            best = agg if best is None else max(best, agg)
        return best

    def bound_wider(self, cand):
        """Upper bound of a draft tree's figure (topk > 1) from this chain lane (topk 1): a tree of
        depth s accepts at most s + 1 tokens per verify round (s drafts on one path and the bonus
        token), and its round takes at least the chain's of the same depth, which verifies fewer
        draft tokens after narrower draft steps. Where the chain rules its own depth s out this
        way, no tree of depth s can win either (inf: no bound from the chain)."""
        if not self.chain:
            return float("inf")
        return self.bound(cand, x=cand["steps"], tau=float(cand["steps"] + 1))


def tighter_bound(a, b):
    """The tighter of two upper bounds (None: cannot be feasible)."""
    if a is None or b is None:
        return None
    return min(a, b)


def narrower_bound(cand, states, spec):
    """Upper bound of a draft tree's judged figure from the launches of smaller drafts (no more
    steps, no more topk, no more draft tokens; a chain is one): its verify round takes at least
    theirs, as it drafts as deep and as wide or more and verifies as many draft tokens or more.
    It accepts at most steps + 1 tokens a round, and at most what a launch of the same steps and
    topk with as many draft tokens or more accepted: that one verifies the best d' - 1 of the same
    expanded nodes, a superset of the best d - 1 (SGLang's EAGLE-2 tree). inf without a smaller
    launch, and for the slo objective (judged over several figures)."""
    spec = spec_from(spec)
    if cand.get("topk", 1) <= 1 or spec.objective == "slo":
        return float("inf")
    slowest, most = 0.0, float(cand["steps"] + 1)
    for st in states.values():
        ok = (st or {}).get("ok")
        other = (ok or {}).get("candidate") or {}
        if not ok:
            continue
        sc = mtp_tune_score(ok, spec)
        tau = level_metrics(level_of(ok, sc["level"]))["accept_length"] if sc["value"] else None
        if not tau:
            continue
        if other.get("steps") == cand["steps"] and other.get("topk") == cand["topk"] \
                and other.get("draft_tokens", 0) >= cand["draft_tokens"]:
            # the same expanded tree, its best d' - 1 nodes verified: a superset of the best d - 1
            most = min(most, float(tau) * (1.0 + spec.noise))
        if other.get("steps", 0) <= cand["steps"] and other.get("topk", 1) <= cand["topk"] \
                and other.get("draft_tokens", 0) <= cand["draft_tokens"]:
            slowest = max(slowest, float(tau) / float(sc["value"]))
    if slowest <= 0:
        return float("inf")
    return most / (slowest * (1.0 - spec.noise))


def tree_bound(cand, chain_model, states, spec):
    """The tighter of a tree's two bounds from other lanes (Lane.bound_wider of the chain's
    model, narrower_bound); inf for a chain or where neither has one."""
    if cand.get("topk", 1) <= 1:
        return float("inf")
    ub = narrower_bound(cand, states, spec)
    if chain_model is not None and chain_model.levels:
        ub = tighter_bound(ub, chain_model.bound_wider(cand))
    return ub


def can_win(ub, cand, best, band):
    """Whether a candidate whose figure is at most ``ub`` could still end as the winner."""
    if ub is None:
        return False
    top, winner = best["top"], best["winner"]
    if top is None:
        return True
    if ub < top["score"]["value"] * (1.0 - band):
        return False  # worse than the top beyond the band: never wins, not even a tie
    if winner is not None and cost(cand) > cost(winner["candidate"]) \
            and ub <= winner["score"]["value"] / (1.0 - band):
        return False  # would tie with a cheaper winner at best
    return True


def _open_in(lane, states, spec, best, wider=None):
    """The lane's unmeasured candidates its bounds leave able to win, ``{index: (bound,
    prediction)}``, and the lane's model (Lane)."""
    model = Lane(lane, states, spec)
    band = math.sqrt(2.0) * spec.noise
    open_ = {}
    for i, cand in enumerate(lane):
        if cand["key"] in states:
            continue
        ub = model.bound(cand)
        pred = model.predict(cand)
        if cand["topk"] > 1:
            ub = tighter_bound(ub, tree_bound(cand, wider, states, spec))
            # a tree lane's own prediction knows no acceptance (x + 1 tokens a round): never above the bound
            pred = None if (pred is None or ub is None) else min(pred, ub)
        if can_win(ub, cand, best, band):
            open_[i] = (ub, pred)
    return open_, model


def _adaptive_lane(lane, states, seed_idx, best, spec, chain=None):
    """Next candidate of one lane and why, or (None, None) when the search of the lane is over.

    ``chain``: the topk-1 candidates of the run. A tree of a lane with topk > 1 is bounded by
    the chain's launches (Lane.bound_wider) and by every launch of a smaller draft (tree_bound);
    once the chain has a launch, the tree lane's seed and ends are launched only where that bound
    leaves them able to win.

    After the seed and the ends ``spec.probe_ends`` names, two rules in turn:

    1. among the candidates the chain-model bounds leave able to win, the one the model
       predicts highest, while that prediction beats the best measured figure (round time
       interpolated between the measured points at the judged level, or extended above them,
       and taken flat below the cheapest; accept length from the fitted chain acceptance).
       This finds a second peak or the far end of a climb without walking to it;
    2. the unmeasured neighbours in the list of the best measured candidate and of every
       candidate within the noise band of it, bounds or not: the answer is then a measured
       local optimum, also where the round times bend the other way than the bounds assume.

    With ``spec.strategy`` climb, after the seed: _climb_step (no ends, no rule 1 jump, and a
    neighbour only where its bound leaves it able to win).
    """
    noise, probe_ends = spec.noise, spec.probe_ends
    wider = Lane(chain, states, spec) if chain and lane[0]["topk"] > 1 else None
    if wider is not None and not wider.levels:
        wider = None  # nothing of the chain measured yet: no bound from it
    if lane[seed_idx]["key"] not in states and wider is None:
        return lane[seed_idx], "adaptive: seed"
    open_, model = _open_in(lane, states, spec, best, wider)
    if lane[seed_idx]["key"] not in states and seed_idx in open_:
        return lane[seed_idx], "adaptive: seed"
    keys = [c["key"] for c in lane]
    top = best["top"]
    ref = keys.index(top["key"]) if top and top["key"] in keys else seed_idx
    if wider is not None and (top is None or top["key"] not in keys):
        # A tree lane that holds no best: its own local optimum is no answer, so no walk around
        # its seed; what the bounds leave able to win is launched (rule 1), and the neighbours
        # of its candidates within the band of the best (rule 2).
        ref = None
    # Every candidate within the band of the top counts as a best: a near-tie may hide the
    # climb on its other side.
    tops = [] if ref is None else [ref]
    if top is not None:
        for row in best["ranking"]:
            sc = row["score"]
            if sc["value"] is not None and row["key"] in keys and row["key"] != top["key"] \
                    and sc["value"] >= top["score"]["value"] * (1.0 - tie_band(noise, top["score"], sc)):
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
    if spec.strategy == "climb":
        def open_after(i):
            return _open_after(lane, i, open_[i][1], model, states, spec, best, wider)
        return _climb_step(lane, near, open_, top, open_after, spec.objective == "slo")
    ends = []
    if probe_ends in ("both", "high"):
        ends.append(len(lane) - 1)
    if probe_ends in ("both", "low"):
        ends.append(0)
    for idx in ends:
        if lane[idx]["key"] not in states and (wider is None or idx in open_):
            return lane[idx], "adaptive: the list's %s end" % ("dearest" if idx else "cheapest")
    if top is not None and open_ and spec.objective == "slo":
        # Nothing predicted (Lane.predict): what could still beat the best, the cheapest first.
        above = dict((i, v) for i, v in open_.items() if v[0] > top["score"]["value"])
        if above:
            return _cheapest_open(lane, above, "adaptive")
    elif top is not None and open_:
        preds = [(p if p is not None else ub, i) for i, (ub, p) in open_.items()]
        val, i = max(preds, key=lambda r: (r[0], -abs(r[1] - (seed_idx if ref is None else ref))))
        if val > top["score"]["value"]:
            if open_[i][1] is None and math.isinf(val):
                return lane[i], "adaptive: a launch ran capped below the judged load, so nothing bounds or predicts it"
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


def _open_after(lane, i, pred, model, states, spec, best, wider):
    """How many of the lane's candidates would stay open if candidate ``i`` measured what the
    model predicts for it (None: no prediction)."""
    if pred is None:
        return None
    cand = lane[i]
    x = cand["draft_tokens"] - 1
    c = model.level if model.level is not None else (1 if model.objective == "latency" else model.levels[-1])
    tau = chain_tau(x, model.alpha) if (model.chain and model.alpha is not None) else float(x + 1)
    per_request, aggregate = (pred, pred * c) if model.objective == "latency" else (pred / float(c), pred)
    guess = {"key": cand["key"], "candidate": cand, "overrides": {}, "status": "ok",
             "metrics": {str(c): {"decode_tps_per_request": {"mean": per_request}, "output_throughput": aggregate,
                                  "accept_length": tau, "failed": 0}}}
    after = dict(states)
    after[cand["key"]] = {"attempts": [guess], "ok": guess, "pending": None, "done": True, "fit": None}
    return len(_open_in(lane, after, spec, best, wider)[0])


def _climb_step(lane, near, open_, top, open_after, slo=False):
    """The climb's next launch in a lane (strategy climb): an unmeasured neighbour of the best, or
    of a candidate within the band of it, that its bound leaves able to win (the one the model
    predicts highest); then what the bounds leave able to win: the one the model predicts above
    the best, else the one whose predicted figure would leave the fewest open (``open_after``).
    Over when the bounds rule out everything unmeasured. Under the slo objective (``slo``), which
    the model predicts nothing for, the cheapest of what the bounds leave able to win (_cheapest_open)."""
    climb = [i for i in near if i in open_]
    if climb:
        i = sorted(climb, key=lambda i: (open_[i][1] is None, -(open_[i][1] or 0.0), i))[0]
        return lane[i], "climb: next to the best"
    if not open_:
        return None, None
    above = [i for i in open_ if open_[i][1] is not None and (top is None or open_[i][1] > top["score"]["value"])]
    if above:
        i = max(above, key=lambda i: (open_[i][1], -i))
        return lane[i], "climb: predicted %.1f, could reach %.1f" % (open_[i][1], open_[i][0])
    left = dict((i, open_after(i)) for i in open_)
    if slo and all(v is None for v in left.values()):
        return _cheapest_open(lane, open_, "climb")
    i = min(open_, key=lambda i: (left[i] is None, left[i], -open_[i][0], i))
    return lane[i], "climb: could reach %.1f" % open_[i][0]


def _cheapest_open(lane, open_, strategy):
    """The cheapest candidate the bounds leave open, under the slo objective (nothing is predicted,
    so nothing ranks them but the bound, which grows with the draft): a launch of it that fails on
    memory (or is capped) rules out every dearer draft of its lane (cannot_fit), one of a dearer
    draft rules out nothing cheaper, and the dearer ones are the likelier to fail."""
    i = min(open_, key=lambda i: cost(lane[i]))
    return lane[i], "%s: could reach %.1f, the cheapest open" % (strategy, open_[i][0])


def _reach(att, spec):
    """The highest concurrency the objective judges ``att`` at: a running-request limit or a
    captured graph batch at or above it changes none of its judged figures."""
    if spec.level not in (None, ""):
        return as_int(spec.level, "mtp_tune_level")
    if spec.objective == "latency":
        return 1
    measured = [int(k) for k in (att.get("metrics") or {}) if str(k).isdigit()]
    return max(measured) if measured else None


def fit_can_win(cand, states, candidates, spec, best):
    """Whether a candidate whose fit search is under way could still win at its best fitting value
    (the largest setting of the lever below the one that failed); if not, its bisection stops.

    Measured at a setting of the lever at or above every concurrency the objective judges, its judged
    figures are what a larger setting would give (a running-request limit or a graph batch the load
    never reaches changes nothing): that figure stands, for every strategy. Before that, the adaptive
    and climb searches bound it by the other launches, as if it had never been launched (a fitted
    server is no faster than the same draft unfitted); the sweep does not prune on bounds.
    ``states``: candidate_states with the fit plan; ``best``: mtp_tune_pick_best of the attempts."""
    st = states[cand["key"]]
    band = math.sqrt(2.0) * spec.noise
    own = None
    row = next((r for r in best["ranking"] if r["key"] == cand["key"]), None)
    if st["ok"] is not None and row is not None and row["status"] == "ok":
        own = row["score"]["value"]
        reach = _reach(st["ok"], spec)
        started = (st["fit"] or {}).get("ok")  # the largest setting that started
        if started is not None and reach is not None and started >= reach:
            return can_win(own, cand, best, band)
    if spec.strategy == "sweep":
        return True
    others = dict((k, v) for k, v in states.items() if k != cand["key"])
    lane = [c for c in candidates if c["topk"] == cand["topk"]]
    ub = Lane(lane, others, spec).bound(cand)
    if cand["topk"] > 1:
        chain = [c for c in candidates if c["topk"] == 1]
        wider = Lane(chain, others, spec) if chain else None
        ub = tighter_bound(ub, tree_bound(cand, wider, others, spec))
    if own is not None:
        # measured below the judged load: a larger setting may do better, never worse
        ub = own if ub is None else max(ub, own)
    return can_win(ub, cand, best, band)


def labelled(nxt):
    """``nxt`` (a launch) with its progress label: the chain, the overrides given, the reason."""
    cand = nxt["candidate"]
    ov = ", ".join("%s=%s" % (k, v) for k, v in sorted((nxt["overrides"] or {}).items()) if v is not None)
    nxt["label"] = "steps=%s topk=%s draft=%s%s (%s)" % (cand["steps"], cand["topk"], cand["draft_tokens"],
                                                         " [%s]" % ov if ov else "", nxt["reason"])
    return nxt


def _remeasure(attempts, best, budget):
    """A contender to measure again: the dearer of the top and the cheapest candidate tied with
    it, while their bands still overlap and the budget lasts."""
    if budget in (None, "") or as_int(budget, "mtp_tune_remeasure_launches") <= 0:
        return None
    used = sum(1 for a in attempts if str(a.get("reason") or "").startswith("remeasure") and not a.get("resumed"))
    if used >= as_int(budget, "mtp_tune_remeasure_launches"):
        return None
    if not best["tied"] or best["top"] is None or best["winner"] is None:
        return None
    pair = [best["top"], best["winner"]]
    row = min(pair, key=lambda r: (r["score"]["n"], cost(r["candidate"])))
    return {"candidate": row["candidate"], "overrides": row["overrides"] or {}, "fit_rung": None,
            "reason": "remeasure %d/%s: %s ties %s within %.1f%%" % (
                used + 1, budget, best["winner"]["key"], best["top"]["key"], (best["band"] or 0) * 100)}


def _noise_relaunch(attempts, budget):
    """The run's first measured setting again, until it has been launched ``budget`` more times:
    the node's launch-to-launch spread, measured before the search prunes with it."""
    if budget in (None, "") or as_int(budget, "mtp_tune_noise_launches") <= 0:
        return None
    used = sum(1 for a in attempts if str(a.get("reason") or "").startswith("noise ") and not a.get("resumed"))
    if used >= as_int(budget, "mtp_tune_noise_launches"):
        return None
    first = next((a for a in attempts if a.get("status") == "ok" and not a.get("resumed")), None)
    if first is None:
        return None
    return {"candidate": first["candidate"], "overrides": first.get("overrides") or {}, "fit_rung": None,
            "reason": "noise %d/%s: %s again, to measure how far one launch moves on this node" % (
                used + 1, budget, first.get("key") or candidate_key(first["candidate"]))}


def mtp_tune_next(attempts, candidates, fit_ladder=None, spec=None):
    """The next server launch, or None when the search is over.

    ``spec`` (a TuneSpec, or what spec_from takes) says how to search; ``fit_ladder`` is the plan
    of mtp_tune_fit_ladder, used when ``spec.fit_retry`` is on.

    Returns ``{"candidate", "overrides", "fit_rung", "reason", "label"}``.  A pending fit launch
    of the last failed candidate comes first (bisection over the lever its failure class names,
    see mtp_tune_fit_ladder), while the candidate can still win at its best fitting value
    (fit_can_win).  Then, by ``spec.strategy``:

    - sweep: the cheapest candidate not yet decided, but none a cheaper one proved cannot fit;
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
    - climb: per topk lane, the candidate nearest ``seed``, then the unmeasured neighbours of
      the best and of its ties that the same bounds leave able to win, then whatever else they
      leave able to win, until nothing is (_climb_step); ``probe_ends`` is not used.  Under the
      stated model (accept length concave, round time convex in depth) the figure is
      single-peaked, so the walk ends at the peak and the bounds close the rest; where the
      launches break the model the bounds fall back and it launches what they no longer exclude.
    - under the slo objective (nothing predicted), climb and, after its ends, adaptive launch the
      cheapest of what the bounds leave open first (_cheapest_open).
    - then, with ``remeasure_launches``, the two contenders tied within the band are measured
      again (the band narrows with the square root of the measurements) until the budget ends.

    With ``cap_levers`` (a hybrid model's state pool read from a launch's log), a candidate whose
    predicted running-request cap is below the judged load is launched with the least lever change
    that holds it, and a launch that came back capped is launched again so (mtp_cap).

    A launch of this run that failed for a reason of the node, not of the setting (mtp_tune_node_fault:
    port in use, model missing, install broken, no GPU, an argument every candidate shares) ends
    the search at once: every other candidate would fail the same way.

    With ``noise_launches``, the run's first measured setting is launched that many more times
    before the search goes on: the spread between those launches is the node's noise
    (mtp_tune_node_noise), and every band and bound after it uses that when it is larger than
    ``noise``.

    With ``spec.schedule`` the launches of a per-load schedule run instead (mtp_schedule.schedule_next:
    this search per level, then the schedule built from each level's winner).
    """
    return tune_next(attempts, candidates, fit_ladder, spec)


def tune_next(attempts, candidates, fit_ladder=None, spec=None, pooled=False):
    """mtp_tune_next, for one node (``pooled`` false) or for a pool of nodes (mtp_pool).

    Pooled, attempts still ``pending`` (launched on another node, not yet measured) are passed
    over, and every failed candidate's due fit launch is a candidate for the next slot, not only
    the latest one's: one round of a pool can end with several failures.
    """
    spec = spec_from(spec)
    if spec.schedule and not pooled:
        # imported here: mtp_schedule runs this search per level (with schedule off)
        from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_schedule import schedule_next
        return schedule_next(attempts, candidates, fit_ladder, spec)
    spec = under_node_noise(attempts, spec)
    fit = fit_ladder if (spec.fit_retry and isinstance(fit_ladder, dict)) else None
    classes = fit_classes_of(spec.fit_classes)
    attempts = list(attempts or [])
    # The node failed the last launch for a reason every candidate shares: nothing more to learn.
    if mtp_tune_node_fault(attempts) is not None:
        return None
    launches = sum(1 for a in attempts if a.get("status") in ("ok", "failed") and not a.get("resumed"))

    if spec.max_launches is not None and launches >= spec.max_launches:
        return None
    states = candidate_states(attempts, fit, classes)
    by_key = dict((c["key"], c) for c in candidates)
    best = mtp_tune_pick_best(attempts, spec)
    # A launch that came back capped below the judged load (or whose lever the greedy check
    # refused) is launched again with the lever the pool model says holds the load.
    lift = lift_relaunch(attempts, spec)
    if lift:
        return labelled(lift)
    # A pending fit launch finishes before anything else starts: its answer matters to the search,
    # unless the candidate cannot win at its best fitting value (fit_can_win).
    # (A pool's round may end with several failures: each one's fit is due, the latest first.)
    for att in reversed(attempts):
        if att.get("status") == "pending":
            continue
        key = att.get("key") or candidate_key(att["candidate"])
        st = states.get(key)
        if st and st["pending"] is not None and key in by_key and fit_can_win(by_key[key], states, candidates, spec, best):
            f = st["fit"]
            return labelled({"candidate": by_key[key], "overrides": st["pending"], "fit_rung": len(st["attempts"]),
                             "reason": "fit %s=%s (starts at %s, fails at %s) after %s" % (
                                 f["lever"], st["pending"][f["lever"]], "-" if f["ok"] is None else f["ok"], f["fail"],
                                 st["attempts"][0].get("failure_class"))})
        if not pooled:
            break
    relaunch = _noise_relaunch(attempts, spec.noise_launches)
    if relaunch:
        return labelled(relaunch)
    if spec.strategy == "sweep":
        for cand in candidates:
            # a cheaper draft of its topk failed for good on memory: it would only fail again
            if cand["key"] not in states and not cannot_fit(cand, states, classes):
                return labelled(lifted({"candidate": cand, "overrides": {}, "fit_rung": None, "reason": "sweep"},
                                       attempts, spec))
        nxt = _remeasure(attempts, best, spec.remeasure_launches)
        return labelled(nxt) if nxt else None
    lanes = {}
    for cand in candidates:
        lanes.setdefault(cand["topk"], []).append(cand)
    for topk in sorted(lanes):
        lane = lanes[topk]
        seed_idx = _seed_index(lane, spec.seed)
        while True:
            cand, reason = _adaptive_lane(lane, states, seed_idx, best, spec, lanes.get(1))
            if cand is None:
                break
            if cannot_fit(cand, states, classes):
                # Decide it without a launch and let the search move on.
                states[cand["key"]] = {"attempts": [{"candidate": cand, "status": "skipped"}], "ok": None,
                                       "pending": None, "done": True, "fit": None}
                continue
            return labelled(lifted({"candidate": cand, "overrides": {}, "fit_rung": None, "reason": reason}, attempts, spec))
    nxt = _remeasure(attempts, best, spec.remeasure_launches)
    return labelled(nxt) if nxt else None


def mtp_tune_cut_short(attempts, candidates, fit_ladder=None, spec=None):
    """Whether ``spec.max_launches`` ended the run before the search was over, and what it left open.

    None while the run has launches left, and where the search (then mtp_tune_complete) would have
    stopped there anyway. Else ``{"max_launches", "launches", "next", "fits", "open"}``: ``next`` is
    the label of the launch the search would have made; ``fits`` the fit searches under way
    (``key``, ``lever``, ``starts``: the largest setting that started, ``fails``: the smallest that
    failed) that could still win (fit_can_win); ``open`` the keys of the candidates never launched
    that the search would still launch: every one for the sweep, for adaptive and climb those the
    bounds leave able to win (never one a cheaper failure proves cannot fit).
    """
    spec = spec_from(spec)
    if spec.max_launches is None:
        return None
    attempts = list(attempts or [])
    candidates = list(candidates or [])
    launches = sum(1 for a in attempts if a.get("status") in ("ok", "failed") and not a.get("resumed"))
    if launches < spec.max_launches:
        return None
    budget = spec.max_launches
    free = spec.replace(max_launches=None)
    nxt = tune_next(attempts, candidates, fit_ladder, free) or mtp_tune_complete(attempts, free)
    if nxt is None:
        return None
    spec = under_node_noise(attempts, free)
    fit = fit_ladder if (spec.fit_retry and isinstance(fit_ladder, dict)) else None
    classes = fit_classes_of(spec.fit_classes)
    states = candidate_states(attempts, fit, classes)
    best = mtp_tune_pick_best(attempts, spec)
    by_key = dict((c["key"], c) for c in candidates)
    fits = [{"key": key, "lever": st["fit"]["lever"], "starts": st["fit"]["ok"], "fails": st["fit"]["fail"]}
            for key, st in sorted(states.items())
            if st["pending"] is not None and key in by_key and fit_can_win(by_key[key], states, candidates, spec, best)]
    if spec.strategy == "sweep":
        open_keys = [c["key"] for c in candidates if c["key"] not in states and not cannot_fit(c, states, classes)]
    else:
        lanes = {}
        for cand in candidates:
            lanes.setdefault(cand["topk"], []).append(cand)
        found = set()
        for topk in sorted(lanes):
            wider = Lane(lanes[1], states, spec) if (topk > 1 and lanes.get(1)) else None
            open_, _model = _open_in(lanes[topk], states, spec, best, wider if wider is not None and wider.levels else None)
            found.update(lanes[topk][i]["key"] for i in open_)
        if nxt["candidate"]["key"] not in states:
            found.add(nxt["candidate"]["key"])
        open_keys = [c["key"] for c in candidates if c["key"] in found and not cannot_fit(c, states, classes)]
    return {"max_launches": budget, "launches": launches, "next": nxt["label"], "fits": fits,
            "open": open_keys}


def _measured_at(attempts, key, overrides, want):
    """Whether a contender's table is complete: a launch of it (same settings) measured every
    level of ``want``."""
    return any((a.get("key") or candidate_key(a["candidate"])) == key and (a.get("overrides") or {}) == (overrides or {})
               and a.get("status") == "ok" and all(level_of(a, c) is not None for c in want)
               for a in attempts)


def mtp_tune_complete(attempts, spec=None):
    """After the search: the next contender to launch again and measure at every level, or None.

    A search that benchmarks only the judged level (``mtp_tune_search_levels=judged``) leaves
    the other levels of the report empty; the winner and every candidate tied with it within the
    band are then launched once more with the same settings and measured at all of ``spec.levels``,
    winner first. That launch's judged figure joins the earlier ones like a re-measurement (it
    may move the decision: the new winner is completed in turn). A contender is completed once:
    a failed completing launch is not repeated. Stops at ``spec.max_launches`` like the search.

    With ``spec.converge`` the winner is left out: converging restarts it anyway, and its smoke
    benchmark measures every level (mtp_tune_smoke_levels), which saves a model load and a
    judged-level benchmark. Its ties are still completed here, before the converge.

    Returns ``{"candidate", "overrides", "fit_rung", "reason", "label", "levels"}`` or None.
    """
    spec = spec_from(spec)
    want = list(spec.levels)
    attempts = list(attempts or [])
    if spec.schedule or mtp_tune_node_fault(attempts) is not None:
        # a schedule run's every launch measured every level (mtp_schedule): nothing to complete
        return None
    launches = sum(1 for a in attempts if a.get("status") in ("ok", "failed") and not a.get("resumed"))
    if spec.max_launches is not None and launches >= spec.max_launches:
        return None
    best = mtp_tune_pick_best(attempts, spec)
    if best["winner"] is None or not want:
        return None
    by_key = dict((r["key"], r) for r in best["ranking"])
    contenders = [] if spec.converge else [best["winner"]]
    contenders += [by_key[k] for k in best["tied"] if k != best["winner"]["key"] and k in by_key]
    for row in contenders:
        same = [a for a in attempts if (a.get("key") or candidate_key(a["candidate"])) == row["key"]
                and (a.get("overrides") or {}) == (row["overrides"] or {})]
        if any(str(a.get("reason") or "").startswith(COMPLETE_REASON) for a in same):
            continue
        if _measured_at(same, row["key"], row["overrides"], want):
            continue
        role = "the winner" if row is best["winner"] else "tied with the winner"
        nxt = labelled({"candidate": row["candidate"], "overrides": row["overrides"] or {}, "fit_rung": None,
                        "reason": "%sC=%s: %s, %s, measured at every level for the report" % (
                            COMPLETE_REASON, ",".join(str(c) for c in want), row["key"], role)})
        nxt["levels"] = want
        return nxt
    return None


def mtp_tune_smoke_levels(winner, attempts, spec=None):
    """The levels the converged winner's smoke benchmark measures: the level its figure was judged
    at, and with ``spec.converge`` every other level of ``spec.levels`` too while no launch of the
    winner measured them all (mtp_tune_complete left its table to the converge). Sorted; [] when
    there is no winner.

    ``winner``: the run's winner (mtp_tune_winner: key, overrides, score.level).
    """
    spec = spec_from(spec)
    if not isinstance(winner, dict) or not winner.get("key"):
        return []
    judged = (winner.get("score") or {}).get("level")
    out = set() if judged in (None, "") else {as_int(judged, "the winner's level")}
    want = list(spec.levels)
    if spec.converge and want and not _measured_at(list(attempts or []), winner["key"], winner.get("overrides"), want):
        out.update(want)
    return sorted(out or want)
