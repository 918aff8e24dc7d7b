# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Test processes that hold a real GPU, and a memory sampler, for tests/gpu/run_gpu_check.sh.

  hold    the "crashed SGLang" stand-in: names itself like a scheduler rank (sglang::scheduler_TP0),
          first double-forks an orphan (so the orphan's parent is gone, as after a crash), then
          allocates GPU memory with torch and waits to be signalled.
  orphan  started by `hold` only: a second CUDA process whose name matches none of SGLang's
          patterns, so only the device-file (fuser) route of gpu_free can find it. With
          --ignore-term it survives SIGTERM, so the KILL escalation after the grace period runs.
  sample  polls NVML (used memory and compute pids per GPU) every 10 ms and writes a JSON line
          with the wall-clock time whenever the reading changes, to time how long the driver
          takes to give memory back after SIGTERM/SIGKILL.

With --title-argv0 both holders carry their title as the whole command line (argv[0]), as
SGLang's ranks do after setproctitle: what the unit guard's clean start looks for
(tests/gpu/guard_check.py).

Each holder writes <state>/ready-<pid>.json once its memory is allocated and
<state>/term-<pid>.json when SIGTERM arrives. Every process ends by itself after
--max-seconds, so nothing outlives a runner that died.
"""

import argparse
import ctypes
import json
import os
import signal
import sys
import time

PR_SET_NAME = 15


def set_name(title):
    """Set the kernel's process name (comm, 15 bytes), what ps/fuser/top show, as SGLang's
    setproctitle does. The full title is also in our argv (--title), so /proc/<pid>/cmdline
    contains it too."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle)
    os.rename(tmp, path)


def on_term(state, ignore):
    def handler(signum, frame):
        write_json(os.path.join(state, "term-%d.json" % os.getpid()),
                   {"pid": os.getpid(), "time": time.time(), "ignored": ignore})
        if not ignore:
            # Die of the signal itself (exit status -TERM), as an unhandled TERM would.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
    return handler


def allocate(gib):
    """Take `gib` GiB of device memory with a plain cudaMalloc (torch's allocator) and touch it."""
    import torch  # imported late: CUDA must not be initialised before the fork in `hold`

    if not torch.cuda.is_available():
        raise SystemExit("torch sees no CUDA device")
    block = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    return block, torch.cuda.memory_allocated() // (1 << 20)


def wait_until_signalled(max_seconds):
    deadline = time.time() + max_seconds
    while time.time() < deadline:
        time.sleep(0.2)
    sys.exit(3)  # nobody ended us: the runner is gone; free the GPU anyway


def python_path():
    """The interpreter that runs this file, also when argv[0] is a process title (then
    sys.executable is empty and the runner passes the path on)."""
    return os.environ.get("GPU_HOLDERS_PYTHON") or sys.executable


def exec_titled(title, argv):
    """Run this file again with ``title`` as argv[0], as SGLang's setproctitle leaves a scheduler
    rank's command line (the unit guard knows its own ranks by that). The interpreter then no
    longer finds its prefix or venv from argv[0], so the module path and its own path are passed
    in the environment."""
    env = dict(os.environ)
    env["GPU_HOLDERS_PYTHON"] = python_path()
    env["GPU_HOLDERS_TITLE"] = title
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    os.execve(env["GPU_HOLDERS_PYTHON"], [title, os.path.abspath(__file__)] + argv, env)


def spawn_orphan(args):
    """Double fork: the middle process exits at once, so the orphan is re-parented (to PID 1 or
    the nearest subreaper), like a scheduler child whose SGLang parent crashed."""
    middle = os.fork()
    if middle == 0:
        middle_pid = os.getpid()
        if os.fork() == 0:
            argv = ["orphan", "--title", args.orphan_title,
                    "--gib", str(args.orphan_gib), "--state", args.state, "--max-seconds", str(args.max_seconds),
                    "--first-parent", str(middle_pid)]
            if args.orphan_ignore_term:
                argv.append("--ignore-term")
            if args.title_argv0:
                exec_titled(args.orphan_title, argv)
            os.execv(python_path(), [python_path(), os.path.abspath(__file__)] + argv)
        os._exit(0)
    os.waitpid(middle, 0)
    return middle


def cmd_hold(args):
    if args.title_argv0 and os.environ.get("GPU_HOLDERS_TITLE") != args.title:
        exec_titled(args.title, sys.argv[1:])
    set_name(args.title)
    signal.signal(signal.SIGTERM, on_term(args.state, False))
    middle = spawn_orphan(args) if args.orphan_gib > 0 else None
    block, mib = allocate(args.gib)
    write_json(os.path.join(args.state, "ready-%d.json" % os.getpid()), {
        "pid": os.getpid(), "ppid": os.getppid(), "role": "main", "title": args.title,
        "gib": args.gib, "allocated_mib": mib, "orphan_middle_pid": middle, "time": time.time(),
    })
    wait_until_signalled(args.max_seconds)
    del block


def cmd_orphan(args):
    set_name(args.title)
    signal.signal(signal.SIGTERM, on_term(args.state, args.ignore_term))
    block, mib = allocate(args.gib)
    write_json(os.path.join(args.state, "ready-%d.json" % os.getpid()), {
        "pid": os.getpid(), "ppid": os.getppid(), "role": "orphan", "title": args.title,
        "gib": args.gib, "allocated_mib": mib, "first_parent": args.first_parent,
        "ignores_term": args.ignore_term, "time": time.time(),
    })
    wait_until_signalled(args.max_seconds)
    del block


def nvml_reader():
    """A function returning ([used MiB per GPU], [compute pids per GPU]) through NVML in this
    process (pynvml, package nvidia-ml-py), or None when NVML cannot be loaded.

    In-process on purpose: the sampler is then one stable pid that holds /dev/nvidiactl, which
    the runner passes to gpu_free as exclude_pids. A loop of nvidia-smi calls would put a new
    short-lived device holder in every fuser listing, and gpu_free waits for unknown holders."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - any failure means: no NVML here
        return None
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    version = getattr(pynvml, "nvmlMemory_v2", None)

    def memory(handle):
        # v2 leaves out the driver's reserved memory, as nvidia-smi's memory.used does.
        if version is not None:
            try:
                return pynvml.nvmlDeviceGetMemoryInfo(handle, version=version).used
            except (TypeError, pynvml.NVMLError):
                pass
        return pynvml.nvmlDeviceGetMemoryInfo(handle).used

    def read():
        mib, pids = [], []
        for handle in handles:
            mib.append(int(memory(handle) // (1 << 20)))
            try:
                pids.append(sorted(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)))
            except pynvml.NVMLError:
                pids.append(None)
        return mib, pids
    return read


def cmd_sample(args):
    """One JSON line per sample: {"t": wall time, "mib": [used MiB per GPU], "pids": [[compute
    pids] per GPU]}. Writes <out>.ready once NVML answers. Ends on TERM or after --max-seconds."""
    stop = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(1))
    read = nvml_reader()
    if read is None:
        raise SystemExit("NVML (pynvml) not available: no memory timeline")
    deadline = time.time() + args.max_seconds
    last, last_t = None, 0.0
    with open(args.out, "a") as out:
        while not stop and time.time() < deadline:
            before = time.time()
            mib, pids = read()
            after = time.time()
            sample = (mib, pids)
            # Only changes, plus one line a second, keep the file small at a 10 ms interval.
            if sample != last or int(before) != int(last_t):
                out.write(json.dumps({"t": round((before + after) / 2, 4), "call_s": round(after - before, 5),
                                      "mib": mib, "pids": pids}) + "\n")
                out.flush()
                if last is None:
                    open(args.out + ".ready", "w").close()
                last, last_t = sample, before
            time.sleep(max(0.0, args.interval - (time.time() - before)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    hold = sub.add_parser("hold")
    hold.add_argument("--title", default="sglang::scheduler_TP0")
    hold.add_argument("--gib", type=float, default=20.0)
    hold.add_argument("--orphan-title", default="gpu-check-orphan")
    hold.add_argument("--orphan-gib", type=float, default=2.0)
    hold.add_argument("--orphan-ignore-term", action="store_true")
    hold.add_argument("--title-argv0", action="store_true",
                      help="titles as argv[0] too (the whole command line), as setproctitle does")
    hold.add_argument("--state", required=True)
    hold.add_argument("--max-seconds", type=float, default=900.0)
    orphan = sub.add_parser("orphan")
    orphan.add_argument("--title", required=True)
    orphan.add_argument("--gib", type=float, required=True)
    orphan.add_argument("--state", required=True)
    orphan.add_argument("--max-seconds", type=float, default=900.0)
    orphan.add_argument("--first-parent", type=int, default=0)
    orphan.add_argument("--ignore-term", action="store_true")
    sample = sub.add_parser("sample")
    sample.add_argument("--out", required=True)
    sample.add_argument("--interval", type=float, default=0.01)
    sample.add_argument("--max-seconds", type=float, default=900.0)
    args = parser.parse_args(argv)
    {"hold": cmd_hold, "orphan": cmd_orphan, "sample": cmd_sample}[args.cmd](args)


if __name__ == "__main__":
    main()
