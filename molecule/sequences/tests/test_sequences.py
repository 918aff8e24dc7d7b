"""The node after the sequences scenario: the key given last guards the server through the
SGLang --config file only, and the record still names the tuning run's winner."""

import json

KEY = "sequences-new-key"
SECRETS = "/etc/sglang/qwen/secrets.yaml"
RECORD = "/etc/sglang/qwen/setting.json"
UNIT = "/etc/systemd/system/sglang-qwen.service"


def test_key_only_in_the_config_file(host):
    unit = host.file(UNIT).content_string
    assert KEY not in unit and "--api-key" not in unit
    # the only EnvironmentFile is the install role's CUDA one (CUDA_HOME/PATH, no secret)
    assert [ln for ln in unit.splitlines() if ln.startswith("EnvironmentFile")] in (
        [], ["EnvironmentFile=-/etc/blackwell-sglang/cuda.env"])
    assert "--config %s" % SECRETS in unit
    secrets = host.file(SECRETS)
    assert (secrets.user, secrets.group, secrets.mode) == ("root", "sglang", 0o640)
    assert not host.file("/etc/sglang/qwen.env").exists


def test_no_process_shows_the_key(host):
    pids = host.run("ps -eo pid= -o args=").stdout
    assert "--config %s" % SECRETS in pids
    assert KEY not in pids
    # What any user can read: ps shows every command line.
    out = host.run("runuser -u nobody -- ps -eo args=")
    assert out.rc == 0 and "sglang_sim.launch_server" in out.stdout and KEY not in out.stdout


def test_nobody_cannot_read_the_config_file(host):
    out = host.run("runuser -u nobody -- cat %s", SECRETS)
    assert out.rc != 0 and "Permission denied" in out.stderr


def test_record_names_the_tuning_winner(host):
    record = json.loads(host.file(RECORD).content_string)
    assert record["provenance"]["by"] == "mtp_tune"
    assert record["setting"]["speculative_num_steps"] in (1, 5)
    unit = host.file(UNIT).content_string
    assert "--speculative-num-steps %d " % record["setting"]["speculative_num_steps"] in unit
    assert "# sglang-chosen-by: mtp_tune sequences at %s" % record["provenance"]["at"] in unit


def test_journal_holds_no_served_key(host):
    journal = host.run("journalctl --no-pager -o cat").stdout
    assert "'api_key': '<redacted>'" in journal
    for key in (KEY, "sequences-old-layout-key"):
        assert key not in journal


def test_main_pid_is_the_server(host):
    main_pid = int(host.run("systemctl show -p MainPID --value sglang-qwen.service").stdout.strip())
    argv = host.file("/proc/%d/cmdline" % main_pid).content_string.split("\0")
    assert argv[1:3] == ["-m", "sglang_sim.launch_server"], argv
