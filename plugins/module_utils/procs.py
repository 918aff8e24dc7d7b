# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Process helpers shared by the GPU modules: /proc scanning, `fuser` output parsing,
pid selection (allow/deny) and a subprocess runner with a timeout.

Everything that decides *which* pid may be signalled is a pure function of its inputs
(a proc root directory, lists of pids and users), so it can be unit-tested against a fake
/proc tree without ever touching a real process. Stdlib only, Python >= 3.9.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import signal
import time

# SGLang's own sweep set (python/sglang/cli/killall.py, scripts/killall_sglang.sh) plus the
# simulator's server, as plain substrings of the command line / process title.
DEFAULT_SGLANG_PATTERNS = (
    "sglang::",
    "sglang.launch_server",
    "sglang_sim.launch_server",
    "sglang.srt",
    "sglang.bench",
    "sglang.data_parallel",
)

SIGNALS = {
    "TERM": signal.SIGTERM,
    "KILL": signal.SIGKILL,
    "INT": signal.SIGINT,
    "HUP": signal.SIGHUP,
}


# --------------------------------------------------------------------------------------
# /proc
# --------------------------------------------------------------------------------------

def _read(path, binary=False):
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def _user_name(uid):
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def parse_stat(text):
    """Parse /proc/<pid>/stat. The comm field is in parentheses and may itself contain
    spaces and parentheses, so split at the *last* ')'. Returns a dict or None."""
    if not text:
        return None
    open_at = text.find("(")
    close_at = text.rfind(")")
    if open_at < 0 or close_at < open_at:
        return None
    try:
        pid = int(text[:open_at].strip())
    except ValueError:
        return None
    rest = text[close_at + 1:].split()
    # rest[0] is field 3 (state); starttime is field 22.
    if len(rest) < 20:
        return None
    try:
        return {
            "pid": pid,
            "comm": text[open_at + 1:close_at],
            "state": rest[0],
            "ppid": int(rest[1]),
            "pgrp": int(rest[2]),
            "starttime": int(rest[19]),
        }
    except ValueError:
        return None


def parse_status_uid(text):
    """Effective uid from /proc/<pid>/status (the user `ps` shows), or None."""
    for line in (text or "").splitlines():
        if line.startswith("Uid:"):
            parts = line.split()
            if len(parts) >= 3:
                try:
                    return int(parts[2])
                except ValueError:
                    return None
    return None


def parse_cmdline(raw):
    """argv list from the raw bytes of /proc/<pid>/cmdline. A process that set its title
    (SGLang's children use setproctitle) may leave one string padded with NULs/spaces."""
    if not raw:
        return []
    text = raw.decode("utf-8", "replace")
    return [part for part in text.split("\0") if part != ""]


def read_process(pid, proc_root="/proc"):
    """Snapshot of one process, or None when it is gone (or unreadable)."""
    base = os.path.join(proc_root, str(pid))
    stat = parse_stat(_read(os.path.join(base, "stat")))
    if stat is None:
        return None
    argv = parse_cmdline(_read(os.path.join(base, "cmdline"), binary=True))
    uid = parse_status_uid(_read(os.path.join(base, "status")))
    return {
        "pid": stat["pid"],
        "ppid": stat["ppid"],
        "state": stat["state"],
        "starttime": stat["starttime"],
        "comm": stat["comm"],
        "argv": argv,
        "cmdline": " ".join(argv).strip(),
        "uid": uid,
        "user": _user_name(uid),
    }


def list_pids(proc_root="/proc"):
    try:
        names = os.listdir(proc_root)
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def scan(proc_root="/proc"):
    """All readable processes, skipping kernel threads (no command line)."""
    procs = []
    for pid in list_pids(proc_root):
        proc = read_process(pid, proc_root)
        if proc is None or not proc["argv"]:
            continue
        procs.append(proc)
    return procs


