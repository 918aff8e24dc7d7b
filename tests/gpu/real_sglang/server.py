# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Start and stop an SGLang-compatible server as a plain process, for machines without systemd.

The collection launches SGLang through a systemd unit and judges a launch with
``sglang_service_wait``; the lent GPU machine has no systemd, so this module does the same
three things by hand for the real ``sglang.launch_server`` and for ``sglang_sim.launch_server``:

- ``Server.start()`` runs ``python -m <module> <argv>`` in a session of its own, so that the
  server and every process it spawns (schedulers, detokenizer) share one process group that can
  be signalled as a whole, and nothing else shares it;
- ``Server.wait_ready()`` applies the role's readiness rule (``/health_generate`` answers 200 and
  a tiny ``/generate`` returns tokens) plus SGLang's own ready line, and classifies a launch that
  dies or hangs with the collection's journal classifier, so a failure reads the same as on a
  systemd node;
- ``Server.stop()`` ends that group only (SIGTERM, SIGKILL after a grace) and reports what was
  still in it: SGLang's rank processes outliving their parent is a known failure mode.

``wait_gpu_idle()`` waits until the GPU memory the last server held is given back, so the next
launch does not start (and get measured) next to a dying one.

Stdlib only, plus the collection's own ``module_utils`` (imported from this checkout).
"""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

# RS_COLLECTION_ROOT: the checkout to import when these scripts run from a copy outside it
# (the lent machine runs copies carried beside the checkout).
ROOT = os.environ.get("RS_COLLECTION_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_COLLECTION = "ansible_collections.blackwell.sglang"


def import_collection():
    """Make this checkout importable as ``ansible_collections.blackwell.sglang``.

    Same layout as tests/conftest.py, but the symlink lives in a temporary directory (removed
    at exit), so the tools work from a read-only or freshly copied checkout on a machine that
    has neither ansible-core nor the collection installed.  A copy that already resolves to
    this checkout (pytest's conftest) is used as it is.
    """
    try:
        import ansible_collections.blackwell.sglang as mod  # pylint: disable=import-outside-toplevel
        paths = list(getattr(mod, "__path__", []))
        if any(os.path.realpath(p) == os.path.realpath(ROOT) for p in paths):
            return
    except ImportError:
        pass
    tmp = tempfile.mkdtemp(prefix="blackwell-sglang-")
    link = os.path.join(tmp, "ansible_collections", "blackwell", "sglang")
    os.makedirs(os.path.dirname(link))
    os.symlink(ROOT, link, target_is_directory=True)
    atexit.register(_remove_link, tmp, link)
    sys.path.insert(0, tmp)
    # A namespace package imported before (another copy) caches its portions; drop it so the
    # next import finds this checkout first.
    for name in [n for n in sys.modules if n == "ansible_collections" or n.startswith("ansible_collections.")]:
        del sys.modules[name]


def _remove_link(tmp, link):
    # Unlink first: the tree removal must never walk into the checkout the link points at.
    try:
        os.unlink(link)
    except OSError:
        pass
    shutil.rmtree(tmp, ignore_errors=True)


import_collection()

# pylint: disable=wrong-import-position
from ansible_collections.blackwell.sglang.plugins.module_utils import journal  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.module_utils import nvidia  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.module_utils import procs  # noqa: E402

READY_LINE = "The server is fired up and ready to roll!"
PROBE_PROMPT = "The capital of France is"
PROBE_TOKENS = 4
# Seconds a server that logged a fatal error is given to exit before the wait reports it.
FATAL_EXIT_GRACE_S = 5.0
TAIL_LINES = 40


def _http(method, url, body=None, timeout=5.0):
    """(status, text) of one loopback request; status None when nothing answered."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (OSError, ValueError) as exc:  # refused, reset, timed out, malformed answer
        return None, str(exc)


def _live_stat(pid):
    """The collection's parse of /proc/<pid>/stat for a live process; None when gone or a zombie
    (a zombie holds no GPU and no port)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            st = procs.parse_stat(fh.read().decode("utf-8", "replace"))
    except OSError:
        return None
    return None if st is None or st["state"] in ("Z", "X", "x") else st


def group_members(pgid):
    """Live pids whose process group is ``pgid``."""
    return [pid for pid in procs.list_pids() if (_live_stat(pid) or {}).get("pgrp") == pgid]


def pid_alive(pid):
    """True while ``pid`` runs (a zombie counts as gone)."""
    return procs.is_alive(pid)


class Server:
    """One server launch: a process group of its own, a log file, a loopback port.

    ``argv`` are the server's arguments (``--port`` included: the caller decides the port and
    passes it here too, for the probes); ``env`` replaces the environment when given.
    """

    def __init__(self, argv, log_path, port, env=None, python=sys.executable, module="sglang.launch_server",
                 host="127.0.0.1"):
        self.argv = list(argv)
        self.log_path = log_path
        self.port = int(port)
        self.env = env
        self.python = python
        self.module = module
        self.base_url = "http://%s:%d" % (host, self.port)
        self.proc = None
        self.pgid = None
        self.started_at = None
        self.descendants = set()
        self._log = None
        self._offset = 0
        self._lines = []
        self._partial = b""

    # -- lifecycle ------------------------------------------------------------------------
    def command(self):
        return [self.python, "-m", self.module] + self.argv

    def start(self):
        """Launch the server; its output goes after whatever the log already holds."""
        if self.proc is not None:
            raise RuntimeError("this Server was started already; make a new one per launch")
        self._log = open(self.log_path, "ab")  # pylint: disable=consider-using-with
        self._offset = self._log.tell()
        self.started_at = time.monotonic()
        try:
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
                self.command(), stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True)
        except OSError:
            self._log.close()
            self._log = None
            raise
        # A new session makes the child the leader of a new group whose id is its pid; that
        # group is the only one stop() ever signals.
        self.pgid = self.proc.pid
        return self

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    # -- log ------------------------------------------------------------------------------
    def log_lines(self):
        """This launch's log lines so far (the log may hold earlier launches before them)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return list(self._lines)
        self._offset += len(data)
        data = self._partial + data
        parts = data.splitlines(keepends=True)
        if parts and not parts[-1].endswith((b"\n", b"\r")):
            self._partial = parts.pop()
        else:
            self._partial = b""
        self._lines.extend(p.decode("utf-8", "replace").rstrip("\r\n") for p in parts)
        return list(self._lines)

    def _all_lines(self):
        lines = self.log_lines()
        if self._partial:
            lines.append(self._partial.decode("utf-8", "replace"))
        return lines

    # -- readiness ------------------------------------------------------------------------
    def _probe(self):
        """(ready, why not): the role's rule, cheapest check first."""
        status, text = _http("GET", self.base_url + "/model_info", timeout=5)
        if status != 200:
            return False, "/model_info: %s" % (status if status is not None else text)
        status, text = _http("GET", self.base_url + "/health_generate", timeout=60)
        if status != 200:
            return False, "/health_generate: %s" % (status if status is not None else text)
        body = {"text": PROBE_PROMPT,
                "sampling_params": {"max_new_tokens": PROBE_TOKENS, "temperature": 0, "ignore_eos": True}}
        status, text = _http("POST", self.base_url + "/generate", body, timeout=60)
        if status != 200:
            return False, "/generate: %s" % (status if status is not None else text)
        try:
            data = json.loads(text)
            data = data[0] if isinstance(data, list) else data
            tokens = int((data.get("meta_info") or {}).get("completion_tokens") or 0)
        except (ValueError, AttributeError, IndexError, TypeError):
            return False, "/generate returned no JSON object"
        if tokens < PROBE_TOKENS:
            return False, "/generate returned %d of %d tokens" % (tokens, PROBE_TOKENS)
        return True, None

    def _note_descendants(self):
        """Remember every process descended from the server: one that left our group (setsid)
        would escape stop(), and is then reported rather than silently left running."""
        parents = {self.proc.pid}
        for pid in procs.list_pids():
            st = _live_stat(pid)
            if st is not None and (st["ppid"] in parents or st["ppid"] in self.descendants):
                self.descendants.add(pid)

    def wait_ready(self, timeout, interval=1.0, require_ready_line=True):
        """Wait until the server serves, it dies, its log shows a fatal error, or ``timeout``.

        Returns ``{ready, seconds, exit_code, failure_class, failure_line, hint, reason,
        ready_line, log_tail}``; ``failure_class`` is the collection's (journal.classify), or
        ``timeout`` when the server neither served nor failed in time.
        """
        t0 = self.started_at if self.started_at is not None else time.monotonic()
        deadline = time.monotonic() + timeout
        reason = None
        failure_class = None
        last_probe = None
        while True:
            self._note_descendants()
            lines = self._all_lines()
            saw_line = journal.saw_ready(lines)
            code = self.proc.poll()
            if code is not None:
                reason = "the server exited with %s before it was ready" % code
                break
            if journal.is_fatal(lines):
                # The fatal line is written just before the process exits (argparse's error, a
                # traceback): give it a moment, so the record has its exit status. SGLang's parent
                # can also outlive a crashed scheduler; then the log alone says it is going down.
                try:
                    code = self.proc.wait(timeout=FATAL_EXIT_GRACE_S)
                except subprocess.TimeoutExpired:
                    code = None
                reason = ("the log shows a fatal error while the server still runs" if code is None
                          else "the server exited with %s before it was ready" % code)
                break
            if saw_line or not require_ready_line:
                ok, last_probe = self._probe()
                if ok:
                    return self._wait_result(t0, True, None, None, reason, lines)
            if time.monotonic() >= deadline:
                failure_class = "timeout"
                reason = "not ready after %ss%s" % (timeout, "" if saw_line else " (no ready line in the log)")
                if last_probe:
                    reason += "; last probe: %s" % last_probe
                break
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        lines = self._all_lines()
        cls, line = journal.classify(lines)
        if failure_class is None:
            failure_class = cls
        return self._wait_result(t0, False, failure_class, line, reason, lines)

    def _wait_result(self, t0, ready, failure_class, failure_line, reason, lines):
        out = {"ready": ready, "seconds": round(time.monotonic() - t0, 3), "exit_code": self.proc.poll(),
               "failure_class": failure_class, "failure_line": failure_line, "reason": reason,
               "ready_line": journal.saw_ready(lines)}
        if not ready:
            out["hint"] = journal.hint(failure_class)
            out["log_tail"] = journal.tail(lines, TAIL_LINES)
        return out

    # -- stop -----------------------------------------------------------------------------
    def _signal_group(self, sig):
        try:
            os.killpg(self.pgid, sig)
            return True
        except ProcessLookupError:  # the group is empty already
            return False

    def stop(self, grace=15.0):
        """End the server's process group: SIGTERM, then SIGKILL after ``grace`` seconds.

        Returns ``{seconds_to_exit, killed, exit_code, orphans, left, escaped}``:
        ``orphans`` were in the group when the server process itself was gone (what a crash
        leaves holding the GPU), ``left`` are still there after SIGKILL (should be empty),
        ``escaped`` are descendants seen while waiting that left the group and still run.
        """
        if self.proc is None:
            return {"seconds_to_exit": 0.0, "killed": False, "exit_code": None, "orphans": [], "left": [],
                    "escaped": []}
        t0 = time.monotonic()
        orphans = set()
        killed = False
        if self.proc.poll() is not None:
            orphans.update(group_members(self.pgid))
        if self.proc.poll() is None or orphans:
            self._note_descendants()
            self._signal_group(signal.SIGTERM)
        deadline = t0 + grace
        while True:
            leader_gone = self.proc.poll() is not None
            members = group_members(self.pgid)
            if leader_gone:
                orphans.update(members)
            if leader_gone and not members:
                break
            if time.monotonic() >= deadline:
                if not killed:
                    killed = self._signal_group(signal.SIGKILL) or killed
                    deadline = time.monotonic() + 10.0  # SIGKILL cannot be refused; allow for reaping
                    continue
                break
            time.sleep(0.1)
        if self.proc.poll() is None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        left = group_members(self.pgid)
        escaped = sorted(p for p in self.descendants if pid_alive(p) and p not in left)
        if self._log is not None:
            self._log.close()
            self._log = None
        return {"seconds_to_exit": round(time.monotonic() - t0, 3), "killed": killed,
                "exit_code": self.proc.poll(), "orphans": sorted(orphans), "left": left, "escaped": escaped}


