#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_service_wait
short_description: Wait until an SGLang systemd unit really generates tokens, or classify why it failed
version_added: "0.1.0"
description:
  - Polls C(systemctl show) for the unit's state, restart counter and invocation, and the server's
    C(/health_generate) endpoint (a 1-token generate inside SGLang), then sends one tiny
    C(/generate) request and checks that tokens came back. C(/health) alone is not enough, since a known
    SGLang hang with MTP speculation keeps C(/health) at 200 while no token is produced.
  - Fails fast, without waiting for the timeout, as soon as the unit is C(failed), is in
    C(auto-restart), its C(NRestarts) grew by more than O(max_restarts), or its journal shows a
    fatal line (for example the KV-cache C(Not enough memory) error) while the process still runs.
  - On failure it reads the journal of the current run (every invocation since O(since), or the
    restarts seen while waiting), takes the first invocation whose journal names a cause
    (later crashes of a crash loop often show only a consequence, such as a CUDA OOM caused by the
    first try's orphans) and classifies the failure as V(oom_weights), V(oom_hybrid_state), V(oom_kv_cache),
    V(cuda_graph_capture), V(cuda_oom), V(no_gpu), V(bad_args), V(port_in_use), V(model_missing),
    V(install_broken), V(timeout) or V(unknown),
    and returns the journal tail; for V(port_in_use) it names the processes holding the port
    (RV(port_holders)).
  - With O(fail_on_error=false) a failure is returned as data (RV(ready=false) and the class) instead
    of failing the task; a tuning loop uses that to record the failure and go on.
  - Never changes anything on the node, so it always reports RV(ignore:changed=false).
options:
  unit:
    description: Name of the systemd unit, with or without the C(.service) suffix.
    type: str
    required: true
  base_url:
    description: Base URL of the server as seen from the node, loopback in practice.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description:
      - API key of the server, sent as a bearer token on C(/generate). Health endpoints do not need it.
    type: str
  timeout:
    description: Seconds to wait in total before failing with class V(timeout).
    type: int
    default: 1800
  interval:
    description: Seconds between two polls of the unit and the server.
    type: float
    default: 2.0
  request_timeout:
    description: Seconds one HTTP request may take (a health check or the probe generate).
    type: float
    default: 60.0
  probe_generate:
    description:
      - After C(/health_generate) answers 200, send C(/generate) with O(probe_max_new_tokens) and
        require that many tokens back (C(ignore_eos)), proving that decoding progresses.
    type: bool
    default: true
  probe_max_new_tokens:
    description: Tokens the probe generate asks for.
    type: int
    default: 4
  max_restarts:
    description:
      - Automatic restarts of the unit tolerated while waiting (C(NRestarts) growth). V(0) fails at
        the first crash, which is what a tuning loop wants.
    type: int
    default: 0
  since:
    description:
      - Epoch seconds (node clock) of the (re)start this wait follows, as C(date +%s.%N) prints it.
      - With it, every invocation of the unit that began since then is this run, so crashes that
        happened before the first poll count against O(max_restarts) and the first of them
        decides RV(failure_class). Without it, only restarts while waiting count.
    type: float
  journal_lines:
    description: How many journal lines to return in RV(journal_tail).
    type: int
    default: 60
  fail_on_error:
    description:
      - V(true) fails the task when the server does not become ready. V(false) returns
        RV(ready=false), RV(failure_class) and RV(journal_tail) and lets the play go on.
    type: bool
    default: true
extends_documentation_fragment:
  - blackwell.sglang.attributes
  - blackwell.sglang.api_key
  - blackwell.sglang.attributes.facts
attributes:
  check_mode:
    support: full
    details:
      - Read-only; it polls in check mode too (skip it when the unit cannot exist yet).
  diff_mode:
    support: N/A
    details:
      - This action does not modify state.
requirements:
  - systemd (systemctl, journalctl) on the node
author:
  - blackwell.sglang maintainers (@blackwell)
seealso:
  - module: ansible.builtin.systemd_service
"""

EXAMPLES = r"""
---
- name: Wait until sglang-qwen answers with real tokens
  blackwell.sglang.sglang_service_wait:
    unit: sglang-qwen.service
    base_url: http://127.0.0.1:30000
    timeout: 1800

- name: Try a setting and record a failure instead of stopping the play
  blackwell.sglang.sglang_service_wait:
    unit: sglang-qwen
    fail_on_error: false
  register: __wait

- name: Show why it failed
  ansible.builtin.debug:
    msg: "{{ __wait.failure_class }}: {{ __wait.journal_tail[-5:] }}"
  when: not __wait.ready
"""

RETURN = r"""
ready:
  description: Whether the server generated tokens before the timeout.
  returned: always
  type: bool
  sample: true
seconds:
  description: Seconds spent waiting.
  returned: always
  type: float
  sample: 42.5
failure_class:
  description:
    - Why the server did not become ready; V(null) when ready. One of V(oom_weights),
      V(oom_hybrid_state), V(oom_kv_cache), V(cuda_graph_capture), V(cuda_oom), V(no_gpu),
      V(bad_args), V(port_in_use), V(model_missing), V(install_broken), V(timeout), V(unknown).
  returned: always
  type: str
  sample: oom_kv_cache
failure_line:
  description: The journal line that decided RV(failure_class), if any.
  returned: always
  type: str
  sample: "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
hint:
  description:
    - What to change for this failure class. For V(port_in_use) it names the processes holding the
      port (RV(port_holders)).
  returned: when not ready
  type: str
port_holders:
  description:
    - For V(port_in_use), the processes that hold the port of O(base_url) when the wait ends (the
      failed server is gone by then), read from C(/proc/net/tcp) and C(/proc/<pid>/fd) as
      C(ss -ltnp) shows them; V([]) otherwise or when none can be read.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 4242, "user": "root", "command": "python3", "cmdline": "python3 -m http.server 30000", "state": "listen"}]
