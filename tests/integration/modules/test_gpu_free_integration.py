"""gpu_free end to end: the module file run as Ansible runs it (a JSON args file, a separate
Python process) against real processes that this test starts itself. Each dummy is started
with a chosen argv[0] (`exec -a sglang::scheduler_TP0 ...`) and holds files in a temp "dev"
dir open; a stand-in nvidia-smi counts their memory only while they live, like the driver.

Safety: every run either sets `only_pids` to this test's own children, or uses a pattern
made of a random token that only those children carry, with `devices` inside the temp dir.
Nothing outside this test's process tree can be selected, and the real /dev is never named.
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MODULE = ROOT / "plugins" / "modules" / "gpu_free.py"
COLLECTIONS = ROOT / ".cache" / "collections"

DUMMY = r"""
import signal, sys, time
if sys.argv[1] == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
held = [open(path) for path in sys.argv[2:]]
print("ready", flush=True)
while True:
    time.sleep(1)
"""

# Sums the memory of the listed pids that are still alive (a zombie has released its GPU
# memory, as with the real driver), in the real CSV formats.
FAKE_SMI = r"""#!{python}
import json, os, sys
state = json.load(open({state!r}))
def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
used = {{0: 0, 1: 0}}
apps = []
for pid, (gpu, mib) in state.items():
    if alive(int(pid)):
        used[gpu] += mib
        apps.append("%s, python3, %d, GPU-%d" % (pid, mib, gpu))
if sys.argv[1].startswith("--query-gpu="):
    for i in (0, 1):
        print("%d, GPU-%d, NVIDIA H200, %d, 143771, 9.0, 580.159.04" % (i, i, used[i]))
elif sys.argv[1].startswith("--query-compute-apps="):
    print("\n".join(apps))
else:
    sys.exit(2)
"""


class Node:
    """This test's own dummy processes plus a temp dev dir and a stand-in nvidia-smi."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.dev = tmp_path / "dev"
        self.dev.mkdir()
        for name in ("nvidia0", "nvidia1", "nvidiactl"):
            (self.dev / name).write_text("")
        self.children = []
        self.memory = {}
        self.smi = tmp_path / "nvidia-smi"
        self.state = tmp_path / "smi-state.json"
        self.smi.write_text(FAKE_SMI.format(python=sys.executable, state=str(self.state)))
        self.smi.chmod(0o755)
        self._save()

    def _save(self):
        self.state.write_text(json.dumps(self.memory))

    def spawn(self, title, devices=(), gpu=None, mib=0, ignore_term=False):
        args = ["ignore-term" if ignore_term else "normal"] + [str(self.dev / d) for d in devices]
        proc = subprocess.Popen(["bash", "-c", 'exec -a "$0" "$@"', title, sys.executable, "-c", DUMMY] + args,
                                stdout=subprocess.PIPE)
        assert proc.stdout.readline().strip() == b"ready"
        self.children.append(proc)
        if gpu is not None:
            self.memory[str(proc.pid)] = [gpu, mib]
            self._save()
        return proc

    def run(self, check_mode=False, env=None, **args):
        args.setdefault("devices", [str(self.dev / "nvidia*")])
        args.setdefault("nvidia_smi", str(self.smi))
        args.setdefault("poll_interval", 0.1)
        module_args = dict(args)
        if check_mode:
            module_args["_ansible_check_mode"] = True
        path = self.tmp / ("args-%s.json" % uuid.uuid4().hex[:8])
        path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": module_args}))
        full_env = dict(os.environ, **(env or {}))
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(COLLECTIONS), full_env.get("PYTHONPATH")) if p)
        done = subprocess.run([sys.executable, str(MODULE), str(path)], capture_output=True, text=True,
                              env=full_env, timeout=120, check=False)
        try:
            return json.loads(done.stdout)
        except ValueError:
            raise AssertionError("module printed no JSON: rc=%s\n%s\n%s" % (done.returncode, done.stdout,
                                                                            done.stderr))

    def cleanup(self):
        for proc in self.children:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    n.cleanup()


