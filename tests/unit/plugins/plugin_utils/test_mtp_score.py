"""Unit tests of plugins/plugin_utils/mtp_score.py, moved from tests/unit/plugins/filter/test_mtp_tune.py."""

import math
import random

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import (
    mtp_tune_level_metrics, mtp_tune_node_noise, mtp_tune_pick_best, mtp_tune_progress, mtp_tune_rank, mtp_tune_score, mtp_tune_verify)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates
from mtp_tune_cases import _att, _tps, bench, launch


def test_level_metrics_reads_sglang_bench_levels():
    lvl = {"output_throughput": 100.0, "decode_tps_per_request": {"mean": 50.0, "p50": 49.0},
           "ttft_ms": {"p99": 300.0}, "e2e_latency_ms": {"p99": 9000.0}, "failed": 0,
           "ci": {"decode_tps_per_request_mean": {"mean": 50.0, "low": 52.0, "high": 48.0, "half_width": 2.0},
                  "output_throughput": {"mean": 100.0, "low": None, "high": None}}}
    m = mtp_tune_level_metrics(lvl)
    assert m["output_throughput"] == 100.0
    assert m["decode_tps_mean"] == 50.0 and m["decode_tps_p50"] == 49.0
    assert m["decode_tps_ci"] == (48.0, 52.0)
    assert m["output_throughput_ci"] is None  # one repeat says nothing about its spread
    assert m["ttft_p99_ms"] == 300.0 and m["e2e_p99_ms"] == 9000.0
    assert mtp_tune_level_metrics(None)["output_throughput"] is None


def test_score_latency_throughput_and_failed():
    att = _att(4, bench(mtp_tune_candidates([4])[0]))
    lat = mtp_tune_score(att, {"objective": "latency"})
    assert lat["value"] == pytest.approx(277.0) and lat["level"] == 1
    assert lat["low"] == pytest.approx(277.0 * 0.985) and lat["high"] == pytest.approx(277.0 * 1.015)
    thr = mtp_tune_score(att, {"objective": "throughput"})
    assert thr["value"] == pytest.approx(1750.0) and thr["level"] == 32
    assert mtp_tune_score(att, {"objective": "throughput", "level": 16})["value"] == pytest.approx(1596.0)
    failed = {"key": "s10-k1-d11", "candidate": {}, "status": "failed", "failure_class": "oom_kv_cache"}
    sc = mtp_tune_score(failed, {"objective": "latency"})
    assert sc["value"] is None and "oom_kv_cache" in sc["reason"]
    assert mtp_tune_score(att, {"objective": "latency", "level": 2})["value"] is None  # level not measured


def test_score_band_is_the_noise_narrowed_by_repeats_not_the_student_t_interval():
    m = bench(mtp_tune_candidates([4])[0], random.Random(1), 0.01, repeats=3)
    sc = mtp_tune_score(_att(4, m), {"objective": "latency"})
    half = 0.015 / 3 ** 0.5
    assert sc["n"] == 3 and sc["half"] == pytest.approx(half)
    assert (sc["low"], sc["high"]) == (pytest.approx(sc["value"] * (1 - half)), pytest.approx(sc["value"] * (1 + half)))


def test_score_level_with_failed_requests_is_not_a_figure():
    m = bench(mtp_tune_candidates([4])[0])
    m["1"]["failed"] = 2
    sc = mtp_tune_score(_att(4, m), {"objective": "latency"})
    assert sc["value"] is None and "failed requests" in sc["reason"]


def test_score_slo_takes_best_feasible_level_and_judges_p99_not_mean():
    m = bench(mtp_tune_candidates([3])[0])
    # TTFT p99 = 80 ms x C: C=16 -> 1280 ms, C=32 -> 2560 ms.
    sc = mtp_tune_score(_att(3, m), {"objective": "slo", "slo_max_ttft_p99_ms": 1500})
    assert sc["level"] == 16 and sc["value"] == pytest.approx(1780.0)
    # Heavy tail: the mean passes, the p99 does not -> the level is rejected.
    m["16"]["ttft_ms"] = {"mean": 200.0, "p50": 150.0, "p99": 4000.0}
    sc = mtp_tune_score(_att(3, m), {"objective": "slo", "slo_max_ttft_p99_ms": 1500})
    assert sc["level"] == 4
    sc = mtp_tune_score(_att(3, m), {"objective": "slo", "slo_min_tps": 1000})
    assert sc["value"] is None and "per-request" in sc["reason"]
    with pytest.raises(AnsibleFilterError, match="slo"):
        mtp_tune_score(_att(3, m), {"objective": "slo"})


