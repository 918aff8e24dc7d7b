"""gpu_free's procedure on a fake /proc: signals go to a fake kill() that edits the fake tree,
the clock is simulated, nvidia-smi and fuser are stand-ins. Nothing real is ever signalled."""

import json
import os
import signal

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.blackwell.sglang.plugins.module_utils import nvidia
from ansible_collections.blackwell.sglang.plugins.modules import gpu_free

SELF = 900  # the module's pid in the fake tree; 899 is its parent (ansible's shell)


def write_proc(root, pid, argv, ppid=1, uid=0, state="S", starttime=1000):
    base = root / str(pid)
    (base / "fd").mkdir(parents=True, exist_ok=True)
    comm = os.path.basename(argv[0])[:15]
    rest = [state, str(ppid)] + ["0"] * 17 + [str(starttime)] + ["0"] * 20
    (base / "stat").write_text("%d (%s) %s\n" % (pid, comm, " ".join(rest)))
    (base / "status").write_text("Uid:\t%d\t%d\t%d\t%d\n" % (uid, uid, uid, uid))
    (base / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))


class FakeNode:
    """Processes, device holders and GPU memory that react to signals like a driver does:
    a process that dies frees its memory and its device files."""

    def __init__(self, root):
        self.root = root
        self.now = 0.0
        self.sent = []
        self.ignores_term = set()
        self.unkillable = set()
        self.foreign = set()  # owned by another user, and we are not root
        self.memory = {}  # pid -> (gpu index, MiB)
        self.devices = {}  # pid -> [device paths]
        self.comms = {}  # pid -> comm as fuser shows it
        self.fuser_kills = []
        write_proc(root, 1, ["/sbin/init"], ppid=0)
        write_proc(root, 899, ["/bin/sh", "-c", "python3 AnsiballZ_gpu_free.py"], ppid=1)
        write_proc(root, SELF, ["/usr/bin/python3", "AnsiballZ_gpu_free.py"], ppid=899)

    def spawn(self, pid, argv, gpu=None, mib=0, devices=(), uid=0, ppid=1):
        write_proc(self.root, pid, argv, ppid=ppid, uid=uid)
        self.comms[pid] = os.path.basename(argv[0])[:15]
        if gpu is not None:
            self.memory[pid] = (gpu, mib)
        if devices:
            self.devices[pid] = list(devices)

    def alive(self, pid):
        return (self.root / str(pid)).exists()

    def die(self, pid):
        # become a zombie (exited, not reaped): /proc entry stays, state Z
        stat = (self.root / str(pid) / "stat").read_text().split(") ", 1)
        (self.root / str(pid) / "stat").write_text(stat[0] + ") Z" + stat[1][1:])
        self.memory.pop(pid, None)
        self.devices.pop(pid, None)

    def kill(self, pid, sig):
        if pid in self.foreign:
            raise PermissionError(1, "Operation not permitted")
        self.sent.append((pid, sig))
        if pid in self.unkillable:
            return
        if sig == signal.SIGTERM and pid in self.ignores_term:
            return
        self.die(pid)

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += max(seconds, 0.01)

    def query(self):
        used = {0: 0, 1: 0}
        for gpu, mib in self.memory.values():
            used[gpu] += mib
        gpus = [{"index": i, "uuid": "GPU-%d" % i, "memory_used_mib": used[i], "memory_total_mib": 97887}
                for i in (0, 1)]
        apps = [{"pid": pid, "process_name": "python3", "used_memory_mib": mib, "gpu_uuid": "GPU-%d" % gpu,
                 "gpu_index": gpu} for pid, (gpu, mib) in sorted(self.memory.items())]
        return {"gpus": gpus, "compute_apps": apps}

    def holders(self):
        return [{"pid": pid, "user": "root", "command": self.comms.get(pid, "python3"), "access": "F",
                 "devices": devs} for pid, devs in sorted(self.devices.items())]

    def fuser_kill_all(self, signame):
        self.fuser_kills.append(signame)
        for pid in list(self.devices):
            self.kill(pid, signal.SIGTERM if signame == "TERM" else signal.SIGKILL)


PARAMS = {
    "patterns": list(gpu_free.procs.DEFAULT_SGLANG_PATTERNS), "grace_period": 10.0, "fuser_kill": False,
    "devices": ["/dev/nvidia*"], "only_pids": None, "exclude_pids": [], "exclude_users": [],
    "ignore_holders": list(gpu_free.procs.DEFAULT_IGNORED_HOLDERS),
    "nvidia_smi": "nvidia-smi", "idle_memory_mib": 0, "wait": True, "timeout": 60.0, "poll_interval": 0.5,
}


@pytest.fixture
def node(tmp_path):
    root = tmp_path / "proc"
    root.mkdir()
    return FakeNode(root)


def freer(node, check_mode=False, query=True, **overrides):
    params = dict(PARAMS, **overrides)
    warnings = []
    f = gpu_free.GpuFreer(params, check_mode, warnings.append, node.query if query else None, node.holders,
                          node.fuser_kill_all, proc_root=str(node.root), kill=node.kill, clock=node.clock,
                          sleep=node.sleep, self_pid=SELF)
    f.warnings = warnings
    return f


