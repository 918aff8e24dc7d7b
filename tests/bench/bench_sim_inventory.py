"""Is the benchmark client the bottleneck with the sim inventory's settings? (prints figures)

Reads inventories/sim/group_vars/sglang_nodes.yml (the simulator's time scale and load time, the
model, the tuning's levels, lengths, prompt count and benchmark time scale), starts the simulator
on this machine with those settings, runs sglang_bench's own client (module_utils/sglang_runner)
over the tuning's levels for a few speculative steps, and prints per cell the figures and
client_limited with its reason (CPU share of one core, event-loop lag p99), then whether any
cell the objective is judged at was limited. Nothing is pinned: on the sim inventory the node
container shares the machine's cores with the client, as here.

Run: .venv/bin/python tests/bench/bench_sim_inventory.py [--steps 1 3 5] [--time-scale X]
     [--concurrency 1 4 16 32] [--num-prompts N]
Options override the inventory's values, to compare settings on the same machine.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventories" / "sim" / "group_vars" / "sglang_nodes.yml"
sys.path.insert(0, str(ROOT / "tests" / "bench"))
from bench_client import COLLECTIONS  # noqa: E402  (one symlinked collection tree for both)
from loopback import free_port  # noqa: E402  (bench_client put tests/ on the path)


def client_module():
    link = COLLECTIONS / "ansible_collections" / "blackwell" / "sglang"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(ROOT, target_is_directory=True)
    sys.path.insert(0, str(COLLECTIONS))
    from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_runner
    return sglang_runner


def start_sim(inv, steps, sim_scale, load_seconds):
    tmp = tempfile.mkdtemp(prefix="bench-inv-")
    port = free_port()
    env = dict(os.environ, SGLANG_SIM_TIME_SCALE=str(sim_scale),
               SGLANG_SIM_LOAD_SECONDS=str(load_seconds),
               SGLANG_SIM_PROFILE=inv.get("sglang_install_sim_profile", "rtx-pro-6000-x4"),
               SGLANG_SIM_STATE_DIR=os.path.join(tmp, "state"),
               SGLANG_SIM_DEV_DIR=os.path.join(tmp, "dev"),
               SGLANG_SIM_CONFIG=os.path.join(tmp, "none.json"),
               PYTHONPATH=str(ROOT / "sim"))
    cmd = [sys.executable, "-m", "sglang_sim.launch_server",
           "--model-path", inv["sglang_service_model_path"], "--tp-size", str(inv["sglang_service_tp"]),
           "--kv-cache-dtype", inv.get("sglang_service_kv_cache_dtype", "bf16"), "--port", str(port),
           "--enable-metrics", "--speculative-algorithm", "NEXTN",
           "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
           "--speculative-num-draft-tokens", str(steps + 1)]
    log = open(os.path.join(tmp, "server.log"), "wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = "http://127.0.0.1:%d" % port
    t0 = time.time()
    while time.time() - t0 < 300:
        if proc.poll() is not None:
            raise SystemExit("sim exited: %s" % open(os.path.join(tmp, "server.log")).read()[-1500:])
        try:
            with urllib.request.urlopen(url + "/health_generate", timeout=10) as r:  # loopback
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.3)
    return proc, log, tmp, url


def stop_sim(proc, log, tmp):
    import signal
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the group this script started
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    log.close()
    shutil.rmtree(tmp, ignore_errors=True)


def main():
    with open(INVENTORY) as fh:
        inv = yaml.safe_load(fh)
    sim_cfg = inv.get("sglang_install_sim_config") or {}
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[1, 3, 5])
    ap.add_argument("--time-scale", type=float, default=None,
                    help="the simulator's and the benchmark's (default: the inventory's)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=inv.get("mtp_tune_concurrency"))
    ap.add_argument("--num-prompts", type=int, default=inv.get("mtp_tune_bench_num_prompts"))
    ap.add_argument("--input-len", type=int, default=inv.get("mtp_tune_bench_input_len", 1024))
    ap.add_argument("--output-len", type=int, default=inv.get("mtp_tune_bench_output_len", 1024))
    ap.add_argument("--load-seconds", type=float, default=2.0,
                    help="simulated load time (short: only the benchmark is of interest)")
    args = ap.parse_args()
    scale = args.time_scale if args.time_scale is not None else float(
        inv.get("mtp_tune_bench_time_scale", sim_cfg.get("time_scale", 1.0)))
    objective = inv.get("mtp_tune_objective", "latency")
    level = inv.get("mtp_tune_level")
    if level is None:
        level = 1 if objective == "latency" else max(args.concurrency)
    judged = list(args.concurrency) if objective == "slo" and level is None else [level]
    runner = client_module()
    try:
        load = subprocess.check_output(["uptime"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        load = "-"
    head = (scale, args.concurrency, args.input_len, args.output_len, args.num_prompts or "default",
            objective, judged, os.cpu_count(), load)
    print("# sim inventory: time scale %s, levels %s, in/out %s/%s, num_prompts %s, objective %s "
          "judged at C=%s; %d cores; %s" % head)
    print("| steps | C | per-request tok/s | aggregate tok/s | client CPU | lag p99 ms | limited |")
    print("|---|---|---|---|---|---|---|")
    judged_limited = 0
    cells = 0
    limited_cells = 0
    for steps in args.steps:
        proc, log, tmp, url = start_sim(inv, steps, scale, args.load_seconds)
        try:
            res = runner.run_benchmark({"url": url, "concurrency": list(args.concurrency),
                                        "num_prompts": args.num_prompts, "input_len": args.input_len,
                                        "output_len": args.output_len, "time_scale": scale,
                                        "timeout": 600})
        finally:
            stop_sim(proc, log, tmp)
        for lv in res["levels"]:
            c = lv["concurrency"]
            cells += 1
            limited_cells += bool(lv["client_limited"])
            if c in judged and lv["client_limited"]:
                judged_limited += 1
            print("| %d | %d | %.0f | %.0f | %.0f%% | %.1f | %s |" % (
                steps, c, (lv.get("decode_tps_per_request") or {}).get("mean") or 0,
                lv.get("output_throughput") or 0, 100 * (lv.get("client_cpu_fraction") or 0),
                lv.get("client_loop_lag_p99_ms") or 0,
                ("**yes**: " + lv["client_limit_reason"]) if lv["client_limited"] else "no"))
            sys.stdout.flush()
    print()
    print(json.dumps({"time_scale": scale, "cells": cells, "limited_cells": limited_cells,
                      "judged_levels": judged, "judged_limited_cells": judged_limited}))


if __name__ == "__main__":
    main()
