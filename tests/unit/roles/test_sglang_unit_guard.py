"""Decisions of the unit's helper (roles/service/files/sglang_unit_guard.py): whose processes
a clean start may end, the back-off, the exit record and the watchdog's action."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[3] / "roles" / "service" / "files" / "sglang_unit_guard.py"
_spec = importlib.util.spec_from_file_location("sglang_unit_guard", str(PATH))
guard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guard)

UNIT = "sglang-qwen.service"
MINE = "/system.slice/sglang-qwen.service"


def _p(pid, argv, uid=999, cgroup=MINE):
    return {"pid": pid, "argv": argv, "cmdline": " ".join(argv), "uid": uid, "cgroup": cgroup}


@pytest.mark.parametrize("text,want", [
    ("0::/system.slice/sglang-qwen.service\n", MINE),
    ("12:cpu:/x\n1:name=systemd:/system.slice/a.service\n", "/system.slice/a.service"),
    ("", None),
    # Hybrid host: the unified entry is bare, systemd's v1 hierarchy names the unit.
    ("9:name=systemd:/system.slice/sglang-qwen.service\n0::/\n", MINE),
    ("9:name=systemd:/\n0::/system.slice/sglang-qwen.service\n", MINE),
    ("0::/\n", "/"),
])
def test_parse_cgroup(text, want):
    assert guard.parse_cgroup(text) == want


@pytest.mark.parametrize("path,want", [
    (MINE, UNIT),
    ("/system.slice/docker-ab.scope/system.slice/sglang-qwen.service", UNIT),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope", "run-1.scope"),
    ("/", None),
    (None, None),
])
def test_unit_of_cgroup(path, want):
    assert guard.unit_of_cgroup(path) == want


def test_own_leftovers_takes_the_units_cgroup_and_its_users_orphans_only():
    cands = [
        _p(10, ["sglang::scheduler_TP0"]),                                  # orphan in the cgroup
        _p(11, ["python3", "-m", "something"]),                             # anything in the cgroup
        _p(12, ["sglang::scheduler_TP0"], cgroup="/system.slice/sglang-other.service"),
        _p(13, ["sglang::scheduler_TP0"], uid=1000, cgroup=None),           # another user
        _p(14, ["sglang::detokenizer"], cgroup=None),                       # unit user, no unit
        _p(15, ["python3", "train.py"], cgroup=None),                       # unit user, not SGLang
        _p(16, ["sglang::scheduler"], cgroup="/user.slice/user-999.slice/session-3.scope"),
        _p(17, ["python3", "sglang_unit_guard.py"]),                        # the helper itself
    ]
    own, spared = guard.own_leftovers(cands, UNIT, 999, protected=[17, 1])
    assert sorted(p["pid"] for p in own) == [10, 11, 14]
    why = dict((p["pid"], p["why"]) for p in spared)
    assert why[12] == "belongs to sglang-other.service"
    assert why[16] == "belongs to session-3.scope"
    assert why[13] == why[15] == "not the unit's"
    assert why[17] == "this helper"


@pytest.mark.parametrize("n,want", [(0, 0), (1, 0), (2, 10), (3, 20), (4, 40), (5, 80), (6, 120), (30, 120)])
def test_backoff_doubles_up_to_the_cap(n, want):
    assert guard.backoff_delay(n, 10, 120) == want


def test_brake_refuses_systemds_restart_after_failed_starts_in_a_row(monkeypatch, tmp_path, capsys):
    import argparse
    import json as _json
    (tmp_path / "status.json").write_text(_json.dumps(
        {"consecutive_failures": 3, "last_failure": {"class": "oom_weights", "line": OOM}}))
    monkeypatch.setattr(guard, "_systemctl_show", lambda unit, props: {"NRestarts": "3"})
    monkeypatch.setattr(guard.time, "sleep", lambda s: None)
    args = argparse.Namespace(unit="sglang-qwen.service", state_dir=str(tmp_path), backoff_base=2,
                              backoff_max=4, max_failures=3)
    assert guard._backoff(args) == guard.BRAKE_EXIT
    said = capsys.readouterr()
    assert "crash-loop brake: 3 failed start(s) in a row (last: oom_weights" in said.out + said.err
    # below the limit it backs off and starts; a start by hand (NRestarts 0) always starts
    args.max_failures = 4
    assert guard._backoff(args) == 0
    args.max_failures = 3
    monkeypatch.setattr(guard, "_systemctl_show", lambda unit, props: {"NRestarts": "0"})
    assert guard._backoff(args) == 0
    # the refused run is no new failure on record
    brake = "sglang-clean-start: crash-loop brake: 3 failed start(s) in a row (last: oom_weights)"
    prev = {"consecutive_failures": 3, "last_failure": {"class": "oom_weights", "line": OOM}}
    s = guard.next_status(prev, "exit-code", "exited", "75", [brake], 4, "t")
    assert not s["failed"] and s["braked"] and s["consecutive_failures"] == 3
    assert s["last_failure"]["class"] == "oom_weights"


def test_backoff_off():
    assert guard.backoff_delay(9, 10, 0) == 0 and guard.backoff_delay(9, 0, 60) == 0


OOM = "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.8"
READY = "[2026-01-01 00:00:00] The server is fired up and ready to roll!"


def test_next_status_counts_failed_starts_and_classifies():
    s1 = guard.next_status(None, "exit-code", "exited", "1", ["x", OOM], 0, "t1")
    assert s1["failed"] and s1["consecutive_failures"] == 1
    assert s1["last_failure"]["class"] == "oom_weights" and s1["last_failure"]["line"] == OOM
    s2 = guard.next_status(s1, "exit-code", "exited", "1", [OOM], 1, "t2")
    assert s2["consecutive_failures"] == 2 and s2["restarts"] == 1
    # A run that served and then crashed starts a new series.
    s3 = guard.next_status(s2, "signal", "killed", "KILL", [READY], 2, "t3")
    assert s3["consecutive_failures"] == 1 and s3["ready_seen"]
    # Killed from outside with no error of SGLang's own: named as such, with where to look.
    assert s3["last_failure"]["class"] == "killed"
    assert s3["last_failure"]["line"] == "the main process was killed by signal KILL"
    assert "OOM killer" in s3["last_failure"]["hint"]
    # A clean stop is no failure and keeps the last failure for the record.
    s4 = guard.next_status(s3, "success", "exited", "0", [READY], 2, "t4")
    assert not s4["failed"] and s4["consecutive_failures"] == 0
    assert s4["last_failure"]["time"] == "t3"
    # A start by hand (NRestarts back to 0) after a braked series starts a new one.
    s5 = guard.next_status(dict(s2, consecutive_failures=3), "signal", "killed", "KILL", [OOM], 0, "t5")
    assert s5["consecutive_failures"] == 1


def test_next_status_quotes_the_clean_start_when_sglang_said_nothing():
    line = "sglang-clean-start: GPU memory of sglang-qwen.service's leftovers still held after 60s: 7"
    s = guard.next_status(None, "exit-code", "exited", "1", [line], 0, "t")
    assert s["last_failure"]["line"] == line


def test_next_status_a_stop_during_the_back_off_is_no_new_failure():
    s1 = guard.next_status(None, "exit-code", "exited", "1", ["x", OOM], 0, "t1")
    wait = "sglang-clean-start: 1 failed start(s) in a row (last: oom_weights): backing off 2s"
    s2 = guard.next_status(s1, "signal", "killed", "TERM", [wait], 1, "t2")
    assert not s2["failed"] and s2["interrupted_backoff"]
    assert s2["last_failure"] == s1["last_failure"] and s2["consecutive_failures"] == 1
    # the clean start itself failing (memory still held) is a failure, quoted
    held = "sglang-clean-start: GPU memory of sglang-qwen.service's leftovers still held after 60s: 7"
    s3 = guard.next_status(s1, "exit-code", "exited", "1", [wait, held], 1, "t3")
    assert s3["failed"] and s3["last_failure"]["line"] == held


def test_next_status_keeps_sglangs_own_line_over_the_signal():
    s = guard.next_status(None, "signal", "killed", "ABRT", ["x", OOM], 0, "t")
    assert s["last_failure"]["class"] == "oom_weights" and s["last_failure"]["line"] == OOM
    s = guard.next_status(None, "exit-code", "exited", "1", ["x"], 0, "t")
    assert s["last_failure"]["class"] == "unknown"


@pytest.mark.parametrize("active,ready,health,tokens,history,want", [
    (False, False, False, 0, [], "none"),
    (True, False, False, 0, [], "none"),          # loading: systemd's business
    (True, True, True, 4, [], "none"),
    (True, True, True, 0, [], "restart"),         # wedged
    (True, True, False, 0, [], "restart"),
    (True, True, True, 0, [950.0, 960.0], "restart"),
    (True, True, True, 0, [950.0, 960.0, 990.0], "stop"),   # flapping
    (True, True, True, 0, [100.0, 200.0, 990.0], "restart"),  # old restarts left the window
    (True, True, True, -401, [950.0, 960.0, 990.0], "none"),  # refused: it answered, no wedge
])
def test_watchdog_decision(active, ready, health, tokens, history, want):
    action, reason = guard.watchdog_decision(active, ready, health, tokens, history, 1000.0, 3, 600)
    assert action == want, reason
    if tokens < 0:
        assert reason == "answered HTTP 401: not a wedge"


def test_read_api_key(tmp_path):
    f = tmp_path / "secrets.yaml"
    f.write_text('# managed\napi-key: "a \\"quoted\\" #key"\n')
    assert guard.read_api_key(str(f)) == 'a "quoted" #key'
    assert guard.read_api_key(str(tmp_path / "none")) == ""


def test_write_json_is_atomic_and_readable(tmp_path):
    path = tmp_path / "status.json"
    guard.write_json(str(path), {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_clean_start_ends_its_users_orphaned_ranks_only(tmp_path):
    """End to end on this machine, outside systemd: an orphaned 'sglang::' process of this
    user is ended, another process is not, and one line says what was ended."""
    # A title of its own: other SGLang processes of this user on the machine are not this test's.
    title = "sglang::test-%d-TP0" % os.getpid()
    orphan = subprocess.Popen([title, "-c", "import time; time.sleep(60)"],
                              executable=sys.executable)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        env = dict(os.environ, PATH="/nonexistent")  # no fuser, no nvidia-smi: /proc fallback
        # The test runner's own cgroup is some other unit or none; give the helper a unit that
        # matches neither so the title rule is what is exercised.
        res = subprocess.run([sys.executable, str(PATH), "clean-start", "--unit", "none.service",
                              "--state-dir", str(tmp_path), "--grace", "2", "--wait", "5",
                              "--dev-dir", str(tmp_path / "dev"), "--title-prefix", title],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=30, check=False)
        out = res.stdout.decode()
        mine = guard.unit_of_cgroup(guard.parse_cgroup(open("/proc/self/cgroup").read()))
        if mine is not None:
            assert "not running inside none.service" in out
            assert orphan.poll() is None
            pytest.skip("this test runner is inside %s; the title rule needs a process outside any unit" % mine)
        assert res.returncode == 0, out
        time.sleep(0.2)
        assert orphan.poll() is not None
        assert bystander.poll() is None
        assert "ended 1 leftover process(es) of none.service: %d %s" % (orphan.pid, title) in out
    finally:
        for p in (orphan, bystander):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_watchdog_leaves_a_server_that_refuses_the_probe(monkeypatch, tmp_path):
    """A 401 (the unit's key changed under a running server) is an answer, not a wedge: a restart
    would start the old unit on the new files."""
    import argparse
    monkeypatch.setattr(guard, "_systemctl_show", lambda unit, props: {"ActiveState": "active", "InvocationID": "i1"})
    monkeypatch.setattr(guard, "_journal_lines", lambda inv: [READY])
    monkeypatch.setattr(guard, "probe_tokens", lambda *a: (True, -401))
    monkeypatch.setattr(guard, "read_api_key", lambda path: "k")

    def no_systemctl(*a, **k):
        raise AssertionError("the watchdog acted on a refusal")
    monkeypatch.setattr(guard.subprocess, "run", no_systemctl)
    args = argparse.Namespace(unit="sglang-qwen.service", state_dir=str(tmp_path), url="http://127.0.0.1:1",
                              config="", tokens=4, deadline=1.0, max_restarts=2, window=600.0)
    assert guard.cmd_watchdog(args) == 0
    import json as _json
    state = _json.loads((tmp_path / guard.WATCHDOG_FILE).read_text())
    assert state["last_result"] == "answered HTTP 401: not a wedge" and not state.get("actions")


def test_next_status_a_stop_during_the_clean_start_is_no_new_failure():
    # systemctl stop on a crash-looping unit while its next try is still in the clean start:
    # the start ends by the signal, no main process ever ran (EXIT_CODE empty), nothing of
    # SGLang's in the journal. The record keeps the real failure (seen in molecule realpkg, where
    # this run had overwritten no_gpu with "killed").
    s1 = guard.next_status(None, "exit-code", "exited", "1", ["x", OOM], 0, "t1")
    for own in ([], ["sglang-clean-start: nothing of sglang-qwen.service left on the GPUs"]):
        s2 = guard.next_status(s1, "signal", "", "", own, 1, "t2")
        assert not s2["failed"] and s2["stopped_before_start"]
        assert s2["consecutive_failures"] == 1 and s2["last_failure"]["class"] == "oom_weights"
    # a main process killed from outside still is a failure, named "killed"
    s3 = guard.next_status(s1, "signal", "killed", "KILL", [], 1, "t3")
    assert s3["failed"] and s3["last_failure"]["class"] == "killed"
    # the clean start failing by itself (exit code, its own line) still is a failure
    line = "sglang-clean-start: GPU memory of sglang-qwen.service's leftovers still held after 60s: 7"
    s4 = guard.next_status(s1, "exit-code", "", "", [line], 1, "t4")
    assert s4["failed"] and s4["last_failure"]["line"] == line
