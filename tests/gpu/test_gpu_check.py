# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""pytest face of tests/gpu/run_gpu_check.sh: the real-driver check of gpu_info and gpu_reset.

On a machine with an NVIDIA GPU it runs the script (a few minutes, takes ~22 GiB of GPU
memory, signals only its own processes). Without one it skips, saying why, so CI stays green.
The two tests below that need no GPU check that the script itself skips rather than fails there.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "run_gpu_check.sh"


def no_gpu_reason():
    """Why this machine cannot run the check, or None when nvidia-smi lists a GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no nvidia-smi on PATH (no NVIDIA driver): the real-GPU check needs an NVIDIA GPU"
    try:
        proc = subprocess.run([smi, "-L"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "nvidia-smi -L did not answer: %s" % exc
    if proc.returncode != 0 or not any(line.startswith("GPU ") for line in proc.stdout.splitlines()):
        first = (proc.stdout.strip().splitlines() or ["no output"])[0]
        return "nvidia-smi lists no GPU (rc=%s): %s" % (proc.returncode, first)
    return None


def run_script(env, timeout):
    return subprocess.run([shutil.which("bash") or "/bin/bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=timeout, check=False)


def test_gpu_info_and_gpu_reset_on_real_driver(tmp_path):
    reason = no_gpu_reason()
    if reason:
        pytest.skip(reason)
    env = dict(os.environ)
    env.setdefault("GPU_CHECK_ANSIBLE_PYTHON", sys.executable)
    env.setdefault("GPU_CHECK_RESULTS", str(tmp_path / "gpu-check"))
    proc = run_script(env, timeout=1200)
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("SKIP:")]
    if proc.returncode == 0 and skipped:
        pytest.skip(skipped[-1][len("SKIP:"):].strip())
    assert proc.returncode == 0, proc.stdout[-8000:]
    assert "PASS:" in proc.stdout


def _bin_dir(tmp_path, nvidia_smi_body=None):
    """A PATH folder with the few tools the script needs before its GPU check, and optionally a
    stand-in nvidia-smi."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("dirname", "grep", "head"):
        (bindir / tool).symlink_to(shutil.which(tool))
    if nvidia_smi_body is not None:
        smi = bindir / "nvidia-smi"
        smi.write_text("#!/bin/sh\n" + nvidia_smi_body)
        smi.chmod(0o755)
    return bindir


def test_script_skips_without_nvidia_smi(tmp_path):
    env = dict(os.environ, PATH=str(_bin_dir(tmp_path)))
    proc = run_script(env, timeout=60)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.startswith("SKIP: nvidia-smi not found"), proc.stdout


def test_script_skips_when_the_driver_is_not_loaded(tmp_path):
    # What nvidia-smi prints on a machine with the utilities but no working driver/GPU.
    body = ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver. '
            'Make sure that the latest NVIDIA driver is installed and running."\nexit 9\n')
    env = dict(os.environ, PATH=str(_bin_dir(tmp_path, body)))
    proc = run_script(env, timeout=60)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.startswith("SKIP: nvidia-smi lists no GPU: NVIDIA-SMI has failed"), proc.stdout


GUARD_CHECK = HERE / "guard_check.py"


def test_unit_guard_clean_start_on_real_driver():
    """The service unit's clean start ends a crashed SGLang's GPU-holding ranks (tests/gpu/guard_check.py)."""
    reason = no_gpu_reason()
    if reason:
        pytest.skip(reason)
    proc = subprocess.run([sys.executable, str(GUARD_CHECK)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=600, check=False)
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    if proc.returncode == 0 and last.startswith("SKIP:"):
        pytest.skip(last[len("SKIP:"):].strip())
    assert proc.returncode == 0 and last.startswith("PASS:"), proc.stdout[-8000:]


def test_guard_check_skips_without_nvidia_smi(tmp_path):
    env = dict(os.environ, PATH=str(_bin_dir(tmp_path)))
    proc = subprocess.run([sys.executable, str(GUARD_CHECK)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "SKIP: no nvidia-smi on PATH (no NVIDIA driver)", proc.stdout
