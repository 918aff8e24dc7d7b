"""Unit tests for the rollout filters: what to roll out, reading units back, smoke floors, the
failure budget and the fleet summary."""

import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.blackwell.sglang.plugins.module_utils import mtp_report
from ansible_collections.blackwell.sglang.plugins.plugin_utils import rollout_setting as f
from ansible_collections.blackwell.sglang.plugins.plugin_utils import service_args as svc
from ansible_collections.blackwell.sglang.plugins.plugin_utils import service_record
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule as ss
from rollout_cases import Err, level
from schedule_cases import SCHEDULE, SCHEDULE_FLAGS, settings


def attempt(steps, status="ok", metrics=None, overrides=None, failure_class=None):
    cand = {"steps": steps, "topk": 1, "draft_tokens": steps + 1, "key": "s%d-k1-d%d" % (steps, steps + 1)}
    att = {"key": cand["key"], "candidate": cand, "overrides": overrides or {}, "status": status,
           "failure_class": failure_class, "metrics": metrics if status == "ok" else {}}
    return att


def results_doc(host="gpu-a1", winner_steps=4, overrides=None):
    """A results.json in the schema mtp_report writes (validated by mtp_report itself)."""
    atts = [
        attempt(3, metrics={"1": level(1, 234.0, 234.0), "16": level(16, 120.0, 1900.0)}),
        attempt(4, metrics={"1": level(1, 277.0, 277.0), "16": level(16, 100.0, 1596.0)}),
        attempt(10, status="failed", failure_class="oom_kv_cache"),
    ]
    if overrides:
        atts.append(attempt(winner_steps, metrics={"1": level(1, 281.0, 281.0)}, overrides=overrides))
    win = [a for a in atts if a["candidate"]["steps"] == winner_steps and a["overrides"] == (overrides or {})][0]
    doc = {"schema": 1, "host": host, "run": "r1", "settings": {"concurrency": [1, 16]}, "attempts": atts,
           "winner": {"key": win["key"], "candidate": win["candidate"], "overrides": overrides or {},
                      "score": {"value": 277.0}, "decided_by": "beats the runner-up beyond noise", "tied": []}}
    mtp_report.validate(doc)
    return doc


def as_item(doc, path="results/mtp_tune/r1/gpu-a1/results.json"):
    return {"path": path, "text": mtp_report.render_json(doc)}


def test_requested_from_extra_vars_derives_draft_tokens():
    got = f.rollout_requested("4")  # extra vars arrive as strings
    assert (got["speculative_num_steps"], got["speculative_eagle_topk"], got["speculative_num_draft_tokens"]) == (4, 1, 5)
    assert got["source"] == "extra_vars" and got["overrides"] == {} and got["label"] == "steps=4 topk=1 draft=5"


def test_requested_topk_above_one_needs_draft_tokens():
    with pytest.raises(Err, match="num_draft_tokens is required"):
        f.rollout_requested(3, topk=4)
    got = f.rollout_requested(3, topk=4, draft_tokens=8)
    assert got["speculative_num_draft_tokens"] == 8


@pytest.mark.parametrize("kwargs,msg", [
    ({}, "nothing to roll out"),
    ({"steps": 0}, ">= 1"),
    ({"steps": "four"}, "must be an integer"),
    ({"steps": True}, "must be an integer"),
    ({"topk": 2}, "num_steps is required"),
    ({"steps": 4, "draft_tokens": 7}, "steps \\+ 1"),
])
def test_requested_rejects_bad_input(kwargs, msg):
    with pytest.raises(Err, match=msg):
        f.rollout_requested(**kwargs)


def test_requested_refuses_two_sources():
    tuned = f.rollout_tuned_setting([as_item(results_doc())])
    with pytest.raises(Err, match="not both"):
        f.rollout_requested(5, tuned=tuned)


def test_requested_from_tuning_winner_keeps_overrides_and_figures():
    tuned = f.rollout_tuned_setting([as_item(results_doc(winner_steps=5, overrides={"cuda_graph_max_bs": 64}))])
    got = f.rollout_requested(None, None, None, tuned=tuned)
    assert got["speculative_num_steps"] == 5 and got["overrides"] == {"cuda_graph_max_bs": 64}
    assert got["source"] == "mtp_tune" and got["tuned"]["1"]["decode_tps_mean"] == 281.0
    assert got["label"] == "steps=5 topk=1 draft=6 [cuda_graph_max_bs=64]"
    assert got["tuned_from"]["host"] == "gpu-a1"


