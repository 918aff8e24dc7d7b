"""The hybrid state pool model (plugins/plugin_utils/mtp_state_pool.py) against the simulator's
memory plan (sim/sglang_sim/memory.py, 0.5.23's kv_cache_configurator sizing) as the oracle.

Each launched setting is run through the sim's own code (tests/pool_sim.py: the resolved argv,
memory.plan, a TP rank's journal lines), its journal feeds journal.pool_facts, and the
prediction for many other settings of the same node must bracket what plan() gives them:
lowest <= the release's value <= highest, for the cap, the state-pool size and the KV tokens
(the printed GB figures' rounding is the only slack). The worst errors are printed (-s)."""

from __future__ import absolute_import, division, print_function

import random

import pytest

import pool_sim
from ansible_collections.blackwell.sglang.plugins.module_utils import journal
from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_state_pool as msp
from sglang_sim import memory

# Failures the pool model predicts (a cap of 0); a graph-capture OOM is outside its reach.
POOL_FAILURES = ("hybrid_state", "hybrid_reqs", "kv", "weights_budget", "replayssm_mrr", "pool")
# The measured worst gap between the prediction (the lowest value the printed figures allow)
# and the release's cap, over every pair below: one running request; for a setting with the
# ReplaySSM ring predicted from a launch without it (the ring bracketed from the SSM state, up to
# twice its size), a few more.
CAP_BOUND = 1
CAP_BOUND_RING_ESTIMATED = 4


def _setting(rng, fraction):
    s = {"draft_tokens": rng.choice([0, 2, 3, 4, 6, 9]), "mem_fraction_static": fraction}
    if rng.random() < 0.4:
        s["mamba_full_memory_ratio"] = rng.choice([0.3, 0.5, 2, 4.5, 9])
    if rng.random() < 0.25:
        s["max_mamba_cache_size"] = rng.choice([20, 60, 150, 400])
    if rng.random() < 0.4:
        s["max_running_requests"] = rng.choice([4, 16, 32, 64, 200])
    if rng.random() < 0.35 and s["draft_tokens"]:
        s["enable_linear_replayssm_spec"] = True
    return s


def _truth(got):
    if isinstance(got, dict):
        return {"cap": got["max_running_requests"], "max_mamba_cache_size": got["max_mamba_cache_size"],
                "kv_tokens": got["max_total_num_tokens"]}
    return None


def _launches(rng, gpu, model, tp, fraction, count):
    out = []
    while len(out) < count:
        launched = _setting(rng, fraction)
        if not isinstance(pool_sim.plan(gpu, model, launched, tp), dict):
            continue
        lines, got = pool_sim.journal_lines(gpu, model, launched, tp)
        out.append((launched, journal.pool_facts(lines), got))
    return out


@pytest.mark.parametrize("node", pool_sim.NODES, ids=[n[0] for n in pool_sim.NODES])
def test_predictions_bracket_the_release_for_every_other_setting(node):
    name, gpu, model, tp = node
    rng = random.Random("pool-model/" + name)
    worst = {"cap": 0, "kv_tokens": 0, "kv_share": 0.0, "size": 0, "cap_ring_estimated": 0}
    pairs = exact = 0
    for fraction in (0.75, 0.88):
        for launched, pool, got in _launches(rng, gpu, model, tp, fraction, 4):
            # The launch itself is predicted exactly: nothing is extrapolated.
            assert msp.predict(pool, launched, launched) == _truth(got)
            for _i in range(40):
                setting = _setting(rng, fraction)
                found = msp.predict_range(pool, launched, setting)
                if bool(setting["draft_tokens"]) != bool(launched["draft_tokens"]):
                    assert found is None, (launched, setting)
                    continue
                assert found is not None, (launched, setting)
                lo, hi = found
                oracle = pool_sim.plan(gpu, model, setting, tp)
                truth = _truth(oracle)
                if truth is None:
                    if oracle.kind in POOL_FAILURES:
                        assert lo["cap"] == 0, (launched, setting, oracle.kind, lo)
                    continue
                pairs += 1
                for key in ("cap", "max_mamba_cache_size", "kv_tokens"):
                    assert lo[key] <= truth[key] <= hi[key], (key, launched, setting, truth, lo, hi)
                exact += lo["cap"] == truth["cap"]
                if setting.get("enable_linear_replayssm_spec") and not launched.get("enable_linear_replayssm_spec"):
                    worst["cap_ring_estimated"] = max(worst["cap_ring_estimated"], truth["cap"] - lo["cap"])
                    continue
                worst["cap"] = max(worst["cap"], truth["cap"] - lo["cap"])
                worst["size"] = max(worst["size"], truth["max_mamba_cache_size"] - lo["max_mamba_cache_size"])
                worst["kv_tokens"] = max(worst["kv_tokens"], truth["kv_tokens"] - lo["kv_tokens"])
                worst["kv_share"] = max(worst["kv_share"], (truth["kv_tokens"] - lo["kv_tokens"]) / float(pool["kv_tokens"]))
    print("\n%s: %d pairs, cap exact in %d (%.0f %%), worst under-prediction: cap %d, pool size %d slots, "
          "KV %d tokens (%.2f %% of the launched KV pool); ReplaySSM from a launch without it: cap %d"
          % (name, pairs, exact, 100.0 * exact / pairs, worst["cap"], worst["size"], worst["kv_tokens"],
             100 * worst["kv_share"], worst["cap_ring_estimated"]))
    assert pairs > 100
    assert worst["cap"] <= CAP_BOUND
    assert worst["cap_ring_estimated"] <= CAP_BOUND_RING_ESTIMATED


