"""Unit tests of plugins/plugin_utils/mtp_fit.py, moved from tests/unit/plugins/filter/test_mtp_tune.py."""

import math

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import (
    candidate_states, fit_classes_of, mtp_tune_capped, mtp_tune_fit_ladder)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import mtp_tune_pick_best
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import Lane, mtp_tune_next
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates
from mtp_tune_cases import _att, bench


def test_fit_plan_starts_where_sglang_really_is():
    plan = mtp_tune_fit_ladder(512, None, bs_floor=4, mrr_floor=32, default_mrr=48)
    # 0.5.23: 48 running requests with speculation; captured graph sizes clamped to it.
    assert plan["max_running_requests"] == 48 and plan["cuda_graph_max_bs"] == 48
    assert plan["mrr_floor"] == 32 and plan["levers"]["oom_kv_cache"] == "max_running_requests"
    assert plan["levers"]["oom_hybrid_state"] is None  # radix cache on: the pool ignores the limit
    assert mtp_tune_fit_ladder(levers={"oom_hybrid_state": "max_running_requests"})["levers"]["oom_hybrid_state"] \
        == "max_running_requests"
    assert plan["levers"]["cuda_graph_capture"] == "cuda_graph_max_bs"
    # --disable-radix-cache: the state pool is max_running_requests slots, taken before KV
    off = mtp_tune_fit_ladder(512, None, radix_cache=False)["levers"]
    assert off["oom_weights"] == off["oom_hybrid_state"] == "max_running_requests"
    assert plan["levers"]["oom_weights"] is None
    assert mtp_tune_fit_ladder(None, 16, mrr_floor=32, allow_capped=True)["mrr_floor"] == 1
    with pytest.raises(AnsibleFilterError):
        mtp_tune_fit_ladder("lots")
    with pytest.raises(AnsibleFilterError, match="mtp_tune_fit_levers"):
        mtp_tune_fit_ladder(levers={"oom_kv_cache": "mem_fraction"})


def _fit_run(plan, fits, cls="oom_kv_cache", steps=10):
    cand = mtp_tune_candidates([steps])[0]
    atts = []
    for _i in range(30):
        nxt = mtp_tune_next(atts, [cand], plan, {"strategy": "sweep", "fit_retry": True})
        if nxt is None:
            return atts
        ov = nxt["overrides"] or {}
        mrr = ov.get("max_running_requests") or plan["max_running_requests"]
        bs = ov.get("cuda_graph_max_bs") or plan["cuda_graph_max_bs"]
        ok = fits(mrr, bs)
        atts.append({"key": cand["key"], "candidate": cand, "overrides": ov, "fit_rung": nxt["fit_rung"],
                     "reason": nxt["reason"], "status": "ok" if ok else "failed",
                     "failure_class": None if ok else cls, "metrics": bench(cand) if ok else {}})
    pytest.fail("fit search did not end")


@pytest.mark.parametrize("largest", [1, 2, 17, 33, 46, 47])
def test_fit_bisection_finds_the_largest_setting_within_log2_plus_one(largest):
    plan = mtp_tune_fit_ladder(None, None, mrr_floor=1)
    atts = _fit_run(plan, lambda mrr, bs: mrr <= largest)
    assert len(atts) <= math.ceil(math.log2(48)) + 1
    oks = [a for a in atts if a["status"] == "ok"]
    assert oks[-1]["overrides"]["max_running_requests"] == largest
    assert oks[-1]["overrides"]["cuda_graph_max_bs"] == min(48, largest)  # graphs clamped to it
    assert mtp_tune_pick_best(atts, {"objective": "latency"})["winner"]["overrides"]["max_running_requests"] == largest


def test_fit_graph_failure_shrinks_graphs_not_running_requests():
    plan = mtp_tune_fit_ladder(None, None, bs_floor=4, mrr_floor=32)
    atts = _fit_run(plan, lambda mrr, bs: bs <= 20, cls="cuda_graph_capture")
    last = [a for a in atts if a["status"] == "ok"][-1]["overrides"]
    assert last["cuda_graph_max_bs"] == 20 and last["max_running_requests"] == 48
    assert len(atts) <= math.ceil(math.log2(48 - 4 + 1)) + 1


def test_fit_never_goes_below_the_judged_concurrency_unless_allowed():
    plan = mtp_tune_fit_ladder(None, None, mrr_floor=32)
    atts = _fit_run(plan, lambda mrr, bs: mrr <= 20)
    assert all(a["status"] == "failed" for a in atts)
    assert min(a["overrides"].get("max_running_requests") or 48 for a in atts) >= 32
    capped = _fit_run(mtp_tune_fit_ladder(None, None, mrr_floor=32, allow_capped=True), lambda mrr, bs: mrr <= 20)
    assert [a for a in capped if a["status"] == "ok"][-1]["overrides"]["max_running_requests"] == 20


