# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Decisions of the fleet rollout (role ``rollout``, playbook ``rollout.yml``) as pure functions.

The role only moves data: render the unit, restart, wait, benchmark, roll back. Everything it has
to decide is here so that it can be tested without a fleet:

rollout_requested
    the setting to roll out, from the operator's extra vars or from a tuning run's winner.
rollout_tuned_setting
    the winner of an ``mtp_tune`` run, read from the text of one or more ``results.json``.
rollout_unit_settings
    what a rendered (or hand-written) unit runs, read back from its text.
rollout_smoke_check
    whether a short ``sglang_bench`` run clears the floors (absolute, or within X% of the tuned figure).
rollout_budget
    whether the fleet's failure budget (``rollout_max_fail_percentage``) is spent.
rollout_unit_state / rollout_unit_steady
    a node's unit as it records itself (``sglang_node_info``), and whether it held through the
    smoke bench (no stop, no restart by systemd or its watchdog).
rollout_summary / rollout_summary_markdown
    the fleet summary written on the controller.

Outcomes of a node (``OUTCOMES``)::

    updated          new unit, ready, smoke bench passed
    unchanged        the unit already had the setting; serving, smoke bench passed
    would_update     check mode: the unit would change (nothing touched)
    rolled_back      new setting failed (start or smoke bench); previous unit restored and serving
    failed           the node failed and was not rolled back (no previous unit, or the unit did
                     not change so there was nothing to roll back to); see ``serving``
    rollback_failed  new setting failed and the previous unit did not come back either
    unreachable      the node did not answer when its turn came; nothing was touched
    skipped          the failure budget was spent before its batch; nothing was touched
    in_progress      its turn started but no outcome was recorded (run interrupted)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re
import shlex

from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import as_number as _num, render_json
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only for running the pure functions without ansible
    class AnsibleFilterError(Exception):
        pass


SCHEMA = 1
OUTCOMES = ("updated", "unchanged", "would_update", "rolled_back", "failed", "rollback_failed",
            "unreachable", "skipped", "in_progress")
# Outcomes that spend the failure budget: the new setting was tried and did not hold.
FAILED_OUTCOMES = ("rolled_back", "failed", "rollback_failed")
# The node is at the requested setting (or would be, in check mode).
DONE_OUTCOMES = ("updated", "unchanged")

# What the summary keeps of the run's plan.
RUN_KEYS = ("run_id", "started", "finished", "serial", "summary_dir", "in_progress")

SPEC_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
             "speculative_num_draft_tokens")
# Overrides a tuning winner may carry (the fit ladder's smaller CUDA graphs / fewer requests, the
# cap levers of a hybrid model's state pool, and SGLang's per-load schedule: its switch and the
# schedule itself); the service role records each of them on the node. A key the winner does not
# carry is not given: the node keeps what its record says.
OVERRIDE_KEYS = ("cuda_graph_max_bs", "max_running_requests", "mamba_full_memory_ratio", "max_mamba_cache_size",
                 "enable_linear_replayssm_spec", "speculative_adaptive", "speculative_adaptive_config")
# Overrides that are not whole numbers >= 1: a ratio > 0, store_true switches and the schedule.
_FLOAT_OVERRIDES = ("mamba_full_memory_ratio",)
_BOOL_OVERRIDES = ("enable_linear_replayssm_spec", "speculative_adaptive")
_SCHEDULE = "speculative_adaptive_config"

_SETTINGS_LINE = re.compile(r"^#\s*sglang-settings:\s*(\{.*\})\s*$", re.M)
# Flags of a hand-written unit (SGLang releases before and after the 0.5.23 renames).
_FLAG_KEYS = {
    "--speculative-algorithm": "speculative_algorithm",
    "--speculative-num-steps": "speculative_num_steps",
    "--speculative-eagle-topk": "speculative_eagle_topk",
    "--speculative-num-draft-tokens": "speculative_num_draft_tokens",
    "--tp-size": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--tp": "tp_size",
    "--cuda-graph-max-bs": "cuda_graph_max_bs",
    "--cuda-graph-max-bs-decode": "cuda_graph_max_bs",
    "--max-running-requests": "max_running_requests",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--mem-fraction-static": "mem_fraction_static",
    "--mamba-full-memory-ratio": "mamba_full_memory_ratio",
    "--max-mamba-cache-size": "max_mamba_cache_size",
    "--enable-linear-replayssm-spec": "enable_linear_replayssm_spec",
    "--speculative-adaptive": "speculative_adaptive",
    # Only the path: the schedule in it is not read from a hand-written unit, so it never counts as
    # the schedule a rollout asks for.
    "--speculative-adaptive-config": "speculative_adaptive_config_file",
}
# Bare switches (store_true): present = on, they take no value word.
_SWITCH_KEYS = ("enable_linear_replayssm_spec", "speculative_adaptive")
# Flags whose value is a float in SGLang's parser.
_FLOAT_KEYS = ("mamba_full_memory_ratio",)


