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
                           "n_restarts": 0}
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
