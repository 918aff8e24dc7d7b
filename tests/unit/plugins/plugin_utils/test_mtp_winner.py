"""Unit tests of plugins/plugin_utils/mtp_winner.py, moved from tests/unit/plugins/filter/test_mtp_tune.py."""

import math
import random

import pytest

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import mtp_tune_score
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import mtp_tune_next
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_winner import (
    mtp_tune_model_check, mtp_tune_unverified, mtp_tune_winner)
from mtp_tune_cases import _att, _chain, _rounds, _shape, _tps, _tree_att, launch, tune


def test_a_noisy_node_widens_the_band_and_turns_a_win_into_a_tie():
    # steps 4 leads steps 3 by 6 %: decisive at the 1.5 % floor ...
    atts = [_tps(3, 100.0), _tps(4, 106.0)]
    assert mtp_tune_winner(atts)["key"] == "s4-k1-d5"
    # ... but steps 3 relaunched read 100 and 80: the node moves 16 % between launches, as the
    # real H200 did at C=1, and 6 % is inside that
    noisy = atts + [_tps(3, 80.0)]
    w = mtp_tune_winner(noisy)
    assert w["noise"]["measured"] == pytest.approx(2 ** 0.5 * 10 / 90.0)
    assert w["key"] == "s3-k1-d4" and "tie" in w["decided_by"]


def test_the_real_h200_sweep_replayed_is_a_tie_once_its_relaunches_are_counted():
    # tests/fixtures/real-sglang/live/tune_sweep.json: SGLang 0.5.17, self-draft, steps 1..8 at C=1,
    # steps 1 launched three times (494, 393, 530 tok/s). At the 1.5 % floor steps 5 (681) beats
    # steps 6 (645) "by 5.6 %"; with the node's measured 15 % the leaders are one tie and the
    # cheapest of it wins.
    import json
    import os
    live = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "real-sglang", "live")
    with open(os.path.join(live, "tune_sweep.json")) as f:
        run = json.load(f)
    atts = [dict(a, resumed=False) for a in run["attempts"]]
    assert mtp_tune_winner(atts)["key"] == "s5-k1-d6"
    s1 = next(a for a in atts if a["key"] == "s1-k1-d2")
    for sample in run["relaunch_noise"]["samples"][1:]:
        level = dict(s1["metrics"]["1"], decode_tps_per_request={"mean": sample["value"]})
        atts.append(dict(s1, metrics={"1": level}))
    w = mtp_tune_winner(atts)
    assert w["noise"]["measured"] == pytest.approx(run["relaunch_noise"]["cv"], rel=1e-6)
    assert w["key"] == "s2-k1-d3" and "tie" in w["decided_by"]
    assert {"s3-k1-d4", "s5-k1-d6", "s6-k1-d7"} <= set(w["tied"])


def test_winner_record_is_compact_and_keeps_decided_at_when_unchanged():
    atts = [launch({"candidate": c, "overrides": {}, "fit_rung": None}) for c in mtp_tune_candidates([3, 4, 5])]
    w = mtp_tune_winner(atts, {"objective": "latency"}, now="2026-12-02T15:00:00Z")
    assert w["key"] == "s4-k1-d5" and w["candidate"] == {"steps": 4, "topk": 1, "draft_tokens": 5}
    assert w["decided_at"] == "2026-12-02T15:00:00Z" and w["runner_up"] == "s5-k1-d6" and "s5-k1-d6" in w["tied"]
    assert w["margin"] == pytest.approx(277.0 / 282.0 - 1) and w["band"] == pytest.approx(2 ** 0.5 * 0.015)
    assert w["interval"] == [pytest.approx(277.0 * 0.985), pytest.approx(277.0 * 1.015)]
    again = mtp_tune_winner(atts, {"objective": "latency"}, previous=w, now="2026-12-03T09:00:00Z")
    assert again == w
    thr = mtp_tune_winner(atts, {"objective": "throughput"}, previous=w, now="2026-12-03T09:00:00Z")
    assert thr["key"] == "s3-k1-d4" and thr["decided_at"] == "2026-12-03T09:00:00Z"
    assert mtp_tune_winner([], {"objective": "latency"}) is None