# --------------------------------------------------------------------------- helpers

def _set(value):
    return value is not None and not (isinstance(value, str) and value.strip() in ("", "None", "null"))


def _int(value, what, low=None):
    """Strict integer; extra vars arrive as strings, YAML booleans are refused."""
    if isinstance(value, bool):
        raise AnsibleFilterError("%s must be an integer, got %r" % (what, value))
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and re.match(r"^\s*[+-]?[0-9]+\s*$", value):
        value = int(value)
    if not isinstance(value, int):
        raise AnsibleFilterError("%s must be an integer, got %r" % (what, value))
    if low is not None and value < low:
        raise AnsibleFilterError("%s must be >= %d, got %d" % (what, low, value))
    return value


def _opt_num(value, what, low=0.0):
    """Optional non-negative number (None/'' = not set)."""
    if not _set(value):
        return None
    out = _num(value)
    if out is None or out < low:
        raise AnsibleFilterError("%s must be a number >= %s, got %r" % (what, low, value))
    return out


def _override(key, value):
    """One override of a tuning winner, checked and in the form the service role renders."""
    if key == _SCHEDULE:
        problems = spec_schedule.problems(value, key)
        if problems:
            raise AnsibleFilterError("the winner's schedule is malformed: " + "; ".join(problems))
        canon = spec_schedule.canonical(value)
        return {} if canon is None else canon  # {}: SGLang's built-in schedule, stated
    if key in _BOOL_OVERRIDES:
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
            value = value.strip().lower() in ("true", "yes", "1")
        if not isinstance(value, bool):
            raise AnsibleFilterError("%s must be true or false, got %r" % (key, value))
        return value
    if key in _FLOAT_OVERRIDES:
        out = _num(value)
        if out is None or out <= 0:
            raise AnsibleFilterError("%s must be a number > 0, got %r" % (key, value))
        return float(out)
    return _int(value, key, 1)


def _same_override(key, current, wanted):
    """Whether a unit's value of an override is the wanted one (off and unset are one setting)."""
    if key in _BOOL_OVERRIDES:
        return bool(current) == bool(wanted)
    if key == _SCHEDULE:
        return spec_schedule.canonical(current) == spec_schedule.canonical(wanted)
    if isinstance(current, (int, float)) and isinstance(wanted, (int, float)) \
            and not isinstance(current, bool) and not isinstance(wanted, bool):
        return float(current) == float(wanted)
    return current == wanted


def _conc_key(value):
    return str(_int(value, "concurrency", 1))


def setting_label(setting):
    """Short human label: 'steps=4 topk=1 draft=5 [cuda_graph_max_bs=64]'."""
    if not setting:
        return "-"
    if setting.get("speculative_algorithm") in (None, "") and setting.get("speculative_num_steps") is None:
        head = "no speculation"
    else:
        head = "steps=%s topk=%s draft=%s" % (
            setting.get("speculative_num_steps"), setting.get("speculative_eagle_topk"),
            setting.get("speculative_num_draft_tokens"))
    extra = ["%s=%s" % (k, spec_schedule.label(setting[k]) if k == _SCHEDULE else setting[k])
             for k in OVERRIDE_KEYS if setting.get(k) is not None]
    return head + (" [%s]" % ", ".join(extra) if extra else "")


# --------------------------------------------------------------------------- what to roll out

