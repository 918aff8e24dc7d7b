#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_node_info
short_description: Read what an SGLang node serves and why, from its own record
version_added: 0.1.0
description:
  - Reads the record the C(blackwell.sglang.service) role keeps on the node,
    C(<config_dir>/<name>/setting.json) - the speculative setting, the overrides a fit search
    chose, the SGLang release, and who chose them, when and why - and the state of the
    C(sglang-<name>.service) unit.
  - The record is the default every role of the collection starts from (install, service,
    mtp_tune, rollout), so a later run that does not restate a setting keeps it. Precedence is
    a variable given to the play, then this record, then the role defaults.
  - Says whether an API key is configured (the SGLang C(--config) file exists) without ever
    reading or returning the key.
  - Read-only. Runs in check mode too, and never reports a change.
options:
  name:
    description:
      - Name of the server; the unit is C(sglang-<name>.service), like the service role's
        C(sglang_service_name).
    type: str
    default: qwen
  config_dir:
    description:
      - The service role's C(sglang_service_config_dir).
    type: path
    default: /etc/sglang
  status_root:
    description:
      - The service role's C(sglang_service_status_root), where the unit itself records how its
        runs ended (C(<name>/status.json)) and what its watchdog did (C(<name>/watchdog.json)).
    type: path
    default: /var/lib/blackwell-sglang
extends_documentation_fragment:
  - blackwell.sglang.attributes
  - blackwell.sglang.attributes.facts
  - blackwell.sglang.attributes.info_module
notes:
  - The record is written by the service role only after the unit came up ready, so it names
    a setting that served. A record that cannot be parsed fails the task with its path; it is
    never silently replaced.
  - Unit fields are empty when C(systemctl) is missing or the unit is not installed.
seealso:
  - module: blackwell.sglang.sglang_service_wait
author:
  - blackwell.sglang maintainers (@blackwell)
"""

EXAMPLES = r"""
---
- name: Read the node's setting and its provenance
  blackwell.sglang.sglang_node_info:
    name: qwen
  register: node

- name: Say what the node serves and who chose it
  ansible.builtin.debug:
    msg: >-
      steps {{ node.record.setting.speculative_num_steps }} chosen by
      {{ node.record.provenance.by }} at {{ node.record.provenance.at }}
      ({{ node.record.provenance.why | default('') }}); unit {{ node.unit.active_state }}
  when: node.record is not none

- name: The same data as a fact
  ansible.builtin.debug:
    var: ansible_facts.sglang_node_info.unit.invocation_id
"""

RETURN = r"""
name:
  description: The server's name.
  returned: always
  type: str
  sample: qwen
record:
  description:
    - The node's record, or V(null) when none was written yet (a node set up by hand or by an
      older version of the collection).
  returned: always
  type: dict
  contains:
    schema:
      description: Version of the record's layout.
      type: int
      sample: 1
    setting:
      description:
        - The speculative setting and the fit overrides, as SGLang runs them (draft tokens
          derived, algorithm upper-case); V(null) values leave SGLang its default.
        - With SGLang's per-load schedule served, C(speculative_adaptive) is V(true) and
          C(speculative_adaptive_config) the schedule itself, batch sizes as strings (the form of
          its file C(<config_dir>/<name>/adaptive-<digest>.json)), V(null) for the release's
          built-in one; a record from before these keys lacks them.
      type: dict
      sample:
        speculative_algorithm: NEXTN
        speculative_num_steps: 4
        speculative_eagle_topk: 1
        speculative_num_draft_tokens: 5
        speculative_draft_model_path: null
        cuda_graph_max_bs: 256
        max_running_requests: null
    release:
      description: SGLang release whose flags the unit was rendered for.
      type: str
      sample: 0.5.23
    provenance:
      description: Who chose the setting (V(mtp_tune), V(rollout), V(service)), in which run, when (UTC) and why.
      type: dict
      sample:
        by: mtp_tune
        run: adaptive-latency
        at: "2026-05-01T10:00:00Z"
        why: "steps 4 (topk 1, 5 draft tokens) for latency: 277.0 at C=1"
    previous:
      description: Setting, release and provenance of the record this one replaced.
      type: dict
      returned: when the setting changed at least once
  sample:
    schema: 1
    setting: {speculative_algorithm: NEXTN, speculative_num_steps: 4}
    release: 0.5.23
    provenance: {by: mtp_tune, run: r1, at: "2026-05-01T10:00:00Z"}
