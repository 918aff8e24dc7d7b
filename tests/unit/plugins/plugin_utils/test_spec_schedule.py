"""SGLang's per-load speculative schedule in the service role: the schedule's checks and canonical
form (plugins/plugin_utils/spec_schedule.py), its argv, file, settings comment, the node's record
and precedence (plugins/filter/service.py), and the rollout carrying it (plugins/filter/rollout.py)."""

import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.blackwell.sglang.plugins.filter import rollout as ro
from ansible_collections.blackwell.sglang.plugins.filter import service as f
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule as ss

ROOT = Path(__file__).resolve().parents[4]
ROLE = ROOT / "roles" / "service"
MAP = yaml.safe_load((ROLE / "vars" / "sglang_releases.yml").read_text())
FLAGS = MAP["_sglang_service_releases"]["0.5.23"]
DEFAULT_523 = MAP["_sglang_service_adaptive_defaults"]["0.5.23"]
DIR = "/etc/sglang/qwen"
VAR = "sglang_service_speculative_adaptive_config"
SWITCH = "sglang_service_speculative_adaptive"

# The operator's table on the sim's calibrated node: steps 4 at C=1, 3 at C=4..8, 2 from C=16.
SCHEDULE = {1: {"candidate_steps": [4, 3]}, 4: {"candidate_steps": [3, 2]}, 16: {"candidate_steps": [2, 3]}}


def settings(**over):
    out = {"model_path": "/models/q", "port": 30000, "tp_size": 4, "speculative_algorithm": "NEXTN",
           "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": None,
           "speculative_adaptive": True, "speculative_adaptive_config": SCHEDULE,
           "speculative_adaptive_dir": DIR, "extra_args": []}
    out.update(over)
    return out


def problems(**over):
    return f.sglang_service_problems(settings(**over), FLAGS, DEFAULT_523)


# --------------------------------------------------------------------------- the schedule itself

@pytest.mark.parametrize("config, needle", [
    ([1, 2], VAR + " must be a mapping of batch sizes to tiers"),
    ({}.fromkeys(["x"], {"candidate_steps": [1]}), "key 'x' is not a batch size"),
    ({"ema_alpha": 0.3, 1: {"candidate_steps": [1]}}, "key 'ema_alpha' is not a batch size"),
    ({0: {"candidate_steps": [1]}}, "batch size 0 must be >= 1"),
    ({-1: {"candidate_steps": [1]}}, "batch size -1 must be >= 1"),
    ({"-1": {"candidate_steps": [1]}}, "key '-1' is not a batch size"),
    ({1: {"candidate_steps": [1]}, "1": {"candidate_steps": [2]}}, "are the same batch size 1"),
    ({1: [1, 3]}, VAR + "[1] must be a mapping with candidate_steps"),
    ({1: {}}, VAR + "[1].candidate_steps must be a non-empty list"),
    ({1: {"candidate_steps": []}}, "non-empty list of whole numbers >= 0"),
    ({8: {"candidate_steps": [1, -1]}}, "BS 8: candidate_steps must be a list of non-negative ints"),
    ({1: {"candidate_steps": [1.5]}}, "candidate_steps must be a non-empty list"),
    ({1: {"candidate_steps": [True]}}, "candidate_steps must be a non-empty list"),
    ({1: {"candidate_steps": "1,3"}}, "candidate_steps must be a non-empty list"),
    ({1: {"candidate_steps": [1], "ema_alfa": 0.3}}, "unknown field 'ema_alfa'"),
    ({1: {"candidate_steps": [1], "ema_alpha": 0}}, VAR + "[1].ema_alpha must be a number in (0, 1]"),
    ({1: {"candidate_steps": [1], "ema_alpha": 1.5}}, "ema_alpha must be a number in (0, 1]"),
    ({1: {"candidate_steps": [1], "update_interval": 0}}, "update_interval must be a whole number >= 1"),
    ({1: {"candidate_steps": [1], "warmup_batches": -1}}, "warmup_batches must be a whole number >= 0"),
    ({1: {"candidate_steps": [1], "down_hysteresis": "low"}}, "down_hysteresis must be a number"),
    ({1: {"candidate_steps": [1], "up_hysteresis": float("nan")}}, "up_hysteresis must be a number"),
    ({1: {"candidate_steps": [1], "ceiling_coeff": -1}}, "ceiling_coeff must be a number >= 0"),
])
def test_malformed_schedules_name_the_variable_and_the_entry(config, needle):
    found = ss.problems(config)
    assert any(needle in p for p in found), found
    assert all(p.startswith(VAR) for p in found)


