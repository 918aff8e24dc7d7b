"""The nodes and the controller after the schedule scenario: node 1 tuned a per-load schedule
(each level's search over steps 2 and 4 at C=1 and C=16, then the tuned schedule), the schedule won
against the best single static setting and serves with its config file; the rollout carried it to node 2; the re-run (idempotence) launched nothing."""

import csv
import glob
import json
import os
import re

import pytest

UNIT = "/etc/systemd/system/sglang-qwen.service"
RECORD = "/etc/sglang/qwen/setting.json"
TUNED_CONFIG = {"1": {"candidate_steps": [4]}, "4": {"candidate_steps": [2]}}


def _dir():
    eph = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if not eph:
        pytest.skip("MOLECULE_EPHEMERAL_DIRECTORY is not set: these checks read the controller-side report")
    dirs = [d for d in glob.glob(os.path.join(eph, "results", "molecule", "*")) if os.path.isdir(d)]
    assert len(dirs) == 1, dirs  # one tuned node (its name follows SGLANG_NODE_NAME)
    return dirs[0]


def _results():
    path = _dir()
    with open(os.path.join(path, "results.json")) as fh:
        doc = json.load(fh)
    with open(os.path.join(path, "summary.md")) as fh:
        return doc, fh.read()


def _exec_line(host):
    return [line for line in host.file(UNIT).content_string.splitlines() if line.startswith("ExecStart=")][0]


def _flag(line, flag):
    m = re.search(r"%s(?: (\S+))?(?:\s|$)" % re.escape(flag), line)
    return None if m is None else (m.group(1) or True)


def test_each_level_was_searched_then_the_schedules_launched_once():
    doc, _summary = _results()
    atts = doc["attempts"]
    statics = [a for a in atts if not (a.get("overrides") or {}).get("speculative_adaptive")]
    # both depths, each benchmarked at both levels: the C=16 search reused the C=1 search's launches
    assert sorted(a["key"] for a in statics) == ["s2-k1-d3", "s4-k1-d5"]
    for att in atts:
        assert att["status"] == "ok" and sorted(att["metrics"], key=int) == ["1", "16"], att
    tuned = [a for a in atts if a.get("schedule") == "tuned"]
    # SGLang's default schedule is not launched (mtp_tune_schedule_default false)
    assert len(tuned) == 1 and len(atts) == 3
    # one slot per level's winner: steps 4 from batch size 1, steps 2 from ceil(sqrt(1 x 16)) = 4 on
    assert tuned[0]["schedule_config"] == TUNED_CONFIG
    assert tuned[0]["candidate"]["steps"] == 4 and re.match(r"^s4-k1-d5\+adaptive-[0-9a-f]{8}$", tuned[0]["key"])
    # the re-run launched nothing and wrote nothing: one run, every launch of it
    assert len(doc["runs"]) == 1 and {a["run"] for a in atts} == {doc["runs"][0]["id"]}
    assert doc["stats"]["launches"] == 3


def test_the_schedule_won_against_the_best_single_static():
    doc, _summary = _results()
    win = doc["winner"]
    table = win["schedule"]
    assert table["verdict"] == "schedule", table["why"]
    # the static best at its worst level: steps 4 (at 87 % of the best at C=16) or, within the tie
    # band of that, the cheaper steps 2 (at 83 % at C=1)
    assert table["single_static"] in ("s4-k1-d5", "s2-k1-d3")
    assert win["overrides"]["speculative_adaptive"] in (True, "true", "True")
    assert win["overrides"]["speculative_adaptive_config"] in (
        TUNED_CONFIG, {1: {"candidate_steps": [4]}, 4: {"candidate_steps": [2]}})
    rows = dict((r["level"], r) for r in table["rows"])
    assert rows[1]["best_static"]["key"] == "s4-k1-d5" and rows[16]["best_static"]["key"] == "s2-k1-d3"
    # the schedule serves each level at that level's best depth
    for level in (1, 16):
        assert rows[level]["schedule_tps"] >= rows[level]["best_static"]["tps"] * (1 - 2 * rows[level]["band"])
    # the verdict as the table shows it: the schedule's weakest level (its ratio to that level's best
    # static) beats the best single static's weakest beyond the widest band
    worst = [min(r[k] / r["best_static"]["tps"] for r in table["rows"]) for k in ("schedule_tps", "single_static_tps")]
    assert worst[0] / worst[1] - 1.0 > max(r["band"] for r in table["rows"]), (worst, table["rows"])
    assert rows[1]["default_tps"] is None and table["default_key"] is None
    assert doc["converge"]["key"] == win["key"] and doc["converge"]["verify"]["ok"]


def test_the_report_answers_with_the_schedule_and_the_table():
    doc, summary = _results()
    lines = summary.splitlines()
    assert lines[2].startswith("**Setting to run: per-load schedule 1:4 4:2** (SGLang's `--speculative-adaptive`, "
                               "starting at steps 4)")
    head = "\n".join(lines[:8])
    assert '`{"1": {"candidate_steps": [4]}, "4": {"candidate_steps": [2]}}`' in head
    assert "blackwell.sglang.rollout" in head and "-e mtp_tune_from=" in head
    table = lines.index("## Per-load schedule")
    assert lines[table + 4] == "| level | best static | schedule | SGLang default | best single static | tie band |"
    assert lines[table + 6].startswith("| C=1 | s4-k1-d5 ") and lines[table + 7].startswith("| C=16 | s2-k1-d3 ")
    assert lines[table + 9].startswith("**Verdict: the schedule**: ")
    with open(os.path.join(_dir(), "results.csv")) as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(set((r["candidate"], r["schedule"]) for r in rows)) == [
        ("s2-k1-d3", ""), ("s4-k1-d5", ""), ("schedule 1:4 4:2", "tuned")]


def test_both_nodes_serve_the_schedule_from_its_file(host):
    doc, _summary = _results()
    line = _exec_line(host)
    assert _flag(line, "--speculative-adaptive") is not None
    path = _flag(line, "--speculative-adaptive-config")
    assert re.match(r"^/etc/sglang/qwen/adaptive-[0-9a-f]{16}\.json$", str(path)), line
    assert _flag(line, "--speculative-num-steps") == "4"
    conf = host.file(path)
    assert conf.exists and conf.mode == 0o640 and conf.group == "sglang"
    assert json.loads(host.check_output("cat %s" % path)) == TUNED_CONFIG
    record = json.loads(host.check_output("cat %s" % RECORD))
    assert record["setting"]["speculative_adaptive"] is True
    assert record["setting"]["speculative_adaptive_config"] == TUNED_CONFIG
    assert record["provenance"]["by"] in ("mtp_tune", "rollout")
    assert host.service("sglang-qwen.service").is_running
    # the runtime moved between the slots' steps under load (the converge's or the rollout's smoke at C=16)
    journal = host.run("journalctl -u sglang-qwen.service -o cat --no-pager").stdout
    last = journal.split("Load weight begin")[-1]
    assert re.search(r"Switch adaptive runtime state: steps 4 -> 2", last), last[-2000:]
