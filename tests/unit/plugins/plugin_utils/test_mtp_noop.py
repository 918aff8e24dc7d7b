"""Whether a tuning run has nothing left to do (plugins/plugin_utils/mtp_noop.py): one row per
case that must skip the loop, one per case that must go the normal way (resume, measure,
converge)."""

import copy

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.blackwell.sglang.plugins.filter.mtp_resume import FilterModule
from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_noop as n
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_resume import mtp_tune_fingerprint
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_winner import mtp_tune_winner

UNIT = "/etc/systemd/system/sglang-qwen.service"
SHA1 = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"
BENCH = {"input_len": 256, "output_len": 256, "dataset": "random", "temperature": 0.0, "time_scale": 0.5}
WL = mtp_tune_fingerprint(BENCH, "Qwen/Q", None, 4, None, [1, 4])
SPEC = {"objective": "throughput", "levels": [1, 4], "strategy": "sweep", "remeasure_launches": 0, "noise_launches": 0,
        "converge": True}
CANDS = mtp_tune_candidates([1, 3])
INPUTS = n.mtp_tune_inputs_digest({"sglang_service_name": "qwen", "sglang_service_port": 30000})
SETTINGS = {"objective": "throughput", "level": None, "concurrency": [1, 4], "strategy": "sweep", "noise": 0.015,
            "candidates": ["s1-k1-d2", "s3-k1-d4"], "fit_ladder": {}, "bench": dict(BENCH),
            "service": {"name": "qwen", "model_path": "Qwen/Q", "tp": 4, "cuda_graph_max_bs": None}}


def _ok(steps, value):
    return {"key": "s%d-k1-d%d" % (steps, steps + 1), "candidate": {"steps": steps, "topk": 1, "draft_tokens": steps + 1},
            "overrides": {}, "status": "ok", "workload": WL, "run": "20260101T000000Z",
            "metrics": {"1": {"output_throughput": value}, "4": {"output_throughput": 4 * value}}}


ATTEMPTS = [_ok(1, 100.0), _ok(3, 150.0)]
WINNER = mtp_tune_winner(ATTEMPTS, SPEC, None, "2026-01-01T00:10:00Z", CANDS)
RESULTS = {
    "schema": 1, "run": "sweep-throughput", "settings": SETTINGS, "attempts": ATTEMPTS, "winner": WINNER,
    "workload": WL, "superseded": [],
    "runs": [{"id": "20260101T000000Z", "started": "2026-01-01T00:00:00Z", "state": "finished",
              "ended": "2026-01-01T00:12:00Z"}],
    "converge": {"key": "s3-k1-d4", "unit": UNIT, "unit_sha1": SHA1, "inputs": INPUTS,
                 "verify": {"ok": True, "reason": None}, "at": "2026-01-01T00:11:00Z"},
}
RUN = {"force": False, "pool": False, "converge": True, "run_name": "sweep-throughput", "settings": SETTINGS,
       "workload": WL, "resume": {"mismatched": {}, "retry": []},
       "attempts": [dict(a, resumed=True) for a in ATTEMPTS], "candidates": CANDS, "ladder": {}, "spec": SPEC,
       "search_all_levels": True, "interrupted": False, "unit_path": UNIT, "inputs": INPUTS,
       "report": "/r/sweep-throughput/node/summary.md"}
NODE = {"unit_exists": True, "unit_sha1": SHA1, "ready": True,
        "unit": {"active_state": "active", "sub_state": "running"},
        "record": {"schema": 1, "release": "0.5.23",
                   "setting": {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                               "speculative_num_draft_tokens": 4, "cuda_graph_max_bs": None, "max_running_requests": None},
                   "provenance": {"by": "mtp_tune", "run": "sweep-throughput", "at": "2026-01-01T00:11:00Z"}}}


def _set(doc, path, value):
    *head, last = path.split(".")
    for key in head:
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    if value is _DROP:
        doc.pop(last, None)
    else:
        doc[last] = value


_DROP = object()


def _case(results=None, run=None, node=None):
    """The complete case with changes: ``{"a.b": value}`` per document (``_DROP`` removes a key)."""
    docs = [copy.deepcopy(RESULTS), copy.deepcopy(RUN), copy.deepcopy(NODE)]
    for doc, changes in zip(docs, (results, run, node)):
        for path, value in (changes or {}).items():
            _set(doc, path, value)
    return docs


def _decide(results, run, node):
    return FilterModule().filters()["mtp_tune_noop"](results, run, node)


SKIP = [
    ("complete", {}, {}, {}),
    # what results.json stores is compared as JSON: a tuple is a list, an int key a string
    ("settings spelled otherwise", {}, {"settings.concurrency": (1, 4), "settings.fit_ladder": {}}, {}),
    ("record numbers as floats", {}, {}, {"record.setting.speculative_num_steps": 3.0}),
    ("workload with levels as strings", {}, {"workload": mtp_tune_fingerprint(BENCH, "Qwen/Q", None, "4", None, ["4", "1"])}, {}),
]

