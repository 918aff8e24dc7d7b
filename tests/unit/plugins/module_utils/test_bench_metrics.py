"""Metric math of sglang_bench: percentiles, per-request rates, steady state, CI, counters."""

import json
import math
import random
import statistics

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import bench_metrics as bm


# ------------------------------------------------------------------ percentiles
@pytest.mark.parametrize("values,q,expected", [
    ([1, 2, 3, 4], 50, 2.5),
    ([1, 2, 3, 4], 90, 3.7),          # numpy linear: pos 2.7 -> 3 + 0.7
    (list(range(1, 11)), 99, 9.91),   # pos 8.91
    ([5], 99, 5.0),
    ([3, 1, 2], 0, 1.0),
    ([3, 1, 2], 100, 3.0),
    ([10, 20], 25, 12.5),
])
def test_percentile_numpy_linear(values, q, expected):
    assert bm.percentile(values, q) == pytest.approx(expected)


def test_percentile_matches_inclusive_quantiles_on_random_data():
    # statistics.quantiles(method="inclusive") is the same (n-1)p interpolation numpy uses
    rng = random.Random(7)
    data = [rng.expovariate(1.0) for _idx in range(257)]
    qs = statistics.quantiles(data, n=100, method="inclusive")
    for q in (1, 10, 50, 90, 99):
        assert bm.percentile(data, q) == pytest.approx(qs[q - 1], rel=1e-12)


def test_percentile_empty_and_bad():
    assert bm.percentile([], 50) is None
    with pytest.raises(ValueError):
        bm.percentile([1], 101)


def test_summarize_scales_and_handles_empty():
    s = bm.summarize([0.001, 0.002, 0.003], scale=1000.0)
    assert s["mean"] == pytest.approx(2.0)
    assert s["p50"] == pytest.approx(2.0)
    assert s["p99"] == pytest.approx(2.98)
    assert bm.summarize([]) == {"mean": None, "p50": None, "p90": None, "p99": None}


# ------------------------------------------------------------------ Student-t
@pytest.mark.parametrize("df,expected", [
    (1, 12.7062047), (2, 4.3026527), (4, 2.7764451), (10, 2.2281389), (30, 2.0422725),
])
def test_t_ppf_two_sided_95(df, expected):
    assert bm.t_ppf(0.975, df) == pytest.approx(expected, rel=1e-6)


def test_t_ppf_symmetry_and_cdf_inverse():
    assert bm.t_ppf(0.5, 5) == 0.0
    assert bm.t_ppf(0.025, 5) == pytest.approx(-bm.t_ppf(0.975, 5))
    for df in (1, 3, 8, 50):
        for p in (0.6, 0.9, 0.995):
            assert bm.t_cdf(bm.t_ppf(p, df), df) == pytest.approx(p, abs=1e-9)


def test_confidence_interval_known_values():
    # mean 10, sd 1 (values 9, 10, 11), n = 3: half width = t(0.975, 2) * 1 / sqrt(3)
    ci = bm.confidence_interval([9.0, 10.0, 11.0])
    half = 4.3026527 / math.sqrt(3)
    assert ci["mean"] == pytest.approx(10.0)
    assert ci["half_width"] == pytest.approx(half, rel=1e-6)
    assert ci["low"] == pytest.approx(10 - half, rel=1e-6)
    assert ci["high"] == pytest.approx(10 + half, rel=1e-6)
    assert ci["n"] == 3


def test_confidence_interval_single_value_has_no_width():
    ci = bm.confidence_interval([5.0, None])
    assert ci["mean"] == 5.0 and ci["half_width"] is None and ci["n"] == 1


def test_confidence_interval_90_is_narrower():
    vals = [1.0, 2.0, 4.0, 3.0]
    assert bm.confidence_interval(vals, 0.90)["half_width"] < \
        bm.confidence_interval(vals, 0.95)["half_width"]


