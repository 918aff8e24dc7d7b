# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tune speculative depth on a live SGLang server without systemd, with the collection's own
decisions and benchmark.

The role ``mtp_tune`` restarts a systemd unit per candidate; a lent GPU machine has no systemd,
so this driver replaces only the moving parts (start, wait, stop: server.py) and keeps every
decision where the role has it, so what it measures is what the role would decide on:

- candidates, levels, the next launch, the winner: ``plugins/plugin_utils/mtp_*.py``
  (mtp_tune_candidates, mtp_tune_levels, mtp_tune_next, mtp_tune_capped, mtp_tune_winner),
  called with the role's arguments and its defaults (read from roles/mtp_tune/defaults/main.yml);
- the attempt records: the same keys roles/mtp_tune/tasks/candidate.yml appends;
- the benchmark: ``plugins/module_utils/sglang_runner.run_benchmark`` with the cfg the
  ``sglang_bench`` module builds from the role's task arguments;
- resuming: ``plugins/plugin_utils/mtp_resume.py`` (mtp_tune_fingerprint, mtp_tune_resume_plan).

Each strategy is meant to run as its own invocation with its own launches: a results file
names the strategy it was measured under and ``--resume`` refuses another one.

Usage (real server):
  python3 tune_real.py --server-args "--model-path /m/target ..." --draft /m/draft \\
      --strategy adaptive --steps 1-8 --out adaptive.json