def rollout_requested(steps=None, topk=None, draft_tokens=None, tuned=None):
    """The setting to roll out, validated, in the service role's vocabulary.

    Either ``steps`` (optionally ``topk`` / ``draft_tokens``, from ``-e sglang_speculative_*``) or
    ``tuned`` (the result of :func:`rollout_tuned_setting`, from ``-e mtp_tune_from=...``), not
    both: two sources for one number is how the wrong one gets rolled out.

    Returns ``{"speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "overrides": {...}, "source": "extra_vars"|"mtp_tune", "tuned": {C: figures}|None,
    "label"}``. ``draft_tokens`` is derived as steps + 1 for topk 1 (what SGLang forces anyway).
    """
    manual = any(_set(v) for v in (steps, topk, draft_tokens))
    if manual and tuned:
        raise AnsibleFilterError(
            "give either sglang_speculative_num_steps (and _eagle_topk/_num_draft_tokens) or mtp_tune_from, "
            "not both")
    if not manual and not tuned:
        raise AnsibleFilterError(
            "nothing to roll out: pass -e sglang_speculative_num_steps=N (optionally _eagle_topk, "
            "_num_draft_tokens) or -e mtp_tune_from=<results dir of a tune_mtp.yml run>")
    if tuned:
        steps, topk, draft_tokens = tuned.get("steps"), tuned.get("topk"), tuned.get("draft_tokens")
        overrides = dict((k, v) for k, v in (tuned.get("overrides") or {}).items() if k in OVERRIDE_KEYS)
        source, figures = "mtp_tune", tuned.get("figures") or {}
    else:
        if not _set(steps):
            raise AnsibleFilterError("sglang_speculative_num_steps is required when _eagle_topk or "
                                     "_num_draft_tokens is given")
        overrides, source, figures = {}, "extra_vars", None
    steps = _int(steps, "sglang_speculative_num_steps", 1)
    topk = _int(topk, "sglang_speculative_eagle_topk", 1) if _set(topk) else 1
    if _set(draft_tokens):
        draft = _int(draft_tokens, "sglang_speculative_num_draft_tokens", 1)
    elif topk == 1:
        draft = steps + 1
    else:
        raise AnsibleFilterError("sglang_speculative_num_draft_tokens is required when eagle_topk > 1 "
                                 "(it cannot be derived from steps)")
    if topk == 1 and draft != steps + 1:
        raise AnsibleFilterError(
            "with eagle_topk 1 the draft tokens are steps + 1 (%d), got %d: SGLang would silently "
            "change it" % (steps + 1, draft))
    for key, value in overrides.items():
        if value is not None:
            overrides[key] = _override(key, value)
    out = {
        "speculative_num_steps": steps,
        "speculative_eagle_topk": topk,
        "speculative_num_draft_tokens": draft,
        "overrides": overrides,
        "source": source,
        "tuned": figures,
    }
    if tuned:
        out["tuned_from"] = {"path": tuned.get("path"), "host": tuned.get("host"), "run": tuned.get("run"),
                             "key": tuned.get("key"), "decided_by": tuned.get("decided_by"),
                             "time_scale": tuned.get("time_scale")}
    label = dict(out)
    label.update(overrides)
    out["label"] = setting_label(label)
    return out


def _winning_attempt(doc, winner):
    key, overrides = winner.get("key"), winner.get("overrides") or {}
    found = None
    for att in doc.get("attempts") or []:
        if not isinstance(att, dict) or att.get("status") != "ok":
            continue
        cand = att.get("candidate") or {}
        att_key = att.get("key") or cand.get("key")
        if att_key == key and (att.get("overrides") or {}) == overrides:
            found = att  # a resumed run may hold several; the last one is the freshest
    return found


def _figures(level):
    level = level if isinstance(level, dict) else {}
    dec = level.get("decode_tps_per_request")
    dec = dec.get("mean") if isinstance(dec, dict) else level.get("decode_tps_mean")
    return {"decode_tps_mean": _num(dec), "output_throughput": _num(level.get("output_throughput")),
            "completed": _num(level.get("completed")), "failed": _num(level.get("failed"))}