def is_alive(pid, starttime=None, proc_root="/proc"):
    """True while `pid` exists, is not a zombie, and (if given) still has the start time we
    saw, so a recycled pid is never mistaken for the process we signalled."""
    stat = parse_stat(_read(os.path.join(proc_root, str(pid), "stat")))
    if stat is None:
        return False
    if stat["state"] in ("Z", "X", "x"):
        return False
    if starttime is not None and stat["starttime"] != starttime:
        return False
    return True


def ancestors(pid, proc_root="/proc"):
    """Pids from `pid` up to (not including) 0: the process itself, its parent, ... PID 1."""
    chain = []
    seen = set()
    current = pid
    while current and current not in seen:
        seen.add(current)
        chain.append(current)
        stat = parse_stat(_read(os.path.join(proc_root, str(current), "stat")))
        if stat is None:
            break
        current = stat["ppid"]
    return chain


def match_pattern(proc, patterns):
    """First pattern (plain substring) found in the command line or the process name."""
    haystacks = (proc.get("cmdline") or "", proc.get("comm") or "")
    for pattern in patterns:
        if not pattern:
            continue
        for hay in haystacks:
            if pattern in hay:
                return pattern
    return None


def find_matching(procs, patterns):
    """Processes whose command line matches one of `patterns`, with the pattern recorded."""
    found = []
    for proc in procs:
        pattern = match_pattern(proc, patterns)
        if pattern is not None:
            item = dict(proc)
            item["pattern"] = pattern
            found.append(item)
    return found


def device_files(patterns):
    """The files the glob ``patterns`` name (e.g. /dev/nvidia*), absolute, each once, in pattern
    order then name order; directories such as /dev/nvidia-caps are left out: they are not
    something a process holds open."""
    found = []
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            path = os.path.abspath(path)
            if path not in found and not os.path.isdir(path):
                found.append(path)
    return found


def holders_from_proc(paths, proc_root="/proc"):
    """Who holds any of `paths` open or mapped, read straight from /proc/<pid>/fd and
    /proc/<pid>/maps. Used when `fuser` (psmisc) is not installed; same result shape as
    parse_fuser()."""
    wanted = set(os.path.realpath(p) for p in paths) | set(paths)
    holders = {}
    for pid in list_pids(proc_root):
        base = os.path.join(proc_root, str(pid))
        hits = {}
        try:
            fds = os.listdir(os.path.join(base, "fd"))
        except OSError:
            fds = []
        for fd in fds:
            try:
                target = os.readlink(os.path.join(base, "fd", fd))
            except OSError:
                continue
            if target in wanted:
                hits.setdefault(target, set()).add("f")
        maps = _read(os.path.join(base, "maps")) or ""
        for line in maps.splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5] in wanted:
                hits.setdefault(parts[5], set()).add("m")
        if not hits:
            continue
        proc = read_process(pid, proc_root) or {}
        access = set()
        for letters in hits.values():
            access |= letters
        holders[pid] = {
            "pid": pid,
            "user": proc.get("user"),
            "command": proc.get("comm"),
            "access": "".join(sorted(access)),
            "devices": sorted(hits),
            "cmdline": proc.get("cmdline"),
        }
    return [holders[pid] for pid in sorted(holders)]


# --------------------------------------------------------------------------------------
# fuser (psmisc)
# --------------------------------------------------------------------------------------

# `fuser -v` row: USER PID ACCESS COMMAND; ACCESS is five flag columns like "F...m".
_VERBOSE_ROW = re.compile(r"^\s*(?P<user>\S+)\s+(?P<pid>\d+)\s+(?P<access>[A-Za-z.]{5})\s+(?P<command>.*?)\s*$")
# Kernel users (mounts, swap) have no pid: "root kernel mount /dev/x".
_VERBOSE_KERNEL = re.compile(r"^\s*\S+\s+kernel\s+")
_PLAIN_TOKEN = re.compile(r"^(?P<pid>\d+)(?P<access>[cefFrm]*)$")
_NOISE_PREFIXES = ("Cannot stat", "Specified filename", "No process specification")


