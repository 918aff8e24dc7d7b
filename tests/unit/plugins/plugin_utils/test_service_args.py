"""Unit tests for the service filters: argv building, speculative resolution, validation and
systemd quoting. The release map here is the real one from roles/service/vars when present."""

import json
import shlex
from pathlib import Path

import pytest
import yaml

from ansible_collections.blackwell.sglang.plugins.plugin_utils import service_args as f
from ansible_collections.blackwell.sglang.plugins.plugin_utils import service_record
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule as ss
from schedule_cases import (
    DEFAULT_523, MAP, OLD_RECORD, ROLE, run, SCHEDULE, SCHEDULE_FLAGS, SCHEDULE_NOT_GIVEN, settings, VAR)
from service_cases import base, FLAGS, LEVER_FLAGS, LEVERS, pairs


ROOT = Path(__file__).resolve().parents[4]


RELEASES = ROOT / "roles" / "service" / "vars" / "sglang_releases.yml"


def test_mtp_steps_derive_draft_tokens():
    argv = f.sglang_service_args(base(), FLAGS)
    got = pairs(argv)
    assert got["--speculative-algorithm"] == "NEXTN"
    assert got["--speculative-num-steps"] == "4"
    assert got["--speculative-eagle-topk"] == "1"
    assert got["--speculative-num-draft-tokens"] == "5"
    assert got["--tp-size"] == "4"
    assert got["--kv-cache-dtype"] == "bf16"


def test_unset_settings_are_not_rendered():
    argv = f.sglang_service_args(base(), FLAGS)
    for flag in ("--mem-fraction-static", "--cuda-graph-max-bs-decode", "--max-running-requests",
                 "--context-length", "--attention-backend", "--trust-remote-code", "--api-key",
                 "--speculative-draft-model-path"):
        assert flag not in argv


def test_all_settings_rendered_with_release_spelling():
    argv = f.sglang_service_args(base(mem_fraction_static=0.85, cuda_graph_max_bs=512, max_running_requests=32,
                                      context_length="32k", attention_backend="flashinfer",
                                      trust_remote_code=True, config_file="/etc/sglang/qwen/secrets.yaml",
                                      extra_args=["--mamba-ssm-dtype", "bfloat16"]), FLAGS)
    got = pairs(argv)
    assert got["--mem-fraction-static"] == "0.85"
    assert got["--cuda-graph-max-bs-decode"] == "512"
    assert "--cuda-graph-max-bs" not in argv  # the removed 0.5.22 spelling, ambiguous in 0.5.23
    assert got["--max-running-requests"] == "32"
    assert got["--context-length"] == "32k"
    assert got["--attention-backend"] == "flashinfer"
    assert got["--trust-remote-code"] is True
    assert got["--config"] == "/etc/sglang/qwen/secrets.yaml"
    assert "--api-key" not in argv  # the key itself stays out of argv
    assert argv[-2:] == ["--mamba-ssm-dtype", "bfloat16"]


def test_flag_names_come_from_the_map():
    flags = dict(FLAGS, cuda_graph_max_bs="--cuda-graph-max-bs")  # an older release's spelling
    argv = f.sglang_service_args(base(cuda_graph_max_bs=8), flags)
    assert pairs(argv)["--cuda-graph-max-bs"] == "8"


def test_missing_flag_in_map_is_a_clear_error():
    flags = dict(FLAGS)
    del flags["cuda_graph_max_bs"]
    with pytest.raises(f.AnsibleFilterError, match="no entry for 'cuda_graph_max_bs'"):
        f.sglang_service_args(base(cuda_graph_max_bs=8), flags)
    # ...but not when the setting is unset
    f.sglang_service_args(base(), flags)


def test_speculation_off_renders_no_spec_flags():
    argv = f.sglang_service_args(base(speculative_algorithm="", speculative_num_steps=10), FLAGS)
    assert not [a for a in argv if a.startswith("--speculative")]


def test_algorithm_is_upper_cased():
    assert pairs(f.sglang_service_args(base(speculative_algorithm="eagle"), FLAGS))["--speculative-algorithm"] == "EAGLE"