@pytest.mark.parametrize("config", [
    None, {}, SCHEDULE, DEFAULT_523,
    {"1": {"candidate_steps": [0]}},
    {1: {"candidate_steps": [1, 3], "ema_alpha": 1, "update_interval": 1, "warmup_batches": 0,
         "down_hysteresis": -0.5, "up_hysteresis": 0.25, "ceiling_coeff": 1.5}},
    '{"1": {"candidate_steps": [1, 3]}}',  # -e on the command line
])
def test_valid_schedules_have_no_problems(config):
    assert ss.problems(config) == []


def test_one_schedule_one_form_one_file():
    spelled = [
        {1: {"candidate_steps": [4, 3]}, 16: {"candidate_steps": [2, 3]}, 4: {"candidate_steps": [3, 2]}},
        {"16": {"candidate_steps": [3, 2, 2]}, "4": {"candidate_steps": [2, 3]}, "1": {"candidate_steps": [3, 4]}},
        json.dumps({"1": {"candidate_steps": [3, 4]}, "4": {"candidate_steps": [2, 3]}, "16": {"candidate_steps": [2, 3]}}),
    ]
    canon = [ss.canonical(c) for c in spelled]
    assert canon[0] == canon[1] == canon[2]
    assert list(canon[0]) == ["1", "4", "16"]  # numeric order, not string order
    assert canon[0]["16"]["candidate_steps"] == [2, 3]
    assert len(set(ss.file_name(c) for c in spelled)) == 1
    assert ss.file_name(SCHEDULE).startswith("adaptive-") and ss.file_name(SCHEDULE).endswith(".json")
    assert json.loads(ss.text(SCHEDULE)) == canon[0]
    # another schedule, another file
    assert ss.file_name({1: {"candidate_steps": [4, 2]}}) != ss.file_name(SCHEDULE)
    # floats as SGLang computes with them: 0 and 0.0 hysteresis are one schedule
    assert ss.text({1: {"candidate_steps": [1], "ceiling_coeff": 0}}) == \
        ss.text({1: {"candidate_steps": [1], "ceiling_coeff": 0.0}})
    assert ss.canonical(None) is None and ss.canonical({}) is None and ss.file_name({}) is None


def test_candidate_union_and_label():
    assert ss.candidate_union(SCHEDULE) == [2, 3, 4]
    assert ss.candidate_union(DEFAULT_523) == [0, 1, 3, 5, 7]
    assert ss.candidate_union({1: {"candidate_steps": []}}) is None
    assert ss.label(SCHEDULE) == "1:3/4 4:2/3 16:2/3"
    assert ss.label(None) == "SGLang's default" and ss.label({1: {}}) == "invalid schedule"


# --------------------------------------------------------------------------- against the release

def test_a_valid_schedule_has_no_problems():
    assert problems() == []
    assert problems(speculative_adaptive_config=None) == []  # SGLang's built-in schedule, steps 3 in it
    assert problems(speculative_algorithm="EAGLE3") == []
    assert problems(speculative_adaptive="true") == []  # -e spelling


