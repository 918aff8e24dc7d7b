# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""pytest face of tests/gpu/real_sglang/device.sh: the collection's benchmark against a live
SGLang 0.5.17 on a real GPU, beside SGLang's own bench_serving on the same server.

Needs an NVIDIA GPU, a Python with torch 2.11 (the machine's python3) and the bundle built by
tests/gpu/real_sglang/bundle.sh under .cache/real-sglang/. Without them it skips, saying which
is missing. Target (tests/gpu/real_sglang/README.md, bench_compare.judge): on the same prompts,
each level's median output tok/s and TPOT within 2 % of bench_serving's where both tools' own
repeated runs agree within 2 %, and within the server's measured drift where they do not.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "tests" / "gpu" / "real_sglang" / "device.sh"
BUNDLE = ROOT / ".cache" / "real-sglang"
TOLERANCE_PCT = 2.0


def skip_reason():
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi on PATH: the live real-SGLang check needs an NVIDIA GPU"
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    if out.returncode or "GPU " not in out.stdout:
        return "nvidia-smi lists no GPU: %s" % (out.stderr or out.stdout).strip()[:200]
    missing = [n for n in ("site.tar.xz", "kernels.tar.xz") if not (BUNDLE / n).exists()]
    if missing:
        return "no %s under .cache/real-sglang: run tests/gpu/real_sglang/bundle.sh" % ", ".join(missing)
    return None


def test_skip_reason_is_explained_without_a_gpu():
    reason = skip_reason()
    if shutil.which("nvidia-smi") is None:
        assert reason and "NVIDIA GPU" in reason


@pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))
def test_collection_bench_matches_bench_serving(tmp_path):
    env = dict(os.environ, RS_RESULTS=str(tmp_path), RS_BENCH_SETS="generate,chat:1,8,32",
               RS_BENCH_OPTS="--same-prompts --rounds 2 --prompts-c1 24 --prompts-per-level 8 --output-len 128")
    env.pop("OUT", None)
    proc = subprocess.run(["bash", str(DEVICE), "setup", "bench"], env=env, capture_output=True,
                          text=True, timeout=1500, check=False)
    found = sorted((tmp_path / "bench").glob("bench_compare_steps3*.json"))
    assert found, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(found[0].read_text())["rows"]
    assert {(r["endpoint"], r["concurrency"]) for r in rows} == {
        (ep, c) for ep in ("generate", "chat") for c in (1, 8, 32)}
    sys.path.insert(0, str(DEVICE.parent))
    import bench_compare  # pylint: disable=import-outside-toplevel
    for row in rows:
        assert row["same_prompts"] and not row["bench_serving"].get("error"), row["bench_serving"].get("error")
        for figure in ("output_throughput", "tpot_ms_mean"):
            verdict = bench_compare.judge(row, figure, TOLERANCE_PCT)
            assert verdict["ok"], (row["endpoint"], row["concurrency"], figure, verdict)
        if row["endpoint"] == "generate":
            # the run's own accept length, from each request's meta_info (bench_serving's figure is
            # the server's lifetime average, README)
            assert all(r["raw"]["accept_length_source"] == "request_meta_info" for r in row["collection"])
