"""summary.md says when the run behind it has not finished, which runs were interrupted, and
that measurements were not reused."""

from ansible_collections.blackwell.sglang.plugins.module_utils import mtp_report

ATT = {"key": "s1-k1-d2", "candidate": {"steps": 1, "topk": 1, "draft_tokens": 2}, "status": "ok",
       "metrics": {"1": {"output_throughput": 100.0}}}
WIN = {"key": "s1-k1-d2", "candidate": {"steps": 1, "topk": 1, "draft_tokens": 2}, "score": {"value": 100.0, "level": 1}}


def _doc(**kw):
    doc = {"schema": 1, "run": "r", "host": "h", "settings": {"objective": "latency", "level": 1},
           "attempts": [ATT], "winner": WIN, "updated": "T9"}
    doc.update(kw)
    return doc


def test_running_run_is_marked_and_winner_provisional():
    text = mtp_report.render_summary(_doc(runs=[{"id": "A", "started": "T0", "state": "running"}]))
    assert "**Run not finished**: run A (started T0) is measuring, or was interrupted at T9" in text
    assert "best so far, not a decision" in text


def test_failed_run_is_marked():
    text = mtp_report.render_summary(_doc(runs=[{"id": "A", "started": "T0", "state": "failed", "ended": "T1"}]))
    assert "**Run failed**: run A (started T0, ended T1)" in text


def test_finished_after_an_interruption():
    runs = [{"id": "A", "started": "T0", "state": "interrupted"}, {"id": "B", "started": "T1", "state": "finished"}]
    text = mtp_report.render_summary(_doc(runs=runs, superseded=[ATT, ATT]))
    assert "not finished" not in text and "not a decision" not in text
    assert "- Interrupted runs: A (started T0) (resumed later)" in text
    assert "- Not reused: 2 earlier measurement(s)" in text


def test_a_file_without_history_reads_as_before():
    text = mtp_report.render_summary(_doc())
    assert "Run " not in text and "Interrupted" not in text and "Not reused" not in text


def test_write_keeps_history_and_superseded(tmp_path):
    runs = [{"id": "A", "started": "T0", "state": "running"}]
    out = mtp_report.write(str(tmp_path), _doc(runs=runs, superseded=[ATT]), plot=False, compare=False)
    assert out["doc"]["runs"] == runs and out["doc"]["superseded"] == [ATT]
    assert mtp_report.load(str(tmp_path))["doc"]["runs"] == runs
