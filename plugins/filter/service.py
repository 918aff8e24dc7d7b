# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters of the service role: the SGLang command line and unit text built from the role's
logical settings (plugins/plugin_utils/service_args.py), and the node's own record of what it
serves (plugins/plugin_utils/service_record.py). This file only publishes them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils.service_args import (
    sglang_service_adaptive_file, sglang_service_args, sglang_service_name_problems, sglang_service_problems,
    sglang_service_summary, sglang_service_watchdog_problems, sglang_systemd_env, sglang_systemd_exec)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.service_record import (
    sglang_service_key_in_use, sglang_service_node_key, sglang_service_provenance_line, sglang_service_record, sglang_service_secrets_yaml,
    sglang_service_setting)


class FilterModule(object):
    """Service decisions (plugins/plugin_utils/service_args.py, service_record.py)."""

    def filters(self):
        return {
            "sglang_service_args": sglang_service_args,
            "sglang_service_problems": sglang_service_problems,
            "sglang_service_watchdog_problems": sglang_service_watchdog_problems,
            "sglang_service_name_problems": sglang_service_name_problems,
            "sglang_service_summary": sglang_service_summary,
            "sglang_service_adaptive_file": sglang_service_adaptive_file,
            "sglang_systemd_exec": sglang_systemd_exec,
            "sglang_systemd_env": sglang_systemd_env,
            "sglang_service_setting": sglang_service_setting,
            "sglang_service_record": sglang_service_record,
            "sglang_service_provenance_line": sglang_service_provenance_line,
            "sglang_service_secrets_yaml": sglang_service_secrets_yaml,
            "sglang_service_node_key": sglang_service_node_key,
            "sglang_service_key_in_use": sglang_service_key_in_use,
        }
