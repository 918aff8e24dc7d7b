"""The node after the production scenario: steps=4 serving under a unit with the clean start,
the crash-loop brake and the wedge watchdog; the unit's own records in place; the API key in
none of the units, process command lines or environments, the journal or the records."""

import json

UNIT = "/etc/systemd/system/sglang-qwen.service"
WATCHDOG = "/etc/systemd/system/sglang-qwen-watchdog"
STATUS = "/var/lib/blackwell-sglang/qwen"
KEY = "molecule-production-key-not-secret"


def test_unit_has_the_brake_the_clean_start_and_the_exit_record(host):
    text = host.file(UNIT).content_string
    assert "StartLimitIntervalSec=300" in text and "StartLimitBurst=3" in text
    pre = [line for line in text.splitlines() if line.startswith("ExecStartPre=")]
    assert len(pre) == 1 and " clean-start " in pre[0] and "--no-clean" not in pre[0]
    assert " --shm-dir /dev/shm" in pre[0]
    assert [line for line in text.splitlines() if line.startswith("ExecStopPost=+")]
    assert "KillMode=process" in text


def test_watchdog_timer_runs(host):
    assert host.service("sglang-qwen-watchdog.timer").is_running
    assert host.service("sglang-qwen-watchdog.timer").is_enabled
    text = host.file(WATCHDOG + ".service").content_string
    assert "--config /etc/sglang/qwen/secrets.yaml" in text and "--url http://127.0.0.1:30000" in text


def test_serving_and_checked_by_the_watchdog(host):
    assert host.service("sglang-qwen").is_running
    out = host.run("python3 -c %s", "import json;print(json.load(open('%s/watchdog.json'))['last_result'])"
                   % STATUS)
    assert out.rc == 0, out.stderr


def test_records_are_root_owned_and_readable(host):
    for name in ("status.json", "watchdog.json"):
        f = host.file("%s/%s" % (STATUS, name))
        assert f.exists and f.user == "root" and f.mode == 0o644
        json.loads(f.content_string)
    status = json.loads(host.file(STATUS + "/status.json").content_string)
    # The brake's failure stays on record after the way back to steps=4 (written when a run ends).
    assert status["last_failure"]["class"] == "oom_weights"
    assert status["consecutive_failures"] == 3


def test_helper_and_its_code_installed(host):
    for name in ("sglang_unit_guard.py", "module_utils/procs.py", "module_utils/nvidia.py",
                 "module_utils/journal.py"):
        f = host.file("/usr/local/libexec/blackwell-sglang/" + name)
        assert f.exists and f.user == "root" and f.mode == 0o644


def test_the_key_is_nowhere_but_its_file(host):
    for path in (UNIT, WATCHDOG + ".service", WATCHDOG + ".timer", STATUS + "/status.json",
                 STATUS + "/watchdog.json"):
        assert KEY not in host.file(path).content_string, path
    # Every process's argv and environment (root reads them all).
    # The key is read from its file on the node, so the scanner's own argv does not hold it.
    scan = ("import glob, json\n"
            "key = [json.loads(l.split(':', 1)[1]) for l in open('/etc/sglang/qwen/secrets.yaml')"
            " if l.startswith('api-key:')][0].encode()\n"
            "hits = []\n"
            "for p in glob.glob('/proc/[0-9]*/cmdline') + glob.glob('/proc/[0-9]*/environ'):\n"
            "    try:\n"
            "        if key in open(p, 'rb').read():\n"
            "            hits.append(p)\n"
            "    except OSError:\n"
            "        pass\n"
            "print(len(key), hits)\n")
    out = host.run("python3 -c %s", scan)
    assert out.rc == 0, out.stderr
    assert out.stdout.strip() == "%d []" % len(KEY), out.stdout
    assert KEY not in host.run("journalctl --no-pager -o cat").stdout
    assert KEY in host.file("/etc/sglang/qwen/secrets.yaml").content_string