@pytest.mark.parametrize("steps,topk,draft,expected", [
    (1, 1, None, 2),
    (3, 1, None, 4),
    (10, 1, None, 11),
    (5, 4, 8, 8),
    (3, None, None, 4),   # topk unset means 1 with explicit steps
])
def test_spec_resolution(steps, topk, draft, expected):
    spec = f.sglang_service_spec(base(speculative_num_steps=steps, speculative_eagle_topk=topk,
                                      speculative_num_draft_tokens=draft))
    assert spec["enabled"] is True
    assert spec["speculative_num_draft_tokens"] == expected


def test_spec_auto_leaves_all_three_unset():
    spec = f.sglang_service_spec(base(speculative_num_steps=None, speculative_eagle_topk=None))
    assert spec["speculative_num_steps"] is None
    assert spec["speculative_eagle_topk"] is None
    assert spec["speculative_num_draft_tokens"] is None
    argv = f.sglang_service_args(base(speculative_num_steps=None, speculative_eagle_topk=None), FLAGS)
    assert "--speculative-algorithm" in argv and "--speculative-num-steps" not in argv


@pytest.mark.parametrize("over,needle", [
    ({"speculative_num_steps": 0}, "speculative_num_steps must be >= 1"),
    ({"speculative_num_steps": "four"}, "speculative_num_steps must be an integer"),
    ({"speculative_num_steps": 2.5}, "speculative_num_steps must be an integer"),
    ({"speculative_eagle_topk": 0}, "speculative_eagle_topk must be >= 1"),
    ({"speculative_num_draft_tokens": 4}, "must be num_steps + 1 = 5"),
    ({"speculative_eagle_topk": 4}, "must be set when eagle_topk > 1"),
    ({"speculative_eagle_topk": 2, "speculative_num_draft_tokens": 10}, "<= num_steps * eagle_topk + 1 = 9"),
    ({"speculative_num_steps": None, "speculative_eagle_topk": 2}, "speculative_num_steps must be set"),
    ({"port": 0}, "port must be in 1..65535"),
    ({"port": 70000}, "port must be in 1..65535"),
    ({"port": None}, "port must be an integer"),
    ({"mem_fraction_static": 1.0}, "mem_fraction_static must be in (0, 1)"),
    ({"mem_fraction_static": 0}, "mem_fraction_static must be in (0, 1)"),
    ({"mem_fraction_static": "lots"}, "mem_fraction_static must be a number"),
    ({"tp_size": 0}, "tp_size must be >= 1"),
    ({"cuda_graph_max_bs": 0}, "cuda_graph_max_bs must be >= 1"),
    ({"model_path": ""}, "model_path must be set"),
    ({"context_length": "lots"}, "context_length must be"),
    ({"extra_args": "--foo bar"}, "extra_args must be a list"),
    ({"config_file": "secrets.yaml"}, "config_file must be an absolute path ending in .yaml"),
    ({"config_file": "/etc/sglang/qwen.env"}, "config_file must be an absolute path ending in .yaml"),
    ({"kv_cache_dtype": "fp9"}, "kv_cache_dtype must be one of auto, fp8_e5m2"),
    ({"attention_backend": "fa9"}, "attention_backend must be one of triton"),
])
def test_problems_name_what_to_fix(over, needle):
    problems = f.sglang_service_problems(base(**over))
    assert any(needle in p for p in problems), problems
    with pytest.raises(f.AnsibleFilterError, match="invalid settings"):
        f.sglang_service_args(base(**over), FLAGS)


def test_valid_settings_have_no_problems():
    assert f.sglang_service_problems(base()) == []
    assert f.sglang_service_problems(base(speculative_eagle_topk=4, speculative_num_draft_tokens=8,
                                          speculative_num_steps=5)) == []


def test_numeric_strings_from_extra_vars_are_accepted():
    argv = f.sglang_service_args(base(speculative_num_steps="10", port="31000", mem_fraction_static="0.8",
                                      tp_size="2"), FLAGS)
    got = pairs(argv)
    assert got["--speculative-num-steps"] == "10"
    assert got["--speculative-num-draft-tokens"] == "11"
    assert got["--port"] == "31000"
    assert got["--mem-fraction-static"] == "0.8"


