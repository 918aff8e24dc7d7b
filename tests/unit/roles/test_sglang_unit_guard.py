"""Decisions of the unit's helper (roles/service/files/sglang_unit_guard.py): whose processes
a clean start may end, the back-off, the exit record and the watchdog's action."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
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


# ----------------------------------------------------------------------------- /dev/shm sweep

@pytest.mark.parametrize("name,pid", [
    ("sgl_shm_mq_4242_0a1b2c3d", 4242),              # stale_shm_cleanup.py make_shm_name("mq")
    ("sgl_shm_nodecheck_77_deadbeef", 77),
    ("sgl_shm_mm_0_deadbeef", None),                  # pid 0 is a process group, not a process
    ("sgl_shm_mq_x_deadbeef", None),
    ("multi_tokenizer_args_991", 991),
    ("sglang_loads_0123456789ab_1a2b3c4d.shm", None),
    ("nccl-AbC123", None),
    ("psm_1234", None),
])
def test_shm_creator_pid_reads_the_releases_stamp(name, pid):
    assert guard.shm_creator_pid(name) == pid


@pytest.mark.parametrize("name,family", [
    ("sgl_shm_mq_4242_0a1b2c3d", "sgl_shm_mq_*"),
    ("multi_tokenizer_args_991", "multi_tokenizer_args_*"),
    ("sglang_loads_0123456789ab_1a2b3c4d.shm", "sglang_loads_*"),
    ("cuda.shm.0x3e8.0x1f2.0", "cuda.shm.*"),
    ("nccl-AbC123", "nccl-*"),
    ("sem.loky-12-abcdef01", "sem.loky-*"),
    ("psm_1234", None),
    ("torch_12_34", None),
    ("sem.mp-x", None),
])
def test_shm_family(name, family):
    assert guard.shm_family(name) == family


def test_parse_maps_inodes_keeps_device_inode_and_path():
    text = ("7f00-7f01 rw-s 00000000 00:1a 4711                       /dev/shm/nccl-AbC123 (deleted)\n"
            "7f01-7f02 r-xp 00000000 fd:01 99                         /usr/lib/libc.so.6\n"
            "7f02-7f03 rw-p 00000000 00:00 0                          [heap]\n")
    keys = guard.parse_maps_inodes(text)
    assert (0, 0x1a, 4711) in keys and ("path", "/dev/shm/nccl-AbC123") in keys
    assert (0xfd, 1, 99) in keys and not any(k[-1] == 0 for k in keys if k[0] != "path")


def _seg(name, uid=999, mode=0o600, mtime=1000.0, ino=None):
    ino = ino if ino is not None else abs(hash(name)) % 100000 + 1
    return {"name": name, "uid": uid, "regular": True, "mode": mode, "size": 4096, "blocks": 8,
            "mtime": mtime, "keys": [(0, 26, ino), ("path", "/dev/shm/" + name)]}


def _proc(pid, uids=(999,), start=500.0, readable=True, keys=()):
    return {"pid": pid, "uids": set(uids), "start": start, "readable": readable, "keys": set(keys)}


def test_shm_sweep_plan_rules():
    segs = [
        _seg("sgl_shm_mq_100_aaaaaaaa"),                    # creator 100 gone
        _seg("sgl_shm_mq_200_bbbbbbbb"),                    # creator 200 alive (started before)
        _seg("sgl_shm_mq_300_cccccccc"),                    # pid 300 reused: started after the write
        _seg("nccl-AbC123", ino=7),                         # mapped by pid 200
        _seg("sglang_loads_0123456789ab_1a2b3c4d.shm"),     # nobody has it
        _seg("cuda.shm.0x1.0x2", uid=1000),                 # another user's: never
        _seg("psm_1234"),                                   # not SGLang's family
    ]
    procs_seen = [_proc(200, keys=[(0, 26, 7)]), _proc(300, start=1000.0 + guard.SHM_CLOCK_SLACK + 5),
                  _proc(1, uids=(0,), readable=False)]      # root, unreadable: not counted
    remove, keep = guard.shm_sweep_plan(segs, 999, procs_seen)
    gone = dict((i["name"], i["why"]) for i in remove)
    kept = dict((i["name"], i["why"]) for i in keep)
    assert gone == {"sgl_shm_mq_100_aaaaaaaa": "its creator 100 is gone",
                    "sgl_shm_mq_300_cccccccc": "pid 300 was reused",
                    "sglang_loads_0123456789ab_1a2b3c4d.shm": "no process uses it"}
    assert kept == {"sgl_shm_mq_200_bbbbbbbb": "its creator 200 is alive",
                    "nccl-AbC123": "in use by pid 200"}


def test_shm_sweep_plan_a_reused_pid_within_the_clock_slack_counts_as_the_creator():
    remove, keep = guard.shm_sweep_plan([_seg("sgl_shm_mq_300_cccccccc", mtime=1000.0)], 999,
                                        [_proc(300, start=1000.0 + guard.SHM_CLOCK_SLACK - 0.5)])
    assert not remove and keep[0]["why"] == "its creator 300 is alive"


def test_shm_sweep_plan_an_unreadable_process_of_the_user_keeps_what_it_could_map():
    segs = [_seg("nccl-AbC123"), _seg("sgl_shm_mq_100_aaaaaaaa"),
            _seg("sem.loky-5-x", mode=0o644)]
    # The service user's own process whose /proc cannot be read (not dumpable): it could have
    # any of the user's segments.
    remove, keep = guard.shm_sweep_plan(segs, 999, [_proc(50, uids=(0, 999, 999, 999), readable=False)])
    assert not remove and all(k["why"] == "unreadable pid 50 could use it" for k in keep)
    line = guard.shm_sweep_line(remove, keep, "/dev/shm", "sglang")
    assert line.endswith("removed 0 leaked shared-memory segment(s) of sglang from /dev/shm, 0.0 KiB freed "
                         "(0.0 KiB in size); kept 3 that unreadable pid 50 could use them"), line
    # Another user's unreadable process could open only what lets group or others in.
    remove, keep = guard.shm_sweep_plan(segs, 999, [_proc(60, uids=(1000,), readable=False)])
    assert sorted(i["name"] for i in remove) == ["nccl-AbC123", "sgl_shm_mq_100_aaaaaaaa"]
    assert [k["name"] for k in keep] == ["sem.loky-5-x"]


def test_shm_sweep_line_says_what_went_and_how_much():
    removed = [_seg("nccl-AbC123"), _seg("nccl-XyZ789"), _seg("sgl_shm_mq_100_aaaaaaaa")]
    line = guard.shm_sweep_line(removed, [], "/dev/shm", "sglang")
    assert line == ("sglang-clean-start: removed 3 leaked shared-memory segment(s) of sglang from "
                    "/dev/shm, 12.0 KiB freed (12.0 KiB in size): nccl-* 2, sgl_shm_mq_* 1; "
                    "nccl-AbC123 nccl-XyZ789 sgl_shm_mq_100_aaaaaaaa")
    assert guard.shm_sweep_line([], [dict(_seg("nccl-A"), why="in use by pid 3")], "/dev/shm", "u") is None


_HOLDER = """
import mmap, os, sys, time
fds = []
for path in sys.argv[2:]:
    fd = os.open(path, os.O_RDWR)
    if sys.argv[1] == "map":
        fds.append(mmap.mmap(fd, 4096))
        os.close(fd)
    else:
        fds.append(fd)
