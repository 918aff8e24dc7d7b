# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""The fleet rollout's summary, written on the controller (JSON and Markdown), as pure functions.

rollout_summary / rollout_summary_markdown / rollout_summary_json
    one row per targeted host, in inventory order, with the run's status and failure budget.

Controller-side library of plugins/filter/rollout.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import render_json
from ansible_collections.blackwell.sglang.plugins.plugin_utils.rollout_gate import DONE_OUTCOMES, OUTCOMES
from ansible_collections.blackwell.sglang.plugins.plugin_utils.rollout_setting import AnsibleFilterError, setting_label

SCHEMA = 1
# What the summary keeps of the run's plan.
RUN_KEYS = ("run_id", "started", "finished", "serial", "summary_dir", "in_progress")


def rollout_summary(results, hosts, requested=None, budget=None, run=None, check_mode=False):
    """The fleet summary: one row per targeted host, in inventory order.

    ``results``: the per-node records the role set (any order; hosts without one are ``skipped``
    or, when ``run.in_progress`` names them, ``in_progress``). ``run``: ``{"run_id", "started",
    "finished", "in_progress": [hosts], "serial", "summary_dir"}`` (other keys are dropped).
    """
    run = dict((k, v) for k, v in (run or {}).items() if k in RUN_KEYS)
    by_host = dict((r.get("host"), r) for r in (results or []) if isinstance(r, dict) and r.get("host"))
    started = set(run.get("in_progress") or [])
    nodes = []
    for host in hosts or []:
        rec = by_host.get(host)
        if rec is None:
            outcome = "in_progress" if host in started else "skipped"
            rec = {"host": host, "outcome": outcome, "serving": "unknown" if outcome == "in_progress" else "old"}
        rec = dict(rec)
        if rec.get("outcome") not in OUTCOMES:
            raise AnsibleFilterError("host %s has unknown rollout outcome %r" % (host, rec.get("outcome")))
        nodes.append(rec)
    counts = dict((o, 0) for o in OUTCOMES)
    for rec in nodes:
        counts[rec["outcome"]] += 1
    counts = dict((k, v) for k, v in counts.items() if v)
    done = sum(counts.get(o, 0) for o in DONE_OUTCOMES)
    if check_mode:
        complete = False
        status = "check_mode"
    else:
        complete = bool(nodes) and done == len(nodes)
        status = "complete" if complete else ("stopped_by_failure_budget" if (budget or {}).get("spent")
                                              else "incomplete")
    return {
        "schema": SCHEMA,
        "run": run,
        "requested": requested,
        "status": status,
        "complete": complete,
        "budget": budget,
        "counts": counts,
        "nodes": nodes,
    }


def _fig(value, digits=0):
    if value is None:
        return "-"
    return ("%%.%df" % digits) % value


def _smoke_cell(rec):
    smoke = rec.get("smoke") or {}
    figs = smoke.get("figures") or {}
    if not figs:
        return "-"
    parts = []
    for c in sorted(figs, key=int):
        f = figs[c]
        parts.append("C%s %s/%s" % (c, _fig(f.get("decode_tps_mean")), _fig(f.get("output_throughput"))))
    return " · ".join(parts) + (" ✓" if smoke.get("ok") else " ✗")


def _unit_cell(rec):
    """The summary's unit column: the unit's own view after this node's turn."""
    unit = rec.get("unit")
    if not isinstance(unit, dict):
        return "-"
    parts = [unit.get("active_state") or "-"]
    if unit.get("ready") is not None:
        parts[0] += ", tokens" if unit["ready"] else ", no tokens"
    parts.append("%d restart%s" % (unit.get("restarts") or 0, "" if unit.get("restarts") == 1 else "s"))
    if unit.get("start_limit_hit"):
        parts.append("crash-loop brake hit")
    if unit.get("last_failure_class"):
        parts.append("last failure %s" % unit["last_failure_class"])
    if unit.get("watchdog_restarts"):
        parts.append("watchdog restarts %d" % unit["watchdog_restarts"])
    if unit.get("watchdog_gave_up"):
        parts.append("watchdog gave up")
    before = rec.get("unit_before")
    if isinstance(before, dict) and (before.get("start_limit_hit") or before.get("watchdog_gave_up")):
        parts.append("before: %s" % ("crash-loop brake hit" if before.get("start_limit_hit") else "watchdog gave up"))
    return ", ".join(parts)


def _md_escape(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def rollout_summary_markdown(summary):
    """The summary as a Markdown page: header, one table row per node, then failure details."""
    run = summary.get("run") or {}
    req = summary.get("requested") or {}
    budget = summary.get("budget") or {}
    out = [("# SGLang rollout %s" % (run.get("run_id") or "")).rstrip(), ""]
    out.append("- setting: **%s** (from %s)" % (req.get("label") or setting_label(req), req.get("source") or "-"))
    src = req.get("tuned_from") or {}
    if src.get("path"):
        out.append("- tuned on %s, run %s (%s)" % (src.get("host"), src.get("run"), src.get("path")))
    counts = ", ".join("%s %d" % (k, v) for k, v in sorted((summary.get("counts") or {}).items()))
    out.append("- status: **%s**%s" % (summary.get("status"), " (%s)" % counts if counts else ""))
    if budget:
        out.append("- failure budget: %s of %s nodes failed, %s allowed (max_fail_percentage %g)%s" % (
            budget.get("failed"), budget.get("total"), budget.get("allowed"),
            budget.get("max_fail_percentage") or 0, ", spent" if budget.get("spent") else ""))
    if run.get("serial") is not None:
        out.append("- batches: serial %s" % run.get("serial"))
    if run.get("started"):
        out.append("- started %s, finished %s" % (run.get("started"), run.get("finished") or "-"))
    out += ["", "Smoke figures: per-request decode tok/s / aggregate output tok/s per concurrency level.", "",
            "| node | outcome | old setting | new setting | serving | unit | smoke | note |",
            "|---|---|---|---|---|---|---|---|"]
    for rec in summary.get("nodes") or []:
        note = rec.get("failure_class") or ""
        if rec.get("reason"):
            note = (note + ": " if note else "") + rec["reason"]
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            _md_escape(rec.get("host")), rec.get("outcome"), _md_escape(setting_label(rec.get("old"))),
            _md_escape(setting_label(rec.get("new"))), rec.get("serving") or "-", _md_escape(_unit_cell(rec)),
            _smoke_cell(rec),
            _md_escape(note)[:200]))
    failed = [r for r in summary.get("nodes") or [] if r.get("journal_tail")]
    if failed:
        out += ["", "## Journal tails of failed starts", ""]
        for rec in failed:
            out += ["### %s (%s)" % (rec.get("host"), rec.get("failure_class") or "unknown"), "", "```"]
            out += [str(line) for line in (rec.get("journal_tail") or [])[-20:]]
            out += ["```", ""]
    return "\n".join(out).rstrip() + "\n"


def rollout_summary_json(summary):
    """Stable JSON text (sorted keys, no NaN) of the summary."""
    return render_json(summary)