def test_pick_best_tie_within_noise_goes_to_fewer_draft_tokens():
    atts = [launch({"candidate": c, "overrides": {}, "fit_rung": None})
            for c in mtp_tune_candidates([3, 4, 5, 6])]
    best = mtp_tune_pick_best(atts, {"objective": "latency"})
    # 5 (282) is the raw top; 4 (277, 1.8 % behind) is inside the band of a difference
    # (sqrt(2) x 1.5 % = 2.1 %), 6 (275, 2.5 % behind) is not: 4, the cheaper, wins.
    assert best["winner"]["key"] == "s4-k1-d5"
    assert set(best["tied"]) == {"s4-k1-d5", "s5-k1-d6"}
    assert "cheapest" in best["decided_by"] and best["margin"] == pytest.approx(277.0 / 282.0 - 1)
    # With a tighter band (+/-0.5 %) 5 beats both beyond noise.
    best = mtp_tune_pick_best(atts, {"objective": "latency", "noise": 0.005})
    assert best["winner"]["key"] == "s5-k1-d6" and best["margin"] == pytest.approx(282.0 / 277.0 - 1)


def test_pick_best_clear_winner_and_no_feasible():
    atts = [launch({"candidate": c, "overrides": {}, "fit_rung": None})
            for c in mtp_tune_candidates([2, 3, 4])]
    best = mtp_tune_pick_best(atts, {"objective": "throughput"})
    assert best["winner"]["key"] == "s3-k1-d4" and best["runner_up"]["key"] == "s2-k1-d3"
    assert best["decided_by"].startswith("beats s2-k1-d3 by 7.0% (band 2.1%)")
    failed = [{"key": "s10-k1-d11", "candidate": mtp_tune_candidates([10])[0], "status": "failed",
               "failure_class": "oom_kv_cache"}]
    assert mtp_tune_pick_best(failed, {"objective": "latency"})["winner"] is None


def test_repeats_never_let_a_clearly_worse_setting_win():
    """Two or three repeats give Student-t intervals wider than the noise (t = 12.7 at n = 2);
    the tie rule uses the noise band, so the cheaper setting 35 % behind never wins."""
    rng = random.Random(7)
    for repeats in (2, 3):
        wins = 0
        for _i in range(200):
            atts = []
            for steps, value in ((2, 1300.0), (4, 2000.0)):
                runs = [value * (1 + rng.gauss(0, 0.025)) for _r in range(repeats)]
                mean = sum(runs) / repeats
                sd = (sum((r - mean) ** 2 for r in runs) / (repeats - 1)) ** 0.5
                t = {2: 12.71, 3: 4.30}[repeats] * sd / repeats ** 0.5
                atts.append(_att(steps, {"32": {"output_throughput": mean, "failed": 0, "ci": {
                    "output_throughput": {"mean": mean, "low": mean - t, "high": mean + t, "n": repeats}}}}))
            wins += mtp_tune_pick_best(atts, {"objective": "throughput"})["winner"]["key"] == "s4-k1-d5"
        assert wins == 200, (repeats, wins)


def test_a_candidate_worse_than_the_band_never_wins():
    rng = random.Random(3)
    cands = mtp_tune_candidates([1, 2, 3, 4, 5, 6])
    for _i in range(300):
        atts = [_att(c["steps"], {"1": {"decode_tps_per_request": {"mean": rng.uniform(90, 110)}, "failed": 0}})
                for c in cands]
        best = mtp_tune_pick_best(atts, {"objective": "latency"})
        top = best["top"]["score"]["value"]
        assert best["winner"]["score"]["value"] >= top * (1 - 2 ** 0.5 * 0.015) - 1e-9


def test_remeasured_candidate_is_scored_by_its_mean_and_a_narrower_band():
    cand = mtp_tune_candidates([4])[0]
    atts = [_att(4, {"1": {"decode_tps_per_request": {"mean": v}, "failed": 0}}) for v in (100.0, 101.0)]
    row = mtp_tune_rank(atts, {"objective": "latency"})[0]
    assert row["key"] == cand["key"] and row["score"]["value"] == pytest.approx(100.5)
    # the two launches differ by 1 %: below the floor, which stays the noise
    assert row["score"]["n"] == 2 and row["score"]["half"] == pytest.approx(0.015 / 2 ** 0.5)


