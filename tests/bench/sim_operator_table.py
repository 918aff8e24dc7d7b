"""The operator's table measured end to end on the simulator: per-request tok/s at C=1 and
aggregate tok/s at C=16/C=32 for steps 1, 3, 4, 5, with the project's own benchmark client
(plugins/module_utils/sglang_runner.py), next to the operator's figures and perf.py's
calibration. Each step runs on a fresh simulator of the default profile (4x RTX PRO 6000,
Qwen3.5-122B-A10B, tp 4, bf16 KV, NEXTN topk 1), with the radix cache on (0.5.23's default:
the hybrid state pool caps the running requests) and, with ``--radix both``, off.

    .venv/bin/python tests/bench/sim_operator_table.py [--time-scale 0.1] [--radix on|off|both]
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / ".cache" / "collections"
SIM_DIR = ROOT / "sim"
MODEL = "Qwen/Qwen3.5-122B-A10B"
sys.path.insert(0, str(ROOT / "tests"))
from loopback import free_port  # noqa: E402
# DESIGN.md, the operator's measurements (tok/s): C=1 per request; aggregate at C=16 / C=32.
OPERATOR = {1: {"c1": 123}, 3: {"c1": 234, "c32": 1979}, 4: {"c1": 277, "c16": 1596},
            5: {"c1": 282, "c16": 1119}}


def start_sim(steps, radix_off, scale, tmp):
    port = free_port()
    env = dict(os.environ, SGLANG_SIM_TIME_SCALE=str(scale), SGLANG_SIM_LOAD_SECONDS="2",
               SGLANG_SIM_STATE_DIR=os.path.join(tmp, "state"), SGLANG_SIM_DEV_DIR=os.path.join(tmp, "dev"),
               SGLANG_SIM_CONFIG=os.path.join(tmp, "none.json"),
               PYTHONPATH=str(SIM_DIR) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    os.makedirs(env["SGLANG_SIM_STATE_DIR"])
    os.makedirs(env["SGLANG_SIM_DEV_DIR"])
    cmd = [sys.executable, "-m", "sglang_sim.launch_server", "--model-path", MODEL, "--tp-size", "4",
           "--kv-cache-dtype", "bf16", "--port", str(port), "--enable-metrics",
           "--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(steps),
           "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)]
    if radix_off:
        cmd.append("--disable-radix-cache")
    log = open(os.path.join(tmp, "server.log"), "wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = "http://127.0.0.1:%d" % port
    t0 = time.time()
    while time.time() - t0 < 120:
        if proc.poll() is not None:
            return proc, url, None
        try:
            with urllib.request.urlopen(url + "/server_info", timeout=2) as r:
                info = json.loads(r.read())
            if info.get("status", "Up") == "Up" or info.get("internal_states"):
                return proc, url, info
        except OSError:
            pass
        time.sleep(0.3)
    return proc, url, None


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the group this script started
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def measure(url, scale):
    link = COLLECTIONS / "ansible_collections" / "blackwell" / "sglang"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(ROOT, target_is_directory=True)
    sys.path.insert(0, str(COLLECTIONS))
    from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_runner as runner
    cfg = {"url": url, "concurrency": [1, 16, 32], "input_len": 256, "output_len": 256,
           "time_scale": scale, "timeout": 300}
    res = runner.run_benchmark(cfg)
    by = res["by_concurrency"]
    return {"c1": by["1"]["decode_tps_per_request"]["mean"], "c16": by["16"]["output_throughput"],
            "c32": by["32"]["output_throughput"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-scale", type=float, default=0.1)
    ap.add_argument("--radix", choices=("on", "off", "both"), default="both")
    opts = ap.parse_args()
    sys.path.insert(0, str(SIM_DIR))
    from sglang_sim import perf
    cal = perf.calibration_table()
    modes = {"on": [False], "off": [True], "both": [False, True]}[opts.radix]
    print("| steps | radix cache | running cap | C=1 sim / operator / perf | C=16 sim / operator / perf "
          "| C=32 sim / operator / perf |")
    print("|---|---|---|---|---|---|")
    for radix_off in modes:
        for steps in (1, 3, 4, 5):
            tmp = tempfile.mkdtemp(prefix="sim-op-")
            proc, url, info = start_sim(steps, radix_off, opts.time_scale, tmp)
            try:
                if info is None:
                    print("| %d | %s | did not start | | | |" % (steps, "off" if radix_off else "on"))
                    continue
                cap = info["internal_states"][0]["effective_max_running_requests_per_dp"]
                got = measure(url, opts.time_scale)
            finally:
                stop(proc)
                shutil.rmtree(tmp, ignore_errors=True)
            op = OPERATOR.get(steps, {})
            cells = []
            for key in ("c1", "c16", "c32"):
                cells.append("%.0f / %s / %.0f" % (got[key], op.get(key, "-"), cal[key][steps]))
            print("| %d | %s | %d | %s |" % (steps, "off" if radix_off else "on", cap, " | ".join(cells)))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
