# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Results of an MTP tuning run: load, render (JSON, CSV, Markdown, PNG) and write atomically.

Pure functions except for the small file helpers at the end; used by the controller-side action
plugin ``mtp_tune_report`` and by the ``mtp_tune`` filters (metric extraction).  Stdlib only,
Python >= 3.9; matplotlib is optional and only for the PNG.

results.json layout (``schema`` 1)::

    {"schema": 1, "host": ..., "run": ..., "settings": {...}, "started": iso, "updated": iso,
     "attempts": [{"key", "candidate", "overrides", "fit_rung", "status", "failure_class",
                   "failure_line", "journal_tail", "metrics": {"1": {sglang_bench level}, ...},
                   "timings": {"started", "launch_s", "bench_s", "wall_s"}, "run": run id}],
     "winner": {"key", "candidate", "overrides", "score", "decided_by", "tied", "decided_at", "margin",
                "band", "interval", "noise", "unverified", "model_rules_out", "model"} | null,
     "stats": {"launches", "failed_launches", "candidates", "wall_s", "launch_s", "bench_s"},
     "cut_short": {"max_launches", "launches", "next", "fits", "open"} | null,
     "converge": {...} | null}

``stats`` is recomputed from the attempts on every write (see ``finalize``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import csv
import io
import json
import math
import os
import shlex
import tempfile
import time

SCHEMA = 1
RESULTS_JSON = "results.json"
RESULTS_CSV = "results.csv"
SUMMARY_MD = "summary.md"
PLOT_PNG = "plot.png"


# Options of blackwell.sglang.mtp_tune_report: one definition for the action plugin that does the
# work and the module that carries the documentation.
ARGSPEC = dict(
    path=dict(type="path", required=True),
    op=dict(type="str", choices=["load", "write"], default="write"),
    results=dict(type="dict"),
    force=dict(type="bool", default=False),
    fresh=dict(type="bool", default=False),
    plot=dict(type="bool", default=True),
    compare=dict(type="bool", default=True),
)


class ReportError(Exception):
    """A results file that cannot be used as it is (corrupt, wrong shape, unwritable place)."""


# ---------------------------------------------------------------------------- metrics

def as_number(value):
    """A finite float, or None for anything that is not one (missing, bool, text, NaN, inf)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(out) or math.isinf(out):
        return None
    return out


_num = as_number


def _get(level, *path):
    node = level
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return _num(node)


def _ci(level, figure):
    node = (level.get("ci") or {}).get(figure) if isinstance(level, dict) else None
    if not isinstance(node, dict):
        return None
    lo, hi = _num(node.get("low")), _num(node.get("high"))
    if lo is None or hi is None:
        return None
    return (min(lo, hi), max(lo, hi))


def level_metrics(level):
    """Flatten one ``sglang_bench`` level into the figures the tuner and the report use."""
    level = level if isinstance(level, dict) else {}
    return {
        "output_throughput": _get(level, "output_throughput"),
        "output_throughput_ci": _ci(level, "output_throughput"),
        "request_throughput": _get(level, "request_throughput"),
        "decode_tps_mean": _get(level, "decode_tps_per_request", "mean"),
        "decode_tps_p50": _get(level, "decode_tps_per_request", "p50"),
        "decode_tps_ci": _ci(level, "decode_tps_per_request_mean"),
        "decode_tps_p50_ci": _ci(level, "decode_tps_per_request_p50"),
        "ttft_p50_ms": _get(level, "ttft_ms", "p50"),
        "ttft_p99_ms": _get(level, "ttft_ms", "p99"),
        "itl_p50_ms": _get(level, "itl_ms", "p50"),
        "tpot_mean_ms": _get(level, "tpot_ms", "mean"),
        "e2e_p99_ms": _get(level, "e2e_latency_ms", "p99"),
        "accept_length": _get(level, "accept_length"),
        "completed": _get(level, "completed"),
        "failed": _get(level, "failed"),
        "client_limited": bool(level.get("client_limited")),
    }


def attempt_key(att):
    cand = att.get("candidate") or {}
    return att.get("key") or "s%s-k%s-d%s" % (cand.get("steps"), cand.get("topk"), cand.get("draft_tokens"))


# The overrides a candidate may carry (SGLang ServerArgs fields), in the order the notation and the
# command line write them: (key, notation suffix, SGLang 0.5.23 flag). The flags are the pinned
# release's spelling (roles/service/vars/sglang_releases.yml; 0.5.23 has no --cuda-graph-max-bs);
# enable_linear_replayssm_spec is a store_true flag, written only when true.
LEVERS = (
    ("cuda_graph_max_bs", "cgbs", "--cuda-graph-max-bs-decode"),
    ("max_running_requests", "mrr", "--max-running-requests"),
    ("mamba_full_memory_ratio", "ratio", "--mamba-full-memory-ratio"),
    ("max_mamba_cache_size", "mms", "--max-mamba-cache-size"),
    ("enable_linear_replayssm_spec", "replay", "--enable-linear-replayssm-spec"),
)
FLAG_LEVERS = ("enable_linear_replayssm_spec",)
DEPTH_FLAGS = (("steps", "--speculative-num-steps"), ("topk", "--speculative-eagle-topk"),
               ("draft_tokens", "--speculative-num-draft-tokens"))


# A per-load schedule (SGLang's --speculative-adaptive and its config): a setting of its own, not a
# lever; the report names it by its slots (schedule_label) instead of a suffix.
ADAPTIVE_KEYS = ("speculative_adaptive", "speculative_adaptive_config")


def _on(value):
    """A store_true lever's value as set_fact and extra vars may leave it (bool, 'true', 1)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return value is True or (isinstance(value, int) and value == 1)


def _value_text(value):
    num = as_number(value)
    if num is None:
        return str(value)
    return "%d" % num if num == int(num) else "%g" % num


def _set_levers(overrides):
    """``[(key, value), ...]`` of the overrides that are set, known levers first in LEVERS order,
    then any other key sorted (so a lever this report does not know still shows)."""
    ov = overrides if isinstance(overrides, dict) else {}
    known = [k for k, _t, _f in LEVERS]
    out = []
    for key in known + sorted(k for k in ov if k not in known and k not in ADAPTIVE_KEYS):
        value = ov.get(key)
        if value is None or value == "" or (key in FLAG_LEVERS and not _on(value)):
            continue
        out.append((key, value))
    return out


def _slot_key(key):
    try:
        return int(str(key).strip())
    except ValueError:
        return None


def schedule_label(config):
    """A schedule's short label, its slots in order: ``1:4 4:3`` (from batch size 1 steps 4, from 4
    steps 3; ``1:1/3/5`` where a slot has several candidate steps), ``SGLang's default`` for none of
    its own. The same text as plugins/plugin_utils/spec_schedule.py label (this file stays
    stdlib-only and self-contained: the module utils ship alone)."""
    if isinstance(config, str) and config.strip().startswith("{"):
        try:
            config = json.loads(config)
        except ValueError:
            return "invalid schedule"
    if config is None or config == {}:
        return "SGLang's default"
    if not isinstance(config, dict):
        return "invalid schedule"
    slots = []
    for key, tier in config.items():
        size = _slot_key(key)
        steps = tier.get("candidate_steps") if isinstance(tier, dict) else None
        if size is None or size < 1 or not isinstance(steps, list) or not steps or not all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in steps):
            return "invalid schedule"
        slots.append((size, sorted(set(steps))))
    return " ".join("%d:%s" % (size, "/".join(str(x) for x in steps)) for size, steps in sorted(slots))