def test_node_noise_is_the_pooled_spread_of_repeated_launches_with_the_setting_as_floor():
    none = mtp_tune_node_noise([_tps(3, 100.0), _tps(4, 110.0)])
    assert none["measured"] is None and none["used"] == 0.015 and none["source"].startswith("assumed")
    # steps 3 twice (100, 104) and steps 4 three times (90, 100, 110): pooled over 1 + 2 dof
    atts = [_tps(3, 100.0), _tps(3, 104.0), _tps(4, 90.0), _tps(4, 100.0), _tps(4, 110.0), _tps(5, 80.0)]
    got = mtp_tune_node_noise(atts, {"noise": 0.015})
    sq = (100 / 102.0 - 1) ** 2 + (104 / 102.0 - 1) ** 2 + 0.1 ** 2 + 0.0 + 0.1 ** 2
    assert got["dof"] == 3 and got["measured"] == pytest.approx((sq / 3) ** 0.5)
    assert got["used"] == got["measured"] and got["source"].startswith("measured")
    assert [g["launches"] for g in got["groups"]] == [2, 3]
    quiet = mtp_tune_node_noise([_tps(3, 100.0), _tps(3, 100.2)], {"noise": 0.02})
    assert quiet["used"] == 0.02 and quiet["source"].startswith("floor")
    # failed launches and other fit settings are not repeats of the same thing
    other = dict(_tps(3, 150.0), overrides={"max_running_requests": 8})
    assert mtp_tune_node_noise([_tps(3, 100.0), other])["measured"] is None


def test_pick_best_uses_last_successful_attempt_of_a_candidate():
    cand = mtp_tune_candidates([10])[0]
    first = {"key": cand["key"], "candidate": cand, "status": "failed", "failure_class": "oom_kv_cache", "fit_rung": None}
    retry = launch({"candidate": cand, "overrides": {"cuda_graph_max_bs": 64}, "fit_rung": 2})
    best = mtp_tune_pick_best([first, retry], {"objective": "latency"})
    assert best["winner"]["key"] == cand["key"]
    assert best["winner"]["overrides"] == {"cuda_graph_max_bs": 64}


def test_verify_within_and_outside_noise():
    tuned = {"value": 277.0, "low": 271.5, "high": 282.5, "n": 1, "level": 1}
    ok = mtp_tune_verify({"decode_tps_per_request": {"mean": 270.0}, "failed": 0}, tuned, {"objective": "latency"})
    assert ok["ok"] and not ok["remeasure"] and ok["delta"] == pytest.approx(270.0 / 277.0 - 1)
    bad = mtp_tune_verify({"decode_tps_per_request": {"mean": 240.0}}, tuned, {"objective": "latency"})
    assert not bad["ok"] and bad["remeasure"] and "below the band" in bad["reason"]
    thr = mtp_tune_verify({"output_throughput": 1960.0}, {"value": 1979.0, "low": 1939.0}, {"objective": "throughput"})
    assert thr["ok"]
    assert not mtp_tune_verify({}, tuned, {"objective": "latency"})["ok"]
    assert not mtp_tune_verify({}, tuned, {"objective": "latency"})["remeasure"]
    assert not mtp_tune_verify({"output_throughput": 1.0}, None, {"objective": "throughput"})["ok"]


def _noisy_node(spread):
    """Attempts of a node whose setting s3 was launched twice, ``spread`` apart (relative), and s4 once."""
    def att(steps, tps):
        cand = {"key": "s%d-k1-d%d" % (steps, steps + 1), "steps": steps, "topk": 1, "draft_tokens": steps + 1}
        return {"key": cand["key"], "candidate": cand, "overrides": {}, "status": "ok",
                "metrics": {"1": {"decode_tps_per_request": {"mean": tps}, "failed": 0}}}
    return [att(3, 100.0), att(3, 100.0 * (1 + spread)), att(4, 104.0)]


def _smoke(tps, failed=0):
    return {"decode_tps_per_request": {"mean": tps}, "output_throughput": tps, "failed": failed}


def test_verify_allows_the_noise_measured_on_the_node():
    # The node moves ~4 % between launches of one setting; a smoke 5.5 % under a single-launch
    # tuned figure is within the difference of two such launches (the old fixed 5 % failed it).
    tuned = {"value": 104.0, "n": 1, "level": 1}
    spec = {"objective": "latency", "level": 1}
    got = mtp_tune_verify(_smoke(104.0 * 0.945), tuned, spec, _noisy_node(0.06))
    assert got["noise"]["measured"] == pytest.approx(0.0412, abs=1e-3)
    assert got["band"] == pytest.approx(1.0 * math.sqrt(2) * got["noise"]["used"])
    assert got["ok"] and not got["remeasure"]
    # a quiet node keeps mtp_tune_verify_tolerance as the least shortfall allowed
    quiet = mtp_tune_verify(_smoke(104.0 * 0.955), tuned, spec, _noisy_node(0.001))
    assert quiet["ok"] and quiet["band"] == pytest.approx(0.05)