def test_tuned_setting_reads_winner_and_its_figures():
    got = f.rollout_tuned_setting([as_item(results_doc())])
    assert (got["steps"], got["topk"], got["draft_tokens"], got["key"]) == (4, 1, 5, "s4-k1-d5")
    assert got["figures"]["1"]["decode_tps_mean"] == 277.0
    assert got["figures"]["16"]["output_throughput"] == 1596.0


def test_tuned_setting_several_hosts_same_winner_is_fine():
    got = f.rollout_tuned_setting([as_item(results_doc("a")), as_item(results_doc("b"), "x/b/results.json")])
    assert got["steps"] == 4


def test_tuned_setting_different_winners_need_a_choice():
    docs = [as_item(results_doc("a", 4)), as_item(results_doc("b", 3), "x/b/results.json")]
    with pytest.raises(Err, match="different winners per host"):
        f.rollout_tuned_setting(docs)
    assert f.rollout_tuned_setting(docs, host="b")["steps"] == 3


def test_tuned_setting_without_winner_or_files():
    doc = results_doc()
    doc["winner"] = None
    with pytest.raises(Err, match="has no winner"):
        f.rollout_tuned_setting([as_item(doc)])
    with pytest.raises(Err, match="no results.json found in /srv/results/x"):
        f.rollout_tuned_setting([], source="/srv/results/x")
    with pytest.raises(Err, match="not valid JSON"):
        f.rollout_tuned_setting([{"path": "r.json", "text": "{broken"}])
    with pytest.raises(Err, match="not a tune_mtp.yml results file"):
        f.rollout_tuned_setting([{"path": "r.json", "text": json.dumps({"schema": 7})}])
    with pytest.raises(Err, match="no results file for host zz"):
        f.rollout_tuned_setting([as_item(results_doc())], host="zz")


def test_unit_settings_read_back_from_the_service_roles_comment():
    settings = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                "tp_size": 4, "kv_cache_dtype": "bf16"}
    unit = "# Ansible managed\n# sglang-settings: %s\n[Service]\nExecStart=/x -m sglang.launch_server\n" % (
        svc.sglang_service_summary(settings))
    got = f.rollout_unit_settings(unit)
    assert got["read_from"] == "settings_comment"
    assert (got["speculative_num_steps"], got["speculative_num_draft_tokens"], got["tp_size"]) == (3, 4, 4)
    assert f.rollout_at_setting(got, f.rollout_requested(3)) is True
    assert f.rollout_at_setting(got, f.rollout_requested(4)) is False


def test_unit_settings_from_a_hand_written_unit():
    # The operator's own unit, from before the collection, with a continued ExecStart line.
    unit = ("[Service]\nExecStart=/opt/venv/bin/python -m sglang.launch_server --model-path Qwen/Qwen3.5 \\\n"
            "  --tp 4 --kv-cache-dtype bf16 --speculative-algorithm nextn --speculative-num-steps=5 \\\n"
            "  --cuda-graph-max-bs 128\nRestart=always\n")
    got = f.rollout_unit_settings(unit)
    assert got["read_from"] == "exec_start"
    assert got["speculative_algorithm"] == "NEXTN"
    assert (got["speculative_num_steps"], got["speculative_eagle_topk"], got["speculative_num_draft_tokens"]) == (5, 1, 6)
    assert (got["tp_size"], got["cuda_graph_max_bs"]) == (4, 128)
    req = f.rollout_requested(5)
    assert f.rollout_at_setting(got, req)
    req["overrides"] = {"cuda_graph_max_bs": 64}
    assert not f.rollout_at_setting(got, req)


def test_unit_settings_absent_or_unreadable():
    assert f.rollout_unit_settings(None) is None
    assert f.rollout_unit_settings("") is None
    assert f.rollout_unit_settings("[Unit]\nDescription=x\n") == {"read_from": "unreadable"}
    assert not f.rollout_at_setting(None, f.rollout_requested(3))


def test_label_without_speculation():
    assert f.setting_label(None) == "-"
    assert f.setting_label({"speculative_algorithm": None}) == "no speculation"