# ------------------------------------------------------------------ per request
def test_request_times_spreads_speculative_chunks_per_token():
    # first token at 0.1 s; then chunks of 3, 3, 2 tokens at 0.13, 0.16, 0.18 -> n = 9
    rec = {"ttft": 0.1, "e2e": 0.18, "output_tokens": 9,
           "chunks": [(0.1, 1), (0.13, 3), (0.16, 3), (0.18, 2)]}
    d = bm.request_times(rec)
    assert d["tpot"] == pytest.approx(0.08 / 8)
    assert d["decode_tps"] == pytest.approx(8 / 0.08)
    assert d["chunk_gaps"] == pytest.approx([0.03, 0.03, 0.02])
    assert d["itl"] == pytest.approx([0.01] * 8)
    # per-token ITL sums to the decode time, like TPOT * (n - 1)
    assert sum(d["itl"]) == pytest.approx(rec["e2e"] - rec["ttft"])


def test_request_times_single_token_has_no_rate():
    d = bm.request_times({"ttft": 0.1, "e2e": 0.1, "output_tokens": 1, "chunks": [(0.1, 1)]})
    assert d["tpot"] is None and d["decode_tps"] is None and d["itl"] == []


def test_request_times_first_chunk_with_several_tokens():
    # a first chunk carrying 2 tokens: those are not ITL samples (no gap before them)
    d = bm.request_times({"ttft": 0.05, "e2e": 0.09, "output_tokens": 4,
                          "chunks": [(0.05, 2), (0.09, 2)]})
    assert d["itl"] == pytest.approx([0.02, 0.02])
    assert d["tpot"] == pytest.approx(0.04 / 3)


# ------------------------------------------------------------------ level
def _rec(start, ttft, e2e, n, k=1, ok=True):
    chunks = [(ttft, 1)]
    t, done = ttft, 1
    step = (e2e - ttft) / max(1, math.ceil((n - 1) / k))
    while done < n:
        t += step
        add = min(k, n - done)
        done += add
        chunks.append((t, add))
    return {"ok": ok, "error": None if ok else "boom", "start": start, "ttft": ttft, "e2e": e2e,
            "output_tokens": n, "prompt_tokens": 10, "chunks": chunks,
            "spec_accept_length": None, "spec_verify_ct": None}


def test_level_metrics_throughput_and_time_scale():
    recs = [_rec(0.0, 0.1, 1.1, 101), _rec(0.0, 0.1, 1.1, 101),
            {"ok": False, "error": "HTTP 500 X", "start": 0.0, "chunks": []}]
    m = bm.level_metrics(recs, duration=1.1, concurrency=2)
    assert m["completed"] == 2 and m["failed"] == 1
    assert m["errors"] == {"HTTP 500 X": 1}
    assert m["total_output_tokens"] == 202
    assert m["output_throughput"] == pytest.approx(202 / 1.1)
    assert m["request_throughput"] == pytest.approx(2 / 1.1)
    assert m["decode_tps_per_request"]["mean"] == pytest.approx(100.0)
    assert m["tpot_ms"]["p50"] == pytest.approx(10.0)
    assert m["ttft_ms"]["mean"] == pytest.approx(100.0)
    # a simulator 20x faster than real time: same run in simulated seconds
    s = bm.level_metrics(recs, duration=1.1, concurrency=2, time_scale=0.05)
    assert s["duration_s"] == pytest.approx(22.0)
    assert s["output_throughput"] == pytest.approx(202 / 22.0)
    assert s["ttft_ms"]["mean"] == pytest.approx(2000.0)
    assert s["decode_tps_per_request"]["p50"] == pytest.approx(5.0)
    assert s["itl_ms"]["p50"] == pytest.approx(200.0)


def test_level_metrics_rejects_bad_time_scale():
    with pytest.raises(ValueError):
        bm.level_metrics([], 1.0, 1, time_scale=0)


def test_level_metrics_accept_length_token_weighted():
    a = dict(_rec(0, 0.1, 1.0, 100), spec_verify_ct=25, spec_accept_length=4.0)
    b = dict(_rec(0, 0.1, 1.0, 10), spec_verify_ct=10, spec_accept_length=1.0)
    m = bm.level_metrics([a, b], 1.0, 2)
    assert m["request_accept_length"] == pytest.approx(110 / 35.0)


def test_level_metrics_all_failed():
    m = bm.level_metrics([{"ok": False, "error": "x", "chunks": []}], 0.5, 1)
    assert m["completed"] == 0 and m["output_throughput"] == 0
    assert m["ttft_ms"]["p99"] is None and m["steady_state"] is None