def _launch(node=0, **setting):
    name, gpu, model, tp = pool_sim.NODES[node]
    launched = dict({"draft_tokens": 4, "mem_fraction_static": 0.83}, **setting)
    lines, _got = pool_sim.journal_lines(gpu, model, launched, tp)
    return (gpu, model, tp), launched, journal.pool_facts(lines)


def _oracle(where, setting):
    gpu, model, tp = where
    return pool_sim.plan(gpu, model, setting, tp)


def test_a_dense_model_or_an_empty_journal_predicts_nothing():
    assert msp.predict({}, {"draft_tokens": 4}, {"draft_tokens": 2}) is None
    assert msp.lift({}, {"draft_tokens": 4}, 2, 8, 0, ["mamba_full_memory_ratio"]) is None


def test_another_mem_fraction_is_not_predicted():
    _where, launched, pool = _launch()
    assert msp.predict(pool, launched, dict(launched, mem_fraction_static=0.9)) is None
    assert msp.predict(pool, launched, dict(launched, draft_tokens=6)) is not None


def test_slots_per_request_come_from_the_solve_when_no_cap_was_logged():
    # Qwen3-Next on an H200 with tp 2 is not capped by the state pool at 48 requests: no warning
    # names the slots per request, yet only 5 (extra_buffer with the overlap scheduler) agrees.
    where, launched, pool = _launch(node=1)
    assert pool["capped_by"] is None and pool["slots_per_request"] is None
    obs = msp._observed(pool, launched)  # pylint: disable=protected-access
    assert msp._slots_per_request(obs, msp._Setting(launched)) == 5  # pylint: disable=protected-access
    setting = dict(launched, draft_tokens=9, mamba_full_memory_ratio=0.3)
    lo, hi = msp.predict_range(pool, launched, setting)
    truth = _truth(_oracle(where, setting))
    assert lo["cap"] <= truth["cap"] <= hi["cap"] and truth["cap"] < 48


# --------------------------------------------------------------------------- lift

def _fits(where, launched, allowed, draft_tokens, overrides, target, kv_need):
    setting = dict((k, v) for k, v in launched.items() if k not in allowed)
    setting.update(overrides, draft_tokens=draft_tokens)
    got = _oracle(where, setting)
    return isinstance(got, dict) and got["max_running_requests"] >= target and got["max_total_num_tokens"] >= kv_need


def test_lift_needs_no_lever_when_the_cap_is_already_there():
    where, launched, pool = _launch()
    assert pool["max_running_requests"] == 9
    assert msp.lift(pool, launched, 4, 9, 0, ["mamba_full_memory_ratio"]) == {}
    assert msp.lift(pool, launched, 2, 12, 0, ["mamba_full_memory_ratio"]) == {}
    assert _fits(where, launched, [], 2, {}, 12, 0)


def test_lift_raises_the_ratio_to_the_least_hundredth_that_serves_the_target():
    where, launched, pool = _launch()
    got = msp.lift(pool, launched, 4, 20, 0, ["mamba_full_memory_ratio"])
    ratio = got["mamba_full_memory_ratio"]
    assert got == {"mamba_full_memory_ratio": ratio} and ratio == round(ratio, 2)
    assert _fits(where, launched, [], 4, got, 20, 0)
    # one hundredth less is predicted short (the prediction errs low, so the release may
    # still serve it: the grid step and the rounding bound are of the same size)
    less = msp.predict(pool, launched, dict(launched, mamba_full_memory_ratio=round(ratio - 0.01, 2)))
    assert less["cap"] < 20


