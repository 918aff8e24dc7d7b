"""The fleet after the pool scenario: the pair tuned together (both launched candidates, the
rounds no more than a sweep split over two nodes), and every node, the smaller third too, serves
the pool's winner as rolled out from the run's results."""

import json
import math
import os

import pytest

UNIT = "/etc/systemd/system/sglang-qwen.service"
PAIR = ("sglang-pool-1", "sglang-pool-2")
CANDIDATES = 5


def _run_dir():
    eph = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if not eph:
        pytest.skip("MOLECULE_EPHEMERAL_DIRECTORY is not set: these checks read the controller-side report")
    return os.path.join(eph, "results", "pool")


def _doc(name):
    with open(os.path.join(_run_dir(), name, "results.json")) as fh:
        return json.load(fh)


def _settings(host):
    for line in host.file(UNIT).content_string.splitlines():
        if line.startswith("# sglang-settings: "):
            return json.loads(line[len("# sglang-settings: "):])
    pytest.fail("no sglang-settings comment in the unit")


def test_pool_report_holds_both_nodes_launches():
    pool = _doc("pool")
    launched = [a for a in pool["attempts"] if a["status"] in ("ok", "failed")]
    assert {a["node"] for a in launched} == set(PAIR)
    assert pool["winner"]["key"]
    # one launch per node per round; the search's rounds (the completing round aside) fit in the
    # sweep's split over two nodes
    search_rounds = {a["round"] for a in launched if not str(a.get("reason") or "").startswith("levels ")}
    assert len(search_rounds) <= math.ceil(CANDIDATES / 2.0), sorted(search_rounds)
    for name in PAIR:
        own = _doc(name)
        assert own["winner"]["key"] == pool["winner"]["key"]
        assert {a.get("node", name) for a in own["attempts"]} == {name}


def test_every_node_serves_the_winner(host):
    steps = _doc("pool")["winner"]["candidate"]["steps"]
    settings = _settings(host)
    assert settings["speculative_num_steps"] == steps
    assert host.service("sglang-qwen.service").is_running


def _launches(doc):
    return sorted((a["key"], (a.get("timings") or {}).get("started") or "") for a in doc["attempts"])


def test_the_later_run_converged_the_pair_without_launching_again():
    pool = _doc("pool")
    for name in PAIR:
        own = _doc(name)
        assert own["converge"]["key"] == pool["winner"]["key"]
        assert own["converge"]["verify"]["ok"] is True
        # the later run's launches are the earlier runs' (resumed), none of its own
        with open(os.path.join(_run_dir(), name, "before-converge.json")) as fh:
            before = json.load(fh)
        assert _launches(own) == _launches(before)