def _split_name(line, names):
    """(name, rest) when the line starts with '<file>:', else (None, line)."""
    if not line or line[0].isspace():
        return None, line
    for name in sorted(names or (), key=len, reverse=True):
        if line.startswith(name + ":"):
            return name, line[len(name) + 1:]
    match = re.match(r"^(\S+):(?:\s+(.*))?$", line)
    if match:
        return match.group(1), match.group(2) or ""
    return None, line


def parse_fuser(output, names=None):
    """Parse `fuser [-v] FILE...` output into holders.

    Accepts the forms a module can see:
      * stdout and stderr merged (what a terminal shows), `-v` form:
        ``/dev/nvidia0:        root        419 F...m python3`` (or the row on the next line
        when the file name is long);
      * merged, plain form: ``/dev/nvidia0:          419m`` (several pids per line);
      * stdout alone, plain: only the pids (fuser writes names and access letters to
        stderr), so the device is unknown.
    Noise such as ``Cannot stat file /proc/1/fd/0: Permission denied`` is ignored.

    Returns a list of {pid, user, command, access, devices}, sorted by pid.
    """
    holders = {}

    def add(pid, device, user=None, command=None, access=""):
        entry = holders.setdefault(pid, {"pid": pid, "user": None, "command": None, "access": set(), "devices": []})
        if user and not entry["user"]:
            entry["user"] = user
        if command and not entry["command"]:
            entry["command"] = command
        entry["access"].update(ch for ch in (access or "") if ch != ".")
        if device and device not in entry["devices"]:
            entry["devices"].append(device)

    current = None
    for raw in (output or "").splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        stripped = line.strip()
        if stripped.startswith(_NOISE_PREFIXES):
            continue
        if stripped.split() == ["USER", "PID", "ACCESS", "COMMAND"]:
            continue
        name, rest = _split_name(line, names)
        if name is not None:
            current = name
        rest = rest.strip()
        if not rest:
            continue
        row = _VERBOSE_ROW.match(rest)
        if row:
            add(int(row.group("pid")), current, row.group("user"), row.group("command"), row.group("access"))
            continue
        if _VERBOSE_KERNEL.match(rest):
            continue
        for token in rest.split():
            plain = _PLAIN_TOKEN.match(token)
            if plain:
                add(int(plain.group("pid")), current, access=plain.group("access"))
    result = []
    for pid in sorted(holders):
        entry = holders[pid]
        entry["access"] = "".join(sorted(entry["access"]))
        result.append(entry)
    return result


def enrich_holders(holders, proc_root="/proc"):
    """Fill user/command where fuser's plain form left them out, and add the command line
    (fuser shows only the 15-character comm; a process title such as
    sglang::scheduler_TP0 is in the command line). Holders that vanished keep None."""
    for holder in holders:
        proc = read_process(holder["pid"], proc_root) or {}
        holder["user"] = holder.get("user") or proc.get("user")
        holder["command"] = holder.get("command") or proc.get("comm")
        holder["cmdline"] = proc.get("cmdline")
    return holders


def fuser_argv(fuser_bin, paths):
    """argv that lists holders; run it with stderr merged into stdout (the only form
    that ties each pid to its file: fuser writes pids to stdout and the rest to stderr,
    flushing as it goes, so the merge keeps the order)."""
    return [fuser_bin, "-v"] + list(paths)


# --------------------------------------------------------------------------------------
# selection (allow / deny)
# --------------------------------------------------------------------------------------

# Processes that keep /dev/nvidia* open without using GPU memory: the persistence daemon
# (holds every device for as long as it runs), DCGM's host engine, the power daemon, and
# nvidia-smi itself when a monitor runs it while we look.
DEFAULT_IGNORED_HOLDERS = ("nvidia-persistenced", "nv-hostengine", "nvidia-powerd", "nvidia-smi", "dcgm-exporter")


