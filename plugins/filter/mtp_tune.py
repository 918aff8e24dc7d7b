# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the MTP/EAGLE tuning loop.

The role ``mtp_tune`` only moves data around (restart, wait, benchmark, record); every decision
(which candidate next, whether to retry smaller, who won, whether a converged server still
performs) is made in plugins/plugin_utils/mtp_*.py, so that it can be unit-tested without a
server. This file only publishes the decisions the role asks for; the decision filters take the
run's spec (``_mtp_tune_spec``, plugins/plugin_utils/mtp_settings.py spec_from) as one argument.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_cap import mtp_tune_numerics_plan
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import mtp_tune_capped
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_node import mtp_tune_node_fault, mtp_tune_node_fault_message
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_record import mtp_tune_attempt
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import (
    mtp_tune_level_metrics, mtp_tune_progress, mtp_tune_verify)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import (
    mtp_tune_complete, mtp_tune_cut_short, mtp_tune_next, mtp_tune_smoke_levels)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates, mtp_tune_levels
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_state_pool import mtp_tune_pool_predict
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_role_settings import mtp_tune_fit_plan, mtp_tune_winner_line
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_winner import mtp_tune_winner


class FilterModule(object):
    """Filters of the MTP tuning loop."""

    def filters(self):
        return {
            "mtp_tune_candidates": mtp_tune_candidates,
            "mtp_tune_levels": mtp_tune_levels,
            "mtp_tune_level_metrics": mtp_tune_level_metrics,
            "mtp_tune_winner": mtp_tune_winner,
            "mtp_tune_next": mtp_tune_next,
            "mtp_tune_complete": mtp_tune_complete,
            "mtp_tune_cut_short": mtp_tune_cut_short,
            "mtp_tune_smoke_levels": mtp_tune_smoke_levels,
            "mtp_tune_attempt": mtp_tune_attempt,
            "mtp_tune_fit_ladder": mtp_tune_fit_plan,
            "mtp_tune_verify": mtp_tune_verify,
            "mtp_tune_progress": mtp_tune_progress,
            "mtp_tune_capped": mtp_tune_capped,
            "mtp_tune_node_fault": mtp_tune_node_fault,
            "mtp_tune_node_fault_message": mtp_tune_node_fault_message,
            "mtp_tune_numerics_plan": mtp_tune_numerics_plan,
            "mtp_tune_pool_predict": mtp_tune_pool_predict,
            "mtp_tune_winner_line": mtp_tune_winner_line,
        }
