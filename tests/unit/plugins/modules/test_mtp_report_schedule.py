# -*- coding: utf-8 -*-
"""The tuning report of a per-load schedule run (module_utils/mtp_report.py): summary.md answers
with the schedule (or the static setting that beat it) and the rollout command, then the table
level | best static | schedule | SGLang default | best single static and the verdict; results.csv
has a ``schedule`` column; a schedule is named by its slots everywhere."""

import csv
import io
import json
import os

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import mtp_report as R
from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule

TUNED = {"1": {"candidate_steps": [4]}, "4": {"candidate_steps": [3]}}
ADAPTIVE_ON = {"speculative_adaptive": True, "speculative_adaptive_config": TUNED}
DEFAULT_ON = {"speculative_adaptive": True, "speculative_adaptive_config": None}


def level(c, ag):
    return {"concurrency": c, "output_throughput": ag, "decode_tps_per_request": {"mean": ag / c, "p50": ag / c},
            "completed": 5 * c, "failed": 0}


def attempt(steps, figures, overrides=None, key=None, **extra):
    cand = {"steps": steps, "topk": 1, "draft_tokens": steps + 1, "key": "s%d-k1-d%d" % (steps, steps + 1)}
    att = {"key": key or cand["key"], "candidate": cand, "overrides": overrides or {}, "status": "ok",
           "run": "20261207T150000Z", "metrics": dict((str(c), level(c, ag)) for c, ag in figures.items()),
           "timings": {"launch_s": 10.0, "bench_s": 20.0, "wall_s": 30.0, "started": "2026-12-07T15:00:00Z"}}
    att.update(extra)
    return att


def schedule_doc(verdict="schedule"):
    """Two statics, the tuned schedule and SGLang's default, measured at C=1 and C=16 (the shape
    mtp_schedule.schedule_winner returns, figures made up for the rendering)."""
    tuned_key = "s4-k1-d5+adaptive-%s" % spec_schedule.digest(TUNED)[:8]
    attempts = [
        attempt(3, {1: 186.0, 16: 1275.0}),
        attempt(4, {1: 209.0, 16: 1187.0}),
        attempt(4, {1: 208.0, 16: 1270.0}, ADAPTIVE_ON, key=tuned_key, schedule="tuned",
                schedule_config=spec_schedule.canonical(TUNED)),
        attempt(3, {1: 160.0, 16: 1050.0}, DEFAULT_ON, key="s3-k1-d4+adaptive-default", schedule="default",
                schedule_config=None),
    ]
    table = {"levels": [1, 16], "single_static": "s4-k1-d5", "single_static_label": "s4-k1-d5",
             "config": spec_schedule.canonical(TUNED), "label": "1:4 4:3", "key": tuned_key,
             "default_key": "s3-k1-d4+adaptive-default", "verdict": verdict,
             "why": ("the schedule beats s4-k1-d5 beyond the band at C=16 (+7.0%, band 2.1%) and is within it elsewhere"
                     if verdict == "schedule" else "the schedule is below s4-k1-d5 beyond the band at C=1 (-5.0%, band 2.1%)"),
             "rows": [{"level": 1, "best_static": {"key": "s4-k1-d5", "label": "s4-k1-d5", "tps": 209.0},
                       "single_static_tps": 209.0, "schedule_tps": 208.0, "default_tps": 160.0, "band": 0.0212},
                      {"level": 16, "best_static": {"key": "s3-k1-d4", "label": "s3-k1-d4", "tps": 1275.0},
                       "single_static_tps": 1187.0, "schedule_tps": 1270.0, "default_tps": 1050.0, "band": 0.0212}]}
    if verdict == "schedule":
        winner = {"key": tuned_key, "candidate": {"steps": 4, "topk": 1, "draft_tokens": 5}, "overrides": ADAPTIVE_ON,
                  "score": {"value": 1270.0, "level": 16}, "decided_by": "schedule: " + table["why"]}
    else:
        winner = {"key": "s4-k1-d5", "candidate": {"steps": 4, "topk": 1, "draft_tokens": 5}, "overrides": {},
                  "score": {"value": 1187.0, "level": 16}, "decided_by": "best single static s4-k1-d5: " + table["why"]}
    winner["schedule"] = table
    return {"schema": 1, "host": "node1", "run": "schedule",
            "settings": {"objective": "throughput", "level": 16, "strategy": "climb", "concurrency": [1, 16],
                         "search_levels": [1, 16], "candidates": ["s3-k1-d4", "s4-k1-d5"], "schedule": True,
                         "schedule_default": True},
            "attempts": attempts, "winner": winner,
            "runs": [{"id": "20261207T150000Z", "state": "finished", "started": "2026-12-07T15:00:00Z"}]}


