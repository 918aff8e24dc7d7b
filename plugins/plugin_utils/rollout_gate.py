# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Whether a node's new setting held during the fleet rollout, as pure functions.

rollout_smoke_check
    whether a short ``sglang_bench`` run clears the floors (absolute, or within X% of the tuned figure).
rollout_budget
    whether the fleet's failure budget (``rollout_max_fail_percentage``) is spent.
rollout_unit_state / rollout_unit_steady
    a node's unit as it records itself (``sglang_node_info``), and whether it held through the
    smoke bench (no stop, no restart by systemd or its watchdog).
rollout_failed_record
    a failed node's outcome and what it serves after the rollback.
rollout_start_failure / rollout_failure
    what a failed node's record says went wrong: its start (the service role's result), else the
    smoke bench below a floor, else the failed task of its stage.
rollout_stop_reason
    why the rollout stops before a batch: a node that could not be brought back, or the budget.

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

Controller-side library of plugins/filter/rollout.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import as_number as _num
from ansible_collections.blackwell.sglang.plugins.plugin_utils.rollout_setting import (
    AnsibleFilterError, _conc_key, _figures, _int, _opt_num)

OUTCOMES = ("updated", "unchanged", "would_update", "rolled_back", "failed", "rollback_failed",
            "unreachable", "skipped", "in_progress")
# Outcomes that spend the failure budget: the new setting was tried and did not hold.
FAILED_OUTCOMES = ("rolled_back", "failed", "rollback_failed")
# The node is at the requested setting (or would be, in check mode).
DONE_OUTCOMES = ("updated", "unchanged")


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


# How long a failure's reason may be in a record and the summary.
REASON_CHARS = 300


def _truncate(text, length=REASON_CHARS, end="...", leeway=5):
    """Jinja's truncate filter (jinja2/filters.py do_truncate, default policy truncate.leeway 5): cut
    at the last whole word before ``length`` and end with ``end``, unless only ``leeway`` over."""
    text = str(text)
    if len(text) <= length + leeway:
        return text
    return text[:length - len(end)].rsplit(" ", 1)[0] + end


def rollout_start_failure(result, journal_lines=10):
    """What went wrong when a node's new setting did not start: ``{}`` when the service role's
    result (the fact sglang_service_result) says the server is ready, else its ``failure_class``
    (``unknown`` when it names none), the ``reason`` (the journal's failure line, else the
    result's message), its ``hint`` and the last ``journal_lines`` lines of the journal."""
    result = result or {}
    if result.get("ready"):
        return {}
    lines = _int(journal_lines, "rollout_journal_lines")
    tail = list(result.get("journal_tail") or [])
    return {"failure_class": result.get("failure_class") or "unknown",
            "reason": _truncate(result.get("failure_line") or result.get("msg") or "the server did not become ready"),
            "hint": result.get("hint"),
            "journal_tail": tail[-lines:]}


def rollout_failure(failure, stage, smoke=None, error="task failed"):
    """What a failed node's record says went wrong: ``failure`` when its stage described it already
    (a start that did not become ready, a unit that did not hold), else ``below_floor`` with the
    smoke bench's reasons when that bench failed, else ``<stage>_error`` with the failed task's
    message ``error``."""
    if failure:
        return failure
    if stage == "smoke" and smoke and not smoke.get("ok"):
        return {"failure_class": "below_floor", "reason": "; ".join(str(r) for r in smoke.get("reasons") or [])}
    return {"failure_class": "%s_error" % (stage,), "reason": _truncate(error)}


def rollout_stop_reason(budget, down=None, max_fail_percentage=None):
    """Why the rollout stops before a batch: the nodes ``down`` (left without a server by a failed
    rollback), else the failure ``budget`` (rollout_budget's) spent."""
    if down:
        return "a node could not be brought back (%s)" % ", ".join(str(h) for h in down)
    budget = budget or {}
    return "failure budget spent: %s of %s nodes failed (%s), max_fail_percentage %s" % (
        budget.get("failed"), budget.get("total"), ", ".join(str(h) for h in budget.get("failed_hosts") or []),
        max_fail_percentage)