def rollout_tuned_setting(docs, host=None, source=None):
    """The winner of a tuning run, from the text of its ``results.json`` file(s).

    ``docs``: a list of ``{"path": str, "text": str}`` or ``[path, text]`` pairs (one per host the
    run tuned). ``host``:
    take the winner of that tuned host only. Several hosts with different winners are refused
    unless ``host`` picks one: a rollout carries one setting.

    Returns ``{"steps", "topk", "draft_tokens", "key", "overrides", "figures": {C: {decode_tps_mean,
    output_throughput, ...}}, "path", "host", "run", "decided_by", "time_scale"}`` (``time_scale``:
    the tuning benchmark's, None when the file does not say).
    """
    if isinstance(docs, dict):
        docs = [docs]
    if not docs:
        raise AnsibleFilterError("mtp_tune_from: no results.json found in %s; point it at the results "
                                 "directory of a tune_mtp.yml run (or at one host's directory in it)"
                                 % (source or "the given path"))
    winners, problems = [], []
    for item in docs:
        if isinstance(item, (list, tuple)) and len(item) == 2:
            item = {"path": item[0], "text": item[1]}  # from a zip of paths and file contents
        path = item.get("path", "results.json")
        try:
            doc = json.loads(item.get("text") or "")
        except ValueError as exc:
            problems.append("%s is not valid JSON (%s)" % (path, exc))
            continue
        if not isinstance(doc, dict) or doc.get("schema") != 1 or not isinstance(doc.get("attempts"), list):
            problems.append("%s is not a tune_mtp.yml results file (schema 1 with attempts)" % path)
            continue
        if host and doc.get("host") != host:
            continue
        win = doc.get("winner")
        if not isinstance(win, dict) or not isinstance(win.get("candidate"), dict):
            problems.append("%s has no winner (no candidate served and benchmarked)" % path)
            continue
        cand = win["candidate"]
        try:
            steps = _int(cand.get("steps"), "%s winner steps" % path, 1)
            topk = _int(cand.get("topk"), "%s winner topk" % path, 1)
            draft = _int(cand.get("draft_tokens"), "%s winner draft_tokens" % path, 1)
        except AnsibleFilterError as exc:
            problems.append(str(exc))
            continue
        key = win.get("key") or cand.get("key") or "s%d-k%d-d%d" % (steps, topk, draft)
        overrides = dict((k, v) for k, v in (win.get("overrides") or {}).items() if v is not None)
        att = _winning_attempt(doc, dict(win, key=key))
        if isinstance(overrides.get(_SCHEDULE), dict):
            # one schedule, one spelling: hosts whose winners differ only in how it is written agree
            overrides[_SCHEDULE] = spec_schedule.canonical(overrides[_SCHEDULE]) or {}
        figures = dict((str(c), _figures(lvl)) for c, lvl in ((att or {}).get("metrics") or {}).items()
                       if str(c).isdigit())
        # The figures read in the tuning benchmark's time base; the smoke bench uses the same one.
        bench = (doc.get("settings") or {}).get("bench") or {}
        winners.append({"steps": steps, "topk": topk, "draft_tokens": draft, "key": key,
                        "overrides": overrides, "figures": figures, "path": path, "host": doc.get("host"),
                        "run": doc.get("run"), "decided_by": win.get("decided_by"),
                        "time_scale": _opt_num(bench.get("time_scale"), "%s bench time_scale" % path)})
    if not winners:
        why = "; ".join(problems) if problems else "no results file for host %s" % host
        raise AnsibleFilterError("mtp_tune_from: no usable winner (%s)" % why)
    distinct = {}
    for w in winners:
        distinct.setdefault((w["key"], json.dumps(w["overrides"], sort_keys=True)), []).append(w)
    if len(distinct) > 1:
        raise AnsibleFilterError(
            "mtp_tune_from holds different winners per host (%s); a rollout carries one setting: pick one "
            "with rollout_mtp_tune_host=<host> or point mtp_tune_from at that host's directory" %
            "; ".join("%s on %s" % (k[0], ", ".join(str(w["host"]) for w in ws)) for k, ws in sorted(distinct.items())))
    return winners[0]


def rollout_kind(hostvars, names):
    """One node's kind: the values of the host variables ``names`` as a 'name=value, ...' string.

    Nodes whose strings differ are of different kinds (another model, tp, GPU); a rollout only
    goes to one kind. Variables a host does not define read as 'unset'.
    """
    out = []
    for name in names or []:
        try:
            value = hostvars[name] if name in hostvars else "unset"
        except Exception:  # an undefined or broken template in the inventory reads as unset
            value = "unset"
        out.append("%s=%s" % (name, value))
    return ", ".join(out)


