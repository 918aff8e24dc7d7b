"""The /dev/shm families the unit's clean start sweeps, and the simulator's ranks create,
against what the pinned release creates.

Fails when 0.5.23's own sweep (srt/utils/stale_shm_cleanup.py) lists other families or reads
the creator's pid out of a name differently than the guard, when the release names a segment
through make_shm_name with a kind the families do not cover, or when the load-snapshot file
(srt/managers/load_snapshot.py shm_path_for) is named otherwise than the simulator names it.
The release's functions are run from the wheel itself (that module is import-free by design).
"""

import ast
import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "sim"))

import release_contract as rc  # noqa: E402
from sglang_sim import shm  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "sglang_unit_guard", str(ROOT / "roles" / "service" / "files" / "sglang_unit_guard.py"))
guard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guard)

CLEANUP = "srt/utils/stale_shm_cleanup.py"
LOADS = "srt/managers/load_snapshot.py"


pytestmark = pytest.mark.usefixtures("pinned_wheel")


@pytest.fixture(scope="module")
def release_sweep():
    namespace = {"__name__": "stale_shm_cleanup"}
    exec(compile(rc.source(CLEANUP), CLEANUP, "exec"), namespace)  # pylint: disable=exec-used
    return namespace


def test_the_guard_sweeps_the_releases_families(release_sweep):
    assert tuple(release_sweep["_ORPHAN_PREFIXES"]) == guard.SHM_PIDLESS_PREFIXES
    assert release_sweep["_SGL_SHM_PREFIX"] + "_" == guard.SHM_PID_PREFIXES[0]
    assert "multi_tokenizer_args_" in rc.source(CLEANUP) and guard.SHM_PID_PREFIXES[1] == "multi_tokenizer_args_"


@pytest.mark.parametrize("name", [
    "sgl_shm_mq_4242_0a1b2c3d", "sgl_shm_mm_1_ffffffff", "sgl_shm_nodecheck_0_0a1b2c3d",
    "sgl_shm_x_-3_0a1b2c3d", "sgl_shm_bad", "sgl_shm_mq_xx_0a1b2c3d", "multi_tokenizer_args_991",
    "multi_tokenizer_args_x", "multi_tokenizer_args_0", "nccl-AbC123", "psm_1", "sglang_loads_a_b.shm",
])
def test_the_guard_reads_the_creator_pid_as_the_release_does(release_sweep, name):
    assert guard.shm_creator_pid(name) == release_sweep["_creator_pid"](name)


def test_make_shm_name_kinds_are_covered(release_sweep):
    name = release_sweep["make_shm_name"]("mq")
    assert guard.shm_creator_pid(name) == os.getpid() and guard.shm_family(name) == "sgl_shm_mq_*"
    assert re.sub(r"[0-9a-f]{8}$", "", name) == re.sub(r"[0-9a-f]{8}$", "", shm.make_shm_name("mq"))
    kinds = set()
    # parse only the files that name it (parsing every file of srt/ takes 20 s on two cores)
    for path in (f for f in rc.files("srt/") if re.search(r"make_shm_name\s*\(", rc.source(f))):
        for node in ast.walk(rc.tree(path)):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "make_shm_name"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                kinds.add(node.args[0].value)
    # shm_broadcast.py ShmRingBuffer (the simulator's "mq"), parallel_state.py in_the_same_node_as,
    # mm_utils.py ShmPointerMMData.
    assert kinds == {"mq", "nodecheck", "mm"}
    assert all(guard.shm_family(release_sweep["make_shm_name"](k)) == "sgl_shm_%s_*" % k for k in kinds)


def test_the_load_snapshot_file_is_named_as_the_simulator_names_it():
    fn = next(n for n in rc.tree(LOADS).body if isinstance(n, ast.FunctionDef) and n.name == "shm_path_for")
    namespace = {"os": os, "hashlib": hashlib}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), LOADS, "exec"), namespace)  # pylint: disable=exec-used
    for instance_id in ("0123456789ab", shm.new_instance_id(), "a/b c"):
        path = namespace["shm_path_for"](instance_id)
        assert path == "/dev/shm/" + shm.load_snapshot_name(instance_id)
        assert guard.shm_family(os.path.basename(path)) == "sglang_loads_*"
    assert "SLOT_SIZE = 16 * 1024" in rc.source(LOADS) and shm.LOAD_SNAPSHOT_SLOT == 16 * 1024
    assert 'HEADER_STRUCT = struct.Struct("<4sHHI")' in rc.source(LOADS) and shm.LOAD_SNAPSHOT_HEADER == 12
    # Never unlinked by the release: the simulator keeps it on a clean exit too.
    assert "unlink(self.path" not in rc.source(LOADS) and "sglang_loads_" not in rc.source(LOADS).split("def shm_path_for")[0]
