# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters of what a failed start leaves on the node (the service and rollout roles' rollback);
the decisions are made in plugins/plugin_utils/service_start.py, this file only publishes them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils.service_start import (
    sglang_service_result, sglang_service_rollback_action, sglang_service_start_report, sglang_service_unit_base_url)


class FilterModule(object):
    """Failed-start decisions (plugins/plugin_utils/service_start.py)."""

    def filters(self):
        return {
            "sglang_service_result": sglang_service_result,
            "sglang_service_rollback_action": sglang_service_rollback_action,
            "sglang_service_start_report": sglang_service_start_report,
            "sglang_service_unit_base_url": sglang_service_unit_base_url,
        }
