"""A pool of identical nodes tuning together (plugins/plugin_utils/mtp_pool.py, published by
plugins/filter/mtp_pool.py): one round hands out distinct launches, failures of one round each
get their fit search, the nodes' identities are compared, and the attempts join in node order."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_pool
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import mtp_tune_fit_ladder
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import mtp_tune_pick_best
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates

HOSTS = ["node-b", "node-a", "node-c"]


def _measured(nxt, value, node=None):
    cand = nxt["candidate"]
    att = {"key": cand["key"], "candidate": cand, "overrides": nxt["overrides"], "fit_rung": nxt["fit_rung"],
           "reason": nxt["reason"], "status": "ok",
           "metrics": {"1": {"decode_tps_per_request": {"mean": value}, "output_throughput": value,
                             "accept_length": 1.0 + 0.8 * cand["steps"], "failed": 0}}}
    if node:
        att["node"] = node
    return att


def _round(pool, cands, spec, hosts=None, ladder=None, complete=False):
    hosts = hosts or HOSTS
    return [mtp_pool.mtp_tune_pool_next(pool, hosts, h, cands, ladder, spec, complete) for h in sorted(hosts)]


def test_a_sweep_round_hands_each_node_a_distinct_candidate_in_node_order():
    cands = mtp_tune_candidates([1, 2, 3, 4, 5])
    plans = _round([], cands, {"strategy": "sweep"})
    assert [p["launch"]["candidate"]["steps"] for p in plans] == [1, 2, 3]
    assert [p["launch"]["node"] for p in plans] == ["node-a", "node-b", "node-c"]
    assert {p["round"] for p in plans} == {1} and all(p["more"] for p in plans)
    pool = [_measured(p["launch"], 100 + p["launch"]["candidate"]["steps"]) for p in plans]
    pool = [dict(a, round=1) for a in pool]
    plans = _round(pool, cands, {"strategy": "sweep"})
    assert [p["launch"] and p["launch"]["candidate"]["steps"] for p in plans] == [4, 5, None]
    assert plans[0]["round"] == 2 and plans[2]["more"]  # the idle node goes on with the others
    pool += [_measured(p["launch"], 100) for p in plans if p["launch"]]
    assert not any(p["more"] for p in _round(pool, cands, {"strategy": "sweep"}))


@pytest.mark.parametrize("strategy", ["adaptive", "climb"])
def test_the_adaptive_round_launches_distinct_candidates_and_ends_on_the_sequential_answer(strategy):
    cands = mtp_tune_candidates([1, 2, 3, 4, 5, 6, 8, 10])
    truth = dict(zip([1, 2, 3, 4, 5, 6, 8, 10], [100, 128, 145, 172, 150, 135, 120, 105]))
    spec = {"strategy": strategy}
    pool, rounds = [], 0
    while True:
        plans = _round(pool, cands, spec, hosts=["n1", "n2"])
        if not plans[0]["more"]:
            break
        rounds += 1
        launches = [p["launch"] for p in plans if p["launch"]]
        assert len({nx["candidate"]["key"] for nx in launches}) == len(launches)
        assert not {nx["candidate"]["key"] for nx in launches} & {a["key"] for a in pool}
        pool += [_measured(nx, truth[nx["candidate"]["steps"]]) for nx in launches]
    assert mtp_tune_pick_best(pool, spec)["winner"]["candidate"]["steps"] == 4
    assert rounds <= 4  # the sweep split over two nodes


def test_every_failure_of_a_round_gets_its_fit_search():
    cands = mtp_tune_candidates([8, 10])
    ladder = mtp_tune_fit_ladder(None, None, mrr_floor=1)
    spec = {"strategy": "sweep", "fit_retry": True}
    pool = []
    for nxt in mtp_pool.next_batch(lambda atts: mtp_pool.tune_next(atts, cands, ladder, spec, pooled=True), [], 2):
        pool.append(dict(_measured(nxt, 0), status="failed", failure_class="oom_kv_cache", metrics={}))
    fits = [p["launch"] for p in _round(pool, cands, spec, hosts=["n1", "n2"], ladder=ladder)]
    assert sorted(f["candidate"]["steps"] for f in fits) == [8, 10]
    assert all(f["reason"].startswith("fit max_running_requests=") for f in fits)


def test_a_round_stops_at_the_launch_budget():
    cands = mtp_tune_candidates([1, 2, 3, 4, 5])
    plans = _round([], cands, {"strategy": "sweep", "max_launches": 2})
    assert [p["launch"] is not None for p in plans] == [True, True, False]


def test_the_completing_launches_follow_the_search():
    cands = mtp_tune_candidates([3, 4])
    spec = {"strategy": "sweep", "levels": [1, 4]}
    pool = [_measured(p["launch"], v) for p, v in zip(_round([], cands, spec, hosts=["n1", "n2"]), (100, 101))]
    plans = _round(pool, cands, spec, hosts=["n1", "n2"], complete=True)
    # steps 3 and 4 tie: both are completed at every level, one per node, in one round
    assert sorted(p["launch"]["candidate"]["steps"] for p in plans) == [3, 4]
    assert all(p["launch"]["levels"] == [1, 4] for p in plans)
    assert not any(p["more"] for p in _round(pool, cands, spec, hosts=["n1", "n2"]))


def test_a_node_outside_the_pool_is_refused():
    with pytest.raises(AnsibleFilterError, match="not among the pool's nodes"):
        mtp_pool.mtp_tune_pool_next([], ["n1"], "n2", mtp_tune_candidates([1]))


def _gpus(mib, n=4):
    return {"gpus": [{"index": i, "name": "NVIDIA RTX PRO 6000", "memory_total_mib": mib} for i in range(n)]}


def test_identity_and_problems_name_the_field_and_the_nodes():
    ident = mtp_pool.mtp_tune_pool_identity(_gpus(97887), {"model": "m"}, {"spec": 1})
    assert ident["gpus"] == "4 x NVIDIA RTX PRO 6000 97887 MiB" and ident["gpu_count"] == 4
    hostvars = {"a": {"_mtp_tune_pool_identity": ident}, "b": {"_mtp_tune_pool_identity": dict(ident)},
                "c": {"_mtp_tune_pool_identity": mtp_pool.mtp_tune_pool_identity(_gpus(95000), {"model": "m"}, {"spec": 1})}}
    assert mtp_pool.mtp_tune_pool_problems(["a", "b"], hostvars) == []
    problems = mtp_pool.mtp_tune_pool_problems(["c", "a", "b"], hostvars)
    assert len(problems) == 1
    assert "differ in GPUs" in problems[0]
    assert "a, b: '4 x NVIDIA RTX PRO 6000 97887 MiB'" in problems[0]
    assert "c: '4 x NVIDIA RTX PRO 6000 95000 MiB'" in problems[0]
    hostvars["b"]["_mtp_tune_pool_identity"] = dict(ident, workload={"model": "other"})
    assert any("model, release" in p for p in mtp_pool.mtp_tune_pool_problems(["a", "b"], hostvars))
    with pytest.raises(AnsibleFilterError, match="gpu_info"):
        mtp_pool.mtp_tune_pool_identity("4 GPUs")


def test_pool_attempts_join_in_node_order_tagged_with_their_node():
    hostvars = {"b": {"_mtp_tune_attempts": [{"key": "s2"}]}, "a": {"_mtp_tune_attempts": [{"key": "s1"}, {"key": "s3", "node": "x"}]},
                "c": {}}
    out = mtp_pool.mtp_tune_pool_attempts(hostvars, ["c", "b", "a"])
    assert [(a["key"], a["node"]) for a in out] == [("s1", "a"), ("s3", "x"), ("s2", "b")]
    assert "node" not in hostvars["a"]["_mtp_tune_attempts"][0]  # the nodes' own records are not touched
