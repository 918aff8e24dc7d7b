# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""What a failed start leaves on the node, decided by pure functions.

The service role (``sglang_service_rollback``) and the rollout role both roll a node back with
the service role's ``tasks/rollback.yml``; these filters decide whether to restore the previous
unit or only to stop the failed one, and word what happened, so both roles decide alike.

Filters: sglang_service_result (the role's one published result, fact C(sglang_service_result): what
other roles read instead of the role's registers); sglang_service_rollback_action (restore / stop / none); sglang_service_start_report
(the failure class, the journal line quoted, its hint and the rollback's outcome, as one record
and one message); sglang_service_unit_base_url (where a unit's server listens, read from its
ExecStart, so the restored unit is probed where it serves, not where the failed one tried to).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import shlex

ACTIONS = ("restore", "stop", "none")


def sglang_service_rollback_action(failed, unit_changed, unit_existed, enabled=True):
    """What to do after a start that failed (``failed`` true) or was judged failed later.

    ``restore``: this run changed a unit that existed before, so the earlier unit goes back and
    is started again. ``stop``: nothing earlier to go back to (a new unit, or the unit was already
    this one): stop it and free the GPUs, so it does not crash-loop holding GPU memory.
    ``none``: the start did not fail, or rolling back is turned off.
    """
    if not failed or not enabled:
        return "none"
    if unit_changed and unit_existed:
        return "restore"
    return "stop"


def _quote(line, limit=300):
    line = " ".join(str(line or "").split())
    if len(line) > limit:
        line = line[:limit - 3] + "..."
    return line


def sglang_service_start_report(wait, action="none", rollback_wait=None, unit=None):
    """One record of a failed start: ``failure_class``, ``failure_line`` (the journal line that
    decided the class, whitespace folded), ``hint``, ``action`` (see
    sglang_service_rollback_action), ``serving`` (``previous`` when the restored unit generates
    tokens again, ``none`` otherwise) and ``msg`` (all of it in one sentence).

    ``wait`` and ``rollback_wait`` are results of blackwell.sglang.sglang_service_wait. A ready
    ``wait`` gives ``{"failed": false}``.
    """
    wait = wait or {}
    if wait.get("ready", True):
        return {"failed": False}
    cls = wait.get("failure_class") or "unknown"
    line = _quote(wait.get("failure_line"))
    hint = wait.get("hint")
    if action not in ACTIONS:
        action = "none"
    rb = rollback_wait or {}
    back = action == "restore" and bool(rb.get("ready"))
    name = unit or wait.get("unit") or "the unit"
    parts = ["%s did not start: %s" % (name, cls)]
    if line:
        parts.append("(journal: `%s`)" % line)
    text = " ".join(parts) + "."
    if hint:
        text += " Hint: %s" % hint.rstrip(".") + "."
    if action == "restore":
        if back:
            text += " Rolled back to the previous unit, which generates tokens again."
        else:
            text += " Rolled back to the previous unit, but it did not come back either (%s)." % (
                rb.get("failure_class") or rb.get("msg") or "not ready")
    elif action == "stop":
        text += " No earlier unit to roll back to: the unit was stopped and its GPUs freed."
    return {"failed": True, "failure_class": cls, "failure_line": line or None, "hint": hint,
            "action": action, "serving": "previous" if back else "none",
            "rollback_failure_class": (rb.get("failure_class") if action == "restore" and not back
                                       else None),
            "msg": text}


# The wait's fields other roles read; an earlier result carries them too, so it can be passed as ``wait``.
WAIT_FIELDS = ("ready", "seconds", "failure_class", "failure_line", "hint", "msg", "journal_tail", "generated_tokens",
               "port_holders", "pool")


def sglang_service_result(wait, unit, unit_changed=False, action="none", rollback_wait=None):
    """The service role's published result (fact ``sglang_service_result``), one shape whatever ran.

    ``wait`` is a result of blackwell.sglang.sglang_service_wait, an earlier result of this filter
    (its wait fields carry over), or nothing (no wait ran: a skipped task's result counts as
    nothing). ``waited`` says whether a wait ran; ``ready`` is None when none did. ``rollback`` is
    the action taken after a failed start (see sglang_service_rollback_action) and
    ``rollback_ready`` / ``rollback_failure_class`` / ``rollback_journal_tail`` what the restored
    unit did (None / [] unless the action was restore and its wait ran).
    """
    wait = wait if isinstance(wait, dict) else {}
    waited = wait.get("ready") is not None and not wait.get("skipped")
    out = {"unit": unit, "unit_changed": bool(unit_changed), "waited": waited}
    for key in WAIT_FIELDS:
        out[key] = wait.get(key) if waited else None
    out["journal_tail"] = list(out["journal_tail"] or [])
    out["pool"] = dict(out["pool"] or {})
    if waited:
        out["ready"] = bool(wait.get("ready"))
    out["rollback"] = action if action in ACTIONS else "none"
    rb = rollback_wait if isinstance(rollback_wait, dict) and rollback_wait.get("ready") is not None else {}
    if rb and out["rollback"] == "restore":
        out["rollback_ready"] = bool(rb.get("ready"))
        out["rollback_failure_class"] = None if rb.get("ready") else (rb.get("failure_class") or "unknown")
        out["rollback_journal_tail"] = list(rb.get("journal_tail") or [])
    else:
        out["rollback_ready"], out["rollback_failure_class"], out["rollback_journal_tail"] = None, None, []
    return out


def sglang_service_unit_base_url(text, fallback=None):
    """Loopback base URL of the server a unit starts, from its ExecStart ``--host`` / ``--port``
    (SGLang's defaults 127.0.0.1 and 30000 when absent); ``fallback`` when there is no ExecStart."""
    if not text:
        return fallback
    joined = re.sub(r"\\\n", " ", str(text))
    exec_line = None
    for line in joined.splitlines():
        if line.strip().startswith("ExecStart="):
            exec_line = line.strip()[len("ExecStart="):].lstrip("-@:+!")
    if exec_line is None:
        return fallback
    try:
        words = shlex.split(exec_line)
    except ValueError:
        words = exec_line.split()
    found = {"--host": "127.0.0.1", "--port": "30000"}
    for i, word in enumerate(words):
        flag, eq, inline = word.partition("=")
        if flag in found:
            value = inline if eq else (words[i + 1] if i + 1 < len(words) else None)
            if value:
                found[flag] = value
    host = found["--host"]
    if host in ("0.0.0.0", "", "127.0.0.1"):
        host = "127.0.0.1"
    elif host == "::":
        host = "[::1]"
    elif ":" in host and not host.startswith("["):
        host = "[%s]" % host
    return "http://%s:%s" % (host, found["--port"])
