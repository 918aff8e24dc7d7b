# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters of the fleet rollout (role ``rollout``, playbook ``rollout.yml``). The decisions are made
in plugins/plugin_utils/rollout_setting.py (what to roll out), rollout_gate.py (whether a node's new
setting held) and rollout_summary.py (the fleet summary); this file only publishes them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils.rollout_gate import (
    rollout_budget, rollout_failed_record, rollout_failure, rollout_smoke_check, rollout_start_failure, rollout_stop_reason,
    rollout_unit_state, rollout_unit_steady)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.rollout_setting import (
    rollout_kind, rollout_requested, rollout_tuned_setting, rollout_unit_settings, setting_label)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.rollout_summary import (
    rollout_summary, rollout_summary_json, rollout_summary_markdown)


class FilterModule(object):
    """Rollout decisions (plugins/plugin_utils/rollout_*.py)."""

    def filters(self):
        return {
            "rollout_requested": rollout_requested,
            "rollout_tuned_setting": rollout_tuned_setting,
            "rollout_unit_settings": rollout_unit_settings,
            "rollout_smoke_check": rollout_smoke_check,
            "rollout_budget": rollout_budget,
            "rollout_summary": rollout_summary,
            "rollout_summary_markdown": rollout_summary_markdown,
            "rollout_summary_json": rollout_summary_json,
            "rollout_setting_label": setting_label,
            "rollout_unit_state": rollout_unit_state,
            "rollout_unit_steady": rollout_unit_steady,
            "rollout_failed_record": rollout_failed_record,
            "rollout_kind": rollout_kind,
            "rollout_start_failure": rollout_start_failure,
            "rollout_failure": rollout_failure,
            "rollout_stop_reason": rollout_stop_reason,
        }
