# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Failures of the node, not of the setting: a launch that fails for a reason every candidate
shares (the port is taken, the model is not there, the install is broken, no GPU answers, or
SGLang refused an argument the candidates do not vary) says nothing about the setting, and the
next candidate would fail the same way.  The search ends at the first one (mtp_tune_next,
mtp_tune_complete), the role restores the unit and stops naming the class and its cause, and a
later run does not reuse the failure (mtp_tune_resume_plan): it launches one candidate again,
since the node may have been fixed.  Controller-side library of plugins/filter/mtp_tune.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.blackwell.sglang.plugins.module_utils import journal
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import CAP_LEVERS

# Failure classes (sglang_service_wait's) that no speculative setting causes or cures.
NODE_CLASSES = ("port_in_use", "model_missing", "install_broken", "no_gpu")

# The flags whose values the candidates vary (the service role renders them from the candidate);
# every other flag of the command line is the same for every candidate.
VARIED_FLAGS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")

# bad_args lines that are about a varied value: argparse refusing the value of a varied flag
# (``argument --speculative-eagle-topk: invalid int value: 'x'``, ``expected one argument``), or
# SGLang 0.5.23's startup check of a varied value (server_args.py: trtllm_mha takes topk 1 only).
_ARGPARSE_VALUE = re.compile(r"error: argument (?:-\w+/)?(--[A-Za-z0-9-]+)(?:/-\w+)?: (?:invalid|expected)")
_VARIED_CHECKS = (re.compile(r"trtllm_mha backend only supports topk = 1"),)
# argparse's own error line (the usage block before it lists every flag, so it decides nothing).
_ARGPARSE_ERROR = re.compile(r"error: (?:argument |unrecognized arguments|ambiguous option|the following arguments)")


def _bad_args_line(failure_line, journal_tail):
    """The line that says what SGLang refused: argparse's ``error:`` line when the journal has one
    (the first matching line is often the usage block), else the classified line."""
    for line in reversed(list(journal_tail or [])):
        if _ARGPARSE_ERROR.search(str(line)):
            return str(line)
    return str(failure_line or "")


def bad_args_is_node(failure_line, journal_tail=None):
    """True when a bad_args failure is the node's: the refused argument is not the value of one of
    VARIED_FLAGS.  The setting's fault only when argparse refused the value of a varied flag, or
    SGLang's check refused a varied value; a flag name the release does not know (unrecognized,
    ambiguous, required), an extra argument, the context length or the speculative algorithm are
    the same on every candidate."""
    line = _bad_args_line(failure_line, journal_tail)
    if any(p.search(line) for p in _VARIED_CHECKS):
        return False
    value = _ARGPARSE_VALUE.search(line)
    if value and value.group(1) in VARIED_FLAGS:
        return False
    return True


def node_fault_of(attempt):
    """The node fault an attempt ended in, or None: ``{"class", "cause", "line", "holders"}``.

    ``attempt`` is an attempt record (mtp_tune_attempt's: ``status``, ``failure_class``,
    ``failure_line``, ``journal_tail``, ``hint``, ``port_holders``); its stored ``node_fault``
    wins when present.  ``cause`` says what to fix: for port_in_use the processes holding the port
    (pid and command, from sglang_service_wait), for bad_args the refused line, for the other
    classes the journal line and the class's hint."""
    if not isinstance(attempt, dict) or attempt.get("status") != "failed":
        return None
    if isinstance(attempt.get("node_fault"), dict):
        return attempt["node_fault"]
    cls = str(attempt.get("failure_class") or "").lower()
    tail = attempt.get("journal_tail") or []
    if cls == "bad_args":
        # a lever the search set (mtp_cap) is the setting's: the release may refuse it on this node
        if any(k in CAP_LEVERS and v not in (None, False) for k, v in (attempt.get("overrides") or {}).items()):
            return None
        if not bad_args_is_node(attempt.get("failure_line"), tail):
            return None
        line = _bad_args_line(attempt.get("failure_line"), tail).strip()
        return {"class": cls, "line": line, "holders": [],
                "cause": "SGLang refused an argument every candidate shares (%s): %s" % (
                    line[-300:] or "see the journal", journal.hint(cls))}
    if cls not in NODE_CLASSES:
        return None
    holders = [h for h in attempt.get("port_holders") or [] if isinstance(h, dict)]
    hint = attempt.get("hint") or journal.hint(cls)
    line = str(attempt.get("failure_line") or "").strip()
    cause = hint if cls == "port_in_use" else ("%s (%s)" % (hint, line[-300:]) if line else hint)
    return {"class": cls, "line": line or None, "holders": holders, "cause": cause}


def mtp_tune_node_fault(attempts):
    """The node fault that ends this run: the first launch of this run that ended in one (a
    resumed attempt is an earlier run's, and says nothing about the node today), or None.
    ``{"class", "cause", "line", "holders", "key"}`` (``node`` too for a pool's launch).  On one
    node it is the last launch, since the search stops there; in a pool any node's ends the
    pool's search."""
    for att in list(attempts or []):
        if not isinstance(att, dict) or att.get("resumed"):
            continue
        fault = node_fault_of(att)
        if fault is None:
            continue
        out = dict(fault)
        out["key"] = att.get("key")
        if att.get("node") is not None:
            out["node"] = att["node"]
        return out
    return None


def node_fault_message(fault, restored=False, summary=None):
    """The message the run stops with after a node fault."""
    fault = fault if isinstance(fault, dict) else {}
    where = " on %s" % fault["node"] if fault.get("node") else ""
    msg = ("The node%s failed %s with %s, which no speculative setting changes, so no other candidate was "
           "launched: %s" % (where, fault.get("key") or "the first launch", fault.get("class"), fault.get("cause")))
    msg = msg.rstrip(".") + "."
    if restored:
        msg += " The pre-tuning unit was restored."
    if summary:
        msg += " See %s." % summary
    msg += " Fix the node and run again: the next run launches a candidate again."
    return msg


def mtp_tune_node_fault_message(attempts, restored=False, summary=None):
    """The message of mtp_tune_node_fault's fault (``attempts``: this run's), or None."""
    fault = mtp_tune_node_fault(attempts)
    return None if fault is None else node_fault_message(fault, restored, summary)