def schedule_of(att):
    """``(on, config)`` of an attempt, the winner or a converge row: whether it serves a per-load
    schedule and the schedule (None: SGLang's built-in one)."""
    ov = (att or {}).get("overrides") if isinstance((att or {}).get("overrides"), dict) else {}
    if not _on(ov.get("speculative_adaptive")):
        return False, None
    return True, ov.get("speculative_adaptive_config")


def notation(att):
    """The report's one name of a candidate: depth ``s<steps>-k<topk>-d<draft tokens>`` and a
    suffix per lever that is set (``+cgbs64``, ``+mrr20``, ``+ratio4``, ``+mms96``, ``+replay``),
    e.g. ``s8-k1-d9+ratio4+replay``; a per-load schedule ``schedule <slots>`` (schedule_label) and
    its levers, e.g. ``schedule 1:4 4:3+ratio4``. Used by summary.md's tables, results.csv and the plot.

    ``att`` is an attempt, the winner or a converge row (``candidate``, ``overrides``, ``key``)."""
    att = att if isinstance(att, dict) else {}
    cand = att.get("candidate") if isinstance(att.get("candidate"), dict) else {}
    depth = [cand.get(k) for k in ("steps", "topk", "draft_tokens")]
    adaptive, config = schedule_of(att)
    if adaptive:
        # a per-load schedule is named by its slots (the step it starts at is the first slot's)
        text = "schedule %s" % schedule_label(config)
    elif all(isinstance(v, int) and not isinstance(v, bool) for v in depth):
        text = "s%d-k%d-d%d" % tuple(depth)
    else:
        text = str(att.get("key") or cand.get("key") or "-")
    tags = dict((k, t) for k, t, _f in LEVERS)
    for key, value in _set_levers(att.get("overrides")):
        if key in FLAG_LEVERS:
            text += "+" + tags[key]
        else:
            text += "+%s%s" % (tags.get(key, key + "="), _value_text(value))
    return text


def setting_argv(candidate, overrides):
    """The SGLang flags of a setting: its depth and every lever that is set, e.g.
    ``--speculative-num-steps 8 --speculative-eagle-topk 1 --speculative-num-draft-tokens 9
    --mamba-full-memory-ratio 4``; a schedule adds ``--speculative-adaptive`` and, for one of its
    own, ``--speculative-adaptive-config adaptive-<digest>.json`` (the file the service role writes)."""
    cand = candidate if isinstance(candidate, dict) else {}
    words = []
    for key, flag in DEPTH_FLAGS:
        if cand.get(key) is not None:
            words += [flag, str(cand[key])]
    flags = dict((k, f) for k, _t, f in LEVERS)
    for key, value in _set_levers(overrides):
        flag = flags.get(key, "--" + key.replace("_", "-"))
        words += [flag] if key in FLAG_LEVERS else [flag, _value_text(value)]
    adaptive, config = schedule_of({"overrides": overrides})
    if adaptive:
        # the service role writes the config to <config_dir>/<name>/adaptive-<digest>.json
        words += ["--speculative-adaptive"]
        if config not in (None, {}):
            words += ["--speculative-adaptive-config", "adaptive-<digest>.json"]
    return " ".join(words)


def running_cap(att):
    """The most requests the launch's server ran at once: the attempt's ``running_cap``, else an
    older record's ``cap``, else sglang_bench's ``server.effective_max_running_requests``; None
    when none says."""
    att = att if isinstance(att, dict) else {}
    server = att.get("server") if isinstance(att.get("server"), dict) else {}
    for value in (att.get("running_cap"), att.get("cap"), server.get("effective_max_running_requests")):
        num = as_number(value)
        if num is not None and num >= 1:
            return int(num)
    return None


def _cap_text(att, cap):
    """A cap cell: the number, and the pool that set it where the launch's start log said
    (pool facts ``capped_by``: mamba, the hybrid state pool; kv, the KV cache)."""
    if cap is None:
        return "-"
    pool = att.get("pool") if isinstance(att.get("pool"), dict) else {}
    return "%d (%s)" % (cap, pool["capped_by"]) if pool.get("capped_by") else "%d" % cap


def queue_bound(level, cap):
    """A level is queue-bound when the server runs fewer requests at once than it sends: the
    rest wait in the queue and the figure includes the wait."""
    return cap is not None and level is not None and int(level) > int(cap)


def levels_of(doc):
    """Concurrency levels in the document: the run's list, plus any measured level."""
    out = set()
    for c in (doc.get("settings") or {}).get("concurrency") or []:
        try:
            out.add(int(c))
        except (TypeError, ValueError):
            pass
    for att in doc.get("attempts") or []:
        for c in (att.get("metrics") or {}):
            if str(c).isdigit():
                out.add(int(c))
    out.update(int(c) for c in converge_levels(doc)[1])
    return sorted(out)


# ---------------------------------------------------------------------------- validation

def validate(doc, source="results.json"):
    """Raise ReportError unless ``doc`` has the shape this tool writes."""
    if not isinstance(doc, dict):
        raise ReportError("%s is not a JSON object" % source)
    if doc.get("schema") != SCHEMA:
        raise ReportError("%s has schema %r, this tool writes schema %d" % (source, doc.get("schema"), SCHEMA))
    atts = doc.get("attempts")
    if not isinstance(atts, list):
        raise ReportError("%s has no 'attempts' list" % source)
    for i, att in enumerate(atts):
        if not isinstance(att, dict) or not isinstance(att.get("candidate"), dict):
            raise ReportError("%s attempt %d has no candidate" % (source, i + 1))
        cand = att["candidate"]
        for key in ("steps", "topk", "draft_tokens"):
            if not isinstance(cand.get(key), int) or isinstance(cand.get(key), bool):
                raise ReportError("%s attempt %d: candidate %s is not an integer" % (source, i + 1, key))
        if att.get("status") not in ("ok", "failed", "skipped"):
            raise ReportError("%s attempt %d has status %r" % (source, i + 1, att.get("status")))
        if att["status"] == "ok" and not isinstance(att.get("metrics"), dict):
            raise ReportError("%s attempt %d is ok but has no metrics" % (source, i + 1))
    return doc


def parse(text, source="results.json"):
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ReportError("%s is not valid JSON (%s)" % (source, exc))
    return validate(doc, source)


# ---------------------------------------------------------------------------- rendering

def _clean(node):
    """JSON has no NaN/Infinity: such figures become null instead of an unreadable file."""
    if isinstance(node, float) and (math.isnan(node) or math.isinf(node)):
        return None
    if isinstance(node, dict):
        return dict((str(k), _clean(v)) for k, v in node.items())
    if isinstance(node, (list, tuple)):
        return [_clean(v) for v in node]
    return node


def render_json(doc):
    return json.dumps(_clean(doc), indent=2, sort_keys=True, allow_nan=False, default=str) + "\n"


CSV_FIELDS = (
    "attempt", "key", "steps", "topk", "draft_tokens", "cuda_graph_max_bs", "max_running_requests",
    "status", "failure_class", "run", "concurrency", "output_throughput", "output_throughput_ci_low",
    "output_throughput_ci_high", "decode_tps_mean", "decode_tps_ci_low", "decode_tps_ci_high", "decode_tps_p50",
    "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "tpot_mean_ms", "e2e_p99_ms", "accept_length", "completed",
    "failed", "client_limited", "launch_s", "bench_s", "started",
    # added with the cap levers: at the end, so readers by position keep working
    "candidate", "mamba_full_memory_ratio", "max_mamba_cache_size", "enable_linear_replayssm_spec",
    "running_cap", "queue_bound",
    # added with the per-load schedule: tuned or default on a schedule's launch, empty on a static one
    "schedule",
)


