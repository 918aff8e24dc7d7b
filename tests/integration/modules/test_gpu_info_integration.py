"""gpu_info end to end: the module file run as Ansible runs it (JSON args file, separate
Python process), against (a) a stand-in nvidia-smi replaying the real H200 captures plus a
real process of this test holding a temp "dev" file, and (b) the simulator's nvidia-smi.
The real /dev is never named."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MODULE = ROOT / "plugins" / "modules" / "gpu_info.py"
COLLECTIONS = ROOT / ".cache" / "collections"
FIXTURES = ROOT / "tests" / "fixtures" / "nvidia-h200"


def run_module(tmp_path, env=None, **args):
    path = tmp_path / ("args-%s.json" % uuid.uuid4().hex[:8])
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    full_env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
    full_env.update(env or {})
    done = subprocess.run([sys.executable, str(MODULE), str(path)], capture_output=True, text=True, env=full_env,
                          timeout=120, check=False)
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise AssertionError("module printed no JSON: rc=%s\n%s\n%s" % (done.returncode, done.stdout, done.stderr))


@pytest.fixture
def dev(tmp_path):
    d = tmp_path / "dev"
    d.mkdir()
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        (d / name).write_text("")
    return d


def test_capture_replay_and_real_holder(tmp_path, dev):
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$1" in\n --query-gpu=*) cat %s;;\n --query-compute-apps=*) cat %s;;\n'
                   ' *) exit 2;;\nesac\n' % (FIXTURES / "query-gpu-busy.csv", FIXTURES / "compute-apps.csv"))
    smi.chmod(0o755)
    holder = subprocess.Popen(["bash", "-c", 'exec -a "$0" "$@"', "sglang::scheduler", sys.executable, "-c",
                               "import sys,time; f=[open(p) for p in sys.argv[1:]]; print(1, flush=True); "
                               "time.sleep(60)", str(dev / "nvidia0"), str(dev / "nvidiactl")],
                              stdout=subprocess.PIPE)
    try:
        holder.stdout.readline()
        out = run_module(tmp_path, nvidia_smi=str(smi), devices=[str(dev / "nvidia*")])
    finally:
        holder.kill()
        holder.wait()
    assert not out.get("failed"), out
    facts = out["ansible_facts"]["gpu_info"]
    assert facts["gpu_count"] == 1 and facts["gpus"][0]["memory_total_mib"] == 143771
    assert facts["compute_apps"][0]["gpu_index"] == 0
    assert facts["device_holders"] == [{
        "pid": holder.pid, "user": "root" if os.geteuid() == 0 else facts["device_holders"][0]["user"],
        "command": facts["device_holders"][0]["command"], "access": "f",
        "devices": [str(dev / "nvidia0"), str(dev / "nvidiactl")],
        "cmdline": facts["device_holders"][0]["cmdline"]}]
    assert facts["device_holders"][0]["cmdline"].startswith("sglang::scheduler -c ")
    assert facts["device_holders_source"] == "fuser"


def sim_env(tmp_path, dev, **extra):
    env = {
        "PYTHONPATH": os.pathsep.join([str(ROOT / "sim"), str(COLLECTIONS)]),
        "SGLANG_SIM_CONFIG": str(tmp_path / "no-config.json"),
        "SGLANG_SIM_STATE_DIR": str(tmp_path / "state"),
        "SGLANG_SIM_DEV_DIR": str(dev),
    }
    env.update(extra)
    return env


def sim_wrapper(tmp_path):
    """What the install role's sim backend puts on PATH: a `nvidia-smi` that runs the sim."""
    script = tmp_path / "sim-nvidia-smi"
    script.write_text('#!/bin/sh\nexec %s -m sglang_sim.nvidia_smi "$@"\n' % sys.executable)
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("profile", ["h200-x1", "rtx-pro-6000-x4"])
def test_simulator_nvidia_smi(tmp_path, dev, profile):
    sys.path.insert(0, str(ROOT / "sim"))
    from sglang_sim import config as sim_config

    env = sim_env(tmp_path, dev, SGLANG_SIM_PROFILE=profile)
    out = run_module(tmp_path, env=env, nvidia_smi=str(sim_wrapper(tmp_path)), devices=[str(dev / "nvidia*")])
    assert not out.get("failed"), out
    expected = sim_config.gpus(sim_config.load_settings(env))
    got = out["gpus"]
    assert [(g["index"], g["uuid"], g["name"], g["memory_total_mib"], g["compute_cap"], g["driver_version"])
            for g in got] == [(e["index"], e["uuid"], e["name"], e["memory_mib"], e["compute_cap"],
                               e["driver_version"]) for e in expected]
    assert all(0 <= g["memory_used_mib"] < g["memory_total_mib"] for g in got)
    assert out["compute_apps"] == []
    assert out["gpu_count"] == len(expected)
