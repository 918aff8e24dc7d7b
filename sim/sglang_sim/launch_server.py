"""``python -m sglang_sim.launch_server <sglang 0.5.23 flags>``: a simulated SGLang server.

Startup follows SGLang's: parse and resolve arguments, spawn one scheduler process per
TP rank plus a detokenizer, let each rank load weights / allocate pools / capture CUDA
graphs (memory.py decides whether that fits), then start the HTTP server, warm up and
log "The server is fired up and ready to roll!". A rank that fails logs "Scheduler hit
an exception" and SIGQUITs this process, which logs SGLang's crash chain and kills the
process tree (SIGKILL, so systemd sees status=9/KILL).
"""

import asyncio
import errno
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

import sglang_sim
from sglang_sim import _proc, adaptive, config, memory, perf, server_args, shm
from sglang_sim.scheduler import Scheduler
from sglang_sim.server import Server


def log(msg):
    _proc.log(msg)


def uvicorn_log(msg):
    """uvicorn's own format ("INFO:     ..."), without SGLang's timestamp prefix."""
    _proc.raw_log(msg)


def _fail_args(exc):
    """A resolution error: print the exception line SGLang's traceback ends with."""
    if exc.hint:
        sys.stderr.write("sglang_sim: %s\n" % exc.hint)
    line = exc.exc_type + (": " + exc.message if exc.message else "")
    sys.stderr.write("Traceback (most recent call last):\n"
                     '  File "sglang/launch_server.py", in <module>\n'
                     '  File "sglang/srt/server_args.py", in prepare_server_args\n%s\n' % line)
    sys.exit(1)


def _check_model_path(path):
    """None when --model-path names a model the node has, else the traceback text SGLang dies with.

    0.5.23 loads the model config while resolving its arguments (srt/server_args.py
    ServerArgs.resolve_once -> srt/arg_groups/pipeline.py run_resolution_pipeline ->
    srt/utils/hf_transformers/config.py get_config -> HfModelConfigParser.parse ->
    transformers AutoConfig.from_pretrained, transformers==5.19.0 as the wheel pins it).
    transformers looks a path that is not a folder up on the Hub: huggingface_hub refuses an
    absolute path as a repo id (HFValidationError, re-raised by transformers' cached_files as
    OSError "Incorrect path_or_model_id"); an id that is not in the cache fails offline (sim
    nodes have no network) with "couldn't find them in the cached files".
    HF ids of the sim catalog count as cached, and any existing local path as a model.
    """
    frames = ('  File "sglang/launch_server.py", in <module>\n'
              '  File "sglang/srt/server_args.py", in resolve_once\n'
              '  File "sglang/srt/arg_groups/pipeline.py", in run_resolution_pipeline\n'
              '  File "sglang/srt/utils/hf_transformers/config.py", in get_config\n'
              '  File "sglang/srt/utils/hf_transformers/config.py", in parse\n'
              '  File "transformers/utils/hub.py", in cached_files\n')
    if path.startswith(("/", "./", "../", "~")):
        expanded = os.path.expanduser(path)
        if not os.path.exists(expanded):
            return (frames + "huggingface_hub.errors.HFValidationError: Repo id must be in the "
                    "form 'repo_name' or 'namespace/repo_name': '%s'. Use `repo_type` argument "
                    "if needed.\n\nThe above exception was the direct cause of the following "
                    "exception:\n\nTraceback (most recent call last):\n%s"
                    "OSError: Incorrect path_or_model_id: '%s'. Please provide either the path "
                    "to a local folder or the repo_id of a model on the Hub." % (path, frames, path))
        return None
    if path in config.CATALOG:
        return None
    if os.path.isdir(path):
        return None
    return (frames + "OSError: We couldn't connect to 'https://huggingface.co' to load the files, "
            "and couldn't find them in the cached files.\nCheck your internet connection or see "
            "how to run the library in offline mode at "
            "'https://huggingface.co/docs/transformers/installation#offline-mode'.")


