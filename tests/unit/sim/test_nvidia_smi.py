"""The stand-in nvidia-smi prints the formats of the real captures."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_sim import nvidia_smi

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-h200"
SIM = Path(__file__).resolve().parents[3] / "sim"


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_SIM_CONFIG", str(tmp_path / "none.json"))
    monkeypatch.setenv("SGLANG_SIM_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SGLANG_SIM_DEV_DIR", str(tmp_path / "dev"))
    monkeypatch.setenv("SGLANG_SIM_PROFILE", "h200-x1")
    for k in ("SGLANG_SIM_GPU_MEMORY_MIB", "SGLANG_SIM_GPU_COUNT"):
        monkeypatch.delenv(k, raising=False)
    return tmp_path


def _run(capsys, *argv):
    rc = nvidia_smi.main(list(argv))
    return rc, capsys.readouterr().out


def _fake_app(state, used, gpu_uuid="GPU-0c659456-f90b-dc4f-2d09-40552f47d00c"):
    # This test process stands in for a rank: it is alive, so its memory counts.
    from sglang_sim import _proc
    _proc.write_proc_state(str(state), {
        "pid": os.getpid(), "start_ticks": _proc.proc_start_ticks(os.getpid()), "gpu_index": 0,
        "gpu_uuid": gpu_uuid, "process_name": "python3", "used_mib": used})


def test_idle_table_is_the_capture(env, capsys):
    rc, out = _run(capsys)
    want = (FIXTURES / "nvidia-smi.txt").read_text().splitlines()
    got = out.splitlines()
    assert rc == 0
    assert re.match(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}       $", got[0])
    assert got[1:] == want[1:]


def test_query_gpu_after_matches_capture(env, capsys):
    rc, out = _run(capsys, "--query-gpu=index,uuid,name,memory.used,memory.total,compute_cap,"
                           "driver_version", "--format=csv,noheader,nounits")
    assert rc == 0
    assert out == (FIXTURES / "query-gpu-after.csv").read_text()


def test_query_gpu_busy_and_compute_apps(env, capsys):
    _fake_app(env / "state", 21007)
    rc, out = _run(capsys, "--query-gpu=index,uuid,name,memory.used,memory.total,compute_cap,"
                           "driver_version", "--format=csv,noheader,nounits")
    assert out == (FIXTURES / "query-gpu-busy.csv").read_text()
    rc, out = _run(capsys, "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
                   "--format=csv,noheader,nounits")
    want = (FIXTURES / "compute-apps.csv").read_text().strip()
    pattern = re.escape(want).replace("419", r"\d+").replace("20998", r"\d+")
    assert re.fullmatch(pattern + "\n", out)
    assert out.startswith("%d, python3, 21007, " % os.getpid())


def test_busy_table_process_row(env, capsys):
    _fake_app(env / "state", 20998)
    rc, out = _run(capsys)
    rows = [l for l in out.splitlines() if "python3" in l]
    assert len(rows) == 1
    row = rows[0]
    header = [l for l in out.splitlines() if "Process name" in l][0]
    assert len(row) == len(header) == 91
    # columns line up with the header: PID ends under "PID", memory under "Memory"
    assert row.index(str(os.getpid())) + len(str(os.getpid())) == header.index("PID") + 3
    assert row.index("python3") == header.index("Process name")
    assert row.rstrip(" |").endswith("20998MiB")
    assert row.index("20998MiB") + len("20998MiB") == header.index("GPU Memory") + len("GPU Memory")
    assert "20998MiB / 143771MiB" in out


def test_dead_pids_free_memory(env, capsys):
    from sglang_sim import _proc
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _proc.write_proc_state(str(env / "state"), {
            "pid": proc.pid, "start_ticks": _proc.proc_start_ticks(proc.pid), "gpu_index": 0,
            "gpu_uuid": "x", "process_name": "sglang::scheduler", "used_mib": 5000})
        assert "5000" in _run(capsys, "--query-gpu=memory.used", "--format=csv")[1]
    finally:
        proc.kill()
        proc.wait()
    rc, out = _run(capsys, "--query-gpu=memory.used", "--format=csv")
    assert out == "memory.used [MiB]\n0 MiB\n"


def test_headers_and_units(env, capsys):
    rc, out = _run(capsys, "--query-gpu=index,memory.used,memory.free,utilization.gpu,pci.bus_id",
                   "--format=csv")
    assert out.splitlines()[0] == "index, memory.used [MiB], memory.free [MiB], utilization.gpu [%], pci.bus_id"
    assert re.fullmatch(r"0, 0 MiB, \d+ MiB, 0 %, 00000000:00:06\.0", out.splitlines()[1])
    rc, out = _run(capsys, "--query-compute-apps=pid,used_memory", "--format=csv")
    assert out == "pid, used_gpu_memory [MiB]\n"


def test_invalid_field(env, capsys):
    rc, out = _run(capsys, "--query-gpu=index,bogus", "--format=csv")
    assert rc == 2
    assert out.startswith('Field "bogus" is not a valid field to query.')


def test_list_and_id(env, capsys, monkeypatch):
    monkeypatch.setenv("SGLANG_SIM_PROFILE", "rtx-pro-6000-x4")
    rc, out = _run(capsys, "-L")
    lines = out.splitlines()
    assert len(lines) == 4
    assert re.fullmatch(r"GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition \(UUID: GPU-[0-9a-f-]{36}\)", lines[0])
    rc, out = _run(capsys, "-i", "2", "--query-gpu=index,memory.total", "--format=csv,noheader")
    assert out == "2, 97887 MiB\n"
    rc, out = _run(capsys, "-i", "7", "--query-gpu=index", "--format=csv")
    assert rc == 6 and out == "No devices were found\n"


def test_config_file_is_read(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"profile": "b200-x8", "state_dir": str(tmp_path / "s")}))
    monkeypatch.setenv("SGLANG_SIM_CONFIG", str(cfg))
    for k in ("SGLANG_SIM_PROFILE", "SGLANG_SIM_STATE_DIR"):
        monkeypatch.delenv(k, raising=False)
    rc, out = _run(capsys, "--query-gpu=count,name,compute_cap", "--format=csv,noheader")
    assert out.splitlines()[0] == "8, NVIDIA B200, 10.0"
