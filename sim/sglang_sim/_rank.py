"""A simulated scheduler (TP rank) or detokenizer process.

Started by launch_server as ``argv[0]=<process title> -m sglang_sim._rank <json>``
so /proc/<pid>/cmdline starts with SGLang's title (``sglang::scheduler_TP0``).
A rank opens its fake device files, walks through SGLang's init phases (weights,
memory pools, CUDA graphs) writing its GPU memory use to <state_dir>/procs/<pid>.json,
then reports "ready" (or fails with SGLang's error and SIGQUITs the parent) and idles
holding the devices until it is killed or its parent dies.
"""

import json
import mmap
import os
import signal
import sys
import time

from sglang_sim import _proc, adaptive, shm

CUDA_GRAPH_CAPTURE_FAILED_MSG = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
    "(Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)

_held = []  # open device files and maps, kept for the life of the process
_segments = []  # shm.Segments of this rank: unlinked on a clean exit only


def _gb(mib):
    return mib / 1024.0


def _open_devices(dev_dir, names):
    for name in names:
        path = os.path.join(dev_dir, name)
        fd = os.open(path, os.O_RDWR)
        _held.append(fd)
        # A real CUDA process also maps the device (fuser shows "F...m").
        try:
            size = os.fstat(fd).st_size
            if size > 0:
                _held.append(mmap.mmap(fd, min(size, 4096), mmap.MAP_SHARED,
                                       mmap.PROT_READ | mmap.PROT_WRITE))
        except (OSError, ValueError):
            pass


class _Rank(object):
    def __init__(self, cfg):
        self.cfg = cfg
        self.rank = cfg.get("rank", 0)
        self.prefix = cfg.get("log_prefix", "")
        self.state_dir = cfg["state_dir"]
        self.scale = cfg["time_scale"]
        self.start_ticks = _proc.proc_start_ticks(os.getpid())
        self.used = 0.0

    def sleep(self, sim_seconds):
        if sim_seconds > 0:
            time.sleep(sim_seconds * self.scale)

    def log(self, msg):
        _proc.log(msg, self.prefix)

    def publish(self, used_mib):
        self.used = used_mib
        _proc.write_proc_state(self.state_dir, {
            "pid": os.getpid(),
            "start_ticks": self.start_ticks,
            "gpu_index": self.cfg["gpu_index"],
            "gpu_uuid": self.cfg["gpu_uuid"],
            "process_name": self.cfg["title"],
            "used_mib": int(round(used_mib)),
            "ppid": os.getppid(),
        })

    def avail(self):
        return self.cfg["gpu_total_mib"] - self.cfg["gpu_reserved_mib"] - self.used

    def run(self):
        cfg = self.cfg
        plan = cfg["plan"]
        load = cfg["load_seconds"]
        if cfg.get("device_error"):
            raise RuntimeError(cfg["device_error"])
        _open_devices(cfg["dev_dir"], cfg["devices"])
        if cfg.get("shm_dir"):
            segments = shm.Segments(cfg["shm_dir"], cfg.get("shm_kib", 4))
            _segments.append(segments)
            segments.create_rank(self.rank, cfg.get("tp_size", 1), cfg.get("instance_id") or "")
        self.publish(plan["context_mib"])
        self.sleep(load * 0.05)
        self.log("Load weight begin. avail mem=%.2f GB" % _gb(self.avail()))
        t0 = time.time()
        steps = 20
        weights = plan["weights_mib"] + plan["draft_weights_mib"]
        fail = cfg.get("fail")
        # What this rank can get, other processes (e.g. orphans) on its GPU included.
        room = plan["avail_begin_mib"]
        for i in range(steps):
            self.sleep(load * 0.65 / steps)
            chunk = plan["weights_mib"] * (i + 1) / steps
            if fail and fail["kind"] == "weights" and (chunk > room or i == steps - 1):
                raise _TorchOOM(fail["message"])
            self.publish(plan["context_mib"] + chunk)
        elapsed = (time.time() - t0) / self.scale
        self.log("Load weight end. elapsed=%.2f s, type=%s, avail mem=%.2f GB, mem usage=%.2f GB."
                 % (elapsed, cfg["arch"], _gb(self.avail()), _gb(plan["weights_mib"])))
        if plan["draft_weights_mib"]:
            # The draft (MTP/EAGLE) worker loads its own weights afterwards.
            self.log("Load weight begin. avail mem=%.2f GB" % _gb(self.avail()))
            t0 = time.time()
            self.sleep(load * 0.05)
            self.publish(plan["context_mib"] + weights)
            self.log("Load weight end. elapsed=%.2f s, type=%s, avail mem=%.2f GB, "
                     "mem usage=%.2f GB." % ((time.time() - t0) / self.scale, cfg["draft_arch"],
                                             _gb(self.avail()), _gb(plan["draft_weights_mib"])))
        self.sleep(load * 0.05)
        if fail and fail["kind"] == "pool":
            raise _TorchOOM(fail["message"])
        if fail and fail["kind"] != "graph":
            # kv_cache_configurator.py / pool_configurator.py raise these while sizing.
            raise _SizingError(fail["exc_type"], fail["message"])
        pool = plan["mamba_mib"] + plan["kv_mib"]
        # kv_cache_configurator.py sizes first (its warnings), then builds the pools
        # (memory_pool.py MambaPool.__init__ logs the state pool; memory.mamba_log_lines).
        for msg in plan.get("warnings", []):
            self.log(msg)
        for msg in plan.get("mamba_log", []):
            self.log(msg)
        self.publish(self.used + pool)
        half = _gb(plan["kv_mib"]) / 2
        self.log("KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB"
                 % (plan["max_total_num_tokens"], half, half))
        self.log("Memory pool end. avail mem=%.2f GB" % _gb(self.avail()))
        if plan.get("adaptive_init_line") and self.rank == 0:
            # eagle_worker_v2.py EAGLEWorkerV2.__init__: AdaptiveSpeculativeParams, before the graphs
            self.log(plan["adaptive_init_line"])
        if not cfg["disable_cuda_graph"]:
            # The target's verify (or decode) graphs, then, with speculation, the draft's.
            phases = [("target verify" if plan["speculative"] else "target decode",
                       plan["draft_tokens"] if plan["speculative"] else 1,
                       0.6 if plan["speculative"] else 1.0)]
            if plan["speculative"]:
                phases.append(("draft decode", 1, 0.4))
            for name, per_req, share in phases:
                before = self.avail()
                self.log("Capture %s CUDA graph begin. backend=full, num_tokens_per_req=%d, "
                         "avail mem=%.2f GB" % (name, per_req, _gb(before)))
                t0 = time.time()
                self.sleep(load * 0.15 * share)
                if fail and fail["kind"] == "graph":
                    raise _CaptureFailed("Capture cuda graph failed: %s\n%s"
                                         % (fail["message"], CUDA_GRAPH_CAPTURE_FAILED_MSG))
                self.publish(self.used + plan.get("startup_graph_mib", plan["graph_mib"]) * share)
                self.log("Capture %s CUDA graph end. bs=%s, elapsed=%.2f s, mem usage=%.2f GB, "
                         "avail mem=%.2f GB." % (name, plan["capture_bs"],
                                                 (time.time() - t0) / self.scale,
                                                 _gb(before - self.avail()), _gb(self.avail())))
            # eagle_worker_v2.py init_cuda_graphs -> AdaptiveController.init_states: one runtime
            # state per other candidate step, each with its own graphs.
            for state in plan.get("adaptive_states", []):
                before = self.avail()
                t0 = time.time()
                self.sleep(load * 0.05)
                self.publish(self.used + state["graph_mib"])
                if self.rank == 0:
                    self.log(adaptive.MSG_BUILT.format(steps=state["steps"],
                                                       elapsed=(time.time() - t0) / self.scale,
                                                       mem=_gb(before - self.avail())))
        if cfg.get("verify_error"):
            # spec_utils.py sample_simulated_acc_len / eagle_utils.py: raised by the first verify
            # (the warm-up request's), after the pools and graphs were built.
            raise _SizingError("ValueError", cfg["verify_error"])
        if self.rank == 0:
            self.log("max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=16384, "
                     "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB"
                     % (plan["max_total_num_tokens"], cfg["chunked_prefill_size"],
                        plan["max_running_requests"], cfg["context_len"], _gb(self.avail())))