# --------------------------------------------------------------------------- reading a unit

def rollout_unit_settings(text):
    """What a unit runs, from its text (None when there is no unit).

    Units rendered by the service role carry a ``# sglang-settings: {json}`` comment: that is read
    first, as it does not depend on any release's flag names. A hand-written unit (the operator's
    own, before the collection took over) is read from its ExecStart flags instead.
    """
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    match = _SETTINGS_LINE.search(text)
    if match:
        try:
            out = json.loads(match.group(1))
        except ValueError:
            out = None
        if isinstance(out, dict):
            out["read_from"] = "settings_comment"
            return out
    # Hand-written unit: ExecStart may continue over backslash-newlines.
    joined = re.sub(r"\\\n", " ", text)
    exec_line = None
    for line in joined.splitlines():
        if line.strip().startswith("ExecStart="):
            exec_line = line.strip()[len("ExecStart="):].lstrip("-@:+!")
    if exec_line is None:
        return {"read_from": "unreadable"}
    try:
        words = shlex.split(exec_line)
    except ValueError:
        words = exec_line.split()
    out = dict((k, None) for k in SPEC_KEYS)
    i = 0
    while i < len(words):
        word = words[i]
        flag, _eq, inline = word.partition("=")
        key = _FLAG_KEYS.get(flag)
        if key in _SWITCH_KEYS:
            out[key] = True
        elif key:
            value = inline if _eq else (words[i + 1] if i + 1 < len(words) else None)
            if not _eq:
                i += 1
            if value is not None and re.match(r"^[0-9]+$", value):
                value = int(value)
            elif value is not None and key in _FLOAT_KEYS and _num(value) is not None:
                value = float(_num(value))
            out[key] = value
        i += 1
    if out.get("speculative_algorithm"):
        out["speculative_algorithm"] = str(out["speculative_algorithm"]).upper()
        if out.get("speculative_num_steps") is not None and out.get("speculative_eagle_topk") is None:
            out["speculative_eagle_topk"] = 1
        if (out.get("speculative_num_draft_tokens") is None and out.get("speculative_eagle_topk") == 1
                and isinstance(out.get("speculative_num_steps"), int)):
            out["speculative_num_draft_tokens"] = out["speculative_num_steps"] + 1
    out["read_from"] = "exec_start"
    return out


def rollout_at_setting(current, requested):
    """Whether a unit's settings (rollout_unit_settings) already match the requested setting."""
    if not current or not requested:
        return False
    for key in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
        if current.get(key) != requested.get(key):
            return False
    for key, value in (requested.get("overrides") or {}).items():
        if not _same_override(key, current.get(key), value):
            return False
    return True


# --------------------------------------------------------------------------- smoke bench