def holder_names(holder):
    """Names a holder goes by: its comm (15 characters at most) and argv[0]'s basename."""
    names = set()
    if holder.get("command"):
        names.add(holder["command"])
    cmdline = holder.get("cmdline") or ""
    if cmdline.split():
        names.add(os.path.basename(cmdline.split()[0]))
    return names


def is_ignored(holder, ignored):
    """True when the holder is one of `ignored` (names; the kernel cuts comm to 15 chars)."""
    for name in holder_names(holder):
        for wanted in ignored or ():
            if name == wanted or (len(name) == 15 and wanted[:15] == name):
                return True
    return False


def select_targets(candidates, protected_pids=(), only_pids=None, exclude_pids=(), exclude_users=()):
    """Split candidate processes into (allowed, refused).

    A candidate is refused when it is protected (the module itself and its ancestors),
    listed in `exclude_pids`, owned by a user in `exclude_users`, or -- when `only_pids`
    is given (even empty) -- not listed there. Each refused item carries `reason`.
    """
    protected = set(int(p) for p in protected_pids)
    excluded = set(int(p) for p in exclude_pids or ())
    users = set(exclude_users or ())
    allow = None if only_pids is None else set(int(p) for p in only_pids)
    allowed, refused = [], []
    for cand in candidates:
        pid = int(cand["pid"])
        reason = None
        if pid in protected:
            reason = "protected (this module or one of its parents)"
        elif pid in excluded:
            reason = "in exclude_pids"
        elif cand.get("user") is not None and cand.get("user") in users:
            reason = "user %s in exclude_users" % cand.get("user")
        elif allow is not None and pid not in allow:
            reason = "not in only_pids"
        if reason is None:
            allowed.append(cand)
        else:
            item = dict(cand)
            item["reason"] = reason
            refused.append(item)
    return allowed, refused


# --------------------------------------------------------------------------------------
# signals and commands
# --------------------------------------------------------------------------------------

def send_signal(pid, signame, starttime=None, proc_root="/proc", kill=os.kill):
    """Signal one pid if it is still the process we saw. Returns True when sent."""
    if not is_alive(pid, starttime, proc_root):
        return False
    try:
        kill(pid, SIGNALS[signame])
    except ProcessLookupError:
        return False
    return True


def wait_gone(targets, deadline, proc_root="/proc", interval=0.1, clock=time.monotonic, sleep=time.sleep):
    """Poll until every {pid, starttime} in `targets` is gone or `deadline` passes.
    Returns the targets still alive."""
    alive = list(targets)
    while True:
        alive = [t for t in alive if is_alive(t["pid"], t.get("starttime"), proc_root)]
        if not alive or clock() >= deadline:
            return alive
        sleep(min(interval, max(0.0, deadline - clock())))


def find_binary(name, get_bin_path):
    """Path of an executable: `name` itself when it contains a slash, else a search of PATH
    plus the usual system directories (Ansible runs modules with a minimal PATH)."""
    if not name:
        return None
    if os.path.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    return get_bin_path(name, opt_dirs=["/usr/bin", "/usr/sbin", "/usr/local/bin", "/sbin", "/bin"])


class CommandTimeout(Exception):
    pass


# rc of coreutils `timeout` when the limit hit (124) or when it had to SIGKILL (128+9).
TIMEOUT_RCS = (124, 137)


