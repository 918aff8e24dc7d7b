# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The real-SGLang tools (tests/gpu/real_sglang/tune_real.py and server.py) against the simulator.

They are written for a GPU machine without systemd, where a mistake costs lent device time; this
drives the same command line against sglang_sim (same CLI and HTTP API, 50x faster) so that the
loop, the records, the resume, the failure path and the process clean-up are known to work
before the first real launch.  Figures are the simulator's and noisy at this size: only
structure and invariants are asserted.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import free_port

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tests" / "gpu" / "real_sglang" / "tune_real.py"
SIM = ROOT / "sim"
TIME_SCALE = "0.02"


def _load_tune_real():
    """tune_real.py by path (its directory is no package); it loads server.py the same way."""
    spec = importlib.util.spec_from_file_location("real_sglang_tune_real", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


real_server = _load_tune_real().srv


@pytest.fixture(name="sim_env")
def fixture_sim_env(tmp_path):
    env = dict(os.environ)
    for key in [k for k in env if k.startswith("SGLANG_SIM_")]:
        del env[key]
    env.update({
        "PYTHONPATH": os.pathsep.join([str(SIM)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        "SGLANG_SIM_CONFIG": str(tmp_path / "no-config.json"),
        "SGLANG_SIM_STATE_DIR": str(tmp_path / "state"),
        "SGLANG_SIM_DEV_DIR": str(tmp_path / "dev"),
        "SGLANG_SIM_TIME_SCALE": TIME_SCALE,
        "SGLANG_SIM_LOAD_SECONDS": "1",
        "SGLANG_SIM_PROFILE": "h200-x1",
    })
    return env


def _tune(env, tmp_path, out, *extra, server_args="--model-path Qwen/Qwen3-8B"):
    argv = [sys.executable, str(TOOL), "--server-module", "sglang_sim.launch_server", "--algorithm", "NEXTN",
            "--server-args", server_args, "--steps", "1-3", "--levels", "1", "--bench-requests", "3",
            "--bench-input-len", "16", "--bench-output-len", "16", "--bench-time-scale", TIME_SCALE,
            "--ready-timeout", "60", "--ready-poll", "0.2", "--stop-grace", "15", "--port", str(free_port()),
            "--log-dir", str(tmp_path / "logs"), "--out", str(out)] + list(extra)
    res = subprocess.run(argv, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         timeout=400, check=False)
    text = res.stdout.decode() + res.stderr.decode()
    doc = json.loads(out.read_text()) if out.exists() else None
    return res.returncode, text, doc


def _sim_pids(tmp_path):
    """Every rank process the simulator registered in its state dir (one file per process)."""
    pids = []
    for f in (tmp_path / "state" / "procs").glob("*.json"):
        pids.append(int(json.loads(f.read_text())["pid"]))
    return pids


def _check_run(doc, strategy):
    keys = [c["key"] for c in doc["candidates"]]
    assert keys == ["s1-k1-d2", "s2-k1-d3", "s3-k1-d4"]
    assert doc["strategy"] == strategy and doc["state"] == "finished"
    launched = [a for a in doc["attempts"] if not a.get("resumed")]
    assert doc["launches"] == len(launched) >= 1
    assert sorted(a["launch"] for a in launched) == list(range(1, len(launched) + 1))
    assert doc["winner"] is not None and doc["winner"]["key"] in keys
    for att in launched:
        assert att["key"] in keys and att["status"] == "ok", att
        assert att["ready"]["ready"] and att["ready"]["ready_line"]
        assert att["timings"]["wait_s"] > 0
        fig = att["figures"]["1"]
        assert fig["completed"] == 3 and fig["output_throughput"] > 0 and fig["accept_length"] >= 1
        assert "--speculative-num-steps" in att["argv"]
        steps = att["argv"][att["argv"].index("--speculative-num-steps") + 1]
        assert int(steps) == att["candidate"]["steps"]
        assert att["stop"]["left"] == [] and att["stop"]["escaped"] == []
    return launched


def test_adaptive_sweep_resume_and_noise(sim_env, tmp_path):
    out_a, out_s = tmp_path / "adaptive.json", tmp_path / "sweep.json"

    rc, text, doc = _tune(sim_env, tmp_path, out_a, "--strategy", "adaptive", "--relaunch-noise", "1")
    assert rc == 0, text
    adaptive = _check_run(doc, "adaptive")
    assert adaptive[0]["reason"].startswith("adaptive")
    noise = doc["relaunch_noise"]
    # a start's deadline is generous: on a 2-core host busy with the rest of the suite a relaunch
    # once missed 20 s, and a failed relaunch leaves its sample without a value
    assert noise["key"] == adaptive[0]["key"] and noise["n"] == 2, (noise["samples"], text[-2000:])
    assert [s["origin"] for s in noise["samples"]] == ["search", "relaunch"]
    assert noise["mean"] > 0 and noise["cv"] is not None
    assert doc["launches_total"] == doc["launches"] + 1
    assert "winner " + doc["winner"]["key"] in text

    rc, text, doc = _tune(sim_env, tmp_path, out_s, "--strategy", "sweep")
    assert rc == 0, text
    sweep = _check_run(doc, "sweep")
    assert [a["key"] for a in sweep] == ["s1-k1-d2", "s2-k1-d3", "s3-k1-d4"]  # every candidate, cheapest first
    assert doc["launches_total"] == doc["launches"] == 3

    # Resuming the sweep launches nothing and keeps its winner; another strategy is refused.
    rc, text, again = _tune(sim_env, tmp_path, out_s, "--strategy", "sweep", "--resume", str(out_s))
    assert rc == 0, text
    assert again["launches"] == 0 and all(a.get("resumed") for a in again["attempts"])
    assert again["winner"]["key"] == doc["winner"]["key"]
    before = out_s.read_bytes()
    rc, text, dummy = _tune(sim_env, tmp_path, out_s, "--strategy", "adaptive", "--resume", str(out_s))
    assert rc == 2 and "strategy 'sweep' -> 'adaptive'" in text
    assert out_s.read_bytes() == before  # the refused file is left as it was

    launched = [a for d in (out_a, out_s) for a in json.loads(d.read_text())["attempts"]]
    pids = [p for a in launched for p in a["pids"]] + _sim_pids(tmp_path)
    assert len(pids) > len(launched)  # the ranks were seen, not only the parents
    assert [p for p in pids if real_server.pid_alive(p)] == []


def test_bad_flag_is_a_classified_failure(sim_env, tmp_path):
    out = tmp_path / "bad.json"
    rc, text, doc = _tune(sim_env, tmp_path, out, "--strategy", "sweep", "--steps", "1",
                          server_args="--model-path Qwen/Qwen3-8B --no-such-flag")
    assert rc == 1, text  # no candidate could serve, as the role ends
    assert "Traceback" not in text
    [att] = doc["attempts"]
    assert att["status"] == "failed" and att["failure_class"] == "bad_args"
    assert "--no-such-flag" in att["failure_line"] or "usage:" in att["failure_line"]
    assert att["ready"]["exit_code"] == 2 and att["journal_tail"]
    assert doc["winner"] is None and doc["launches"] == 1
    assert not real_server.pid_alive(att["pid"])


def test_accept_pin_follows_each_candidates_depth(tmp_path):
    """--accept-p sets SGLang's own pin per candidate: (1 - p^(k+1)) / (1 - p) at depth k."""
    mod = _load_tune_real()
    args = mod.parse_args(["--server-args", "--model-path /m", "--algorithm", "NEXTN", "--accept-p", "0.8",
                           "--out", str(tmp_path / "t.json")])
    tuner = mod.Tuner(args)
    env, pinned = tuner.candidate_env({"steps": 3})
    assert pinned == 2.952 and env["SGLANG_SIMULATE_ACC_LEN"] == "2.952"
    assert env["SGLANG_SIMULATE_ACC_METHOD"] == "match-expected"
    assert tuner.candidate_env({"steps": 12})[1] == round((1 - 0.8 ** 13) / 0.2, 4)
    assert "SGLANG_SIMULATE_ACC_LEN" not in tuner.env  # the run's own environment is not changed
    assert tuner.setup["accept_p"] == 0.8  # a resume under another pin is refused
    plain = mod.Tuner(mod.parse_args(["--server-args", "--model-path /m", "--out", str(tmp_path / "u.json")]))
    assert plain.candidate_env({"steps": 3}) == (plain.env, None)
    for bad in ("1", "0", "-0.2"):
        with pytest.raises(SystemExit):
            mod.parse_args(["--server-args", "x", "--accept-p", bad, "--out", str(tmp_path / "v.json")])
