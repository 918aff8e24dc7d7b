# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Decisions of a tuning run that meets what an earlier run left: which measurements may be
reused, what a run in progress marks on the node, and how an interrupted run is picked up.

Controller-side library of plugins/filter/mtp_resume.py; the role ``mtp_tune`` only reads and
writes files.

Vocabulary
----------
workload fingerprint
    ``{"model", "release", "tp", "dataset", "dataset_sha256", "input_len", "output_len",
    "levels", "temperature", "time_scale"}``: what a figure depends on besides the candidate.
    Stored with every attempt (``workload``) and with the results.
active marker
    ``/var/lib/sglang-mtp-tune/<unit>/active.json`` on the node while a run may have changed the
    unit: ``{"run", "run_id", "backup", "unit_existed", "started"}``.  A run that ends removes it;
    a run that finds one knows the one before it was interrupted.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import candidate_states
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_node import node_fault_of
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import AnsibleFilterError, candidate_key


MISMATCH_CHOICES = ("measure", "stop")
# Keys compared exactly; ``levels`` is compared as "measured at every level asked today".
FINGERPRINT_KEYS = ("model", "release", "tp", "dataset", "dataset_sha256", "input_len", "output_len",
                    "temperature", "time_scale")
RUN_STATES = ("running", "finished", "failed", "interrupted")


# --------------------------------------------------------------------------- what was measured

def mtp_tune_measured(attempts, candidates, levels=None):
    """Keys of candidates already decided in ``attempts`` (resume): measured at every level
    in ``levels`` (a re-run that adds a level re-measures), or failed for good."""
    keys = set(c["key"] for c in candidates or [])
    # A per-load schedule's launch (mtp_schedule: ``<candidate key>+adaptive-<digest8>`` or
    # ``+adaptive-default``) is decided like a candidate: a re-run keeps what it measured.
    schedules = []
    for att in attempts or []:
        if isinstance(att, dict) and _adaptive(att.get("overrides")):
            key = att.get("key") or candidate_key(att["candidate"])
            if key not in schedules:
                schedules.append(key)
    want = [str(c) for c in (levels or [])]
    out = []
    for key, st in candidate_states(attempts).items():
        if (key not in keys and key not in schedules) or not st["done"]:
            continue
        if st["ok"] is not None:
            got = set(str(k) for k in (st["ok"].get("metrics") or {}))
            if not all(c in got for c in want):
                continue
        out.append(key)
    return [c["key"] for c in candidates if c["key"] in out] + [k for k in schedules if k in out]


def _adaptive(overrides):
    value = (overrides or {}).get("speculative_adaptive") if isinstance(overrides, dict) else None
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return value is True


def mtp_tune_resume(loaded, candidates, levels=None, force=False):
    """Attempts of a loaded results.json worth keeping for this run.

    Kept: attempts of candidates still in the list whose outcome is final (measured at all of
    today's levels, or failed); a candidate measured at fewer levels is re-measured.  With
    ``force`` nothing is kept (the writer sets the old file aside first).
    """
    if force or not loaded:
        return []
    atts = loaded.get("attempts") if isinstance(loaded, dict) else loaded
    if not isinstance(atts, list):
        raise AnsibleFilterError("results file has no 'attempts' list; set mtp_tune_force=true to start afresh")
    done = set(mtp_tune_measured(atts, candidates, levels))
    kept = []
    for att in atts:
        if (att.get("key") or candidate_key(att["candidate"])) in done:
            att = dict(att)
            att["resumed"] = True  # not a launch of this run: max_launches and the report count only new ones
            kept.append(att)
    return kept


# --------------------------------------------------------------------------- the workload