# ------------------------------------------------------------------ steady state
def test_steady_state_excludes_ramp_and_drain():
    # C = 2; request A runs 0..2, B runs 1..3: both in flight only during 1..2
    a = _rec(0.0, 0.0, 2.0, 201)
    b = _rec(1.0, 0.0, 2.0, 201)
    ss = bm.steady_state([a, b], concurrency=2, ratio=1.0)
    assert ss["window_s"] == pytest.approx(1.0)
    # 100 tok/s each, both inside the window
    assert ss["output_throughput"] == pytest.approx(200.0, rel=0.02)
    assert ss["concurrency_threshold"] == 2


def test_steady_state_handover_at_equal_times_is_continuous():
    # C = 1 closed loop: next request starts exactly when the previous ends
    recs = [_rec(float(i), 0.0, 1.0, 11) for i in range(3)]
    ss = bm.steady_state(recs, concurrency=1, ratio=1.0)
    assert ss["window_s"] == pytest.approx(3.0)


def test_steady_state_none_when_never_reached():
    assert bm.steady_state([_rec(0.0, 0.0, 1.0, 5)], concurrency=4) is None


# ------------------------------------------------------------------ server counters
PROM = """# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m",tp_rank="0"} 1200.0
sglang:generation_tokens_total{model_name="m",tp_rank="1"} 300.0
sglang:spec_verify_calls_total{model_name="m"} 500
sglang:num_running_reqs{model_name="m"} NaN
sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 12
garbage line here
"""


def test_parse_prometheus_sums_label_sets_and_skips_junk():
    m = bm.parse_prometheus(PROM)
    assert m[bm.GEN_TOKENS] == 1500.0
    assert m[bm.VERIFY_CALLS] == 500.0
    assert "sglang:num_running_reqs" not in m
    assert m["sglang:e2e_request_latency_seconds_bucket"] == 12.0
    assert bm.parse_prometheus("") == {}


def test_counter_accept_length_is_a_delta():
    before = {bm.GEN_TOKENS: 1000.0, bm.VERIFY_CALLS: 1000.0}  # old traffic at accept 1.0
    after = {bm.GEN_TOKENS: 5000.0, bm.VERIFY_CALLS: 2000.0}
    assert bm.counter_accept_length(before, after) == pytest.approx(4.0)
    assert bm.counter_accept_length(None, after) is None
    assert bm.counter_accept_length(before, {bm.GEN_TOKENS: 1.0}) is None
    # restarted server (counters went back): unknown, not negative
    assert bm.counter_accept_length(before=after, after=before) is None


def test_server_info_accept_length():
    assert bm.server_info_accept_length(
        {"internal_states": [{"avg_spec_accept_length": 3.2}]}) == 3.2
    assert bm.server_info_accept_length({"internal_states": []}) is None
    assert bm.server_info_accept_length(None) is None
    assert bm.server_info_accept_length({"internal_states": [{"avg_spec_accept_length": None}]}) \
        is None


def test_client_limit_thresholds():
    assert bm.client_limit(0.5, 1.0) == (False, None)
    limited, why = bm.client_limit(0.9, 1.0)
    assert limited and "CPU" in why
    limited, why = bm.client_limit(0.2, 7.5)
    assert limited and "lag" in why
    assert bm.client_limit(None, None) == (False, None)


def test_steady_state_bridges_microsecond_handovers_only():
    # a closed loop replaces a finished request 50 us later: still one window
    recs = [_rec(i * 1.00005, 0.0, 1.0, 11) for i in range(3)]
    assert bm.steady_state(recs, concurrency=1, ratio=1.0)["window_s"] == pytest.approx(
        3.0001, rel=1e-4)
    # a real pause (0.5 s idle) splits it: the longest piece wins
    recs = [_rec(0.0, 0.0, 1.0, 11), _rec(1.5, 0.0, 2.0, 21)]
    assert bm.steady_state(recs, concurrency=1, ratio=1.0)["window_s"] == pytest.approx(2.0)


