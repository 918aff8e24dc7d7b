# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Figures of one run_gpu_check.sh phase, as JSON on stdout: what the playbook's steps returned,
the memory timeline around SIGTERM (from the NVML sampler), and how the raw driver outputs of
this run compare with the captures in tests/fixtures/nvidia-h200/ (parsed with the collection's
own parsers). Needs ansible_collections.blackwell.sglang importable (ANSIBLE_COLLECTIONS_PATH
on sys.path)."""

import argparse
import json
import os
import sys


def load_json(path, default=None):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def section(text, index):
    parts = ("\n" + text).split("\n---\n")
    return parts[index] if len(parts) > index else ""


def timeline(path):
    samples = []
    for line in read(path).splitlines():
        try:
            sample = json.loads(line)
        except ValueError:
            continue
        if "mib" in sample:
            samples.append(sample)
    return samples


def first_after(samples, t0, test):
    for sample in samples:
        if sample["t"] >= t0 and test(sample):
            return sample
    return None


def pid_listed(sample, pid):
    return any(pid in (pids or []) for pids in sample.get("pids") or [])


def timing(samples, term, main, orphan, idle_mib, tolerance, main_mib):
    """Seconds from the main holder's SIGTERM to: its pid leaving the driver's process list,
    its memory being released, and every GPU back at the idle figure."""
    if not samples or not term:
        return {"available": False, "why": "no NVML timeline" if not samples else "no SIGTERM time recorded"}
    t0 = term["time"]
    before = [s for s in samples if s["t"] < t0]
    busy_total = sum(before[-1]["mib"]) if before else None
    out = {"available": True, "samples": len(samples),
           "nvml_call_ms_median": round(sorted(s["call_s"] for s in samples)[len(samples) // 2] * 1000, 3),
           "used_mib_just_before_term": busy_total}
    gone = first_after(samples, t0, lambda s: not pid_listed(s, main))
    out["term_to_main_pid_unlisted_s"] = round(gone["t"] - t0, 3) if gone else None
    if busy_total is not None and main_mib:
        freed = first_after(samples, t0, lambda s: sum(s["mib"]) <= busy_total - main_mib + tolerance)
        out["term_to_main_memory_released_s"] = round(freed["t"] - t0, 3) if freed else None
    orphan_gone = first_after(samples, t0, lambda s: not pid_listed(s, orphan))
    out["term_to_orphan_pid_unlisted_s"] = round(orphan_gone["t"] - t0, 3) if orphan_gone else None
    idle = first_after(samples, t0, lambda s: max(s["mib"]) <= idle_mib + tolerance)
    out["term_to_all_idle_s"] = round(idle["t"] - t0, 3) if idle else None
    # Memory steps after TERM: how the driver hands memory back (one step per process, or gradual).
    steps, last = [], None
    for sample in samples:
        if sample["t"] < t0 - 0.05:
            continue
        if last is None or sample["mib"] != last:
            steps.append({"t_rel_s": round(sample["t"] - t0, 3), "mib": sample["mib"],
                          "pids": sample.get("pids")})
            last = sample["mib"]
    out["memory_steps"] = steps[:40]
    return out


def killed_summary(reset):
    if not reset:
        return None
    return {
        "changed": reset.get("changed"),
        "failed": reset.get("failed", False),
        "msg": reset.get("msg"),
        "killed": [dict((k, item.get(k)) for k in ("pid", "via", "pattern", "signal", "exited", "cmdline", "user"))
                   for item in reset.get("killed") or []],
        "spared": [dict((k, item.get(k)) for k in ("pid", "via", "reason", "cmdline"))
                   for item in reset.get("spared") or []],
        "survivors": reset.get("survivors"),
        "seconds_to_free": reset.get("seconds_to_free"),
        "seconds_waited": reset.get("seconds_waited"),
        "memory_before": reset.get("memory_before"),
        "memory_after": reset.get("memory_after"),
        "holders_after": [h.get("pid") for h in reset.get("holders_after") or []],
        "warnings": reset.get("warnings"),
    }


def compare_fixtures(run_dir, fixtures, main, orphan, nvidia, procs):
    """Parse this run's raw outputs and the fixtures with the same parsers; list what differs."""
    notes = []
    out = {"notes": notes}
    try:
        run_gpus = nvidia.parse_gpus(read(os.path.join(run_dir, "query-gpu-busy.csv")))
        fix_gpus = nvidia.parse_gpus(read(os.path.join(fixtures, "query-gpu-busy.csv")))
        out["query_gpu_parsed"] = {"run": run_gpus, "fixture": fix_gpus}
        for key in ("name", "memory_total_mib", "compute_cap", "driver_version"):
            run_v = [g[key] for g in run_gpus]
            fix_v = [g[key] for g in fix_gpus]
            if run_v != fix_v:
                notes.append("query-gpu %s: run %s, fixture %s" % (key, run_v, fix_v))
    except ValueError as exc:
        notes.append("query-gpu parse failed: %s" % exc)
        run_gpus = []
    try:
        apps = nvidia.parse_compute_apps(read(os.path.join(run_dir, "compute-apps-busy.csv")), run_gpus)
        out["compute_apps_parsed"] = apps
        pids = sorted(a["pid"] for a in apps)
        if not set([main, orphan]) <= set(pids):
            notes.append("compute-apps lists pids %s, not both test pids %s (pid namespace?)" % (pids, [main, orphan]))
        names = sorted(set(a.get("process_name") for a in apps if a["pid"] in (main, orphan)))
        out["compute_apps_process_names"] = names
    except ValueError as exc:
        notes.append("compute-apps parse failed: %s" % exc)
    fuser_run = read(os.path.join(run_dir, "fuser-busy.txt"))
    if "fuser not installed" in fuser_run:
        notes.append("fuser (psmisc) is not installed on this node: the modules read /proc instead")
    else:
        # Sections: ls -l, fuser -v, plain fuser; "---" lines between (ls shows "cr--------" too).
        verbose_run = section(fuser_run, 1)
        verbose_fix = section(read(os.path.join(fixtures, "fuser.txt")), 1)
        run_h = procs.parse_fuser(verbose_run)
        fix_h = procs.parse_fuser(verbose_fix)
        mine = [h for h in run_h if h["pid"] in (main, orphan)]
        out["fuser_parsed"] = {"run": mine, "fixture": fix_h}
        if sorted(h["pid"] for h in mine) != sorted([main, orphan]):
            notes.append("fuser -v did not list both test pids: %s" % [h["pid"] for h in run_h])
        fix_devices = sorted(set(d for h in fix_h for d in h["devices"]))
        for h in mine:
            if sorted(h["devices"]) != fix_devices:
                notes.append("pid %s holds %s; the fixture's holder held %s" % (h["pid"], sorted(h["devices"]), fix_devices))
            if h["access"] != (fix_h[0]["access"] if fix_h else h["access"]):
                notes.append("pid %s access %r; fixture %r" % (h["pid"], h["access"], fix_h[0]["access"]))
    idle_run = read(os.path.join(run_dir, "nvidia-smi-idle.txt"))
    out["nvidia_smi_idle_header"] = [ln for ln in idle_run.splitlines() if "Driver Version" in ln]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--main", type=int, required=True)
    parser.add_argument("--orphan", type=int, required=True)
    parser.add_argument("--idle-mib", type=int, required=True)
    parser.add_argument("--tolerance-mib", type=int, required=True)
    parser.add_argument("--grace", type=float, required=True)
    parser.add_argument("--playbook-rc", type=int, required=True)
    parser.add_argument("--ansible", default=None)
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("--systemctl-shim", default="false")
    args = parser.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    for base in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep):
        if base and base not in sys.path:
            sys.path.insert(0, base)
    from ansible_collections.blackwell.sglang.plugins.module_utils import nvidia, procs

    d = args.dir
    results = load_json(os.path.join(d, "playbook-results.json"), {}) or {}
    ready_main = load_json(os.path.join(d, "ready-%d.json" % args.main), {})
    ready_orphan = load_json(os.path.join(d, "ready-%d.json" % args.orphan), {})
    term_main = load_json(os.path.join(d, "term-%d.json" % args.main))
    term_orphan = load_json(os.path.join(d, "term-%d.json" % args.orphan))
    info = (results.get("info_busy") or {})
    apps = dict((a["pid"], a) for a in info.get("compute_apps") or [])
    main_mib = (apps.get(args.main) or {}).get("used_memory_mib")
    orphan_mib = (apps.get(args.orphan) or {}).get("used_memory_mib")
    figures = {
        "passed": args.playbook_rc == 0,
        "playbook_rc": args.playbook_rc,
        "via": results.get("via"),
        "ansible_core": args.ansible,
        "script": os.path.relpath(here, os.path.dirname(os.path.dirname(here))),
        "systemctl_shim": args.systemctl_shim == "true",
        "systemctl_shim_calls": read(os.path.join(d, "systemctl-shim.log")).splitlines(),
        "gpus": info.get("gpus"),
        "device_holders_source": info.get("device_holders_source"),
        "idle_mib_max": args.idle_mib,
        "tolerance_mib": args.tolerance_mib,
        "grace_period_s": args.grace,
        "holders": {
            "main": {"pid": args.main, "torch_allocated_mib": ready_main.get("allocated_mib"),
                     "compute_apps_mib": main_mib,
                     "context_overhead_mib": (main_mib - ready_main["allocated_mib"])
                     if main_mib is not None and ready_main.get("allocated_mib") is not None else None,
                     "term_received": bool(term_main)},
            "orphan": {"pid": args.orphan, "torch_allocated_mib": ready_orphan.get("allocated_mib"),
                       "compute_apps_mib": orphan_mib, "parent_after_orphaning": ready_orphan.get("ppid"),
                       "first_parent": ready_orphan.get("first_parent"), "ignores_term": ready_orphan.get("ignores_term"),
                       "term_received": bool(term_orphan)},
        },
        "gpu_info_busy_holders": [dict((k, h.get(k)) for k in ("pid", "command", "access", "devices"))
                                  for h in info.get("device_holders") or []],
        "preview_would_kill": [w.get("pid") for w in (results.get("preview") or {}).get("would_kill") or []],
        "reset_first": killed_summary(results.get("reset_first")),
        "reset_second": killed_summary(results.get("reset_second")),
        "info_again_changed": (results.get("info_again") or {}).get("changed"),
        "timeline": timing(timeline(os.path.join(d, "timeline.jsonl")), term_main, args.main, args.orphan,
                           args.idle_mib, args.tolerance_mib, main_mib),
        "fixtures": compare_fixtures(d, args.fixtures, args.main, args.orphan, nvidia, procs),
    }
    if term_main and term_orphan:
        figures["timeline"]["term_spread_s"] = round(term_orphan["time"] - term_main["time"], 4)
    json.dump(figures, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