def test_summary_is_json_with_effective_max_running_requests():
    summary = json.loads(f.sglang_service_summary(base(speculative_num_steps=10, cuda_graph_max_bs=512)))
    assert summary["speculative_num_steps"] == 10
    assert summary["speculative_num_draft_tokens"] == 11
    assert summary["speculative_eagle_topk"] == 1
    assert summary["cuda_graph_max_bs"] == 512
    assert summary["max_running_requests"] is None
    assert summary["max_running_requests_effective"] == 48
    off = json.loads(f.sglang_service_summary(base(speculative_algorithm=None)))
    assert off["max_running_requests_effective"] is None
    assert "\n" not in f.sglang_service_summary(base())


def _systemd_split(line):
    """Approximate systemd's ExecStart word splitting for the subset we emit (double quotes with
    backslash escapes, $$ and %% unescaping)."""
    words = shlex.split(line, posix=True)
    return [w.replace("$$", "$").replace("%%", "%") for w in words]


@pytest.mark.parametrize("argv", [
    ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--port", "30000"],
    ["--served-model-name", "my model"],
    ["--chat-template", 'say "hi" \\ there'],
    ["--x", "100%", "--y", "$HOME", "--z", "a${B}c"],
    ["--json", '{"a": 1}'],
])
def test_exec_round_trips(argv):
    assert _systemd_split(f.sglang_systemd_exec(argv)) == argv


def test_exec_keeps_env_reference_words():
    line = f.sglang_systemd_exec(["--api-key", "${SGLANG_API_KEY}"])
    assert line == "--api-key ${SGLANG_API_KEY}"
    assert "$$" in f.sglang_systemd_exec(["--api-key", "x${SGLANG_API_KEY}"])


def test_exec_rejects_newlines():
    with pytest.raises(f.AnsibleFilterError, match="newline"):
        f.sglang_systemd_exec(["a\nb"])


def test_env_assignment_quoting():
    assert f.sglang_systemd_env("CUDA_VISIBLE_DEVICES", "0,1,2,3") == '"CUDA_VISIBLE_DEVICES=0,1,2,3"'
    assert f.sglang_systemd_env("X", 'a "b" 50%') == '"X=a \\"b\\" 50%%"'
    assert f.sglang_systemd_env("FLAG", True) == '"FLAG=1"'
    with pytest.raises(f.AnsibleFilterError, match="not a valid environment variable name"):
        f.sglang_systemd_env("BAD NAME", "1")


@pytest.mark.skipif(not RELEASES.exists(), reason="release map not generated yet (roles/service/vars/sglang_releases.yml)")
def test_real_release_map_covers_what_the_role_renders():
    releases = yaml.safe_load(RELEASES.read_text())["_sglang_service_releases"]
    for version, flags in releases.items():
        argv = f.sglang_service_args(base(mem_fraction_static=0.8, cuda_graph_max_bs=16, max_running_requests=8,
                                          context_length=4096, attention_backend="triton", trust_remote_code=True,
                                          config_file="/etc/s.yaml", speculative_draft_model_path="/d"), flags)
        assert "--cuda-graph-max-bs-decode" in argv, version


def test_secrets_yaml_refuses_an_empty_key():
    with pytest.raises(f.AnsibleFilterError, match="empty"):
        service_record.sglang_service_secrets_yaml("")


WATCHDOG = {"interval": 60, "deadline": 120, "tokens": 4, "max_restarts": 3, "window": 3600}


@pytest.mark.parametrize("key, value, needle", [
    ("interval", 0, "sglang_service_watchdog_interval must be >= 1, got 0 (0 would never check again)"),
    ("interval", "0", "sglang_service_watchdog_interval must be >= 1, got 0"),
    ("interval", -60, "sglang_service_watchdog_interval must be >= 1, got -60"),
    ("deadline", 0, "sglang_service_watchdog_deadline must be >= 1, got 0"),
    ("tokens", 0, "sglang_service_watchdog_tokens must be >= 1, got 0"),
    ("max_restarts", -1, "sglang_service_watchdog_max_restarts must be >= 0, got -1"),
    ("window", 0, "sglang_service_watchdog_window must be >= 1, got 0"),
    ("window", 30, "sglang_service_watchdog_window (30 s) must be at least sglang_service_watchdog_interval (60 s)"),
    ("interval", "soon", "sglang_service_watchdog_interval must be a whole number of seconds, got 'soon'"),
    ("interval", 1.5, "sglang_service_watchdog_interval must be a whole number of seconds, got 1.5"),
])
def test_watchdog_numbers_that_make_no_sense_are_refused(key, value, needle):
    problems = f.sglang_service_watchdog_problems(dict(WATCHDOG, **{key: value}))
    assert len(problems) == 1 and needle in problems[0], problems