def _twin(values, measured, steps=(1, 2, 3, 4, 5, 6, 8, 10), alpha=0.9):
    """A landscape that matches every measured figure and puts each unmeasured candidate at the
    most a non-decreasing round time allows: the round time stays at the last measured one below
    it (far below the cheapest measured where nothing cheaper was measured)."""
    rounds = dict((k, _chain(k, alpha) / v) for k, v in zip(steps, values))
    out = []
    for k, v in zip(steps, values):
        if k in measured:
            out.append(v)
            continue
        below = [m for m in measured if m < k]
        t = rounds[max(below)] if below else min(rounds[m] for m in measured) / 10.0
        out.append(_chain(k, alpha) / t)
    twin_rounds = [_chain(k, alpha) / v for k, v in zip(steps, out)]
    assert all(b >= a - 1e-12 for a, b in zip(twin_rounds, twin_rounds[1:])), "the twin is not physical"
    return out


@pytest.mark.parametrize("values", [
    [105, 110, 115, 120, 125, 130, 140, 150],
    [100, 128, 145, 172, 150, 135, 120, 105],
    [130, 140, 138, 136, 133, 130, 124, 118],
])
def test_unverified_names_what_a_matching_landscape_could_make_win(values):
    """Taken without noise, the list is exact: every candidate listed beats the winner on a
    landscape that matches every measurement (the search, seeing the same figures, ends the same
    way there), by what its bound says, and every one not listed cannot.  The noise (default
    1.5 %) only widens the bounds, so the list at the default noise holds at least those."""
    steps = [1, 2, 3, 4, 5, 6, 8, 10]
    cands = mtp_tune_candidates(steps)
    atts, got = _shape(values)
    measured = set(a["candidate"]["steps"] for a in atts)
    assert len(measured) < len(steps)
    win = values[steps.index(got)]
    exact = mtp_tune_unverified(atts, cands, {"objective": "latency", "noise": 0.0})
    assert exact, "an adaptive search that skipped candidates leaves some unverified"
    assert all(u["steps"] not in measured for u in exact)
    default = mtp_tune_unverified(atts, cands, {"objective": "latency"})
    listed = set(u["key"] for u in default)
    assert set(u["key"] for u in exact) <= listed
    for u in default:
        assert u["convex_rules_out"] == (u["gain_convex"] is not None and u["gain_convex"] <= 2 ** 0.5 * 0.015 + 1e-4)
    twin = _twin(values, measured)
    twin_atts, twin_got = _shape(twin)
    assert [a["candidate"]["steps"] for a in twin_atts] == [a["candidate"]["steps"] for a in atts]
    assert twin_got == got
    for k, v in zip(steps, twin):
        if k in measured:
            continue
        row = [u for u in exact if u["steps"] == k]
        if row:
            assert v > win, (k, v, win)
            if row[0]["bound"] is not None:
                assert row[0]["bound"] == pytest.approx(v, rel=1e-3)
                assert row[0]["gain"] == pytest.approx(v / win - 1, abs=1e-3)
        else:
            assert v <= win * 1.001, (k, v, win)


def _model_landscape(rng, steps):
    """A landscape of the stated model that is no chain: each draft position accepted given the
    earlier ones with its own probability (later ones may be likelier, as on real drafts), so the
    accept length is concave but not geometric; the round time convex in depth."""
    tau, reach, cond = {}, 1.0, rng.uniform(0.4, 0.95)
    t, dt, total = {}, rng.uniform(0.0, 0.3), 1.0
    acc = 1.0
    for k in range(1, max(steps) + 1):
        reach *= cond
        acc += reach
        cond = min(0.99, cond + rng.uniform(-0.05, 0.1))
        total += dt
        dt += rng.uniform(0.0, 0.1)
        tau[k], t[k] = acc, total
    return dict((k, (tau[k] / t[k] * 100.0, tau[k])) for k in steps)