def test_fit_only_for_memory_classes_and_not_for_weights():
    cands = mtp_tune_candidates([3])
    plan = mtp_tune_fit_ladder(None, None)
    for cls in ("bad_args", "oom_weights", "oom_hybrid_state"):
        atts = [{"key": "s3-k1-d4", "candidate": cands[0], "status": "failed", "failure_class": cls}]
        spec = {"strategy": "sweep", "fit_retry": True, "fit_classes": ["oom_kv_cache", "oom_weights", "oom_hybrid_state"]}
        assert mtp_tune_next(atts, cands, plan, spec) is None
    oom = [{"key": "s3-k1-d4", "candidate": cands[0], "status": "failed", "failure_class": "oom_kv_cache"}]
    nxt = mtp_tune_next(oom, cands, plan, {"strategy": "sweep", "fit_retry": True})
    assert nxt["overrides"] == {"max_running_requests": 24, "cuda_graph_max_bs": 24}
    assert nxt["label"].startswith("steps=3 topk=1 draft=4 [cuda_graph_max_bs=24, max_running_requests=24] (fit max_running_requests=24")
    assert mtp_tune_next(oom, cands, plan, {"strategy": "sweep", "fit_retry": False}) is None


def test_capped_server_below_the_benchmarked_concurrency_is_named_unless_allowed():
    plan = mtp_tune_fit_ladder(None, None, mrr_floor=32)
    assert mtp_tune_capped({"effective_max_running_requests": 16}, plan, [1, 32]) == 16
    assert mtp_tune_capped({"effective_max_running_requests": 32}, plan, [1, 32]) is None
    assert mtp_tune_capped({}, plan, [1, 32]) is None  # an older server that does not say
    allowed = mtp_tune_fit_ladder(None, None, mrr_floor=32, allow_capped=True)
    assert mtp_tune_capped({"effective_max_running_requests": 16}, allowed, [1, 32]) is None
    # a capped candidate is recorded as failed 'capped': dearer drafts of its lane are not launched
    cands = mtp_tune_candidates([3, 4, 5])
    atts = [{"key": "s4-k1-d5", "candidate": cands[1], "status": "failed", "failure_class": "capped"},
            _att(3, {"1": {"decode_tps_per_request": {"mean": 100.0}, "failed": 0}})]
    assert mtp_tune_next(atts, cands, spec={"strategy": "adaptive", "seed": 4}) is None


def test_launches_histograms_cap_other_depths_accept_lengths_soundly_on_the_real_sweep():
    # tests/fixtures/real-sglang/live/tune_sweep.json: SGLang 0.5.17 on an H200, self-draft, every
    # depth 1..8 launched once. Whatever subset had been launched, the cap each launch's histogram
    # puts on a shallower depth's accept length is at or above what that depth measured when
    # launched, and tighter than the chain model alone somewhere.
    import itertools
    import json
    import os
    from ansible_collections.blackwell.sglang.plugins.module_utils import bench_metrics as bm
    live = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "real-sglang", "live")
    with open(os.path.join(live, "tune_sweep.json")) as f:
        by = dict((a["candidate"]["steps"], a) for a in json.load(f)["attempts"])
    for a in by.values():  # the bounds today's sglang_bench returns beside the histogram
        lv = a["metrics"]["1"]
        lv["accept_length_bounds_by_depth"] = bm.accept_length_bounds_by_depth(lv["accept_histogram"], lv["completed"])
    cands = mtp_tune_candidates(list(range(1, 9)))
    checked = tighter = deeper_checked = chain_unsound = 0
    for n in (1, 2, 3):
        for launched in itertools.combinations(range(2, 9), n):
            states = candidate_states([by[k] for k in launched], None, fit_classes_of(None))
            lane = Lane(cands, states, {"objective": "latency", "level": 1, "noise": 0.015})
            plain = Lane(cands, states, {"objective": "latency", "level": 1, "noise": 0.015})
            plain.tau_cap = {}
            for x in range(1, 9):
                if x in launched:
                    continue
                deeper = x > max(launched)
                checked += 1
                deeper_checked += deeper
                assert lane._tau_high(x) >= by[x]["metrics"]["1"]["accept_length"], (launched, x)
                if deeper:
                    # the chain model alone, at the most optimistic measured acceptance plus noise
                    chain_unsound += plain._tau_high(x) < by[x]["metrics"]["1"]["accept_length"]
                else:
                    tighter += lane._tau_high(x) < plain._tau_high(x) - 1e-9
    # shallower: 259 checks, tighter than the chain model in 80; deeper (each unlaunched depth past
    # the deepest launch): 91 checks, all sound, where the chain model alone fell below the
    # measured accept length in 3 (from depth 2: 1.83 allowed at depth 6, 1.84 measured)
    assert checked - deeper_checked > 200 and tighter > 50
    assert deeper_checked > 80 and chain_unsound > 0