def reaped(proc, timeout=5.0):
    try:
        proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def test_frees_orphans_term_then_kill(node):
    tp0 = node.spawn("sglang::scheduler_TP0", ["nvidia0", "nvidiactl"], gpu=0, mib=90000)
    tp1 = node.spawn("sglang::scheduler_TP1", ["nvidia1", "nvidiactl"], gpu=1, mib=90000, ignore_term=True)
    detok = node.spawn("sglang::detokenizer")
    other = node.spawn("python3 train.py", ["nvidia1"], gpu=1, mib=1000)  # not SGLang, not allowed
    mine = [tp0.pid, tp1.pid, detok.pid]

    preview = node.run(check_mode=True, only_pids=mine)
    assert preview["changed"] is True
    assert sorted(w["pid"] for w in preview["would_kill"]) == sorted(mine)
    assert all(p.poll() is None for p in (tp0, tp1, detok))

    os.kill(other.pid, signal.SIGKILL)  # the non-SGLang holder leaves on its own
    assert reaped(other)

    started = time.monotonic()
    result = node.run(only_pids=mine, grace_period=1.0, timeout=20)
    elapsed = time.monotonic() - started
    assert not result.get("failed"), result
    assert result["changed"] is True
    signals = dict((k["pid"], (k["signal"], k["via"], k["pattern"])) for k in result["killed"])
    assert signals == {tp0.pid: ("TERM", "pattern", "sglang::"), tp1.pid: ("KILL", "pattern", "sglang::"),
                       detok.pid: ("TERM", "pattern", "sglang::")}
    assert [g["memory_used_mib"] for g in result["memory_before"]] == [90000, 90000]
    assert [g["memory_used_mib"] for g in result["memory_after"]] == [0, 0]
    assert result["survivors"] == []
    assert result["holders_after"] == []
    # TP1 ignored TERM, so freeing took the grace period plus the KILL
    assert 1.0 <= result["seconds_to_free"] < elapsed
    assert all(reaped(p) for p in (tp0, tp1, detok))
    print("seconds_to_free=%.3f (grace 1.0 s), module wall time %.3f s" % (result["seconds_to_free"], elapsed))

    again = node.run(only_pids=mine, grace_period=1.0, timeout=5)
    assert again["changed"] is False and again["killed"] == []


def test_fuser_kill_restricted_to_only_pids(node):
    holder = node.spawn("python3 train.py", ["nvidia0"], gpu=0, mib=5000)
    spared = node.spawn("python3 exporter.py", ["nvidiactl"])
    result = node.run(only_pids=[holder.pid], exclude_pids=[spared.pid], fuser_kill=True, grace_period=1.0,
                      timeout=10)
    assert not result.get("failed"), result
    assert [(k["pid"], k["via"], k["signal"]) for k in result["killed"]] == [(holder.pid, "fuser", "TERM")]
    assert reaped(holder)
    assert spared.poll() is None  # held a device file, but excluded: untouched and not waited for
    assert [h["pid"] for h in result["holders_after"]] == [spared.pid]


def test_bare_fuser_kill_when_unrestricted(node):
    """No allow/deny list: `fuser -k -TERM` on the temp dev files. The sweep pattern is a
    random token only this test's children carry, so the /proc sweep cannot match anything
    else, and only these children hold the temp files."""
    token = "gpufree-test-%s::" % uuid.uuid4().hex
    worker = node.spawn(token + "worker", ["nvidia0"], gpu=0, mib=100)
    plain = node.spawn("python3 holder.py", ["nvidia1"], gpu=1, mib=200, ignore_term=True)
    result = node.run(patterns=[token], fuser_kill=True, grace_period=1.0, timeout=10)
    assert not result.get("failed"), result
    killed = dict((k["pid"], (k["via"], k["signal"])) for k in result["killed"])
    assert killed == {worker.pid: ("pattern", "TERM"), plain.pid: ("fuser", "KILL")}
    assert reaped(worker) and reaped(plain)


def test_timeout_names_what_still_holds_the_gpu(node):
    allowed = node.spawn("sglang::scheduler", ["nvidia0"], gpu=0, mib=70000)
    blocker = node.spawn("python3 notebook.py", ["nvidia1"], gpu=1, mib=3000)
    result = node.run(only_pids=[allowed.pid], grace_period=0.5, timeout=1.5)
    assert result["failed"] is True
    assert result["changed"] is True and [k["pid"] for k in result["killed"]] == [allowed.pid]
    assert "GPU 1 uses 3000 MiB (idle_memory_mib is 0), compute apps: %d python3 3000 MiB" % blocker.pid in result["msg"]
    assert "pid %d" % blocker.pid in result["msg"] and str(node.dev / "nvidia1") in result["msg"]
    assert "GPU 0" not in result["msg"]
    assert blocker.poll() is None


