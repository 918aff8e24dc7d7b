"""The simulator's ranks leave SGLang 0.5.23's /dev/shm families behind when killed, under the
release's names, and unlink on a clean exit only what the release unlinks."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_sim import config, shm

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location(
    "sglang_unit_guard", str(ROOT / "roles" / "service" / "files" / "sglang_unit_guard.py"))
guard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guard)

_RANK = """
import json, sys
from sglang_sim import shm
segs = shm.Segments(sys.argv[1], 2)
made = segs.create_rank(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
sys.stdout.write(json.dumps(made) + "\\n"); sys.stdout.flush()
if sys.stdin.readline().strip() == "close":
    segs.close()
"""


def _rank(shm_dir, rank, tp, instance_id="0123456789ab"):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "sim"))
    proc = subprocess.Popen([sys.executable, "-c", _RANK, str(shm_dir), str(rank), str(tp), instance_id],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    made = json.loads(proc.stdout.readline())
    return proc, [os.path.basename(p) for p in made]


def test_settings_default_to_dev_shm():
    s = config.load_settings({"SGLANG_SIM_CONFIG": "/nonexistent.json", "SGLANG_SIM_SHM_KIB": "8"})
    assert s["shm_dir"] == "/dev/shm" and s["shm_kib"] == 8


def test_names_follow_the_release():
    # load_snapshot.py shm_path_for; make_shm_name; PortArgs' instance_id
    assert shm.load_snapshot_name("0123456789ab") == "sglang_loads_0123456789ab_%s.shm" % (
        __import__("hashlib").blake2s(b"0123456789ab", digest_size=4).hexdigest())
    name = shm.make_shm_name("mq", pid=4242)
    assert name.startswith("sgl_shm_mq_4242_") and len(name.split("_")[-1]) == 8
    assert guard.shm_creator_pid(name) == 4242
    iid = shm.new_instance_id()
    assert len(iid) == 12 and int(iid, 16) >= 0


def test_a_killed_rank_leaves_every_family_and_a_clean_exit_only_the_load_snapshot(tmp_path):
    rank0, names0 = _rank(tmp_path, 0, 4)
    rank1, names1 = _rank(tmp_path, 1, 4)
    fams0 = sorted(guard.shm_family(n) for n in names0)
    assert fams0 == ["cuda.shm.*", "nccl-*", "sem.loky-*", "sgl_shm_mq_*", "sglang_loads_*"]
    assert sorted(guard.shm_family(n) for n in names1) == ["cuda.shm.*", "nccl-*"]
    mq = [n for n in names0 if n.startswith("sgl_shm_mq_")][0]
    assert guard.shm_creator_pid(mq) == rank0.pid
    nccl = [n for n in names0 if n.startswith("nccl-")][0]
    assert len(nccl) == len("nccl-") + 6
    for name in names0 + names1:
        st = os.stat(str(tmp_path / name))
        assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid()
        assert st.st_size == (16396 if name.startswith("sglang_loads_") else 32 if name.startswith("sem.") else 2048)
    rank0.send_signal(signal.SIGKILL)
    rank0.wait()
    rank1.stdin.write(b"close\n")
    rank1.stdin.close()
    assert rank1.wait(timeout=10) == 0
    # SIGKILL: all of rank 0's stay; the clean exit unlinked all of rank 1's.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names0)
    rank0b, names0b = _rank(tmp_path / "", 0, 1, instance_id="ffffffffffff")
    rank0b.stdin.write(b"close\n")
    rank0b.stdin.close()
    assert rank0b.wait(timeout=10) == 0
    # TP 1: no NCCL, no broadcast queue; the load-snapshot file survives even a clean exit.
    assert sorted(guard.shm_family(n) for n in names0b) == ["sem.loky-*", "sglang_loads_*"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names0 + [shm.load_snapshot_name("ffffffffffff")])


def test_no_shm_dir_no_segments(tmp_path):
    assert shm.Segments(str(tmp_path / "missing"), 4).create_rank(0, 4, "0123456789ab") == []


@pytest.mark.parametrize("kib", [1, 16])
def test_size_is_configurable(tmp_path, kib):
    segs = shm.Segments(str(tmp_path), kib)
    made = segs.create_rank(1, 2, "0123456789ab")
    assert all(os.path.getsize(p) == kib * 1024 for p in made)
    segs.close()
    assert not list(tmp_path.iterdir())
