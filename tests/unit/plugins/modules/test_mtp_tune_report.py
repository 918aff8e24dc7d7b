# -*- coding: utf-8 -*-
"""Tests of the tuning report: module_utils/mtp_report.py (rendering, atomic writes, corrupt-file
handling) and the controller-side action plugin mtp_tune_report (through ansible-playbook)."""

import builtins
import csv
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import mtp_report as R

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def level(c, pr, ag, failed=0):
    return {"concurrency": c, "output_throughput": ag, "request_throughput": ag / 1024.0,
            "decode_tps_per_request": {"mean": pr, "p50": pr}, "ttft_ms": {"p50": 50.0, "p99": 90.0 * c},
            "tpot_ms": {"mean": 1000.0 / pr}, "itl_ms": {"p50": 1000.0 / pr / 4},
            "e2e_latency_ms": {"p99": 4000.0}, "accept_length": 3.9, "completed": 5 * c, "failed": failed,
            "ci": None}


def attempt(steps, figures=None, status="ok", overrides=None, failure_class=None, **extra):
    cand = {"steps": steps, "topk": 1, "draft_tokens": steps + 1, "key": "s%d-k1-d%d" % (steps, steps + 1)}
    att = {"key": cand["key"], "candidate": cand, "overrides": overrides or {}, "fit_rung": None,
           "status": status, "run": "20261202T150000Z",
           "timings": {"launch_s": 12.5, "bench_s": 100.0, "wall_s": 112.5, "started": "2026-12-02T15:00:00Z"}}
    if status == "ok":
        att["metrics"] = dict((str(c), level(c, pr, ag)) for c, (pr, ag) in figures.items())
    else:
        att.update(failure_class=failure_class, failure_line="RuntimeError: Not enough memory. Please try...",
                   journal_tail=["Load weight end.", "RuntimeError: Not enough memory. Please try..."])
    att.update(extra)
    return att


def doc():
    return {
        "schema": 1, "host": "node1", "run": "default",
        "settings": {"objective": "latency", "level": 1, "strategy": "sweep", "concurrency": [1, 32],
                     "min_gain": 0.03, "noise": 0.02, "fit_retry": True},
        "attempts": [
            attempt(3, {1: (234.0, 230.0), 32: (60.0, 1979.0)}),
            attempt(4, {1: (277.0, 270.0), 32: (52.0, 1750.0)}),
            attempt(10, status="failed", failure_class="oom_kv_cache"),
            attempt(10, {1: (240.0, 235.0), 32: (30.0, 900.0)}, overrides={"cuda_graph_max_bs": 64,
                                                                           "max_running_requests": None},
                    fit_rung=2),
        ],
        "winner": {"key": "s4-k1-d5", "candidate": {"steps": 4, "topk": 1, "draft_tokens": 5}, "overrides": {},
                   "score": {"value": 277.0, "level": 1}, "decided_by": "beats the runner-up beyond noise"},
        "stats": {"launches": 4, "launches_total": 4, "wall_s": 754.0},
        "comparison": [{"run": "a", "strategy": "sweep", "objective": "latency", "level": 1, "winner": "s4-k1-d5",
                        "launches": 9, "wall_s": 1800.0},
                       {"run": "b", "strategy": "adaptive", "objective": "latency", "level": 1,
                        "winner": "s4-k1-d5", "launches": 3, "wall_s": 600.0}],
    }


# ---------------------------------------------------------------------------- rendering

def test_csv_one_row_per_attempt_and_level_failed_row_without_figures():
    rows = list(csv.DictReader(io.StringIO(R.render_csv(doc()))))
    assert len(rows) == 2 + 2 + 1 + 2
    assert rows[0]["key"] == "s3-k1-d4" and rows[0]["concurrency"] == "1" and rows[0]["decode_tps_mean"] == "234"
    assert rows[1]["output_throughput"] == "1979"
    fail = rows[4]
    assert fail["status"] == "failed" and fail["failure_class"] == "oom_kv_cache" and fail["concurrency"] == ""
    assert rows[5]["cuda_graph_max_bs"] == "64" and rows[5]["status"] == "ok"
    assert list(rows[0].keys()) == list(R.CSV_FIELDS)


def test_csv_carries_confidence_intervals():
    d = doc()
    d["attempts"][0]["metrics"]["1"]["ci"] = {"decode_tps_per_request_mean": {"low": 230.0, "high": 238.0},
                                              "output_throughput": {"low": 225.0, "high": 235.0}}
    row = list(csv.DictReader(io.StringIO(R.render_csv(d))))[0]
    assert (row["decode_tps_ci_low"], row["decode_tps_ci_high"]) == ("230", "238")
    assert (row["output_throughput_ci_low"], row["output_throughput_ci_high"]) == ("225", "235")