def test_lift_respects_the_kv_need():
    where, launched, pool = _launch()
    got = msp.lift(pool, launched, 4, 16, 0, ["mamba_full_memory_ratio"])
    kv = msp.predict(pool, launched, dict(launched, **got))["kv_tokens"]
    assert msp.lift(pool, launched, 4, 16, kv + 1, ["mamba_full_memory_ratio"]) is None
    assert msp.lift(pool, launched, 4, 16, kv, ["mamba_full_memory_ratio"]) == got
    assert _fits(where, launched, [], 4, got, 16, kv)


def test_lift_tries_the_levers_in_order_and_combines_them_only_when_one_is_not_enough():
    where, launched, pool = _launch(node=1)
    # 64 running requests are above speculation's 48: the request cap itself must move, and at
    # depth 6 the state pool must grow as well.
    assert msp.lift(pool, launched, 6, 64, 0, ["mamba_full_memory_ratio"]) is None
    got = msp.lift(pool, launched, 6, 64, 0, ["max_running_requests", "mamba_full_memory_ratio"])
    assert set(got) == {"max_running_requests", "mamba_full_memory_ratio"} and got["max_running_requests"] == 64
    assert _fits(where, launched, [], 6, got, 64, 0)
    size = msp.lift(pool, launched, 6, 64, 0, ["max_running_requests", "max_mamba_cache_size"])
    assert size == {"max_running_requests": 64, "max_mamba_cache_size": 64 * 5}
    assert _fits(where, launched, [], 6, size, 64, 0)


@pytest.mark.parametrize("node", range(len(pool_sim.NODES)), ids=[n[0] for n in pool_sim.NODES])
def test_a_ring_no_launch_logged_is_bracketed_from_the_state(node):
    where, launched, pool = _launch(node=node)
    assert pool["replayssm_ring_gb"] is None
    obs = msp._observed(pool, launched)  # pylint: disable=protected-access
    gpu, model, tp = where
    ring = memory.replayssm_ring_bytes_per_req(model, tp, memory.LINEAR_REPLAYSSM_CACHE_LEN)
    assert obs["ring_estimate"][0] <= ring <= obs["ring_estimate"][1]
    replay = dict(launched, draft_tokens=9, enable_linear_replayssm_spec=True)
    lo, hi = msp.predict_range(pool, launched, replay)
    truth = _truth(_oracle(where, replay))
    assert lo["cap"] <= truth["cap"] <= hi["cap"] and lo["kv_tokens"] <= truth["kv_tokens"] <= hi["kv_tokens"]


def test_lift_leaves_a_pool_lever_it_may_not_use_off():
    # a launch with the ring, whose ReplaySSM the greedy check refused: lifting again without it
    where, replay, pool = _launch(node=1, draft_tokens=9, enable_linear_replayssm_spec=True)
    got = msp.lift(pool, replay, 9, 48, 0, ["mamba_full_memory_ratio"])
    assert list(got) == ["mamba_full_memory_ratio"]
    assert _fits(where, replay, ["enable_linear_replayssm_spec"], 9, got, 48, 0)
    assert msp.lift(pool, replay, 9, 48, 0, ["enable_linear_replayssm_spec"]) == {"enable_linear_replayssm_spec": True}


def test_lift_turns_replayssm_on():
    where, launched, pool = _launch(node=1)
    plain = msp.lift(pool, launched, 9, 48, 0, ["enable_linear_replayssm_spec"])
    assert plain == {"enable_linear_replayssm_spec": True}
    assert _fits(where, launched, [], 9, plain, 48, 0)
    where, replay, ring_pool = _launch(node=1, enable_linear_replayssm_spec=True)
    assert ring_pool["replayssm_ring_gb"] > 0
    plain = dict((k, v) for k, v in replay.items() if k != "enable_linear_replayssm_spec")
    assert msp.predict(ring_pool, replay, dict(plain, draft_tokens=9))["cap"] < 48
    got = msp.lift(ring_pool, replay, 9, 48, 0, ["enable_linear_replayssm_spec", "mamba_full_memory_ratio"])
    assert got == {"enable_linear_replayssm_spec": True}
    assert _fits(where, replay, ["enable_linear_replayssm_spec"], 9, got, 48, 0)