def test_concave_accept_length_bounds_hold_on_every_landscape_of_the_model():
    """Noise-free, on 300 random landscapes of the stated model (accept length concave in depth,
    not geometric; round time non-decreasing and convex), measured at random depths: no
    unmeasured candidate's figure is above its bound_convex, and a peak measured with both
    neighbours leaves nothing the model does not rule out (the figure is single-peaked)."""
    steps = [1, 2, 3, 4, 5, 6, 8, 10]
    cands = mtp_tune_candidates(steps)
    rng = random.Random(7)
    closed = 0
    for _i in range(300):
        land = _model_landscape(rng, steps)
        measured = sorted(rng.sample(steps, rng.randint(2, 5)))
        atts = [_att(k, {"1": {"decode_tps_per_request": {"mean": land[k][0]},
                               "accept_length": land[k][1], "failed": 0}}) for k in measured]
        rows = mtp_tune_unverified(atts, cands, {"objective": "latency", "noise": 0.0})
        for row in rows:
            if row["bound_convex"] is not None:
                assert land[row["steps"]][0] <= row["bound_convex"] * (1 + 1e-6), (land, measured, row)
        best = max(measured, key=lambda k: land[k][0])
        i = steps.index(best)
        if all(steps[j] in measured for j in (i - 1, i + 1) if 0 <= j < len(steps)):
            closed += 1
            assert all(r["convex_rules_out"] for r in rows), (land, measured, rows)
    assert closed >= 20


def test_the_concave_accept_length_closes_what_the_chain_acceptance_leaves_open():
    """Accept lengths 2.9, 3.2, 3.35 at steps 3, 4, 5 (per-position acceptance falling, no chain):
    the highest chain acceptance among them (steps 3's) would let steps 6 accept 3.65 and beat the
    peak at 4; the line through 4 and 5 caps it at 3.5, below the peak."""
    cands = mtp_tune_candidates([1, 2, 3, 4, 5, 6, 8, 10])
    atts = [_att(k, {"1": {"decode_tps_per_request": {"mean": v}, "accept_length": tau, "failed": 0}})
            for k, v, tau in ((3, 100.0, 2.9), (4, 106.0, 3.2), (5, 105.0, 3.35))]
    spec = {"objective": "latency", "noise": 0.0}
    six = [u for u in mtp_tune_unverified(atts, cands, spec) if u["steps"] == 6][0]
    round_5, round_4 = 3.35 / 105.0, 3.2 / 106.0
    assert six["bound_convex"] == pytest.approx(3.5 / (2 * round_5 - round_4), rel=1e-3)
    assert six["convex_rules_out"]
    assert mtp_tune_winner(atts, spec, candidates=cands)["unverified"] == []
    assert mtp_tune_model_check(atts, cands, spec)["holds"]
    # an accept length that rises faster at 5 than at 4 breaks the concavity: named, and not used
    atts[2]["metrics"]["1"]["accept_length"] = 3.6
    check = mtp_tune_model_check(atts, cands, spec)
    assert not check["holds"] and any("accept length rose more" in b for b in check["broken"])


