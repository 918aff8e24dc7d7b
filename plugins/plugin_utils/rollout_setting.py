# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""What the fleet rollout (role ``rollout``, playbook ``rollout.yml``) rolls out, as pure functions.

The role only moves data: render the unit, restart, wait, benchmark, roll back. Everything it has
to decide is in plugins/plugin_utils/rollout_*.py so that it can be tested without a fleet; this
module decides the setting:

rollout_requested
    the setting to roll out, from the operator's extra vars or from a tuning run's winner.
rollout_tuned_setting
    the winner of an ``mtp_tune`` run, read from the text of one or more ``results.json``.
rollout_unit_settings / rollout_at_setting
    what a rendered (or hand-written) unit runs, read back from its text, and whether that is the
    requested setting.
rollout_kind / setting_label
    which kind of rollout the play runs, and a setting's short name.

The gate each node passes is in rollout_gate.py, the fleet summary in rollout_summary.py.
Controller-side library of plugins/filter/rollout.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import shlex

from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import as_number as _num
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only for running the pure functions without ansible
    class AnsibleFilterError(Exception):
        pass


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
