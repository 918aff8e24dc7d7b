# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Accept lengths per depth against a real server: SGLang 0.5.17 on an H200, the tiny self-draft
(STANDALONE, the target as its own draft) launched at every depth 1..8 by the tune driver
(tests/gpu/real_sglang/tune_real.py), the same 8 prompts at temperature 0 each time. Each launch's
histogram bounds every shallower depth; each shallower launch measured its own."""

from __future__ import absolute_import, division, print_function

import json
import os

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import bench_metrics as bm

LIVE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "real-sglang", "live")


def _launches(name):
    with open(os.path.join(LIVE, name)) as f:
        run = json.load(f)
    return dict((a["candidate"]["steps"], a["metrics"]["1"]) for a in run["attempts"]
                if a["status"] == "ok")


def _measured(level):
    hist = level["accept_histogram"]
    return sum((j + 1) * n for j, n in enumerate(hist)) / float(sum(hist))


@pytest.mark.parametrize("name", ["tune_sweep.json", "tune_adaptive.json"])
def test_each_launch_bounds_every_shallower_launch(name):
    launches = _launches(name)
    pairs = [(deep, k) for deep in launches for k in launches if k < deep]
    assert len(pairs) >= 6
    for deep, k in pairs:
        low, high = bm.accept_length_bounds_by_depth(launches[deep]["accept_histogram"],
                                                     launches[deep]["completed"])[str(k)]
        assert low <= _measured(launches[k]) <= high, (deep, k, low, high, _measured(launches[k]))


def test_the_round_start_figure_alone_fell_below_every_real_shallower_launch():
    # What the bounds replaced: read as exact, the per-round figure under-predicted all 28 pairs
    # of the sweep, by 0.6 to 11.3 % - the self-draft's mistakes sit at places in the output.
    launches = _launches("tune_sweep.json")
    gaps = []
    for deep in launches:
        by = bm.accept_lengths_by_depth(launches[deep]["accept_histogram"])
        for k in launches:
            if k < deep:
                gaps.append(by[str(k)] / _measured(launches[k]) - 1.0)
    assert len(gaps) == 28 and max(gaps) < 0 and min(gaps) < -0.10


def test_the_histogram_is_the_same_launch_after_launch():
    # Temperature 0, same prompts: the adaptive run's launches at 2, 3, 4, 8 steps reported the
    # same histograms as the sweep's, while their tok/s moved by up to 13 %. Accept length is a
    # property of the depth and the workload, measured once; speed is what needs repeats.
    sweep, adaptive = _launches("tune_sweep.json"), _launches("tune_adaptive.json")
    assert sorted(adaptive) == [2, 3, 4, 8]
    for k in adaptive:
        assert adaptive[k]["accept_histogram"] == sweep[k]["accept_histogram"]


def test_generate_meta_info_counts_agree_with_each_other():
    # One real /generate (64 tokens, STANDALONE at 3 steps): the histogram's rounds are the
    # verify count, its correct drafts the server's count, and the per-round figure at the
    # launched depth is the server's accept length less the prefill's first token.
    with open(os.path.join(LIVE, "generate_steps3.json")) as f:
        meta = json.load(f)["meta_info"]
    hist = meta["spec_correct_drafts_histogram"]
    assert sum(hist) == meta["spec_verify_ct"]
    assert sum(j * n for j, n in enumerate(hist)) == meta["spec_num_correct_drafts"]
    top = bm.accept_lengths_by_depth(hist)[str(len(hist) - 1)]
    assert top == pytest.approx((meta["completion_tokens"] - 1) / float(meta["spec_verify_ct"]))
    assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / float(meta["spec_verify_ct"]))


@pytest.mark.parametrize("name", ["tune_sweep.json", "tune_adaptive.json"])
def test_each_launch_caps_every_deeper_launch(name):
    """The other way: a launch's histogram bounds what any deeper depth can accept (concavity, and
    the stretches between the draft's wrong guesses), and every deeper real launch is within it."""
    launches = _launches(name)
    pairs = [(shallow, k) for shallow in launches for k in launches if k > shallow]
    assert len(pairs) >= 6
    slack = []
    for shallow, k in pairs:
        level = launches[shallow]
        high = bm.accept_length_high_deeper(level["accept_histogram"], k, level["completed"])
        assert _measured(launches[k]) <= high, (shallow, k, high, _measured(launches[k]))
        slack.append(high / _measured(launches[k]) - 1.0)
    if name == "tune_sweep.json":
        # informative, not just sound: one depth deeper the real sweep's caps are 8 to 20 % above
        # what was measured, but from depth 1 (65 %: one draft token says little of the next)
        one_deeper = [high for (s, k), high in zip(pairs, slack) if k == s + 1]
        assert len(one_deeper) == 7 and sorted(one_deeper)[3] < 0.2 and sorted(one_deeper)[-2] < 0.25, one_deeper


def test_deeper_bound_in_the_two_models():
    # never a correct draft at depth 2: nothing deeper can accept more (1 token per round)
    assert bm.accept_length_high_deeper([50, 0, 0], 6) == pytest.approx(1.0)
    # always all correct at depth 2: up to k + 1 per round, less the requests' cut rounds
    assert bm.accept_length_high_deeper([0, 0, 30], 5, requests=0) == pytest.approx(6.0)
    # round-start: increments never grow; depth 3 adds at most the all-correct share 0.25
    hist = [10, 20, 10]
    rs = (1 * 10 + 2 * 20 + 3 * 10) / 40.0 + 0.25
    prefix = 80.0 / max(30.0, 80.0 / 4)
    assert bm.accept_length_high_deeper(hist, 3) == pytest.approx(max(rs, prefix))
    assert bm.accept_length_high_deeper(hist, 2) is None and bm.accept_length_high_deeper([], 4) is None
