"""gpu_info and gpu_free on a real NVIDIA node. Skips without a working nvidia-smi
and libcuda. Starts its OWN CUDA processes (libcuda through ctypes, no torch needed), titled
like SGLang's ranks with `exec -a`, and lets gpu_free signal only those pids (`only_pids`),
so it is safe on a node where others work; it reads the real /dev/nvidia* but never
fuser-kills them. Run on a GPU node:

    python3 -m pytest -q -s tests/integration/modules/test_gpu_real_nvidia.py

with `ansible` importable (the module subprocesses get this interpreter's sys.path).
"""

import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
COLLECTIONS = ROOT / ".cache" / "collections"

HOLDER = r"""
import ctypes, signal, sys, time
gib = float(sys.argv[2])
cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0
assert cuda.cuDeviceGet(ctypes.byref(dev), int(sys.argv[3])) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(gib * (1 << 30)))) == 0
if sys.argv[1] == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def _real_gpu():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "no nvidia-smi on PATH (not a GPU node)"
    done = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    if done.returncode != 0 or "GPU 0" not in done.stdout:
        return "nvidia-smi finds no GPU: %s" % (done.stdout + done.stderr).strip()[:200]
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return "libcuda.so.1 cannot be loaded: %s" % exc
    if (ROOT / "sim" / "sglang_sim" / "nvidia_smi.py").exists() and "sglang_sim" in open(smi, "rb").read(4096).decode(
            "utf-8", "replace"):
        return "nvidia-smi on PATH is the simulator's stand-in"
    return None


pytestmark = pytest.mark.skipif(_real_gpu() is not None, reason=str(_real_gpu()))


def run_module(tmp_path, name, args):
    path = tmp_path / ("args-%s.json" % uuid.uuid4().hex[:8])
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(COLLECTIONS)] + [p for p in sys.path if p]))
    done = subprocess.run([sys.executable, str(ROOT / "plugins" / "modules" / ("%s.py" % name)), str(path)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise AssertionError("%s printed no JSON: rc=%s\n%s\n%s" % (name, done.returncode, done.stdout, done.stderr))


@pytest.fixture
def holders():
    started = []

    def start(title, gib, ignore_term=False, gpu=0):
        proc = subprocess.Popen(["bash", "-c", 'exec -a "$0" "$@"', title, sys.executable, "-c", HOLDER,
                                 "ignore-term" if ignore_term else "normal", str(gib), str(gpu)],
                                stdout=subprocess.PIPE)
        started.append(proc)
        assert proc.stdout.readline().strip() == b"ready", "CUDA holder %s did not start" % title
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_real_gpu_info_and_gpu_free(tmp_path, holders):
    idle = run_module(tmp_path, "gpu_info", {})
    assert not idle.get("failed"), idle
    baseline = max(g["memory_used_mib"] or 0 for g in idle["gpus"])

    tp0 = holders("sglang::scheduler_TP0", 20)
    detok = holders("sglang::detokenizer", 8, ignore_term=True)
    busy = run_module(tmp_path, "gpu_info", {})
    apps = dict((a["pid"], a) for a in busy["compute_apps"])
    assert apps[tp0.pid]["process_name"] == "sglang::scheduler_TP0"
    assert apps[tp0.pid]["used_memory_mib"] >= 20 * 1024 and apps[tp0.pid]["gpu_index"] == 0
    held = dict((h["pid"], h) for h in busy["device_holders"])
    assert "/dev/nvidia0" in held[tp0.pid]["devices"] and "/dev/nvidiactl" in held[tp0.pid]["devices"]
    assert held[detok.pid]["cmdline"].startswith("sglang::detokenizer")

    mine = [tp0.pid, detok.pid]
    preview = run_module(tmp_path, "gpu_free", {"only_pids": mine, "_ansible_check_mode": True})
    assert sorted(w["pid"] for w in preview["would_kill"]) == sorted(mine) and tp0.poll() is None

    started = time.monotonic()
    freed = run_module(tmp_path, "gpu_free", {"only_pids": mine, "grace_period": 3, "poll_interval": 0.05,
                                              "timeout": 60, "idle_memory_mib": baseline + 64})
    wall = time.monotonic() - started
    assert not freed.get("failed"), freed
    assert dict((k["pid"], k["signal"]) for k in freed["killed"]) == {tp0.pid: "TERM", detok.pid: "KILL"}
    assert freed["survivors"] == []
    assert 3.0 <= freed["seconds_to_free"] < wall
    assert max(g["memory_used_mib"] for g in freed["memory_after"]) <= baseline + 64
    print("real GPU: %d MiB freed, seconds_to_free=%.3f (grace 3 s), module wall %.3f s"
          % (max(g["memory_used_mib"] for g in freed["memory_before"]) - baseline, freed["seconds_to_free"], wall))

    again = run_module(tmp_path, "gpu_free", {"only_pids": mine})
    assert again["changed"] is False


def test_real_fuser_listing_ends_a_non_sglang_holder(tmp_path, holders):
    baseline = max(g["memory_used_mib"] or 0 for g in run_module(tmp_path, "gpu_info", {})["gpus"])
    train = holders("train.py", 4)
    freed = run_module(tmp_path, "gpu_free", {"patterns": [], "fuser_kill": True, "only_pids": [train.pid],
                                              "grace_period": 3, "poll_interval": 0.05,
                                              "idle_memory_mib": baseline + 64})
    assert not freed.get("failed"), freed
    assert [(k["pid"], k["via"], k["signal"]) for k in freed["killed"]] == [(train.pid, "fuser", "TERM")]
    assert "/dev/nvidia0" in freed["killed"][0]["devices"]
    assert max(g["memory_used_mib"] for g in freed["memory_before"]) >= baseline + 4 * 1024
    print("real GPU via fuser listing: seconds_to_free=%.3f" % freed["seconds_to_free"])