# -- GPU ----------------------------------------------------------------------------------
def gpu_memory_used_mib(nvidia_smi="nvidia-smi"):
    """Per-GPU memory.used in MiB, read with the collection's query and parser; None without
    a working nvidia-smi."""
    if shutil.which(nvidia_smi) is None:
        return None
    try:
        res = subprocess.run(nvidia.query_gpu_argv(nvidia_smi), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = res.stdout.decode("utf-8", "replace")
    if nvidia.classify_error(res.returncode, out + "\n" + res.stderr.decode("utf-8", "replace")) is not None:
        return None
    try:
        gpus = nvidia.parse_gpus(out)
    except ValueError:
        return None
    return [g["memory_used_mib"] for g in gpus]


def wait_gpu_idle(timeout, baseline_mib=None, slack_mib=1024, interval=1.0, nvidia_smi="nvidia-smi"):
    """Seconds until the GPUs' used memory is back near ``baseline_mib`` (a list per GPU, as
    gpu_memory_used_mib returns, or one total), or ``timeout`` elapsed; None without nvidia-smi.

    A dying server frees its memory some time after its processes are gone (the driver tears
    the contexts down); the next launch's memory budget, and so its figures, depend on it.
    Without a baseline, each GPU must be under ``slack_mib``. Two readings in a row must agree,
    so a reading taken between two frees does not end the wait.
    """
    t0 = time.monotonic()
    hits = 0
    while True:
        used = gpu_memory_used_mib(nvidia_smi)
        if used is None:
            return None
        if baseline_mib is None:
            idle = all(u is None or u <= slack_mib for u in used)
        elif isinstance(baseline_mib, (list, tuple)):
            idle = all(u is None or b is None or u <= b + slack_mib for u, b in zip(used, baseline_mib))
        else:
            idle = sum(u for u in used if u is not None) <= baseline_mib + slack_mib
        hits = hits + 1 if idle else 0
        elapsed = time.monotonic() - t0
        if hits >= 2 or elapsed >= timeout:
            return round(elapsed, 3)
        time.sleep(interval)
