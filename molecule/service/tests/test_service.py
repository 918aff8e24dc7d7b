"""The node after the service scenario: steps=3 serving, the unit and its secrets in place, and
no process outside the unit holding a (fake) GPU."""

import json

import pytest

UNIT = "/etc/systemd/system/sglang-qwen.service"
SECRETS = "/etc/sglang/qwen/secrets.yaml"
RECORD = "/etc/sglang/qwen/setting.json"
KEY = "molecule-test-key-not-secret"


def _settings(host):
    for line in host.file(UNIT).content_string.splitlines():
        if line.startswith("# sglang-settings: "):
            return json.loads(line[len("# sglang-settings: "):])
    pytest.fail("no sglang-settings comment in the unit")


def test_unit_file_mode_and_owner(host):
    unit = host.file(UNIT)
    assert unit.exists and unit.is_file
    assert unit.user == "root" and unit.group == "root"
    assert unit.mode == 0o644


def test_unit_runs_steps3_with_release_flags(host):
    content = host.file(UNIT).content_string
    exec_line = [line for line in content.splitlines() if line.startswith("ExecStart=")][0]
    # Keyed: through the launcher that keeps the key out of the journal, which execs the server.
    assert exec_line.startswith("ExecStart=/opt/sglang/venv/bin/python "
                                "/usr/local/libexec/blackwell-sglang/sglang_launch_redacted.py "
                                "-m sglang_sim.launch_server ")
    for words in ("--speculative-num-steps 3", "--speculative-eagle-topk 1", "--speculative-num-draft-tokens 4",
                  "--speculative-algorithm NEXTN", "--tp-size 4", "--port 30000", "--config %s" % SECRETS):
        assert words in exec_line, words
    # The side effect's steps=10 try rendered these; the final unit must not keep them.
    assert "--cuda-graph-max-bs" not in exec_line
    assert "SGLANG_SIM_ORPHANS" not in content
    assert "KillMode=control-group" in content
    assert "User=sglang" in content and "Restart=on-failure" in content
    settings = _settings(host)
    assert settings["speculative_num_steps"] == 3
    assert settings["speculative_num_draft_tokens"] == 4
    assert settings["max_running_requests_effective"] == 48


def test_api_key_only_in_the_config_file(host):
    unit = host.file(UNIT).content_string
    assert KEY not in unit and "--api-key" not in unit
    # the only EnvironmentFile is the install role's CUDA one (CUDA_HOME/PATH, no secret)
    assert [ln for ln in unit.splitlines() if ln.startswith("EnvironmentFile")] in (
        [], ["EnvironmentFile=-/etc/blackwell-sglang/cuda.env"])
    secrets = host.file(SECRETS)
    assert secrets.exists
    assert secrets.user == "root" and secrets.group == "sglang"
    assert secrets.mode == 0o640
    assert 'api-key: "%s"' % KEY in secrets.content_string
    assert host.file("/etc/sglang/qwen").mode == 0o750
    assert not host.file("/etc/sglang/qwen.env").exists


def test_record_names_the_serving_setting(host):
    record = json.loads(host.file(RECORD).content_string)
    assert record["setting"]["speculative_num_steps"] == 3
    assert record["setting"]["speculative_num_draft_tokens"] == 4
    assert record["provenance"]["by"] == "service"
    # The side effect's steps=10 never became ready, so it was never recorded.
    assert record["previous"]["setting"]["speculative_num_steps"] == 4
    assert host.file(RECORD).mode == 0o644


def test_previous_unit_kept_for_rollback(host):
    prev = host.file("/etc/sglang/sglang-qwen.service.prev")
    assert prev.exists
    assert prev.content_string != host.file(UNIT).content_string
    # No timestamped template backups left in systemd's unit directory.
    leftovers = host.run("ls /etc/systemd/system | grep -c 'sglang-qwen.service.*~' || true").stdout.strip()
    assert leftovers == "0"


