# -*- coding: utf-8 -*-
"""A failure of the node, not of the setting, ends the search at its first launch
(plugins/plugin_utils/mtp_node.py and its use by mtp_tune_next, mtp_tune_complete, the pool's
rounds, the attempt record, the resume plan, the run history and summary.md)."""

import pytest

from ansible_collections.blackwell.sglang.plugins.filter import mtp_tune as filters
from ansible_collections.blackwell.sglang.plugins.module_utils import mtp_report
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import mtp_tune_fit_ladder
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_node import (
    NODE_CLASSES, bad_args_is_node, mtp_tune_node_fault, mtp_tune_node_fault_message, node_fault_of)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_pool import mtp_tune_pool_next
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_record import mtp_tune_attempt
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_resume import (
    mtp_tune_resume_plan, mtp_tune_run_state)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import mtp_tune_complete, mtp_tune_next
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates

HOLDER = {"pid": 4242, "user": "root", "command": "python3", "cmdline": "python3 -m http.server 30000",
          "state": "listen"}
PORT_HINT = ("Port 30000 is held by pid 4242 (python3 -m http.server 30000, user root): stop that process or give "
             "the unit another port (sglang_service_port).")
# What each class's failed start leaves in the journal (SGLang 0.5.23's own lines, as
# plugins/module_utils/journal.py classifies them).
LINES = {
    "port_in_use": "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address "
                   "already in use",
    "model_missing": "OSError: Incorrect path_or_model_id: '/models/none'. Please provide either the path to a "
                     "local folder or the repo_id of a model on the Hub.",
    "install_broken": "ModuleNotFoundError: No module named 'deep_gemm'",
    "no_gpu": "RuntimeError: No CUDA GPUs are available",
}
USAGE = "usage: sglang serve [-h] --model-path MODEL_PATH [--speculative-num-steps SPECULATIVE_NUM_STEPS] ..."


def _wait(cls, line, tail=None, holders=None, hint=None):
    return {"ready": False, "failure_class": cls, "failure_line": line, "journal_tail": tail or [line],
            "hint": hint or "H", "port_holders": holders or []}


def _launch(nxt, wait, run="R2"):
    return mtp_tune_attempt({"next": nxt, "run": run, "workload": {"levels": [1]}, "ready": False, "wait": wait,
                             "bench": {"skipped": True}, "cap": None, "started": "2026-12-07T05:00:00Z",
                             "launch_s": 58.0, "wall_s": 60.0})


def _search(strategy, wait, attempts=None, steps=(1, 2, 3, 4, 5, 6, 8, 10)):
    """Run the search with every launch failing with ``wait``; the launches it made."""
    cands = mtp_tune_candidates(list(steps))
    spec = {"strategy": strategy, "objective": "latency", "level": 1, "levels": [1, 4], "fit_retry": True}
    ladder = mtp_tune_fit_ladder(512, None)
    attempts = list(attempts or [])
    made = []
    for _round in range(40):
        nxt = mtp_tune_next(attempts, cands, ladder, spec)
        if nxt is None:
            return made, attempts
        att = _launch(nxt, wait)
        attempts.append(att)
        made.append(att)
    pytest.fail("the search did not end")


# ---------------------------------------------------------------------------- which failures are the node's

@pytest.mark.parametrize("cls", NODE_CLASSES)
def test_each_node_class_is_a_node_fault_with_its_cause(cls):
    att = _launch({"candidate": {"steps": 3, "topk": 1, "draft_tokens": 4, "key": "s3-k1-d4"}, "overrides": {},
                   "reason": "climb"},
                  _wait(cls, LINES[cls], holders=[HOLDER] if cls == "port_in_use" else None,
                        hint=PORT_HINT if cls == "port_in_use" else None))
    fault = att["node_fault"]
    assert fault["class"] == cls
    if cls == "port_in_use":
        assert fault["cause"] == PORT_HINT and fault["holders"] == [HOLDER]
        assert att["port_holders"] == [HOLDER]
    else:
        assert LINES[cls] in fault["cause"] and fault["holders"] == []


@pytest.mark.parametrize("cls", ["oom_kv_cache", "cuda_graph_capture", "oom_weights", "timeout", "unknown",
                                 "bench_failed", "capped"])