def test_verify_judges_the_second_smoke_under_the_noise_told():
    # mtp_tune_noise 3 %: a fresh launch 6 % short of a single-launch tuned figure is within
    # 1.645 x 3 % x sqrt(2) = 7.0 %; the old rule failed the first smoke at 5 %.
    tuned = {"value": 100.0, "n": 1, "level": 1}
    spec = {"objective": "latency", "level": 1, "noise": 0.03}
    first = mtp_tune_verify(_smoke(94.0), tuned, spec)
    assert not first["ok"] and first["remeasure"]
    again = mtp_tune_verify(_smoke(94.0), tuned, spec, None, _smoke(94.0))
    assert again["ok"] and again["band"] == pytest.approx(1.645 * 0.03 * math.sqrt(2))


def test_verify_remeasures_once_before_failing_and_the_fresh_launch_decides():
    tuned = {"value": 104.0, "n": 1, "level": 1}
    spec = {"objective": "latency", "level": 1}
    first = mtp_tune_verify(_smoke(97.0), tuned, spec, _noisy_node(0.001))
    assert not first["ok"] and first["remeasure"] and "measured once more" in first["message"]
    # the fresh launch reads like the tuned one: it decides (the first was kept for reading low)
    again = mtp_tune_verify(_smoke(103.0), tuned, spec, _noisy_node(0.001), _smoke(97.0))
    assert again["ok"] and not again["remeasure"] and again["values"] == [97.0, 103.0]
    assert again["value"] == 103.0
    assert mtp_tune_verify(_smoke(100.0), tuned, spec, _noisy_node(0.001), _smoke(90.0))["ok"]
    # the two smokes are one more sample of the node's noise (their own group, not the tuned launch's)
    assert again["noise"]["dof"] == 2 and again["noise"]["measured"] > 0.025
    # a server really 12 % slower stays slow on the second launch and fails, saying what to do
    slow = mtp_tune_verify(_smoke(91.0), tuned, spec, _noisy_node(0.001), _smoke(92.0))
    assert not slow["ok"] and not slow["remeasure"]
    for words in ("first smoke 92.0", "smoke 91.0", "vs tuned 104.0", "allowed -", "mtp_tune_noise_launches", "degraded GPU"):
        assert words in slow["message"]
    # failed requests are no noise: no re-measure, the play fails on them
    broken = mtp_tune_verify(_smoke(104.0, failed=3), tuned, spec, _noisy_node(0.001))
    assert not broken["ok"] and not broken["remeasure"] and "3 failed requests" in broken["reason"]


def test_verify_a_ten_percent_slower_server_fails_at_the_floor_noise():
    tuned = {"value": 200.0, "n": 2, "level": 32}
    spec = {"objective": "throughput", "level": 32}
    first = mtp_tune_verify(_smoke(180.0), tuned, spec)
    assert first["remeasure"]
    assert not mtp_tune_verify(_smoke(181.0), tuned, spec, None, _smoke(180.0))["ok"]


def test_progress_line_names_candidate_outcome_and_best_so_far():
    cands = mtp_tune_candidates([3, 10])
    atts = [launch({"candidate": c, "overrides": {}, "fit_rung": None}) for c in cands]
    line = mtp_tune_progress(atts[0], atts[:1], {"objective": "latency"})
    assert line.startswith("steps=3 topk=1 draft=4: ok") and "C1 234/" in line
    assert "best so far: s3-k1-d4 (latency 234.0 at C=1)" in line
    line = mtp_tune_progress(atts[1], atts, {"objective": "latency"})
    assert "FAILED (oom_kv_cache)" in line and "best so far: s3-k1-d4" in line


def test_progress_line_names_a_schedule_by_its_slots():
    cand = mtp_tune_candidates([4])[0]
    conf = {"1": {"candidate_steps": [4]}, "4": {"candidate_steps": [2]}}
    overrides = {"speculative_adaptive": True, "speculative_adaptive_config": conf, "mamba_full_memory_ratio": 2.0}
    tuned = launch({"candidate": cand, "overrides": overrides, "fit_rung": None})
    line = mtp_tune_progress(tuned, [tuned], {"objective": "latency"})
    assert line.startswith("steps=4 topk=1 draft=5 schedule 1:4 4:2 [mamba_full_memory_ratio=2.0]: ok"), line
    assert "candidate_steps" not in line
    dflt = launch({"candidate": cand, "overrides": {"speculative_adaptive": True, "speculative_adaptive_config": None},
                   "fit_rung": None})
    assert mtp_tune_progress(dflt, [dflt], {"objective": "latency"}).startswith("steps=4 topk=1 draft=5 schedule SGLang's default: ok")
