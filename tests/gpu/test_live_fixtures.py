# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The collection's parsers on what the real driver printed during run_gpu_check.sh on the lent
H200 (tests/fixtures/nvidia-h200-live/), where it differs from the older captures: two compute
processes, one named by its full path; an NVML-only device holder (access F, no m); and the
figures the run measured. Runs anywhere, no GPU needed."""

import json
from pathlib import Path

from ansible_collections.blackwell.sglang.plugins.module_utils import nvidia, procs

LIVE = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-h200-live"
UUID = "GPU-5cb7f26c-5a15-4342-88e8-f80e1b697bfb"


def text(name):
    return (LIVE / name).read_text()


def section(name, index):
    return ("\n" + text(name)).split("\n---\n")[index]


def test_query_gpu_busy_and_after():
    busy = nvidia.parse_gpus(text("query-gpu-busy.csv"))
    after = nvidia.parse_gpus(text("query-gpu-after.csv"))
    assert [(g["uuid"], g["name"], g["memory_used_mib"], g["memory_total_mib"]) for g in busy] == [
        (UUID, "NVIDIA H200", 126163, 143771)]
    assert after[0]["memory_used_mib"] == 0
    assert nvidia.busy_gpus(after, 0) == []
    assert [g["index"] for g in nvidia.busy_gpus(busy, 64)] == [0]


def test_compute_apps_with_a_path_as_process_name():
    apps = nvidia.parse_compute_apps(text("compute-apps-busy.csv"), nvidia.parse_gpus(text("query-gpu-busy.csv")))
    assert sorted((a["pid"], a["process_name"], a["used_memory_mib"], a["gpu_index"]) for a in apps) == [
        (695, "python3", 123490, 0),
        (702, "/opt/torch/.venv/bin/python3", 2658, 0),
    ]


def test_fuser_verbose_lists_the_nvml_only_holder_without_m():
    holders = procs.parse_fuser(section("fuser-busy.txt", 1))
    by_pid = dict((h["pid"], h) for h in holders)
    assert sorted(by_pid) == [694, 695, 702]
    devices = ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"]
    for pid in by_pid:
        assert sorted(by_pid[pid]["devices"]) == devices
    assert by_pid[694]["access"] == "F"  # NVML client: opened, nothing mapped
    assert by_pid[695]["access"] == "Fm"
    assert by_pid[695]["command"] == "sglang::schedul"  # comm: 15 bytes of sglang::scheduler_TP0


def test_fuser_plain_merged_output_gives_the_same_pids():
    holders = procs.parse_fuser(section("fuser-busy.txt", 2))
    assert [h["pid"] for h in holders] == [694, 695, 702]
    assert [h["access"] for h in holders] == ["", "m", "m"]


def test_recorded_figures_are_consistent():
    figures = json.loads(text("figures-120gib-module.json"))["module"]
    assert figures["passed"] is True
    reset = figures["reset_first"]
    assert [(k["via"], k["signal"], k["exited"]) for k in reset["killed"]] == [("pattern", "TERM", True), ("fuser", "KILL", True)]
    assert reset["memory_after"][0]["memory_used_mib"] == 0
    assert figures["reset_second"]["changed"] is False and figures["reset_second"]["killed"] == []
    timeline = figures["timeline"]
    # The TERM-ed holder's memory came back within a fraction of a second; the orphan's only
    # after the KILL at the grace period.
    assert timeline["term_to_main_memory_released_s"] < 1.0
    assert figures["grace_period_s"] <= timeline["term_to_all_idle_s"] < figures["grace_period_s"] + 1.0


def test_timeline_ends_idle_with_no_compute_pids():
    samples = [json.loads(line) for line in text("timeline.jsonl").splitlines()]
    assert samples[0]["mib"] == [0]  # the sampler starts before the holders
    assert max(max(s["mib"]) for s in samples) > 120000
    assert samples[-1]["mib"] == [0] and samples[-1]["pids"] == [[]]
    assert all(b["t"] >= a["t"] for a, b in zip(samples, samples[1:]))