def test_failures_a_setting_can_cause_are_not_the_nodes(cls):
    assert node_fault_of({"status": "failed", "failure_class": cls, "failure_line": "x"}) is None
    assert node_fault_of({"status": "ok", "failure_class": None}) is None


@pytest.mark.parametrize("tail, node", [
    # argparse refused a flag name of the release: the same on every candidate
    ([USAGE, "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
             "--cuda-graph-max-bs-prefill"], True),
    ([USAGE, "sglang serve: error: unrecognized arguments: --enable-foo"], True),
    # an extra argument's value, the algorithm, the context length: shared by every candidate
    ([USAGE, "sglang serve: error: argument --mem-fraction-static: invalid float value: 'x'"], True),
    (["ValueError: Unknown speculative algorithm name: EAGLE9"], True),
    (["ValueError: Warning: User-specified context_length (999999) is greater than the derived context_length "
      "(262144)."], True),
    # the value of a flag the candidates vary: the setting's
    ([USAGE, "sglang serve: error: argument --speculative-eagle-topk: invalid int value: '1.5'"], False),
    ([USAGE, "sglang serve: error: argument --speculative-num-steps: expected one argument"], False),
    (["ValueError: trtllm_mha backend only supports topk = 1 for speculative decoding."], False),
])
def test_bad_args_is_the_nodes_unless_a_varied_flag_was_refused(tail, node):
    # the classified line is the first bad_args line, often the usage block: the error line decides
    assert bad_args_is_node(tail[0], tail) is node
    fault = node_fault_of({"status": "failed", "failure_class": "bad_args", "failure_line": tail[0],
                           "journal_tail": tail})
    assert (fault is not None) is node
    if node:
        assert tail[-1].strip() in fault["cause"]


# ---------------------------------------------------------------------------- the search ends at the first

@pytest.mark.parametrize("strategy", ["sweep", "adaptive", "climb"])
@pytest.mark.parametrize("cls", NODE_CLASSES + ("bad_args",))
def test_a_node_fault_ends_the_search_after_one_launch(strategy, cls):
    line = LINES.get(cls, "sglang serve: error: unrecognized arguments: --enable-foo")
    made, attempts = _search(strategy, _wait(cls, line, holders=[HOLDER] if cls == "port_in_use" else None))
    assert len(made) == 1
    assert mtp_tune_node_fault(attempts)["class"] == cls
    assert mtp_tune_node_fault(attempts)["key"] == made[0]["key"]
    assert mtp_tune_complete(attempts, {"levels": [1, 4], "level": 1}) is None


def test_a_setting_failure_still_goes_on_to_the_next_candidate():
    # a failure of the setting that bounds nothing dearer (a crash, a start that timed out): the
    # search goes on; a memory failure instead rules out the dearer drafts of its topk (cannot_fit)
    for cls, line in (("unknown", "Fatal Python error: Segmentation fault"), ("timeout", "")):
        made, _attempts = _search("sweep", _wait(cls, line))
        assert len(made) > 1, cls


def test_a_node_fault_after_measured_launches_still_ends_the_search():
    cands = mtp_tune_candidates([1, 2, 3, 4])
    spec = {"strategy": "sweep", "objective": "latency", "level": 1, "levels": [1]}
    ok = {"key": "s1-k1-d2", "candidate": cands[0], "overrides": {}, "status": "ok", "run": "R2",
          "metrics": {"1": {"concurrency": 1, "completed": 4, "failed": 0, "output_throughput": 100.0,
                            "decode_tps_per_request": {"mean": 100.0}}}}
    nxt = mtp_tune_next([ok], cands, None, spec)
    failed = _launch(nxt, _wait("port_in_use", LINES["port_in_use"], holders=[HOLDER], hint=PORT_HINT))
    assert mtp_tune_next([ok, failed], cands, None, spec) is None


def test_a_pool_round_ends_when_any_node_failed_for_a_node_reason():
    cands = mtp_tune_candidates([1, 2, 3, 4, 5, 6])
    spec = {"strategy": "sweep", "objective": "latency", "level": 1, "levels": [1]}
    hosts = ["a", "b"]
    first = mtp_tune_pool_next([], hosts, "a", cands, None, spec)
    assert first["launch"] is not None
    failed = _launch(first["launch"], _wait("install_broken", LINES["install_broken"]))
    after = mtp_tune_pool_next([failed], hosts, "a", cands, None, spec)
    assert after["launch"] is None and after["more"] is False