def test_summary_is_the_operators_table_with_the_winner_marked():
    md = R.render_summary(dict(R.finalize(doc()), comparison=doc()["comparison"]))
    assert "| candidate | cap | C=1 | C=32 | launch | bench |" in md
    assert "| **s4-k1-d5** (winner) | - | 277 / 270 | 52 / 1750 |" in md
    assert "| s3-k1-d4 | - | 234 / 230 | 60 / 1979 |" in md
    assert "| s10-k1-d11 | - | failed: oom_kv_cache (`RuntimeError: Not enough memory. Please try...`) |" in md
    assert "| s10-k1-d11+cgbs64 | - | 240 / 235 | 30 / 900 |" in md
    assert "**Winner: steps 4**" in md and "beats the runner-up beyond noise" in md
    assert "Server launches: 4 (1 failed) over 3 candidates; wall time 7 min 30 s" in md
    assert "| b | adaptive | latency (C=1) | s4-k1-d5 | 3 | 10 min 00 s |" in md
    assert "## Failures (journal tail)" in md and "Load weight end." in md
    assert md.count("(winner)") == 1


def test_summary_lists_the_candidates_never_launched():
    d = doc()
    d["settings"]["strategy"] = "adaptive"
    d["settings"]["candidates"] = ["s1-k1-d2", "s3-k1-d4", "s4-k1-d5", "s5-k1-d6", "s10-k1-d11"]
    md = R.render_summary(R.finalize(d))
    assert "- Not launched: s1-k1-d2, s5-k1-d6 (2 of 5 candidates); the winner is the best of those measured" in md
    # every candidate launched (a failed launch counts): no such line
    d["settings"]["candidates"] = ["s3-k1-d4", "s4-k1-d5", "s10-k1-d11"]
    assert "Not launched" not in R.render_summary(R.finalize(d))
    # a results file written before the candidate list was recorded renders as before
    d["settings"].pop("candidates")
    assert "Not launched" not in R.render_summary(R.finalize(d))


def test_summary_names_what_could_still_beat_the_winner():
    d = doc()
    d["settings"]["strategy"] = "adaptive"
    d["winner"]["unverified"] = [
        {"key": "s1-k1-d2", "steps": 1, "topk": 1, "draft_tokens": 2, "bound": None, "gain": None,
         "bound_convex": None, "gain_convex": None, "convex_rules_out": False},
        {"key": "s5-k1-d6", "steps": 5, "topk": 1, "draft_tokens": 6, "bound": 310.2, "gain": 0.1199,
         "bound_convex": 278.1, "gain_convex": 0.004, "convex_rules_out": True},
        {"key": "s6-k1-d7", "steps": 6, "topk": 1, "draft_tokens": 7, "bound": 330.0, "gain": 0.191,
         "bound_convex": 300.0, "gain_convex": 0.083, "convex_rules_out": False}]
    md = R.render_summary(R.finalize(d))
    line = [x for x in md.splitlines() if x.startswith("- Could still beat the winner")]
    assert len(line) == 1
    assert "steps 1 (no bound: nothing cheaper was measured)" in line[0]
    # 0.4 % is inside the tie band: only a landscape that bends the other way beats it
    assert "steps 5 (up to +12 %; ruled out if each extra draft token costs at least the one before)" in line[0]
    assert "steps 6 (up to +19 %)" in line[0] and "mtp_tune_strategy sweep" in line[0]
    d["winner"]["unverified"] = []
    assert "Could still beat" not in R.render_summary(R.finalize(d))
    d["winner"].pop("unverified")
    assert "Could still beat" not in R.render_summary(R.finalize(d))


def test_summary_shows_margin_interval_and_what_was_capped():
    d = doc()
    d["winner"].update(margin=-0.018, band=0.021, interval=[272.8, 281.2], runner_up="s5-k1-d6")
    md = R.render_summary(R.finalize(d))
    assert "Winner's margin over s5-k1-d6: -1.8 % (tie band 2.1 %); its interval 272.8 .. 281.2" in md
    d["settings"]["fit_ladder"] = {"max_running_requests": 48, "judged_floor": 32, "cuda_graph_max_bs": 48}
    d["winner"]["overrides"] = {"max_running_requests": 20, "cuda_graph_max_bs": 20}
    md = R.render_summary(R.finalize(d))
    assert "Capped: max-running-requests 20 is below the judged concurrency 32 (from 48)" in md
    d["winner"]["overrides"] = {"max_running_requests": 40, "cuda_graph_max_bs": 40}
    md = R.render_summary(R.finalize(d))
    assert "Fitted: cuda-graph-max-bs 40, max-running-requests 40 (the largest setting that started; SGLang would use " \
        "cuda-graph-max-bs 48, max-running-requests 48)" in md


def test_summary_without_winner_and_with_failed_requests():
    d = doc()
    d["winner"] = None
    d["attempts"][0]["metrics"]["32"]["failed"] = 3
    md = R.render_summary(d)
    assert "Winner: none yet" in md and "| s3-k1-d4 | - | 234 / 230 | 3 failed |" in md
    assert "(c)" not in md
    d["attempts"][1]["metrics"]["1"]["client_limited"] = True
    md = R.render_summary(d)
    assert "| s4-k1-d5 | - | 277 / 270 (c) | 52 / 1750 |" in md and "(c): the benchmark client was close" in md


def _limited(d, idx, c):
    d["attempts"][idx]["metrics"][str(c)]["client_limited"] = True