def test_kind_tells_apart_nodes_of_another_model_or_tp():
    names = ["sglang_service_model_path", "sglang_service_tp"]
    rtx = {"sglang_service_model_path": "Qwen/Qwen3.5-122B-A10B", "sglang_service_tp": 4}
    rtx_str = {"sglang_service_model_path": "Qwen/Qwen3.5-122B-A10B", "sglang_service_tp": "4"}  # -e / ini vars
    b200 = {"sglang_service_model_path": "deepseek-ai/DeepSeek-V3-0324", "sglang_service_tp": 8}
    kinds = {f.rollout_kind(h, names) for h in (rtx, rtx_str)}
    assert kinds == {"sglang_service_model_path=Qwen/Qwen3.5-122B-A10B, sglang_service_tp=4"}
    assert f.rollout_kind(b200, names) not in kinds
    assert f.rollout_kind({}, names) == "sglang_service_model_path=unset, sglang_service_tp=unset"
    assert f.rollout_kind(rtx, []) == ""


def test_tuned_setting_carries_the_tuning_time_scale_to_the_smoke():
    # The smoke bench reads in the tuning benchmark's time base, so its figures compare with the
    # tuned ones; an older results file without it leaves the choice to the inventory.
    assert f.rollout_tuned_setting([as_item(results_doc())])["time_scale"] is None
    d = results_doc()
    d["settings"]["bench"] = {"time_scale": 0.5, "input_len": 256}
    tuned = f.rollout_tuned_setting([as_item(d)])
    assert tuned["time_scale"] == 0.5
    assert f.rollout_requested(tuned=tuned)["tuned_from"]["time_scale"] == 0.5


LEVERS = {"mamba_full_memory_ratio": 4.0, "max_mamba_cache_size": 96, "enable_linear_replayssm_spec": True}


LEVER_FLAGS = {"mamba_full_memory_ratio": "--mamba-full-memory-ratio", "max_mamba_cache_size": "--max-mamba-cache-size",
               "enable_linear_replayssm_spec": "--enable-linear-replayssm-spec"}


def test_a_tuned_winner_carries_the_cap_levers():
    overrides = dict(LEVERS, max_running_requests=64)
    tuned = f.rollout_tuned_setting([as_item(results_doc(winner_steps=5, overrides=overrides))])
    got = f.rollout_requested(None, None, None, tuned=tuned)
    assert got["overrides"] == overrides
    assert isinstance(got["overrides"]["mamba_full_memory_ratio"], float)
    assert got["overrides"]["enable_linear_replayssm_spec"] is True
    assert got["label"] == ("steps=5 topk=1 draft=6 [max_running_requests=64, mamba_full_memory_ratio=4.0, "
                            "max_mamba_cache_size=96, enable_linear_replayssm_spec=True]")


@pytest.mark.parametrize("key,value,msg", [
    ("mamba_full_memory_ratio", 0, "mamba_full_memory_ratio must be a number > 0, got 0"),
    ("mamba_full_memory_ratio", "much", "mamba_full_memory_ratio must be a number > 0"),
    ("mamba_full_memory_ratio", True, "mamba_full_memory_ratio must be a number > 0"),
    ("max_mamba_cache_size", 0, "max_mamba_cache_size must be >= 1"),
    ("max_mamba_cache_size", 2.5, "max_mamba_cache_size must be an integer"),
    ("enable_linear_replayssm_spec", "maybe", "enable_linear_replayssm_spec must be true or false"),
    ("enable_linear_replayssm_spec", 1, "enable_linear_replayssm_spec must be true or false"),
])
def test_a_winner_with_a_bad_lever_is_refused(key, value, msg):
    tuned = {"steps": 3, "topk": 1, "draft_tokens": 4, "overrides": {key: value}}
    with pytest.raises(Err, match=msg):
        f.rollout_requested(None, None, None, tuned=tuned)


def test_every_override_reaches_the_service_role_and_its_record():
    # roles/rollout/tasks/node.yml hands each override over as sglang_service_<key>; the service role
    # must know the variable and record the key, or a winner's lever is lost on the way to the node.
    role = Path(__file__).resolve().parents[4] / "roles" / "service"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    for key in f.OVERRIDE_KEYS:
        assert "sglang_service_" + key in defaults, key
        assert key in service_record.RECORD_KEYS, key
    node = (Path(__file__).resolve().parents[4] / "roles" / "rollout" / "tasks" / "node.yml").read_text()
    assert '"sglang_service_{{ item.key }}": "{{ item.value }}"' in node


def _rendered_unit(settings):
    """A unit as the service role renders it: the settings comment and the ExecStart argv."""
    flags = dict(LEVER_FLAGS, model_path="--model-path", tp_size="--tp-size", speculative_algorithm="--speculative-algorithm",
                 speculative_num_steps="--speculative-num-steps", speculative_eagle_topk="--speculative-eagle-topk",
                 speculative_num_draft_tokens="--speculative-num-draft-tokens", port="--port")
    argv = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"] + svc.sglang_service_args(settings, flags)
    return ("# Ansible managed\n# sglang-settings: %s\n[Service]\nExecStart=%s\n"
            % (svc.sglang_service_summary(settings), svc.sglang_systemd_exec(argv)))