journal_tail:
  description:
    - The last O(journal_lines) journal lines of the invocation that decided RV(failure_class)
      (of the whole current run when no cause was found, or on timeout).
  returned: always
  type: list
  elements: str
nrestarts:
  description: C(NRestarts) of the unit at the end of the wait.
  returned: always
  type: int
restarts_during_wait:
  description: Restarts counted against O(max_restarts) (see O(since)).
  returned: always
  type: int
active_state:
  description: The unit's C(ActiveState) at the end.
  returned: always
  type: str
  sample: active
sub_state:
  description: The unit's C(SubState) at the end.
  returned: always
  type: str
  sample: running
exec_main_status:
  description: Exit status of the unit's last main process (C(ExecMainStatus)).
  returned: always
  type: int
invocation_ids:
  description: The unit's invocation IDs of the current run seen while waiting, oldest first.
  returned: always
  type: list
  elements: str
health_status:
  description: HTTP status of the last C(/health_generate) answer, V(null) if none came.
  returned: always
  type: int
generated_tokens:
  description: Tokens the probe generate returned (V(0) when it did not run or failed).
  returned: always
  type: int
pool:
  description:
    - The hybrid (linear-attention) state pool the launch built, read from its journal
      (SGLang's C(Mamba Cache is allocated), C(KV Cache is allocated), cap warning and scheduler
      summary lines; module_utils/journal.py C(pool_facts)); of the current invocation when
      ready, else of the invocation that decided RV(failure_class). V({}) when the launch logged
      no state pool (a dense model, or a start that died before its pools were built).
    - Keys C(hybrid), C(max_mamba_cache_size), C(conv_gb), C(ssm_gb), C(intermediate_ssm_gb),
      C(conv_window_gb), C(replayssm_ring_gb), C(kv_tokens), C(kv_gb), C(max_running_requests)
      (the server's effective cap), C(slots_per_request) (from the cap warning, else V(null)),
      C(capped_by) (V(mamba), V(kv) or V(null)), and C(kv_gb_figures) /
      C(replayssm_ring_figures) (how many printed figures were summed, for the rounding bound of
      plugins/plugin_utils/mtp_state_pool.py). Sizes in GB of 2^30 bytes, as SGLang prints them.
  returned: always
  type: dict
  sample: {"hybrid": true, "max_mamba_cache_size": 51, "conv_gb": 0.13, "ssm_gb": 7.31,
           "intermediate_ssm_gb": 6.19, "conv_window_gb": 0.05, "replayssm_ring_gb": null,
           "replayssm_ring_figures": 0, "kv_tokens": 642365, "kv_gb": 15.92, "kv_gb_figures": 2,
           "max_running_requests": 10, "slots_per_request": 5, "capped_by": "mamba"}
ansible_facts:
  description: The same data under C(sglang_service_wait).
  returned: always
  type: dict
  contains:
    sglang_service_wait:
      description: Result of the wait (ready, seconds, failure_class, nrestarts, ...).
      type: dict
      returned: always
"""

import json
import socket
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.six.moves.urllib.parse import urlparse
from ansible.module_utils.urls import open_url
from ansible_collections.blackwell.sglang.plugins.module_utils.systemd import parse_show

from ansible_collections.blackwell.sglang.plugins.module_utils import journal, procs, sglang_api_key

SHOW_PROPERTIES = ("LoadState", "ActiveState", "SubState", "NRestarts", "ExecMainPID",
                   "ExecMainStatus", "InvocationID", "Result")
# Entries read per poll (the running invocation) and for the failure analysis (the whole crash
# loop since the restart; real SGLang logs a few hundred lines per start).
JOURNAL_SCAN_LINES = 400
JOURNAL_ANALYSIS_LINES = 3000


def unit_name(name):
    return name if "." in name else name + ".service"


def _int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def journal_argv(unit, lines):
    """The unit's last ``lines`` journal entries as JSON: its own output and systemd's messages
    about it, each tagged with the invocation (one start of the unit) it belongs to."""
    return ["journalctl", "--no-pager", "-o", "json", "-n", str(lines), "-u", unit]


def _text(value):
    if isinstance(value, list):  # journald sends non-UTF-8 messages as a list of bytes
        try:
            return bytes(value).decode("utf-8", "replace")
        except (TypeError, ValueError):
            return ""
    return "" if value is None else str(value)


def parse_journal(text):
    """journalctl -o json output -> list of (invocation_id, formatted line, usec), oldest first."""
    entries = []
    for raw in text.splitlines():
        raw = raw.strip()
        if not raw.startswith("{"):
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        inv = entry.get("_SYSTEMD_INVOCATION_ID") or entry.get("INVOCATION_ID") or ""
        try:
            usec = int(entry.get("__REALTIME_TIMESTAMP", "0"))
        except (TypeError, ValueError):
            usec = 0
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(usec / 1e6))
        ident = _text(entry.get("SYSLOG_IDENTIFIER")) or "?"
        pid = _text(entry.get("_PID"))
        head = "%s %s %s%s:" % (stamp, _text(entry.get("_HOSTNAME")) or "-", ident, "[%s]" % pid if pid else "")
        for part in _text(entry.get("MESSAGE")).splitlines() or [""]:
            entries.append((_text(inv), "%s %s" % (head, part), usec))
    return entries


def current_run(entries, current=None, since=None, previous=0):
    """The invocations of the current run, oldest first, as (invocation_id, [lines]).

    The run ends at ``current`` (the unit's InvocationID now; a just-started invocation may have
    no journal line yet and is then an empty last entry, never replaced by an older one). It
    starts at the first invocation that began at or after ``since`` (epoch seconds of the manual
    (re)start); without ``since``, ``previous`` more invocations before the current one are
    included (the restarts seen while waiting).
    """
    order = []
    lines = {}
    first = {}
    for inv, line, usec in entries:
        if not inv:
            continue
        if inv not in lines:
            order.append(inv)
            lines[inv] = []
            first[inv] = usec
        lines[inv].append(line)
    if current:
        if current in lines:
            order = order[:order.index(current) + 1]
        else:
            order.append(current)
            lines[current] = []
            first[current] = None
    if since is not None:
        keep = [inv for inv in order if first[inv] is None or first[inv] >= since * 1e6]
        if current and current not in keep:
            keep.append(current)
    else:
        keep = order[-(max(previous, 0) + 1):] if order else []
    return [(inv, lines[inv]) for inv in keep]


class Waiter:
    """The wait loop, with its side effects injected so it can be tested without systemd or HTTP.

    run(argv) -> (rc, stdout, stderr); http(method, url, body_bytes, headers, timeout) ->
    (status or None, body text); clock() -> seconds; sleep(seconds).
    """

    def __init__(self, params, run, http, clock=time.monotonic, sleep=time.sleep, holders=None):
        self.p = params
        self.holders = holders
        self.unit = unit_name(params["unit"])
        self.run = run
        self.http = http
        self.clock = clock
        self.sleep = sleep
        self.invocations = []
        self.props = {}
        self.health_status = None
        self.generated_tokens = 0
        self.base_restarts = None
        self.chain_restarts = 0  # invocations of this run before the current one (with since)
        self.last_probe_error = None

    # -- systemd ----------------------------------------------------------------------------
    def show(self):
        rc, out, err = self.run(["systemctl", "show", self.unit, "-p", ",".join(SHOW_PROPERTIES)])
        if rc != 0:
            raise RuntimeError("systemctl show %s failed (rc=%s): %s" % (self.unit, rc, (err or out).strip()))
        props = parse_show(out)
        inv = props.get("InvocationID", "")
        if inv and inv not in self.invocations:
            self.invocations.append(inv)
        self.props = props
        return props

    def run_chain(self, lines):
        """(invocation_id, lines) of the current run, oldest invocation first."""
        rc, out, _err = self.run(journal_argv(self.unit, lines))
        if rc != 0:
            return []
        growth = _int(self.props.get("NRestarts")) - (self.base_restarts or 0)
        chain = current_run(parse_journal(out), self.props.get("InvocationID") or None,
                            self.p.get("since"), growth)
        self.chain_restarts = max(len(chain) - 1, 0)
        for inv, _lines in chain:
            if inv not in self.invocations:
                self.invocations.append(inv)
        return chain

    def journal(self, lines):
        """All lines of the current run (every invocation since the last manual start)."""
        return [line for _inv, chunk in self.run_chain(lines) for line in chunk]

    def classify_run(self, lines):
        """The first invocation of the run whose journal names a cause decides: later crashes of
        a crash loop often only show the consequence (e.g. a CUDA OOM caused by the first
        try's orphans). Returns (class, evidence line, that invocation's lines)."""
        chain = self.run_chain(lines)
        for _inv, chunk in chain:
            cls, line = journal.classify(chunk)
            if cls != "unknown":
                return cls, line, chunk
        flat = [line for _inv, chunk in chain for line in chunk]
        return "unknown", None, flat

    # -- HTTP -------------------------------------------------------------------------------
    def _url(self, path):
        return self.p["base_url"].rstrip("/") + path

    def probe(self):
        """True when /health_generate is 200 and (optionally) a generate returns tokens."""
        status, body = self.http("GET", self._url("/health_generate"), None, {}, self.p["request_timeout"])
        self.health_status = status
        if status != 200:
            self.last_probe_error = "/health_generate answered %s" % (status if status is not None else body)
            return False
        if not self.p["probe_generate"]:
            return True
        want = self.p["probe_max_new_tokens"]
        payload = {
            "text": "The capital of France is",
            "sampling_params": {"max_new_tokens": want, "temperature": 0, "ignore_eos": True},
        }
        headers = {"Content-Type": "application/json"}
        if self.p.get("api_key"):
            headers["Authorization"] = "Bearer " + self.p["api_key"]
        status, body = self.http("POST", self._url("/generate"), json.dumps(payload).encode("utf-8"),
                                 headers, self.p["request_timeout"])
        if status != 200:
            self.last_probe_error = "/generate answered %s" % (status if status is not None else body)
            return False
        try:
            data = json.loads(body)
            if isinstance(data, list):
                data = data[0]
            tokens = _int((data.get("meta_info") or {}).get("completion_tokens"), 0)
        except (ValueError, AttributeError, IndexError, TypeError):
            self.last_probe_error = "/generate returned no JSON object"
            return False
        self.generated_tokens = tokens
        if tokens < want:
            self.last_probe_error = "/generate returned %d of %d tokens" % (tokens, want)
            return False
        return True

    # -- loop -------------------------------------------------------------------------------
    def _failed_state(self, props):
        """A reason string when systemd says the server process is gone or crash-looping."""
        if props.get("LoadState") == "not-found":
            return "unit %s is not installed (LoadState=not-found)" % self.unit
        active = props.get("ActiveState")
        sub = props.get("SubState")
        restarts = max(_int(props.get("NRestarts")) - self.base_restarts, self.chain_restarts)
        if active == "failed":
            return "unit %s failed (Result=%s, ExecMainStatus=%s)" % (
                self.unit, props.get("Result"), props.get("ExecMainStatus"))
        if sub == "auto-restart":
            return "unit %s crashed and is waiting to restart (NRestarts=%s)" % (self.unit, props.get("NRestarts"))
        if restarts > self.p["max_restarts"]:
            return "unit %s restarted %d time(s) while waiting" % (self.unit, restarts)
        if active in ("inactive", "deactivating"):
            return "unit %s is %s (not started, or stopped while waiting)" % (self.unit, active)
        return None

    def wait(self):
        start = self.clock()
        deadline = start + self.p["timeout"]
        reason = None
        failure_class = None
        while True:
            props = self.show()
            if self.base_restarts is None:
                # NRestarts is not reliably reset by a manual start (systemd 252 keeps it after a
                # stop during auto-restart), so it only measures growth while waiting; crashes
                # before the first poll are counted from the journal when `since` is given.
                self.base_restarts = _int(props.get("NRestarts"))
                if self.p.get("since") is not None:
                    self.run_chain(JOURNAL_SCAN_LINES)
            reason = self._failed_state(props)
            if reason:
                break
            if props.get("ActiveState") in ("active", "reloading", "activating"):
                lines = self.journal(JOURNAL_SCAN_LINES)
                if journal.is_fatal(lines):
                    reason = "the journal of %s shows a fatal error while the process still runs" % self.unit
                    break
                if self.probe():
                    return self.result(start, ready=True)
            if self.clock() >= deadline:
                failure_class = "timeout"
                reason = "%s not ready after %ss" % (self.unit, self.p["timeout"])
                if self.last_probe_error:
                    reason += " (last probe: %s)" % self.last_probe_error
                break
            self.sleep(min(self.p["interval"], max(0.0, deadline - self.clock())))
        cls, line, lines = self.classify_run(JOURNAL_ANALYSIS_LINES)
        if failure_class is None:
            failure_class = cls
        elif failure_class == "timeout":
            lines = self.journal(JOURNAL_ANALYSIS_LINES)
        return self.result(start, ready=False, failure_class=failure_class, failure_line=line,
                           reason=reason, lines=lines)

    def result(self, start, ready, failure_class=None, failure_line=None, reason=None, lines=None):
        props = self.props
        if lines is None:
            lines = self.journal(self.p["journal_lines"]) if not ready else []
        pool_lines = lines
        if ready:
            # The pools are logged early in a start: read the whole current invocation.
            chain = self.run_chain(JOURNAL_ANALYSIS_LINES)
            pool_lines = chain[-1][1] if chain else []
        data = {
            "ready": ready,
            "seconds": round(self.clock() - start, 3),
            "failure_class": failure_class,
            "failure_line": failure_line,
            "journal_tail": journal.tail(lines, self.p["journal_lines"]),
            "nrestarts": _int(props.get("NRestarts")),
            "restarts_during_wait": max(_int(props.get("NRestarts")) - (self.base_restarts or 0), self.chain_restarts),
            "active_state": props.get("ActiveState"),
            "sub_state": props.get("SubState"),
            "exec_main_status": _int(props.get("ExecMainStatus")),
            "invocation_ids": list(self.invocations),
            "health_status": self.health_status,
            "generated_tokens": self.generated_tokens,
            "pool": journal.pool_facts(pool_lines),
        }
        data["port_holders"] = []
        if not ready:
            data["hint"] = journal.hint(failure_class)
            if failure_class == "port_in_use":
                data["port_holders"], data["hint"] = self.port_in_use_hint()
            data["msg"] = "%s: failure_class=%s: %s" % (reason, failure_class, data["hint"])
        else:
            data["msg"] = "%s ready after %.1fs" % (self.unit, data["seconds"])
        return data

    def port(self):
        """The server's port, from base_url (80/443 when it names none)."""
        parsed = urlparse(self.p["base_url"])
        try:
            return parsed.port or (443 if parsed.scheme == "https" else 80)
        except ValueError:
            return None

    def port_in_use_hint(self):
        """(holders, hint) for a port in use: who holds the port now (the failed server is gone,
        so what still listens there is the other process), named with its pid and command."""
        port = self.port()
        holders = list(self.holders(port) or []) if (self.holders and port) else []
        if not holders:
            return [], "%s (no process holding port %s could be named from /proc)" % (
                journal.hint("port_in_use").rstrip("."), port)
        return holders, "Port %s is held by %s: stop that process or give the unit another port (sglang_service_port)." % (
            port, procs.describe_holders(holders))


def _http(method, url, body, headers, timeout):
    """(status, text); status None when no HTTP answer came (refused, timeout, reset)."""
    try:
        # Loopback only: no proxy (a node's http_proxy must not see the probe), no redirects.
        resp = open_url(url, data=body, headers=headers, method=method, timeout=timeout,
                        use_proxy=False, follow_redirects="none")
        try:
            return resp.getcode(), resp.read().decode("utf-8", "replace")
        finally:
            resp.close()
    except HTTPError as exc:
        return exc.code, ""
    except (URLError, socket.timeout, ConnectionError, OSError) as exc:
        return None, str(getattr(exc, "reason", exc))


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "base_url": {"type": "str", "default": "http://127.0.0.1:30000"},
            "api_key": {"type": "str", "no_log": True},
            "api_key_file": {"type": "path"},
            "timeout": {"type": "int", "default": 1800},
            "interval": {"type": "float", "default": 2.0},
            "request_timeout": {"type": "float", "default": 60.0},
            "probe_generate": {"type": "bool", "default": True},
            "probe_max_new_tokens": {"type": "int", "default": 4, "no_log": False},
            "max_restarts": {"type": "int", "default": 0},
            "journal_lines": {"type": "int", "default": 60},
            "since": {"type": "float"},
            "fail_on_error": {"type": "bool", "default": True},
        },
        mutually_exclusive=[["api_key", "api_key_file"]],
        supports_check_mode=True,
    )
    p = module.params
    key_error = sglang_api_key.resolve(p, module)
    if key_error:
        module.fail_json(msg=key_error, ready=False, failure_class="unknown")
    for key, low in (("timeout", 1), ("probe_max_new_tokens", 1), ("max_restarts", 0), ("journal_lines", 0)):
        if p[key] < low:
            module.fail_json(msg="%s must be >= %d, got %s" % (key, low, p[key]))
    if p["interval"] <= 0 or p["request_timeout"] <= 0:
        module.fail_json(msg="interval and request_timeout must be > 0 seconds")
    if not p["base_url"].startswith(("http://", "https://")):
        module.fail_json(msg="base_url must start with http:// or https://, got %r" % p["base_url"])
    if module.get_bin_path("systemctl") is None:
        module.fail_json(msg="systemctl not found: this module needs a systemd node")

    def run(argv):
        # The journal can be large; decode leniently rather than fail on a stray byte.
        return module.run_command(argv, errors="surrogate_or_replace")

    waiter = Waiter(p, run, _http, holders=procs.port_holders)
    try:
        data = waiter.wait()
    except RuntimeError as exc:
        module.fail_json(msg=str(exc), ready=False, failure_class="unknown")
    facts = {"sglang_service_wait": dict(data)}
    msg = data.pop("msg")
    if not data["ready"] and p["fail_on_error"]:
        module.fail_json(msg=msg, ansible_facts=facts, **data)
    module.exit_json(changed=False, msg=msg, ansible_facts=facts, **data)


if __name__ == "__main__":
    main()
