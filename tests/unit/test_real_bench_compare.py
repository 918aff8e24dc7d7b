# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the collection's benchmark and SGLang 0.5.17's bench_serving measured on one live H200
server with the same prompts (tests/fixtures/real-sglang/live/same_prompts/), read back: the
target as bench_compare.judge states it holds on every level, the server moved more than 2 %
between runs on all of them, and the two tools' accept lengths are different quantities."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "real-sglang" / "live" / "same_prompts"
sys.path.insert(0, str(ROOT / "tests" / "gpu" / "real_sglang"))
import bench_compare  # noqa: E402  pylint: disable=wrong-import-position


def rows():
    out = []
    for path in sorted(FIX.glob("bench_compare_*.json")):
        out += json.loads(path.read_text())["rows"]
    return out


def test_the_fixtures_cover_chat_at_three_levels_and_generate_at_32_with_the_same_prompts():
    got = [(r["endpoint"], r["concurrency"]) for r in rows()]
    assert got == [("chat", 1), ("chat", 8), ("chat", 32), ("generate", 32)]
    for row in rows():
        assert row["same_prompts"] and len(row["collection"]) == 3 and len(row["bench_serving_runs"]) == 2
        assert all(r["completed"] == row["bench_serving_runs"][0]["completed"] for r in row["collection"])


def test_no_level_could_be_judged_at_two_percent_and_one_disagrees_beyond_the_drift():
    verdicts = dict(((r["endpoint"], r["concurrency"], figure), bench_compare.judge(r, figure))
                    for r in rows() for figure in ("output_throughput", "tpot_ms_mean"))
    # the server moved 3.6 to 48 % between runs of the same prompts: no level held still enough
    assert not any(v["judged"] for v in verdicts.values())
    assert min(v["drift_pct"] for v in verdicts.values()) > 2.0
    # every figure agrees within that drift but one: chat at C=1, where each of the collection's
    # three TPOTs (2.77, 2.82, 2.87 ms) is above both of bench_serving's (2.67, 2.70) run between
    # them, a difference of the clients, not of the server's drift (README: open)
    bad = sorted(k for k, v in verdicts.items() if not v["ok"])
    assert bad == [("chat", 1, "tpot_ms_mean")], verdicts
    chat1 = [r for r in rows() if (r["endpoint"], r["concurrency"]) == ("chat", 1)][0]
    assert min(r["tpot_ms_mean"] for r in chat1["collection"]) > max(r["tpot_ms_mean"] for r in chat1["bench_serving_runs"])


def test_judge_fails_a_difference_beyond_the_drift_and_judges_a_steady_level():
    row = {"collection": [{"output_throughput": 100.0}, {"output_throughput": 101.0}, {"output_throughput": 100.5}],
           "bench_serving_runs": [{"output_throughput": 110.0}, {"output_throughput": 110.5}]}
    v = bench_compare.judge(row)
    assert v["judged"] and not v["ok"] and v["diff_pct"] == pytest.approx(-8.64, abs=0.01)
    row["bench_serving_runs"] = [{"output_throughput": 101.5}, {"output_throughput": 100.9}]
    assert bench_compare.judge(row)["ok"]
    row["collection"][0]["output_throughput"] = 80.0  # the server moved 26 %: a 9 % gap is within it
    row["bench_serving_runs"] = [{"output_throughput": 110.0}, {"output_throughput": 110.5}]
    v = bench_compare.judge(row)
    assert not v["judged"] and v["ok"] and v["bound_pct"] == pytest.approx(26.25)


def test_bench_servings_accept_length_is_the_servers_lifetime_average_not_the_runs():
    """bench_serving 0.5.17 reports server_info's avg_spec_accept_length, the server's average
    since start: read after the chat levels it is 1.14 on /generate, where the run's own requests
    (meta_info, the collection's figure) accepted 1.30. The collection's next run reads the same
    lifetime figure before it starts."""
    gen = [r for r in rows() if r["endpoint"] == "generate"][0]
    for i, theirs in enumerate(gen["bench_serving_runs"]):
        after = gen["collection"][i + 1]["raw"]["server_accept_length_before"]
        assert theirs["accept_length"] == pytest.approx(after, abs=0.002)
    own = [r["accept_length"] for r in gen["collection"]]
    assert all(r["raw"]["accept_length_source"] == "request_meta_info" for r in gen["collection"])
    assert min(own) > max(t["accept_length"] for t in gen["bench_serving_runs"]) + 0.1
