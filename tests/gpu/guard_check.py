# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The unit guard's clean start (roles/service/files/sglang_unit_guard.py) on a real NVIDIA driver.

What a sglang-<name>.service unit runs before each start, against what a crashed SGLang leaves:
two scheduler ranks titled like SGLang's (``sglang::gpuchk_TP0`` and its orphan ``..._TP1``,
re-parented, ignoring SIGTERM), each holding GPU memory through torch (tests/gpu/gpu_holders.py).
The guard must end both (TERM, then KILL after the grace), wait until the driver lists neither
and give the memory back, and say so in one line; a second clean start must end nothing.

Safety: the guard is given a title prefix only this check's holders carry, and before it runs the
check asks the guard's own selection (``own_leftovers``) which processes it would end: exactly
the two holders, or the check stops without running it. The cleanup signals only those pids.

    python tests/gpu/guard_check.py            # PASS / FAIL / SKIP, figures as JSON
Environment: GPU_CHECK_PYTHON (a Python with torch that sees the GPU; default this one),
GUARD_CHECK_GIB (GiB the first rank takes, default 8), $OUT (where figures.json goes, if set).
Exit 0 on PASS or SKIP, 1 on FAIL.
"""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GUARD = os.path.join(ROOT, "roles", "service", "files", "sglang_unit_guard.py")
PREFIX = "sglang::gpuchk_"
UNIT = "sglang-gpuchk.service"


def load_guard():
    spec = importlib.util.spec_from_file_location("sglang_unit_guard", GUARD)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def smi(*args):
    res = subprocess.run(["nvidia-smi"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=60, check=False)
    return res.returncode, res.stdout


def used_mib(guard, index=0):
    """GPU ``index``'s memory.used, read with the collection's nvidia-smi query and parser."""
    _rc, out = smi(*guard.nvidia.query_gpu_argv("nvidia-smi")[1:])
    try:
        gpus = guard.nvidia.parse_gpus(out)
    except ValueError:
        return None
    return next((g["memory_used_mib"] for g in gpus if g["index"] == index), None)


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def main():
    figures = {"check": "unit guard clean start on a real driver"}
    out_dir = os.environ.get("OUT")

    def finish(verdict, why):
        figures["verdict"], figures["why"] = verdict, why
        print(json.dumps(figures, indent=2, sort_keys=True))
        if out_dir:
            with open(os.path.join(out_dir, "guard-figures.json"), "w") as handle:
                json.dump(figures, handle, indent=2, sort_keys=True)
        print("%s: %s" % (verdict, why))
        return 1 if verdict == "FAIL" else 0

    if shutil.which("nvidia-smi") is None:
        return finish("SKIP", "no nvidia-smi on PATH (no NVIDIA driver)")
    rc, listing = smi("-L")
    if rc != 0 or "GPU " not in listing:
        return finish("SKIP", "nvidia-smi lists no GPU: %s" % listing.strip()[:200])
    py = os.environ.get("GPU_CHECK_PYTHON") or sys.executable
    if subprocess.run([py, "-c", "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode != 0:
        return finish("SKIP", "%s has no torch that sees the GPU (set GPU_CHECK_PYTHON)" % py)
    guard = load_guard()
    gib = float(os.environ.get("GUARD_CHECK_GIB", "8"))
    figures["gpu"] = listing.splitlines()[0]
    figures["fuser"] = shutil.which("fuser") or "absent (the guard reads /proc)"
    idle = used_mib(guard)
    figures["idle_used_mib"] = idle
    work = tempfile.mkdtemp(prefix="guard-check-")
    state = os.path.join(work, "holders")
    os.mkdir(state)
    ours = []
    holder = subprocess.Popen(
        [py, os.path.join(HERE, "gpu_holders.py"), "hold", "--title", PREFIX + "TP0", "--gib", str(gib),
         "--orphan-title", PREFIX + "TP1", "--orphan-gib", "2", "--orphan-ignore-term", "--title-argv0",
         "--state", state, "--max-seconds", "300"],
        stdout=open(os.path.join(work, "holders.log"), "w"), stderr=subprocess.STDOUT)
    ours.append(holder.pid)
    # The first rank is this check's child: reap it when it dies, or it would linger as a zombie
    # that the guard (rightly) still counts as not gone.
    threading.Thread(target=holder.wait, daemon=True).start()
    try:
        deadline = time.time() + 240
        ready = []
        while time.time() < deadline and len(ready) < 2:
            ready = [f for f in os.listdir(state) if f.startswith("ready-")]
            if holder.poll() not in (None, 0) and len(ready) < 2:
                break
            time.sleep(0.5)
        infos = []
        for name in ready:
            with open(os.path.join(state, name)) as handle:
                infos.append(json.load(handle))
        pids = sorted(i["pid"] for i in infos)
        ours.extend(p for p in pids if p not in ours)
        if len(pids) < 2:
            with open(os.path.join(work, "holders.log")) as handle:
                return finish("FAIL", "the GPU holders did not start: %s" % handle.read()[-1500:])
        figures["holders"] = infos
        time.sleep(1.0)
        figures["held_used_mib"] = used_mib(guard)
        listed = (guard._gpu_apps("nvidia-smi") or set())  # pylint: disable=protected-access
        figures["driver_lists_holders"] = sorted(set(pids) & listed)

        me = os.getpid()
        cgroup = guard.parse_cgroup(guard._read("/proc/self/cgroup"))  # pylint: disable=protected-access
        figures["cgroup"] = cgroup
        if guard.unit_of_cgroup(cgroup) not in (UNIT, None):
            return finish("SKIP", "this check runs inside %s: the guard would end nothing outside its "
                                  "own unit" % guard.unit_of_cgroup(cgroup))
        own, _spared = guard.own_leftovers(guard._scan_with_cgroups(), UNIT, os.geteuid(),  # pylint: disable=protected-access
                                           protected=guard.procs.ancestors(me), title_prefix=PREFIX)
        chosen = sorted(p["pid"] for p in own)
        figures["guard_would_end"] = [{"pid": p["pid"], "why": p["why"]} for p in own]
        if chosen != pids:
            return finish("FAIL", "the guard would end %s, the check's holders are %s: not run" % (chosen, pids))

        t0 = time.time()
        res = subprocess.run([sys.executable, GUARD, "clean-start", "--unit", UNIT, "--state-dir", work,
                              "--grace", "3", "--wait", "60", "--title-prefix", PREFIX],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                             timeout=180, check=False)
        figures["clean_start_s"] = round(time.time() - t0, 2)
        figures["clean_start_rc"] = res.returncode
        figures["clean_start_says"] = res.stdout.strip()
        after = used_mib(guard)
        figures["after_used_mib"] = after
        figures["pids_alive_after"] = [p for p in pids if alive(p)]
        figures["driver_lists_after"] = sorted(set(pids) & (guard._gpu_apps("nvidia-smi") or set()))  # pylint: disable=protected-access
        terms = {}
        for name in os.listdir(state):
            if name.startswith("term-"):
                with open(os.path.join(state, name)) as handle:
                    t = json.load(handle)
                terms[t["pid"]] = t
        figures["term_seen"] = terms

        again = subprocess.run([sys.executable, GUARD, "clean-start", "--unit", UNIT, "--state-dir", work,
                                "--grace", "3", "--wait", "60", "--title-prefix", PREFIX],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                               timeout=180, check=False)
        figures["second_clean_start"] = {"rc": again.returncode, "says": again.stdout.strip()}

        problems = []
        if res.returncode != 0:
            problems.append("clean start exited %d" % res.returncode)
        if "ended 2 leftover process(es) of %s" % UNIT not in res.stdout:
            problems.append("its journal line does not name the two ranks")
        if figures["pids_alive_after"]:
            problems.append("still running after it: %s" % figures["pids_alive_after"])
        if figures["driver_lists_after"]:
            problems.append("the driver still lists %s" % figures["driver_lists_after"])
        tolerance = int(os.environ.get("GPU_CHECK_TOLERANCE_MIB", "64"))
        if idle is not None and (after is None or after > idle + tolerance):
            problems.append("GPU 0 uses %s MiB after, %s MiB idle" % (after, idle))
        if again.returncode != 0 or "ended" in again.stdout:
            problems.append("a second clean start was not a no-op: %s" % again.stdout.strip())
        if problems:
            return finish("FAIL", "; ".join(problems))
        return finish("PASS", "both ranks ended (TERM, KILL for the one ignoring it), GPU memory back "
                              "to %s MiB (idle %s) in %.2f s; a second clean start ended nothing"
                      % (after, idle, figures["clean_start_s"]))
    finally:
        for pid in ours:
            # Only this check's own processes, and only while they still carry its titles.
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as handle:
                    cmd = handle.read()
            except OSError:
                continue
            if PREFIX.encode() in cmd or b"gpu_holders.py" in cmd:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
