# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""The record of one launch as results.json keeps it (mtp_tune_attempt): the one place its shape
is written.  Controller-side library of plugins/filter/mtp_tune.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import as_number as _num
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_node import node_fault_of
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_numerics import mtp_tune_greedy_compare
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import AnsibleFilterError
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def _numerics(plan, greedy):
    """The greedy check's verdict on a launch with a lever that changes numerics (None without one):
    no reference or no outputs is no check, and an unchecked lever is not adopted."""
    if not isinstance(plan, dict) or not plan.get("levers"):
        return None
    levers = list(plan["levers"])
    if plan.get("passed"):
        return {"checked": True, "ok": True, "differ": 0, "of": None, "levers": levers, "reference_key": plan["passed"],
                "why": "passed the greedy check at %s in this run" % plan["passed"]}
    if greedy is None or not plan.get("reference"):
        return {"checked": False, "ok": False, "differ": None, "of": None, "levers": levers,
                "why": "no greedy outputs to compare" if greedy is None else "no launch without the lever kept its outputs"}
    out = dict(mtp_tune_greedy_compare(plan["reference"], greedy))
    out["levers"] = levers
    out["reference_key"] = plan.get("reference_key")
    return out


def mtp_tune_attempt(launch):
    """The record of one launch as results.json keeps it: the one place its shape is written.

    ``launch`` holds what the role knows after a candidate: ``next`` (mtp_tune_next's or
    mtp_tune_complete's choice), ``run`` (the run id), ``workload`` (the fingerprint), ``ready``
    (the unit came up), ``wait`` (sglang_service_wait's result, {} when it did not run), ``bench``
    (sglang_bench's result, {} or skipped when the unit never came up), ``cap`` (mtp_tune_capped),
    ``judged_floor`` (the fit ladder's), ``started`` (ISO time), ``launch_s`` and ``wall_s``; with a
    run that may use a lever that changes numerics, ``numerics_plan`` (mtp_tune_numerics_plan) and
    ``greedy`` (sglang_greedy's outputs, kept as the reference for later launches); the launch's
    ``numerics`` is mtp_tune_greedy_compare's verdict for a launch with such a lever.

    ``status`` is ok when the unit came up, the benchmark ran and SGLang did not cap the running
    requests below the judged floor; otherwise ``failure_class`` says which: the service wait's
    class (``unknown`` when it had none), ``capped`` or ``bench_failed``, and ``failure_line``
    the line that says it (``numerics`` when the greedy check refused a lever); ``running_cap`` the
    running-request limit the server ran with and ``pool`` its state pool as the start logged it
    (sglang_service_wait's ``pool``); ``port_holders`` the processes holding the port (port_in_use), and
    ``node_fault`` (mtp_node.node_fault_of: class, cause, line, holders) when the failure is the
    node's, not the setting's, else None. ``metrics`` maps each concurrency level (a string) to its figures:
    every level on success, and on a failed benchmark the levels it did finish. A launch of a per-load
    schedule (``speculative_adaptive`` in its overrides) keeps ``schedule`` (``tuned`` or ``default``,
    the choice's) and ``schedule_config`` (the config, canonical; None for SGLang's built-in one).
    """
    if not isinstance(launch, dict) or not isinstance(launch.get("next"), dict):
        raise AnsibleFilterError("mtp_tune_attempt needs a dict with the launch's 'next' choice, got %r" % (launch,))
    nxt = launch["next"]
    wait = launch.get("wait") if isinstance(launch.get("wait"), dict) else {}
    bench = launch.get("bench") if isinstance(launch.get("bench"), dict) else {}
    ready = _truthy(launch.get("ready"))
    cap = launch.get("cap")
    if cap in ("", "None"):
        cap = None
    greedy = launch.get("greedy") if isinstance(launch.get("greedy"), list) else None
    numerics = _numerics(launch.get("numerics_plan"), greedy) if ready and not _truthy(bench.get("failed", True)) else None
    refused = numerics is not None and not numerics.get("ok")
    ok = ready and not _truthy(bench.get("failed", True)) and cap is None and not refused
    if ok:
        failure_class = failure_line = None
    elif not ready:
        failure_class, failure_line = wait.get("failure_class") or "unknown", wait.get("failure_line")
    elif cap is not None:
        failure_class = "capped"
        failure_line = ("SGLang capped max_running_requests to %s, below the floor of %s (the judged concurrency or "
                        "mtp_tune_fit_mrr_floor; mtp_tune_fit_allow_capped=true accepts it)"
                        % (cap, launch.get("judged_floor")))
    elif refused:
        failure_class = "numerics"
        failure_line = (("%s of %s greedy prompts gave other tokens than without %s: the lever is refused"
                         % (numerics.get("differ"), numerics.get("of"), ", ".join(numerics["levers"])))
                        if numerics.get("checked") else "%s not checked (%s): the lever is refused"
                        % (", ".join(numerics["levers"]), numerics.get("why")))
    else:
        failure_class, failure_line = "bench_failed", bench.get("msg")
    levels = bench.get("levels") or []
    if ok:
        metrics = bench.get("by_concurrency")
    else:
        metrics = dict((str(lv.get("concurrency")), lv) for lv in levels if isinstance(lv, dict))
    launch_s = _num(launch.get("launch_s"))
    # a schedule launch names its own key (mtp_schedule.attempt_key): never ranked as its start candidate
    out = {"key": nxt.get("key") or nxt["candidate"]["key"], "candidate": nxt["candidate"], "overrides": nxt.get("overrides") or {},
           "fit_rung": nxt.get("fit_rung"), "reason": nxt.get("reason"), "run": launch.get("run"),
           "workload": launch.get("workload"), "status": "ok" if ok else "failed",
           "failure_class": failure_class, "failure_line": failure_line,
           "hint": None if ready else wait.get("hint"),
           "journal_tail": [] if ready else (wait.get("journal_tail") or []),
           "metrics": metrics or {}, "bench_warnings": bench.get("bench_warnings") or [],
           "server": bench.get("server"),
           "timings": {"started": launch.get("started"), "launch_s": launch_s, "wait_s": wait.get("seconds"),
                       "bench_s": bench.get("duration_s"), "wall_s": _num(launch.get("wall_s"))}}
    out["port_holders"] = [] if ready else [h for h in (wait.get("port_holders") or []) if isinstance(h, dict)]
    out["node_fault"] = node_fault_of(out)
    # What bounds the running requests (the hybrid state pool's cap, or a limit asked for): a level
    # above it queues. The scheduler's own figure when the benchmark read it, else the start's log.
    pool = wait.get("pool") if isinstance(wait.get("pool"), dict) else {}
    server = bench.get("server") if isinstance(bench.get("server"), dict) else {}
    running_cap = server.get("effective_max_running_requests")
    if running_cap in (None, ""):
        running_cap = pool.get("max_running_requests")
    out["running_cap"] = None if running_cap in (None, "") else int(running_cap)
    out["pool"] = pool
    out["numerics"] = numerics
    if greedy is not None:
        out["greedy"] = greedy
    # A per-load schedule's launch: which one (tuned or SGLang's default) and its config in the one
    # form the node's record and the file name use (None for the release's built-in schedule).
    overrides = out["overrides"]
    if _truthy(overrides.get("speculative_adaptive")):
        out["schedule"] = nxt.get("schedule") or ("tuned" if spec_schedule.canonical(
            overrides.get("speculative_adaptive_config")) is not None else "default")
        out["schedule_config"] = spec_schedule.canonical(overrides.get("speculative_adaptive_config"))
    # a pool's launch (mtp_tune_pool_next) says which node ran it, in which round
    for field in ("node", "round"):
        if nxt.get(field) is not None:
            out[field] = nxt[field]
    return out