@pytest.mark.parametrize("over, needle", [
    ({"speculative_adaptive": "maybe"}, SWITCH + " must be true, false or null"),
    ({"speculative_adaptive": None}, VAR + " is set but " + SWITCH + " is not set: set " + SWITCH + ": true"),
    ({"speculative_adaptive": False}, SWITCH + " is false"),
    ({"speculative_algorithm": "NGRAM"}, "'speculative_algorithm=NGRAM (only EAGLE/EAGLE3 are supported)'"),
    ({"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": "/d"}, SWITCH + " needs "
     "sglang_service_speculative_algorithm EAGLE, EAGLE3 or NEXTN"),
    ({"speculative_eagle_topk": 2, "speculative_num_draft_tokens": 6}, "'speculative_eagle_topk=2 (only topk=1 is "
     "supported)'"),
    ({"extra_args": ["--enable-dp-attention"]}, "'speculative_adaptive disabled: attention DP is not supported"),
    ({"extra_args": ["--enable-two-batch-overlap"]}, "holds --enable-two-batch-overlap"),
    ({"extra_args": ["--enable-pdmux"]}, "holds --enable-pdmux"),
    ({"extra_args": ["--enable-multi-layer-eagle"]}, "holds --enable-multi-layer-eagle"),
    ({"extra_args": ["--speculative-adaptive-config", "/x.json"]}, "speculative_adaptive_config "
     "(sglang_service_speculative_adaptive_config) is set and sglang_service_extra_args holds --speculative-adaptive-config"),
    ({"speculative_num_steps": 5}, "sglang_service_speculative_num_steps=5 is not among the schedule's candidate "
     "steps [2, 3, 4] (of " + VAR + "): SGLang refuses to start ('--speculative-num-steps=5 is not in the adaptive "
     "config candidate_steps [2, 3, 4]. Pass one of those values.'): give one of [2, 3, 4]"),
    ({"speculative_num_steps": 4, "speculative_adaptive_config": None}, "candidate steps [0, 1, 3, 5, 7] (SGLang's "
     "default schedule)"),
    ({"speculative_adaptive_config": {1: {"candidate_steps": [0]}}, "speculative_num_steps": 1},
     "give one of them, with a step count >= 1 in the schedule"),
    ({"speculative_adaptive_config": {1: {"candidate_steps": [3], "update_interval": 0}}},
     VAR + "[1].update_interval must be a whole number >= 1"),
])
def test_schedule_problems_name_the_variable_and_the_fix(over, needle):
    found = problems(**over)
    assert any(needle in p for p in found), found


def test_a_release_whose_flag_map_lacks_the_flags_cannot_serve_a_schedule():
    old = dict((k, v) for k, v in FLAGS.items() if not k.startswith("speculative_adaptive"))
    found = f.sglang_service_problems(settings(), old, None)
    assert len(found) == 2 and all("has no speculative_adaptive" in p for p in found), found
    assert "pin a release that has --speculative-adaptive-config" in found[1]
    # the built-in schedule needs the switch only
    only_switch = dict(old, speculative_adaptive="--speculative-adaptive")
    assert f.sglang_service_problems(settings(speculative_adaptive_config=None), only_switch, None) == []
    with pytest.raises(f.AnsibleFilterError, match="has no speculative_adaptive"):
        f.sglang_service_args(settings(), old)


def test_without_speculation_the_schedule_is_moot():
    # like the other speculative settings: not rendered, not recorded, not an error
    off = settings(speculative_algorithm="")
    assert f.sglang_service_problems(off, FLAGS, DEFAULT_523) == []
    assert "--speculative-adaptive" not in f.sglang_service_args(off, FLAGS)
    assert f.sglang_service_adaptive_file(off) == {}
    assert f._resolved(off)["speculative_adaptive"] is None


# --------------------------------------------------------------------------- argv, file, comment

def test_schedule_renders_the_switch_and_its_file():
    argv = f.sglang_service_args(settings(), FLAGS)
    path = "%s/%s" % (DIR, ss.file_name(SCHEDULE))
    assert argv[-3:] == ["--speculative-adaptive", "--speculative-adaptive-config", path]
    assert argv[argv.index("--speculative-num-steps") + 1] == "3"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "4"
    out = f.sglang_service_adaptive_file(settings())
    assert out["path"] == path and out["name"] == ss.file_name(SCHEDULE)
    assert json.loads(out["content"]) == ss.canonical(SCHEDULE) and out["content"].endswith("}\n")