# ------------------------------------------------------------------ errors
def test_error_body_message_drops_echoed_prompts():
    ids = list(range(1000, 1400))
    fastapi = json.dumps({"detail": [{"type": "string_type", "loc": ["body", "prompt"],
                                      "msg": "Input should be a valid string", "input": ids}]})
    assert bm.error_body_message(fastapi) == "body.prompt: Input should be a valid string"
    prompt = "lorem ipsum " * 200
    openai = json.dumps({"error": {"message": "bad prompt '%s'" % prompt, "code": 400}})
    assert bm.error_body_message(openai.encode()) == "bad prompt '…'"
    listed = "prompt %s is too long" % ids
    assert bm.normalise_message(listed) == "prompt […] is too long"
    assert bm.error_body_message(b"Internal   Server\nError") == "Internal Server Error"
    assert bm.error_body_message(json.dumps({"detail": "Not Found"})) == "Not Found"
    long_text = "x" * 1000
    out = bm.error_body_message(long_text)
    assert len(out) == bm.ERROR_MESSAGE_LIMIT and out.endswith("…")
    # short quoted values stay: they tell failures apart
    assert bm.normalise_message("unknown model 'm1'") == "unknown model 'm1'"


def test_error_groups_by_status_and_message():
    recs = ([{"ok": False, "http_status": 400, "error_message": "bad prompt '%s'" % ("p%d " % i * 20),
              "error": "HTTP 400 X: ..."} for i in range(5)]
            + [{"ok": False, "http_status": 500, "error_message": "bad prompt 'short'"}] * 2
            + [{"ok": False, "error": "timed out after 5.0s"}])
    groups = bm.error_groups(recs)
    assert [(g["status"], g["message"], g["count"]) for g in groups] == [
        (400, "bad prompt '…'", 5), (500, "bad prompt 'short'", 2),
        (None, "timed out after 5.0s", 1)]
    m = bm.level_metrics(recs + [_rec(0.0, 0.01, 0.03, 3)], 1.0, 1)
    assert m["errors"] == {"HTTP 400: bad prompt '…'": 5, "HTTP 500: bad prompt 'short'": 2,
                           "timed out after 5.0s": 1}
    assert m["failure_rate"] == 8 / 9.0


def test_level_output_and_prompt_lengths():
    a = dict(_rec(0.0, 0.01, 0.03, 4), asked_output_len=4, prompt_tokens=100,
             finish_reason="length")
    b = dict(_rec(0.0, 0.01, 0.03, 2), asked_output_len=4, prompt_tokens=98,
             finish_reason={"type": "stop", "matched": 2})
    m = bm.level_metrics([a, b], 1.0, 2)
    assert m["output_tokens_per_request"] == 3.0 and m["output_len_asked"] == 4.0
    assert m["short_outputs"] == 1 and m["prompt_tokens_per_request"] == 99.0
    assert m["finish_reasons"] == {"length": 1, "stop": 1}


# ------------------------------------------------------------------ accepted-length histogram
def test_accept_lengths_by_depth_by_hand():
    # 10 rounds at depth 3: 2 with no correct draft, 3 with one, 1 with two, 4 with all three
    hist = [2, 3, 1, 4]
    by = bm.accept_lengths_by_depth(hist)
    assert by == {"1": pytest.approx((2 * 1 + 8 * 2) / 10.0),
                  "2": pytest.approx((2 * 1 + 3 * 2 + 5 * 3) / 10.0),
                  "3": pytest.approx((2 * 1 + 3 * 2 + 1 * 3 + 4 * 4) / 10.0)}
    assert bm.accept_lengths_by_depth(None) is None
    assert bm.accept_lengths_by_depth([0, 0]) is None


def test_accept_lengths_by_depth_are_concave_whatever_the_histogram():
    # each extra depth adds P(J >= k), which never grows: non-decreasing and concave
    rnd = random.Random(7)
    for dummy in range(200):
        hist = [rnd.randint(0, 50) for _j in range(rnd.randint(2, 12))]
        by = bm.accept_lengths_by_depth(hist)
        if by is None:
            continue
        vals = [1.0] + [by[str(k)] for k in range(1, len(hist))]
        steps = [b - a for a, b in zip(vals, vals[1:])]
        assert all(s >= -1e-12 for s in steps)
        assert all(b <= a + 1e-12 for a, b in zip(steps, steps[1:]))
        top = sum(n * (j + 1) for j, n in enumerate(hist)) / float(sum(hist))
        assert vals[-1] == pytest.approx(top)


