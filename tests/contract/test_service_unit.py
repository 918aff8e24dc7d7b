"""The service role's unit, rendered for a matrix of settings, must be accepted by the SGLang
release it targets: the ExecStart line is split the way systemd splits it and parsed with that
release's own argument definitions (sglang_release.parse_cmdline). A flag the release does not
know, an ambiguous prefix, a bad choice or a mangled value fails here instead of crash-looping
a node.
"""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import sglang_release
from ansible_collections.blackwell.sglang.plugins.plugin_utils.service_record import sglang_service_secrets_yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "service"
COLLECTIONS = ROOT / ".cache" / "collections"


_RENDER_SCRIPT = r"""
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
role = sys.argv[2]
loader = DataLoader()
base = {}
for name in ("defaults/main.yml", "vars/main.yml", "vars/sglang_releases.yml"):
    base.update(loader.load_from_file(role + "/" + name, trusted_as_template=True))
base["ansible_managed"] = "Ansible managed"
with open(role + "/templates/sglang.service.j2") as fh:
    source = trust_as_template(fh.read())
out = []
for overrides in json.load(sys.stdin):
    variables = dict(base)
    variables.update(overrides)
    try:
        out.append({"text": Templar(loader=loader, variables=variables).template(source)})
    except Exception as exc:  # reported by the test that asked for this rendering
        out.append({"error": "%s: %s" % (type(exc).__name__, exc)})
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def render():
    """render(**overrides) -> unit text, through Ansible's own templating and our filters.

    Rendering runs in a fresh interpreter: Ansible's collection loader cannot take over
    ``ansible_collections`` once the unit tests imported it from sys.path in this process.
    """
    cache = {}

    def _batch(list_of_overrides):
        proc = subprocess.run(
            [sys.executable, "-c", _RENDER_SCRIPT, str(COLLECTIONS), str(ROLE)],
            input=json.dumps(list_of_overrides), capture_output=True, text=True, timeout=300, check=False,
            env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS)))
        assert proc.returncode == 0, proc.stderr
        for overrides, result in zip(list_of_overrides, json.loads(proc.stdout)):
            cache[json.dumps(overrides, sort_keys=True)] = result

    # One interpreter for the whole matrix (each start costs about a second).
    _batch([dict(p.values[0], sglang_service_release=v) for p in MATRIX for v in sglang_release.SUPPORTED])

    def _render(**overrides):
        key = json.dumps(overrides, sort_keys=True)
        if key not in cache:
            _batch([overrides])
        result = cache[key]
        if "error" in result:
            pytest.fail("the unit template does not render with %s: %s" % (overrides, result["error"]))
        return result["text"]

    return _render


def exec_argv(unit_text):
    """ExecStart words as systemd would pass them, minus `python -m <module>`."""
    lines = [line for line in unit_text.splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, unit_text
    words = [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(lines[0][len("ExecStart="):])]
    if words[1].endswith("/sglang_launch_redacted.py"):  # it execs `python -m <module> ...` as given
        words = words[:1] + words[2:]
    assert words[1:3] == ["-m", "sglang.launch_server"], words[:3]
    return words[3:]


def with_config_file(argv, tmp_path, api_key):
    """argv with its --config path pointing at the file the role writes for ``api_key``."""
    if "--config" not in argv:
        return argv
    index = argv.index("--config")
    assert argv[index + 1] == "/etc/sglang/qwen/secrets.yaml", argv
    path = tmp_path / "secrets.yaml"
    path.write_text(sglang_service_secrets_yaml(api_key, ["Ansible managed"]))
    return argv[:index + 1] + [str(path)] + argv[index + 2:]


MATRIX = [
    pytest.param({}, id="defaults"),
    pytest.param({"sglang_service_speculative_num_steps": 4}, id="mtp-steps4"),
    pytest.param({"sglang_service_speculative_num_steps": 10, "sglang_service_cuda_graph_max_bs": 512},
                 id="mtp-steps10-bs512"),
    pytest.param({"sglang_service_speculative_algorithm": "EAGLE", "sglang_service_speculative_num_steps": 5,
                  "sglang_service_speculative_eagle_topk": 4, "sglang_service_speculative_num_draft_tokens": 8,
                  "sglang_service_speculative_draft_model_path": "/models/draft"}, id="eagle-topk4"),
    pytest.param({"sglang_service_speculative_algorithm": "", "sglang_service_tp": 1}, id="no-spec"),
    pytest.param({"sglang_service_mem_fraction_static": 0.85, "sglang_service_max_running_requests": 32,
                  "sglang_service_context_length": "32k", "sglang_service_attention_backend": "flashinfer",
                  "sglang_service_kv_cache_dtype": "fp8_e4m3", "sglang_service_trust_remote_code": True,
                  "sglang_service_host": "0.0.0.0", "sglang_service_port": 31000,
                  "sglang_service_served_model_name": "qwen 3.5 (prod)",
                  "sglang_service_api_key": "te'st \"key\" #1: x\\y"}, id="everything"),
    pytest.param({"sglang_service_extra_args": ["--mamba-ssm-dtype", "bfloat16", "--reasoning-parser", "qwen3"]},
                 id="extra-args"),
    pytest.param({"sglang_service_mamba_full_memory_ratio": 4, "sglang_service_max_mamba_cache_size": 96,
                  "sglang_service_enable_linear_replayssm_spec": True}, id="cap-levers"),
]


@pytest.mark.parametrize("version", sglang_release.SUPPORTED)
@pytest.mark.parametrize("overrides", MATRIX)
def test_rendered_unit_parses_with_release(render, sglang_parser_for, tmp_path, version, overrides):
    text = render(sglang_service_release=version, **overrides)
    argv = with_config_file(exec_argv(text), tmp_path, overrides.get("sglang_service_api_key", ""))
    try:
        parser = sglang_parser_for(version)  # skips when the release wheel cannot be fetched
        ns, _merged = sglang_release.parse_server_argv(argv, version)
    except sglang_release.ArgvRejected as exc:
        pytest.fail("sglang %s rejects the rendered ExecStart %r: %s" % (version, argv, exc))
    # The values SGLang will see are the ones the variables asked for.
    settings = {"steps": 3, "topk": 1, "algo": "NEXTN", "tp": 4, "port": 30000}
    settings.update({
        "steps": overrides.get("sglang_service_speculative_num_steps", 3),
        "topk": overrides.get("sglang_service_speculative_eagle_topk", 1),
        "algo": overrides.get("sglang_service_speculative_algorithm", "NEXTN"),
        "tp": overrides.get("sglang_service_tp", 4),
        "port": overrides.get("sglang_service_port", 30000),
    })
    assert ns.tp_size == settings["tp"]
    assert ns.port == settings["port"]
    if settings["algo"]:
        assert ns.speculative_algorithm == settings["algo"]
        assert ns.speculative_num_steps == settings["steps"]
        assert ns.speculative_eagle_topk == settings["topk"]
        expected_draft = overrides.get("sglang_service_speculative_num_draft_tokens", settings["steps"] + 1)
        assert ns.speculative_num_draft_tokens == expected_draft
    else:
        assert ns.speculative_algorithm is None
    if "sglang_service_cuda_graph_max_bs" in overrides:
        assert ns.cuda_graph_max_bs_decode == overrides["sglang_service_cuda_graph_max_bs"]
    # The cap levers: the release's own default unless given (0.5.19 parses the ratio's 0.9, 0.5.23
    # leaves it None and falls back to 0.9 later).
    for lever in ("mamba_full_memory_ratio", "max_mamba_cache_size"):
        assert getattr(ns, lever) == overrides.get("sglang_service_" + lever, parser.get_default(lever)), lever
    assert ns.enable_linear_replayssm_spec is bool(overrides.get("sglang_service_enable_linear_replayssm_spec"))
    if "sglang_service_mem_fraction_static" in overrides:
        assert ns.mem_fraction_static == pytest.approx(overrides["sglang_service_mem_fraction_static"])
        assert ns.served_model_name == "qwen 3.5 (prod)"
        assert ns.api_key == overrides["sglang_service_api_key"]
        assert ns.trust_remote_code is True
        assert ns.kv_cache_dtype == "fp8_e4m3"


@pytest.mark.parametrize("version", sglang_release.SUPPORTED)
def test_api_key_reaches_sglang_through_config_not_argv(render, sglang_parser_for, tmp_path, version):
    key = "super-secret-value"
    text = render(sglang_service_release=version, sglang_service_api_key=key)
    assert key not in text
    # The only EnvironmentFile is the install role's CUDA_HOME/PATH file, never one with the key.
    env_files = [line for line in text.splitlines() if line.startswith("EnvironmentFile=")]
    assert env_files == ["EnvironmentFile=-/etc/blackwell-sglang/cuda.env"], env_files
    argv = exec_argv(text)
    assert key not in " ".join(argv) and "--api-key" not in argv
    # Exactly the word --config: the release merges the file only then ("--config=PATH" would be
    # accepted by argparse and silently ignored).
    assert argv.count("--config") == 1 and not any(w.startswith("--config=") for w in argv)
    sglang_parser_for(version)  # skips when the release wheel cannot be fetched
    ns, merged = sglang_release.parse_server_argv(with_config_file(argv, tmp_path, key), version)
    assert ns.api_key == key
    assert merged[:2] == ["--api-key", key]  # the file's options come first: a CLI flag still wins
    assert ns.speculative_num_steps == 3 and ns.tp_size == 4


@pytest.mark.parametrize("version", sglang_release.SUPPORTED)
def test_without_a_key_the_unit_has_no_config(render, version):
    argv = exec_argv(render(sglang_service_release=version))
    assert "--config" not in argv and "--api-key" not in argv


def test_release_refuses_a_config_file_with_another_suffix(real_sglang_parser, tmp_path):
    path = tmp_path / "secrets.env"
    path.write_text("api-key: x\n")
    with pytest.raises(ValueError, match="must be YAML"):
        sglang_release.parse_server_argv(["--model-path", "m", "--config", str(path)])


def test_old_cuda_graph_flag_is_rejected_by_pinned_release(sglang_parse):
    """Guards the premise: the pre-0.5.23 spelling really is refused, so rendering it would crash-loop."""
    with pytest.raises(sglang_release.ArgvRejected):
        sglang_parse(["--model-path", "m", "--cuda-graph-max-bs", "8"], version=sglang_release.PINNED)


def test_unit_comment_lines_stay_comments(render):
    text = render(sglang_service_unit_comment=["mtp_tune: steps 3 chosen\nExecStart=/bin/false", "second"])
    lines = text.splitlines()
    assert "# mtp_tune: steps 3 chosen ExecStart=/bin/false" in lines
    assert "# second" in lines
    assert len([line for line in lines if line.startswith("ExecStart=")]) == 1


def test_provenance_from_the_record_stays_comments(render):
    record = {"setting": {}, "provenance": {"by": "rollout", "run": "r1", "at": "T",
                                            "why": "a\nExecStart=/bin/false",
                                            "comment": ["mtp_tune r1: steps 4\n[Service]", "second"]}}
    text = render(_sglang_service_record_next={"record": record, "changed": True})
    lines = text.splitlines()
    assert "# sglang-chosen-by: rollout r1 at T: a ExecStart=/bin/false" in lines
    assert "# mtp_tune r1: steps 4 [Service]" in lines and "# second" in lines
    assert len([line for line in lines if line.startswith("ExecStart=")]) == 1
    assert lines.count("[Service]") == 1
    # A measurement run (record_write false) renders no provenance.
    text = render(_sglang_service_record_next={"record": record, "changed": True}, sglang_service_record_write=False)
    assert "sglang-chosen-by" not in text and "mtp_tune r1" not in text


def _exec_words(text):
    line = [line for line in text.splitlines() if line.startswith("ExecStart=")][0]
    return shlex.split(line[len("ExecStart="):])


def test_a_keyed_unit_starts_sglang_through_the_redacting_launcher(render):
    launcher = "/usr/local/libexec/blackwell-sglang/sglang_launch_redacted.py"
    words = _exec_words(render(sglang_service_api_key="k"))
    assert words[:4] == ["/opt/sglang/venv/bin/python", launcher, "-m", "sglang.launch_server"]
    # Nothing to hide without a key; redaction off starts SGLang directly.
    for overrides in ({}, {"sglang_service_api_key": "k", "sglang_service_log_redaction": False}):
        words = _exec_words(render(**overrides))
        assert words[1:3] == ["-m", "sglang.launch_server"] and launcher not in words


def _lines(text, prefix):
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_crash_loop_brake_clean_start_and_exit_record(render):
    text = render()
    assert _lines(text, "StartLimitIntervalSec=") == ["StartLimitIntervalSec=900"]
    assert _lines(text, "StartLimitBurst=") == ["StartLimitBurst=5"]
    # [Unit] keys: systemd ignores them (with a warning) in [Service].
    assert text.index("StartLimitBurst=") < text.index("[Service]")
    pre = _lines(text, "ExecStartPre=")
    assert len(pre) == 1
    words = shlex.split(pre[0][len("ExecStartPre="):])
    assert words[1] == "/usr/local/libexec/blackwell-sglang/sglang_unit_guard.py"
    assert words[2] == "clean-start" and "--no-clean" not in words
    assert words[words.index("--unit") + 1] == "sglang-qwen.service"
    assert words[words.index("--state-dir") + 1] == "/var/lib/blackwell-sglang/qwen"
    assert words[words.index("--backoff-max") + 1] == "120"
    assert _lines(text, "TimeoutStartSec=") == ["TimeoutStartSec=250"]
    post = _lines(text, "ExecStopPost=")
    assert len(post) == 1 and post[0].startswith("ExecStopPost=+/opt/sglang/venv/bin/python ")
    assert "record-exit --unit sglang-qwen.service" in post[0]

    off = render(sglang_service_clean_start=False)
    assert "--no-clean" in _lines(off, "ExecStartPre=")[0]
    bare = render(sglang_service_clean_start=False, sglang_service_restart_backoff_max=0)
    assert not _lines(bare, "ExecStartPre=") and not _lines(bare, "TimeoutStartSec=")


def test_clean_start_sweeps_dev_shm_by_default(render):
    words = shlex.split(_lines(render(), "ExecStartPre=")[0][len("ExecStartPre="):])
    assert words[words.index("--shm-dir") + 1] == "/dev/shm"
    assert words[words.index("--max-failures") + 1] == "5"
    other = shlex.split(_lines(render(sglang_service_clean_start_shm_dir="/run/shm"), "ExecStartPre=")[0])
    assert other[other.index("--shm-dir") + 1] == "/run/shm"
    assert "--shm-dir" not in _lines(render(sglang_service_clean_start_shm=False), "ExecStartPre=")[0]
    # No clean start, no sweep: the ExecStartPre only backs off.
    assert "--shm-dir" not in _lines(render(sglang_service_clean_start=False), "ExecStartPre=")[0]


SCHEDULE = {"1": {"candidate_steps": [3, 4]}, "16": {"candidate_steps": [2, 3], "ema_alpha": 0.3},
            "32": {"candidate_steps": [0, 2]}}


@pytest.mark.parametrize("version", sglang_release.SUPPORTED)
def test_a_per_load_schedule_reaches_sglang_through_its_file(render, sglang_parser_for, version):
    """The variables, through the role's vars and Ansible's templating, give an ExecStart the release
    parses with the schedule's file, and the unit's settings comment names the schedule itself."""
    from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule

    text = render(sglang_service_release=version, sglang_service_speculative_adaptive=True,
                  sglang_service_speculative_adaptive_config=SCHEDULE)
    argv = exec_argv(text)
    sglang_parser_for(version)  # skips when the release wheel cannot be fetched
    ns, _merged = sglang_release.parse_server_argv(argv, version)
    assert ns.speculative_adaptive is True
    assert ns.speculative_adaptive_config == "/etc/sglang/qwen/" + spec_schedule.file_name(SCHEDULE)
    assert ns.speculative_num_steps == 3 and ns.speculative_algorithm == "NEXTN"
    comment = json.loads([line for line in text.splitlines() if line.startswith("# sglang-settings: ")][0][19:])
    assert comment["speculative_adaptive"] is True and comment["speculative_adaptive_config"] == SCHEDULE
    # SGLang's built-in schedule: the switch only.
    argv = exec_argv(render(sglang_service_release=version, sglang_service_speculative_adaptive=True))
    assert "--speculative-adaptive" in argv and "--speculative-adaptive-config" not in argv
