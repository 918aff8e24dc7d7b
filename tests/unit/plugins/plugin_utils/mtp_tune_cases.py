"""The synthetic cost model and tuning drivers the mtp_* unit tests share (moved from
tests/unit/plugins/filter/test_mtp_tune.py).

The search tests drive the filters with a synthetic cost model built from the operator's
hand-made table (DESIGN.md): per-request tok/s at C=1, aggregate tok/s at C=16/32, and an OOM
at steps=10 unless the CUDA-graph batch is made small enough."""

import pytest

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import mtp_tune_fit_ladder
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import mtp_tune_pick_best
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import mtp_tune_next
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates


# C=1 per-request decode tok/s (operator: 1->123, 3->234, 4->277, 5->282; 2, 6, 8 interpolated
# the way the draft-depth theory bends: unimodal, peak at 5 in raw figures, 4 within noise).
C1 = {1: 123.0, 2: 185.0, 3: 234.0, 4: 277.0, 5: 282.0, 6: 275.0, 8: 255.0, 10: 238.0}


# Aggregate output tok/s (operator: 3 -> 1979 at C=32 best; 4 -> 1596 and 5 -> 1119 at C=16).
C16 = {1: 1350.0, 2: 1640.0, 3: 1780.0, 4: 1596.0, 5: 1119.0, 6: 980.0, 8: 820.0, 10: 700.0}


C32 = {1: 1500.0, 2: 1850.0, 3: 1979.0, 4: 1750.0, 5: 1420.0, 6: 1250.0, 8: 1050.0, 10: 900.0}


LEVELS = (1, 4, 16, 32)


def per_request(steps, c):
    """Per-request tok/s at concurrency c: C=1 figure, degraded with load (deeper = faster decay)."""
    agg = {16: C16, 32: C32}.get(c)
    if agg is not None:
        return agg[steps] / c
    return C1[steps] * (1.0 - 0.03 * (c - 1) * (1 + steps / 4.0) / 4.0)


def aggregate(steps, c):
    if c == 32:
        return C32[steps]
    if c == 16:
        return C16[steps]
    return per_request(steps, c) * c


def fits(cand, overrides):
    """steps=10 (11 draft tokens) needs the CUDA-graph batch at 64 or below to fit."""
    if cand["draft_tokens"] < 11:
        return True
    return (overrides or {}).get("cuda_graph_max_bs", 512) <= 64


def bench(cand, noise_rng=None, cv=0.0, repeats=1):
    out = {}
    for c in LEVELS:
        pr = per_request(cand["steps"], c)
        ag = aggregate(cand["steps"], c)
        if noise_rng is not None and cv:
            pr *= 1.0 + noise_rng.gauss(0.0, cv)
            ag *= 1.0 + noise_rng.gauss(0.0, cv)
        lvl = {
            "concurrency": c,
            "output_throughput": ag,
            "request_throughput": ag / 512.0,
            "decode_tps_per_request": {"mean": pr, "p50": pr * 1.01},
            "ttft_ms": {"mean": 40.0 * c, "p50": 38.0 * c, "p90": 60.0 * c, "p99": 80.0 * c},
            "completed": 4 * c,
            "failed": 0,
            "accept_length": cand["draft_tokens"] * 0.98,
        }
        lvl["ci"] = None
        if repeats > 1 and cv:
            # sglang_bench's shape: a Student-t interval per headline figure over the repeats
            lvl["ci"] = {"decode_tps_per_request_mean": {"mean": pr, "low": pr * (1 - 2 * cv),
                                                         "high": pr * (1 + 2 * cv), "n": repeats},
                         "output_throughput": {"mean": ag, "low": ag * (1 - 2 * cv), "high": ag * (1 + 2 * cv),
                                               "n": repeats}}
        out[str(c)] = lvl
    return out


def launch(nxt, rng=None, cv=0.0, repeats=1):
    cand = nxt["candidate"]
    att = {"key": cand["key"], "candidate": cand, "overrides": nxt["overrides"], "fit_rung": nxt["fit_rung"]}
    if fits(cand, nxt["overrides"]):
        att.update(status="ok", metrics=bench(cand, rng, cv, repeats))
    else:
        att.update(status="failed", failure_class="oom_kv_cache", journal_tail=["RuntimeError: Not enough memory."])
    return att


def tune(strategy, objective, steps=(1, 2, 3, 4, 5, 6, 8, 10), fit_retry=False, rng=None, cv=0.0, level=None,
         **kw):
    cands = mtp_tune_candidates(list(steps))
    ladder = mtp_tune_fit_ladder(512, None)
    spec = dict(kw, strategy=strategy, objective=objective, level=level, seed=3, fit_retry=fit_retry)
    attempts = []
    for _round in range(60):
        nxt = mtp_tune_next(attempts, cands, ladder, spec)
        if nxt is None:
            break
        attempts.append(launch(nxt, rng, cv))
    else:
        pytest.fail("search did not terminate")
    best = mtp_tune_pick_best(attempts, spec)
    return attempts, best


def _att(steps, metrics, status="ok"):
    cand = mtp_tune_candidates([steps])[0]
    return {"key": cand["key"], "candidate": cand, "overrides": {}, "status": status, "metrics": metrics}


def _tps(steps, value):
    return _att(steps, {"1": {"decode_tps_per_request": {"mean": value}, "failed": 0}})


def _shape(values, steps=(1, 2, 3, 4, 5, 6, 8, 10), alpha=0.9, probe_ends="high", strategy="adaptive"):
    table = dict(zip(steps, values))
    cands = mtp_tune_candidates(list(steps))
    atts = []
    while True:
        nxt = mtp_tune_next(atts, cands, spec={"strategy": strategy, "probe_ends": probe_ends})
        if nxt is None:
            break
        k = nxt["candidate"]["steps"]
        tau = (1 - alpha ** (k + 1)) / (1 - alpha)
        atts.append(dict(_att(k, {"1": {"decode_tps_per_request": {"mean": table[k]}, "accept_length": tau,
                                        "failed": 0}}), reason=nxt["reason"]))
    return atts, mtp_tune_pick_best(atts, {"objective": "latency"})["winner"]["candidate"]["steps"]


def _chain(k, alpha=0.9):
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def _rounds(ms_by_steps, alpha=0.9):
    """Attempts whose time per verify round at C=1 is ms_by_steps[k] (chain accept length at alpha)."""
    return [_att(k, {"1": {"decode_tps_per_request": {"mean": _chain(k, alpha) / (t / 1000.0)},
                           "accept_length": _chain(k, alpha), "failed": 0}}) for k, t in sorted(ms_by_steps.items())]


def _tree_att(cand, ms, tau):
    """A launch of ``cand`` whose verify round takes ``ms`` at C=1 and accepts ``tau`` tokens."""
    return {"key": cand["key"], "candidate": cand, "overrides": {}, "status": "ok",
            "metrics": {"1": {"decode_tps_per_request": {"mean": tau / (ms / 1000.0)}, "accept_length": tau, "failed": 0}}}