Usage (simulator): --server-module sglang_sim.launch_server --algorithm NEXTN --draft ''
"""

import argparse
import datetime
import importlib.util
import json
import os
import shlex
import signal
import socket
import statistics
import sys
import time
import traceback


def _load_server():
    """server.py, loaded from its path: this directory is no package, and loading it makes the
    checkout importable as the collection for the imports below."""
    name = "real_sglang_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                         "server.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


srv = _load_server()

# pylint: disable=wrong-import-position
from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_fit  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_resume  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_score  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_search  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_settings  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_winner  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_runner as runner  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.module_utils.sglang_transport import ClientError  # noqa: E402

ROLE_DEFAULTS = os.path.join(srv.ROOT, "roles", "mtp_tune", "defaults", "main.yml")
SCHEMA = 1


class Abort(Exception):
    """A reason to stop the whole run (not one candidate's failure, which is recorded)."""


def role_defaults(path=ROLE_DEFAULTS):
    """The role's defaults (roles/mtp_tune/defaults/main.yml), read rather than copied so that a
    changed role default changes this driver too. PyYAML is in the controller venv and in the
    lent GPU machine's image."""
    import yaml  # pylint: disable=import-outside-toplevel
    with open(path, encoding="utf-8") as fh:
        return {k: v for k, v in yaml.safe_load(fh).items() if k.startswith("mtp_tune_")}


def parse_steps(text):
    """``1-8``, ``1,2,4`` or ``1-3,6`` into a list of step counts."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


def parse_levels(text):
    return [int(x) for x in str(text).replace(" ", "").split(",") if x]


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_json(path, doc):
    """Write atomically: a reader (or a crash) sees the previous file or this one, never half."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=False, default=str)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def port_busy(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _flag_value(argv, *names):
    for i, tok in enumerate(argv):
        for name in names:
            if tok == name and i + 1 < len(argv):
                return argv[i + 1]
            if tok.startswith(name + "="):
                return tok.split("=", 1)[1]
    return None


class Tuner:
    """One tuning run: the role's loop (candidate.yml) with server.py in place of systemd."""

    def __init__(self, args):
        self.args = args
        self.defaults = role_defaults()
        d = self.defaults
        self.base_args = shlex.split(args.server_args)
        for flag in ("--port", "--host"):
            if _flag_value(self.base_args, flag) is not None or flag in self.base_args:
                raise Abort("leave %s out of --server-args: the driver binds 127.0.0.1:%d itself "
                            "(loopback only; the probes and the benchmark use that port)" % (flag, args.port))
        self.objective = args.objective
        self.noise = d["mtp_tune_noise"] if args.noise is None else args.noise
        self.seed = d["mtp_tune_seed"] if args.seed is None else args.seed
        self.probe_ends = d["mtp_tune_probe_ends"] if args.probe_ends is None else args.probe_ends
        self.max_launches = d["mtp_tune_max_launches"] if args.max_launches is None else args.max_launches
        self.fit_classes = d["mtp_tune_fit_classes"]
        self.candidates = mtp_settings.mtp_tune_candidates(parse_steps(args.steps), [1], [])
        levels = parse_levels(args.levels) if args.levels else d["mtp_tune_concurrency"]
        self.plan = mtp_settings.mtp_tune_levels(levels, self.objective, args.level)
        self.level = self.plan["level"]
        # What every decision is taken under, as the role's _mtp_tune_spec (no SLO, fit search off).
        self.spec = mtp_settings.spec_from({
            "objective": self.objective, "level": self.level, "levels": self.plan["levels"], "noise": self.noise,
            "strategy": args.strategy, "seed": self.seed, "probe_ends": self.probe_ends, "fit_retry": False,
            "fit_classes": self.fit_classes, "max_launches": self.max_launches,
            "remeasure_launches": d["mtp_tune_remeasure_launches"]})
        # The fit search stays off (the role's default); the ladder is still what judges a server
        # SGLang capped below the judged concurrency, as candidate.yml does.
        self.ladder = mtp_fit.mtp_tune_fit_ladder(
            None, None, d["mtp_tune_fit_bs_floor"],
            self.level if self.level is not None else max(self.plan["levels"]),
            d["mtp_tune_fit_default_bs"], d["mtp_tune_fit_default_mrr"], {}, False,
            "--disable-radix-cache" not in self.base_args)
        self.bench = {
            "input_len": args.bench_input_len, "output_len": args.bench_output_len,
            "num_prompts": args.bench_requests, "repeats": args.bench_repeats, "dataset": "random",
            "temperature": args.bench_temperature, "time_scale": args.bench_time_scale,
            "endpoint": args.bench_endpoint, "prompt_format": args.bench_prompt_format,
            "warmup": args.bench_warmup, "timeout": args.bench_timeout,
        }
        self.workload = mtp_resume.mtp_tune_fingerprint(
            self.bench, _flag_value(self.base_args, "--model-path", "--model"), args.release,
            _flag_value(self.base_args, "--tp-size", "--tp"), None, self.plan["levels"])
        # What a figure depends on beyond the workload fingerprint; --resume refuses a file
        # measured under another setup (another strategy included: strategies never share).
        self.setup = {"server_module": args.server_module, "server_args": self.base_args,
                      "algorithm": args.algorithm, "draft": args.draft or None, "strategy": args.strategy,
                      "objective": self.objective, "level": self.level, "bench": self.bench,
                      "accept_p": args.accept_p}
        self.run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.out = args.out or args.resume
        self.log_dir = args.log_dir or os.path.join(os.path.dirname(os.path.abspath(self.out)), "logs")
        os.makedirs(self.log_dir, exist_ok=True)
        os.makedirs(os.path.dirname(os.path.abspath(self.out)), exist_ok=True)
        self.env = dict(os.environ)
        for item in args.env or []:
            key, dummy, value = item.partition("=")
            self.env[key] = value
        self.attempts = []
        self.superseded = []
        self.noise_runs = []
        self.launch_no = 0
        self.baseline_mib = None
        self.doc = None
        self.state = "running"
        self.error = None
        self.started = now_iso()

    # -- resume ---------------------------------------------------------------------------
    def load_resume(self):
        """Attempts of an earlier results file worth keeping, by the role's own resume plan."""
        path = self.args.resume
        if not path or not os.path.exists(path):
            return "nothing to resume"
        with open(path, encoding="utf-8") as fh:
            loaded = json.load(fh)
        diff = sorted(k for k in set(self.setup) | set(loaded.get("setup") or {})
                      if (loaded.get("setup") or {}).get(k) != self.setup.get(k))
        if diff:
            raise Abort("%s was measured under another setup (%s differ: %s); not resumed. Give a new --out."
                        % (path, ", ".join(diff), "; ".join(
                            "%s %r -> %r" % (k, (loaded.get("setup") or {}).get(k), self.setup.get(k))
                            for k in diff)))
        plan = mtp_resume.mtp_tune_resume_plan(loaded, self.candidates, self.plan["levels"], self.workload, "measure",
                                               self.defaults["mtp_tune_resume_retry_classes"], False)
        self.attempts = plan["attempts"]
        self.superseded = plan["superseded"]
        self.noise_runs = list(((loaded.get("relaunch_noise") or {}).get("samples")) or [])
        return plan["message"]

    # -- one launch -----------------------------------------------------------------------
    def server_argv(self, cand, overrides):
        if overrides:
            raise Abort("fit overrides %r: the fit search is off in this driver" % (overrides,))
        argv = list(self.base_args) + ["--host", "127.0.0.1", "--port", str(self.args.port),
                                       "--speculative-algorithm", self.args.algorithm]
        if self.args.draft:
            argv += ["--speculative-draft-model-path", self.args.draft]
        return argv + ["--speculative-num-steps", str(cand["steps"]),
                       "--speculative-eagle-topk", str(cand["topk"]),
                       "--speculative-num-draft-tokens", str(cand["draft_tokens"])]

    def candidate_env(self, cand):
        """The server's environment for one candidate, and the accept length pinned in it (None:
        not pinned). SGLang reads the pin in speculative/spec_utils.py (SIMULATE_ACC_LEN,
        generate_simulated_accept_index): match-expected accepts floor or ceil of it per round. The
        pin is the chain model the search reasons with (mtp_search.chain_tau)."""
        if self.args.accept_p is None:
            return self.env, None
        pinned = round(mtp_search.chain_tau(cand["steps"], self.args.accept_p), 4)
        env = dict(self.env, SGLANG_SIMULATE_ACC_LEN=str(pinned), SGLANG_SIMULATE_ACC_METHOD="match-expected")
        return env, pinned

    def bench_cfg(self):
        """The cfg sglang_bench's main() hands run_benchmark, with the values candidate.yml passes."""
        b = self.bench
        return {
            "url": "http://127.0.0.1:%d" % self.args.port, "api_key": None, "endpoint": b["endpoint"],
            "model": None, "concurrency": list(self.plan["levels"]), "num_prompts": b["num_prompts"],
            "duration": None, "warmup": b["warmup"], "input_len": b["input_len"], "output_len": b["output_len"],
            "temperature": b["temperature"], "ignore_eos": True, "dataset": "random", "dataset_src": "node",
            "seed": 42, "repeats": b["repeats"], "confidence": 0.95, "timeout": b["timeout"],
            "flush_cache": False, "time_scale": b["time_scale"], "steady_state_ratio": 0.9,
            "prompt_format": b["prompt_format"], "fail_on_empty_level": False, "max_failure_rate": 0.0,
            "warmup_output_len": 16, "prompts": None,
        }

    def _wait_port(self):
        """A server still listening on the port would be measured in place of the candidate."""
        deadline = time.monotonic() + 30
        while port_busy(self.args.port):
            if time.monotonic() >= deadline:
                raise Abort("127.0.0.1:%d is still taken by something this run did not start; "
                            "stop it or give --port" % self.args.port)
            time.sleep(0.5)

    def _benchmark(self):
        """(result or None, failed, msg, partial levels): candidate.yml's ignore_errors, in Python."""
        try:
            return runner.run_benchmark(self.bench_cfg()), False, None, []
        except runner.BenchError as exc:
            return None, True, str(exc), (exc.partial or {}).get("levels", [])
        except ClientError as exc:
            return None, True, "benchmark client error: %s" % exc, []
        except Exception as exc:  # pylint: disable=broad-except
            # the module's own wording: one clear message, and the trace for whoever reports it
            traceback.print_exc()
            return None, True, "sglang_bench failed unexpectedly (%s: %s)" % (type(exc).__name__, exc), []

    def launch(self, nxt, purpose="search"):
        """Start, wait, benchmark and stop one candidate; returns the attempt record."""
        cand = nxt["candidate"]
        self.launch_no += 1
        t0 = time.time()
        started = now_iso()
        self._wait_port()
        name = "%s-%s-%02d-%s-%s.log" % (
            self.run_id, self.args.strategy, self.launch_no, purpose, cand["key"])
        log = os.path.join(self.log_dir, name)
        env, pinned = self.candidate_env(cand)
        server = srv.Server(self.server_argv(cand, nxt.get("overrides")), log, self.args.port, env=env,
                            python=self.args.python, module=self.args.server_module)
        print("[%d] %s %s: starting (%s)" % (self.launch_no, purpose, cand["key"], nxt.get("reason")), flush=True)
        result, bench_failed, bench_msg, partial = None, False, None, []
        try:
            server.start()
        except OSError as exc:  # no such interpreter, log not writable: every launch would fail alike
            raise Abort("cannot start %s: %s" % (" ".join(server.command()[:3]), exc)) from exc
        try:
            wait = server.wait_ready(self.args.ready_timeout, interval=self.args.ready_poll)
            launch_s = round(time.time() - t0, 3)
            if wait["ready"]:
                result, bench_failed, bench_msg, partial = self._benchmark()
        finally:
            stop = server.stop(self.args.stop_grace)
        gpu_idle_s = srv.wait_gpu_idle(self.args.gpu_idle_timeout, self.baseline_mib)
        ready = wait["ready"]
        cap = (mtp_fit.mtp_tune_capped(result.get("server"), self.ladder, self.plan["levels"])
               if ready and not bench_failed else None)
        ok = ready and not bench_failed and cap is None
        levels = (result or {}).get("levels") or partial
        if ok:
            failure_class = failure_line = None
        elif not ready:
            failure_class, failure_line = wait["failure_class"] or "unknown", wait["failure_line"]
        elif cap is not None:
            failure_class = "capped"
            failure_line = ("SGLang capped max_running_requests to %s, below the floor of %s" % (
                cap, self.ladder["judged_floor"]))
        else:
            failure_class, failure_line = "bench_failed", bench_msg
        metrics = (result["by_concurrency"] if ok
                   else dict((str(lv["concurrency"]), lv) for lv in levels if "concurrency" in lv))
        attempt = {
            # the keys candidate.yml records, so the collection's filters read them as the role's
            "key": cand["key"], "candidate": cand, "overrides": nxt.get("overrides") or {},
            "fit_rung": nxt.get("fit_rung"), "reason": nxt.get("reason"), "run": self.run_id,
            "workload": self.workload, "status": "ok" if ok else "failed",
            "failure_class": failure_class, "failure_line": failure_line,
            "hint": None if ready else wait.get("hint"),
            "journal_tail": [] if ready else wait.get("log_tail", []),
            "metrics": metrics, "bench_warnings": (result or {}).get("warnings", []),
            "server": (result or {}).get("server"),
            "timings": {"started": started, "launch_s": launch_s, "wait_s": wait["seconds"],
                        "bench_s": (result or {}).get("duration_s"), "wall_s": round(time.time() - t0, 3)},
            # what only this driver knows: the process side of the launch
            "launch": self.launch_no, "purpose": purpose, "log": log, "argv": server.command(),
            "accept_pinned": pinned,
            "pid": server.proc.pid, "pids": sorted(server.descendants | {server.proc.pid}),
            "ready": dict((k, wait.get(k)) for k in ("ready", "seconds", "exit_code", "reason", "ready_line")),
            "stop": stop, "gpu_idle_s": gpu_idle_s,
            "figures": dict((c, mtp_score.mtp_tune_level_metrics(lv)) for c, lv in metrics.items()),
        }
        return attempt

    # -- the loop -------------------------------------------------------------------------
    def next_launch(self):
        return mtp_search.mtp_tune_next(self.attempts, self.candidates, self.ladder, self.spec)

    def winner(self):
        return mtp_winner.mtp_tune_winner(self.attempts, self.spec, None, now_iso(), self.candidates)

    def search_launches(self):
        # the role's count: attempts of this run that launched a server (resumed ones did not)
        return sum(1 for a in self.attempts if a.get("status") in ("ok", "failed") and not a.get("resumed"))

    def save(self):
        self.doc = {
            "schema": SCHEMA, "tool": "tests/gpu/real_sglang/tune_real.py", "run": self.run_id,
            "state": self.state, "error": self.error, "started": self.started, "updated": now_iso(),
            "strategy": self.args.strategy, "objective": self.objective, "level": self.level,
            "levels": self.plan["levels"], "candidates": self.candidates, "setup": self.setup,
            "workload": self.workload, "gpu_baseline_mib": self.baseline_mib,
            "launches": self.search_launches(),
            "launches_total": self.search_launches() + sum(
                1 for s in self.noise_runs if s.get("origin") == "relaunch" and s.get("run") == self.run_id),
            "attempts": self.attempts, "winner": self.winner(), "relaunch_noise": self.noise_summary(),
            "superseded": self.superseded,
        }
        write_json(self.out, self.doc)

    def run(self, message):
        """Launch until mtp_tune_next says stop, saving after each launch; ``message`` says what
        was resumed."""
        print("%s over steps %s, objective %s at C=%s, levels %s; %s" % (
            self.args.strategy, [c["steps"] for c in self.candidates], self.objective, self.level,
            self.plan["levels"], message), flush=True)
        self.baseline_mib = srv.gpu_memory_used_mib()
        self.save()
        while True:
            nxt = self.next_launch()
            if nxt is None:
                break
            att = self.launch(nxt)
            self.attempts.append(att)
            self.save()
            progress = mtp_score.mtp_tune_progress(att, self.attempts, self.spec)
            print("[%d] %s" % (att["launch"], progress), flush=True)
        if self.args.relaunch_noise > 0:
            self.relaunch_noise()
        self.state = "finished"
        self.save()

    # -- launch-to-launch noise -----------------------------------------------------------
    def _sample(self, att, origin):
        sc_ = mtp_score.mtp_tune_score(att, self.spec)
        fig = (att.get("figures") or {}).get(str(sc_["level"] if sc_["level"] is not None else self.level)) or {}
        return {"origin": origin, "run": att.get("run"), "launch": att.get("launch"), "key": att.get("key"),
                "status": att.get("status"), "failure_class": att.get("failure_class"),
                "value": sc_["value"], "level": sc_["level"], "decode_tps_mean": fig.get("decode_tps_mean"),
                "output_throughput": fig.get("output_throughput"), "accept_length": fig.get("accept_length"),
                "wait_s": (att.get("timings") or {}).get("wait_s"), "log": att.get("log")}

    def relaunch_noise(self):
        """Relaunch the first candidate that served N more times: how far one launch's figure moves
        from the next is what the role's noise band (mtp_tune_noise) stands for."""
        oks = [a for a in self.attempts if a.get("status") == "ok"]
        if not oks:
            return  # relaunching a candidate that cannot serve measures nothing
        first = oks[0]
        if not any(s.get("origin") in ("search", "resumed") for s in self.noise_runs):
            self.noise_runs.insert(0, self._sample(first, "resumed" if first.get("resumed") else "search"))
        nxt = {"candidate": first["candidate"], "overrides": {}, "fit_rung": None, "reason": "relaunch noise"}
        for dummy in range(self.args.relaunch_noise):
            att = self.launch(nxt, purpose="noise")
            self.noise_runs.append(self._sample(att, "relaunch"))
            self.save()
            print("[%d] noise %s: %s" % (att["launch"], att["key"], "%.2f" % self.noise_runs[-1]["value"]
                                         if self.noise_runs[-1]["value"] is not None else
                                         "FAILED (%s)" % att["failure_class"]), flush=True)

    def noise_summary(self):
        if not self.noise_runs:
            return None
        vals = [s["value"] for s in self.noise_runs if s.get("value") is not None]
        out = {"key": self.noise_runs[0].get("key"), "objective": self.objective, "level": self.level,
               "samples": self.noise_runs, "n": len(vals), "mean": None, "stdev": None, "cv": None,
               "min": None, "max": None, "range_rel": None, "noise_setting": self.noise}
        if vals:
            mean = statistics.fmean(vals)
            sd = statistics.stdev(vals) if len(vals) > 1 else None
            out.update(mean=mean, stdev=sd, cv=(sd / mean) if sd is not None and mean else None,
                       min=min(vals), max=max(vals), range_rel=(max(vals) - min(vals)) / mean if mean else None)
        return out

    # -- report ---------------------------------------------------------------------------
    def summary(self):
        doc = self.doc or {}
        w = doc.get("winner")
        lines = ["%s: %s, %d launch(es) (%d in all), state %s" % (
            self.args.strategy, "winner %s (%s %.1f at C=%s; %s)" % (
                w["key"], self.objective, w["score"]["value"], w["score"]["level"], w["decided_by"]) if w
            else "no winner", doc.get("launches", 0), doc.get("launches_total", 0), doc.get("state"))]
        for att in self.attempts:
            f = (att.get("figures") or {}).get(str(self.level)) or {}
            lines.append("  %-10s %-6s ready %6ss  decode %s tok/s  out %s tok/s  accept %s%s" % (
                att["key"], att["status"], (att.get("timings") or {}).get("wait_s"),
                _fmt(f.get("decode_tps_mean")), _fmt(f.get("output_throughput")), _fmt(f.get("accept_length"), 2),
                "  [%s]" % att["failure_class"] if att.get("failure_class") else "")
                + ("  (resumed)" if att.get("resumed") else ""))
        noise = doc.get("relaunch_noise")
        if noise and noise.get("n"):
            lines.append("  relaunch noise %s: n=%d mean %s cv %s range %s (band assumed +/-%s)" % (
                noise["key"], noise["n"], _fmt(noise["mean"]), _fmt(noise["cv"], 4), _fmt(noise["range_rel"], 4),
                noise["noise_setting"]))
        lines.append("results: %s" % self.out)
        return "\n".join(lines)


def _fmt(x, digits=1):
    return "-" if x is None else ("%.*f" % (digits, x))


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server-args", required=True,
                   help="the server's arguments without --host/--port and the speculative flags (one string)")
    p.add_argument("--algorithm", default="STANDALONE", help="--speculative-algorithm (default STANDALONE)")
    p.add_argument("--draft", default="", help="--speculative-draft-model-path; empty: not passed (NEXTN)")
    p.add_argument("--strategy", choices=mtp_settings.STRATEGIES, default="adaptive")
    p.add_argument("--steps", default="1-8", help="speculative step counts: 1-8, 1,2,4 or 1-3,6")
    p.add_argument("--objective", choices=("latency", "throughput"), default="latency")
    p.add_argument("--level", type=int, default=None, help="concurrency judged (default: the objective's)")
    p.add_argument("--levels", default=None, help="concurrency levels, e.g. 1,4,16 (default: the role's)")
    p.add_argument("--seed", type=int, default=None, help="adaptive seed steps (default: the role's)")
    p.add_argument("--probe-ends", default=None, help="adaptive probe_ends (default: the role's)")
    p.add_argument("--noise", type=float, default=None, help="noise half-width (default: the role's)")
    p.add_argument("--max-launches", type=int, default=None, help="launch budget (default: the role's)")
    p.add_argument("--out", default=None, help="results JSON, rewritten after every launch")
    p.add_argument("--resume", default=None, help="results JSON of an earlier call: skip what it measured")
    p.add_argument("--relaunch-noise", type=int, default=0, metavar="N",
                   help="relaunch the first candidate N more times and record the launch-to-launch spread")
    p.add_argument("--server-module", default="sglang.launch_server")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the server")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--log-dir", default=None, help="server logs (default: logs/ next to --out)")
    p.add_argument("--env", action="append", metavar="KEY=VALUE", help="extra server environment (repeatable)")
    p.add_argument("--accept-p", type=float, default=None, metavar="P",
                   help="pin each candidate's accept length to (1 - P^(steps+1)) / (1 - P) with SGLang's own "
                        "knob (SGLANG_SIMULATE_ACC_LEN, method match-expected): a random-weight model's "
                        "draft then accepts as a draft of per-position acceptance P would")
    p.add_argument("--release", default=None, help="release label stored in the workload fingerprint")
    p.add_argument("--ready-timeout", type=float, default=None, help="seconds per launch (default: the role's)")
    p.add_argument("--ready-poll", type=float, default=0.5)
    p.add_argument("--stop-grace", type=float, default=15.0)
    p.add_argument("--gpu-idle-timeout", type=float, default=120.0)
    p.add_argument("--bench-requests", type=int, default=None, help="requests per level (default 5 x C, >= 10)")
    p.add_argument("--bench-input-len", type=int, default=None)
    p.add_argument("--bench-output-len", type=int, default=None)
    p.add_argument("--bench-repeats", type=int, default=None)
    p.add_argument("--bench-endpoint", choices=("generate", "completions", "chat"), default="generate")
    p.add_argument("--bench-prompt-format", choices=("auto", "token_ids", "text"), default="auto",
                   help="auto sends token ids 1000-30000 to SGLang: use text for a model with a smaller vocabulary")
    p.add_argument("--bench-warmup", type=int, default=None)
    p.add_argument("--bench-temperature", type=float, default=None)
    p.add_argument("--bench-timeout", type=float, default=None)
    p.add_argument("--bench-time-scale", type=float, default=None, help="the simulator's SGLANG_SIM_TIME_SCALE")
    return p


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    d = role_defaults()
    for name, key in (("ready_timeout", "mtp_tune_wait_timeout"), ("bench_input_len", "mtp_tune_bench_input_len"),
                      ("bench_output_len", "mtp_tune_bench_output_len"), ("bench_repeats", "mtp_tune_bench_repeats"),
                      ("bench_temperature", "mtp_tune_bench_temperature"), ("bench_timeout", "mtp_tune_bench_timeout"),
                      ("bench_time_scale", "mtp_tune_bench_time_scale"),
                      ("bench_requests", "mtp_tune_bench_num_prompts")):
        if getattr(args, name) is None:
            setattr(args, name, d[key])
    if not args.out and not args.resume:
        build_parser().error("give --out (or --resume, which is then also the output)")
    if args.relaunch_noise < 0:
        build_parser().error("--relaunch-noise must be >= 0")
    if args.accept_p is not None and not 0.0 < args.accept_p < 1.0:
        build_parser().error("--accept-p must lie strictly between 0 and 1")
    return args


def _raise_interrupt(signum, _frame):
    # SIGTERM takes the same path as Ctrl-C, so the server being measured is stopped too.
    raise KeyboardInterrupt("signal %d" % signum)


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        tuner = Tuner(args)
        # Before anything is written: a refused resume must leave the earlier file as it was.
        message = tuner.load_resume()
    except (Abort, mtp_settings.AnsibleFilterError, ValueError, OSError) as exc:
        print("tune_real: %s" % exc, file=sys.stderr)
        return 2
    rc = 0
    try:
        tuner.run(message)
    except KeyboardInterrupt:
        tuner.state, tuner.error, rc = "interrupted", "interrupted", 130
    except (Abort, mtp_settings.AnsibleFilterError) as exc:
        tuner.state, tuner.error, rc = "failed", str(exc), 2
        print("tune_real: %s" % exc, file=sys.stderr)
    try:
        tuner.save()
    except OSError as exc:
        print("tune_real: could not write %s: %s" % (tuner.out, exc), file=sys.stderr)
    print(tuner.summary(), flush=True)
    if rc == 0 and not (tuner.doc or {}).get("winner"):
        rc = 1  # like the role: no candidate could serve
    return rc


if __name__ == "__main__":
    sys.exit(main())