@pytest.mark.parametrize("over", [{"speculative_adaptive": None, "speculative_adaptive_config": None},
                                  {"speculative_adaptive": False, "speculative_adaptive_config": None},
                                  {"speculative_adaptive": "false", "speculative_adaptive_config": {}}])
def test_no_schedule_renders_nothing(over):
    argv = f.sglang_service_args(settings(**over), FLAGS)
    assert not [w for w in argv if "adaptive" in w]
    assert f.sglang_service_adaptive_file(settings(**over)) == {}
    assert "speculative_adaptive" not in json.loads(f.sglang_service_summary(settings(**over)))


def test_built_in_schedule_renders_the_switch_only():
    for config in (None, {}):
        argv = f.sglang_service_args(settings(speculative_adaptive_config=config), FLAGS)
        assert argv[-1] == "--speculative-adaptive" and "--speculative-adaptive-config" not in argv
        assert f.sglang_service_adaptive_file(settings(speculative_adaptive_config=config)) == {}
        summary = json.loads(f.sglang_service_summary(settings(speculative_adaptive_config=config)))
        assert summary["speculative_adaptive"] is True and summary["speculative_adaptive_config"] is None


def test_the_file_needs_an_absolute_directory():
    with pytest.raises(f.AnsibleFilterError, match="speculative_adaptive_dir must be an absolute directory"):
        f.sglang_service_adaptive_file(settings(speculative_adaptive_dir="etc/sglang"))


def test_summary_carries_the_schedule_itself():
    summary = json.loads(f.sglang_service_summary(settings()))
    assert summary["speculative_adaptive"] is True
    assert summary["speculative_adaptive_config"] == ss.canonical(SCHEDULE)


# --------------------------------------------------------------------------- precedence and the record

DEFAULTS = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": None, "speculative_draft_model_path": None, "cuda_graph_max_bs": None,
            "max_running_requests": None, "mamba_full_memory_ratio": None, "max_mamba_cache_size": None,
            "enable_linear_replayssm_spec": None, "speculative_adaptive": None, "speculative_adaptive_config": None}
NOT_GIVEN = dict((k, None) for k in DEFAULTS)
OLD_RECORD = {"schema": 1, "release": "0.5.23",
              "setting": {"speculative_algorithm": "EAGLE", "speculative_num_steps": 4, "speculative_eagle_topk": 1,
                          "speculative_num_draft_tokens": 5, "speculative_draft_model_path": None,
                          "cuda_graph_max_bs": None, "max_running_requests": None},
              "provenance": {"by": "mtp_tune", "run": "r1", "at": "2026-05-01T10:00:00Z"}}


def run(given, record):
    """One run of the role on a node: the setting chosen, its argv and file, the record after it."""
    chosen = f.sglang_service_setting(given, record, DEFAULTS)
    now = settings(**chosen["setting"])
    assert f.sglang_service_problems(now, FLAGS, DEFAULT_523) == []
    argv = f.sglang_service_args(now, FLAGS)
    rec = f.sglang_service_record(now, record, "0.5.23", {"by": "service"}, "t")
    return chosen, argv, f.sglang_service_adaptive_file(now), rec