def test_unverified_is_empty_after_a_sweep_and_skips_what_cannot_fit():
    cands = mtp_tune_candidates([1, 2, 3, 4, 5, 6, 8, 10])
    atts, _best = tune("sweep", "latency")
    assert mtp_tune_unverified(atts, cands, {"objective": "latency"}) == []
    w = mtp_tune_winner(atts, {"objective": "latency"}, candidates=cands)
    assert w["unverified"] == []
    assert "unverified" not in mtp_tune_winner(atts, {"objective": "latency"})
    assert mtp_tune_unverified([], cands, {"objective": "latency"}) == []
    # 8 failed on memory: 10 needs more, so it is no open question; 1 and 2 are (nothing cheaper measured)
    three = _att(3, {"1": {"decode_tps_per_request": {"mean": 234.0}, "accept_length": _chain(3, 0.8), "failed": 0}})
    eight = {"key": "s8-k1-d9", "candidate": cands[6], "status": "failed", "failure_class": "oom_kv_cache"}
    listed = [u["steps"] for u in mtp_tune_unverified([three, eight], cands, {"objective": "latency"})]
    assert 10 not in listed and 8 not in listed and listed[:2] == [1, 2]
    # a verify round at 4 at least as long as at 3: 4 at most 234 x tau(4)/tau(3) (+ the noise)
    four = [u for u in mtp_tune_unverified([three, eight], cands, {"objective": "latency", "noise": 0.0}) if u["steps"] == 4][0]
    assert four["bound"] == pytest.approx(234.0 * _chain(4, 0.8) / _chain(3, 0.8), rel=1e-3)


def test_winner_keeps_open_only_what_the_model_leaves_open():
    """Round times 10, 11, 13, 16 ms at steps 3, 4, 6, 8 (each extra draft token dearer): with the
    convexity, steps 1 and 2 cannot beat the winner; without it nothing cheaper than steps 3 was
    measured, so they would stay open. They move from ``unverified`` to ``model_rules_out``."""
    cands = mtp_tune_candidates([1, 2, 3, 4, 5, 6, 8])
    atts = _rounds({3: 10.0, 4: 11.0, 6: 13.0, 8: 16.0})
    rows = mtp_tune_unverified(atts, cands, {"objective": "latency"})
    w = mtp_tune_winner(atts, {"objective": "latency"}, candidates=cands)
    assert [u["key"] for u in w["unverified"]] == [u["key"] for u in rows if not u["convex_rules_out"]]
    assert [u["key"] for u in w["model_rules_out"]] == [u["key"] for u in rows if u["convex_rules_out"]]
    assert {"s1-k1-d2", "s2-k1-d3"} <= set(u["key"] for u in w["model_rules_out"])
    # steps 5, between two measured depths either side of the winner 6, stays open either way
    assert [u["key"] for u in w["unverified"]] == ["s5-k1-d6"] and w["model"] == {"holds": True, "broken": []}


def test_model_check_names_a_bend_and_a_round_that_got_faster():
    cands = mtp_tune_candidates([2, 3, 4, 6, 8])
    # steps 3 -> 4 costs 4 ms, 4 -> 6 only 1 ms per token: a bend the model forbids
    bent = mtp_tune_model_check(_rounds({3: 10.0, 4: 14.0, 6: 16.0}), cands, {"objective": "latency", "level": 1})
    assert not bent["holds"] and len(bent["broken"]) == 1
    assert "topk 1 at C=1: an extra draft token cost less than the one before (draft tokens 4, 5, 7)" in bent["broken"][0]
    faster = mtp_tune_model_check(_rounds({3: 10.0, 6: 8.0}), cands, {"objective": "latency", "level": 1})
    assert not faster["holds"] and "got faster with more draft tokens" in faster["broken"][0]
    # within the noise band, or with one point per lane, nothing is broken
    assert mtp_tune_model_check(_rounds({3: 10.0, 4: 10.1, 6: 10.2}), cands, {"objective": "latency", "level": 1})["holds"]
    assert mtp_tune_model_check(_rounds({3: 10.0}), cands, {"objective": "latency", "level": 1})["holds"]
    # where the bend broke it, the winner keeps the candidates only convexity would have ruled out
    w = mtp_tune_winner(_rounds({3: 10.0, 4: 14.0, 6: 16.0}), {"objective": "latency"}, candidates=cands)
    assert not w["model"]["holds"] and all(not u["convex_rules_out"] for u in w["unverified"])