def rollout_smoke_check(bench, concurrency, min_tok_s=None, min_aggregate_tok_s=None, tuned=None,
                        max_regression_pct=None):
    """Whether a smoke bench clears its floors.

    ``bench``: ``sglang_bench``'s fact (levels keyed by concurrency string; a ``levels`` list is
    accepted too). ``concurrency``: the levels asked for; the first is the low one (C=1).

    Floors, each only when set:
    - ``min_tok_s``: per-request decode tok/s at the low level (the operator's "tok/s at C=1");
    - ``min_aggregate_tok_s``: aggregate output tok/s at the highest level;
    - ``tuned`` + ``max_regression_pct``: at every level the tuning run measured too, the same two
      figures may be at most X% below the tuned ones (the smoke bench is short, so X should cover
      its noise).
    Any failed request, or a level that is missing, fails the check.

    Returns ``{"ok", "reasons": [...], "checks": [{level, figure, value, floor, ok, basis}],
    "figures": {C: {decode_tps_mean, output_throughput, completed, failed}}}``.
    """
    levels = [_conc_key(c) for c in (concurrency or [])]
    if not levels:
        raise AnsibleFilterError("rollout_smoke_concurrency must list at least one level")
    min_tok_s = _opt_num(min_tok_s, "rollout_min_tok_s")
    min_agg = _opt_num(min_aggregate_tok_s, "rollout_min_aggregate_tok_s")
    regression = _opt_num(max_regression_pct, "rollout_max_regression_pct")
    if regression is not None and regression >= 100:
        raise AnsibleFilterError("rollout_max_regression_pct must be below 100, got %r" % max_regression_pct)
    bench = bench if isinstance(bench, dict) else {}
    by_c = dict((k, v) for k, v in bench.items() if str(k).isdigit())
    for lvl in bench.get("levels") or []:
        if isinstance(lvl, dict) and lvl.get("concurrency") is not None:
            by_c.setdefault(str(lvl["concurrency"]), lvl)
    figures, checks, reasons = {}, [], []
    for c in levels:
        if c not in by_c:
            reasons.append("level C=%s missing from the smoke bench" % c)
            continue
        fig = _figures(by_c[c])
        figures[c] = fig
        if fig["failed"]:
            reasons.append("C=%s: %d request(s) failed" % (c, int(fig["failed"])))
        if not fig["completed"]:
            reasons.append("C=%s: no request completed" % c)

    def check(level, figure, floor, basis):
        if floor is None or level not in figures:
            return
        value = figures[level][figure]
        ok = value is not None and value >= floor
        checks.append({"level": int(level), "figure": figure, "value": value, "floor": round(floor, 3),
                       "ok": ok, "basis": basis})
        if not ok:
            reasons.append("C=%s %s %s below the floor %.1f (%s)" % (
                level, figure, "n/a" if value is None else "%.1f" % value, floor, basis))

    low, high = levels[0], levels[-1]
    check(low, "decode_tps_mean", min_tok_s, "rollout_min_tok_s")
    check(high, "output_throughput", min_agg, "rollout_min_aggregate_tok_s")
    if tuned and regression is not None:
        keep = 1.0 - regression / 100.0
        for c in levels:
            ref = (tuned or {}).get(c) or {}
            for figure in ("decode_tps_mean", "output_throughput"):
                if c == low and figure == "output_throughput" and len(levels) > 1:
                    continue  # at C=1 both figures say the same; the per-request one is the headline
                if c != low and figure == "decode_tps_mean":
                    continue  # at high C the aggregate is what the operator tuned for
                ref_value = _num(ref.get(figure))
                if ref_value:
                    check(c, figure, ref_value * keep, "within %g%% of the tuned %.1f" % (regression, ref_value))
    return {"ok": not reasons, "reasons": reasons, "checks": checks, "figures": figures}


# --------------------------------------------------------------------------- failure budget

def rollout_budget(results, total, max_fail_percentage=0, count_unreachable=False):
    """Whether the fleet's failure budget is spent.

    The budget is a share of the whole fleet (every host the rollout targets), like Ansible's
    ``max_fail_percentage``: the rollout stops when failed / total x 100 is *greater* than it.
    0 stops at the first failure; 100 never stops. ``failed`` counts nodes whose new setting did
    not hold (rolled back, failed, rollback failed); unreachable nodes only with
    ``count_unreachable``, since the setting never reached them.

    Returns ``{"total", "failed", "allowed", "spent", "max_fail_percentage", "failed_hosts"}``.
    """
    total = _int(total, "number of hosts", 0)
    pct = _num(max_fail_percentage)
    if pct is None or pct < 0 or pct > 100:
        raise AnsibleFilterError("rollout_max_fail_percentage must be a number from 0 to 100, got %r"
                                 % (max_fail_percentage,))
    counted = FAILED_OUTCOMES + (("unreachable",) if count_unreachable else ())
    failed_hosts = sorted(r.get("host") for r in (results or []) if isinstance(r, dict)
                          and r.get("outcome") in counted)
    failed = len(failed_hosts)
    spent = total > 0 and failed * 100.0 > pct * total
    return {"total": total, "failed": failed, "allowed": int(math.floor(pct * total / 100.0 + 1e-9)),
            "spent": spent, "max_fail_percentage": pct, "failed_hosts": failed_hosts}


# --------------------------------------------------------------------------- summary

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


