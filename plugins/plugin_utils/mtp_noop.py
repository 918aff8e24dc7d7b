# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Whether a tuning run has nothing left to do: the earlier run of the same name finished under
the same workload and settings, converged the node on its winner, and the node still serves that
unit, ready.  Then a re-run says so and skips the loop (no launch, no converge, no report write);
anything else goes the normal way (resume, measure, converge).

Controller-side library of plugins/filter/mtp_resume.py; the role ``mtp_tune`` only reads the
node (tasks/noop.yml) and passes what it read.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json

from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import render_json
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_resume import mtp_tune_fingerprint_diff
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import mtp_tune_complete, mtp_tune_next
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import AnsibleFilterError
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_winner import mtp_tune_winner
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule

# Facts the service role and its wait module publish (outputs, not inputs of the unit: they come and
# go with what ran before in the play), and the API key, which never goes into a digest that is
# written to a report: a changed key is caught by the readiness probe instead (it sends the play's
# key, which the server only accepts when it is the node's).
INPUT_EXCLUDED = ("sglang_service_result", "sglang_service_names", "sglang_service_start", "sglang_service_wait",
                  "sglang_service_api_key")
# The node's record keys the winner sets (the setting; the overrides are compared key by key).
_RECORD_FIELDS = (("steps", "speculative_num_steps"), ("topk", "speculative_eagle_topk"),
                  ("draft_tokens", "speculative_num_draft_tokens"))
# The per-load schedule: compared as a whole, also where the winner has none (a static winner on a
# node whose record serves a schedule is not the winner).
_ADAPTIVE = ("speculative_adaptive", "speculative_adaptive_config")


def _canon(value):
    """One spelling of a value as results.json stores it (JSON, NaN as null, int keys as strings)."""
    return json.loads(render_json(value))


