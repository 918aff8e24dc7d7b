# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of a tuning run that meets what an earlier run left: which measurements may be reused,
what a run in progress marks on the node, how an interrupted run is picked up, and whether a run
has nothing left to do. The decisions are made in plugins/plugin_utils/mtp_resume.py,
mtp_noop.py and mtp_role_settings.py; this file only publishes those the role asks for.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_resume import (
    mtp_tune_active_plan, mtp_tune_bench_deadline, mtp_tune_resume_plan, mtp_tune_run_state, mtp_tune_runs)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_role_settings import mtp_tune_workload
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_noop import mtp_tune_inputs_digest, mtp_tune_noop


class FilterModule(object):
    """Filters for resuming MTP tuning runs."""

    def filters(self):
        return {
            "mtp_tune_fingerprint": mtp_tune_workload,
            "mtp_tune_resume_plan": mtp_tune_resume_plan,
            "mtp_tune_runs": mtp_tune_runs,
            "mtp_tune_run_state": mtp_tune_run_state,
            "mtp_tune_active_plan": mtp_tune_active_plan,
            "mtp_tune_bench_deadline": mtp_tune_bench_deadline,
            "mtp_tune_noop": mtp_tune_noop,
            "mtp_tune_inputs_digest": mtp_tune_inputs_digest,
        }
