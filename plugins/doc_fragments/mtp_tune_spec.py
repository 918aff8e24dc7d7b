# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The tuning spec the mtp_tune decision filters take as one argument (spec_from in
    plugins/plugin_utils/mtp_settings.py): its keys, their defaults and the role variables they
    come from. A page that uses it documents its own O(spec) option; this adds the keys."""

    DOCUMENTATION = r"""
options:
  spec:
    description:
      - What the decisions of a tuning run are taken under, the same for every call of the run. The role
        builds it once, as C(_mtp_tune_spec) (C(roles/mtp_tune/tasks/preflight.yml)), from the role
        variables C(mtp_tune_<key>).
      - A key left out, null or empty takes its default; an unknown key or a bad value fails, naming the role
        variable to fix.
    type: dict
    suboptions:
      objective:
        description:
          - 'What wins. V(latency): per-request decode tok/s at the judged level (default C=1); V(throughput):
            aggregate output tok/s at the judged level (default the highest); V(slo): the best aggregate among
            levels that meet O(spec.slo_min_tps) and/or O(spec.slo_max_ttft_p99_ms).'
        type: str
        default: latency
        choices: [latency, throughput, slo]
      level:
        description:
          - Concurrency level the objective is judged at; unset = the objective's default (slo without a level
            is judged over every level). The role passes the plan's (P(blackwell.sglang.mtp_tune_levels#filter)).
        type: int
      levels:
        description:
          - Every concurrency level of the run (C(mtp_tune_concurrency), the plan's C(levels)); a contender's
            table is completed at these.
        type: list
        elements: int
        default: []
      slo_min_tps:
        description:
          - 'For O(spec.objective=slo): per-request decode tok/s a level must reach.'
        type: float
      slo_max_ttft_p99_ms:
        description:
          - 'For O(spec.objective=slo): highest TTFT p99 (ms) a level may have.'
        type: float
      noise:
        description:
          - Half-width of the noise band of one measurement (0.015 = 1.5 %), narrowed by the square root of the
            repeats. A floor; where settings were launched more than once, the pooled spread between those
            launches (the node's measured noise) is used instead when it is larger.
        type: float
        default: 0.015
      strategy:
        description:
          - V(sweep) measures every candidate; V(adaptive) the seed, the list's ends and what the bounds leave
            able to win; V(climb) the seed, the neighbours of the best and of its ties, then what the bounds
            leave able to win until nothing is (O(probe_ends) is not used).
        type: str
        default: climb
        choices: [adaptive, sweep, climb]
      seed:
        description:
          - Steps the adaptive search starts from (the nearest candidate).
        type: int
        default: 3
      probe_ends:
        description:
          - Which ends of the candidate list the adaptive search measures after the seed (true = V(both),
            false = V(none)).
        type: str
        default: high
        choices: [both, high, low, none]
      fit_retry:
        description:
          - Relaunch a candidate that ran out of memory with a smaller setting of the lever its failure class
            names (the fit ladder's plan).
        type: bool
        default: false
      fit_classes:
        description:
          - Failure classes that mean "does not fit in memory" (a fit retry is for those, and a dearer candidate
            of the same topk is then not launched). Unset = the defaults.
        type: list
        elements: str
      max_launches:
        description:
          - Launch budget of the run (fit launches and re-measurements included); unset = none.
        type: int
      remeasure_launches:
        description:
          - Launches spent measuring the two contenders tied within the noise band again.
        type: int
        default: 0
      noise_launches:
        description:
          - Extra launches of the run's first measured setting, before the search goes on, to measure the
            node's launch-to-launch noise.
        type: int
        default: 0
      verify_tolerance:
        description:
          - Relative shortfall a smoke benchmark after converging may show at least; on a noisy node the
            allowance is 1.645 x the node's noise over the tuned figure's measurements and one smoke's in
            quadrature, when that is wider (a first smoke is only a screen at 1 x that).
        type: float
        default: 0.05
      converge:
        description:
          - The run converges the node on the winner (C(mtp_tune_converge)). The converged server's smoke benchmark
            then measures the winner at every level of O(spec.levels) where no launch has, so no launch is spent
            completing the winner's table (P(blackwell.sglang.mtp_tune_complete#filter) completes its ties only).
        type: bool
        default: false
"""
