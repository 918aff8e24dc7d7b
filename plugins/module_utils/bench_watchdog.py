# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""A watchdog for a long module run on the node: stop it at its deadline or when the controller
that started it is gone, instead of loading the server for minutes nobody will read.

Why these signals: a module never learns that ``ansible-playbook`` died; it only sees what the
connection leaves behind on the node.

- Over SSH the module's stdout is a pipe (or socket pair) read by ``sshd``. When the controller
  dies the channel closes, ``sshd`` closes its end, and a poll on fd 1 reports POLLERR/POLLHUP
  (with ControlPersist the session process stays, so this is the sign that matters); without
  ControlPersist the ``sshd`` session process exits too, which the ancestor check sees.
- Under the ``local`` connection an ancestor (the worker, then ``ansible-playbook``) exits.
- Under ``docker exec`` (community.docker.docker / docker_api) neither happens: the Docker daemon
  keeps the exec's pipes open after its client is gone, so only the deadline holds there.

Stdlib only; the decision (``controller_gone``) is a pure function of two observations so that
tests can drive it without processes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import select
import threading
import time

from ansible_collections.blackwell.sglang.plugins.module_utils.procs import parse_stat


def _stat(pid, proc="/proc"):
    """/proc/<pid>/stat parsed by procs.parse_stat, or None when the pid is gone."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), "rb") as fh:
            return parse_stat(fh.read().decode("ascii", "replace"))
    except (IOError, OSError):
        return None


def proc_start_time(pid, proc="/proc"):
    """Field 22 of /proc/<pid>/stat (start time in clock ticks), or None when the pid is gone.

    A pid together with its start time names one process even if the pid is reused."""
    st = _stat(pid, proc)
    return st["starttime"] if st else None


def parent_of(pid, proc="/proc"):
    st = _stat(pid, proc)
    return st["ppid"] if st else None


def ancestors(pid=None, proc="/proc"):
    """[(pid, start time)] from the parent of ``pid`` up to, not including, pid 1 (or the edge of
    the PID namespace, where the parent reads 0)."""
    pid = os.getpid() if pid is None else pid
    out = []
    cur = parent_of(pid, proc)
    seen = set()
    while cur and cur > 1 and cur not in seen:
        seen.add(cur)
        start = proc_start_time(cur, proc)
        if start is None:
            break
        out.append((cur, start))
        cur = parent_of(cur, proc)
    return out


def gone_ancestors(chain, proc="/proc"):
    """The members of ``chain`` (from ``ancestors``) that no longer run."""
    return [pid for pid, start in chain if proc_start_time(pid, proc) != start]


def stdout_closed(fd=1):
    """True when the reader of ``fd`` (a pipe or socket) has gone: POLLERR or POLLHUP.

    A terminal or regular file never reports that, so the check is harmless elsewhere."""
    try:
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR/POLLHUP/POLLNVAL are reported whatever is asked
        events = poller.poll(0)
    except (OSError, ValueError, AttributeError):
        return False
    for _fd, ev in events:
        if ev & (select.POLLERR | select.POLLHUP):
            return True
    return False


def controller_gone(gone, out_closed):
    """Decision: the reason the controller counts as gone, or None.

    ``gone``: pids of vanished ancestors; ``out_closed``: whether stdout lost its reader."""
    if out_closed:
        return "the connection that started it closed (nobody reads its output any more)"
    if gone:
        return "the process that started it exited (pid %s)" % ", ".join(str(p) for p in gone)
    return None


def deadline_passed(started, deadline_s, now):
    """True when ``deadline_s`` seconds (None: no deadline) have passed since ``started``."""
    return deadline_s is not None and now - started >= float(deadline_s)


class Watchdog(object):
    """Background thread that calls ``on_stop(reason, kind)`` once, where kind is ``deadline`` or
    ``controller``. ``on_stop`` is expected to end the process (it runs in the watchdog thread)."""

    def __init__(self, on_stop, deadline_s=None, watch_controller=True, interval=0.5, fd=1,
                 clock=time.monotonic):
        self.on_stop = on_stop
        self.deadline_s = deadline_s
        self.watch_controller = watch_controller
        self.interval = interval
        self.fd = fd
        self.clock = clock
        self.started = clock()
        self.chain = ancestors() if watch_controller else []
        self._stop = threading.Event()
        self._thread = None
        self.fired = None

    def check(self):
        """One look: (reason, kind) or None."""
        if deadline_passed(self.started, self.deadline_s, self.clock()):
            return ("it ran past its deadline of %s s" % self.deadline_s, "deadline")
        if self.watch_controller:
            why = controller_gone(gone_ancestors(self.chain), stdout_closed(self.fd))
            if why:
                return (why, "controller")
        return None

    def _run(self):
        while not self._stop.wait(self.interval):
            found = self.check()
            if found:
                self.fired = found
                self.on_stop(*found)
                return

    def start(self):
        if self.deadline_s is None and not self.watch_controller:
            return self
        self._thread = threading.Thread(target=self._run, name="bench-watchdog")
        self._thread.daemon = True
        self._thread.start()
        return self

    def cancel(self):
        self._stop.set()