def test_schedule_sequence_render_keep_by_record_then_change_then_off():
    """Run 1 gives a schedule; run 2 restates nothing and keeps it (same unit, same file, record
    untouched); run 3 gives another schedule (new file, new unit: a restart, new record); run 4
    turns the switch off (the schedule goes with it); run 5 turns it on again without a schedule
    (SGLang's built-in one, not the dropped schedule)."""
    chosen1, argv1, file1, rec1 = run(dict(NOT_GIVEN, speculative_adaptive=True,
                                           speculative_adaptive_config=SCHEDULE), OLD_RECORD)
    assert chosen1["sources"]["speculative_adaptive_config"] == "variable"
    assert rec1["setting_changed"]
    assert rec1["record"]["setting"]["speculative_adaptive"] is True
    assert rec1["record"]["setting"]["speculative_adaptive_config"] == ss.canonical(SCHEDULE)
    assert rec1["record"]["setting"]["speculative_num_steps"] == 4  # the recorded steps, one of the candidates
    assert rec1["record"]["previous"]["setting"] == OLD_RECORD["setting"]
    assert argv1[-1] == file1["path"]
    # the record is JSON on the node: read back, it is the same setting
    rec1_read = json.loads(json.dumps(rec1["record"]))

    chosen2, argv2, file2, rec2 = run(NOT_GIVEN, rec1_read)
    assert chosen2["sources"]["speculative_adaptive"] == chosen2["sources"]["speculative_adaptive_config"] == "node"
    assert argv2 == argv1 and file2 == file1  # no restart
    assert not rec2["changed"] and rec2["record"] == rec1_read
    # the same schedule spelled as -e gives it (string keys, other order) is the same setting
    _c, argv2b, _f, rec2b = run(dict(NOT_GIVEN, speculative_adaptive="true",
                                     speculative_adaptive_config=json.dumps({"16": {"candidate_steps": [3, 2]},
                                                                             "4": {"candidate_steps": [2, 3]},
                                                                             "1": {"candidate_steps": [3, 4]}})),
                                rec1_read)
    assert argv2b == argv1 and not rec2b["changed"]

    other = {1: {"candidate_steps": [4]}, 8: {"candidate_steps": [2, 4], "ema_alpha": 0.5}}
    _c, argv3, file3, rec3 = run(dict(NOT_GIVEN, speculative_adaptive_config=other), rec1_read)
    assert file3["path"] != file1["path"] and argv3 != argv1 and argv3[-1] == file3["path"]
    assert rec3["setting_changed"] and rec3["record"]["setting"]["speculative_adaptive_config"] == ss.canonical(other)
    assert rec3["record"]["previous"]["setting"]["speculative_adaptive_config"] == ss.canonical(SCHEDULE)

    chosen4, argv4, file4, rec4 = run(dict(NOT_GIVEN, speculative_adaptive=False), rec3["record"])
    assert chosen4["sources"]["speculative_adaptive_config"] == "default"
    assert not [w for w in argv4 if "adaptive" in w] and file4 == {}
    assert rec4["setting_changed"]
    assert rec4["record"]["setting"]["speculative_adaptive"] is None
    assert rec4["record"]["setting"]["speculative_adaptive_config"] is None
    _c, argv4b, _f, rec4b = run(NOT_GIVEN, rec4["record"])
    assert argv4b == argv4 and not rec4b["changed"]

    # the recorded steps 4 are not among the built-in schedule's candidates: refused before anything
    chosen5 = f.sglang_service_setting(dict(NOT_GIVEN, speculative_adaptive=True), rec4["record"], DEFAULTS)
    assert any("speculative_num_steps=4 is not among" in p for p in f.sglang_service_problems(
        settings(**chosen5["setting"]), FLAGS, DEFAULT_523))
    _c, argv5, file5, rec5 = run(dict(NOT_GIVEN, speculative_adaptive=True, speculative_num_steps=3), rec4["record"])
    assert argv5[-1] == "--speculative-adaptive" and file5 == {}
    assert rec5["record"]["setting"]["speculative_adaptive"] is True
    assert rec5["record"]["setting"]["speculative_adaptive_config"] is None

    # {} given: SGLang's built-in schedule wins over a recorded one
    _c, argv6, file6, rec6 = run(dict(NOT_GIVEN, speculative_adaptive_config={}, speculative_num_steps=3),
                                 rec3["record"])
    assert argv6[-1] == "--speculative-adaptive" and file6 == {} and rec6["setting_changed"]


