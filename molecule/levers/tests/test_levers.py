"""The nodes and the controller after the levers scenario: node 1 was tuned for aggregate
throughput at C=32 with the state-pool lever, its capped start was launched again lifted, the
winner serves with its lever, and the rollout carried the same setting to node 2."""

import json
import os
import re

import pytest

UNIT = "/etc/systemd/system/sglang-qwen.service"
TUNED = "sglang-levers-1"


def _results():
    eph = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if not eph:
        pytest.skip("MOLECULE_EPHEMERAL_DIRECTORY is not set: these checks read the controller-side report")
    path = os.path.join(eph, "results", "molecule", TUNED)
    with open(os.path.join(path, "results.json")) as fh:
        doc = json.load(fh)
    with open(os.path.join(path, "summary.md")) as fh:
        return doc, fh.read()


def _exec_line(host):
    return [line for line in host.file(UNIT).content_string.splitlines() if line.startswith("ExecStart=")][0]


def _flag(line, flag):
    m = re.search(r"%s (\S+)" % re.escape(flag), line)
    return m.group(1) if m else None


def test_the_capped_start_was_launched_again_lifted():
    doc, _summary = _results()
    atts = [a for a in doc["attempts"] if a.get("reason") and not a["reason"].startswith("levels ")]
    first = atts[0]
    # the seed at SGLang's defaults: the state pool caps it below the judged load
    assert first["key"] == "s3-k1-d4" and first["status"] == "failed" and first["failure_class"] == "capped"
    assert first["running_cap"] is not None and first["running_cap"] < 32
    assert first["pool"].get("max_mamba_cache_size") and first["pool"].get("slots_per_request") == 5
    assert not (first.get("overrides") or {}).get("mamba_full_memory_ratio")
    lifted = atts[1]
    assert lifted["key"] == "s3-k1-d4" and lifted["status"] == "ok" and lifted["reason"].startswith("lift ")
    assert float(lifted["overrides"]["mamba_full_memory_ratio"]) > 0.9
    assert lifted["running_cap"] >= 32
    # every later depth launched lifted from the start: no second capped launch
    later = atts[2:]
    assert "s4-k1-d5" in {a["key"] for a in later}
    for att in later:
        assert att["status"] == "ok", att
        assert att["overrides"].get("mamba_full_memory_ratio") and att["running_cap"] >= 32, att


def test_the_winner_serves_with_its_lever_on_both_nodes(host):
    doc, _summary = _results()
    win = doc["winner"]
    ratio = win["overrides"]["mamba_full_memory_ratio"]
    line = _exec_line(host)
    assert _flag(line, "--speculative-num-steps") == str(win["candidate"]["steps"])
    assert float(_flag(line, "--mamba-full-memory-ratio")) == float(ratio)
    assert host.service("sglang-qwen.service").is_running
    journal = host.run("journalctl -u sglang-qwen.service -o cat --no-pager").stdout
    starts = journal.split("Load weight begin")
    last = starts[-1] if len(starts) > 1 else journal
    # the converged start is not capped below the judged load
    caps = [int(c) for c in re.findall(r"max_running_requests is capped to (\d+)", last)]
    assert all(c >= 32 for c in caps), caps


def test_the_report_opens_with_the_answer():
    doc, summary = _results()
    head = "\n".join(summary.splitlines()[:12])
    assert "--mamba-full-memory-ratio" in head
    assert "rollout" in head
    # the capped launch's cap is in the table
    assert str(doc["attempts"][0]["running_cap"]) in summary
