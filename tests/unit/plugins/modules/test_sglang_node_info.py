"""sglang_node_info: the node's record read back, unit state parsed, bad records refused with
what to fix, and the API key never read."""

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.blackwell.sglang.plugins.modules import sglang_node_info as m

RECORD = {"schema": 1, "release": "0.5.23",
          "setting": {"speculative_algorithm": "NEXTN", "speculative_num_steps": 4},
          "provenance": {"by": "mtp_tune", "run": "r1", "at": "2026-05-01T10:00:00Z"}}

SHOW = """LoadState=loaded
ActiveState=active
SubState=running
InvocationID=0123abcd
ActiveEnterTimestamp=Wed 2026-12-02 21:00:00 UTC
MainPID=4242
NRestarts=0
"""


def run_main(capsys, monkeypatch, args, show=SHOW, systemctl="/bin/systemctl"):
    monkeypatch.setattr(m.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: systemctl)
    monkeypatch.setattr(m.AnsibleModule, "run_command", lambda self, argv, *a, **k: (0, show, ""))
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            m.main()
    return json.loads(capsys.readouterr().out)


def test_reads_the_record_the_unit_and_whether_a_key_exists(tmp_path, capsys, monkeypatch):
    node = tmp_path / "qwen"
    node.mkdir()
    (node / "setting.json").write_text(json.dumps(RECORD))
    (node / "secrets.yaml").write_text('api-key: "never-read-me"\n')
    out = run_main(capsys, monkeypatch, {"name": "qwen", "config_dir": str(tmp_path)})
    assert out["changed"] is False
    assert out["record"] == RECORD
    assert out["api_key_configured"] is True
    assert "never-read-me" not in json.dumps(out)
    assert out["legacy_env_file"] is None
    assert out["unit"] == {"name": "sglang-qwen.service", "installed": True, "active_state": "active",
                           "sub_state": "running", "invocation_id": "0123abcd",
                           "active_enter_timestamp": "Wed 2026-12-02 21:00:00 UTC", "main_pid": 4242,
                           "n_restarts": 0, "result": None}
    assert out["ansible_facts"]["sglang_node_info"]["record"] == RECORD


def test_a_fresh_node_has_no_record_and_no_unit(tmp_path, capsys, monkeypatch):
    (tmp_path / "qwen.env").write_text("SGLANG_API_KEY='old'\n")
    out = run_main(capsys, monkeypatch, {"name": "qwen", "config_dir": str(tmp_path / "missing")})
    assert out["record"] is None and out["api_key_configured"] is False
    out = run_main(capsys, monkeypatch, {"name": "qwen", "config_dir": str(tmp_path)},
                   show="LoadState=not-found\nActiveState=inactive\nSubState=dead\nInvocationID=\n"
                        "ActiveEnterTimestamp=\nMainPID=0\nNRestarts=[not set]\n")
    assert out["legacy_env_file"] == str(tmp_path / "qwen.env")
    assert out["unit"]["installed"] is False and out["unit"]["invocation_id"] is None
    assert out["unit"]["n_restarts"] is None and out["unit"]["main_pid"] == 0


def test_without_systemctl_the_unit_is_unknown(tmp_path, capsys, monkeypatch):
    out = run_main(capsys, monkeypatch, {"config_dir": str(tmp_path)}, systemctl=None)
    assert out["unit"]["installed"] is False and out["unit"]["active_state"] is None


@pytest.mark.parametrize("text,needle", [
    ("{not json", "is not valid JSON"),
    ('["a list"]', "holds no setting object"),
])
def test_a_broken_record_fails_with_its_path(tmp_path, capsys, monkeypatch, text, needle):
    (tmp_path / "qwen").mkdir()
    (tmp_path / "qwen" / "setting.json").write_text(text)
    out = run_main(capsys, monkeypatch, {"config_dir": str(tmp_path)})
    assert out["failed"] is True
    assert needle in out["msg"] and str(tmp_path / "qwen" / "setting.json") in out["msg"]


def test_an_empty_record_counts_as_none(tmp_path):
    (tmp_path / "setting.json").write_text("\n")
    assert m.read_record(str(tmp_path / "setting.json")) is None