record_path:
  description: Where the record lives.
  returned: always
  type: str
  sample: /etc/sglang/qwen/setting.json
api_key_configured:
  description: Whether the SGLang C(--config) file with the API key exists (the key itself is never read).
  returned: always
  type: bool
  sample: true
secrets_path:
  description: Path of the SGLang C(--config) file that holds the API key.
  returned: always
  type: str
  sample: /etc/sglang/qwen/secrets.yaml
legacy_env_file:
  description:
    - Path of the EnvironmentFile older versions of the collection kept the key in, when it still
      exists (the service role migrates and removes it); V(null) otherwise.
  returned: always
  type: str
  sample: /etc/sglang/qwen.env
unit:
  description: The systemd unit's state (C(systemctl show)); values are V(null) when unknown.
  returned: always
  type: dict
  contains:
    name:
      description: Unit name.
      type: str
      sample: sglang-qwen.service
    installed:
      description: Whether systemd knows the unit (it has a unit file).
      type: bool
    active_state:
      description: C(ActiveState), e.g. V(active), V(failed), V(inactive).
      type: str
    sub_state:
      description: C(SubState), e.g. V(running), V(auto-restart).
      type: str
    invocation_id:
      description: C(InvocationID), new on every start; equal before and after a run that restarted nothing.
      type: str
    active_enter_timestamp:
      description: C(ActiveEnterTimestamp) as systemd prints it.
      type: str
    main_pid:
      description: C(MainPID) (0 when not running).
      type: int
    n_restarts:
      description: C(NRestarts), automatic restarts since the unit was last started by hand.
      type: int
    result:
      description: C(Result) of the unit's last run, e.g. V(success), V(exit-code), V(start-limit-hit).
      type: str
serving:
  description:
    - The serving state as the unit itself recorded it, without a playbook run - its exit record
      (written by C(ExecStopPost)) and its wedge watchdog.
  returned: always
  type: dict
  contains:
    ready:
      description:
        - V(true) when the unit runs and the watchdog's last check of this very start got tokens,
          V(false) when it runs and that check got none or the unit is not running, V(null) when
          no check of this start is recorded yet.
      type: bool
    last_failure:
      description:
        - Class (as sglang_service_wait classifies, or V(killed) when a signal ended it with no
          error of SGLang's own), journal line, time and hint of the last run that ended on its
          own; V(null) if none.
      type: dict
      sample: {class: oom_weights, line: "ValueError: Loaded weights leave no GPU memory ...", time: "2026-05-01T10:00:00Z"}
    consecutive_failures:
      description: Failed starts in a row (what the clean start backs off on).
      type: int
    restarts:
      description: Automatic restarts (C(NRestarts)) since the unit was last started by hand.
      type: int
    start_limit_hit:
      description:
        - Whether the crash-loop brake stopped the unit - C(Result=start-limit-hit), or a failed
          unit that systemd had been restarting (C(NRestarts) > 0; systemd keeps the last run's
          C(Result) when its start limit refuses an automatic restart).
      type: bool
    watchdog:
      description:
        - The watchdog's record (last check and result, its restarts, whether it gave up and
          stopped the unit, its last actions); V(null) before its first check.
      type: dict
    status_path:
      description: Path of the exit record.
      type: str
      sample: /var/lib/blackwell-sglang/qwen/status.json
    watchdog_path:
      description: Path of the watchdog's record.
      type: str
      sample: /var/lib/blackwell-sglang/qwen/watchdog.json
ansible_facts:
  description: The same data under C(sglang_node_info).
  returned: always
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.blackwell.sglang.plugins.module_utils import systemd

_PROPS = (
    ("LoadState", "load_state"),
    ("ActiveState", "active_state"),
    ("SubState", "sub_state"),
    ("InvocationID", "invocation_id"),
    ("ActiveEnterTimestamp", "active_enter_timestamp"),
    ("MainPID", "main_pid"),
    ("NRestarts", "n_restarts"),
    ("Result", "result"),
)


def paths(config_dir, name):
    """Where the service role keeps the record, the --config file and the older EnvironmentFile."""
    base = os.path.join(config_dir, name)
    return {
        "record": os.path.join(base, "setting.json"),
        "secrets": os.path.join(base, "secrets.yaml"),
        "legacy_env": os.path.join(config_dir, "%s.env" % name),
    }