def test_watchdog_defaults_and_extra_var_strings_pass():
    assert f.sglang_service_watchdog_problems(WATCHDOG) == []
    assert f.sglang_service_watchdog_problems(dict((k, str(v)) for k, v in WATCHDOG.items())) == []
    # zero restarts: stop at the first wedge instead of restarting, a meaningful choice
    assert f.sglang_service_watchdog_problems(dict(WATCHDOG, max_restarts=0)) == []
    defaults = yaml.safe_load(Path(__file__).resolve().parents[4].joinpath("roles/service/defaults/main.yml").read_text())
    assert f.sglang_service_watchdog_problems(dict(
        (k, defaults["sglang_service_watchdog_%s" % k]) for k in WATCHDOG)) == []


@pytest.mark.parametrize("name, needle", [
    ("q" * 232, "sglang_service_name is 232 characters long; at most 231 fit"),
    ("bad name", "may only hold letters, digits"),
    ("a/b", "may only hold letters, digits"),
    ("", "may only hold letters, digits"),
    ("..", "is a path, not a name"),
    (".", "is a path, not a name"),
])
def test_refused_server_names_say_why(name, needle):
    problems = f.sglang_service_name_problems(name)
    assert len(problems) == 1 and needle in problems[0], problems


def test_usable_server_names_pass_up_to_the_systemd_limit():
    for name in ("qwen", "qwen3.5-122b_a10b", "q" * 231):
        assert f.sglang_service_name_problems(name) == []
    # the longest unit the role makes fits systemd's limit exactly at 231
    assert len("sglang-%s-watchdog.service" % ("q" * 231)) == 255


def test_the_name_is_checked_before_the_role_reads_or_makes_anything():
    # a name refused after configure.yml made <config_dir>/<name> left that directory behind
    roles = Path(__file__).resolve().parents[4] / "roles" / "service" / "tasks"
    main = yaml.safe_load((roles / "main.yml").read_text())
    files = [t.get("ansible.builtin.import_tasks") for t in main if t.get("ansible.builtin.import_tasks")]
    assert files.index("preflight.yml") < files.index("configure.yml")
    checks = yaml.safe_load((roles / "checks.yml").read_text())
    assert "sglang_service_name_problems" in str(checks[0]["vars"]) and "ansible.builtin.assert" in checks[0]
    assert any("sglang_service_watchdog_problems" in str(t.get("vars")) for t in checks)
    # first in the role's preflight, and in the entry point other roles include before they change anything
    for entry in ("preflight.yml", "names.yml"):
        assert yaml.safe_load((roles / entry).read_text())[0].get("ansible.builtin.import_tasks") == "checks.yml"


def test_levers_render_as_the_release_spells_them():
    argv = f.sglang_service_args(base(mamba_full_memory_ratio=4.0, max_mamba_cache_size=96,
                                      enable_linear_replayssm_spec=True), LEVER_FLAGS)
    got = pairs(argv)
    assert got["--mamba-full-memory-ratio"] == "4.0"
    assert got["--max-mamba-cache-size"] == "96"
    assert got["--enable-linear-replayssm-spec"] is True  # a bare store_true flag
    assert argv.count("--enable-linear-replayssm-spec") == 1


@pytest.mark.parametrize("over", [
    {},
    {"enable_linear_replayssm_spec": False},
    {"enable_linear_replayssm_spec": "false"},
    {"mamba_full_memory_ratio": None, "max_mamba_cache_size": None, "enable_linear_replayssm_spec": None},
])
def test_unset_or_false_levers_are_not_rendered(over):
    argv = f.sglang_service_args(base(**over), LEVER_FLAGS)
    assert not [w for w in argv if "mamba" in w or "replayssm" in w]
    # and a release map without the levers still renders such a unit
    assert f.sglang_service_args(base(**over), FLAGS) == argv


