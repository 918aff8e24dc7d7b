# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a sglang-<name>.service unit runs around SGLang when nobody runs a playbook.

    clean-start   ExecStartPre, as the unit's user: end what an earlier run of this unit left
                  behind (its orphaned ``sglang::*`` ranks holding GPU memory and the port),
                  wait (bounded) until their GPU memory is back, then back off after failed
                  starts. One journal line says what it ended. Then it sweeps /dev/shm of
                  the shared-memory segments SGLang leaks (it dies by SIGKILL, which skips
                  every unlink): the unit's user's only, and only those no live process can
                  still use (``shm_sweep_plan``); one journal line says what went and how much.
    record-exit   ExecStopPost, as root: classify why this run ended from its own journal
                  lines and write <state_dir>/status.json (atomically).
    watchdog      the unit's watchdog service, as root: ask the loopback server for a few
                  tokens; a server that is up but produces none is restarted through systemd,
                  within limits, after which it is stopped and reported instead.

Which processes are "this unit's own" is decided by pure functions (unit-tested): a process in
the unit's control group, or -- where cgroups do not tell (cgroup v1, a process moved out) --
one of the unit's user with an SGLang process title that no other unit owns. The key, when the
server has one, is read from the unit's 0640 SGLang --config file and only ever sent in an HTTP
header; it is never in argv, the environment or any output.