@pytest.mark.parametrize("config", [
    None, {}, TUNED, {1: {"candidate_steps": [5, 3, 3]}, 16: {"candidate_steps": [0, 1]}, 4: {"candidate_steps": [2]}},
    json.dumps(TUNED), {"x": {"candidate_steps": [1]}}, {1: {"candidate_steps": []}}, [1, 2],
])
def test_schedule_label_is_spec_schedule_s(config):
    # module_utils stays stdlib-only: its label must read as the service side's
    assert R.schedule_label(config) == spec_schedule.label(config)


def test_a_schedule_is_named_by_its_slots_and_its_levers():
    d = schedule_doc()
    assert [R.notation(a) for a in d["attempts"]] == ["s3-k1-d4", "s4-k1-d5", "schedule 1:4 4:3",
                                                      "schedule SGLang's default"]
    levered = dict(ADAPTIVE_ON, mamba_full_memory_ratio=4, enable_linear_replayssm_spec=True)
    assert R.notation({"candidate": {"steps": 4, "topk": 1, "draft_tokens": 5}, "overrides": levered}) == \
        "schedule 1:4 4:3+ratio4+replay"
    # off is static, whatever config is left over
    assert R.notation({"candidate": {"steps": 4, "topk": 1, "draft_tokens": 5},
                       "overrides": {"speculative_adaptive": False, "speculative_adaptive_config": TUNED}}) == "s4-k1-d5"
    assert R.setting_argv({"steps": 4, "topk": 1, "draft_tokens": 5}, levered) == (
        "--speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5 "
        "--mamba-full-memory-ratio 4 --enable-linear-replayssm-spec --speculative-adaptive "
        "--speculative-adaptive-config adaptive-<digest>.json")
    assert R.setting_argv({"steps": 3}, DEFAULT_ON) == "--speculative-num-steps 3 --speculative-adaptive"


def test_summary_answers_with_the_schedule_then_the_rollout_then_the_table(tmp_path):
    lines = R.render_summary(R.finalize(schedule_doc()), str(tmp_path)).splitlines()
    assert lines[2] == ("**Setting to run: per-load schedule 1:4 4:3** (SGLang's `--speculative-adaptive`, starting at "
                        "steps 4): `--speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5 "
                        "--speculative-adaptive --speculative-adaptive-config adaptive-<digest>.json`")
    assert lines[4] == ("- Its config (`sglang_service_speculative_adaptive_config`; the node gets it as "
                        "adaptive-<digest>.json): `{\"1\": {\"candidate_steps\": [4]}, \"4\": {\"candidate_steps\": [3]}}`")
    # its figures are its own launch's
    assert lines[5].startswith("- Its figures, per-request decode tok/s / aggregate output tok/s (from its launch): "
                               "C=1 208 / 208, C=16 79 / 1270")
    assert lines[6].startswith("- Roll it out: `ansible-playbook blackwell.sglang.rollout -i <inventory> "
                               "-e mtp_tune_from=%s`" % tmp_path)
    table = lines.index("## Per-load schedule")
    assert table > 6 and table < lines.index("## How it was chosen")
    assert lines[table + 4] == "| level | best static | schedule | SGLang default | best single static | tie band |"
    assert lines[table + 6] == "| C=1 | s4-k1-d5 209 | 208 (-0.5 %) | 160 (-23.4 %) | 209 | +/-2.1 % |"
    assert lines[table + 7] == "| C=16 | s3-k1-d4 1275 | 1270 (+7.0 %) | 1050 (-11.5 %) | 1187 | +/-2.1 % |"
    assert lines[table + 9] == ("**Verdict: the schedule**: the schedule beats s4-k1-d5 beyond the band at C=16 (+7.0%, "
                                "band 2.1%) and is within it elsewhere.")
    assert "the best single static setting s4-k1-d5" in lines[table + 2]
    md = "\n".join(lines)
    assert "- **Winner: per-load schedule 1:4 4:3** (starting at steps 4, topk 1, 5 draft tokens): 1270.0 at C=16" in md
    # every launch is in the operator's table under its name, the winner marked
    assert "| **schedule 1:4 4:3** (winner) |" in md and "| schedule SGLang's default |" in md
    assert "A per-load schedule (SGLang's --speculative-adaptive): schedule <batch size>:<steps>" in md
    # the adaptive switch is not shown as a lever
    assert "speculative_adaptive" not in md.replace("sglang_service_speculative_adaptive_config", "")


