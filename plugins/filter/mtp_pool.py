# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of a pool of identical nodes tuning together (mtp_tune_pool); the logic is in
plugins/plugin_utils/mtp_pool.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_pool

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - ansible is always present where filters run
    class AnsibleFilterError(Exception):
        pass


def mtp_tune_pool_identity(gpus, workload=None, settings=None):
    """What a node says of itself for the pool's check: GPUs, workload fingerprint, settings."""
    if gpus is not None and not isinstance(gpus, dict):
        raise AnsibleFilterError("mtp_tune_pool_identity takes gpu_info's result (a dict), got %r" % (gpus,))
    return mtp_pool.identity(gpus, workload, settings)


def mtp_tune_pool_problems(hosts, hostvars, name="_mtp_tune_pool_identity"):
    """Why the nodes ``hosts`` cannot tune together (empty: they can), from each one's identity."""
    return mtp_pool.pool_problems(mtp_pool.host_facts(hostvars, hosts, name))


def mtp_tune_pool_attempts(hostvars, hosts):
    """Every node's attempts in one list, in node order, each tagged with its node."""
    return mtp_pool.pool_attempts(hostvars, hosts)


def mtp_tune_pool_next(pool, hosts, host, candidates, fit_ladder=None, spec=None, complete=False):
    """This round's launch for ``host`` and whether the pool goes on (see mtp_pool.pool_next)."""
    if not isinstance(hosts, (list, tuple)) or host not in hosts:
        raise AnsibleFilterError("mtp_tune_pool_next: %r is not among the pool's nodes %r" % (host, hosts))
    return mtp_pool.pool_next(pool, hosts, host, candidates, fit_ladder, spec, complete)


class FilterModule(object):
    """Filters of a tuning pool."""

    def filters(self):
        return {
            "mtp_tune_pool_identity": mtp_tune_pool_identity,
            "mtp_tune_pool_problems": mtp_tune_pool_problems,
            "mtp_tune_pool_attempts": mtp_tune_pool_attempts,
            "mtp_tune_pool_next": mtp_tune_pool_next,
        }