def test_lever_spellings_from_extra_vars_and_yaml_give_one_unit():
    # -e ...=4 (a string), YAML 4 (an int) and a tuning run's 4.0 are the same setting: one argv
    ways = [base(mamba_full_memory_ratio=r, max_mamba_cache_size=m, enable_linear_replayssm_spec=b)
            for r, m, b in ((4, 96, True), ("4", "96", "true"), (4.0, 96, "yes"), ("4.0", " 96 ", True))]
    argvs = [f.sglang_service_args(w, LEVER_FLAGS) for w in ways]
    assert all(a == argvs[0] for a in argvs)
    assert pairs(argvs[0])["--mamba-full-memory-ratio"] == "4.0"


def test_a_lever_the_release_map_lacks_is_a_clear_error():
    with pytest.raises(f.AnsibleFilterError, match="no entry for 'max_mamba_cache_size'"):
        f.sglang_service_args(base(max_mamba_cache_size=96), FLAGS)


@pytest.mark.parametrize("over,needle", [
    ({"mamba_full_memory_ratio": 0}, "mamba_full_memory_ratio (sglang_service_mamba_full_memory_ratio) must be > 0"),
    ({"mamba_full_memory_ratio": -1.5}, "sglang_service_mamba_full_memory_ratio) must be > 0"),
    ({"mamba_full_memory_ratio": "lots"}, "sglang_service_mamba_full_memory_ratio) must be a number > 0, got 'lots'"),
    ({"mamba_full_memory_ratio": True}, "sglang_service_mamba_full_memory_ratio) must be a number > 0, got True"),
    ({"mamba_full_memory_ratio": "nan"}, "sglang_service_mamba_full_memory_ratio) must be a number > 0"),
    ({"max_mamba_cache_size": 0}, "max_mamba_cache_size (sglang_service_max_mamba_cache_size) must be >= 1"),
    ({"max_mamba_cache_size": "-3"}, "sglang_service_max_mamba_cache_size) must be >= 1"),
    ({"max_mamba_cache_size": 2.5}, "sglang_service_max_mamba_cache_size) must be an integer >= 1, got 2.5"),
    ({"enable_linear_replayssm_spec": "maybe"},
     "sglang_service_enable_linear_replayssm_spec) must be true, false or null, got 'maybe'"),
    ({"max_mamba_cache_size": 96, "extra_args": ["--max-mamba-cache-size", "64"]},
     "sglang_service_max_mamba_cache_size) is set and sglang_service_extra_args holds --max-mamba-cache-size"),
    ({"mamba_full_memory_ratio": 2.0, "extra_args": ["--mamba-full-memory-ratio=3"]},
     "sglang_service_extra_args holds --mamba-full-memory-ratio too"),
    ({"enable_linear_replayssm_spec": True, "extra_args": ["--enable-linear-replayssm-spec"]},
     "sglang_service_extra_args holds --enable-linear-replayssm-spec too"),
    ({"enable_linear_replayssm_spec": True, "speculative_algorithm": ""},
     "sglang_service_enable_linear_replayssm_spec) needs speculative decoding on"),
    ({"enable_linear_replayssm_spec": True, "speculative_algorithm": "EAGLE", "speculative_eagle_topk": 4,
      "speculative_num_draft_tokens": 8}, "requires a linear draft chain (--speculative-eagle-topk in {None, 1})"),
    ({"enable_linear_replayssm_spec": True, "extra_args": ["--linear-attn-decode-backend", "cutedsl"]},
     "requires the triton or flashinfer linear-attn decode backend, got --linear-attn-decode-backend='cutedsl'"),
    ({"enable_linear_replayssm_spec": True, "extra_args": ["--linear-attn-backend=helion"]},
     "got --linear-attn-decode-backend='helion'"),
    ({"enable_linear_replayssm_spec": True, "extra_args": ["--enable-linear-replayssm"]},
     "and --enable-linear-replayssm (in sglang_service_extra_args) are mutually exclusive"),
    ({"enable_linear_replayssm_spec": True, "extra_args": ["--disaggregation-mode", "prefill"]},
     "is not supported on a PD prefill server"),
    ({"enable_linear_replayssm_spec": True, "environment": {"SGLANG_RAGGED_VERIFY_MODE": "compact"}},
     "with SGLANG_RAGGED_VERIFY_MODE=compact requires the KDA fold-every-commit family"),
    ({"enable_linear_replayssm_spec": True, "environment": {"SGLANG_RAGGED_VERIFY_MODE": "fast"}},
     "SGLANG_RAGGED_VERIFY_MODE='fast', which SGLang refuses"),
])
def test_lever_problems_name_the_variable_and_the_fix(over, needle):
    problems = f.sglang_service_problems(base(**over))
    assert any(needle in p for p in problems), problems
    with pytest.raises(f.AnsibleFilterError, match="invalid settings"):
        f.sglang_service_args(base(**over), LEVER_FLAGS)