sys.stdout.write("ready\\n"); sys.stdout.flush()
time.sleep(60)
"""

_SWEEP = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("g", sys.argv[1])
g = importlib.util.module_from_spec(spec)
spec.loader.exec_module(g)
print(g.sweep_shm(sys.argv[2], os.geteuid(), "me"))
"""


@pytest.fixture
def shm_as_user(tmp_path):
    """(a fresh sticky tmpfs dir standing in for /dev/shm, Popen kwargs). The service user is
    never root: run as root, the segments, their holders and the sweep run as nobody; a root
    process the sweep cannot read is not counted, as on a node."""
    kwargs = {"user": 65534, "group": 65534} if os.geteuid() == 0 else {}
    python = sys.executable
    if kwargs:
        # The test's interpreter may sit where nobody cannot reach it (a root-only venv).
        python = next((p for p in (sys.executable, "/usr/bin/python3") if _runs_as(p, kwargs)), None)
        if python is None:
            pytest.skip("run as root, and no Python the nobody user may run")
    kwargs["python"] = python
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else str(tmp_path)
    shm = Path(tempfile.mkdtemp(prefix="guard-test-", dir=base))
    os.chmod(str(shm), 0o1777)
    try:
        yield shm, kwargs
    finally:
        shutil.rmtree(str(shm), ignore_errors=True)