def run_with_timeout(run_command, argv, timeout=None, merge_stderr=False, timeout_bin=None):
    """Run a command through `run_command` (AnsibleModule.run_command) with a wall-clock
    limit enforced by coreutils `timeout` (`timeout_bin`; no limit without it).

    nvidia-smi can hang for minutes when a GPU falls off the bus, so every call gets a
    limit. `merge_stderr` sends stderr into stdout through `sh -c 'exec "$0" "$@" 2>&1'`
    (arguments stay positional, nothing is parsed by the shell). Returns (rc, stdout,
    stderr); raises CommandTimeout, or OSError when the binary cannot be run.
    """
    cmd = list(argv)
    if merge_stderr:
        cmd = ["/bin/sh", "-c", 'exec "$0" "$@" 2>&1'] + cmd
    if timeout and timeout_bin:
        cmd = [timeout_bin, "--kill-after=5", "%g" % timeout] + cmd
    rc, out, err = run_command(cmd, environ_update={"LC_ALL": "C", "LANG": "C"}, expand_user_and_vars=False,
                               handle_exceptions=False)
    if timeout and timeout_bin and rc in TIMEOUT_RCS:
        raise CommandTimeout("%s did not finish within %g seconds" % (argv[0], timeout))
    return rc, out, err


# --------------------------------------------------------------------------------------
# who holds a TCP port
# --------------------------------------------------------------------------------------

# /proc/net/tcp socket states (include/net/tcp_states.h): LISTEN, and CLOSE for a socket that is
# bound but not listening (still enough to make the next bind fail with EADDRINUSE).
_TCP_LISTEN = "0A"
_TCP_CLOSE = "07"


def parse_proc_net_tcp(text, port):
    """Inodes of the sockets in a /proc/net/tcp or tcp6 table bound to local ``port`` with no
    peer (listening, or bound and not listening): ``{inode: state}``, state ``listen`` or
    ``bound``. Connected sockets (a client's, or one a server accepted) are left out."""
    found = {}
    for line in (text or "").splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10:
            continue
        local, remote, state, inode = parts[1], parts[2], parts[3].upper(), parts[9]
        if state not in (_TCP_LISTEN, _TCP_CLOSE) or ":" not in local:
            continue
        try:
            local_port = int(local.rsplit(":", 1)[1], 16)
            remote_port = int(remote.rsplit(":", 1)[1], 16)
        except (ValueError, IndexError):
            continue
        if local_port != int(port) or remote_port != 0 or inode in ("0", ""):
            continue
        found[inode] = "listen" if state == _TCP_LISTEN else "bound"
    return found


def port_holders(port, proc_root="/proc"):
    """Processes that hold TCP ``port`` (listening or bound), read from /proc: the sockets of
    /proc/net/tcp and tcp6 on that port, then each process whose /proc/<pid>/fd links to one
    of them (``socket:[inode]``). Returns ``[{pid, user, command, cmdline, state}]`` sorted by
    pid; a process whose fds cannot be read (another user's, without root) is not seen. What
    ``ss -ltnp`` shows, without needing iproute2 on the node."""
    inodes = {}
    for table in ("tcp", "tcp6"):
        inodes.update(parse_proc_net_tcp(_read(os.path.join(proc_root, "net", table)), port))
    if not inodes:
        return []
    wanted = dict(("socket:[%s]" % inode, state) for inode, state in inodes.items())
    out = []
    for pid in list_pids(proc_root):
        fd_dir = os.path.join(proc_root, str(pid), "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        state = None
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target in wanted:
                state = wanted[target]
                break
        if state is None:
            continue
        proc = read_process(pid, proc_root) or {}
        out.append({"pid": pid, "user": proc.get("user"), "command": proc.get("comm"),
                    "cmdline": proc.get("cmdline"), "state": state})
    return out


def describe_holders(holders, limit=3):
    """``pid 123 (python3 -m http.server 30000)``, joined with '; ', for a message."""
    parts = []
    for holder in (holders or [])[:limit]:
        what = holder.get("cmdline") or holder.get("command") or "?"
        if len(what) > 120:
            what = what[:117] + "..."
        parts.append("pid %s (%s%s)" % (holder.get("pid"), what,
                                        ", user %s" % holder["user"] if holder.get("user") else ""))
    if holders and len(holders) > limit:
        parts.append("%d more" % (len(holders) - limit))
    return "; ".join(parts)
