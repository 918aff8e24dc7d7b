"""Process helpers: process titles, parent-death signal, state files, SGLang-style logs."""

import ctypes
import errno
import json
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15

_libc = None


def _prctl(option, arg):
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        return _libc.prctl(option, ctypes.c_ulong(arg) if isinstance(arg, int) else arg, 0, 0, 0)
    except (OSError, AttributeError):
        return -1


def set_comm(title):
    """Set /proc/self/comm (15 bytes max), as setproctitle does."""
    buf = ctypes.create_string_buffer(title.encode()[:15])
    if _prctl(PR_SET_NAME, buf) != 0:
        try:
            with open("/proc/self/comm", "w") as fh:
                fh.write(title[:15])
        except OSError:
            pass


def die_with_parent(sig=signal.SIGKILL):
    """PR_SET_PDEATHSIG, like SGLang's kill_itself_when_parent_died()."""
    _prctl(PR_SET_PDEATHSIG, int(sig))


def proc_start_ticks(pid):
    """Start time of pid (clock ticks since boot) or None; guards against pid reuse."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            data = fh.read()
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    # rest[0] is field 3 (state); starttime is field 22.
    if rest and rest[0] in ("Z", "X"):
        return None
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


def pid_alive(pid, start_ticks=None):
    try:
        os.kill(pid, 0)
    except OSError as exc:
        if exc.errno != errno.EPERM:
            return False
    ticks = proc_start_ticks(pid)
    if ticks is None:
        return False
    return start_ticks is None or ticks == start_ticks


def procs_dir(state_dir):
    return os.path.join(state_dir, "procs")


def write_proc_state(state_dir, record):
    """Atomically write <state_dir>/procs/<pid>.json."""
    d = procs_dir(state_dir)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "%d.json" % record["pid"])
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)
    return path


def remove_proc_state(state_dir, pid):
    try:
        os.unlink(os.path.join(procs_dir(state_dir), "%d.json" % pid))
    except OSError:
        pass


def read_live_procs(state_dir):
    """Records of rank processes that are still alive (dead pids free their memory)."""
    out = []
    d = procs_dir(state_dir)
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(d, name)) as fh:
                rec = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and pid_alive(int(rec.get("pid", -1)), rec.get("start_ticks")):
            out.append(rec)
    return out


def raw_log(msg, stream=None):
    stream = stream or sys.stderr
    try:
        stream.write(msg + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def log(msg, prefix="", stream=None):
    """One log line in SGLang's format: [YYYY-mm-dd HH:MM:SS<prefix>] msg."""
    stream = stream or sys.stderr
    ts = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        stream.write("[%s%s] %s\n" % (ts, prefix, msg))
        stream.flush()
    except (OSError, ValueError):
        pass