def test_limited_cells_are_marked_only_where_they_could_change_the_result():
    d = doc()  # latency at C=1, winner steps 4 (attempt 1)
    for idx in (0, 1, 3):
        _limited(d, idx, 32)            # C=32 is not judged: cannot change a latency winner
    _limited(d, 1, 1)                   # the winner's own scored cell: a higher figure keeps it
    assert R.limited_cells_that_matter(d) == []
    md = R.render_summary(d)
    table = md.split("| candidate |", 1)[1].split("\n\n", 1)[0]
    assert "| 52 / 1750 |" in table and "(c)" not in table
    assert "4 more cell(s) were client-limited where it cannot change the result" in md
    _limited(d, 0, 1)                   # a loser at the judged level: its true figure might win
    assert R.limited_cells_that_matter(d) == [(0, 1)]
    md = R.render_summary(d)
    assert "| s3-k1-d4 | - | 234 / 230 (c) | 60 / 1979 |" in md and "could change the result" in md
    assert "| **s4-k1-d5** (winner) | - | 277 / 270 | 52 / 1750 |" in md
    assert "4 more cell(s)" in md


def test_limited_cells_for_throughput_and_slo_objectives():
    d = doc()
    d["settings"].update(objective="throughput", level=32)
    d["winner"]["score"] = {"value": 1979.0, "level": 32}
    d["winner"]["key"] = "s3-k1-d4"
    _limited(d, 1, 32)
    _limited(d, 1, 1)
    assert R.limited_cells_that_matter(d) == [(1, 32)]
    d["settings"].update(objective="slo", level=None)
    assert R.judged_levels(d) == [1, 32]
    assert R.limited_cells_that_matter(d) == [(1, 1), (1, 32)]
    d["winner"] = None
    _limited(d, 0, 32)
    assert (0, 32) in R.limited_cells_that_matter(d)


def test_json_is_stable_and_nan_becomes_null():
    d = doc()
    d["attempts"][0]["metrics"]["1"]["output_throughput"] = float("nan")
    text = R.render_json(d)
    back = json.loads(text)
    assert back["attempts"][0]["metrics"]["1"]["output_throughput"] is None
    assert text == R.render_json(d)


@pytest.mark.parametrize("mutate,msg", [
    (lambda d: d.pop("attempts"), "no 'attempts' list"),
    (lambda d: d.update(schema=7), "schema 7"),
    (lambda d: d["attempts"][0]["candidate"].update(steps="3"), "steps is not an integer"),
    (lambda d: d["attempts"][0].update(status="meh"), "status 'meh'"),
    (lambda d: d["attempts"][0].pop("metrics"), "no metrics"),
])
def test_validate_names_what_is_wrong(mutate, msg):
    d = doc()
    mutate(d)
    with pytest.raises(R.ReportError, match=msg):
        R.validate(d)
    with pytest.raises(R.ReportError, match="not valid JSON"):
        R.parse("{half")


# ---------------------------------------------------------------------------- files

def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    p = tmp_path / "results.json"
    R.atomic_write(str(p), "one")
    R.atomic_write(str(p), "two")
    assert p.read_text() == "two"
    assert sorted(os.listdir(str(tmp_path))) == ["results.json"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path, monkeypatch):
    p = tmp_path / "results.json"
    p.write_text("old complete file")

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(R.os, "replace", boom)
    with pytest.raises(OSError):
        R.atomic_write(str(p), "new")
    assert p.read_text() == "old complete file"
    assert sorted(os.listdir(str(tmp_path))) == ["results.json"]


def test_load_nothing_then_resume(tmp_path):
    d = str(tmp_path / "run" / "node1")
    assert R.load(d)["doc"] is None  # creates the directory
    out = R.write(d, doc(), plot=False)
    assert [os.path.basename(f) for f in out["files"]] == ["results.json", "results.csv", "summary.md"]
    loaded = R.load(d)
    assert len(loaded["doc"]["attempts"]) == 4 and "resuming: 4 earlier attempts" in loaded["message"]
    assert loaded["doc"]["updated"]


def test_load_corrupt_file_is_kept_aside_and_fails_clearly(tmp_path):
    d = tmp_path / "node1"
    d.mkdir()
    (d / "results.json").write_text('{"schema": 1, "attempts": [')
    with pytest.raises(R.ReportError) as err:
        R.load(str(d), now=1764687600)
    msg = str(err.value)
    assert "not valid JSON" in msg and "results.json.corrupt-20251202T150000Z" in msg and "mtp_tune_fresh" in msg
    assert not (d / "results.json").exists()
    assert (d / "results.json.corrupt-20251202T150000Z").read_text() == '{"schema": 1, "attempts": ['
    # a second corrupt file in the same second does not overwrite the first one kept aside
    (d / "results.json").write_text("garbage")
    with pytest.raises(R.ReportError):
        R.load(str(d), now=1764687600)
    assert (d / "results.json.corrupt-20251202T150000Z.2").read_text() == "garbage"


def test_load_corrupt_with_fresh_and_force_keep_the_old_file(tmp_path):
    d = tmp_path / "node1"
    d.mkdir()
    (d / "results.json").write_text("[]")
    out = R.load(str(d), fresh=True)
    assert out["doc"] is None and ".corrupt-" in out["set_aside"] and os.path.exists(out["set_aside"])
    R.write(str(d), doc(), plot=False)
    out = R.load(str(d), force=True)
    assert out["doc"] is None and ".prev-" in out["set_aside"]
    assert json.loads(open(out["set_aside"]).read())["host"] == "node1"