def _ensure_devices(dev_dir, count):
    """Fake device files: created in a sim dev dir, never in the real /dev."""
    names = ["nvidia%d" % i for i in range(count)] + ["nvidiactl", "nvidia-uvm"]
    missing = [n for n in names if not os.path.exists(os.path.join(dev_dir, n))]
    if not missing:
        return None
    if os.path.realpath(dev_dir) == "/dev":
        return "No CUDA GPUs are available"
    os.makedirs(dev_dir, exist_ok=True)
    for n in missing:
        with open(os.path.join(dev_dir, n), "wb") as fh:
            fh.write(b"\0" * 4096)
    return None


def _other_used(settings, gpus):
    used = {g["index"]: 0.0 for g in gpus}
    for rec in _proc.read_live_procs(settings["state_dir"]):
        if rec.get("gpu_index") in used:
            used[rec["gpu_index"]] += float(rec.get("used_mib", 0))
    return used


class Launcher(object):
    def __init__(self, args, settings, warnings):
        self.args = args
        self.settings = settings
        self.warnings = warnings
        self.children = []  # (role, rank, Popen)
        self.ready = set()
        self.failed = False
        self.shutting_down = False
        self.scale = settings["time_scale"]
        self.loop = None
        self.done = None
        self.srv = None
        self.http = None
        self.sched = None
        self.sock = None

    # -------------------------------------------------------------- processes
    def spawn(self, title, cfg, pass_fds=()):
        env = dict(os.environ)
        pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(sglang_sim.__file__)))
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cfg = dict(cfg, title=title, parent_pid=os.getpid())
        # argv[0] is the process title: /proc/<pid>/cmdline starts with it, like setproctitle.
        # The settings travel on stdin so that `ps` shows a short command line.
        proc = subprocess.Popen([title, "-m", "sglang_sim._rank"],
                                executable=sys.executable, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, close_fds=True, pass_fds=pass_fds)
        proc.stdin.write(json.dumps(cfg).encode())
        proc.stdin.close()
        return proc

    def kill_tree(self, include_self=True):
        """kill_process_tree: SIGKILL children (unless the orphan fault is on), then self."""
        self.shutting_down = True
        if not self.settings["orphans"]:
            for _role, _rank, proc in self.children:
                try:
                    proc.kill()
                except OSError:
                    pass
            for _role, _rank, proc in self.children:
                try:
                    proc.wait(timeout=2)
                except Exception:
                    pass
                _proc.remove_proc_state(self.settings["state_dir"], proc.pid)
        if include_self:
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def on_sigquit(self):
        log("Received sigquit from a child process. It usually means the child failed.")
        if self.srv is None or self.srv.status == "Starting":
            # _wait_for_scheduler_ready notices the failed rank's exit.
            deadline = time.time() + 2.0
            dead = None
            while dead is None and time.time() < deadline:
                for role, rank, proc in self.children:
                    if role == "scheduler" and proc.poll() is not None:
                        dead = (rank, proc.returncode)
                        break
                else:
                    time.sleep(0.02)
            if dead is not None:
                log("Rank %d scheduler died during initialization (exit code: %d). If exit code "
                    "is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep "
                    "-i oom` to check." % dead)
        self.kill_tree()

    def on_child_output(self, rank, proc):
        line = proc.stdout.readline()
        if not line:
            self.loop.remove_reader(proc.stdout.fileno())
            if self.shutting_down:
                return
            # SGLang notices dead children by polling (SubprocessWatchdog every 1 s, the init
            # wait every 5 s); the delay also lets a concurrent SIGTERM (systemctl stop signals
            # the whole cgroup) win, as it does on a real node.
            delay = 1.0 if rank in self.ready else 0.2
            self.loop.call_later(delay, self._child_died, rank, proc)
            return
        status = line.decode().strip()
        if status == "ready":
            self.ready.add(rank)
            if len(self.ready) == len(self.children) and not self.done.done():
                self.done.set_result(True)
        elif status == "failed":
            self.failed = True

    def _child_died(self, rank, proc):
        if self.shutting_down:
            return
        code = proc.wait()
        if rank in self.ready and self.srv is not None:
            # SubprocessWatchdog: a child died after startup -> SIGQUIT -> kill the tree.
            name = "scheduler_%d" % rank if rank >= 0 else "detokenizer"
            log("Subprocess %s (pid=%d) crashed with exit code %d. Triggering SIGQUIT for "
                "cleanup..." % (name, proc.pid, code))
            log("SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=None. It usually means "
                "one child failed.")
            self.kill_tree()
        elif rank not in self.ready and not self.failed:
            # Died without a word (e.g. SIGKILLed by the OOM killer or an operator).
            self.failed = True
            log("Rank %d scheduler died during initialization (exit code: %d). If exit code is "
                "-9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` "
                "to check." % (rank, code))
            self.kill_tree()

    # -------------------------------------------------------------- main flow
    async def run(self):
        a, s = self.args, self.settings
        self.loop = asyncio.get_event_loop()
        self.done = self.loop.create_future()
        self.loop.add_signal_handler(signal.SIGQUIT, self.on_sigquit)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.on_term)

        gpus = config.gpus(s)
        tp = a["tp_size"]
        model_key, model = config.lookup_model(a["model_path"])
        draft = None
        if a.get("speculative_draft_model_path"):
            _draft_name, draft = config.lookup_model(a["speculative_draft_model_path"])
        others = _other_used(s, gpus)
        os.makedirs(s["state_dir"], exist_ok=True)
        dev_error = _ensure_devices(s["dev_dir"], len(gpus))
        context_len = a["context_length"] or model["context_length"]
        spec = a["speculative_algorithm"] is not None
        # SGLANG_SIMULATE_ACC_LEN (perf.simulated_accept): a value the release rejects fails its
        # first verify, the launch's warm-up request, so the start fails before it is ready.
        self.simulate_acc, verify_error = None, None
        if spec:
            try:
                self.simulate_acc = perf.simulated_accept(os.environ)
            except ValueError as exc:
                verify_error = str(exc)
        capture_bs = server_args.capture_batch_sizes(a["cuda_graph_max_bs_decode"], spec)
        if a.get("cuda_graph_bs_decode"):
            # cuda_graph_hook.py parse_cuda_graph_config: an explicit list replaces the default.
            capture_bs = sorted(set(a["cuda_graph_bs_decode"]))
        plan0 = None
        instance_id = shm.new_instance_id()
        for rank in range(tp):
            cfg = {"role": "scheduler", "rank": rank, "state_dir": s["state_dir"],
                   "dev_dir": s["dev_dir"], "time_scale": self.scale,
                   "shm_dir": s["shm_dir"], "shm_kib": s["shm_kib"], "tp_size": tp,
                   "instance_id": instance_id,
                   "load_seconds": s["load_seconds"], "orphans": s["orphans"],
                   "log_prefix": " TP%d" % rank if tp > 1 else "",
                   "arch": model["architectures"][0], "capture_bs": capture_bs,
                   "draft_arch": (draft or model)["architectures"][0].replace(
                       "ForCausalLM", "ForCausalLMMTP").replace(
                       "ForConditionalGeneration", "ForCausalLMMTP"),
                   "disable_cuda_graph": a["disable_cuda_graph"],
                   "chunked_prefill_size": a["chunked_prefill_size"],
                   "max_running_requests": a["max_running_requests"] or 0,
                   "context_len": context_len, "verify_error": verify_error}
            if rank >= len(gpus):
                cfg.update(device_error="CUDA error: invalid device ordinal", gpu_index=rank,
                           gpu_uuid="", plan={}, gpu_total_mib=0, gpu_reserved_mib=0, devices=[])
            else:
                g = gpus[rank]
                cfg.update(gpu_index=rank, gpu_uuid=g["uuid"], gpu_total_mib=g["memory_mib"],
                           gpu_reserved_mib=g["reserved_mib"],
                           devices=["nvidia%d" % rank, "nvidiactl", "nvidia-uvm"])
                if dev_error:
                    cfg["device_error"] = dev_error
                try:
                    p = memory.plan(g, model, a, draft, other_used_mib=others[rank],
                                    capture_bs=capture_bs)
                    cfg["plan"] = p
                except memory.OOMError as exc:
                    cfg["plan"] = exc.plan
                    cfg["fail"] = {"kind": exc.kind, "message": exc.message,
                                   "exc_type": exc.exc_type}
                    p = cfg["plan"]
                if plan0 is None:
                    plan0 = p
            title = "sglang::scheduler_TP%d" % rank if tp > 1 else "sglang::scheduler"
            proc = self.spawn(title, cfg)
            self.children.append(("scheduler", rank, proc))
        det_cfg = {"role": "detokenizer", "state_dir": s["state_dir"], "orphans": s["orphans"],
                   "time_scale": self.scale}
        self.sock = self._prebind() if s["orphans"] and s["orphans_keep_port"] else None
        det = self.spawn("sglang::detokenizer", det_cfg,
                         pass_fds=(self.sock.fileno(),) if self.sock is not None else ())
        self.children.append(("detokenizer", -1, det))
        for role, rank, proc in self.children:
            self.loop.add_reader(proc.stdout.fileno(), self.on_child_output, rank, proc)

        await self.done  # all ranks ready (failures end the process via SIGQUIT/kill_tree)

        factor = perf.speed_factor(s["profile"], model["params"], tp) * perf.replayssm_factor(model, a)
        mrr = plan0["max_running_requests"]
        # The replayssm-drift fault. gdn_backend.py _replayssm_target_verify rebuilds the verify
        # states from a frozen checkpoint plus the compact (d, k, g) ring (bf16 with compensated
        # low parts) instead of reading stored per-draft-token states: exact in exact arithmetic,
        # but not bit-identical in floating point, so a kernel can flip a near-tied argmax. The
        # sim's replay is exact; this knob stands in for a kernel that is not, so that the
        # tuner's greedy check before adopting the lever can be seen to refuse it.
        drift = s["replayssm_drift"] if perf.replayssm_acts(model, a) else 0.0
        policy = None
        if spec and a.get("speculative_adaptive"):
            # eagle_worker_v2.py EAGLEWorkerV2.__init__ builds AdaptiveSpeculativeParams (rank 0
            # logged its init line before the graphs), init_cuda_graphs hands it
            # --cuda-graph-bs-decode (None with graphs off) for the routing's padding.
            prefix = " TP0" if tp > 1 else ""
            policy = adaptive.AdaptiveParams(a["speculative_num_steps"], a.get("speculative_adaptive_config"),
                                             log=lambda msg: _proc.log(msg, prefix), log_init=False)
            policy.set_cuda_graph_bs(None if a["disable_cuda_graph"] else a.get("cuda_graph_bs_decode"))
        self.sched = Scheduler(mrr, a["speculative_num_steps"], a["speculative_num_draft_tokens"],
                               plan0["max_total_num_tokens"], factor, self.scale, s["seed"],
                               context_len, log_prefix=" TP0" if tp > 1 else "",
                               cuda_graph=not a["disable_cuda_graph"], greedy_drift=drift,
                               adaptive=policy, simulate_acc=self.simulate_acc)
        self.sched.start()
        self.srv = Server(a, self.sched, s, plan0, time.time())
        uvicorn_log("INFO:     Started server process [%d]" % os.getpid())
        uvicorn_log("INFO:     Waiting for application startup.")
        uvicorn_log("INFO:     Application startup complete.")
        try:
            if self.sock is not None:
                self.http = await asyncio.start_server(self.srv.handle, sock=self.sock,
                                                       limit=1 << 20, backlog=1024)
            else:
                self.http = await asyncio.start_server(self.srv.handle, a["host"], a["port"],
                                                       reuse_address=True, limit=1 << 20,
                                                       backlog=1024)
        except OSError as exc:
            uvicorn_log("ERROR:    [Errno %d] error while attempting to bind on address %r: %s"
                        % (exc.errno or 0, (a["host"], a["port"]), _strerror(exc)))
            uvicorn_log("INFO:     Waiting for application shutdown.")
            uvicorn_log("INFO:     Application shutdown complete.")
            self.kill_tree(include_self=False)
            return 1
        uvicorn_log("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (a["host"], a["port"]))
        if not a["skip_server_warmup"]:
            await self.warmup()
        else:
            self.srv.status = "Up"
        log("The server is fired up and ready to roll!")
        if s["wedge_after"] > 0:
            self.loop.call_later(s["wedge_after"] * self.scale, self.sched.wedge)
        self.stop = self.loop.create_future()
        await self.stop
        return 0

    def _prebind(self):
        """The orphans-keep-the-port fault (sgl-project/sglang#31645): the HTTP socket exists
        before the children and the detokenizer inherits it, so once orphaned it keeps the
        port bound (and, after listen(), accepting into a backlog nobody serves). Bound but
        not listening until the server is up, so connections are refused during load as
        with uvicorn. A port already taken falls back to the normal bind after load, which
        then fails with uvicorn's message."""
        a = self.args
        try:
            sock = socket.socket(socket.AF_INET6 if ":" in a["host"] else socket.AF_INET,
                                 socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((a["host"], a["port"]))
        except OSError:
            return None
        sock.set_inheritable(True)
        return sock

    async def warmup(self):
        from sglang_sim.scheduler import Request
        from sglang_sim import tokenizer
        ids = tokenizer.encode("The capital city of France is")
        req = Request(self.sched.new_rid(), ids, 8, False, 0.0, self.sched.seed,
                      log_metrics=False, steps=self.sched.steps)
        self.sched.submit(req)
        await req.done
        uvicorn_log('INFO:     127.0.0.1:%d - "POST /generate HTTP/1.1" 200 OK'
                    % random.randint(32768, 60999))
        self.srv.status = "Up"

    def on_term(self):
        # uvicorn's graceful shutdown, then SGLang's kill_process_tree(include_parent=False).
        self.shutting_down = True
        uvicorn_log("INFO:     Shutting down")
        if self.srv is not None:
            self.srv.status = "Shutdown"
        if self.http is not None:
            self.http.close()
        uvicorn_log("INFO:     Waiting for application shutdown.")
        uvicorn_log("INFO:     Application shutdown complete.")
        uvicorn_log("INFO:     Finished server process [%d]" % os.getpid())
        for _role, _rank, proc in self.children:
            try:
                proc.kill()
            except OSError:
                pass
        for _role, _rank, proc in self.children:
            try:
                proc.wait(timeout=2)
            except Exception:
                pass
            _proc.remove_proc_state(self.settings["state_dir"], proc.pid)
        stop = getattr(self, "stop", None)
        if stop is not None and not stop.done():
            stop.set_result(True)
        else:
            # Before uvicorn runs, SGLang's main process has Python's default SIGTERM action.
            sys.stderr.flush()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


def server_args_line(args):
    """The one line 0.5.23 logs with every argument, the API key in clear: the main process,
    srt/entrypoints/engine.py ``Engine._launch_subprocesses`` (``logger.info(f"server_args=
    {_server_args_for_logging(server_args)}")``), a dict from ``ServerArgs.resolved_dict`` in
    which ``redact_watermark_secrets`` (srt/sampling/watermarking/core.py) hides the watermark
    keys only. Under systemd it lands in the journal."""
    return "server_args=%r" % dict((k, v) for k, v in args.items() if not k.startswith("_"))


def _strerror(exc):
    if exc.errno == errno.EADDRINUSE:
        return "address already in use"
    return (exc.strerror or str(exc)).lower()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ns = server_args.parse(argv)  # argparse: exit 2 with "sglang serve: error: ..."
    try:
        settings = config.load_settings()
    except config.SimConfigError as exc:
        sys.stderr.write("sglang_sim: %s\n" % exc)
        return 2
    gpus = config.gpus(settings)
    try:
        args, warnings = server_args.resolve(ns, gpus[0]["memory_mib"] if gpus else 0,
                                             model=config.lookup_model(ns.model_path)[1])
    except server_args.ArgsError as exc:
        _fail_args(exc)
    err = _check_model_path(args["model_path"])
    if err:
        sys.stderr.write("Traceback (most recent call last):\n%s\n" % err)
        return 1
    for w in warnings:
        log(w)
    log(server_args_line(args))
    try:
        os.makedirs(settings["state_dir"], exist_ok=True)
        probe = os.path.join(settings["state_dir"], ".probe-%d" % os.getpid())
        with open(probe, "w"):
            pass
        os.unlink(probe)
    except OSError as exc:
        sys.stderr.write("sglang_sim: cannot write the state dir %s (SGLANG_SIM_STATE_DIR): %s\n"
                         % (settings["state_dir"], exc))
        return 1
    launcher = Launcher(args, settings, warnings)
    try:
        return asyncio.run(launcher.run())
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