def mtp_tune_inputs_digest(variables):
    """sha256 of the play's service inputs (``{name: value}`` of the ``sglang_service_*``
    variables the play gives), the published facts and the API key left out: what the unit is
    rendered from besides the winner. Stored with the converge record; a re-run whose play gives
    other service variables converges again instead of skipping."""
    if not isinstance(variables, dict):
        raise AnsibleFilterError("mtp_tune_inputs_digest needs a dict of variable names and values, got %r" % (variables,))
    kept = dict((str(k), v) for k, v in variables.items() if str(k) not in INPUT_EXCLUDED)
    text = json.dumps(_canon(kept), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _same(a, b):
    return _canon(a) == _canon(b)


def _num_equal(a, b):
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b


def _record_reasons(record, winner, run_name):
    """Why the node's record (setting.json) does not name this run's winner; [] when it does."""
    if not isinstance(record, dict) or not isinstance(record.get("setting"), dict):
        return ["the node has no record of its setting (setting.json)"]
    setting, prov = record["setting"], record.get("provenance") or {}
    out = []
    if prov.get("by") != "mtp_tune" or prov.get("run") != run_name:
        out.append("the node's record names a setting chosen by %s run %s, not by this run"
                   % (prov.get("by") or "?", prov.get("run") or "-"))
    cand = winner.get("candidate") or {}
    for field, key in _RECORD_FIELDS:
        if not _num_equal(setting.get(key), cand.get(field)):
            out.append("the node's record has %s=%s, the winner %s" % (key, setting.get(key), cand.get(field)))
    overrides = winner.get("overrides") or {}
    for key, value in sorted(overrides.items()):
        if key not in _ADAPTIVE and value is not None and not _num_equal(setting.get(key), value):
            out.append("the node's record has %s=%s, the winner %s" % (key, setting.get(key), value))
    out.extend(_schedule_reasons(setting, overrides))
    return out


def _on(value):
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return value is True


def _schedule_reasons(setting, overrides):
    """Why the record's per-load schedule is not the winner's: on where the winner is static (or off
    where it is a schedule), or another schedule (compared in its canonical form: the record keeps
    that, the winner's comes from the search or a results file)."""
    want, have = _on(overrides.get("speculative_adaptive")), _on(setting.get("speculative_adaptive"))
    if want != have:
        return ["the node's record serves %s, the winner %s" % (
            "a per-load schedule" if have else "static steps", "is a per-load schedule" if want else "static steps")]
    if not want:
        return []
    wanted = spec_schedule.canonical(overrides.get("speculative_adaptive_config"))
    kept = spec_schedule.canonical(setting.get("speculative_adaptive_config"))
    if not _same(wanted, kept):
        return ["the node's record has the schedule %s, the winner %s" % (spec_schedule.label(kept), spec_schedule.label(wanted))]
    return []


def _results_reasons(results, run):
    """Why the results file does not say this run is complete under today's settings."""
    if not isinstance(results, dict):
        return ["no earlier results to stand on"]
    out = []
    runs = results.get("runs") or []
    last = runs[-1] if runs and isinstance(runs[-1], dict) else {}
    if last.get("state") != "finished":
        out.append("the last run did not finish (%s)" % (last.get("state") or "no run recorded"))
    if not _same(results.get("settings"), run.get("settings")):
        out.append("the tuning settings differ from the earlier run's (candidates, objective, levels, bench, service)")
    diff = mtp_tune_fingerprint_diff(results.get("workload"), run.get("workload"))
    if diff:
        out.append("the workload changed: %s" % "; ".join(diff))
    resume = run.get("resume") or {}
    if resume.get("mismatched"):
        out.append("some measurements were taken under another workload")
    if resume.get("retry"):
        out.append("failed candidates are to be tried again (%s)" % ", ".join(resume["retry"]))
    return out


def _search_reasons(results, run):
    """Why the search or the decision is not where the earlier run left it."""
    attempts = run.get("attempts") or []
    spec = run.get("spec")
    nxt = mtp_tune_next(attempts, run.get("candidates") or [], run.get("ladder"), spec)
    if nxt is None and not run.get("search_all_levels", True):
        nxt = mtp_tune_complete(attempts, spec)
    if nxt is not None:
        return ["the search would launch %s" % (nxt.get("label") or nxt["candidate"].get("key"))]
    stored = results.get("winner")
    winner = mtp_tune_winner(attempts, spec, stored, None, None)
    if not isinstance(stored, dict) or winner is None:
        return ["no winner recorded"]
    if winner["key"] != stored.get("key") or not _same(winner["overrides"], stored.get("overrides") or {}):
        return ["the measurements now pick %s, the results name %s" % (winner["key"], stored.get("key"))]
    return []


def _converge_reasons(results, run, node):
    """Why the node does not serve the converged, verified winner's unit as converge left it."""
    winner = results.get("winner") or {}
    conv = results.get("converge")
    if not isinstance(conv, dict):
        return ["the node was never converged on the winner"]
    out = []
    if conv.get("key") != winner.get("key"):
        out.append("the last converge was to %s, not the winner %s" % (conv.get("key"), winner.get("key")))
    if not (conv.get("verify") or {}).get("ok"):
        out.append("the converged server's smoke benchmark did not pass")
    if conv.get("unit") != run.get("unit_path"):
        out.append("the converge wrote %s, this run's unit is %s" % (conv.get("unit"), run.get("unit_path")))
    if not conv.get("unit_sha1"):
        out.append("the converge record has no checksum of the unit (written by an older version)")
    elif not node.get("unit_exists"):
        out.append("the unit %s is missing" % run.get("unit_path"))
    elif node.get("unit_sha1") != conv.get("unit_sha1"):
        out.append("the unit differs from the one converge wrote (edited or reverted)")
    if conv.get("inputs") != run.get("inputs"):
        out.append("the play's service variables differ from those the unit was converged with")
    out.extend(_record_reasons(node.get("record"), winner, run.get("run_name")))
    unit = node.get("unit") or {}
    if unit.get("active_state") != "active":
        out.append("the unit is %s" % (unit.get("active_state") or "not installed"))
    return out


def _figure(value):
    try:
        return "%.1f" % float(value)
    except (TypeError, ValueError):
        return "-"


def _describe(results, run):
    winner = results["winner"]
    cand, score = winner.get("candidate") or {}, winner.get("score") or {}
    overrides = winner.get("overrides") or {}
    over = dict((k, v) for k, v in sorted(overrides.items()) if v is not None and k not in _ADAPTIVE)
    if _on(overrides.get("speculative_adaptive")):
        over["schedule"] = spec_schedule.label(overrides.get("speculative_adaptive_config"))
    last = results["runs"][-1]
    return ("nothing to do: run %s finished %s under this workload and these settings, and the node serves its winner "
            "%s (steps %s, topk %s, %s draft tokens%s): %s %s at C=%s (%s), unit unchanged since converge, ready; "
            "report %s (mtp_tune_force=true measures again)"
            % (run.get("run_name"), last.get("ended") or last.get("started") or "-", winner.get("key"),
               cand.get("steps"), cand.get("topk"), cand.get("draft_tokens"),
               (", %s" % ", ".join("%s=%s" % kv for kv in over.items())) if over else "",
               (run.get("settings") or {}).get("objective"), _figure(score.get("value")), score.get("level"),
               winner.get("decided_by"), run.get("report")))


def mtp_tune_noop(results, run=None, node=None):
    """Whether this run is already complete, so the role skips the loop.

    ``results``: the loaded results.json (or None). ``run``: what today's run is, as the role
    derived it before any restart - ``force``, ``pool``, ``converge``, ``run_name``, ``settings``
    (_mtp_tune_settings), ``workload`` (the fingerprint), ``resume`` (mtp_tune_resume_plan),
    ``attempts`` (the reused ones), ``candidates``, ``ladder``, ``spec``, ``search_all_levels``
    (the search benchmarks every level), ``interrupted`` (an active marker was found),
    ``unit_path``, ``inputs`` (mtp_tune_inputs_digest), ``report``. ``node``: what the node says -
    ``unit_exists``, ``unit_sha1``, ``record`` (setting.json), ``unit`` (systemd state) and
    ``ready`` (a generate probe: None before it ran).

    Returns ``{"skip", "probe", "why", "message"}``: ``why`` lists every reason the run goes the
    normal way; ``probe`` is true when only the readiness probe is missing; ``skip`` only when
    nothing stands in the way and the probe got tokens.
    """
    run = run if isinstance(run, dict) else {}
    node = node if isinstance(node, dict) else {}
    why = []
    if run.get("force"):
        why.append("mtp_tune_force=true")
    if run.get("pool"):
        why.append("a pool run decides over every node")
    if not run.get("converge", True):
        why.append("mtp_tune_converge=false")
    if run.get("interrupted"):
        why.append("an interrupted run is on the node")
    if not why:
        why = _results_reasons(results, run)
    if not why:
        why = _search_reasons(results, run)
    if not why:
        why = _converge_reasons(results, run, node)
    ready = node.get("ready")
    if not why and ready is not None and not ready:
        why.append("the server did not answer a generate probe")
    probe = not why and ready is None
    skip = not why and bool(ready)
    if skip:
        message = _describe(results, run)
    elif probe:
        message = "complete on record; probing the server before skipping"
    else:
        message = "going the normal way: %s" % "; ".join(why)
    return {"skip": skip, "probe": probe, "why": why, "message": message}