def _runs_as(python, kwargs):
    try:
        return subprocess.run([python, "-c", "pass"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              check=False, **kwargs).returncode == 0
    except OSError:
        return False


def _segment(shm, name, kwargs, size=4096):
    path = shm / name
    path.write_bytes(b"\1" * size)
    os.chmod(str(path), 0o600)
    if "user" in kwargs:
        os.chown(str(path), kwargs["user"], kwargs["group"])
    return path


def _holder(how, paths, kwargs):
    kwargs = dict(kwargs)
    proc = subprocess.Popen([kwargs.pop("python"), "-c", _HOLDER, how] + [str(p) for p in paths],
                            stdout=subprocess.PIPE, **kwargs)
    assert proc.stdout.readline() == b"ready\n"
    return proc


def _sweep(shm, kwargs):
    kwargs = dict(kwargs)
    res = subprocess.run([kwargs.pop("python"), "-c", _SWEEP, str(PATH), str(shm)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=60, check=False, **kwargs)
    assert res.returncode == 0, res.stdout.decode()
    return res.stdout.decode().strip()


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweep_shm_removes_leaks_and_keeps_what_live_processes_map_or_hold(shm_as_user):
    """Real processes: one maps a segment, one holds another open; the sweep removes the rest
    of the families, leaves foreign names and (run as root) another user's segment alone."""
    shm, kwargs = shm_as_user
    dead = _dead_pid()
    live = _holder("open", [], kwargs)  # a live creator pid of the same user
    mine = ["sgl_shm_mq_%d_1a1b2c3d" % live.pid, "nccl-Mapped", "nccl-Opened", "psm_1234"]
    gone = ["sgl_shm_mq_%d_0a1b2c3d" % dead, "sglang_loads_0123456789ab_1a2b3c4d.shm",
            "cuda.shm.0x0.0x1.0", "sem.loky-%d-abcdef01" % dead]
    for name in mine + gone:
        _segment(shm, name, kwargs)
    foreign = []
    if "user" in kwargs:
        foreign = ["nccl-Foreign"]
        (shm / "nccl-Foreign").write_bytes(b"\1" * 4096)  # root's: another user's
    mapper = _holder("map", [shm / "nccl-Mapped"], kwargs)
    opener = _holder("open", [shm / "nccl-Opened"], kwargs)
    try:
        line = _sweep(shm, kwargs)
        assert sorted(p.name for p in shm.iterdir()) == sorted(mine + foreign), line
        assert line.startswith("sglang-clean-start: removed 4 leaked shared-memory segment(s) of me from %s, "
                               "16.0 KiB freed (16.0 KiB in size): " % shm), line
        for fam in ("cuda.shm.* 1", "sem.loky-* 1", "sgl_shm_mq_* 1", "sglang_loads_* 1"):
            assert fam in line, line
    finally:
        for p in (mapper, opener):
            p.kill()
            p.wait()
    # Once nobody maps or holds them, the next sweep takes them too; the live creator's stays.
    line = _sweep(shm, kwargs)
    live.kill()
    live.wait()
    assert sorted(p.name for p in shm.iterdir()) == sorted(mine[:1] + ["psm_1234"] + foreign), line
    assert ": nccl-* 2;" in line, line


def test_clean_start_sweeps_the_shm_dir(tmp_path, shm_as_user):
    """The command line: clean-start --shm-dir sweeps and says so in one line."""
    shm, kwargs = shm_as_user
    leak = _segment(shm, "sgl_shm_mq_%d_0a1b2c3d" % _dead_pid(), kwargs, size=8192)
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(str(tmp_path), 0o755)
    os.chmod(str(state), 0o777)
    env = dict(os.environ, PATH="/nonexistent")
    mine = guard.unit_of_cgroup(guard.parse_cgroup(open("/proc/self/cgroup").read()))
    kwargs = dict(kwargs)
    res = subprocess.run([kwargs.pop("python"), str(PATH), "clean-start", "--unit", mine or "none.service",
                          "--state-dir", str(state), "--grace", "1", "--wait", "1",
                          "--dev-dir", str(tmp_path / "dev"), "--title-prefix", "sglang::none-%d" % os.getpid(),
                          "--shm-dir", str(shm)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=30, check=False,
                         **kwargs)
    out = res.stdout.decode()
    assert res.returncode == 0, out
    assert not leak.exists(), out
    assert [line for line in out.splitlines() if "removed 1 leaked shared-memory segment(s)" in line
            and "sgl_shm_mq_* 1" in line and "8.0 KiB freed" in line], out