def read_record(path):
    """The record as a dict, None when absent; ValueError with what to fix when unreadable."""
    try:
        with open(path) as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError("cannot read %s: %s" % (path, exc.strerror or exc))
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError("%s is not valid JSON (%s): fix it or remove it, and the next run of the "
                         "service role writes it again from the unit's variables" % (path, exc))
    if not isinstance(data, dict) or not isinstance(data.get("setting"), dict):
        raise ValueError("%s holds no setting object: fix it or remove it" % path)
    return data


def read_status(path, warn):
    """A JSON record the unit writes (atomically), None when absent or unreadable (warned)."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        warn("ignoring %s: %s" % (path, exc))
        return None
    return data if isinstance(data, dict) else None


def serving_state(unit, status, watchdog):
    """The RETURN's serving dict from the unit's state and its two records."""
    active = unit.get("active_state") == "active"
    ready = None
    if not active:
        ready = False if unit.get("installed") else None
    elif watchdog and watchdog.get("invocation_id") and \
            watchdog.get("invocation_id") == unit.get("invocation_id"):
        ready = bool(watchdog.get("ready"))
    status = status or {}
    return {
        "ready": ready,
        "last_failure": status.get("last_failure"),
        "consecutive_failures": int(status.get("consecutive_failures") or 0),
        "restarts": unit.get("n_restarts") or 0,
        # systemd 252 keeps the last run's Result (e.g. signal) when the start limit refuses an
        # automatic restart; a failed unit that systemd had been restarting was given up on.
        "start_limit_hit": unit.get("result") == "start-limit-hit" or (
            unit.get("active_state") == "failed" and int(unit.get("n_restarts") or 0) > 0),
        "watchdog": None if not watchdog else dict(
            (k, watchdog.get(k)) for k in ("last_check", "last_result", "restarts_total",
                                           "gave_up", "gave_up_at", "actions")),
    }


def parse_show(text):
    """`systemctl show -p A -p B` output (KEY=value lines) -> the unit dict of RETURN."""
    raw = systemd.parse_show(text)
    unit = {}
    for prop, key in _PROPS:
        value = raw.get(prop)
        if key in ("main_pid", "n_restarts"):
            try:
                value = int(value) if value not in (None, "", "[not set]") else None
            except ValueError:
                value = None
        elif value in ("", "n/a"):
            value = None
        unit[key] = value
    load = unit.pop("load_state")
    unit["installed"] = load not in (None, "not-found")
    return unit


def unit_state(module, unit_name):
    empty = dict((key, None) for _prop, key in _PROPS if key != "load_state")
    empty["installed"] = False
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return empty
    argv = [systemctl, "show", unit_name, "--no-pager"]
    for prop, _key in _PROPS:
        argv += ["-p", prop]
    rc, out, _err = module.run_command(argv)
    if rc != 0:
        return empty
    return parse_show(out)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", default="qwen"),
            config_dir=dict(type="path", default="/etc/sglang"),
            status_root=dict(type="path", default="/var/lib/blackwell-sglang"),
        ),
        supports_check_mode=True,
    )
    name = module.params["name"]
    if not name or "/" in name or name in (".", ".."):
        module.fail_json(msg="name must be a server name such as qwen (letters, digits, '_', '.', '-'), got %r" % name)
    where = paths(module.params["config_dir"], name)
    try:
        record = read_record(where["record"])
    except ValueError as exc:
        module.fail_json(msg=str(exc), record_path=where["record"])
    unit_name = "sglang-%s.service" % name
    unit = unit_state(module, unit_name)
    unit["name"] = unit_name
    info = {
        "name": name,
        "record": record,
        "record_path": where["record"],
        "api_key_configured": os.path.exists(where["secrets"]),
        "secrets_path": where["secrets"],
        "legacy_env_file": where["legacy_env"] if os.path.exists(where["legacy_env"]) else None,
        "unit": unit,
    }
    status_dir = os.path.join(module.params["status_root"], name)
    status_path = os.path.join(status_dir, "status.json")
    watchdog_path = os.path.join(status_dir, "watchdog.json")
    serving = serving_state(unit, read_status(status_path, module.warn),
                            read_status(watchdog_path, module.warn))
    serving["status_path"] = status_path
    serving["watchdog_path"] = watchdog_path
    info["serving"] = serving
    result = dict(info)
    result["changed"] = False
    result["ansible_facts"] = {"sglang_node_info": info}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
