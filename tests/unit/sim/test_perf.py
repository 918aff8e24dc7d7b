"""The calibrated throughput model reproduces the operator's table (DESIGN.md)."""

import random

import pytest

from sglang_sim import perf

# steps -> per-request tok/s at C=1 (4x RTX PRO 6000, Qwen3.5-122B-A10B, tp 4, temp 0, ignore_eos)
C1 = {1: 123, 3: 234, 4: 277, 5: 282}
# (steps, concurrency) -> aggregate tok/s
AGG = {(3, 32): 1979, (4, 16): 1596, (5, 16): 1119}


@pytest.mark.parametrize("steps,want", sorted(C1.items()))
def test_c1_per_request_within_5_percent(steps, want):
    got = perf.per_request_tps(1, steps)
    assert abs(got / want - 1) <= 0.05, (steps, got, want)


@pytest.mark.parametrize("cell,want", sorted(AGG.items()))
def test_aggregate_within_5_percent(cell, want):
    steps, conc = cell
    got = perf.aggregate_tps(conc, steps)
    assert abs(got / want - 1) <= 0.05, (cell, got, want)


def test_steps4_best_at_c1():
    best = max(range(1, 11), key=lambda k: perf.per_request_tps(1, k))
    assert best == 4


def test_steps3_best_aggregate_at_c32():
    best = max(range(1, 11), key=lambda k: perf.aggregate_tps(32, k))
    assert best == 3


def test_deeper_speculation_loses_at_high_concurrency():
    # At C=32 each extra step beyond 3 costs aggregate throughput.
    aggs = [perf.aggregate_tps(32, k) for k in (3, 4, 5, 6, 7)]
    assert aggs == sorted(aggs, reverse=True)


def test_step_time_grows_with_batch_and_draft_tokens():
    for k in (1, 3, 5):
        times = [perf.step_time_ms(b, k) for b in (1, 2, 4, 8, 16, 32, 48)]
        assert times == sorted(times)
    for b in (1, 16, 32):
        times = [perf.step_time_ms(b, k) for k in range(0, 11)]
        assert times == sorted(times)


def test_max_running_requests_caps_batch():
    # Beyond the cap requests queue: the aggregate stops growing.
    assert perf.aggregate_tps(96, 3, max_running_requests=48) == perf.aggregate_tps(48, 3)


def test_acceptance_regimes():
    synth = perf.acceptance_alpha(0.0, ignore_eos=True)
    real = perf.acceptance_alpha(0.0, ignore_eos=False)
    hot = perf.acceptance_alpha(1.0, ignore_eos=True)
    assert synth > 0.97
    assert 0.6 <= real <= 0.8
    assert hot < synth
    assert perf.expected_accept_length(3, synth) > 3.8
    assert perf.expected_accept_length(3, real) < 2.8


def test_draw_accepted_matches_expectation():
    rng = random.Random(7)
    alpha = 0.72
    n = 20000
    mean = sum(1 + perf.draw_accepted(rng, 4, alpha) for _i in range(n)) / n
    assert abs(mean - perf.expected_accept_length(4, alpha)) < 0.05


def test_noise_is_small_and_seeded():
    a = [perf.noisy(random.Random(1), 10.0) for _i in range(3)]
    b = [perf.noisy(random.Random(1), 10.0) for _i in range(3)]
    assert a == b
    rng = random.Random(3)
    vals = [perf.noisy(rng, 10.0) for _i in range(5000)]
    mean = sum(vals) / len(vals)
    sd = (sum((v - mean) ** 2 for v in vals) / len(vals)) ** 0.5
    assert abs(mean - 10.0) < 0.05
    assert 0.05 < sd < 0.25  # about 1-2 %


def test_regime_ignores_the_wording():
    # The regime is a property of the request (ignore_eos, temperature), not of its text.
    assert not hasattr(perf, "is_realistic_text")
    assert perf.acceptance_alpha(0.0) == perf.acceptance_alpha(0.0, ignore_eos=True)
    assert perf.acceptance_alpha(0.5, True) < perf.acceptance_alpha(0.0, True)


def test_simulated_accept_knob():
    assert perf.simulated_accept({}) is None
    assert perf.simulated_accept({"SGLANG_SIMULATE_ACC_LEN": "0"}) is None
    assert perf.simulated_accept({"SGLANG_SIMULATE_ACC_LEN": "3.36", "SGLANG_SIMULATE_ACC_METHOD": "multinomial",
                                  "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token"}) == (
        3.36, "multinomial", "real-draft-token")
    for env, text in [({"SGLANG_SIMULATE_ACC_LEN": "2,5"}, '"2,5" is not a valid float value'),
                      ({"SGLANG_SIMULATE_ACC_LEN": "2", "SGLANG_SIMULATE_ACC_METHOD": "mean"},
                       "Invalid simulate_acc_method: mean")]:
        with pytest.raises(ValueError) as exc:
            perf.simulated_accept(env)
        assert str(exc.value) == text


def test_sample_simulated_acc_len_means():
    rng = random.Random(5)
    draws = [perf.sample_simulated_acc_len(rng, 2.952, "match-expected", 4) for dummy in range(20000)]
    assert set(draws) == {2, 3}
    assert abs(sum(draws) / 20000.0 - 2.952) < 0.01
    assert {perf.sample_simulated_acc_len(rng, 3.0, "match-expected", 4) for dummy in range(50)} == {3}
    assert {perf.sample_simulated_acc_len(rng, 7.5, "match-expected", 4) for dummy in range(50)} == {4}
    assert {perf.sample_simulated_acc_len(rng, 0.2, "match-expected", 4) for dummy in range(50)} == {1}
    multi = [perf.sample_simulated_acc_len(rng, 2.5, "multinomial", 4) for dummy in range(20000)]
    assert set(multi) <= {1, 2, 3, 4} and len(set(multi)) == 4
    # a clamped normal (sd 1) about 2.5 on [1, 4]: symmetric, so its rounded mean stays near 2.5
    assert abs(sum(multi) / 20000.0 - 2.5) < 0.03