class _SizingError(Exception):
    """A pool-sizing ValueError/RuntimeError, printed under its own exception type."""

    def __init__(self, exc_type, message):
        super().__init__(message)
        self.exc_type = exc_type


class _CaptureFailed(Exception):
    """Printed as ``Exception: Capture cuda graph failed: ...`` like SGLang's."""


class _TorchOOM(Exception):
    """Printed as ``torch.OutOfMemoryError: CUDA out of memory...``."""


def _idle(orphans):
    """Hold the devices until killed; exit when the parent goes away unless orphaned."""
    parent = os.getppid()
    while True:
        time.sleep(0.5)
        if not orphans and os.getppid() != parent:
            # A clean exit (the parent left without PDEATHSIG's SIGKILL): what the release's
            # finalizers unlink goes; every SIGKILL path above leaves it all.
            for segments in _segments:
                segments.close()
            os._exit(0)


def _report(status):
    try:
        os.write(1, (status + "\n").encode())
    except OSError:
        pass


def main():
    cfg = json.loads(sys.stdin.buffer.read().decode())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    title = cfg["title"]
    _proc.set_comm(title)
    orphans = bool(cfg.get("orphans"))
    if not orphans:
        _proc.die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    if cfg.get("role") == "detokenizer":
        _report("ready")
        _idle(orphans)
        return
    rank = _Rank(cfg)
    try:
        rank.run()
    except Exception as exc:  # report like SGLang's scheduler does
        tb = ("Traceback (most recent call last):\n"
              '  File "sglang/srt/managers/scheduler.py", line 6365, in run_scheduler_process\n'
              '  File "sglang/srt/model_executor/model_runner.py", in initialize\n')
        if isinstance(exc, _CaptureFailed):
            name = "Exception"
        elif isinstance(exc, _TorchOOM):
            name = "torch.OutOfMemoryError"
        elif isinstance(exc, _SizingError):
            name = exc.exc_type
        else:
            name = type(exc).__name__
        rank.log("Scheduler hit an exception: %s%s: %s" % (tb, name, exc))
        _report("failed")
        try:
            os.kill(cfg["parent_pid"], signal.SIGQUIT)
        except OSError:
            pass
        # SGLang's scheduler returns after signalling; the parent's kill_process_tree
        # then SIGKILLs it. Linger briefly so the parent can see the failure first.
        if orphans:
            # The fault being simulated: the rank hangs in teardown, holding its memory,
            # and outlives the parent's kill_process_tree (sgl-project/sglang#23627).
            _idle(True)
        time.sleep(0.1)
        _proc.remove_proc_state(cfg["state_dir"], os.getpid())
        os._exit(1)
    _report("ready")
    _idle(orphans)


if __name__ == "__main__":
    main()