@pytest.mark.parametrize("name", ["", "../etc", "a/b"])
def test_bad_names_are_refused(tmp_path, capsys, monkeypatch, name):
    out = run_main(capsys, monkeypatch, {"name": name, "config_dir": str(tmp_path)})
    assert out["failed"] is True and "name must be a server name" in out["msg"]


def test_serving_state_from_the_units_own_records(tmp_path, capsys, monkeypatch):
    status = tmp_path / "status" / "qwen"
    status.mkdir(parents=True)
    failure = {"class": "oom_weights", "line": "ValueError: Loaded weights leave no GPU memory",
               "time": "2026-12-02T21:00:00Z"}
    (status / "status.json").write_text(json.dumps(
        {"failed": False, "consecutive_failures": 0, "last_failure": failure}))
    (status / "watchdog.json").write_text(json.dumps(
        {"invocation_id": "0123abcd", "ready": True, "last_check": "t", "last_result": "serving (4 tokens)",
         "restarts_total": 2, "gave_up": False, "actions": [{"action": "restart"}],
         "restart_times": [1.0]}))
    args = {"name": "qwen", "config_dir": str(tmp_path), "status_root": str(tmp_path / "status")}
    out = run_main(capsys, monkeypatch, args, show=SHOW + "Result=success\n")
    serving = out["serving"]
    assert serving["ready"] is True and serving["last_failure"] == failure
    assert serving["watchdog"]["restarts_total"] == 2 and "restart_times" not in serving["watchdog"]
    assert serving["restarts"] == 0 and serving["start_limit_hit"] is False
    assert out["ansible_facts"]["sglang_node_info"]["serving"] == serving
    # A check of an earlier start says nothing about this one.
    out = run_main(capsys, monkeypatch, args, show=SHOW.replace("0123abcd", "ffff"))
    assert out["serving"]["ready"] is None


def test_serving_state_of_a_braked_unit(tmp_path, capsys, monkeypatch):
    show = SHOW.replace("ActiveState=active", "ActiveState=failed").replace(
        "NRestarts=0", "NRestarts=2") + "Result=start-limit-hit\n"
    out = run_main(capsys, monkeypatch, {"name": "qwen", "config_dir": str(tmp_path),
                                         "status_root": str(tmp_path / "none")}, show=show)
    assert out["serving"]["ready"] is False and out["serving"]["start_limit_hit"] is True
    assert out["serving"]["restarts"] == 2 and out["serving"]["watchdog"] is None
    assert out["serving"]["last_failure"] is None


@pytest.mark.parametrize("active,restarts,result,braked", [
    # systemd 252 keeps the last run's Result when its start limit refuses an automatic restart
    ("failed", "3", "signal", True),
    ("failed", "0", "exit-code", False),    # failed on a start by hand: no restarts given up on
    ("activating", "2", "signal", False),   # still restarting
    ("inactive", "2", "success", False),    # stopped by hand or by the watchdog
])
def test_start_limit_hit_without_its_result(tmp_path, capsys, monkeypatch, active, restarts, result, braked):
    show = SHOW.replace("ActiveState=active", "ActiveState=" + active).replace(
        "NRestarts=0", "NRestarts=" + restarts) + "Result=%s\n" % result
    out = run_main(capsys, monkeypatch, {"name": "qwen", "config_dir": str(tmp_path),
                                         "status_root": str(tmp_path / "none")}, show=show)
    assert out["serving"]["start_limit_hit"] is braked


def test_an_unreadable_status_file_is_ignored_with_a_warning(tmp_path, capsys, monkeypatch):
    status = tmp_path / "qwen"
    status.mkdir()
    (status / "status.json").write_text("{not json")
    warned = []
    monkeypatch.setattr(m.AnsibleModule, "warn", lambda self, msg: warned.append(msg))
    out = run_main(capsys, monkeypatch, {"name": "qwen", "config_dir": str(tmp_path / "c"),
                                         "status_root": str(tmp_path)})
    assert out["serving"]["last_failure"] is None
    assert any("status.json" in w for w in warned)