def crashed_tp2(node):
    """What a crashed `--tp-size 2` server leaves: two schedulers and a detokenizer, reparented to 1."""
    node.spawn(301, ["sglang::scheduler_TP0"], gpu=0, mib=90000, devices=["/dev/nvidia0", "/dev/nvidiactl"])
    node.spawn(302, ["sglang::scheduler_TP1"], gpu=1, mib=90000, devices=["/dev/nvidia1", "/dev/nvidiactl"])
    node.spawn(303, ["sglang::detokenizer"])
    node.spawn(400, ["/usr/bin/vim", "sglang.md"])  # matches nothing: "sglang.md" is not a pattern


def test_orphans_are_termed_and_memory_waited_for(node):
    crashed_tp2(node)
    ok, result, msg = freer(node).run()
    assert ok, msg
    assert result["changed"] is True
    assert [(k["pid"], k["signal"], k["via"], k["pattern"], k["exited"]) for k in result["killed"]] == [
        (301, "TERM", "pattern", "sglang::", True), (302, "TERM", "pattern", "sglang::", True),
        (303, "TERM", "pattern", "sglang::", True)]
    assert result["killed"][0]["cmdline"] == "sglang::scheduler_TP0"
    assert [g["memory_used_mib"] for g in result["memory_before"]] == [90000, 90000]
    assert [g["memory_used_mib"] for g in result["memory_after"]] == [0, 0]
    assert result["survivors"] == []
    assert result["seconds_to_free"] is not None and result["seconds_to_free"] < 1
    assert node.alive(400) and not any(pid == 400 for pid, _sig in node.sent)
    assert not any(pid in (1, 899, SELF) for pid, _sig in node.sent)


def test_second_run_is_idempotent(node):
    crashed_tp2(node)
    assert freer(node).run()[1]["changed"] is True
    sent = len(node.sent)
    ok, result, msg = freer(node).run()
    assert ok and result["changed"] is False and result["killed"] == []
    assert result["seconds_to_free"] is None
    assert len(node.sent) == sent


def test_term_ignored_then_kill_after_grace(node):
    crashed_tp2(node)
    node.ignores_term.add(302)
    ok, result, msg = freer(node, grace_period=3.0).run()
    assert ok, msg
    signals = dict((k["pid"], k["signal"]) for k in result["killed"])
    assert signals == {301: "TERM", 302: "KILL", 303: "TERM"}
    assert (302, signal.SIGKILL) in node.sent
    assert result["seconds_to_free"] >= 3.0


def test_unkillable_times_out_with_a_clear_message(node):
    crashed_tp2(node)
    node.unkillable.add(301)
    ok, result, msg = freer(node, grace_period=1.0, timeout=5.0).run()
    assert not ok
    assert result["survivors"] == [301]
    assert "GPU 0 uses 90000 MiB (idle_memory_mib is 0), compute apps: 301 python3 90000 MiB" in msg
    assert "pid 301" in msg and "/dev/nvidia0" in msg
    assert "survived SIGKILL" in msg
    assert "set fuser_kill: true" in msg
    assert result["seconds_waited"] >= 5.0


def test_check_mode_signals_nothing(node):
    crashed_tp2(node)
    ok, result, msg = freer(node, check_mode=True).run()
    assert ok and result["changed"] is True
    assert sorted(w["pid"] for w in result["would_kill"]) == [301, 302, 303]
    assert result["killed"] == [] and node.sent == []


def test_only_pids_limits_everything(node):
    crashed_tp2(node)
    node.spawn(500, ["/usr/bin/python3", "train.py"], gpu=0, mib=1000, devices=["/dev/nvidia0"])
    ok, result, msg = freer(node, only_pids=[301, 500], fuser_kill=True, timeout=2.0).run()
    assert sorted(pid for pid, _sig in node.sent) == [301, 500]
    assert node.fuser_kills == []  # restricted: never a bare fuser -k
    assert sorted((k["pid"], k["via"]) for k in result["killed"]) == [(301, "pattern"), (500, "fuser")]
    spared = dict((s["pid"], s["reason"]) for s in result["spared"])
    assert spared[302] == "not in only_pids"
    # 302 still holds its GPU: the wait must fail and name it
    assert not ok and "pid 302" in msg


def test_exclusions_and_protected_ancestors(node):
    crashed_tp2(node)
    node.spawn(600, ["sglang::scheduler_TP0"], uid=os.getuid() + 12345)  # a user we exclude by name
    # the module's own parent matches a pattern: it must never be signalled
    write_proc(node.root, 899, ["/bin/sh", "-c", "python3 -m sglang.launch_server"], ppid=1)
    user = gpu_free.procs._user_name(os.getuid() + 12345)
    ok, result, msg = freer(node, exclude_pids=[303], exclude_users=[user]).run()
    assert ok, msg
    assert sorted(pid for pid, _sig in node.sent) == [301, 302]
    reasons = dict((s["pid"], s["reason"]) for s in result["spared"])
    assert reasons[303] == "in exclude_pids"
    assert reasons[600].startswith("user ")
    assert reasons[899].startswith("protected")