def test_a_given_switch_that_agrees_keeps_the_recorded_schedule():
    _c, argv1, _f, rec1 = run(dict(NOT_GIVEN, speculative_adaptive=True, speculative_adaptive_config=SCHEDULE),
                              OLD_RECORD)
    chosen, argv, _f2, rec = run(dict(NOT_GIVEN, speculative_adaptive=True), rec1["record"])
    assert chosen["sources"]["speculative_adaptive_config"] == "node"
    assert argv == argv1 and not rec["changed"]


def test_a_record_from_before_the_schedule_is_kept_byte_for_byte():
    chosen = f.sglang_service_setting(NOT_GIVEN, OLD_RECORD, DEFAULTS)["setting"]
    assert chosen["speculative_adaptive"] is None and chosen["speculative_adaptive_config"] is None
    now = settings(**chosen)
    out = f.sglang_service_record(now, OLD_RECORD, "0.5.23", {"by": "service"}, "t")
    assert not out["changed"] and out["record"] == OLD_RECORD
    assert set(f.ADAPTIVE_KEYS) <= set(f.RECORD_KEYS)


def test_role_wires_the_schedule_variables():
    variables = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    for key in f.ADAPTIVE_KEYS:
        var = "sglang_service_" + key
        assert defaults[var] is None and specs[var]["default"] is None, key
        assert key in variables["_sglang_service_builtin_setting"]
        assert variables["_sglang_service_given_setting"][key] == "{{ %s }}" % var
        assert variables["_sglang_service_settings"][key] == "{{ _sglang_service_setting.%s }}" % key
        for version, flags in MAP["_sglang_service_releases"].items():
            assert flags[key] == f.ADAPTIVE_FLAGS[key], version
    assert specs["sglang_service_speculative_adaptive"]["type"] == "bool"
    assert specs["sglang_service_speculative_adaptive_config"]["type"] == "dict"
    assert variables["_sglang_service_settings"]["speculative_adaptive_dir"] == "{{ _sglang_service_node_dir }}"
    assert set(MAP["_sglang_service_adaptive_defaults"]) == set(MAP["_sglang_service_releases"])
    preflight = (ROLE / "tasks" / "preflight.yml").read_text()
    assert "sglang_service_problems(_sglang_service_flags," in preflight
    configure = (ROLE / "tasks" / "configure.yml").read_text()
    # the schedule's file is written before the unit that names it, readable by the service group only
    assert configure.index("sglang_service_adaptive_file") < configure.index("src: sglang.service.j2")
    task = [t for t in yaml.safe_load(configure) if "sglang_service_adaptive_file" in json.dumps(t)][0]
    assert task["ansible.builtin.copy"]["mode"] == "0640"
    assert task["ansible.builtin.copy"]["group"] == "{{ sglang_service_group }}"
    assert task["notify"] == "sglang service restart"


# --------------------------------------------------------------------------- rollout

def _unit(setting):
    argv = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"] + f.sglang_service_args(setting, FLAGS)
    return ("# Ansible managed\n# sglang-settings: %s\n[Service]\nExecStart=%s\n"
            % (f.sglang_service_summary(setting), f.sglang_systemd_exec(argv)))


def test_rollout_carries_a_winner_s_schedule():
    assert set(f.ADAPTIVE_KEYS) <= set(ro.OVERRIDE_KEYS)
    tuned = {"steps": 3, "topk": 1, "draft_tokens": 4,
             "overrides": {"speculative_adaptive": "true", "speculative_adaptive_config": SCHEDULE}}
    got = ro.rollout_requested(None, None, None, tuned=tuned)
    assert got["overrides"] == {"speculative_adaptive": True, "speculative_adaptive_config": ss.canonical(SCHEDULE)}
    assert got["label"] == ("steps=3 topk=1 draft=4 [speculative_adaptive=True, "
                            "speculative_adaptive_config=1:3/4 4:2/3 16:2/3]")
    # a node that serves it is at the setting, read from its unit's comment
    current = ro.rollout_unit_settings(_unit(settings()))
    assert ro.rollout_at_setting(current, got)
    # one that serves static steps 3, or another schedule, is not
    assert not ro.rollout_at_setting(ro.rollout_unit_settings(_unit(settings(speculative_adaptive=None,
                                                                             speculative_adaptive_config=None))), got)
    other = settings(speculative_adaptive_config={1: {"candidate_steps": [3]}})
    assert not ro.rollout_at_setting(ro.rollout_unit_settings(_unit(other)), got)