NO_SKIP = [
    ("changed workload", {}, {"workload": mtp_tune_fingerprint(dict(BENCH, input_len=1024), "Qwen/Q", None, 4, None, [1, 4])},
     {}, "workload changed"),
    ("changed bench settings", {}, {"settings.bench.input_len": 1024}, {}, "tuning settings differ"),
    ("mtp_tune_force", {}, {"force": True}, {}, "mtp_tune_force"),
    ("changed candidate list", {}, {"settings.candidates": ["s1-k1-d2", "s3-k1-d4", "s5-k1-d6"],
                                    "candidates": mtp_tune_candidates([1, 3, 5])}, {}, "tuning settings differ"),
    ("changed objective", {}, {"settings.objective": "latency", "spec.objective": "latency"}, {}, "tuning settings differ"),
    ("search not over (a candidate still to measure)", {}, {"attempts": [dict(ATTEMPTS[0], resumed=True)]}, {},
     "search would launch"),
    ("search not over (judged-level search, the winner's table to complete)", {},
     {"search_all_levels": False, "spec.converge": False, "spec.level": 4,
      "attempts": [dict(a, resumed=True, metrics={"4": a["metrics"]["4"]}) for a in ATTEMPTS]}, {},
     "search would launch"),
    ("measurements now pick another winner", {"winner.key": "s1-k1-d2"}, {}, {}, "now pick s3-k1-d4"),
    ("unfinished earlier run", {"runs.0.state": "running"}, {}, {}, "did not finish (running)"),
    ("interrupted earlier run", {"runs.0.state": "interrupted"}, {}, {}, "did not finish"),
    ("failed earlier run", {"runs.0.state": "failed"}, {}, {}, "did not finish (failed)"),
    ("no run recorded", {"runs": []}, {}, {}, "did not finish"),
    ("interrupted run on the node (marker)", {}, {"interrupted": True}, {}, "interrupted run"),
    ("retry pending", {}, {"resume.retry": ["s1-k1-d2"]}, {}, "tried again"),
    ("measured under another workload", {}, {"resume.mismatched": {"s1-k1-d2": ["input_len"]}}, {}, "another workload"),
    ("missing results file", None, {}, {}, "no earlier results"),
    ("never converged", {"converge": None}, {}, {}, "never converged"),
    ("converged to another setting", {"converge.key": "s1-k1-d2"}, {}, {}, "last converge was to s1-k1-d2"),
    ("smoke benchmark failed", {"converge.verify.ok": False}, {}, {}, "did not pass"),
    ("converge record of an older version (no checksum)", {"converge.unit_sha1": _DROP}, {}, {}, "no checksum"),
    ("unit edited by hand or reverted", {}, {}, {"unit_sha1": "ffff" + SHA1[4:]}, "differs from the one converge wrote"),
    ("unit removed", {}, {}, {"unit_exists": False, "unit_sha1": None}, "is missing"),
    ("another unit", {}, {"unit_path": "/etc/systemd/system/sglang-other.service"}, {}, "this run's unit"),
    ("service variables changed", {}, {"inputs": n.mtp_tune_inputs_digest({"sglang_service_port": 30001})}, {},
     "service variables differ"),
    ("record names another setting", {}, {}, {"record.setting.speculative_num_steps": 1}, "speculative_num_steps=1"),
    ("record names another override", {"winner.overrides": {"cuda_graph_max_bs": 64}},
     {"attempts.1.overrides": {"cuda_graph_max_bs": 64}}, {}, "cuda_graph_max_bs=None"),
    ("record by another run", {}, {}, {"record.provenance.run": "other"}, "run other"),
    ("record by a rollout", {}, {}, {"record.provenance.by": "rollout"}, "chosen by rollout"),
    ("no record", {}, {}, {"record": None}, "no record"),
    ("stopped unit", {}, {}, {"unit.active_state": "inactive"}, "unit is inactive"),
    ("failed unit", {}, {}, {"unit.active_state": "failed"}, "unit is failed"),
    ("unit not installed", {}, {}, {"unit": {}}, "not installed"),
    ("server does not generate", {}, {}, {"ready": False}, "generate probe"),
    ("pool run", {}, {"pool": True}, {}, "pool"),
    ("not converging", {}, {"converge": False}, {}, "mtp_tune_converge=false"),
]


@pytest.mark.parametrize("name,results,run,node", SKIP, ids=[row[0] for row in SKIP])
def test_complete_run_skips(name, results, run, node):
    out = _decide(*_case(results, run, node))
    assert out["skip"] is True and out["why"] == [] and out["probe"] is False, (name, out)
    for part in ("nothing to do", "sweep-throughput", "s3-k1-d4", "steps 3", "throughput 600.0 at C=4",
                 "/r/sweep-throughput/node/summary.md"):
        assert part in out["message"], (part, out["message"])


@pytest.mark.parametrize("name,results,run,node,why", NO_SKIP, ids=[row[0] for row in NO_SKIP])
def test_anything_else_goes_the_normal_way(name, results, run, node, why):
    docs = _case(results, run, node)
    if results is None:
        docs[0] = None
    out = _decide(*docs)
    assert out["skip"] is False and out["probe"] is False, (name, out)
    assert any(why in reason for reason in out["why"]), (why, out["why"])
    assert out["message"].startswith("going the normal way: ")


def test_readiness_is_probed_last():
    out = _decide(*_case(node={"ready": None}))
    assert out == {"skip": False, "probe": True, "why": [], "message": "complete on record; probing the server before skipping"}
    # nothing else to fix: no probe is asked for
    assert _decide(*_case(node={"ready": None, "unit.active_state": "failed"}))["probe"] is False


def test_inputs_digest_leaves_out_outputs_and_the_key():
    base = {"sglang_service_name": "qwen", "sglang_service_port": 30000}
    same = dict(base, sglang_service_result={"ready": True}, sglang_service_names={"unit": "x"},
                sglang_service_start={"msg": "x"}, sglang_service_wait={"ready": True}, sglang_service_api_key="secret")
    assert n.mtp_tune_inputs_digest(same) == n.mtp_tune_inputs_digest(base) == INPUTS
    assert n.mtp_tune_inputs_digest(dict(base, sglang_service_port=30001)) != INPUTS
    assert n.mtp_tune_inputs_digest(dict(base, sglang_service_extra_args=["--x"])) != INPUTS
    assert len(INPUTS) == 64
    with pytest.raises(AnsibleFilterError):
        n.mtp_tune_inputs_digest(["sglang_service_name"])