def test_the_levers_read_back_from_a_rendered_unit():
    settings = dict({"model_path": "/m", "tp_size": 4, "port": 30000, "speculative_algorithm": "NEXTN",
                     "speculative_num_steps": 3}, **LEVERS)
    unit = _rendered_unit(settings)
    assert "--mamba-full-memory-ratio 4.0 --max-mamba-cache-size 96" in unit
    assert unit.rstrip().endswith("--enable-linear-replayssm-spec")
    from_comment = f.rollout_unit_settings(unit)
    no_comment = "\n".join(line for line in unit.splitlines() if "sglang-settings" not in line)
    from_flags = f.rollout_unit_settings(no_comment)
    assert (from_comment["read_from"], from_flags["read_from"]) == ("settings_comment", "exec_start")
    for got in (from_comment, from_flags):
        assert dict((k, got.get(k)) for k in LEVERS) == LEVERS, got
        assert got["speculative_num_steps"] == 3 and got["speculative_num_draft_tokens"] == 4
        req = f.rollout_requested(None, None, None, tuned={"steps": 3, "topk": 1, "draft_tokens": 4,
                                                           "overrides": dict(LEVERS)})
        assert f.rollout_at_setting(got, req)
        req["overrides"] = dict(LEVERS, mamba_full_memory_ratio=2.0)
        assert not f.rollout_at_setting(got, req)
    # without levers: none read back, and "off" is what a winner with ReplaySSM false asks for
    plain = f.rollout_unit_settings(_rendered_unit(dict(settings, **dict((k, None) for k in LEVERS))))
    assert not [k for k in LEVERS if plain.get(k) is not None]
    off = f.rollout_requested(None, None, None, tuned={"steps": 3, "topk": 1, "draft_tokens": 4,
                                                       "overrides": {"enable_linear_replayssm_spec": False}})
    assert f.rollout_at_setting(plain, off) and not f.rollout_at_setting(from_comment, off)


def test_a_hand_written_unit_with_the_levers_in_any_order():
    unit = ("[Service]\nExecStart=/v/bin/python -m sglang.launch_server --enable-linear-replayssm-spec \\\n"
            "  --speculative-algorithm NEXTN --speculative-num-steps 2 --mamba-full-memory-ratio=1.5 "
            "--max-mamba-cache-size 40\n")
    got = f.rollout_unit_settings(unit)
    assert got["enable_linear_replayssm_spec"] is True  # the bare switch takes no value word
    assert got["speculative_algorithm"] == "NEXTN" and got["speculative_num_steps"] == 2
    assert got["mamba_full_memory_ratio"] == 1.5 and got["max_mamba_cache_size"] == 40


def _unit(setting):
    argv = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"] + svc.sglang_service_args(setting, SCHEDULE_FLAGS)
    return ("# Ansible managed\n# sglang-settings: %s\n[Service]\nExecStart=%s\n"
            % (svc.sglang_service_summary(setting), svc.sglang_systemd_exec(argv)))


def test_rollout_carries_a_winner_s_schedule():
    assert set(svc.ADAPTIVE_KEYS) <= set(f.OVERRIDE_KEYS)
    tuned = {"steps": 3, "topk": 1, "draft_tokens": 4,
             "overrides": {"speculative_adaptive": "true", "speculative_adaptive_config": SCHEDULE}}
    got = f.rollout_requested(None, None, None, tuned=tuned)
    assert got["overrides"] == {"speculative_adaptive": True, "speculative_adaptive_config": ss.canonical(SCHEDULE)}
    assert got["label"] == ("steps=3 topk=1 draft=4 [speculative_adaptive=True, "
                            "speculative_adaptive_config=1:3/4 4:2/3 16:2/3]")
    # a node that serves it is at the setting, read from its unit's comment
    current = f.rollout_unit_settings(_unit(settings()))
    assert f.rollout_at_setting(current, got)
    # one that serves static steps 3, or another schedule, is not
    assert not f.rollout_at_setting(f.rollout_unit_settings(_unit(settings(speculative_adaptive=None,
                                                                           speculative_adaptive_config=None))), got)
    other = settings(speculative_adaptive_config={1: {"candidate_steps": [3]}})
    assert not f.rollout_at_setting(f.rollout_unit_settings(_unit(other)), got)


