"""Fixture: start simulator processes in a tmp state/dev dir; stop them (by pid) afterwards."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _simharness import Sim  # noqa: E402


@pytest.fixture
def start_sim(tmp_path):
    sims = []

    def start(args=(), env=None, port=None, subdir=None):
        base = tmp_path / subdir if subdir else tmp_path
        base.mkdir(exist_ok=True)
        sim = Sim(base, args, env, port)
        sims.append(sim)
        return sim

    yield start
    for sim in sims:
        sim.stop()
