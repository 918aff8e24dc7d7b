# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""What the role mtp_tune used to write inline in its YAML, each taking one mapping the role builds
once in roles/mtp_tune/vars/main.yml instead of long positional lists: the fit ladder
(mtp_tune_fit_plan, published as the filter mtp_tune_fit_ladder), the workload fingerprint
(mtp_tune_workload, published as mtp_tune_fingerprint), and the winner's one-line summary
(mtp_tune_winner_line).  Controller-side library of plugins/filter/mtp_tune.py and mtp_resume.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_fit import mtp_tune_fit_ladder
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_resume import mtp_tune_fingerprint

# The keys of the fit settings (roles/mtp_tune/vars/main.yml _mtp_tune_fit_settings), in the
# order of mtp_tune_fit_ladder's arguments.
FIT_KEYS = ("cuda_graph_max_bs", "max_running_requests", "bs_floor", "mrr_floor", "default_bs", "default_mrr",
            "levers", "allow_capped", "radix_cache")


def _called_with(func, settings, keys, filter_name, var):
    """``func(**settings)`` after checking ``settings`` is the role's mapping ``var`` with only
    ``keys`` (one left out takes func's default); the filter ``filter_name`` names both in an error."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError("%s: expected the mapping %s, got %r" % (filter_name, var, settings))
    unknown = sorted(set(settings) - set(keys))
    if unknown:
        raise AnsibleFilterError("%s: %s has %s, not among %s" % (filter_name, var, ", ".join(unknown), ", ".join(keys)))
    return func(**settings)


def mtp_tune_fit_plan(settings):
    """mtp_tune_fit_ladder's plan from one mapping of its arguments (FIT_KEYS; one left out takes
    mtp_tune_fit_ladder's default), the filter mtp_tune_fit_ladder."""
    return _called_with(mtp_tune_fit_ladder, settings, FIT_KEYS, "mtp_tune_fit_ladder", "_mtp_tune_fit_settings")


# The keys of the workload settings (roles/mtp_tune/vars/main.yml _mtp_tune_workload_settings), the
# arguments of mtp_tune_fingerprint.
WORKLOAD_KEYS = ("bench", "model", "release", "tp", "dataset_sha256", "levels")


def mtp_tune_workload(settings):
    """mtp_tune_fingerprint from one mapping of its arguments (WORKLOAD_KEYS; one left out is
    None), the filter mtp_tune_fingerprint."""
    return _called_with(mtp_tune_fingerprint, settings, WORKLOAD_KEYS, "mtp_tune_fingerprint", "_mtp_tune_workload_settings")


def mtp_tune_winner_line(winner):
    """The winner in one line: ``steps=3 topk=1 draft=4 {'cuda_graph_max_bs': 8} (sweep)``, a
    per-load schedule named by its label (``schedule 1:4 4:3``) instead of its config, ``none``
    without a winner."""
    if not winner:
        return "none"
    cand = winner.get("candidate") or {}
    schedule, rest = spec_schedule.split_overrides(winner.get("overrides"))
    overrides = dict((k, v) for k, v in rest.items() if v)
    head = "steps=%s topk=%s draft=%s" % (cand.get("steps"), cand.get("topk"), cand.get("draft_tokens"))
    if schedule is not None:
        head += " schedule %s" % schedule
    return "%s %s (%s)" % (head, overrides, winner.get("decided_by"))
