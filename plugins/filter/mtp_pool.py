# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of a pool of identical nodes tuning together (mtp_tune_pool); the logic is in
plugins/plugin_utils/mtp_pool.py, this file only publishes it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_pool import (
    mtp_tune_pool_attempts, mtp_tune_pool_identity, mtp_tune_pool_next, mtp_tune_pool_problems)


class FilterModule(object):
    """Filters of a tuning pool."""

    def filters(self):
        return {
            "mtp_tune_pool_identity": mtp_tune_pool_identity,
            "mtp_tune_pool_problems": mtp_tune_pool_problems,
            "mtp_tune_pool_attempts": mtp_tune_pool_attempts,
            "mtp_tune_pool_next": mtp_tune_pool_next,
        }