def rollout_unit_state(info):
    """A node's unit as the gate and the summary need it, from a sglang_node_info result.

    ``None`` (or a result without ``unit``) gives ``None``: the node could not be read.
    """
    if not isinstance(info, dict) or not isinstance(info.get("unit"), dict):
        return None
    unit = info["unit"]
    serving = info.get("serving") or {}
    failure = serving.get("last_failure") or {}
    watchdog = serving.get("watchdog") or {}
    try:
        restarts = int(unit.get("n_restarts") or serving.get("restarts") or 0)
    except (TypeError, ValueError):
        restarts = 0
    return {
        "active": unit.get("active_state") == "active",
        "active_state": unit.get("active_state"),
        "invocation_id": unit.get("invocation_id") or None,
        "ready": serving.get("ready"),
        "restarts": restarts,
        "start_limit_hit": bool(serving.get("start_limit_hit")),
        "last_failure_class": failure.get("class"),
        "last_failure_line": failure.get("line"),
        "last_failure_time": failure.get("time"),
        "watchdog_restarts": int(watchdog.get("restarts_total") or 0),
        "watchdog_gave_up": bool(watchdog.get("gave_up")),
    }


def rollout_unit_steady(ready, after):
    """Why the unit did not hold between two readings (empty when it did).

    ``ready``: the unit right after the service role saw tokens; ``after``: the same unit after
    the smoke bench. A unit that stopped, restarted by itself (systemd or its watchdog) or was
    started anew in between did not hold, even if it answers again by now.
    """
    if not ready or not after:
        return ""
    if not after.get("active"):
        return "the unit is %s after the smoke bench (it ran when the bench began)" % (
            after.get("active_state") or "not running")
    if after.get("restarts", 0) > ready.get("restarts", 0):
        return "the unit restarted %d time(s) during the smoke bench%s" % (
            after["restarts"] - ready.get("restarts", 0),
            (" (last failure: %s)" % after["last_failure_class"]) if after.get("last_failure_class") else "")
    if after.get("watchdog_restarts", 0) > ready.get("watchdog_restarts", 0):
        return "the wedge watchdog restarted the unit during the smoke bench"
    if ready.get("invocation_id") and after.get("invocation_id") and \
            ready["invocation_id"] != after["invocation_id"]:
        return "the unit was started anew during the smoke bench"
    return ""


def rollout_failed_record(record, action, stage, unit_changed, reason, service_result=None, unit_active=False,
                          rollback_error=None):
    """A failed node's record: ``outcome``, ``serving`` and what the rollback did, decided once.

    ``action`` is sglang_service_rollback_action's (restore / stop / none). A restore reads the
    restored unit's fate from ``service_result`` (the fact sglang_service_result), or from
    ``rollback_error`` when the rollback itself failed as a task. Without a restore the node still
    serves the new setting only where nothing changed it and the failure came after the server was
    up: a smoke bench below the floor, or a unit that was unsteady but is active again
    (``unit_active``); otherwise it serves nothing, and the reason says why there was no going back.
    """
    out = dict(record or {})
    if action == "restore":
        if rollback_error is not None:
            out.update({"outcome": "rollback_failed", "serving": "none",
                        "rollback": {"ready": False, "error": str(rollback_error)}})
            return out
        res = service_result or {}
        back = bool(res.get("rollback_ready"))
        out.update({"outcome": "rolled_back" if back else "rollback_failed", "serving": "old" if back else "none",
                    "rollback": {"ready": back, "failure_class": res.get("rollback_failure_class"),
                                 "journal_tail": list(res.get("rollback_journal_tail") or [])[-10:]}})
        return out
    up_before = stage == "smoke" or (stage == "steady" and bool(unit_active))
    out.update({"outcome": "failed", "serving": "new" if up_before and not unit_changed else "none",
                "reason": "%s; %s" % (reason, "no previous unit to roll back to" if unit_changed
                                      else "the unit already had this setting, nothing to roll back to")})
    return out


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


class FilterModule(object):
    """Rollout decisions (see the module docstring)."""

    def filters(self):
        return {
            "rollout_requested": rollout_requested,
            "rollout_tuned_setting": rollout_tuned_setting,
            "rollout_unit_settings": rollout_unit_settings,
            "rollout_smoke_check": rollout_smoke_check,
            "rollout_budget": rollout_budget,
            "rollout_summary": rollout_summary,
            "rollout_summary_markdown": rollout_summary_markdown,
            "rollout_summary_json": rollout_summary_json,
            "rollout_setting_label": setting_label,
            "rollout_unit_state": rollout_unit_state,
            "rollout_unit_steady": rollout_unit_steady,
            "rollout_failed_record": rollout_failed_record,
            "rollout_kind": rollout_kind,
        }