def _fmt(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "%.6g" % value
    return str(value)


def converge_levels(doc):
    """The converged winner's figures per level (its smoke benchmark measured every level where no
    launch of it had, mtp_tune_smoke_levels), as ``(converge record, {level: figures})``; the
    second is {} when the record has none."""
    conv = doc.get("converge") if isinstance(doc.get("converge"), dict) else {}
    levels = conv.get("levels") if isinstance(conv.get("levels"), dict) else {}
    return conv, dict((str(c), lv) for c, lv in levels.items() if str(c).isdigit() and isinstance(lv, dict))


def winner_index(doc):
    """Index in ``attempts`` of the winner's row: its launch measured at the most levels (the one
    completing its table after a search at the judged level), the first of them; None without one."""
    winner = doc.get("winner") if isinstance(doc.get("winner"), dict) else {}
    if not winner.get("key"):
        return None
    name = notation(winner)
    rows = [(len(att.get("metrics") or {}), -i) for i, att in enumerate(doc.get("attempts") or [])
            if att.get("status") == "ok" and attempt_key(att) == winner.get("key") and notation(att) == name]
    return -max(rows)[1] if rows else None


def _converge_attempt(doc):
    """The converge's smoke as a row of the tables (no launch of the search: the run's last restart).
    Its running cap is the winner's launch's: the same setting on the same node."""
    conv, levels = converge_levels(doc)
    if not levels:
        return None
    winner = doc.get("winner") if isinstance(doc.get("winner"), dict) else {}
    same = winner.get("key") == conv.get("key")
    win = winner_index(doc) if same else None
    return {"key": conv.get("key"), "candidate": winner.get("candidate") if same else {},
            "overrides": winner.get("overrides") if same else {}, "status": "ok", "metrics": levels,
            "running_cap": None if win is None else running_cap(doc["attempts"][win]),
            "pool": {} if win is None else doc["attempts"][win].get("pool"),
            "timings": {"started": conv.get("at")}}


def _schedule_kind(att):
    """``tuned`` or ``default`` for a schedule's launch (the record's, else from its config), None
    for a static one."""
    adaptive, config = schedule_of(att)
    if not adaptive:
        return None
    if att.get("schedule") in ("tuned", "default"):
        return att["schedule"]
    return "default" if config in (None, {}) else "tuned"


def csv_rows(doc):
    """One row per attempt and measured level; a failed attempt is one row without figures. The
    converged winner's smoke at every level, where it measured them, follows as attempt
    ``converge``. ``candidate`` is the report's notation, ``running_cap`` the server's running
    request limit and ``queue_bound`` whether the level is above it."""
    rows = []
    conv = _converge_attempt(doc)
    numbered = list(enumerate(doc.get("attempts") or [], 1)) + ([("converge", conv)] if conv else [])
    for i, att in numbered:
        cand = att.get("candidate") or {}
        ov = att.get("overrides") or {}
        tm = att.get("timings") or {}
        base = {
            "attempt": i, "key": attempt_key(att), "steps": cand.get("steps"), "topk": cand.get("topk"),
            "draft_tokens": cand.get("draft_tokens"), "cuda_graph_max_bs": ov.get("cuda_graph_max_bs"),
            "max_running_requests": ov.get("max_running_requests"), "status": att.get("status"),
            "failure_class": att.get("failure_class"), "run": att.get("run"),
            "launch_s": tm.get("launch_s"), "bench_s": tm.get("bench_s"), "started": tm.get("started"),
            "candidate": notation(att), "mamba_full_memory_ratio": ov.get("mamba_full_memory_ratio"),
            "max_mamba_cache_size": ov.get("max_mamba_cache_size"),
            "enable_linear_replayssm_spec": _on(ov["enable_linear_replayssm_spec"])
            if ov.get("enable_linear_replayssm_spec") not in (None, "") else None,
            "running_cap": running_cap(att),
            "schedule": _schedule_kind(att),
        }
        metrics = att.get("metrics") or {}
        levels = sorted((c for c in metrics if str(c).isdigit()), key=int)
        if not levels:
            rows.append(base)
            continue
        for c in levels:
            m = level_metrics(metrics[c])
            row = dict(base)
            row.update(concurrency=int(c), queue_bound=queue_bound(c, base["running_cap"]))
            for k in ("output_throughput", "decode_tps_mean", "decode_tps_p50", "ttft_p50_ms", "ttft_p99_ms",
                      "itl_p50_ms", "tpot_mean_ms", "e2e_p99_ms", "accept_length", "completed", "failed",
                      "client_limited"):
                row[k] = m[k]
            for k, ci in (("output_throughput", m["output_throughput_ci"]), ("decode_tps", m["decode_tps_ci"])):
                if ci:
                    row[k + "_ci_low"], row[k + "_ci_high"] = ci
            rows.append(row)
    return rows


def render_csv(doc):
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in csv_rows(doc):
        writer.writerow(dict((k, _fmt(row.get(k))) for k in CSV_FIELDS))
    return buf.getvalue()


def _cell(level, mark_limited=True, queued=False):
    """One cell: per-request decode tok/s / aggregate output tok/s, ``(c)`` where the client was
    near its own limit and that matters, `` q`` where the level is queue-bound."""
    m = level_metrics(level)
    if m["failed"]:
        text = "%d failed" % int(m["failed"])
    else:
        pr, ag = m["decode_tps_mean"], m["output_throughput"]
        text = "%s / %s%s" % ("-" if pr is None else "%.0f" % pr, "-" if ag is None else "%.0f" % ag,
                              " (c)" if m["client_limited"] and mark_limited else "")
    return text + (" q" if queued else "")


QUEUE_LEGEND = ("q: queue-bound: the level is above the setting's running cap (the most requests its server "
                "runs at once, SGLang's effective max_running_requests); the requests above it wait in the queue, "
                "so the figure includes the wait and says more about the cap than about the depth.")


def judged_levels(doc):
    """The concurrency levels the objective is judged at: the run's level (latency, throughput,
    an SLO at one level), or every level for an SLO over all of them."""
    s = doc.get("settings") or {}
    level = as_number(s.get("level"))
    if level is not None:
        return [int(level)]
    if s.get("objective") == "slo":
        return levels_of(doc)
    return []


def limited_cells_that_matter(doc):
    """``(attempt index, level)`` of the client-limited cells that could change the result.

    A client-limited figure understates the server. That matters only at a level the objective
    is judged at, and not for the winner's own scored cell (a higher true figure keeps the same
    winner); anywhere else at a judged level, the true figure might have won.
    """
    judged = set(judged_levels(doc))
    winner = doc.get("winner") or {}
    win_key, win_ov = winner.get("key"), winner.get("overrides") or {}
    win_level = as_number((winner.get("score") or {}).get("level"))
    out = []
    win_seen = False
    for i, att in enumerate(doc.get("attempts") or []):
        if att.get("status") != "ok":
            continue
        is_win = (not win_seen and win_key is not None and attempt_key(att) == win_key
                  and (att.get("overrides") or {}) == win_ov)
        win_seen = win_seen or is_win
        for c, lv in (att.get("metrics") or {}).items():
            if not str(c).isdigit() or int(c) not in judged:
                continue
            if not level_metrics(lv)["client_limited"]:
                continue
            if is_win and win_level is not None and int(c) == int(win_level):
                continue
            out.append((i, int(c)))
    return out


def _failure_text(att):
    cls = att.get("failure_class") or "unknown"
    line = (att.get("failure_line") or "").strip()
    if len(line) > 90:
        line = line[:87] + "..."
    return "failed: %s%s" % (cls, (" (`%s`)" % line.replace("|", "\\|").replace("`", "'")) if line else "")


def _duration(seconds):
    if seconds is None:
        return "-"
    seconds = float(seconds)
    if seconds < 90:
        return "%.1f s" % seconds
    return "%d min %02d s" % (seconds // 60, seconds % 60)


def _run_state_lines(doc):
    """What the run history says: a run that has not finished (running, or interrupted with
    nobody to say so) makes the winner provisional; earlier interrupted runs are named."""
    runs = [r for r in doc.get("runs") or [] if isinstance(r, dict)]
    out = []
    if runs and runs[-1].get("state") != "finished":
        last = runs[-1]
        state = last.get("state")
        if state == "running":
            facts = (last.get("id"), last.get("started"), doc.get("updated", "-"))
            out.append("- **Run not finished**: run %s (started %s) is measuring, or was interrupted at %s "
                       "if no ansible-playbook runs it any more; the same run name resumes it. The winner "
                       "below is the best so far, not a decision." % facts)
        else:
            out.append("- **Run %s**: run %s (started %s, ended %s); the winner below is the best so far, "
                       "not a decision." % (state, last.get("id"), last.get("started"), last.get("ended", "-")))
        ended_by = last.get("ended_by") if isinstance(last.get("ended_by"), dict) else None
        if ended_by:
            out.append("- **Ended by the node, not the setting**: %s failed with %s, which every candidate would "
                       "fail the same way, so nothing else was launched: %s Fix the node and run again; the next "
                       "run launches a candidate again." % (
                           ended_by.get("key") or "the first launch", ended_by.get("class"),
                           str(ended_by.get("cause") or "-").rstrip(".") + "."))
    cut = [r for r in runs if r.get("state") == "interrupted"]
    if cut:
        out.append("- Interrupted runs: %s (resumed later)" % ", ".join(
            "%s (started %s)" % (r.get("id"), r.get("started")) for r in cut))
    sup = doc.get("superseded") or []
    if sup:
        out.append("- Not reused: %d earlier measurement(s) taken under another workload or retried "
                   "(kept in results.json under 'superseded')" % len(sup))
    return out


def _cut_short_line(cut):
    """A run mtp_tune_max_launches ended before the search was over (mtp_tune_cut_short): what it
    would have launched next and what it left open."""
    if not isinstance(cut, dict):
        return None
    open_ = ["the fit search of %s (%s: starts at %s, fails at %s)" % (
        f.get("key"), f.get("lever"), "-" if f.get("starts") is None else f.get("starts"), f.get("fails"))
        for f in cut.get("fits") or [] if isinstance(f, dict)]
    if cut.get("open"):
        open_.append("never launched, which the search would still launch: %s" % ", ".join(str(k) for k in cut["open"]))
    return ("- **Ended by mtp_tune_max_launches** (%s launches) before the search was over: next it would have "
            "launched %s. Left open: %s. Raise mtp_tune_max_launches and run again with the same run name to "
            "go on from here" % (cut.get("max_launches"), cut.get("next") or "-", "; ".join(open_) or "nothing else"))


def _unverified_line(winner):
    """What the winner was never compared with: candidates no measurement rules out."""
    rows = [u for u in winner.get("unverified") or [] if isinstance(u, dict)]
    if not rows:
        return None
    parts = []
    for u in rows:
        gain = as_number(u.get("gain"))
        what = "no bound: nothing cheaper was measured" if gain is None else "up to %+.0f %%" % (gain * 100)
        if gain is not None and gain <= 0:
            what += "; it has fewer draft tokens, so a tie goes to it"
        if u.get("convex_rules_out") is True:
            what += "; ruled out if each extra draft token costs at least the one before"
        parts.append("steps %s (%s)" % (u.get("steps"), what))
    return ("- Could still beat the winner (the measurements and the model do not rule them out): %s. Launch "
            "them, or run with mtp_tune_strategy sweep, to settle it" % ", ".join(parts))


def _model_lines(winner):
    """What only the model rules out, and where the measurements broke it."""
    out = []
    rows = [u for u in winner.get("model_rules_out") or [] if isinstance(u, dict)]
    if rows:
        out.append("- Ruled out by the model alone (a chain's accept length concave in depth, and a verify round's "
                   "extra draft token never costing less than the one before, within one server configuration): "
                   "%s" % ", ".join(
                       "steps %s (%s)" % (u.get("steps"), "no bound without it" if as_number(u.get("gain")) is None
                                          else "up to %+.0f %% without it" % (as_number(u.get("gain")) * 100))
                       for u in rows))
    model = winner.get("model") if isinstance(winner.get("model"), dict) else {}
    for text in model.get("broken") or []:
        out.append("- The measurements break the model: %s" % text)
    return out


def _figure_lines(doc, levels):
    """The winner's figure at every measured level: the converged server's smoke where it measured
    the level, else the winner's launch (its row in the table), queue-bound levels marked."""
    winner = doc.get("winner") if isinstance(doc.get("winner"), dict) else {}
    idx = winner_index(doc)
    att = doc["attempts"][idx] if idx is not None else {}
    cap = running_cap(att)
    conv, conv_levels = converge_levels(doc)
    if conv.get("key") != winner.get("key"):
        conv_levels = {}
    parts, smoke, launch, queued = [], [], [], False
    measured = att.get("metrics") if isinstance(att.get("metrics"), dict) else {}
    for c in levels:
        if str(c) in conv_levels:
            lv = conv_levels[str(c)]
            smoke.append(c)
        elif str(c) in measured:
            lv = measured[str(c)]
            launch.append(c)
        else:
            continue
        queued = queued or queue_bound(c, cap)
        parts.append("C=%d %s" % (c, _cell(lv, False, queue_bound(c, cap))))
    if not parts:
        return ["- Its figures: none measured"]
    if smoke and launch:
        source = "C=%s from the converged server's smoke benchmark, C=%s from its launch" % (
            ",".join(str(c) for c in smoke), ",".join(str(c) for c in launch))
    else:
        source = "from the converged server's smoke benchmark" if smoke else "from its launch"
    if cap is None:
        capped = "running cap unknown (its launch did not say)"
    else:
        capped = "running cap %s%s" % (_cap_text(att, cap), ": q marks a level above it, where requests queue" if queued else "")
    return ["- Its figures, per-request decode tok/s / aggregate output tok/s (%s): %s; %s" % (
        source, ", ".join(parts), capped)]


def _setting_lines(doc, levels, directory=None):
    """What summary.md answers first: the setting to run (notation and SGLang flags), its figures
    and the command that rolls it out."""
    winner = doc.get("winner") if isinstance(doc.get("winner"), dict) else {}
    if not winner.get("key"):
        return ["**Setting to run: none yet** (no candidate has served and been benchmarked)"]
    runs = [r for r in doc.get("runs") or [] if isinstance(r, dict)]
    provisional = " (the best so far: the run has not finished)" if runs and runs[-1].get("state") != "finished" else ""
    argv = setting_argv(winner.get("candidate"), winner.get("overrides"))
    adaptive, config = schedule_of(winner)
    sched = winner.get("schedule") if isinstance(winner.get("schedule"), dict) else None
    if adaptive:
        out = ["**Setting to run: per-load schedule %s**%s (SGLang's `--speculative-adaptive`, starting at steps %s): `%s`"
               % (schedule_label(config), provisional, (winner.get("candidate") or {}).get("steps"), argv), ""]
        out.append("- Its config (`sglang_service_speculative_adaptive_config`; the node gets it as "
                   "adaptive-<digest>.json): %s" % ("`%s`" % config_text(config) if config not in (None, {})
                                                    else "none: SGLang's built-in schedule"))
    else:
        out = ["**Setting to run: %s**%s: `%s`" % (notation(winner), provisional, argv), ""]
        if sched:
            out.append("- A static setting, not a per-load schedule: the schedule did not beat the best single "
                       "static setting (table below)")
    out += _figure_lines(doc, levels)
    where = shlex.quote(os.path.abspath(directory)) if directory else "<this results directory>"
    out.append("- Roll it out: `ansible-playbook blackwell.sglang.rollout -i <inventory> -e mtp_tune_from=%s` "
               "(`-e rollout_hosts=<group>` for one kind of node; `--check --diff` previews it)" % where)
    return out


def config_text(config):
    """A schedule's config as one line of JSON, its slots in batch-size order (as the service role
    writes its file), e.g. ``{"1": {"candidate_steps": [4]}, "4": {"candidate_steps": [3]}}``."""
    if isinstance(config, str) and config.strip().startswith("{"):
        try:
            config = json.loads(config)
        except ValueError:
            return config
    if not isinstance(config, dict):
        return json.dumps(config)
    keyed = sorted(((_slot_key(k), str(k), v) for k, v in config.items()), key=lambda x: (x[0] is None, x[0] or 0, x[1]))
    return "{%s}" % ", ".join("%s: %s" % (json.dumps(k), json.dumps(v, sort_keys=True)) for _n, k, v in keyed)


def _pct(value, base):
    value, base = as_number(value), as_number(base)
    if value is None or base is None or base <= 0:
        return None
    return (value / base - 1.0) * 100.0


def _tps_cell(value, base=None):
    num = as_number(value)
    if num is None:
        return "-"
    pct = _pct(num, base)
    return "%.0f" % num if pct is None else "%.0f (%+.1f %%)" % (num, pct)


def _schedule_lines(doc):
    """The per-load schedule's table (a run with mtp_tune_schedule): per level the best static
    setting, the schedule, SGLang's built-in schedule and the best single static setting (the one
    static setting best at its worst level), aggregate output tok/s, the schedule and the default
    also as a change over the best single static; then the verdict. [] for a static run."""
    winner = doc.get("winner") if isinstance(doc.get("winner"), dict) else {}
    sched = winner.get("schedule") if isinstance(winner.get("schedule"), dict) else None
    if not sched:
        return []
    names = dict((attempt_key(a), notation(a)) for a in doc.get("attempts") or [])
    single = sched.get("single_static")
    tuned = sched.get("config")
    out = ["", "## Per-load schedule", "",
           "Aggregate output tok/s per level (at C=1 the one request's speed); the schedule %s%s and SGLang's "
           "default also as the change over the best single static setting %s, the static setting best at its "
           "worst level." % (schedule_label(tuned) if tuned not in (None, {}) else "(none tuned)",
                             " (`%s`)" % config_text(tuned) if tuned not in (None, {}) else "",
                             names.get(single, single or "-")), "",
           "| level | best static | schedule | SGLang default | best single static | tie band |",
           "|---|---|---|---|---|---|"]
    for row in sched.get("rows") or []:
        if not isinstance(row, dict):
            continue
        best = row.get("best_static") if isinstance(row.get("best_static"), dict) else {}
        base = row.get("single_static_tps")
        band = as_number(row.get("band"))
        label = best.get("label") or names.get(best.get("key"), best.get("key")) or "-"
        out.append("| C=%s | %s %s | %s | %s | %s | %s |" % (
            row.get("level"), label, _tps_cell(best.get("tps")), _tps_cell(row.get("schedule_tps"), base),
            _tps_cell(row.get("default_tps"), base), _tps_cell(base),
            "-" if band is None else "+/-%.1f %%" % (band * 100)))
    verdict = sched.get("verdict")
    out += ["", "**Verdict: %s**: %s" % (
        "the schedule" if verdict == "schedule" else "the best single static setting %s" % names.get(single, single or "-"),
        str(sched.get("why") or winner.get("decided_by") or "-").rstrip(".") + ".")]
    return out


def _lever_lines(doc):
    """The winner's cap levers (not the fit search's): what they are and whether its greedy
    outputs were checked against the unlevered server's."""
    winner = doc.get("winner") if isinstance(doc.get("winner"), dict) else {}
    fit_keys = ("cuda_graph_max_bs", "max_running_requests")
    levers = [(k, v) for k, v in _set_levers(winner.get("overrides")) if k not in fit_keys]
    if not levers:
        return []
    idx = winner_index(doc)
    num = (doc["attempts"][idx].get("numerics") if idx is not None else None) or {}
    checked = ""
    if isinstance(num, dict) and num.get("checked"):
        checked = "; greedy outputs checked: %s of %s differ" % (num.get("differ"), num.get("of"))
    elif isinstance(num, dict) and num:
        checked = "; greedy outputs not checked"
    return ["- Cap levers: `%s` (set to raise the running cap; unset ones are SGLang's defaults)%s" % (
        setting_argv({}, dict(levers)), checked)]


def _notation_line(doc):
    """The notation's key, naming only the lever suffixes the report uses."""
    names = [notation(a) for a in doc.get("attempts") or []] + [notation(doc.get("winner") or {})]
    used = ["+%s%s (%s)" % (tag, "" if key in FLAG_LEVERS else "<n>", flag) for key, tag, flag in LEVERS
            if any(("+" + tag) in n for n in names)]
    text = "Candidates: s<steps>-k<topk>-d<draft tokens>%s." % (
        ", then a suffix per lever that is set: " + ", ".join(used) if used else "")
    if any(n.startswith("schedule ") for n in names):
        text += (" A per-load schedule (SGLang's --speculative-adaptive): schedule <batch size>:<steps> ..., each "
                 "slot serving the batches from its size up to the next slot's with its step count.")
    return text


def render_summary(doc, directory=None):
    """The operator's report: first the setting to run, its figures and how to roll it out; then
    how it was chosen; then one row per attempt (candidate x concurrency), winner marked.
    ``directory`` is where the report lies (for the rollout command)."""
    s = doc.get("settings") or {}
    levels = levels_of(doc)
    winner = doc.get("winner") or {}
    stats = doc.get("stats") or {}
    out = ["# MTP tuning: %s on %s" % (doc.get("run", "-"), doc.get("host", "-")), ""]
    out += _setting_lines(doc, levels, directory)
    out += _schedule_lines(doc)
    out += ["", "## How it was chosen", ""]
    obj = s.get("objective", "-")
    judged = {"latency": "per-request decode tok/s at C=%s" % s.get("level"),
              "throughput": "aggregate output tok/s at C=%s" % s.get("level"),
              "slo": "best aggregate tok/s with per-request tok/s >= %s and TTFT p99 <= %s ms" % (
                  s.get("slo_min_tps", "-"), s.get("slo_max_ttft_p99_ms", "-"))}.get(obj, obj)
    out.append("- Objective: **%s** (%s)" % (obj, judged))
    # only adaptive probes the list's ends; the sweep launches them anyway, the climb never on purpose
    ends = "probe ends %s, " % s.get("probe_ends", "-") if s.get("strategy", "adaptive") == "adaptive" else ""
    out.append("- Strategy: %s (%snoise band %s per measurement at least, noise launches %s, "
               "re-measure budget %s); fit search: %s" % (
                   s.get("strategy", "-"), ends, s.get("noise", "-"), s.get("noise_launches", 0),
                   s.get("remeasure_launches", 0), "on" if s.get("fit_retry") else "off"))
    search = s.get("search_levels")
    if isinstance(search, list) and search and sorted(str(c) for c in search) != sorted(str(c) for c in levels):
        if converge_levels(doc)[1]:
            out.append("- Search benchmarked C=%s only (mtp_tune_search_levels=judged); the candidates tied with the "
                       "winner were launched again and measured at every level (rows marked \"all levels\"), and the "
                       "winner by the converged server's smoke benchmark (row marked \"converged\")" % (
                           ",".join(str(c) for c in search)))
        else:
            out.append("- Search benchmarked C=%s only (mtp_tune_search_levels=judged); the winner and the candidates "
                       "tied with it were launched again and measured at every level (rows marked \"all levels\")" % (
                           ",".join(str(c) for c in search)))
    out.append("- Server launches: %s (%s failed) over %s candidates; wall time %s (starting %s, benchmarking %s)" % (
        stats.get("launches", "-"), stats.get("failed_launches", "-"), stats.get("candidates", "-"),
        _duration(stats.get("wall_s")), _duration(stats.get("launch_s")), _duration(stats.get("bench_s"))))
    # An adaptive search (or a launch budget) leaves candidates out: the winner is then the best of
    # what was measured, and the reader should see what that was not.
    cands = s.get("candidates")
    if isinstance(cands, list) and cands:
        tried = set(attempt_key(a) for a in doc.get("attempts") or [])
        left = [str(k) for k in cands if str(k) not in tried]
        if left:
            out.append("- Not launched: %s (%d of %d candidates); the winner is the best of those measured" % (
                ", ".join(left), len(left), len(cands)))
    cut = _cut_short_line(doc.get("cut_short"))
    if cut:
        out.append(cut)
    out.append("- Updated: %s" % doc.get("updated", "-"))
    out += _run_state_lines(doc)
    if winner.get("key"):
        sc = winner.get("score") or {}
        adaptive, config = schedule_of(winner)
        steps = (winner.get("candidate") or {}).get("steps")
        out.append("- **Winner: %s** (%stopk %s, %s draft tokens%s): %.1f at C=%s; %s" % (
            "per-load schedule %s" % schedule_label(config) if adaptive else "steps %s" % steps,
            "starting at steps %s, " % steps if adaptive else "", (winner.get("candidate") or {}).get("topk"),
            (winner.get("candidate") or {}).get("draft_tokens"),
            "".join(", %s" % k.replace("_", "-") if k in FLAG_LEVERS else ", %s %s" % (k.replace("_", "-"), _value_text(v))
                    for k, v in _set_levers(winner.get("overrides"))),
            sc.get("value") or 0.0, sc.get("level"), winner.get("decided_by", "")))
        if winner.get("margin") is not None:
            iv = winner.get("interval") or [None, None]
            out.append("- Winner's margin over %s: %+.1f %% (tie band %.1f %%); its interval %s .. %s" % (
                winner.get("runner_up") or "-", (winner.get("margin") or 0.0) * 100, (winner.get("band") or 0.0) * 100,
                "-" if iv[0] is None else "%.1f" % iv[0], "-" if iv[1] is None else "%.1f" % iv[1]))
        noise = winner.get("noise") if isinstance(winner.get("noise"), dict) else {}
        if noise.get("source"):
            out.append("- Noise: %s; the tie bands use +/-%.2g %% per measurement" % (
                noise["source"], (as_number(noise.get("used")) or 0.0) * 100))
        open_ = _unverified_line(winner)
        if open_:
            out.append(open_)
        out += _model_lines(winner)
        fit = (s.get("fit_ladder") or {}) if isinstance(s.get("fit_ladder"), dict) else {}
        mrr = (winner.get("overrides") or {}).get("max_running_requests")
        if mrr is not None and fit.get("judged_floor") and int(mrr) < int(fit["judged_floor"]):
            out.append("- Capped: max-running-requests %s is below the judged concurrency %s (from %s): levels "
                       "above it queue, their figures include the wait"
                       % (mrr, fit["judged_floor"], fit.get("max_running_requests")))
        elif winner.get("overrides"):
            fitted = dict((k, v) for k, v in winner["overrides"].items() if k in ("cuda_graph_max_bs", "max_running_requests"))
            if any(v is not None for v in fitted.values()):
                out.append("- Fitted: %s (the largest setting that started; SGLang would use %s)" % (
                    ", ".join("%s %s" % (k.replace("_", "-"), v) for k, v in sorted(fitted.items()) if v is not None),
                    ", ".join("%s %s" % (k.replace("_", "-"), fit.get(k)) for k in sorted(fitted) if fit.get(k))
                    or "its defaults"))
        out += _lever_lines(doc)
    else:
        out.append("- Winner: none yet")
    conv = doc.get("converge") or {}
    if conv:
        out.append("- Converged: %s" % conv.get("summary", conv))
    out.append("")
    out.append(_notation_line(doc))
    out.append("Cells: per-request decode tok/s / aggregate output tok/s; cap: the running cap of the launch's server "
               "(- where it did not say), with the pool that set it where its start log said (mamba: the hybrid "
               "state pool, kv: the KV cache).")
    out.append("")
    out.append("| candidate | cap | " + " | ".join("C=%d" % c for c in levels) + " | launch | bench |")
    out.append("|---|---|" + "---|" * len(levels) + "---|---|")
    win_index = winner_index(doc)
    matter = set(limited_cells_that_matter(doc))
    queued = False
    for i, att in enumerate(doc.get("attempts") or []):
        label = notation(att)
        if i == win_index:
            label = "**%s** (winner)" % label
        if str(att.get("reason") or "").startswith("levels "):
            label += " all levels"
        tm = att.get("timings") or {}
        cap = running_cap(att)
        if att.get("status") == "ok":
            metrics = att.get("metrics") or {}
            cells = [_cell(metrics.get(str(c)), (i, c) in matter, queue_bound(c, cap)) if str(c) in metrics else "-"
                     for c in levels]
            queued = queued or any(queue_bound(c, cap) for c in levels if str(c) in metrics)
        elif att.get("status") == "skipped":
            cells = ["skipped: %s" % (att.get("reason") or "cannot win")] + [""] * (len(levels) - 1)
        else:
            cells = [_failure_text(att)] + [""] * (len(levels) - 1)
        out.append("| %s | %s | %s | %s | %s |" % (label, _cap_text(att, cap), " | ".join(cells),
                                                   _duration(tm.get("launch_s")), _duration(tm.get("bench_s"))))
    conv = _converge_attempt(doc)
    if conv:
        metrics, cap = conv["metrics"], conv["running_cap"]
        out.append("| **%s** converged | %s | %s | - | - |" % (
            notation(conv), _cap_text(conv, cap),
            " | ".join(_cell(metrics[str(c)], True, queue_bound(c, cap)) if str(c) in metrics else "-" for c in levels)))
        queued = queued or any(queue_bound(c, cap) for c in levels if str(c) in metrics)
    if queued:
        out += ["", QUEUE_LEGEND]
    limited = sum(1 for a in doc.get("attempts") or [] if a.get("status") == "ok"
                  for lv in (a.get("metrics") or {}).values() if level_metrics(lv)["client_limited"])
    if matter:
        out += ["", "(c): the benchmark client was close to its own limit at this level (sglang_bench "
                "client_limited); the figure may understate the server, and a higher true figure "
                "could change the result."]
    if limited > len(matter):
        out += ["", "%d more cell(s) were client-limited where it cannot change the result (levels "
                "the objective does not judge, or the winner's own scored figure); they are not "
                "marked (results.csv has client_limited for every cell)." % (limited - len(matter))]
    comp = doc.get("comparison")
    if comp:
        out += ["", "## Runs compared (same host, next to this one)", "",
                "| run | strategy | objective | winner | launches | wall time |", "|---|---|---|---|---|---|"]
        for row in comp:
            out.append("| %s | %s | %s%s | %s | %s | %s |" % (
                row.get("run"), row.get("strategy"), row.get("objective"),
                " (C=%s)" % row["level"] if row.get("level") is not None else "", row.get("winner"),
                row.get("launches"), _duration(row.get("wall_s"))))
    fails = [a for a in doc.get("attempts") or [] if a.get("status") == "failed" and a.get("journal_tail")]
    if fails:
        out += ["", "## Failures (journal tail)"]
        for att in fails:
            out += ["", "### %s: %s" % (notation(att), att.get("failure_class")), "", "```"]
            out += [str(x).replace("```", "'''") for x in (att.get("journal_tail") or [])[-12:]]
            out.append("```")
    return "\n".join(out) + "\n"


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def plot_series(doc):
    """What plot.png draws, as data.

    ``lines``: one per candidate (its notation, once, in the order first measured):
    ``{"label", "winner", "steps", "cap", "levels", "decode", "aggregate", "queue_bound"}``; a
    candidate measured more than once shows at each level the mean of its measurements, and the
    winner's line takes in the converged server's smoke (the levels no launch of it measured).
    ``depth``: the objective's figure against depth, ``{"figure", "title", "levels": {C: [(steps,
    figure, queue_bound, label), ...]}}``, at each level the best candidate of each steps.
    """
    winner = doc.get("winner") if isinstance(doc.get("winner"), dict) else {}
    win_name = notation(winner) if winner.get("key") else None
    groups, order = {}, []
    conv = _converge_attempt(doc)
    rows = [a for a in doc.get("attempts") or [] if a.get("status") == "ok"] + ([conv] if conv else [])
    for att in rows:
        name = notation(att)
        if name not in groups:
            order.append(name)
            # a schedule has no one depth: it is a line of its own, not a point of the depth panel
            steps = None if schedule_of(att)[0] else (att.get("candidate") or {}).get("steps")
            groups[name] = {"steps": steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
                            "caps": [], "levels": {}}
        group = groups[name]
        cap = running_cap(att)
        if cap is not None:
            group["caps"].append(cap)
        for c, lv in (att.get("metrics") or {}).items():
            if str(c).isdigit():
                group["levels"].setdefault(int(c), []).append(level_metrics(lv))
    lines = []
    for name in order:
        group = groups[name]
        cs = sorted(group["levels"])
        if not cs:
            continue
        # the smallest cap any launch of it had: a level above it queued at least once
        cap = min(group["caps"]) if group["caps"] else None
        lines.append({"label": name, "winner": name == win_name, "steps": group["steps"], "cap": cap, "levels": cs,
                      "decode": [_mean(m["decode_tps_mean"] for m in group["levels"][c]) for c in cs],
                      "aggregate": [_mean(m["output_throughput"] for m in group["levels"][c]) for c in cs],
                      "queue_bound": [queue_bound(c, cap) for c in cs]})
    latency = (doc.get("settings") or {}).get("objective") == "latency"
    figure = "decode" if latency else "aggregate"
    best = {}
    for line in lines:
        if line["steps"] is None:
            continue
        for c, value, qb in zip(line["levels"], line[figure], line["queue_bound"]):
            if value is None:
                continue
            have = best.setdefault(c, {}).get(line["steps"])
            if have is None or value > have[1]:
                best[c][line["steps"]] = (line["steps"], value, qb, line["label"])
    return {"lines": lines,
            "depth": {"figure": figure,
                      "title": "best %s per depth" % ("per-request decode tok/s" if latency else "aggregate output tok/s"),
                      "levels": dict((c, [by[k] for k in sorted(by)]) for c, by in sorted(best.items()))}}


def _plot_points(ax, xs, ys, hollow, color, size):
    """Markers of one line: filled, or hollow where the level is queue-bound (no legend entry)."""
    for x, y, empty in zip(xs, ys, hollow):
        if y is not None:
            ax.plot([x], [y], linestyle="none", marker="o", markersize=size, color=color,
                    markerfacecolor="none" if empty else color, label="_nolegend_")


def plot_figure(doc):
    """The matplotlib figure of plot.png: per-request and aggregate tok/s against concurrency (one
    line per candidate, winner bold), and the objective's figure against depth (one line per level,
    the best candidate of each steps); queue-bound points hollow. Raises ImportError without
    matplotlib."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series = plot_series(doc)
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color") or ["C0"]
    for n, line in enumerate(series["lines"]):
        color = colors[n % len(colors)]
        width, size = (3.0, 6) if line["winner"] else (1.3, 4)
        label = line["label"] + (" (winner)" if line["winner"] else "")
        for ax, key in ((axes[0], "decode"), (axes[1], "aggregate")):
            ys = [float("nan") if v is None else v for v in line[key]]
            ax.plot(line["levels"], ys, color=color, linewidth=width, label=label)
            _plot_points(ax, line["levels"], line[key], line["queue_bound"], color, size)
    ticks = levels_of(doc)
    for ax, title in ((axes[0], "per-request decode tok/s"), (axes[1], "aggregate output tok/s")):
        ax.set_xscale("log", base=2)
        if ticks:
            ax.set_xticks(ticks)
            ax.set_xticklabels([str(c) for c in ticks])
            ax.minorticks_off()
        ax.set_xlabel("concurrency")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    if series["lines"]:
        axes[1].legend(title="candidate", fontsize=8)
    depth = series["depth"]
    steps = set()
    for n, (c, points) in enumerate(sorted(depth["levels"].items())):
        color = colors[n % len(colors)]
        xs = [p[0] for p in points]
        steps.update(xs)
        axes[2].plot(xs, [p[1] for p in points], color=color, linewidth=1.3, label="C=%d" % c)
        _plot_points(axes[2], xs, [p[1] for p in points], [p[2] for p in points], color, 5)
    if steps:
        axes[2].set_xticks(sorted(steps))
        axes[2].legend(title="level (hollow: queue-bound)", fontsize=8)
    axes[2].set_xlabel("speculative steps")
    axes[2].set_title(depth["title"])
    axes[2].grid(True, alpha=0.3)
    fig.suptitle("MTP tuning %s on %s: objective %s" % (doc.get("run", ""), doc.get("host", ""),
                                                        (doc.get("settings") or {}).get("objective", "")))
    fig.tight_layout()
    return fig


def render_png(doc, path):
    """Draw plot.png (plot_figure).

    Returns None on success, or a warning string when matplotlib is missing or fails: the PNG is
    a convenience and never fails a run.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # ImportError, or a broken backend
        return "PNG plot skipped: matplotlib is not importable on the controller (%s)" % exc
    try:
        fig = plot_figure(doc)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
    except Exception as exc:
        return "PNG plot skipped: matplotlib failed (%s)" % exc
    atomic_write(path, buf.getvalue())
    return None


# ---------------------------------------------------------------------------- files

def atomic_write(path, data):
    """Write via a temporary file in the same directory + fsync + os.replace, so a reader (or a
    run killed mid-write) sees the old file or the new one, never half of one."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # some filesystems refuse fsync on a directory; the rename is still atomic
        pass


def stamp(now=None):
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now if now is not None else time.time()))


def set_aside(path, tag, now=None):
    """Rename ``path`` to ``path.<tag>-<UTC stamp>`` (never overwriting) and return the new name."""
    base = "%s.%s-%s" % (path, tag, stamp(now))
    target, n = base, 1
    while os.path.exists(target):
        n += 1
        target = "%s.%d" % (base, n)
    os.rename(path, target)
    return target


def ensure_dir(directory):
    """Create the results directory and prove it is writable (before the first restart)."""
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        fd, probe = tempfile.mkstemp(prefix=".write-test.", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ReportError("results directory %s is not writable on the controller (%s); set "
                          "mtp_tune_results_dir to a writable path" % (directory, exc.strerror or exc))


def load(directory, force=False, fresh=False, now=None):
    """Load ``directory/results.json`` for a resume.

    Returns ``{"doc": dict|None, "set_aside": path|None, "message": str}``:
    - no file: doc None;
    - ``force``: the old file is set aside as ``results.json.prev-<ts>`` (kept) and doc is None;
    - corrupt file: it is set aside as ``results.json.corrupt-<ts>``; with ``fresh`` doc is None,
      otherwise ReportError says what happened and how to go on.
    """
    ensure_dir(directory)
    path = os.path.join(directory, RESULTS_JSON)
    if not os.path.exists(path):
        return {"doc": None, "set_aside": None, "message": "no earlier results in %s" % directory}
    if force:
        moved = set_aside(path, "prev", now)
        return {"doc": None, "set_aside": moved,
                "message": "mtp_tune_force: earlier results kept as %s, measuring every candidate again" % moved}
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
        doc = parse(text, path)
    except (ReportError, UnicodeDecodeError) as exc:
        moved = set_aside(path, "corrupt", now)
        if fresh:
            return {"doc": None, "set_aside": moved,
                    "message": "earlier results were unusable (%s); kept as %s, starting afresh" % (exc, moved)}
        raise ReportError("%s; it was kept aside as %s (nothing deleted). Inspect or repair it and move it "
                          "back to resume, or re-run with mtp_tune_fresh=true to start a new run" % (exc, moved))
    except (IOError, OSError) as exc:
        raise ReportError("cannot read %s: %s" % (path, exc))
    return {"doc": doc, "set_aside": None,
            "message": "resuming: %d earlier attempts in %s" % (len(doc.get("attempts") or []), path)}


def finalize(doc):
    """The document as stored: per-run flags dropped, totals recomputed from the attempts.

    Only facts about attempts are kept (``resumed`` is a property of today's run, not of the
    attempt), so that a re-run that launches nothing produces the very same file.
    """
    out = dict(doc)
    atts = []
    for att in doc.get("attempts") or []:
        att = dict(att)
        att.pop("resumed", None)
        atts.append(att)
    out["attempts"] = atts
    out.pop("comparison", None)
    launched = [a for a in atts if a.get("status") in ("ok", "failed")]

    def total(key):
        vals = [_num((a.get("timings") or {}).get(key)) for a in launched]
        return round(sum(v for v in vals if v is not None), 3)

    out["stats"] = {"launches": len(launched), "failed_launches": sum(1 for a in launched if a["status"] == "failed"),
                    "candidates": len(set(attempt_key(a) for a in atts)),
                    "wall_s": total("wall_s"), "launch_s": total("launch_s"), "bench_s": total("bench_s")}
    return out


def _same_content(old, new):
    a, b = dict(old), dict(new)
    a.pop("updated", None)
    b.pop("updated", None)
    return json.loads(render_json(a)) == json.loads(render_json(b))


def comparison(directory, doc):
    """Rows (strategy, objective, winner, launches, wall time) of this run and of the other runs
    for the same host next to it (``<results_dir>/<run>/<host>``), to compare strategies."""
    directory = os.path.abspath(directory)
    host_dir = os.path.basename(directory)
    runs_root = os.path.dirname(os.path.dirname(directory))
    this_run = os.path.basename(os.path.dirname(directory))
    rows = []

    def row(run, d):
        s = d.get("settings") or {}
        st = d.get("stats") or {}
        w = (d.get("winner") or {}).get("key") or "-"
        return {"run": run, "strategy": s.get("strategy"), "objective": s.get("objective"), "level": s.get("level"),
                "winner": w, "launches": st.get("launches"), "wall_s": st.get("wall_s")}

    try:
        names = sorted(os.listdir(runs_root))
    except OSError:
        names = []
    for run in names:
        if run == this_run:
            rows.append(row(run, doc))
            continue
        path = os.path.join(runs_root, run, host_dir, RESULTS_JSON)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as fh:
                other = parse(fh.read().decode("utf-8"), path)
        except (ReportError, OSError, UnicodeDecodeError):
            continue
        rows.append(row(run, other))
    if not any(r["run"] == this_run for r in rows):
        rows.append(row(this_run, doc))
    return rows


def _write_if_changed(path, data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        with open(path, "rb") as fh:
            if fh.read() == data:
                return False
    except (IOError, OSError):
        pass
    atomic_write(path, data)
    return True


def write(directory, doc, plot=True, compare=True, now=None):
    """Write results.json (first: it is the source of truth), results.csv, summary.md, plot.png.

    A file is rewritten only when its content changes (``updated`` moves only then), so a
    re-run that measures nothing new changes nothing.  Returns ``{"files", "written",
    "changed", "warnings", "doc"}``.
    """
    validate(doc, "results to write")
    ensure_dir(directory)
    doc = finalize(doc)
    json_path = os.path.join(directory, RESULTS_JSON)
    old = None
    if os.path.isfile(json_path):
        try:
            with open(json_path, "rb") as fh:
                old = json.loads(fh.read().decode("utf-8"))
        except (ValueError, OSError, UnicodeDecodeError):
            old = None
    json_changed = not (isinstance(old, dict) and _same_content(old, doc))
    doc["updated"] = (old or {}).get("updated") if not json_changed else \
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now if now is not None else time.time()))
    view = dict(doc)
    if compare:
        rows = comparison(directory, doc)
        if len(rows) > 1:
            view["comparison"] = rows
    files, written, warnings = [], [], []
    for name, text in ((RESULTS_JSON, render_json(doc)), (RESULTS_CSV, render_csv(doc)),
                       (SUMMARY_MD, render_summary(view, directory))):
        path = os.path.join(directory, name)
        if _write_if_changed(path, text):
            written.append(path)
        files.append(path)
    if plot and any(a.get("status") == "ok" for a in doc.get("attempts") or []):
        png = os.path.join(directory, PLOT_PNG)
        if json_changed or not os.path.exists(png):
            warn = render_png(doc, png)
            if warn:
                warnings.append(warn)
            else:
                written.append(png)
        if os.path.exists(png):
            files.append(png)
    return {"files": files, "written": written, "changed": bool(written), "warnings": warnings, "doc": doc}