def test_fuser_kill_unrestricted_uses_bare_fuser(node):
    node.spawn(700, ["/usr/bin/python3", "train.py"], gpu=1, mib=5000, devices=["/dev/nvidia1"])
    node.ignores_term.add(700)
    ok, result, msg = freer(node, fuser_kill=True, grace_period=2.0).run()
    assert ok, msg
    assert node.fuser_kills == ["TERM", "KILL"]
    assert [(k["pid"], k["via"], k["signal"]) for k in result["killed"]] == [(700, "fuser", "KILL")]


def test_persistence_daemon_neither_blocks_nor_gets_signalled(node):
    """nvidia-persistenced holds every device file for as long as it runs, with no memory;
    its comm is cut to 15 characters ("nvidia-persiste")."""
    crashed_tp2(node)
    node.spawn(50, ["/usr/bin/nvidia-persistenced", "--user", "nvidia-persistenced"],
               devices=["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"])
    assert node.comms[50] == "nvidia-persiste"
    ok, result, msg = freer(node, fuser_kill=True).run()
    assert ok, msg
    assert sorted(pid for pid, _sig in node.sent) == [301, 302, 303]
    assert node.fuser_kills == []  # a bare fuser -k would have hit the daemon
    spared = dict((s["pid"], s["reason"]) for s in result["spared"])
    assert spared == {50: "in ignore_holders"}
    assert [h["pid"] for h in result["holders_after"]] == [50]

    node.spawn(51, ["/usr/bin/nvidia-persistenced"], devices=["/dev/nvidia0"])
    ok, result, msg = freer(node, ignore_holders=[], timeout=1.0).run()
    assert not ok and "pid 51" in msg  # with the list emptied, the daemon counts as a holder


def test_fuser_kill_off_leaves_non_sglang_holders_and_fails(node):
    node.spawn(700, ["/usr/bin/python3", "train.py"], gpu=1, mib=5000, devices=["/dev/nvidia1"])
    ok, result, msg = freer(node, timeout=1.0).run()
    assert not ok and node.sent == []
    assert result["changed"] is False
    assert "GPU 1 uses 5000 MiB" in msg and "pid 700" in msg


def test_idle_threshold(node):
    node.memory[9999] = (0, 4)  # driver-reserved memory with no process
    ok, result, msg = freer(node, timeout=1.0).run()
    assert not ok
    ok, result, msg = freer(node, idle_memory_mib=16).run()
    assert ok and result["changed"] is False


def test_without_nvidia_smi_waits_for_holders_only(node):
    crashed_tp2(node)
    ok, result, msg = freer(node, query=False).run()
    assert ok, msg
    assert result["memory_checked"] is False and result["memory_before"] == []
    assert result["holders_after"] == []


def test_nvidia_smi_failing_at_start_disables_memory_check(node):
    crashed_tp2(node)

    def broken():
        raise nvidia.NvidiaSmiError("driver_not_loaded", "nvidia-smi failed: couldn't communicate")

    f = freer(node)
    f.query = broken
    ok, result, msg = f.run()
    assert ok, msg
    assert result["memory_checked"] is False
    assert "GPU memory is not checked" in f.warnings[0]


def test_permission_denied_is_reported_not_raised(node):
    crashed_tp2(node)
    node.foreign.add(302)
    ok, result, msg = freer(node, timeout=1.0).run()
    assert not ok
    assert sorted(k["pid"] for k in result["killed"]) == [301, 303]
    spared = dict((s["pid"], s["reason"]) for s in result["spared"])
    assert "permission denied" in spared[302] and "become" in spared[302]
    assert "pid 302" in msg and "GPU 1 uses 90000 MiB" in msg


def test_recycled_pid_is_not_signalled(node):
    node.spawn(800, ["sglang::scheduler"])
    f = freer(node)
    allowed, spared, holders = f.find_targets()
    assert [a["pid"] for a in allowed] == [800]
    write_proc(node.root, 800, ["sglang::scheduler"], starttime=5555)  # same pid, new process
    f._signal_each(allowed, "TERM", {800: {"signal": None}})
    assert node.sent == []


def run_main(args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            gpu_free.main()
    return exc.value.code


@pytest.mark.parametrize("args,words", [
    ({"grace_period": -1}, "grace_period must not be negative"),
    ({"poll_interval": 0}, "poll_interval must be positive"),
    ({"patterns": ["sglang::", " "]}, "empty pattern would match every process"),
])
def test_bad_arguments_fail_cleanly(capsys, args, words):
    assert run_main(dict(args, only_pids=[])) == 1
    assert words in json.loads(capsys.readouterr().out)["msg"]


def test_main_with_empty_allow_list_is_a_noop(tmp_path, capsys):
    """Through main() with real /proc: only_pids=[] and a temp device dir, so nothing can be
    signalled whatever runs on this machine."""
    rc = run_main({"only_pids": [], "devices": [str(tmp_path / "nvidia*")], "nvidia_smi": str(tmp_path / "none"),
                   "timeout": 1})
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    assert out["changed"] is False and out["killed"] == []
    assert out["memory_checked"] is False
