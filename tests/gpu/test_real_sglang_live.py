# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""pytest face of tests/gpu/real_sglang/device.sh: the collection's benchmark against a live
SGLang 0.5.17 on a real GPU, beside SGLang's own bench_serving on the same server.

Needs an NVIDIA GPU, a Python with torch 2.11 (the machine's python3) and the bundle built by
tests/gpu/real_sglang/bundle.sh under .cache/real-sglang/. Without them it skips, saying which
is missing. Targets (tests/gpu/real_sglang/README.md): output tok/s and TPOT within 2 % of
bench_serving, accept length equal, judged on the same prompts for both tools, each level's median
of three alternations, and only where the collection's own runs agree within the target (a
server drifting more than that between runs cannot show a 2 % difference either way).
"""

import json
import os
import shutil
import subprocess
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
    env = dict(os.environ, RS_RESULTS=str(tmp_path), RS_LEVELS="1,8,32",
               RS_BENCH_OPTS="--same-prompts --rounds 3 --prompts-c1 32 --prompts-per-level 8 --output-len 128")
    env.pop("OUT", None)
    proc = subprocess.run(["bash", str(DEVICE), "setup", "bench"], env=env, capture_output=True,
                          text=True, timeout=1200, check=False)
    result = tmp_path / "bench" / "bench_compare_steps3.json"
    assert result.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(result.read_text())["rows"]
    assert {(r["endpoint"], r["concurrency"]) for r in rows} == {
        (ep, c) for ep in ("generate", "chat") for c in (1, 8, 32)}
    judged = 0
    for row in rows:
        assert row["same_prompts"] and not row["bench_serving"].get("error"), row["bench_serving"].get("error")
        if row["collection_spread_pct"] is None or row["collection_spread_pct"] > TOLERANCE_PCT:
            continue  # the server moved more than the target between our own runs
        judged += 1
        for key in ("output_throughput_whole", "tpot_ms_mean"):
            assert abs(row["diff_pct"][key]) <= TOLERANCE_PCT, (row["endpoint"], row["concurrency"], key, row["diff_pct"])
        if row["concurrency"] == 1:
            # one request at a time: the same prompts give the same tokens and the same rounds
            ours = [r["accept_length"] for r in row["collection"]]
            theirs = row["bench_serving"]["accept_length"]
            assert theirs is not None and all(abs(x - theirs) < 0.01 for x in ours), (ours, theirs)
    assert judged, "no level was steady enough to judge (every collection spread > %s %%)" % TOLERANCE_PCT