def test_unwritable_results_dir_fails_clearly(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(R.ReportError, match="not writable on the controller.*mtp_tune_results_dir"):
        R.load(str(blocker / "sub"))


def test_png_plot_when_matplotlib_is_there(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is optional on the controller; the PNG needs it")
    out = R.write(str(tmp_path), doc())
    png = tmp_path / "plot.png"
    assert str(png) in out["files"] and out["warnings"] == []
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000


def test_png_skipped_with_warning_without_matplotlib(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_mpl(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    out = R.write(str(tmp_path), doc())
    assert not (tmp_path / "plot.png").exists()
    assert len(out["warnings"]) == 1 and "matplotlib is not importable" in out["warnings"][0]
    assert (tmp_path / "summary.md").exists()


# ---------------------------------------------------------------------------- action plugin

def _play(tmp_path, tasks):
    pb = tmp_path / "pb.yml"
    pb.write_text(textwrap.dedent("""\
        - hosts: localhost
          gather_facts: false
          tasks:
        """) + textwrap.indent(textwrap.dedent(tasks), "    "))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="default")
    ap = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    return subprocess.run([ap, "-i", "localhost,", "-c", "local", str(pb)], env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_action_plugin_load_write_and_corrupt(tmp_path):
    data = tmp_path / "data.json"
    data.write_text(json.dumps(doc()))
    out_dir = tmp_path / "res" / "node1"
    res = _play(tmp_path, """\
        - name: Load (nothing yet)
          blackwell.sglang.mtp_tune_report:
            path: %s
            op: load
          register: loaded
        - name: Nothing to resume
          ansible.builtin.assert:
            that: loaded.results is none
        - name: Write
          blackwell.sglang.mtp_tune_report:
            path: %s
            results: "{{ lookup('ansible.builtin.file', '%s') | from_json }}"
            plot: false
        - name: Load again
          blackwell.sglang.mtp_tune_report:
            path: %s
            op: load
          register: again
        - name: Resumed
          ansible.builtin.assert:
            that: again.results.attempts | length == 4
        """ % (out_dir, out_dir, data, out_dir))
    assert res.returncode == 0, res.stdout + res.stderr
    assert (out_dir / "summary.md").exists() and (out_dir / "results.csv").exists()
    (out_dir / "results.json").write_text("not json")
    res = _play(tmp_path, """\
        - name: Load a corrupt file
          blackwell.sglang.mtp_tune_report:
            path: %s
            op: load
        """ % out_dir)
    assert res.returncode != 0
    assert "not valid JSON" in res.stdout and "results.json.corrupt-" in res.stdout
    assert "Traceback" not in res.stdout + res.stderr
    assert any(n.startswith("results.json.corrupt-") for n in os.listdir(str(out_dir)))


def test_rewrite_of_the_same_results_changes_nothing(tmp_path):
    d = str(tmp_path / "run" / "node1")
    first = R.write(d, doc(), plot=False, now=1000)
    assert first["changed"] and len(first["written"]) == 3
    again = doc()
    for att in again["attempts"]:
        att["resumed"] = True  # today's view of the same attempts
    second = R.write(d, again, plot=False, now=2000)
    assert not second["changed"] and second["written"] == []
    stored = json.loads((tmp_path / "run" / "node1" / "results.json").read_text())
    assert stored["updated"] == first["doc"]["updated"]
    assert all("resumed" not in a for a in stored["attempts"])
    assert stored["stats"] == {"launches": 4, "failed_launches": 1, "candidates": 3, "wall_s": 450.0,
                               "launch_s": 50.0, "bench_s": 400.0}
    more = doc()
    more["attempts"].append(attempt(5, {1: (281.0, 275.0), 32: (40.0, 1300.0)}))
    third = R.write(d, more, plot=False, now=3000)
    assert third["changed"] and third["doc"]["stats"]["launches"] == 5


def test_summary_compares_runs_of_the_same_host(tmp_path):
    sweep = doc()
    sweep["run"] = "sweep"
    R.write(str(tmp_path / "sweep" / "node1"), sweep, plot=False)
    R.write(str(tmp_path / "sweep" / "node2"), sweep, plot=False)  # another host: not listed
    adaptive = doc()
    adaptive["run"] = "adaptive"
    adaptive["settings"] = dict(adaptive["settings"], strategy="adaptive")
    adaptive["attempts"] = adaptive["attempts"][:2]
    R.write(str(tmp_path / "adaptive" / "node1"), adaptive, plot=False)
    md = (tmp_path / "adaptive" / "node1" / "summary.md").read_text()
    assert "## Runs compared" in md
    assert "| adaptive | adaptive | latency (C=1) | s4-k1-d5 | 2 | 3 min 45 s |" in md
    assert "| sweep | sweep | latency (C=1) | s4-k1-d5 | 4 | 7 min 30 s |" in md
    assert md.count("| sweep | sweep |") == 1
    # the comparison is a view: results.json does not depend on the neighbours
    assert "comparison" not in json.loads((tmp_path / "adaptive" / "node1" / "results.json").read_text())


def test_summary_says_whether_the_noise_was_measured_or_assumed():
    from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import mtp_tune_node_noise
    from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import mtp_tune_candidates
    d = doc()
    assert "- Noise:" not in R.render_summary(R.finalize(d))  # a results file from before the field
    d["winner"]["noise"] = mtp_tune_node_noise([])
    md = R.render_summary(R.finalize(d))
    assert "- Noise: assumed: no setting was launched twice on this node (mtp_tune_noise 1.5%); the tie bands use +/-1.5 %" in md
    att = {"key": "s3-k1-d4", "candidate": mtp_tune_candidates([3])[0], "status": "ok"}
    twice = [dict(att, metrics={"1": {"decode_tps_per_request": {"mean": v}, "failed": 0}}) for v in (100.0, 80.0)]
    d["winner"]["noise"] = mtp_tune_node_noise(twice)
    md = R.render_summary(R.finalize(d))
    assert "- Noise: measured: 16% between launches of one setting (1 degree of freedom), above mtp_tune_noise 1.5%; " \
           "the tie bands use +/-16 %" in md


def test_summary_of_a_search_at_the_judged_level_marks_the_winners_full_row():
    d = doc()
    d["settings"]["search_levels"] = [1]
    d["attempts"] = [
        attempt(3, {1: (234.0, 230.0)}),
        attempt(4, {1: (277.0, 270.0)}),
        attempt(4, {1: (275.0, 268.0), 32: (52.0, 1750.0)},
                reason="levels C=1,32: s4-k1-d5, the winner, measured at every level for the report"),
    ]
    md = R.render_summary(R.finalize(d))
    assert "Search benchmarked C=1 only (mtp_tune_search_levels=judged)" in md
    assert "| s4-k1-d5 | - | 277 / 270 | - |" in md
    assert "| **s4-k1-d5** (winner) all levels | - | 275 / 268 | 52 / 1750 |" in md
    assert "| s3-k1-d4 | - | 234 / 230 | - |" in md and md.count("(winner)") == 1
    # a search at every level says nothing about it
    d["settings"]["search_levels"] = [1, 32]
    assert "Search benchmarked" not in R.render_summary(R.finalize(d))


def test_the_converged_winners_levels_are_its_row_in_the_summary_and_the_csv():
    """After a search at the judged level with the converge on, the winner's other levels come
    from the converged server's smoke benchmark (converge.levels), not from a launch of its own."""
    d = doc()
    d["settings"]["search_levels"] = [1]
    d["attempts"] = [attempt(3, {1: (234.0, 230.0)}), attempt(4, {1: (277.0, 270.0)})]
    d["converge"] = {"key": "s4-k1-d5", "at": "2026-12-02T16:00:00Z", "summary": "s4-k1-d5 restarted and ready",
                     "verify": {"ok": True},
                     "levels": {"1": level(1, 274.0, 269.0), "32": level(32, 51.0, 1730.0)}}
    md = R.render_summary(R.finalize(d))
    assert "the winner by the converged server's smoke benchmark (row marked \"converged\")" in md
    assert "| **s4-k1-d5** (winner) | - | 277 / 270 | - |" in md
    assert "| **s4-k1-d5** converged | - | 274 / 269 | 51 / 1730 | - | - |" in md
    rows = list(csv.DictReader(io.StringIO(R.render_csv(R.finalize(d)))))
    conv = [r for r in rows if r["attempt"] == "converge"]
    assert [(r["key"], r["steps"], r["concurrency"], r["output_throughput"]) for r in conv] == [
        ("s4-k1-d5", "4", "1", "269"), ("s4-k1-d5", "4", "32", "1730")]
    # a smoke at the judged level alone (no levels stored) adds no row, and the older wording stays
    d["converge"].pop("levels")
    md = R.render_summary(R.finalize(d))
    assert "converged |" not in md and "the winner and the candidates tied with it were launched again" in md
    assert not [r for r in csv.DictReader(io.StringIO(R.render_csv(R.finalize(d)))) if r["attempt"] == "converge"]
    # what set_fact may leave for "no levels" reads as none
    d["converge"]["levels"] = "None"
    assert "converged |" not in R.render_summary(R.finalize(d))


def test_summary_names_what_the_model_alone_rules_out_and_where_it_broke():
    d = doc()
    d["settings"]["strategy"] = "adaptive"
    d["winner"]["unverified"] = []
    d["winner"]["model_rules_out"] = [
        {"key": "s1-k1-d2", "steps": 1, "topk": 1, "draft_tokens": 2, "bound": None, "gain": None,
         "bound_convex": 250.0, "gain_convex": -0.1, "convex_rules_out": True},
        {"key": "s2-k1-d3", "steps": 2, "topk": 1, "draft_tokens": 3, "bound": 300.0, "gain": 0.083,
         "bound_convex": 270.0, "gain_convex": -0.02, "convex_rules_out": True}]
    d["winner"]["model"] = {"holds": True, "broken": []}
    md = R.render_summary(R.finalize(d))
    assert "Could still beat" not in md
    line = [x for x in md.splitlines() if x.startswith("- Ruled out by the model alone")]
    assert len(line) == 1 and "steps 1 (no bound without it), steps 2 (up to +8 % without it)" in line[0]
    assert "break the model" not in md
    d["winner"]["model"] = {"holds": False, "broken": ["topk 1 at C=1: an extra draft token cost less than the one "
                                                       "before (draft tokens 4, 5, 7); only the monotone bound is used there"]}
    md = R.render_summary(R.finalize(d))
    assert "- The measurements break the model: topk 1 at C=1: an extra draft token cost less" in md


def test_summary_names_the_end_probe_for_adaptive_only_and_a_cheaper_tie_it_would_win():
    d = doc()
    d["settings"].update(strategy="adaptive", probe_ends="high")
    assert "- Strategy: adaptive (probe ends high, " in R.render_summary(R.finalize(d))
    d["settings"]["strategy"] = "climb"
    md = R.render_summary(R.finalize(d))
    assert "- Strategy: climb (noise band " in md and "probe ends" not in md
    d["winner"]["unverified"] = [{"key": "s2-k1-d3", "steps": 2, "topk": 1, "draft_tokens": 3, "bound": 270.0,
                                  "gain": -0.01, "bound_convex": 270.0, "gain_convex": -0.01,
                                  "convex_rules_out": False}]
    line = [x for x in R.render_summary(R.finalize(d)).splitlines() if x.startswith("- Could still beat")]
    assert len(line) == 1 and "steps 2 (up to -1 %; it has fewer draft tokens, so a tie goes to it)" in line[0]


# ---------------------------------------------------------------------------- what binds: levers, caps, queues

LEVERED = {"mamba_full_memory_ratio": 4.0, "max_mamba_cache_size": None, "enable_linear_replayssm_spec": True}


def levered_doc():
    """A throughput run at C=32 over C=1,32,48 on a GDN hybrid: without a lever the state pool caps the
    running requests (29 at steps 1, 14 at steps 8), so C=32 and C=48 queue; ReplaySSM and a larger
    mamba share lift steps 8 to a cap of 40, above the judged level (C=48 still queues). The winner
    was searched at C=32 only, launched again with its tie, and its other levels come from the
    converged server's smoke."""
    d = doc()
    d["settings"].update(objective="throughput", level=32, concurrency=[1, 32, 48], search_levels=[32])
    d["attempts"] = [
        attempt(1, {1: (150.0, 148.0), 32: (40.0, 1160.0)}, running_cap=29),
        attempt(8, {1: (260.0, 255.0), 32: (70.0, 980.0)}, running_cap=14,
                pool={"hybrid": True, "max_running_requests": 14, "slots_per_request": 5, "capped_by": "mamba"}),
        attempt(8, {32: (60.0, 1900.0)}, overrides=dict(LEVERED), running_cap=40, pool={"hybrid": True},
                numerics={"checked": True, "differ": 0, "of": 16}),
        # a record from before running_cap: the benchmark's server facts say the cap
        attempt(4, {32: (55.0, 1500.0)}, overrides={"max_running_requests": 24, "cuda_graph_max_bs": 24},
                server={"effective_max_running_requests": 24}),
        attempt(8, {32: (62.0, 1880.0)}, overrides=dict(LEVERED), running_cap=40,
                reason="levels C=32: s8-k1-d9, tied with the winner, measured again"),
    ]
    d["winner"] = {"key": "s8-k1-d9", "candidate": {"steps": 8, "topk": 1, "draft_tokens": 9},
                   "overrides": dict(LEVERED), "score": {"value": 1890.0, "level": 32},
                   "decided_by": "beats the runner-up beyond noise"}
    d["converge"] = {"key": "s8-k1-d9", "at": "2026-12-02T16:00:00Z", "summary": "s8-k1-d9 restarted and ready",
                     "verify": {"ok": True}, "levels": {"1": level(1, 250.0, 246.0), "32": level(32, 61.0, 1885.0),
                                                        "48": level(48, 50.0, 1950.0)}}
    return d


def test_notation_names_depth_and_every_lever_once():
    base = {"candidate": {"steps": 8, "topk": 1, "draft_tokens": 9}}
    assert R.notation(base) == "s8-k1-d9"
    assert R.notation(dict(base, overrides=LEVERED)) == "s8-k1-d9+ratio4+replay"
    assert R.notation(dict(base, overrides={"enable_linear_replayssm_spec": "false", "max_mamba_cache_size": 96,
                                            "mamba_full_memory_ratio": 0.5, "cuda_graph_max_bs": 64,
                                            "max_running_requests": None})) == "s8-k1-d9+cgbs64+ratio0.5+mms96"
    # a lever this report does not know still shows; a converge row without a candidate keeps its key
    assert R.notation(dict(base, overrides={"some_new_knob": 3})) == "s8-k1-d9+some_new_knob=3"
    assert R.notation({"key": "s2-k1-d3", "candidate": {}}) == "s2-k1-d3"
    assert R.setting_argv(base["candidate"], dict(LEVERED, max_mamba_cache_size=96, cuda_graph_max_bs=64)) == (
        "--speculative-num-steps 8 --speculative-eagle-topk 1 --speculative-num-draft-tokens 9 "
        "--cuda-graph-max-bs-decode 64 --mamba-full-memory-ratio 4 --max-mamba-cache-size 96 "
        "--enable-linear-replayssm-spec")


def test_the_argv_spelling_is_the_pinned_releases():
    """The report's flags are the ones the service role renders for the pinned release."""
    import yaml
    with open(os.path.join(ROOT, "roles", "service", "vars", "sglang_releases.yml")) as fh:
        flags = yaml.safe_load(fh)["_sglang_service_releases"]["0.5.23"]
    known = [(k, f) for k, _tag, f in R.LEVERS if k in flags]
    assert ("cuda_graph_max_bs", "--cuda-graph-max-bs-decode") in known
    for key, flag in known + [("speculative_num_steps", "--speculative-num-steps"),
                              ("speculative_eagle_topk", "--speculative-eagle-topk"),
                              ("speculative_num_draft_tokens", "--speculative-num-draft-tokens")]:
        assert flags[key] == flag, key
    assert [f for _k, f in R.DEPTH_FLAGS] == [flags["speculative_num_steps"], flags["speculative_eagle_topk"],
                                              flags["speculative_num_draft_tokens"]]


def test_summary_first_lines_give_the_setting_its_figures_and_the_rollout(tmp_path):
    out_dir = tmp_path / "run" / "node1"
    R.write(str(out_dir), levered_doc(), plot=False, compare=False)
    lines = (out_dir / "summary.md").read_text().splitlines()
    assert lines[0] == "# MTP tuning: default on node1"
    assert lines[2] == ("**Setting to run: s8-k1-d9+ratio4+replay**: `--speculative-num-steps 8 --speculative-eagle-topk 1 "
                        "--speculative-num-draft-tokens 9 --mamba-full-memory-ratio 4 --enable-linear-replayssm-spec`")
    # every level, from the converged smoke; C=48 is above the cap of 40
    assert lines[4] == ("- Its figures, per-request decode tok/s / aggregate output tok/s (from the converged server's "
                        "smoke benchmark): C=1 250 / 246, C=32 61 / 1885, C=48 50 / 1950 q; running cap 40: q marks a "
                        "level above it, where requests queue")
    assert lines[5].startswith("- Roll it out: `ansible-playbook blackwell.sglang.rollout -i <inventory> "
                               "-e mtp_tune_from=%s`" % out_dir)
    # the variable the command passes is the one the rollout playbook reads
    with open(os.path.join(ROOT, "playbooks", "rollout.yml")) as fh:
        assert "rollout_mtp_tune_from: \"{{ mtp_tune_from | default('') }}\"" in fh.read()
    assert lines[7] == "## How it was chosen"
    md = "\n".join(lines)
    assert "- **Winner: steps 8** (topk 1, 9 draft tokens, mamba-full-memory-ratio 4, enable-linear-replayssm-spec): " \
           "1890.0 at C=32" in md and "- Fitted:" not in md
    assert "- Cap levers: `--mamba-full-memory-ratio 4 --enable-linear-replayssm-spec` (set to raise the running cap; " \
           "unset ones are SGLang's defaults); greedy outputs checked: 0 of 16 differ" in md


def test_summary_first_lines_without_converge_levels_and_without_winner():
    d = levered_doc()
    d["converge"].pop("levels")
    lines = R.render_summary(R.finalize(d)).splitlines()
    # the winner's row is its launch at most levels: the first levered launch, C=32 only
    assert lines[4].startswith("- Its figures, per-request decode tok/s / aggregate output tok/s (from its launch): "
                               "C=32 60 / 1900; running cap 40")
    assert "-e mtp_tune_from=<this results directory>" in lines[5]
    d["converge"]["levels"] = {"48": level(48, 50.0, 1950.0)}
    line = R.render_summary(R.finalize(d)).splitlines()[4]
    assert "(C=48 from the converged server's smoke benchmark, C=32 from its launch): C=32 60 / 1900, C=48 50 / 1950 q" \
        in line
    d["attempts"][2].pop("running_cap")
    assert "running cap unknown" in R.render_summary(R.finalize(d)).splitlines()[4]
    d["winner"] = None
    assert R.render_summary(R.finalize(d)).splitlines()[2].startswith("**Setting to run: none yet**")
    d = levered_doc()
    d["runs"] = [{"id": "A", "started": "T0", "state": "running"}]
    assert "(the best so far: the run has not finished)" in R.render_summary(R.finalize(d)).splitlines()[2]


def test_table_shows_each_candidates_cap_and_marks_queue_bound_levels():
    md = R.render_summary(R.finalize(levered_doc()))
    assert "| candidate | cap | C=1 | C=32 | C=48 | launch | bench |" in md
    assert "| s1-k1-d2 | 29 | 150 / 148 | 40 / 1160 q | - |" in md
    assert "| s8-k1-d9 | 14 (mamba) | 260 / 255 | 70 / 980 q | - |" in md
    assert "| **s8-k1-d9+ratio4+replay** (winner) | 40 | - | 60 / 1900 | - |" in md
    assert "| s4-k1-d5+cgbs24+mrr24 | 24 | - | 55 / 1500 q | - |" in md  # the cap from server facts
    assert "| s8-k1-d9+ratio4+replay all levels | 40 | - | 62 / 1880 | - |" in md
    assert "| **s8-k1-d9+ratio4+replay** converged | 40 | 250 / 246 | 61 / 1885 | 50 / 1950 q | - | - |" in md
    assert R.QUEUE_LEGEND in md and md.count("(winner)") == 1
    assert "Candidates: s<steps>-k<topk>-d<draft tokens>, then a suffix per lever that is set: +cgbs<n> " \
           "(--cuda-graph-max-bs-decode), +mrr<n> (--max-running-requests), +ratio<n> (--mamba-full-memory-ratio), " \
           "+replay (--enable-linear-replayssm-spec)." in md
    # an older record's cap field counts as well; without any cap nothing is queue-bound
    d = levered_doc()
    d["attempts"][0].pop("running_cap")
    d["attempts"][0]["cap"] = 20
    assert "| s1-k1-d2 | 20 | 150 / 148 | 40 / 1160 q | - |" in R.render_summary(R.finalize(d))
    for att in d["attempts"]:
        for k in ("running_cap", "cap", "server"):
            att.pop(k, None)
    md = R.render_summary(R.finalize(d))
    assert " q |" not in md and R.QUEUE_LEGEND not in md


def test_csv_has_the_notation_the_cap_and_queue_bound():
    rows = list(csv.DictReader(io.StringIO(R.render_csv(R.finalize(levered_doc())))))
    assert list(rows[0].keys()) == list(R.CSV_FIELDS)
    got = [(r["attempt"], r["candidate"], r["concurrency"], r["running_cap"], r["queue_bound"]) for r in rows]
    assert got == [
        ("1", "s1-k1-d2", "1", "29", "false"), ("1", "s1-k1-d2", "32", "29", "true"),
        ("2", "s8-k1-d9", "1", "14", "false"), ("2", "s8-k1-d9", "32", "14", "true"),
        ("3", "s8-k1-d9+ratio4+replay", "32", "40", "false"),
        ("4", "s4-k1-d5+cgbs24+mrr24", "32", "24", "true"),
        ("5", "s8-k1-d9+ratio4+replay", "32", "40", "false"),
        ("converge", "s8-k1-d9+ratio4+replay", "1", "40", "false"),
        ("converge", "s8-k1-d9+ratio4+replay", "32", "40", "false"),
        ("converge", "s8-k1-d9+ratio4+replay", "48", "40", "true")]
    lev = rows[4]
    assert (lev["mamba_full_memory_ratio"], lev["max_mamba_cache_size"], lev["enable_linear_replayssm_spec"]) == \
        ("4", "", "true")
    # the key column stays the candidate's key (the rollout and older readers match on it)
    assert lev["key"] == "s8-k1-d9"


def test_plot_series_one_line_per_candidate_with_the_converged_levels():
    series = R.plot_series(R.finalize(levered_doc()))
    labels = [ln["label"] for ln in series["lines"]]
    assert len(labels) == len(set(labels))
    assert labels == ["s1-k1-d2", "s8-k1-d9", "s8-k1-d9+ratio4+replay", "s4-k1-d5+cgbs24+mrr24"]
    win = [ln for ln in series["lines"] if ln["winner"]]
    assert len(win) == 1 and win[0]["label"] == "s8-k1-d9+ratio4+replay"
    # two launches and the converged smoke at C=32, the smoke alone at C=1 and C=48
    assert win[0]["levels"] == [1, 32, 48]
    assert win[0]["aggregate"] == [246.0, pytest.approx((1900.0 + 1880.0 + 1885.0) / 3), 1950.0]
    assert win[0]["queue_bound"] == [False, False, True]
    depth = series["depth"]
    assert depth["figure"] == "aggregate"
    # at C=32 steps 8's best is the levered one; steps 4 and 1 are queue-bound
    assert [(p[0], p[2], p[3]) for p in depth["levels"][32]] == [
        (1, True, "s1-k1-d2"), (4, True, "s4-k1-d5+cgbs24+mrr24"), (8, False, "s8-k1-d9+ratio4+replay")]
    assert [(p[0], p[2]) for p in depth["levels"][48]] == [(8, True)]


def test_plot_draws_the_converged_row_and_names_each_candidate_once(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="matplotlib is optional on the controller; the PNG needs it")
    from matplotlib.figure import Figure
    drawn = []
    real_savefig = Figure.savefig

    def keep(fig, *args, **kwargs):  # the figure render_png saves, to read its lines and legends
        drawn.append(fig)
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    assert R.render_png(R.finalize(levered_doc()), str(tmp_path / "plot.png")) is None
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    aggregate = drawn[0].axes[1]
    legend = [t.get_text() for t in aggregate.get_legend().get_texts()]
    assert len(legend) == len(set(legend)) == 4 and "s8-k1-d9+ratio4+replay (winner)" in legend
    win = [ln for ln in aggregate.get_lines() if ln.get_label() == "s8-k1-d9+ratio4+replay (winner)"]
    assert len(win) == 1 and list(win[0].get_xdata()) == [1, 32, 48]  # C=1 and C=48: the converged smoke
    by_depth = drawn[0].axes[2]
    assert [t.get_text() for t in by_depth.get_legend().get_texts()] == ["C=1", "C=32", "C=48"]
    hollow = [(list(ln.get_xdata()), list(ln.get_ydata())) for ln in by_depth.get_lines()
              if ln.get_markerfacecolor() == "none"]
    assert ([1], [1160.0]) in hollow and ([8], [1950.0]) in hollow
    assert ([8], [pytest.approx((1900.0 + 1880.0 + 1885.0) / 3)]) not in hollow