@pytest.mark.parametrize("over", [
    {"mamba_full_memory_ratio": 0.05},
    {"mamba_full_memory_ratio": "12"},
    {"max_mamba_cache_size": 1},
    {"enable_linear_replayssm_spec": True},
    {"enable_linear_replayssm_spec": True, "speculative_num_steps": None, "speculative_eagle_topk": None},
    {"enable_linear_replayssm_spec": True, "extra_args": ["--linear-attn-decode-backend", "flashinfer"]},
    # FlashKDA inherited from the base backend falls back to triton for decode
    {"enable_linear_replayssm_spec": True, "extra_args": ["--linear-attn-backend", "flashkda"]},
    {"enable_linear_replayssm_spec": True, "environment": {"SGLANG_RAGGED_VERIFY_MODE": "static"}},
    {"enable_linear_replayssm_spec": True, "extra_args": ["--disaggregation-mode", "decode"]},
    # the switches of the checks only matter with ReplaySSM on
    {"enable_linear_replayssm_spec": False, "extra_args": ["--enable-linear-replayssm"]},
    # a lever in extra_args alone is the operator's own word, as before the variables existed
    {"extra_args": ["--max-mamba-cache-size", "64", "--enable-linear-replayssm-spec"]},
])
def test_valid_levers_have_no_problems(over):
    assert f.sglang_service_problems(base(**over)) == []


