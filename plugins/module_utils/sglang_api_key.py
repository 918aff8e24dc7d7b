# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""The API key of a served node, read on the node from the SGLang ``--config`` file.

The service role writes the key to a 0640 ``--config`` YAML (``api-key: "<json string>"``) and
publishes only that file's path (``sglang_service_names.api_key_file``): the modules that talk to
the server (sglang_bench, sglang_service_wait, sglang_greedy) read it where they run, so the key
never becomes a fact, an argument or a log line on the controller. Stdlib only (PyYAML when the
node has it, for a hand-edited file).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

_KEYS = ("api-key", "api_key")


class ApiKeyFileError(Exception):
    """The file exists but cannot be read or parsed; the message names the path, never the text."""


def _scalar(value):
    """One YAML scalar as the service role writes it (a JSON string) or as a person might."""
    value = value.strip()
    if value.startswith('"'):
        try:
            return json.loads(value)
        except ValueError:
            return None
    if value.startswith("'") and value.endswith("'") and len(value) >= 2:
        return value[1:-1].replace("''", "'")
    return re.sub(r"\s+#.*$", "", value)


def key_from_text(text):
    """The key a ``--config`` YAML text holds, '' when it holds none. Raises ApiKeyFileError for a
    text that is not a YAML mapping (a hand edit gone wrong), without quoting it."""
    text = text or ""
    if not text.strip():
        return ""
    try:
        import yaml
    except ImportError:
        yaml = None
    if yaml is not None:
        try:
            data = yaml.safe_load(text)
        except Exception as exc:  # pylint: disable=broad-except  # any parser error: say which, not the text
            raise ApiKeyFileError("not valid YAML (%s)" % type(exc).__name__)
        if not isinstance(data, dict):
            return ""
        for key in _KEYS:
            if data.get(key) not in (None, ""):
                return str(data[key])
        return ""
    for line in text.splitlines():
        match = re.match(r"^(api-key|api_key)\s*:(.*)$", line)
        if match:
            value = _scalar(match.group(2))
            if value is None:
                raise ApiKeyFileError("its %s line is not a valid YAML string" % match.group(1))
            if value:
                return value
    return ""


def read_key_file(path):
    """The key in the file at ``path``; '' when the file does not exist (the server was started
    without a key: the role removes the file with the key). Raises ApiKeyFileError when it exists
    and cannot be read or parsed."""
    if not os.path.exists(path):
        return ""
    try:
        with open(path) as fh:
            text = fh.read()
    except (IOError, OSError) as exc:
        raise ApiKeyFileError("api_key_file %s cannot be read (%s): run the module as a user of the file's group, "
                              "or with become" % (path, exc.__class__.__name__))
    try:
        return key_from_text(text)
    except ApiKeyFileError as exc:
        raise ApiKeyFileError("api_key_file %s is %s: it must be SGLang's --config YAML with an api-key entry" % (path, exc))


def resolve(params, module=None):
    """Fill ``params["api_key"]`` from ``params["api_key_file"]`` when that is given, and have
    ``module`` (an AnsibleModule) mask the key in everything it returns, as it masks a no_log
    argument: a journal tail quoting the server's arguments must not carry it either. Returns an
    error message (for fail_json) or None."""
    path = params.get("api_key_file")
    if not path:
        return None
    try:
        params["api_key"] = read_key_file(path) or None
    except ApiKeyFileError as exc:
        return str(exc)
    if module is not None and params["api_key"]:
        module.no_log_values.add(params["api_key"])
    return None