def test_level_metrics_sums_histograms_of_different_lengths():
    recs = [dict(_rec(0.0, 0.1, 1.1, 101), spec_hist=[1, 2]),
            dict(_rec(0.0, 0.1, 1.1, 101), spec_hist=[0, 0, 0, 3]),
            _rec(0.0, 0.1, 1.1, 101)]
    m = bm.level_metrics(recs, duration=1.1, concurrency=3)
    assert m["accept_histogram"] == [1, 2, 0, 3]
    # at the launched depth the prefix bounds are the level's own rounds, one per request each way
    low, high = m["accept_length_bounds_by_depth"]["3"]
    assert (low, high) == (pytest.approx(17 / 8.0), pytest.approx(17 / 4.0))
    plain = bm.level_metrics([_rec(0.0, 0.1, 1.1, 101)], duration=1.1, concurrency=1)
    assert plain["accept_histogram"] is None and plain["accept_length_bounds_by_depth"] is None


def test_accept_length_bounds_by_hand():
    # depth 3, 10 rounds: 2 with none correct, 3 with one, 1 with two, 4 with all three
    hist = [2, 3, 1, 4]
    positions = 2 * 1 + 3 * 2 + 1 * 3 + 4 * 4
    got = bm.accept_length_bounds_by_depth(hist)
    # depth 1: stretches of 1, 2, 3 positions take 1, 1, 2 rounds; a full round's 4 positions 2
    # rounds alone, 2 when merged (floor(4 / 2))
    assert got["1"] == [pytest.approx(positions / (2 + 3 + 2 + 8.0)), pytest.approx(positions / 15.0)]
    # depth 2: 1, 1, 1 rounds; full: ceil(4/3) = 2 alone, floor(4/3) = 1 merged
    assert got["2"] == [pytest.approx(positions / (6 + 8.0)), pytest.approx(positions / (6 + 4.0))]
    assert got["3"] == [pytest.approx(positions / 10.0), pytest.approx(positions / 10.0)]
    # the round-start figure is inside every interval
    for k, exact in bm.accept_lengths_by_depth(hist).items():
        assert got[k][0] - 1e-12 <= exact <= got[k][1] + 1e-12
    assert bm.accept_length_bounds_by_depth(None) is None
    assert bm.accept_length_bounds_by_depth([5]) is None
    assert bm.accept_length_bounds_by_depth([0, 0]) is None


def _decode(correct, depth, limit):
    """Rounds a chain draft of ``depth`` takes over an output whose position p the draft guesses
    right iff correct[p] (prefix model), stopping at ``limit`` tokens: the histogram it reports."""
    hist = [0] * (depth + 1)
    p = 0
    while p < limit:
        j = 0
        while j < depth and correct[p + j]:
            j += 1
        hist[j] += 1
        p += j + 1
    return hist


def test_accept_length_bounds_hold_on_prefix_outputs_with_easy_and_hard_stretches():
    # outputs made of easy stretches (the draft right almost always) and hard ones (almost never),
    # the shape of the real self-draft sweep; several requests, each cut at its output limit
    rnd = random.Random(11)
    misses = checked = 0
    for dummy in range(150):
        requests, limit = rnd.randint(1, 8), rnd.choice([64, 128, 256])
        outputs = []
        for _r in range(requests):
            correct, easy = [], rnd.random() < 0.5
            while len(correct) < limit + 40:
                run = rnd.randint(1, 40)
                p = rnd.uniform(0.85, 1.0) if easy else rnd.uniform(0.0, 0.4)
                correct += [rnd.random() < p for _i in range(run)]
                easy = not easy
            outputs.append(correct)
        deep = rnd.randint(2, 10)
        top = bm.add_histograms(_decode(c, deep, limit) for c in outputs)
        bounds = bm.accept_length_bounds_by_depth(top, requests)
        for k in range(1, deep):
            h = bm.add_histograms(_decode(c, k, limit) for c in outputs)
            real = sum((j + 1) * n for j, n in enumerate(h)) / float(sum(h))
            checked += 1
            misses += not bounds[str(k)][0] - 1e-9 <= real <= bounds[str(k)][1] + 1e-9
    assert checked > 500 and misses == 0
