"""SGLang's per-load speculative schedule in the service role: the schedule's checks and canonical
form (plugins/plugin_utils/spec_schedule.py), its argv, file, settings comment, the node's record
and precedence (plugins/plugin_utils/service_args.py, service_record.py; those tests are in
test_service_args.py and test_service_record.py), and the rollout carrying it (test_rollout_setting.py)."""

import json

import pytest

from ansible_collections.blackwell.sglang.plugins.plugin_utils import service_args as svc
from ansible_collections.blackwell.sglang.plugins.plugin_utils import service_record
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule as ss
from schedule_cases import (
    DEFAULT_523, DIR, OLD_RECORD, run, SCHEDULE, SCHEDULE_DEFAULTS, SCHEDULE_FLAGS, SCHEDULE_NOT_GIVEN, settings, VAR)


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


def test_schedule_renders_the_switch_and_its_file():
    argv = svc.sglang_service_args(settings(), SCHEDULE_FLAGS)
    path = "%s/%s" % (DIR, ss.file_name(SCHEDULE))
    assert argv[-3:] == ["--speculative-adaptive", "--speculative-adaptive-config", path]
    assert argv[argv.index("--speculative-num-steps") + 1] == "3"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "4"
    out = svc.sglang_service_adaptive_file(settings())
    assert out["path"] == path and out["name"] == ss.file_name(SCHEDULE)
    assert json.loads(out["content"]) == ss.canonical(SCHEDULE) and out["content"].endswith("}\n")


def test_schedule_sequence_render_keep_by_record_then_change_then_off():
    """Run 1 gives a schedule; run 2 restates nothing and keeps it (same unit, same file, record
    untouched); run 3 gives another schedule (new file, new unit: a restart, new record); run 4
    turns the switch off (the schedule goes with it); run 5 turns it on again without a schedule
    (SGLang's built-in one, not the dropped schedule)."""
    chosen1, argv1, file1, rec1 = run(dict(SCHEDULE_NOT_GIVEN, speculative_adaptive=True,
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

    chosen2, argv2, file2, rec2 = run(SCHEDULE_NOT_GIVEN, rec1_read)
    assert chosen2["sources"]["speculative_adaptive"] == chosen2["sources"]["speculative_adaptive_config"] == "node"
    assert argv2 == argv1 and file2 == file1  # no restart
    assert not rec2["changed"] and rec2["record"] == rec1_read
    # the same schedule spelled as -e gives it (string keys, other order) is the same setting
    _c, argv2b, _f, rec2b = run(dict(SCHEDULE_NOT_GIVEN, speculative_adaptive="true",
                                     speculative_adaptive_config=json.dumps({"16": {"candidate_steps": [3, 2]},
                                                                             "4": {"candidate_steps": [2, 3]},
                                                                             "1": {"candidate_steps": [3, 4]}})),
                                rec1_read)
    assert argv2b == argv1 and not rec2b["changed"]

    other = {1: {"candidate_steps": [4]}, 8: {"candidate_steps": [2, 4], "ema_alpha": 0.5}}
    _c, argv3, file3, rec3 = run(dict(SCHEDULE_NOT_GIVEN, speculative_adaptive_config=other), rec1_read)
    assert file3["path"] != file1["path"] and argv3 != argv1 and argv3[-1] == file3["path"]
    assert rec3["setting_changed"] and rec3["record"]["setting"]["speculative_adaptive_config"] == ss.canonical(other)
    assert rec3["record"]["previous"]["setting"]["speculative_adaptive_config"] == ss.canonical(SCHEDULE)

    chosen4, argv4, file4, rec4 = run(dict(SCHEDULE_NOT_GIVEN, speculative_adaptive=False), rec3["record"])
    assert chosen4["sources"]["speculative_adaptive_config"] == "default"
    assert not [w for w in argv4 if "adaptive" in w] and file4 == {}
    assert rec4["setting_changed"]
    assert rec4["record"]["setting"]["speculative_adaptive"] is None
    assert rec4["record"]["setting"]["speculative_adaptive_config"] is None
    _c, argv4b, _f, rec4b = run(SCHEDULE_NOT_GIVEN, rec4["record"])
    assert argv4b == argv4 and not rec4b["changed"]

    # the recorded steps 4 are not among the built-in schedule's candidates: refused before anything
    chosen5 = service_record.sglang_service_setting(dict(SCHEDULE_NOT_GIVEN, speculative_adaptive=True), rec4["record"], SCHEDULE_DEFAULTS)
    assert any("speculative_num_steps=4 is not among" in p for p in svc.sglang_service_problems(
        settings(**chosen5["setting"]), SCHEDULE_FLAGS, DEFAULT_523))
    _c, argv5, file5, rec5 = run(dict(SCHEDULE_NOT_GIVEN, speculative_adaptive=True, speculative_num_steps=3), rec4["record"])
    assert argv5[-1] == "--speculative-adaptive" and file5 == {}
    assert rec5["record"]["setting"]["speculative_adaptive"] is True
    assert rec5["record"]["setting"]["speculative_adaptive_config"] is None

    # {} given: SGLang's built-in schedule wins over a recorded one
    _c, argv6, file6, rec6 = run(dict(SCHEDULE_NOT_GIVEN, speculative_adaptive_config={}, speculative_num_steps=3),
                                 rec3["record"])
    assert argv6[-1] == "--speculative-adaptive" and file6 == {} and rec6["setting_changed"]