def test_rollout_static_winner_turns_a_schedule_off_and_built_in_is_stated():
    off = ro.rollout_requested(None, None, None, tuned={"steps": 3, "topk": 1, "draft_tokens": 4,
                                                        "overrides": {"speculative_adaptive": False}})
    assert off["overrides"] == {"speculative_adaptive": False}
    assert not ro.rollout_at_setting(ro.rollout_unit_settings(_unit(settings())), off)
    plain = settings(speculative_adaptive=None, speculative_adaptive_config=None)
    assert ro.rollout_at_setting(ro.rollout_unit_settings(_unit(plain)), off)
    built_in = ro.rollout_requested(None, None, None, tuned={
        "steps": 3, "topk": 1, "draft_tokens": 4,
        "overrides": {"speculative_adaptive": True, "speculative_adaptive_config": {}}})
    assert built_in["overrides"]["speculative_adaptive_config"] == {}
    assert ro.rollout_at_setting(ro.rollout_unit_settings(_unit(settings(speculative_adaptive_config=None))), built_in)
    assert not ro.rollout_at_setting(ro.rollout_unit_settings(_unit(settings())), built_in)


def test_rollout_refuses_a_malformed_schedule():
    tuned = {"steps": 3, "topk": 1, "draft_tokens": 4,
             "overrides": {"speculative_adaptive": True, "speculative_adaptive_config": {1: {"candidate_steps": []}}}}
    with pytest.raises(ro.AnsibleFilterError, match=r"the winner's schedule is malformed: speculative_adaptive_config\[1\]"):
        ro.rollout_requested(None, None, None, tuned=tuned)
    with pytest.raises(ro.AnsibleFilterError, match="speculative_adaptive must be true or false"):
        ro.rollout_requested(None, None, None, tuned={"steps": 3, "overrides": {"speculative_adaptive": "maybe"}})


def test_hand_written_unit_with_a_schedule_never_counts_as_the_requested_one():
    text = ("[Service]\nExecStart=/v/bin/python -m sglang.launch_server --speculative-algorithm EAGLE "
            "--speculative-num-steps 3 --speculative-adaptive --speculative-adaptive-config /etc/mine.json\n")
    got = ro.rollout_unit_settings(text)
    assert got["speculative_adaptive"] is True and got["speculative_adaptive_config_file"] == "/etc/mine.json"
    tuned = {"steps": 3, "topk": 1, "draft_tokens": 4,
             "overrides": {"speculative_adaptive": True, "speculative_adaptive_config": SCHEDULE}}
    assert not ro.rollout_at_setting(got, ro.rollout_requested(None, None, None, tuned=tuned))


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
    tuned = ro.rollout_tuned_setting([doc("a", one), doc("b", same)])
    assert tuned["overrides"]["speculative_adaptive_config"] == ss.canonical(one)
    assert tuned["figures"]["1"]["decode_tps_mean"] == 250.0  # the winning attempt was found
    other = {"1": {"candidate_steps": [4]}}
    with pytest.raises(ro.AnsibleFilterError, match="different winners per host"):
        ro.rollout_tuned_setting([doc("a", one), doc("b", other)])
    got = ro.rollout_requested(None, None, None, tuned=tuned)
    assert got["overrides"]["speculative_adaptive_config"] == ss.canonical(one)
