# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""The node's own record of what it serves (``<config_dir>/<name>/setting.json``) and the API key
kept beside it, as pure functions.

sglang_service_setting (precedence: variable given > node record > defaults);
sglang_service_record (the record to keep after this run, provenance kept when nothing changed);
sglang_service_provenance_line (who chose the setting, for the unit's comment);
sglang_service_secrets_yaml (the ``--config`` file text); sglang_service_node_key (the key read
back from that file or from the older EnvironmentFile layout).

Controller-side library of plugins/filter/service.py; the settings themselves are read by
plugins/plugin_utils/service_args.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json
import re

from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_api_key
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule
from ansible_collections.blackwell.sglang.plugins.plugin_utils.service_args import (
    ADAPTIVE_KEYS, LEVER_KEYS, SPEC_KEYS, AnsibleFilterError, _adaptive_on, _levers, normalize,
    sglang_service_spec)

RECORD_SCHEMA = 1
# What the record governs: the speculative setting and the overrides a fit search may choose.
# Everything else of the unit (model, tp, port, ...) is inventory, not a decision to remember.
RECORD_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
               "speculative_num_draft_tokens", "speculative_draft_model_path", "cuda_graph_max_bs",
               "max_running_requests") + LEVER_KEYS + ADAPTIVE_KEYS
# Keys a record written before them lacks; unset, they stay absent (nothing to rewrite).
_LATER_KEYS = LEVER_KEYS + ADAPTIVE_KEYS
# One decision: steps, topk and draft tokens are only consistent together.
_SPEC_TRIPLE = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


def _given(value):
    """A variable counts as given unless it is None (the role defaults say null = not given)."""
    return value is not None


def _record_setting(record):
    if isinstance(record, dict) and isinstance(record.get("setting"), dict):
        return normalize(record["setting"])
    return None


def sglang_service_setting(given, record=None, defaults=None):
    """The setting to serve, by precedence: a variable given > the node's record > defaults.

    ``given`` holds RECORD_KEYS as the play passed them (None = not given; ``""`` for the
    algorithm = speculation off, which is given). ``record`` is the node's record (or None,
    or ``{}``), ``defaults`` the role's starting point. Steps, topk and draft tokens are one
    decision: members that were not given come from the record only when every given member
    agrees with it (``-e ..._eagle_topk=1`` on a node recorded at steps 4, topk 1 keeps steps 4);
    otherwise from the defaults, so a new step count never inherits an old draft count.

    The schedule follows its switch likewise: a schedule that was not given comes from the record
    only when the switch was not given or agrees with the record's, so ``-e
    sglang_service_speculative_adaptive=false`` drops a recorded schedule and turning it on again
    starts from SGLang's built-in one unless a schedule is given.

    Returns ``{"setting": {key: value}, "sources": {key: "variable"|"node"|"default"}}``.
    """
    if given is not None and not isinstance(given, dict):
        raise AnsibleFilterError("sglang_service_setting: given must be a dict, got %s" % type(given).__name__)
    given = normalize(given or {})
    rec = _record_setting(record)
    base = normalize(defaults or {})
    setting, sources = {}, {}

    def take(key, from_record):
        if _given(given.get(key)):
            setting[key], sources[key] = given[key], "variable"
        elif from_record and rec is not None and key in rec:
            setting[key], sources[key] = rec[key], "node"
        else:
            setting[key], sources[key] = base.get(key), "default"

    triple_agrees = rec is not None and all(
        given.get(k) == rec.get(k) for k in _SPEC_TRIPLE if _given(given.get(k)))
    switch_agrees = rec is not None and (not _given(given.get("speculative_adaptive")) or bool(
        given.get("speculative_adaptive")) == bool(rec.get("speculative_adaptive")))
    for key in RECORD_KEYS:
        if key in _SPEC_TRIPLE:
            take(key, triple_agrees)
        elif key == "speculative_adaptive_config":
            take(key, switch_agrees)
        else:
            take(key, True)
    return {"setting": setting, "sources": sources}


def _resolved(setting):
    """The record's form of a setting: speculative values as SGLang will run them."""
    setting = normalize(setting or {})
    spec = sglang_service_spec(setting)
    out = dict((key, setting.get(key)) for key in RECORD_KEYS)
    for key in SPEC_KEYS:
        out[key] = spec[key]
    if not spec["enabled"]:
        out["speculative_algorithm"] = None
    for key in LEVER_KEYS:
        out[key] = _levers(setting).get(key)
    # Served or not, as the argv says: off and unset are one setting, and so are {} and null.
    on = _adaptive_on(setting)
    out["speculative_adaptive"] = True if on else None
    out["speculative_adaptive_config"] = spec_schedule.canonical(setting.get("speculative_adaptive_config")) if on else None
    return out