# ---------------------------------------------------------------------------- what the run says and keeps

def test_the_message_names_the_class_the_holder_and_the_restore():
    made, attempts = _search("climb", _wait("port_in_use", LINES["port_in_use"], holders=[HOLDER], hint=PORT_HINT))
    msg = mtp_tune_node_fault_message(attempts, True, "results/x/node/summary.md")
    assert "failed %s with port_in_use" % made[0]["key"] in msg
    assert "pid 4242 (python3 -m http.server 30000, user root)" in msg
    assert "no other candidate was launched" in msg and "The pre-tuning unit was restored." in msg
    assert "results/x/node/summary.md" in msg
    assert mtp_tune_node_fault_message([], True) is None
    assert filters.FilterModule().filters()["mtp_tune_node_fault_message"] is mtp_tune_node_fault_message


def test_a_rerun_launches_one_candidate_again_and_ends_the_same_way():
    wait = _wait("port_in_use", LINES["port_in_use"], holders=[HOLDER], hint=PORT_HINT)
    made, attempts = _search("climb", wait)
    cands = mtp_tune_candidates([1, 2, 3, 4, 5, 6, 8, 10])
    plan = mtp_tune_resume_plan({"attempts": attempts}, cands, [1], {"levels": [1]})
    # the failure is not reused: the candidate is launched again, the old record kept as history
    assert plan["attempts"] == [] and plan["retry"] == [made[0]["key"]]
    assert plan["node_faults"] == {made[0]["key"]: "port_in_use"}
    assert "launching again what the node failed" in plan["message"]
    assert len(plan["superseded"]) == 1
    again, after = _search("climb", wait, attempts=plan["attempts"])
    assert [a["key"] for a in again] == [made[0]["key"]]
    assert mtp_tune_node_fault(after)["class"] == "port_in_use"
    # the node was fixed: the re-run measures as usual
    ok = dict(again[0], status="ok", failure_class=None, node_fault=None,
              metrics={"1": {"concurrency": 1, "completed": 4, "failed": 0, "output_throughput": 100.0,
                             "decode_tps_per_request": {"mean": 100.0}}})
    assert mtp_tune_next([ok], cands, None, {"strategy": "sweep", "level": 1, "levels": [1]}) is not None


def test_a_resumed_node_fault_does_not_end_this_run():
    made, attempts = _search("sweep", _wait("no_gpu", LINES["no_gpu"]))
    resumed = [dict(a, resumed=True) for a in attempts]
    assert mtp_tune_node_fault(resumed) is None


def test_results_keep_the_node_end_and_summary_names_it():
    made, attempts = _search("climb", _wait("port_in_use", LINES["port_in_use"], holders=[HOLDER], hint=PORT_HINT))
    runs = mtp_tune_run_state([{"id": "R2", "started": "2026-12-07T05:00:00Z", "state": "running"}], "R2", "failed",
                              "2026-12-07T05:01:00Z", mtp_tune_node_fault(attempts))
    assert runs[0]["state"] == "failed" and runs[0]["ended_by"]["class"] == "port_in_use"
    assert runs[0]["ended_by"]["key"] == made[0]["key"] and "pid 4242" in runs[0]["ended_by"]["cause"]
    # a later state change without it keeps it
    assert mtp_tune_run_state(runs, "R2", "failed")[0]["ended_by"] == runs[0]["ended_by"]
    doc = {"schema": mtp_report.SCHEMA, "run": "r", "host": "n", "settings": {"objective": "latency", "level": 1},
           "attempts": attempts, "winner": None, "runs": runs}
    text = mtp_report.render_summary(mtp_report.finalize(doc))
    assert "**Ended by the node, not the setting**: %s failed with port_in_use" % made[0]["key"] in text
    assert "pid 4242 (python3 -m http.server 30000, user root)" in text
    assert attempts[0]["node_fault"]["class"] == "port_in_use"