def test_rollout_static_winner_turns_a_schedule_off_and_built_in_is_stated():
    off = f.rollout_requested(None, None, None, tuned={"steps": 3, "topk": 1, "draft_tokens": 4,
                                                       "overrides": {"speculative_adaptive": False}})
    assert off["overrides"] == {"speculative_adaptive": False}
    assert not f.rollout_at_setting(f.rollout_unit_settings(_unit(settings())), off)
    plain = settings(speculative_adaptive=None, speculative_adaptive_config=None)
    assert f.rollout_at_setting(f.rollout_unit_settings(_unit(plain)), off)
    built_in = f.rollout_requested(None, None, None, tuned={
        "steps": 3, "topk": 1, "draft_tokens": 4,
        "overrides": {"speculative_adaptive": True, "speculative_adaptive_config": {}}})
    assert built_in["overrides"]["speculative_adaptive_config"] == {}
    assert f.rollout_at_setting(f.rollout_unit_settings(_unit(settings(speculative_adaptive_config=None))), built_in)
    assert not f.rollout_at_setting(f.rollout_unit_settings(_unit(settings())), built_in)


def test_rollout_refuses_a_malformed_schedule():
    tuned = {"steps": 3, "topk": 1, "draft_tokens": 4,
             "overrides": {"speculative_adaptive": True, "speculative_adaptive_config": {1: {"candidate_steps": []}}}}
    with pytest.raises(f.AnsibleFilterError, match=r"the winner's schedule is malformed: speculative_adaptive_config\[1\]"):
        f.rollout_requested(None, None, None, tuned=tuned)
    with pytest.raises(f.AnsibleFilterError, match="speculative_adaptive must be true or false"):
        f.rollout_requested(None, None, None, tuned={"steps": 3, "overrides": {"speculative_adaptive": "maybe"}})


def test_hand_written_unit_with_a_schedule_never_counts_as_the_requested_one():
    text = ("[Service]\nExecStart=/v/bin/python -m sglang.launch_server --speculative-algorithm EAGLE "
            "--speculative-num-steps 3 --speculative-adaptive --speculative-adaptive-config /etc/mine.json\n")
    got = f.rollout_unit_settings(text)
    assert got["speculative_adaptive"] is True and got["speculative_adaptive_config_file"] == "/etc/mine.json"
    tuned = {"steps": 3, "topk": 1, "draft_tokens": 4,
             "overrides": {"speculative_adaptive": True, "speculative_adaptive_config": SCHEDULE}}
    assert not f.rollout_at_setting(got, f.rollout_requested(None, None, None, tuned=tuned))


def test_tuned_winners_with_one_schedule_spelled_two_ways_are_one_winner():
    from ansible_collections.blackwell.sglang.plugins.module_utils import mtp_report

    def doc(host, schedule):
        cand = {"steps": 3, "topk": 1, "draft_tokens": 4, "key": "s3-k1-d4"}
        overrides = {"speculative_adaptive": True, "speculative_adaptive_config": schedule}
        att = {"key": cand["key"], "candidate": cand, "overrides": overrides, "status": "ok", "failure_class": None,
               "metrics": {"1": {"concurrency": 1, "completed": 8, "failed": 0, "output_throughput": 250.0,
                                 "decode_tps_per_request": {"mean": 250.0}}}}
        out = {"schema": 1, "host": host, "run": "r1", "settings": {"concurrency": [1]}, "attempts": [att],
               "winner": {"key": cand["key"], "candidate": cand, "overrides": overrides, "score": {"value": 250.0},
                          "decided_by": "best", "tied": []}}
        return {"path": "results/%s/results.json" % host, "text": mtp_report.render_json(out)}

    one = {"1": {"candidate_steps": [3, 4]}, "16": {"candidate_steps": [2, 3]}}
    same = {"16": {"candidate_steps": [3, 2]}, "1": {"candidate_steps": [4, 3, 3]}}
    tuned = f.rollout_tuned_setting([doc("a", one), doc("b", same)])
    assert tuned["overrides"]["speculative_adaptive_config"] == ss.canonical(one)
    assert tuned["figures"]["1"]["decode_tps_mean"] == 250.0  # the winning attempt was found
    other = {"1": {"candidate_steps": [4]}}
    with pytest.raises(f.AnsibleFilterError, match="different winners per host"):
        f.rollout_tuned_setting([doc("a", one), doc("b", other)])
    got = f.rollout_requested(None, None, None, tuned=tuned)
    assert got["overrides"]["speculative_adaptive_config"] == ss.canonical(one)