def test_summary_of_a_static_that_beat_the_schedule():
    lines = R.render_summary(R.finalize(schedule_doc("static"))).splitlines()
    assert lines[2] == ("**Setting to run: s4-k1-d5**: `--speculative-num-steps 4 --speculative-eagle-topk 1 "
                        "--speculative-num-draft-tokens 5`")
    assert lines[4] == ("- A static setting, not a per-load schedule: the schedule did not beat the best single static "
                        "setting (table below)")
    md = "\n".join(lines)
    assert ("**Verdict: the best single static setting s4-k1-d5**: the schedule is below s4-k1-d5 beyond the band at "
            "C=1 (-5.0%, band 2.1%).") in md
    assert "- **Winner: steps 4** (topk 1, 5 draft tokens): 1187.0 at C=16" in md


def test_a_static_run_has_no_schedule_section_nor_column_value():
    d = schedule_doc()
    d["attempts"] = d["attempts"][:2]
    d["winner"] = {"key": "s4-k1-d5", "candidate": {"steps": 4, "topk": 1, "draft_tokens": 5}, "overrides": {},
                   "score": {"value": 1187.0, "level": 16}, "decided_by": "x"}
    md = R.render_summary(R.finalize(d))
    assert "Per-load schedule" not in md and "per-load schedule" not in md and "schedule <batch size>" not in md
    rows = list(csv.DictReader(io.StringIO(R.render_csv(d))))
    assert [r["schedule"] for r in rows] == [""] * 4


def test_csv_schedule_column_and_the_plot_keeps_schedules_off_the_depth_axis():
    d = R.finalize(schedule_doc())
    rows = list(csv.DictReader(io.StringIO(R.render_csv(d))))
    assert list(rows[0].keys()) == list(R.CSV_FIELDS) and R.CSV_FIELDS[-1] == "schedule"
    assert [(r["candidate"], r["concurrency"], r["schedule"]) for r in rows] == [
        ("s3-k1-d4", "1", ""), ("s3-k1-d4", "16", ""), ("s4-k1-d5", "1", ""), ("s4-k1-d5", "16", ""),
        ("schedule 1:4 4:3", "1", "tuned"), ("schedule 1:4 4:3", "16", "tuned"),
        ("schedule SGLang's default", "1", "default"), ("schedule SGLang's default", "16", "default")]
    # a record without the field says it from its overrides
    d["attempts"][2].pop("schedule")
    d["attempts"][3].pop("schedule")
    assert [r["schedule"] for r in csv.DictReader(io.StringIO(R.render_csv(d)))][4:] == ["tuned"] * 2 + ["default"] * 2
    series = R.plot_series(d)
    assert [(ln["label"], ln["steps"], ln["winner"]) for ln in series["lines"]] == [
        ("s3-k1-d4", 3, False), ("s4-k1-d5", 4, False), ("schedule 1:4 4:3", None, True),
        ("schedule SGLang's default", None, False)]
    # the depth panel: statics only (the schedule's 1270 at C=16 is not steps 4's)
    assert series["depth"]["levels"][16] == [(3, 1275.0, False, "s3-k1-d4"), (4, 1187.0, False, "s4-k1-d5")]


def test_write_round_trips_a_schedule_run(tmp_path):
    d = schedule_doc()
    R.write(str(tmp_path), d, plot=False, compare=False)
    back = R.parse(open(os.path.join(str(tmp_path), R.RESULTS_JSON)).read())
    assert back["winner"]["schedule"]["config"] == spec_schedule.canonical(TUNED)
    assert back["attempts"][2]["schedule"] == "tuned" and back["attempts"][3]["schedule_config"] is None
    with open(os.path.join(str(tmp_path), R.SUMMARY_MD)) as fh:
        assert fh.read().splitlines()[2].startswith("**Setting to run: per-load schedule 1:4 4:3**")