def _tree_landscape(alpha, tree_gain):
    """Round times (ms, C=1) of a chain, convex in depth; a tree of depth s takes 8 % longer per
    topk step and 2 % per draft token past the chain's, and accepts ``tree_gain`` of what the
    chain leaves below s + 1."""
    chain_ms = {1: 8.0, 2: 9.0, 3: 10.0, 4: 11.5, 5: 13.5, 6: 16.0}

    def launch_of(cand):
        s, k, d = cand["steps"], cand["topk"], cand["draft_tokens"]
        tau = _chain(s, alpha)
        if k == 1:
            return _tree_att(cand, chain_ms[s], tau)
        ms = chain_ms[s] * (1 + 0.08 * (k - 1)) * (1 + 0.02 * (d - s - 1))
        return _tree_att(cand, ms, tau + tree_gain * (s + 1 - tau))
    return launch_of


def _tune_trees(alpha, tree_gain, strategy="adaptive"):
    cands = mtp_tune_candidates([1, 2, 3, 4, 5, 6], topk=[1, 2, 4], draft_tokens=[4, 6, 8, 12])
    launch_of = _tree_landscape(alpha, tree_gain)
    spec = {"objective": "latency", "level": 1, "seed": 3, "strategy": strategy}
    atts = []
    for _round in range(len(cands) + 1):
        nxt = mtp_tune_next(atts, cands, spec=spec)
        if nxt is None:
            break
        atts.append(launch_of(nxt["candidate"]))
    truth = dict((c["key"], mtp_tune_score(launch_of(c), spec)["value"]) for c in cands)
    return cands, atts, truth, spec


def test_a_chain_that_accepts_nearly_all_leaves_few_trees_to_launch():
    """At acceptance 0.99 a tree cannot accept much more than the chain of its depth and takes
    longer: the chain's launches rule out all but the trees at the winner's depth and the next,
    where s + 1 tokens is still 2.5 % above the chain's accept length (3 of 25 trees launched);
    the trees the report leaves open there are bounded a few per cent above the winner."""
    cands, atts, truth, spec = _tune_trees(0.99, 0.5)
    trees = [a for a in atts if a["candidate"]["topk"] > 1]
    assert len(trees) <= 3 and all(a["candidate"]["steps"] >= 4 for a in trees)
    assert len([c for c in cands if c["topk"] > 1]) == 25
    w = mtp_tune_winner(atts, spec, candidates=cands)
    assert truth[w["key"]] >= max(truth.values()) * (1 - math.sqrt(2) * 0.015)
    # what stays open is bounded (a few per cent above the winner, at the depths the chain peaks),
    # not "no bound" as a tree lane never launched would be on its own
    open_trees = [u for u in w["unverified"] if u["topk"] > 1]
    assert open_trees and all(u["bound"] is not None and u["gain"] < 0.07 and u["steps"] >= 4 for u in open_trees)
    # the climb launches those few open trees too, and leaves nothing open
    cands, atts, truth, spec = _tune_trees(0.99, 0.5, "climb")
    trees = [a for a in atts if a["candidate"]["topk"] > 1]
    assert len(trees) <= 4 and all(a["candidate"]["steps"] >= 4 for a in trees)
    w = mtp_tune_winner(atts, spec, candidates=cands)
    assert truth[w["key"]] >= max(truth.values()) * (1 - math.sqrt(2) * 0.015) and w["unverified"] == []


def test_trees_that_accept_far_more_are_searched_and_win():
    """At acceptance 0.6 a tree that recovers most of what the chain misses beats it: the tree
    lanes are launched where their bounds leave them able to win, and the winner is within the
    band of the best of the grid."""
    cands, atts, truth, spec = _tune_trees(0.6, 0.8)
    best = max(truth, key=truth.get)
    assert not best.endswith(("-k1-d2", "-k1-d3", "-k1-d4", "-k1-d5", "-k1-d6", "-k1-d7"))
    assert any(a["candidate"]["topk"] > 1 for a in atts) and len(atts) < len(cands)
    w = mtp_tune_winner(atts, spec, candidates=cands)
    assert truth[w["key"]] >= truth[best] * (1 - math.sqrt(2) * 0.015)