def test_service_user(host):
    user = host.user("sglang")
    assert user.exists
    assert user.shell == "/usr/sbin/nologin"
    assert user.home == "/var/lib/sglang"
    assert user.uid < 1000  # a system account


def test_service_active_enabled_and_listening(host):
    svc = host.service("sglang-qwen")
    assert svc.is_running
    assert svc.is_enabled
    assert host.socket("tcp://127.0.0.1:30000").is_listening


def test_server_requires_the_key_and_generates(host):
    body = '{"text": "hi", "sampling_params": {"max_new_tokens": 2, "ignore_eos": true}}'
    py = ("import sys, urllib.request, urllib.error\n"
          "def go(h):\n"
          "    r = urllib.request.Request('http://127.0.0.1:30000/generate', data=sys.argv[1].encode(), headers=h)\n"
          "    try:\n"
          "        return urllib.request.urlopen(r, timeout=30).getcode()\n"
          "    except urllib.error.HTTPError as e:\n"
          "        return e.code\n"
          "print(go({'Content-Type': 'application/json'}),"
          " go({'Content-Type': 'application/json', 'Authorization': 'Bearer %s'}))\n" % KEY)
    out = host.run("python3 -c %s %s", py, body)
    assert out.rc == 0, out.stderr
    without, with_key = out.stdout.split()
    assert with_key == "200"
    assert without == "401"


def test_no_process_outside_the_unit_holds_a_gpu(host):
    holders = host.run("fuser /dev/nvidia* 2>/dev/null").stdout.split()
    pids = sorted({int(p.rstrip("cefFrm")) for p in holders if p.rstrip("cefFrm").isdigit()})
    assert pids, "the serving ranks should hold the devices"
    for pid in pids:
        cgroup = host.file("/proc/%d/cgroup" % pid).content_string
        assert "sglang-qwen.service" in cgroup, (pid, cgroup)


def test_gpu_reset_left_no_hold_behind(host):
    assert not host.file("/run/systemd/system/sglang-qwen.service.d").exists


def test_sim_install(host):
    assert host.file("/usr/local/bin/nvidia-smi").is_symlink
    cfg = json.loads(host.file("/etc/sglang-sim/config.json").content_string)
    assert cfg["profile"] == "rtx-pro-6000-x4"
    assert host.file("/run/sglang-sim").mode == 0o1777
    facts = json.loads(host.file("/etc/ansible/facts.d/sglang_install.fact").content_string)
    assert facts["gpu_count"] == 4
    assert facts["backend"] == "sim"
    assert all(g["compute_cap"] for g in facts["gpus"])


def test_main_pid_is_the_server_and_the_journal_never_has_the_key(host):
    main_pid = int(host.run("systemctl show -p MainPID --value sglang-qwen.service").stdout.strip())
    argv = host.file("/proc/%d/cmdline" % main_pid).content_string.split("\0")
    assert argv[1:3] == ["-m", "sglang_sim.launch_server"], argv  # the launcher exec'd the server
    # Its output filter: in the unit's cgroup, not a child of the server, no key in its argv.
    # The server's filter is the one reading the pipe the server writes to (a filter of an
    # earlier start lives on while orphans it served still hold that start's pipe).
    out_pipe = host.run("readlink /proc/%d/fd/1" % main_pid).stdout.strip()
    assert out_pipe.startswith("pipe:"), out_pipe
    filters = [pid for pid in host.run("pgrep -f sglang_launch_redacted.py.--filter").stdout.split()
               if out_pipe in host.run("readlink /proc/%s/fd/*" % pid).stdout.split()]
    assert len(filters) == 1, filters
    assert "sglang-qwen.service" in host.file("/proc/%s/cgroup" % filters[0]).content_string
    assert host.run("ps -o ppid= -p %s" % filters[0]).stdout.strip() != str(main_pid)
    journal = host.run("journalctl --no-pager -o cat -u sglang-qwen.service").stdout
    assert "server_args={" in journal and "'api_key': '<redacted>'" in journal
    assert KEY not in host.run("journalctl --no-pager -o cat").stdout
