# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""tests/gpu/real_sglang/device.sh's hybrid steps, as a lease runs them, against the simulator.

A lent GPU call is scarce (minutes a session, refused as often as not), so a broken step costs a
session's only measurement. This runs the steps the next lease runs (``hybrid`` with a relaunch,
``tunehyb`` cut by its time limit and resumed by the next call) on sglang_sim, which serves the
trimmed hybrid's own config.json and pins the accept length by SGLang's knob as the release does.
Asserted: what the tarball brings back, the pin each start and each tune candidate ran under, the
accept length measured against it, that a resumed tune launches only what is left, and that the
winner it records is the one the role's decision takes from its attempts. Figures are
the simulator's; only structure and the pin are asserted."""

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from loopback import free_port

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import chain_tau

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "tests" / "gpu" / "real_sglang" / "device.sh"
SIM = ROOT / "sim"


def redecide(doc, tmp_path):
    """The winner the role's own decision (tune_real.Tuner.winner: mtp_winner with the role's
    defaults) takes from the record's attempts, and the launch it would make next."""
    spec = importlib.util.spec_from_file_location("real_sglang_tune_real_steps",
                                                  ROOT / "tests" / "gpu" / "real_sglang" / "tune_real.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    tuner = mod.Tuner(mod.parse_args([
        "--server-args", " ".join(doc["setup"]["server_args"]), "--algorithm", "NEXTN", "--draft", "",
        "--strategy", doc["strategy"], "--steps", "1-6", "--levels", "1", "--accept-p", "0.8",
        "--out", str(tmp_path / "redecided.json")]))
    tuner.attempts = doc["attempts"]
    return tuner.winner(), tuner.next_launch()


@pytest.fixture(name="lease")
def fixture_lease(tmp_path):
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    # make_hybrid.py reads the special tokens' ids and copies the two files; the sim needs no more
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"<s>": 0, "</s>": 1}}}))
    (tok / "tokenizer_config.json").write_text("{}")
    (tmp_path / "no-config.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_SIM_", "RS_", "SGLANG_SIMULATE"))}
    env.update({
        # device.sh runs python3: this interpreter (the venv's, with the collection's imports)
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join([str(SIM)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        "SGLANG_SIM_CONFIG": str(tmp_path / "no-config.json"),
        "SGLANG_SIM_STATE_DIR": str(tmp_path / "state"),
        "SGLANG_SIM_DEV_DIR": str(tmp_path / "dev"),
        "SGLANG_SIM_TIME_SCALE": "0.1",
        "SGLANG_SIM_LOAD_SECONDS": "1",
        "SGLANG_SIM_PROFILE": "h200-x1",
        "RS_SERVER_MODULE": "sglang_sim.launch_server",
        "RS_RESULTS": str(tmp_path / "res"),
        "RS_DIR": str(tmp_path / "rs"),
        "RS_TOKENIZER": str(tok),
        "RS_PORT": str(free_port()),
        "RS_HYB_READY_S": "60",
    })

    def call(steps, out, **extra):
        out.mkdir()
        run_env = dict(env, OUT=str(out), **extra)
        res = subprocess.run(["bash", str(DEVICE)] + steps, env=run_env, cwd=str(tmp_path),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=400, check=False)
        text = res.stdout.decode()
        with tarfile.open(out / "results.tgz") as tgz:
            names = [n[2:] if n.startswith("./") else n for n in tgz.getnames()]
            files = {n: tgz.extractfile(m).read().decode() for n, m in zip(names, tgz.getmembers())
                     if m.isfile() and n.endswith((".json", ".txt"))}
        return text, files

    return call, tmp_path


def test_hybrid_then_a_tune_cut_and_resumed(lease):
    call, tmp_path = lease
    text, files = call(["hybrid"], tmp_path / "out1", RS_HYB_DEPTHS="3 3r2", RS_HYB_LEVELS="1,4")
    assert "did not start" not in text, text[-3000:]
    for label in ("hyb_experts32_s3", "hyb_experts32_s3_r2"):
        mem = files["mem_%s.txt" % label]
        assert "accept_pinned=%.3f" % round(chain_tau(3, 0.8), 4) in mem and "ready=1" in mem, mem
        assert "Mamba Cache is allocated" in mem  # the state pool's line, as the real start logs it
        bench = json.loads(files["bench_%s.json" % label])
        c1 = [lv for lv in bench["levels"] if lv["concurrency"] == 1][0]
        assert abs(c1["accept_length"] - chain_tau(3, 0.8)) < 0.12, c1["accept_length"]
    assert json.loads(files["config_experts32.json"])["num_experts"] == 32

    # the role's defaults over steps 1-6, stopped by its time limit after the first launches...
    name = "tunehyb_experts32_climb_p0.8.json"
    # (a start here takes 2 s of load: 20 simulated seconds at a tenth, so 5 s hold 2 at most)
    text, files = call(["tunehyb"], tmp_path / "out2", RS_STEPS="1-6", RS_TUNE_SECONDS="5",
                       SGLANG_SIM_LOAD_SECONDS="20")
    first = json.loads(files[name])
    assert first["setup"]["accept_p"] == 0.8 and first["state"] == "interrupted", text[-3000:]
    done = [a for a in first["attempts"] if a["status"] == "ok"]
    assert len(done) <= 2, text[-3000:]
    # ...then resumed by the next call, which launches only what is left
    text, files = call(["tunehyb"], tmp_path / "out3", RS_STEPS="1-6", RS_TUNE_SECONDS="120",
                       SGLANG_SIM_LOAD_SECONDS="20")
    doc = json.loads(files[name])
    assert doc["state"] == "finished" and doc["winner"], text[-3000:]
    resumed = [a for a in doc["attempts"] if a.get("resumed")]
    assert [a["key"] for a in resumed] == [a["key"] for a in done]
    keys = [a["key"] for a in doc["attempts"]]
    assert len(keys) == len(set(keys))
    for att in doc["attempts"]:
        k = att["candidate"]["steps"]
        assert att["accept_pinned"] == round(chain_tau(k, 0.8), 4)
        if att["status"] == "ok":
            measured = att["metrics"]["1"]["request_accept_length"]
            assert abs(measured - att["accept_pinned"]) < 0.12, (k, measured)
    # what the record names is what the role decides from its attempts, with nothing left to launch
    winner, nxt = redecide(doc, tmp_path)
    assert winner["key"] == doc["winner"]["key"] and nxt is None