def test_lift_returns_only_the_levers_and_takes_the_others_as_launched():
    where, launched, pool = _launch(cuda_graph_max_bs=16)
    got = msp.lift(pool, launched, 4, 20, 0, ["mamba_full_memory_ratio", "cuda_graph_max_bs"])
    assert list(got) == ["mamba_full_memory_ratio"]
    assert _fits(where, launched, [], 4, got, 20, 0)
    # a request cap the launch set and lift may not move holds the cap below the target
    where, capped, pool = _launch(max_running_requests=16)
    assert msp.lift(pool, capped, 4, 20, 0, ["mamba_full_memory_ratio"]) is None
    # allowed to move, the cap starts from SGLang's default (48 under speculation): the ratio does
    lifted = msp.lift(pool, capped, 4, 20, 0, ["max_running_requests", "mamba_full_memory_ratio"])
    assert list(lifted) == ["mamba_full_memory_ratio"]
    assert _fits(where, capped, ["max_running_requests"], 4, lifted, 20, 0)


@pytest.mark.parametrize("node", range(len(pool_sim.NODES)), ids=[n[0] for n in pool_sim.NODES])
def test_every_lift_serves_its_target_in_the_oracle(node):
    where, launched, pool = _launch(node=node)
    found = 0
    for allowed in (["mamba_full_memory_ratio"], ["max_running_requests", "mamba_full_memory_ratio"],
                    ["max_running_requests", "max_mamba_cache_size"]):
        for depth in (2, 4, 7):
            for target in (8, 24, 48, 64):
                for kv_need in (0, 200000):
                    got = msp.lift(pool, launched, depth, target, kv_need, allowed)
                    if got is not None:
                        found += 1
                        assert _fits(where, launched, allowed, depth, got, target, kv_need), (allowed, depth, target, got)
    assert found >= 10


def test_lift_refuses_a_key_that_is_no_lever():
    _where, launched, pool = _launch()
    with pytest.raises(ValueError, match="mem_fraction_static"):
        msp.lift(pool, launched, 4, 8, 0, ["mem_fraction_static"])
    with pytest.raises(ValueError, match="target"):
        msp.lift(pool, launched, 4, 0, 0, ["mamba_full_memory_ratio"])


def test_the_model_reads_the_release_defaults_the_sim_uses():
    assert msp.MAMBA_FULL_MEMORY_RATIO == memory.MAMBA_FULL_MEMORY_RATIO
    assert msp.DEFAULT_SLOTS_PER_REQUEST == (memory.MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
                                             + memory.MAMBA_EXTRA_BUFFER_TRACKING_SLOTS)
    assert msp.REQ_POOL_ESTIMATE_MIN == memory.REQ_POOL_ESTIMATE_MIN


# --------------------------------------------------------------------------- the filter

def test_the_filter_predicts_from_a_recorded_setting():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.blackwell.sglang.plugins.filter.mtp_tune import FilterModule

    predict = FilterModule().filters()["mtp_tune_pool_predict"]
    where, launched, pool = _launch()
    record = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
              "speculative_num_draft_tokens": 4, "speculative_draft_model_path": None,
              "cuda_graph_max_bs": None, "max_running_requests": None}
    rows = predict(pool, dict(record, mem_fraction_static=0.83),
                   [{"draft_tokens": 6}, {"draft_tokens": 6, "mamba_full_memory_ratio": 2.5},
                    {"draft_tokens": 0}, {"draft_tokens": 6, "enable_linear_replayssm_spec": True}])
    for row in rows[:2]:
        truth = _truth(_oracle(where, dict(row["setting"], mem_fraction_static=0.83)))
        assert row["why"] is None and row["cap"] <= truth["cap"] <= row["cap_highest"]
        assert row["kv_tokens"] <= truth["kv_tokens"] <= row["kv_tokens_highest"]
    assert rows[1]["cap"] > rows[0]["cap"]
    assert rows[2]["cap"] is None and "speculation on one side only" in rows[2]["why"]
    truth = _truth(_oracle(where, dict(rows[3]["setting"], mem_fraction_static=0.83)))
    assert rows[3]["why"] is None and rows[3]["cap"] <= truth["cap"] <= rows[3]["cap_highest"]
    assert predict({}, record, [{"draft_tokens": 2}])[0]["why"].startswith("the launch logged no hybrid state pool")
    with pytest.raises(AnsibleFilterError, match="settings must be a list of dicts"):
        predict(pool, record, {"draft_tokens": 2})
    with pytest.raises(AnsibleFilterError, match="launched must be"):
        predict(pool, None, [{"draft_tokens": 2}])