def sglang_service_record(setting, record=None, release=None, provenance=None, now=None):
    """The node's record after this run, and whether it changes.

    When the resolved ``setting`` equals the recorded one, the record is kept as it is, its
    provenance included (a re-run, or a rollout to the setting already serving, is not a new
    decision); only ``release`` is brought up to date. Otherwise a new record names who chose
    the setting (``provenance``: by, run, why), when (``now``), and keeps the one before it
    under ``previous``.

    Returns ``{"record": {...}, "changed": bool, "setting_changed": bool}``.
    """
    if provenance is not None and not isinstance(provenance, dict):
        raise AnsibleFilterError("sglang_service_record: provenance must be a dict, got %s"
                                 % type(provenance).__name__)
    new_setting = _resolved(setting)
    old = record if isinstance(record, dict) and record else None
    old_setting = _resolved(old["setting"]) if old and isinstance(old.get("setting"), dict) else None
    if old_setting is not None and old_setting == new_setting:
        out = dict(old)
        out["schema"] = RECORD_SCHEMA
        # A record written before the levers existed lacks them; unset, they stay absent, so a
        # re-run rewrites nothing.
        out["setting"] = dict((k, v) for k, v in new_setting.items()
                              if not (k in _LATER_KEYS and v is None and k not in old["setting"]))
        out["release"] = release if release is not None else old.get("release")
        return {"record": out, "changed": out != old, "setting_changed": False}
    prov = dict((k, v) for k, v in (provenance or {}).items() if v not in (None, ""))
    prov.setdefault("by", "service")
    prov["at"] = now
    out = {"schema": RECORD_SCHEMA, "setting": new_setting, "release": release, "provenance": prov}
    if old:
        out["previous"] = {"setting": old.get("setting"), "release": old.get("release"),
                           "provenance": old.get("provenance")}
    return {"record": out, "changed": True, "setting_changed": True}


def sglang_service_provenance_line(record):
    """One comment line for the unit: who chose its setting, when and why."""
    prov = (record or {}).get("provenance") or {}
    if not prov:
        return ""
    head = "%s%s at %s" % (prov.get("by", "?"), (" " + str(prov["run"])) if prov.get("run") else "",
                           prov.get("at") or "?")
    why = prov.get("why")
    return re.sub(r"[\r\n]+", " ", head + (": " + str(why) if why else ""))


def sglang_service_secrets_yaml(api_key, header=None):
    """Text of the SGLang ``--config`` file holding the API key.

    The key is written as a JSON string, which YAML reads back verbatim (quotes, backslashes,
    '#', ':' included) and which stays a string even when it looks like a number or a boolean.
    """
    key = "" if api_key is None else str(api_key)
    if not key:
        raise AnsibleFilterError("sglang_service_secrets_yaml: the API key is empty")
    lines = ["# %s" % line for line in (header or [])]
    lines.append("api-key: %s" % json.dumps(key))
    return "\n".join(lines) + "\n"


def sglang_service_node_key(text, kind="config"):
    """The API key configured on a node, read from its ``--config`` YAML (``kind="config"``) or
    from the EnvironmentFile of the older layout (``kind="env"``: ``SGLANG_API_KEY='...'``).
    Empty string when the text holds none."""
    text = text or ""
    if kind == "env":
        for line in text.splitlines():
            match = re.match(r"^\s*SGLANG_API_KEY=(.*)$", line)
            if match:
                value = match.group(1).strip()
                if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                    value = value[1:-1]
                return value
        return ""
    if kind != "config":
        raise AnsibleFilterError("sglang_service_node_key: kind must be config or env, got %r" % (kind,))
    # the same reading as the modules' on the node (api_key_file); a hand-edited file that is not
    # YAML: say so, never echo its text
    try:
        return sglang_api_key.key_from_text(text)
    except sglang_api_key.ApiKeyFileError as exc:
        raise AnsibleFilterError("sglang_service_node_key: the --config file is %s" % exc)


def _b64_text(content):
    """What ansible.builtin.slurp read (base64), as text, the way the b64decode filter decodes it."""
    return base64.b64decode(str(content).encode("utf-8")).decode("utf-8", errors="surrogateescape")


def sglang_service_key_in_use(given, state="present", config_content=None, legacy_content=None):
    """The API key the server is started with and every probe sends.

    ``state="absent"`` -> none (the ``--config`` file is removed); a key given -> that one, replacing
    the node's; otherwise the node's, read back from its ``--config`` file (``config_content``, as
    ansible.builtin.slurp returns it, base64) or else from the EnvironmentFile of the older layout
    (``legacy_content``); none when neither was read. So a run that does not mention the key never
    removes or changes it.
    """
    if state == "absent":
        return ""
    given = "" if given is None else str(given)
    if given:
        return given
    if config_content is not None:
        return sglang_service_node_key(_b64_text(config_content), "config")
    if legacy_content is not None:
        return sglang_service_node_key(_b64_text(legacy_content), "env")
    return ""