# What the release's hook refuses (the sim's port of arg_groups/attention_hook.py
# handle_linear_attn_backend, checked against the wheel by tests/contract/test_sim_replayssm_contract.py)
# the role refuses before a start, and nothing else.
HOOK_CASES = [
    ({}, {}, False),
    ({"speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}, {}, True),
    ({}, {"linear_attn_decode_backend": "cutedsl"}, True),
    ({}, {"linear_attn_decode_backend": "flashinfer"}, False),
    ({}, {"linear_attn_backend": "flashkda"}, False),
    ({}, {"linear_attn_backend": "helion"}, True),
    ({}, {"enable_linear_replayssm": True}, True),
    ({}, {"_env": "compact"}, True),
    ({}, {"_env": "cap-accept"}, True),
    ({}, {"_env": "nonsense"}, True),
    ({}, {"_disagg": "prefill"}, True),
    ({}, {"_disagg": "decode"}, False),
]


@pytest.mark.parametrize("over,hook,refused", HOOK_CASES)
def test_replayssm_checks_match_the_release_hook(over, hook, refused):
    from sglang_sim import server_args as sim_args

    extra, env = [], {}
    for key, value in hook.items():
        if key == "_env":
            env["SGLANG_RAGGED_VERIFY_MODE"] = value
        elif key == "_disagg":
            extra += ["--disaggregation-mode", value]
        elif value is True:
            extra.append("--" + key.replace("_", "-"))
        else:
            extra += ["--" + key.replace("_", "-"), value]
    settings = base(enable_linear_replayssm_spec=True, extra_args=extra, environment=env, **over)
    ours = f.sglang_service_problems(settings)
    spec = f.sglang_service_spec(settings)
    a = {"enable_linear_replayssm_spec": True, "speculative_eagle_topk": spec["speculative_eagle_topk"],
         "speculative_algorithm": spec["speculative_algorithm"], "mamba_ssm_dtype": None}
    a.update((k, v) for k, v in hook.items() if not k.startswith("_"))
    try:
        sim_args.handle_linear_attn_backend(a, hook.get("_disagg", "null"), None, env)
        theirs = None
    except sim_args.ArgsError as exc:
        theirs = exc
    assert (theirs is not None) == refused, theirs
    assert bool(ours) == refused, ours


def test_levers_in_the_summary_only_when_set():
    plain = json.loads(f.sglang_service_summary(base()))
    assert not set(plain) & set(LEVERS)  # a unit without levers keeps its comment byte for byte
    off = json.loads(f.sglang_service_summary(base(enable_linear_replayssm_spec=False)))
    assert off == plain
    on = json.loads(f.sglang_service_summary(base(mamba_full_memory_ratio=4, max_mamba_cache_size="96",
                                                  enable_linear_replayssm_spec=True)))
    assert (on["mamba_full_memory_ratio"], on["max_mamba_cache_size"], on["enable_linear_replayssm_spec"]) == \
        (4.0, 96, True)


def test_role_wires_every_record_key_to_its_variable():
    role = ROOT / "roles" / "service"
    variables = yaml.safe_load((role / "vars" / "main.yml").read_text())
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    releases = yaml.safe_load(RELEASES.read_text())["_sglang_service_releases"]
    for key in LEVERS:
        var = "sglang_service_" + key
        assert defaults[var] is None and specs[var]["default"] is None, key
        assert key in variables["_sglang_service_builtin_setting"], key
        assert variables["_sglang_service_given_setting"][key] == "{{ %s }}" % var
        assert variables["_sglang_service_settings"][key] == "{{ _sglang_service_setting.%s }}" % key
        for version, flags in releases.items():
            assert flags[key] == LEVER_FLAGS[key], version
    assert specs["sglang_service_mamba_full_memory_ratio"]["type"] == "float"
    assert specs["sglang_service_max_mamba_cache_size"]["type"] == "int"
    assert specs["sglang_service_enable_linear_replayssm_spec"]["type"] == "bool"
    assert variables["_sglang_service_settings"]["environment"] == "{{ sglang_service_environment }}"


SWITCH = "sglang_service_speculative_adaptive"


def problems(**over):
    return f.sglang_service_problems(settings(**over), SCHEDULE_FLAGS, DEFAULT_523)


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
    old = dict((k, v) for k, v in SCHEDULE_FLAGS.items() if not k.startswith("speculative_adaptive"))
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
    assert f.sglang_service_problems(off, SCHEDULE_FLAGS, DEFAULT_523) == []
    assert "--speculative-adaptive" not in f.sglang_service_args(off, SCHEDULE_FLAGS)
    assert f.sglang_service_adaptive_file(off) == {}
    assert service_record._resolved(off)["speculative_adaptive"] is None


@pytest.mark.parametrize("over", [{"speculative_adaptive": None, "speculative_adaptive_config": None},
                                  {"speculative_adaptive": False, "speculative_adaptive_config": None},
                                  {"speculative_adaptive": "false", "speculative_adaptive_config": {}}])
def test_no_schedule_renders_nothing(over):
    argv = f.sglang_service_args(settings(**over), SCHEDULE_FLAGS)
    assert not [w for w in argv if "adaptive" in w]
    assert f.sglang_service_adaptive_file(settings(**over)) == {}
    assert "speculative_adaptive" not in json.loads(f.sglang_service_summary(settings(**over)))


def test_built_in_schedule_renders_the_switch_only():
    for config in (None, {}):
        argv = f.sglang_service_args(settings(speculative_adaptive_config=config), SCHEDULE_FLAGS)
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


def test_a_given_switch_that_agrees_keeps_the_recorded_schedule():
    _c, argv1, _f, rec1 = run(dict(SCHEDULE_NOT_GIVEN, speculative_adaptive=True, speculative_adaptive_config=SCHEDULE),
                              OLD_RECORD)
    chosen, argv, _f2, rec = run(dict(SCHEDULE_NOT_GIVEN, speculative_adaptive=True), rec1["record"])
    assert chosen["sources"]["speculative_adaptive_config"] == "node"
    assert argv == argv1 and not rec["changed"]


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