def test_without_nvidia_smi(node):
    proc = node.spawn("sglang::scheduler", ["nvidia0"])
    result = node.run(only_pids=[proc.pid], nvidia_smi=str(node.tmp / "absent"), grace_period=1.0, timeout=5)
    assert not result.get("failed"), result
    assert result["memory_checked"] is False
    assert "not found" in json.dumps(result.get("warnings"))
    assert [k["pid"] for k in result["killed"]] == [proc.pid]


# A rank stand-in that publishes its GPU memory the way the simulator's rank children do
# (through the simulator's own helper, so the record format cannot drift from it).
SIM_RANK = r"""
import json, os, sys, time
from sglang_sim import _proc
cfg = json.loads(sys.argv[1])
held = [open(p) for p in cfg["devices"]]
_proc.write_proc_state(cfg["state_dir"], {
    "pid": os.getpid(), "start_ticks": _proc.proc_start_ticks(os.getpid()), "gpu_index": cfg["gpu_index"],
    "gpu_uuid": cfg["gpu_uuid"], "process_name": cfg["title"], "used_mib": cfg["used_mib"], "ppid": os.getppid()})
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def test_sim_nvidia_smi_sees_memory_freed(node, tmp_path):
    sys.path.insert(0, str(ROOT / "sim"))
    from sglang_sim import config as sim_config

    state = tmp_path / "state"
    env = {"PYTHONPATH": str(ROOT / "sim"), "SGLANG_SIM_CONFIG": str(tmp_path / "no-config.json"),
           "SGLANG_SIM_STATE_DIR": str(state), "SGLANG_SIM_DEV_DIR": str(node.dev),
           "SGLANG_SIM_PROFILE": "rtx-pro-6000-x4"}
    gpus = sim_config.gpus(sim_config.load_settings(env))
    ranks = []
    for rank in (0, 1):
        cfg = {"devices": [str(node.dev / ("nvidia%d" % rank)), str(node.dev / "nvidiactl")], "state_dir": str(state),
               "gpu_index": rank, "gpu_uuid": gpus[rank]["uuid"], "title": "sglang::scheduler_TP%d" % rank,
               "used_mib": 80000 + rank}
        proc = subprocess.Popen(["bash", "-c", 'exec -a "$0" "$@"', cfg["title"], sys.executable, "-c", SIM_RANK,
                                 json.dumps(cfg)], stdout=subprocess.PIPE, env=dict(os.environ, **env))
        node.children.append(proc)
        assert proc.stdout.readline().strip() == b"ready"
        ranks.append(proc)
    smi = tmp_path / "sim-nvidia-smi"
    smi.write_text('#!/bin/sh\nexec %s -m sglang_sim.nvidia_smi "$@"\n' % sys.executable)
    smi.chmod(0o755)
    # the module's environment carries the sim settings, as the config file would on a node
    result = node.run(env=env, only_pids=[p.pid for p in ranks], nvidia_smi=str(smi), grace_period=1.0, timeout=15)
    assert not result.get("failed"), result
    before = dict((g["index"], g["memory_used_mib"]) for g in result["memory_before"])
    assert before[0] >= 80000 and before[1] >= 80001
    assert all(g["memory_used_mib"] < 80000 for g in result["memory_after"])
    assert sorted(k["pid"] for k in result["killed"]) == sorted(p.pid for p in ranks)
    assert result["seconds_to_free"] is not None


# Runs a command as a child subreaper: when the simulated server is SIGKILLed, its orphaned
# ranks are reparented here (not to PID 1) and reaped once gpu_free ends them.
REAPER = r"""
import ctypes, os, signal, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
server = subprocess.Popen(sys.argv[1:], stdout=open(os.environ["SIM_LOG"], "w"), stderr=subprocess.STDOUT)
print(server.pid, flush=True)
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.1)
"""


def _children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path("/proc/%s/stat" % entry).read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return sorted(out)


def test_crashed_simulated_server_end_to_end(node, tmp_path):
    """The operator's failure: a --tp-size 2 server crashes and its ranks (SGLANG_SIM_ORPHANS=1)
    keep GPU memory and /dev/nvidia* held. gpu_info sees them; gpu_free, allowed only these
    pids, ends them and the simulator's nvidia-smi shows the memory back at 0."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    simdev = tmp_path / "simdev"
    simdev.mkdir()
    env = {"PYTHONPATH": str(ROOT / "sim"), "SGLANG_SIM_CONFIG": str(tmp_path / "no-config.json"),
           "SGLANG_SIM_STATE_DIR": str(tmp_path / "simstate"), "SGLANG_SIM_DEV_DIR": str(simdev),
           "SGLANG_SIM_PROFILE": "rtx-pro-6000-x4", "SGLANG_SIM_TIME_SCALE": "0.01",
           "SGLANG_SIM_LOAD_SECONDS": "1", "SGLANG_SIM_ORPHANS": "1", "SIM_LOG": str(tmp_path / "server.log")}
    reaper = subprocess.Popen([sys.executable, "-c", REAPER, sys.executable, "-m", "sglang_sim.launch_server",
                               "--model-path", "Qwen/Qwen3-8B", "--tp-size", "2", "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.PIPE, env=dict(os.environ, **env))
    node.children.append(reaper)
    server = int(reaper.stdout.readline())
    ranks = []
    try:
        deadline = time.monotonic() + 60
        while "ready to roll" not in (tmp_path / "server.log").read_text():
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()[-2000:]
            time.sleep(0.2)
        ranks = _children(server)
        assert len(ranks) == 3  # scheduler_TP0, scheduler_TP1, detokenizer
        os.kill(server, signal.SIGKILL)  # the crash
        time.sleep(0.3)
        assert _children(reaper.pid) == ranks  # orphaned, still alive

        smi = tmp_path / "sim-nvidia-smi"
        smi.write_text('#!/bin/sh\nexec %s -m sglang_sim.nvidia_smi "$@"\n' % sys.executable)
        smi.chmod(0o755)
        info = subprocess.run([sys.executable, str(ROOT / "plugins" / "modules" / "gpu_info.py"),
                               str(_args(tmp_path, {"nvidia_smi": str(smi), "devices": [str(simdev / "nvidia*")]}))],
                              capture_output=True, text=True, timeout=60, check=False,
                              env=dict(os.environ, **dict(env, PYTHONPATH=os.pathsep.join(
                                  [str(COLLECTIONS), str(ROOT / "sim")]))))
        facts = json.loads(info.stdout)["ansible_facts"]["gpu_info"]
        assert sorted(a["process_name"] for a in facts["compute_apps"]) == ["sglang::scheduler_TP0",
                                                                            "sglang::scheduler_TP1"]
        holder_titles = dict((h["pid"], h["cmdline"].split()[0]) for h in facts["device_holders"])
        assert sorted(holder_titles.values()) == ["sglang::scheduler_TP0", "sglang::scheduler_TP1"]
        assert facts["gpus"][0]["memory_used_mib"] > 0 and facts["gpus"][1]["memory_used_mib"] > 0

        result = node.run(env=env, only_pids=ranks, nvidia_smi=str(smi), devices=[str(simdev / "nvidia*")],
                          grace_period=5.0, timeout=30)
        assert not result.get("failed"), result
        assert sorted(k["pid"] for k in result["killed"]) == ranks
        assert sorted(k["cmdline"].split()[0] for k in result["killed"]) == [
            "sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
        assert result["memory_before"][0]["memory_used_mib"] == facts["gpus"][0]["memory_used_mib"]
        assert all(g["memory_used_mib"] == 0 for g in result["memory_after"])
        assert result["holders_after"] == [] and result["survivors"] == []
        print("simulated crash: %d orphans ended, seconds_to_free=%.3f"
              % (len(result["killed"]), result["seconds_to_free"]))
    finally:
        for pid in ranks + [server]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reaper.terminate()
        reaper.wait()


def _args(tmp_path, args):
    path = tmp_path / ("args-%s.json" % uuid.uuid4().hex[:8])
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    return path
