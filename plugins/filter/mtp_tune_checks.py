# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters of the mtp_tune role's server-free checks and advice; the decisions are made in
plugins/plugin_utils/mtp_tune_checks.py (and the spec's check in mtp_settings.py), this file only
publishes them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import spec_problems
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_tune_checks import (
    mtp_tune_dataset_problems, mtp_tune_no_winner_message, mtp_tune_smoke_due)


class FilterModule(object):
    """Checks of mtp_tune (plugins/plugin_utils/mtp_tune_checks.py)."""

    def filters(self):
        return {
            "mtp_tune_dataset_problems": mtp_tune_dataset_problems,
            "mtp_tune_no_winner_message": mtp_tune_no_winner_message,
            "mtp_tune_smoke_due": mtp_tune_smoke_due,
            "mtp_tune_spec_problems": spec_problems,
        }