Stdlib only (Python >= 3.9). The /proc and nvidia-smi parsers and the failure classifier are
the collection's own module_utils, installed next to this file.
"""

import argparse
import json
import os
import pwd
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request

_HERE = os.path.dirname(os.path.abspath(__file__))
for _cand in (os.path.join(_HERE, "module_utils"),
              os.path.join(_HERE, "..", "..", "..", "plugins", "module_utils")):
    if os.path.isfile(os.path.join(_cand, "procs.py")):
        sys.path.insert(0, os.path.abspath(_cand))
        break

import journal  # noqa: E402  pylint: disable=wrong-import-position
import nvidia  # noqa: E402  pylint: disable=wrong-import-position
import procs  # noqa: E402  pylint: disable=wrong-import-position

TITLE_PREFIX = "sglang::"
STATUS_FILE = "status.json"
WATCHDOG_FILE = "watchdog.json"
# Exit status of a clean start that refuses systemd's restart (crash-loop brake).
BRAKE_EXIT = 75


# ----------------------------------------------------------------------------- pure decisions

def parse_cgroup(text):
    """The cgroup path of a process from /proc/<pid>/cgroup: the v2 entry (``0::/path``), or on
    a hybrid host, where that entry may be bare ``/``, systemd's v1 hierarchy
    (``N:name=systemd:/path``); None when neither is there."""
    v1 = v2 = None
    for line in (text or "").splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif parts[1] == "name=systemd":
            v1 = parts[2]
    if v2 and (unit_of_cgroup(v2) or not v1):
        return v2
    return v1 or v2


def unit_of_cgroup(path):
    """The systemd unit (``*.service`` / ``*.scope``) a cgroup path belongs to, or None."""
    # The innermost one: a node inside a container sees .../docker-<id>.scope/system.slice/x.service.
    unit = None
    for part in (path or "").split("/"):
        if part.endswith(".service") or part.endswith(".scope"):
            unit = part
    return unit


def own_leftovers(candidates, unit, uid, protected=(), title_prefix=TITLE_PREFIX):
    """Split processes into (own, spared) for ``unit`` run as ``uid``.

    A candidate (dict with pid, uid, argv/cmdline, cgroup) is this unit's own when it is in the
    unit's cgroup, or when it runs as ``uid``, carries an SGLang process title (``sglang::``)
    and no other unit's cgroup holds it. ``protected`` (this helper and its parents) is never
    own. Each item gets ``why``.
    """
    protected = set(int(p) for p in protected)
    own, spared = [], []
    for cand in candidates:
        item = dict(cand)
        title = (cand.get("argv") or [cand.get("cmdline") or ""])[0] or ""
        holder = unit_of_cgroup(cand.get("cgroup"))
        if int(cand["pid"]) in protected:
            item["why"] = "this helper"
            spared.append(item)
        elif holder == unit:
            item["why"] = "in %s's cgroup" % unit
            own.append(item)
        elif holder is not None and holder != unit:
            item["why"] = "belongs to %s" % holder
            spared.append(item)
        elif cand.get("uid") == uid and title.startswith(title_prefix):
            item["why"] = "%s of the unit's user outside any unit" % title
            own.append(item)
        else:
            item["why"] = "not the unit's"
            spared.append(item)
    return own, spared


def backoff_delay(consecutive_failures, base, maximum):
    """Seconds to wait before the next start after ``consecutive_failures`` failed starts:
    none before the second try, then ``base`` doubling up to ``maximum`` (0 = no back-off)."""
    if maximum <= 0 or base <= 0 or consecutive_failures <= 1:
        return 0.0
    return float(min(maximum, base * (2 ** (consecutive_failures - 2))))


def next_status(prev, service_result, exit_code, exit_status, lines, restarts, now):
    """The status record after a run of the unit ended (ExecStopPost's environment, the run's
    journal lines and NRestarts: systemd's restarts since the last start by hand). A run that
    ended on its own is a failure; a clean stop is not."""
    prev = prev or {}
    ready = journal.saw_ready(lines)
    failed = service_result not in ("success", "", None)
    status = {
        "time": now,
        "service_result": service_result,
        "exit_code": exit_code,
        "exit_status": exit_status,
        "ready_seen": ready,
        "restarts": restarts,
        "failed": failed,
        "consecutive_failures": 0,
        "last_failure": prev.get("last_failure"),
    }
    own = [text for text in lines if text.strip()]
    held = bool(own) and ("backing off" in own[-1] or "crash-loop brake" in own[-1])
    # A start ended by a signal before any main process ran (systemd sets EXIT_CODE for the main
    # process only): stopped during the clean start, as an operator stopping a crash-looping unit
    # between two tries is.
    stopped = service_result == "signal" and not exit_code
    if failed and (held or stopped) and all(text.startswith("sglang-clean-start:") for text in own):
        # Stopped while the clean start was backing off or still running, or refused by the
        # brake, with no failure of the clean start's own: SGLang never ran, so this is no new
        # failure - the series and its last failure stay as they were.
        status["failed"] = False
        if held:
            status["interrupted_backoff"] = "backing off" in own[-1]
            status["braked"] = "crash-loop brake" in own[-1]
        else:
            status["stopped_before_start"] = True
        status["consecutive_failures"] = int(prev.get("consecutive_failures") or 0)
        return status
    if failed:
        cls, line = journal.classify(lines)
        hint = journal.hint(cls)
        if cls == "unknown":
            for text in reversed(lines):
                if text.startswith("sglang-clean-start:"):
                    line = text
                    break
        if cls == "unknown" and service_result == "signal" and not line:
            # Nothing of SGLang's own in the journal: something outside ended it (a kill -9, the
            # kernel's OOM killer), which only the kernel log or whoever sent it can tell.
            cls = "killed"
            line = "the main process was killed by signal %s" % (exit_status or "?")
            hint = ("SGLang wrote no error of its own: look for the kernel's OOM killer "
                    "(journalctl -k | grep -i 'killed process') or whoever sent the signal.")
        status["last_failure"] = {"class": cls, "line": line, "time": now,
                                  "service_result": service_result, "exit_status": exit_status,
                                  "hint": hint}
        # A run that served and then crashed starts a new series, and so does a run started by
        # hand or by a play (systemd counts NRestarts from the last such start).
        series = 0 if (ready or not restarts) else int(prev.get("consecutive_failures") or 0)
        status["consecutive_failures"] = series + 1
    return status


def watchdog_decision(active, ready_seen, health_ok, tokens, history, now, max_restarts, window):
    """What the watchdog does: (action, reason) with action in none, restart, stop.

    Only a server that became ready in this run and now yields no token is wedged; one that is
    still loading or already down is systemd's business. ``history`` holds the times of the
    watchdog's earlier restarts; reaching ``max_restarts`` within ``window`` seconds stops it.
    """
    if not active:
        return "none", "unit not running"
    if not ready_seen:
        return "none", "still starting"
    if tokens < 0:
        # Refused (a key changed under a running server, 401): it answered, so it is no wedge,
        # and a restart would start it on whatever the unit's files say by now.
        return "none", "answered HTTP %d: not a wedge" % -tokens
    if tokens:
        return "none", "serving (%d tokens)" % tokens
    why = "answers /health but produced no token" if health_ok else "no token and /health failing"
    recent = [t for t in history if now - t < window]
    if len(recent) >= max_restarts:
        return "stop", "%s; %d watchdog restarts in %ds: flapping, left stopped" % (
            why, len(recent), window)
    return "restart", why


# SGLang 0.5.23's families in /dev/shm, as its own CI sweep lists them
# (srt/utils/stale_shm_cleanup.py: _SGL_SHM_PREFIX and _creator_pid, _ORPHAN_PREFIXES).
# Pid-stamped: sgl_shm_<kind>_<pid>_<rand> (make_shm_name) and multi_tokenizer_args_<pid>.
SHM_PID_PREFIXES = ("sgl_shm_", "multi_tokenizer_args_")
# Pid-less: the load-snapshot slot files, CUDA IPC, NCCL and loky/joblib semaphores.
SHM_PIDLESS_PREFIXES = ("sglang_loads_", "cuda.shm.", "nccl-", "sem.loky-")
# Start times come from /proc/stat's btime (whole seconds) plus clock ticks: a process counts
# as newer than a segment only when it started this much after the segment's last write.
SHM_CLOCK_SLACK = 2.0


def shm_creator_pid(name):
    """The creator's pid stamped in a segment name, as 0.5.23's _creator_pid reads it, or None."""
    pid = None
    if name.startswith("sgl_shm_"):
        parts = name.split("_")
        if len(parts) >= 4:
            try:
                pid = int(parts[-2])
            except ValueError:
                return None
    elif name.startswith("multi_tokenizer_args_"):
        try:
            pid = int(name.rsplit("_", 1)[-1])
        except ValueError:
            return None
    return pid if pid is not None and pid > 0 else None


def shm_family(name):
    """The SGLang family a /dev/shm name belongs to (a glob for the journal), or None."""
    if name.startswith("sgl_shm_"):
        parts = name.split("_")
        return "sgl_shm_%s_*" % "_".join(parts[2:-2]) if len(parts) >= 5 else "sgl_shm_*"
    for prefix in SHM_PID_PREFIXES[1:] + SHM_PIDLESS_PREFIXES:
        if name.startswith(prefix):
            return prefix + "*"
    return None


def parse_maps_inodes(text):
    """What /proc/<pid>/maps maps: (major, minor, inode) of each file mapping, and ("path",
    path) of each (overlayfs shows the lower file's device, so the path is kept too)."""
    out = set()
    for line in (text or "").splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5 or parts[4] == "0":
            continue
        try:
            major, minor = (int(x, 16) for x in parts[3].split(":"))
            out.add((major, minor, int(parts[4])))
        except ValueError:
            continue
        if len(parts) == 6:
            path = parts[5].strip()
            out.add(("path", path[:-len(" (deleted)")] if path.endswith(" (deleted)") else path))
    return out


def parse_status_ids(text):
    """All uids (real, effective, saved, fs) of /proc/<pid>/status, a set."""
    for line in (text or "").splitlines():
        if line.startswith("Uid:"):
            try:
                return set(int(x) for x in line.split()[1:])
            except ValueError:
                return set()
    return set()


def shm_sweep_plan(entries, uid, procs_seen):
    """Split /dev/shm entries into (remove, keep) for the service user ``uid``.

    ``entries``: dicts with name, uid, regular, mode, size, blocks, mtime (epoch), keys
    ((major, minor, inode) and ("path", path)). ``procs_seen``: dicts of the live processes
    with pid, start (epoch), uids (set), readable (its maps and fds could be read) and keys
    (those of the files it maps or holds open; empty when unreadable).

    A segment goes only when all of this holds:
      - it is a regular file owned by ``uid`` (another user's is never looked at further) in
        one of 0.5.23's families;
      - no live process maps it or holds it open;
      - no process whose maps could not be read could have it: one running as ``uid`` (any of
        its uids), or any such process when the segment's mode lets group or others in. Root's
        processes are not counted for a 0600 segment of another user: root can open every file,
        so counting them would keep every segment on every host (systemd is root), and these
        families are shared only among processes of their creator's user (0600: load_snapshot,
        SharedMemory, NCCL's mkstemp, sem_open);
      - pid-stamped: its creator is dead: no live process has that pid, or the one that has it
        started more than SHM_CLOCK_SLACK seconds after the segment's last write (a reused
        pid: the creator existed when it wrote the segment). 0.5.23 keeps any live pid.
    Each item gets ``why``.
    """
    by_pid = dict((int(p["pid"]), p) for p in procs_seen)
    in_use = {}
    for proc in procs_seen:
        for key in proc.get("keys") or ():
            in_use.setdefault(tuple(key), int(proc["pid"]))
    unreadable = [p for p in procs_seen if not p.get("readable")]
    remove, keep = [], []
    for entry in entries:
        item = dict(entry)
        name = entry["name"]
        if entry.get("uid") != uid or not entry.get("regular") or shm_family(name) is None:
            continue
        holder = next((in_use[tuple(k)] for k in entry.get("keys") or () if tuple(k) in in_use), None)
        pid = shm_creator_pid(name)
        creator = by_pid.get(pid) if pid is not None else None
        shared = bool(int(entry.get("mode") or 0) & 0o066)
        blind = [p for p in unreadable if shared or uid in (p.get("uids") or ())]
        if holder is not None:
            item["why"] = "in use by pid %d" % holder
        elif creator is not None and not (creator.get("start") is not None and entry.get("mtime") is not None
                                          and creator["start"] > entry["mtime"] + SHM_CLOCK_SLACK):
            item["why"] = "its creator %d is alive" % pid
        elif blind:
            item["why"] = "unreadable pid %d could use it" % int(blind[0]["pid"])
        else:
            item["why"] = ("its creator %d is gone" % pid if pid is not None and creator is None
                           else "pid %d was reused" % pid if pid is not None else "no process uses it")
            remove.append(item)
            continue
        keep.append(item)
    return remove, keep


def shm_sweep_line(removed, kept, shm_dir, user):
    """The journal line of a sweep: counts per family, the bytes freed, the first names."""
    blind = [k for k in kept if k["why"].startswith("unreadable pid")]
    if not removed and not blind:
        return None
    families = {}
    for item in removed:
        fam = shm_family(item["name"])
        families[fam] = families.get(fam, 0) + 1
    freed = sum(int(i.get("blocks") or 0) * 512 for i in removed)
    size = sum(int(i.get("size") or 0) for i in removed)
    names = sorted(i["name"] for i in removed)
    line = ("sglang-clean-start: removed %d leaked shared-memory segment(s) of %s from %s, %s freed "
            "(%s in size)" % (len(removed), user, shm_dir, _human(freed), _human(size)))
    if removed:
        line += ": %s; %s%s" % (", ".join("%s %d" % kv for kv in sorted(families.items())),
                                " ".join(names[:8]), " and %d more" % (len(names) - 8) if len(names) > 8 else "")
    if blind:
        line += "; kept %d that %s" % (len(blind), blind[0]["why"].replace(" it", " them" if len(blind) > 1 else " it"))
    return line


def _human(nbytes):
    if nbytes >= 1 << 30:
        return "%.1f GiB" % (nbytes / float(1 << 30))
    if nbytes >= 1 << 20:
        return "%.1f MiB" % (nbytes / float(1 << 20))
    return "%.1f KiB" % (nbytes / 1024.0)


# ----------------------------------------------------------------------------- node access

def _say(msg):
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _load_json(path):
    try:
        with open(path) as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_json(path, data):
    """Atomic write: a reader sees the old file or the new one, never half of one."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _scan_with_cgroups():
    out = []
    for proc in procs.scan():
        proc["cgroup"] = parse_cgroup(_read("/proc/%d/cgroup" % proc["pid"]))
        out.append(proc)
    return out


def _device_paths(dev_dir):
    try:
        names = os.listdir(dev_dir)
    except OSError:
        return []
    return sorted(os.path.join(dev_dir, n) for n in names if n.startswith("nvidia"))


def _device_holders(paths):
    """Pids holding the GPU device files: fuser (psmisc) where installed, else /proc."""
    if not paths:
        return set()
    try:
        res = subprocess.run(procs.fuser_argv("fuser", paths), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=30, check=False)
        return set(h["pid"] for h in procs.parse_fuser(res.stdout.decode("utf-8", "replace"), paths))
    except (OSError, subprocess.SubprocessError):
        return set(h["pid"] for h in procs.holders_from_proc(paths))


def _gpu_apps(nvidia_smi):
    """Pids nvidia-smi lists with GPU memory; None when nvidia-smi cannot tell."""
    try:
        res = subprocess.run(nvidia.query_apps_argv(nvidia_smi), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, timeout=30, check=False)
        if res.returncode != 0:
            return None
        return set(a["pid"] for a in nvidia.parse_compute_apps(res.stdout.decode()))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _systemctl_show(unit, props):
    try:
        res = subprocess.run(["systemctl", "show", unit, "-p", ",".join(props)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    out = {}
    for line in res.stdout.decode("utf-8", "replace").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
    return out


def _journal_lines(invocation):
    if not invocation:
        return []
    try:
        res = subprocess.run(["journalctl", "--no-pager", "-o", "cat",
                              "_SYSTEMD_INVOCATION_ID=%s" % invocation],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return res.stdout.decode("utf-8", "replace").splitlines()


def _boot_time():
    for line in (_read("/proc/stat") or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def _shm_entries(shm_dir):
    """The service-user-agnostic listing of ``shm_dir`` (lstat: a link is not followed)."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    real = os.path.realpath(shm_dir)
    out = []
    for name in names:
        try:
            st = os.lstat(os.path.join(shm_dir, name))
        except OSError:
            continue
        out.append({"name": name, "uid": st.st_uid, "regular": stat.S_ISREG(st.st_mode),
                    "mode": stat.S_IMODE(st.st_mode), "size": st.st_size, "blocks": st.st_blocks,
                    "mtime": st.st_mtime, "keys": [(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino),
                                                   ("path", os.path.join(real, name))]})
    return out


def _shm_procs(me):
    """Every live process with its start time, uids and the files it maps or holds open."""
    btime = _boot_time()
    ticks = os.sysconf("SC_CLK_TCK")
    out = []
    for pid in procs.list_pids():
        if pid == me:
            continue
        base = "/proc/%d" % pid
        st = procs.parse_stat(_read(base + "/stat"))
        if st is None or st["state"] in ("Z", "X", "x"):
            continue
        item = {"pid": pid, "uids": parse_status_ids(_read(base + "/status")),
                "start": btime + st["starttime"] / float(ticks) if btime is not None else None,
                "readable": True, "keys": set()}
        try:
            with open(base + "/maps") as handle:
                item["keys"] = parse_maps_inodes(handle.read())
            fds = os.listdir(base + "/fd")
        except FileNotFoundError:
            continue  # gone meanwhile
        except OSError:
            item["readable"] = False
            fds = []
        for fd in fds:
            try:
                link = os.readlink("%s/fd/%s" % (base, fd))
                fst = os.stat("%s/fd/%s" % (base, fd))
            except OSError:
                continue
            item["keys"].add((os.major(fst.st_dev), os.minor(fst.st_dev), fst.st_ino))
            item["keys"].add(("path", link[:-len(" (deleted)")] if link.endswith(" (deleted)") else link))
        out.append(item)
    return out


def sweep_shm(shm_dir, uid, user):
    """Unlink the leaked segments shm_sweep_plan picks; the journal line, or None."""
    # Listing first, processes second: a segment listed here was created before the scan, so
    # its creator holds it open or mapped (every family's creator does from creation on) or
    # is gone by the time /proc is read.
    entries = [e for e in _shm_entries(shm_dir) if e["uid"] == uid and shm_family(e["name"])]
    if not entries:
        return None
    remove, keep = shm_sweep_plan(entries, uid, _shm_procs(os.getpid()))
    removed = []
    for item in remove:
        try:
            os.unlink(os.path.join(shm_dir, item["name"]))
            removed.append(item)
        except FileNotFoundError:
            pass  # unlinked meanwhile by its owner
        except OSError as exc:
            item["why"] = "unlink failed: %s" % exc
            keep.append(item)
    return shm_sweep_line(removed, keep, shm_dir, user)


# ----------------------------------------------------------------------------- commands

def cmd_clean_start(args):
    me = os.getpid()
    mine = parse_cgroup(_read("/proc/self/cgroup"))
    unit = args.unit
    if args.no_clean:
        return _backoff(args)
    if unit_of_cgroup(mine) not in (unit, None):
        _say("sglang-clean-start: not running inside %s (cgroup %s): nothing ended" % (unit, mine))
        return _backoff(args)
    own, _spared = own_leftovers(_scan_with_cgroups(), unit, os.geteuid(),
                                 protected=procs.ancestors(me), title_prefix=args.title_prefix)
    holders = _device_holders(_device_paths(args.dev_dir))
    ended = []
    if own:
        targets = [{"pid": p["pid"], "starttime": p["starttime"]} for p in own]
        for t in targets:
            procs.send_signal(t["pid"], "TERM", t["starttime"])
        left = procs.wait_gone(targets, time.monotonic() + args.grace)
        for t in left:
            procs.send_signal(t["pid"], "KILL", t["starttime"])
        left = procs.wait_gone(left, time.monotonic() + 5)
        ended = ["%d %s%s" % (p["pid"], (p["argv"] or [p["comm"]])[0],
                              " (GPU)" if p["pid"] in holders else "") for p in own]
        if left:
            _say("sglang-clean-start: %d leftover process(es) of %s survived SIGKILL: %s"
                 % (len(left), unit, " ".join(str(t["pid"]) for t in left)))
            return 1
    pids = set(p["pid"] for p in own)
    t0 = time.monotonic()
    waited_for_gpu = False
    while pids:
        still = _gpu_apps(args.nvidia_smi)
        still = (still or set()) & pids
        still |= _device_holders(_device_paths(args.dev_dir)) & pids
        if not still:
            break
        waited_for_gpu = True
        if time.monotonic() - t0 > args.wait:
            _say("sglang-clean-start: GPU memory of %s's leftovers still held after %ds: %s"
                 % (unit, args.wait, " ".join(str(p) for p in sorted(still))))
            return 1
        time.sleep(0.5)
    if own:
        _say("sglang-clean-start: ended %d leftover process(es) of %s: %s; GPU memory back%s"
             % (len(own), unit, ", ".join(ended),
                " after %.1fs" % (time.monotonic() - t0) if waited_for_gpu else ""))
    if args.shm_dir:
        uid = os.geteuid()
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = "uid %d" % uid
        line = sweep_shm(args.shm_dir, uid, user)
        if line:
            _say(line)
    return _backoff(args)


def _backoff(args):
    # Only systemd's own restarts back off; a start by hand or by a play goes ahead at once.
    try:
        restarts = int(_systemctl_show(args.unit, ["NRestarts"]).get("NRestarts") or 0)
    except ValueError:
        restarts = 0
    if not restarts:
        return 0
    status = _load_json(os.path.join(args.state_dir, STATUS_FILE))
    failures = int(status.get("consecutive_failures") or 0)
    if args.max_failures and failures >= args.max_failures:
        # systemd's start limit counts starts within a window, which a slow failure (minutes of
        # weight loading before the OOM) never fills; this counts failed starts in a row. The
        # quick refusals that follow fill the start limit, and the unit stays failed.
        last = status.get("last_failure") or {}
        _say("sglang-clean-start: crash-loop brake: %d failed start(s) in a row (last: %s%s); not "
             "starting again until started by hand or by a play" % (
                 failures, last.get("class"), ": %s" % last["line"] if last.get("line") else ""))
        return BRAKE_EXIT
    delay = backoff_delay(int(status.get("consecutive_failures") or 0), args.backoff_base,
                          args.backoff_max)
    if delay:
        _say("sglang-clean-start: %d failed start(s) in a row (last: %s): backing off %ds"
             % (status.get("consecutive_failures"),
                (status.get("last_failure") or {}).get("class"), delay))
        time.sleep(delay)
    return 0


def cmd_record_exit(args):
    path = os.path.join(args.state_dir, STATUS_FILE)
    env = os.environ
    result = env.get("SERVICE_RESULT", "")
    lines = _journal_lines(env.get("INVOCATION_ID"))
    # The journal may lag the process's last writes by a moment. SGLang kills itself after an
    # init failure (SIGKILL), so the result says little: wait while its lines say it was going
    # down without a cause yet, briefly otherwise (a plain crash writes nothing).
    start = time.monotonic()
    while result not in ("success", "") and journal.classify(lines)[0] == "unknown":
        waited = time.monotonic() - start
        if waited >= args.journal_wait or (waited >= 0.5 and not journal.is_fatal(lines)):
            break
        time.sleep(0.25)
        lines = _journal_lines(env.get("INVOCATION_ID"))
    show = _systemctl_show(args.unit, ["NRestarts"])
    try:
        restarts = int(show.get("NRestarts", "0"))
    except ValueError:
        restarts = 0
    status = next_status(_load_json(path), result, env.get("EXIT_CODE", ""),
                         env.get("EXIT_STATUS", ""), lines, restarts,
                         time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    status["unit"] = args.unit
    write_json(path, status)
    if status.get("braked"):
        pass  # the clean start said it in the journal
    elif status.get("interrupted_backoff"):
        _say("sglang-record-exit: %s stopped while the clean start was backing off; no new failure"
             " (%d failed start(s) in a row so far)" % (args.unit, status["consecutive_failures"]))
    elif status["failed"]:
        failure = status["last_failure"]
        _say("sglang-record-exit: %s ended (%s, %s=%s), failure class %s%s; %d failed start(s) in a row"
             % (args.unit, result, env.get("EXIT_CODE", ""), env.get("EXIT_STATUS", ""),
                failure["class"], ": %s" % failure["line"] if failure["line"] else "",
                status["consecutive_failures"]))
    return 0


def read_api_key(path):
    """The key of the SGLang --config file (``api-key: "<json string>"``); '' when none."""
    text = _read(path) if path else None
    for line in (text or "").splitlines():
        stripped = line.strip()
        for name in ("api-key:", "api_key:"):
            if stripped.startswith(name):
                value = stripped[len(name):].strip()
                try:
                    return str(json.loads(value))
                except ValueError:
                    return value.strip("'\"")
    return ""


def probe_tokens(base_url, key, max_tokens, deadline):
    """(health_ok, tokens): /health's answer, then tokens of one small /generate within
    ``deadline`` seconds (0 when none arrive; minus the HTTP status when it was refused)."""
    health_ok = False
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=min(deadline, 30)) as resp:
            health_ok = resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        health_ok = False
    body = json.dumps({"text": "The capital of France is",
                       "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0,
                                           "ignore_eos": True}}).encode()
    req = urllib.request.Request(base_url + "/generate", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=deadline) as resp:
            data = json.loads(resp.read().decode("utf-8", "replace"))
        meta = data.get("meta_info") or {}
        tokens = int(meta.get("completion_tokens") or len(data.get("output_ids") or []))
    except urllib.error.HTTPError as exc:
        return health_ok, -exc.code
    except (urllib.error.URLError, OSError, ValueError, TypeError, AttributeError):
        tokens = 0
    return health_ok, tokens


def cmd_watchdog(args):
    path = os.path.join(args.state_dir, WATCHDOG_FILE)
    state = _load_json(path)
    history = [float(t) for t in state.get("restart_times", [])]
    show = _systemctl_show(args.unit, ["ActiveState", "InvocationID"])
    active = show.get("ActiveState") == "active"
    ready = active and journal.saw_ready(_journal_lines(show.get("InvocationID")))
    health_ok, tokens = (False, 0)
    if ready:
        health_ok, tokens = probe_tokens(args.url, read_api_key(args.config), args.tokens,
                                         args.deadline)
    if ready and not tokens:
        # A start or stop by systemd while the probe ran is not a wedge of this server.
        again = _systemctl_show(args.unit, ["ActiveState", "InvocationID"])
        if again.get("ActiveState") != "active" or again.get("InvocationID") != show.get("InvocationID"):
            active = False
    now = time.time()
    action, reason = watchdog_decision(active, ready, health_ok, tokens, history, now,
                                       args.max_restarts, args.window)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    state.update({"unit": args.unit, "last_check": stamp, "last_result": reason,
                  "ready": bool(ready and tokens > 0), "invocation_id": show.get("InvocationID")})
    actions = list(state.get("actions", []))
    if action != "none":
        verb = "restarting" if action == "restart" else "stopping"
        _say("sglang-watchdog: %s %s: %s" % (verb, args.unit, reason))
        actions.append({"time": stamp, "action": action, "reason": reason})
        if action == "restart":
            history.append(now)
            state["gave_up"] = False
        else:
            state["gave_up"] = True
            state["gave_up_at"] = stamp
        state["actions"] = actions[-20:]
        state["restart_times"] = [t for t in history if now - t < args.window]
        state["restarts_total"] = int(state.get("restarts_total", 0)) + (action == "restart")
        write_json(path, state)
        res = subprocess.run(["systemctl", "--no-block", action, args.unit],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60,
                             check=False)
        if res.returncode != 0:
            _say("sglang-watchdog: systemctl %s %s failed: %s"
                 % (action, args.unit, res.stdout.decode("utf-8", "replace").strip()))
            return 1
        return 0
    state["actions"] = actions[-20:]
    state["restart_times"] = [t for t in history if now - t < args.window]
    write_json(path, state)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="sglang_unit_guard")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("clean-start", "record-exit", "watchdog"):
        p = sub.add_parser(name)
        p.add_argument("--unit", required=True)
        p.add_argument("--state-dir", required=True)
        if name == "clean-start":
            p.add_argument("--grace", type=float, default=10.0)
            p.add_argument("--wait", type=float, default=60.0)
            p.add_argument("--dev-dir", default="/dev")
            p.add_argument("--nvidia-smi", default="nvidia-smi")
            p.add_argument("--backoff-base", type=float, default=0.0)
            p.add_argument("--backoff-max", type=float, default=0.0)
            p.add_argument("--max-failures", type=int, default=0,
                           help="refuse systemd's restarts after this many failed starts in a row (0 = off)")
            p.add_argument("--title-prefix", default=TITLE_PREFIX,
                           help="process titles taken as SGLang's")
            p.add_argument("--no-clean", action="store_true",
                           help="only back off; end nothing")
            p.add_argument("--shm-dir", default="",
                           help="sweep this directory (/dev/shm) of SGLang's leaked segments ('' = off)")
        elif name == "record-exit":
            p.add_argument("--journal-wait", type=float, default=3.0)
        else:
            p.add_argument("--url", required=True)
            p.add_argument("--config", default="")
            p.add_argument("--tokens", type=int, default=4)
            p.add_argument("--deadline", type=float, default=30.0)
            p.add_argument("--max-restarts", type=int, default=3)
            p.add_argument("--window", type=float, default=3600.0)
    args = parser.parse_args(argv)
    handler = {"clean-start": cmd_clean_start, "record-exit": cmd_record_exit,
               "watchdog": cmd_watchdog}[args.cmd]
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