def _norm(value):
    """One spelling per value: numbers as floats, so 128 from YAML and "128" from -e agree."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        return text


def _typed(value, kind, what):
    """``-e name=512`` arrives as a string: store 512, as the inventory's 512 is stored."""
    if value in (None, ""):
        return None
    try:
        return kind(float(value)) if kind is int else kind(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError("%s must be a number, got %r" % (what, value))


def mtp_tune_fingerprint(bench, model=None, release=None, tp=None, dataset_sha256=None, levels=None):
    """The workload fingerprint of a run from its ``settings.bench`` dict and the service facts.

    ``dataset_sha256`` is the checksum of the dataset file on the node (None for ``random``,
    whose prompts follow from the lengths and the benchmark's fixed seed)."""
    bench = bench or {}
    dataset = bench.get("dataset") or "random"
    lv = []
    for c in levels or []:
        try:
            lv.append(int(c))
        except (TypeError, ValueError):
            raise AnsibleFilterError("concurrency level %r is not an integer" % (c,))
    return {
        "model": model or None,
        "release": None if release in (None, "") else str(release),
        "tp": None if tp in (None, "") else int(tp),
        "dataset": dataset,
        "dataset_sha256": None if dataset == "random" else (dataset_sha256 or None),
        "input_len": _typed(bench.get("input_len"), int, "mtp_tune_bench_input_len"),
        "output_len": _typed(bench.get("output_len"), int, "mtp_tune_bench_output_len"),
        "levels": sorted(set(lv)),
        "temperature": _typed(bench.get("temperature"), float, "mtp_tune_bench_temperature"),
        "time_scale": _typed(bench.get("time_scale"), float, "mtp_tune_bench_time_scale"),
    }


def mtp_tune_fingerprint_diff(stored, current):
    """Human-readable differences (``["input_len 1024 -> 128", ...]``); [] when ``stored`` can be
    reused under ``current``.  A measurement without a fingerprint (an older results file) never
    matches: nobody can say what it was measured under."""
    if not isinstance(stored, dict) or not stored:
        return ["no workload recorded with the measurement"]
    current = current or {}
    out = []
    for key in FINGERPRINT_KEYS:
        a, b = _norm(stored.get(key)), _norm(current.get(key))
        if a != b:
            out.append("%s %s -> %s" % (key, stored.get(key), current.get(key)))
    missing = sorted(set(int(c) for c in current.get("levels") or []) - set(int(c) for c in stored.get("levels") or []))
    if missing:
        out.append("levels %s lack %s" % (stored.get("levels"), missing))
    return out


def mtp_tune_resume_plan(loaded, candidates, levels=None, workload=None, mismatch="measure",
                         retry_classes=None, force=False):
    """What a run keeps from an earlier results.json.

    Returns ``{"attempts", "superseded", "mismatched", "retry", "stop", "message"}``:

    - ``attempts``: reusable attempts (flagged ``resumed``), chosen by ``mtp_tune_resume`` among
      those measured under ``workload`` and not failed with a class in ``retry_classes``;
    - ``superseded``: the earlier attempts not reused, kept for the record (never deleted);
    - ``mismatched``: ``{key: [differences]}`` for candidates measured under another workload;
    - ``retry``: keys whose failure (``retry_classes``, default ``bench_failed``) is tried again, and
      those that failed for a reason of the node (mtp_node.node_fault_of: never reused, whatever
      ``retry_classes`` says);
    - ``node_faults``: ``{key: failure class}`` of the latter;
    - ``stop``: a message when ``mismatch`` is ``stop`` and something was measured under another
      workload (the role fails with it before any restart), else None.
    """
    if mismatch not in MISMATCH_CHOICES:
        raise AnsibleFilterError("mtp_tune_resume_mismatch must be measure or stop, got %r" % (mismatch,))
    classes = set(str(c).lower() for c in (["bench_failed"] if retry_classes is None else retry_classes))
    out = {"attempts": [], "superseded": [], "mismatched": {}, "retry": [], "node_faults": {}, "stop": None,
           "message": "nothing to resume"}
    if force or not loaded:
        return out
    atts = loaded.get("attempts") if isinstance(loaded, dict) else loaded
    if not isinstance(atts, list):
        raise AnsibleFilterError("results file has no 'attempts' list; set mtp_tune_force=true to start afresh")
    earlier = list((loaded.get("superseded") or []) if isinstance(loaded, dict) else [])
    usable = []
    for att in atts:
        key = att.get("key") or candidate_key(att["candidate"])
        diff = mtp_tune_fingerprint_diff(att.get("workload"), workload)
        if diff:
            out["mismatched"].setdefault(key, diff)
            continue
        if att.get("status") == "failed" and str(att.get("failure_class") or "").lower() in classes:
            if key not in out["retry"]:
                out["retry"].append(key)
            continue
        # A failure of the node says nothing about the setting, and the node may have been fixed
        # since: the candidate is launched again (if it fails the same way, the run ends there).
        fault = node_fault_of(att)
        if fault is not None:
            out["node_faults"].setdefault(key, fault.get("class"))
            if key not in out["retry"]:
                out["retry"].append(key)
            continue
        usable.append(att)
    # A candidate being retried starts afresh: its earlier attempts are history, not a state.
    usable = [a for a in usable if (a.get("key") or candidate_key(a["candidate"])) not in out["retry"]]
    kept = mtp_tune_resume(usable, candidates, levels, False)
    kept_ids = set(id(a) for a in usable if (a.get("key") or candidate_key(a["candidate"]))
                   in set(k.get("key") for k in kept))
    out["attempts"] = kept
    out["superseded"] = earlier + [dict(a) for a in atts if id(a) not in kept_ids]
    for att in out["superseded"]:
        att.pop("resumed", None)
    parts = ["resuming %d of %d earlier attempts" % (len(kept), len(atts))]
    if out["mismatched"]:
        first = sorted(out["mismatched"])[0]
        parts.append("measured under another workload, not reused: %s (%s)"
                     % (", ".join(sorted(out["mismatched"])), "; ".join(out["mismatched"][first])))
        if mismatch == "stop":
            out["stop"] = (
                "The earlier results of this run were measured under another workload (%s: %s). "
                "Nothing was restarted. Re-run with mtp_tune_resume_mismatch=measure to measure those "
                "candidates again (the old figures stay in results.json under 'superseded'), or give "
                "a new mtp_tune_run_name." % (", ".join(sorted(out["mismatched"])), "; ".join(out["mismatched"][first])))
    retried = [k for k in out["retry"] if k not in out["node_faults"]]
    if retried:
        parts.append("retrying %s (failed with %s)" % (", ".join(retried), ", ".join(sorted(classes))))
    if out["node_faults"]:
        parts.append("launching again what the node failed, not the setting: %s" % ", ".join(
            "%s (%s)" % (k, c) for k, c in sorted(out["node_faults"].items())))
    out["message"] = "; ".join(parts)
    return out


def mtp_tune_runs(loaded, run_id=None, started=None, state="running"):
    """The run history of a results file (``loaded``: the document, or ``{"runs": [...]}``).

    An earlier entry still ``running`` was interrupted (no run ends without saying so), so it
    becomes ``interrupted``. With ``run_id`` this run is appended (once); a run joins the
    history only when it launches something or picks up an interrupted run, so a re-run that
    changes nothing leaves the file as it was."""
    if state not in RUN_STATES:
        raise AnsibleFilterError("run state must be one of %s, got %r" % (", ".join(RUN_STATES), state))
    runs = []
    for run in ((loaded or {}).get("runs") or []) if isinstance(loaded, dict) else []:
        run = dict(run)
        if run_id is not None and run.get("id") == run_id:
            runs.append(run)
            continue
        if run.get("state") == "running":
            run["state"] = "interrupted"
        runs.append(run)
    if run_id is not None and not any(r.get("id") == run_id for r in runs):
        runs.append({"id": run_id, "started": started, "state": state})
    return runs


def mtp_tune_run_state(runs, run_id, state, ended=None, ended_by=None):
    """``runs`` with this run's entry set to ``state`` (and ``ended``); unchanged when this run
    never joined the history.  ``ended_by``: the node fault that ended it (mtp_tune_node_fault),
    kept as ``ended_by`` {class, cause, key}; a later call without it leaves it as it is."""
    if state not in RUN_STATES:
        raise AnsibleFilterError("run state must be one of %s, got %r" % (", ".join(RUN_STATES), state))
    out = []
    for run in runs or []:
        run = dict(run)
        if run.get("id") == run_id:
            run["state"] = state
            if ended:
                run["ended"] = ended
            if isinstance(ended_by, dict) and ended_by.get("class"):
                run["ended_by"] = dict((k, ended_by.get(k)) for k in ("class", "cause", "key", "node")
                                       if ended_by.get(k) is not None)
        out.append(run)
    return out


def mtp_tune_active_plan(marker, run_name, run_id, state_dir):
    """What a run does about an earlier run's active marker, before its first launch.

    Returns ``{"backup", "unit_existed", "reuse_backup", "restore_first", "interrupted", "message"}``:

    - no marker: this run will copy the unit to ``<state_dir>/<run_id>.pre-mtp-tune`` before its
      first launch;
    - a marker of the same run name (a resume): the interrupted run's copy is this run's pre-tuning
      unit too (the unit on the node now is the interrupted candidate), nothing is copied again;
    - a marker of another run: the interrupted run's copy is put back first (the node serves what
      it served before any tuning), then this run copies that to its own file.
    """
    own = "%s/%s.pre-mtp-tune" % (str(state_dir).rstrip("/"), run_id)
    if not isinstance(marker, dict) or not marker.get("backup"):
        return {"backup": own, "unit_existed": None, "reuse_backup": False, "restore_first": False,
                "interrupted": None, "message": "no interrupted run on this node"}
    existed = bool(marker.get("unit_existed"))
    what = "run %s (id %s, started %s)" % (marker.get("run"), marker.get("run_id"), marker.get("started"))
    if marker.get("run") == run_name:
        return {"backup": marker["backup"], "unit_existed": existed, "reuse_backup": True, "restore_first": False,
                "interrupted": marker,
                "message": "resuming interrupted %s: its pre-tuning unit %s stays this run's pre-tuning unit"
                           % (what, marker["backup"] if existed else "(none: there was no unit)")}
    return {"backup": own, "unit_existed": None, "reuse_backup": False, "restore_first": True, "interrupted": marker,
            "message": "interrupted %s left a candidate on the node: %s first"
                       % (what, "restoring its pre-tuning unit %s" % marker["backup"] if existed
                          else "removing the unit it created")}


def mtp_tune_bench_deadline(attempts, explicit=None, timeout=600, levels=None, repeats=1, factor=3.0, margin=60):
    """Seconds one candidate's benchmark may run on the node before it stops itself.

    ``explicit`` (mtp_tune_bench_deadline) wins. Otherwise, once a benchmark of this workload
    finished, ``factor`` x the longest one so far + ``margin``, the longest scaled to the number of
    ``levels`` asked now (a search at the judged level measures one level, the launch completing
    the winner's table all of them); before that, a request deadline (``timeout``) per level and
    repeat, + ``margin``: a level whose requests all hang ends within one request deadline."""
    if explicit not in (None, ""):
        value = float(explicit)
        if value <= 0:
            raise AnsibleFilterError("mtp_tune_bench_deadline must be > 0 seconds, got %r" % (explicit,))
        return value
    took = []
    asked = len(list(levels)) if levels else None
    for att in attempts or []:
        if att.get("status") != "ok":
            continue
        try:
            seconds = float((att.get("timings") or {}).get("bench_s"))
        except (TypeError, ValueError):
            continue
        measured = sum(1 for c in (att.get("metrics") or {}) if str(c).isdigit())
        took.append(seconds * asked / measured if (asked and measured) else seconds)
    if took:
        return round(max(took) * float(factor) + float(margin), 1)
    n = max(1, len(list(levels or [1]))) * max(1, int(repeats or 1))
    return round(float(timeout) * n + float(margin), 1)
