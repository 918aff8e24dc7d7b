"""gpu_info: the module end to end in-process (patch_module_args), with a fake nvidia-smi
script replaying the real H200 captures and device files in a temp dir (never /dev)."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.blackwell.sglang.plugins.modules import gpu_info

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "nvidia-h200"


def fake_nvidia_smi(tmp_path, gpu_file="query-gpu-busy.csv", apps_file="compute-apps.csv", fail=None):
    """A shell script that answers the two CSV queries from fixture files, or fails like
    a broken driver does (message on stdout, non-zero rc)."""
    script = tmp_path / "nvidia-smi"
    if fail:
        body = "echo %r\nexit %d\n" % (fail[1], fail[0])
    else:
        body = ('case "$1" in\n'
                '  --query-gpu=index,uuid,name,memory.used,memory.total,compute_cap,driver_version) cat %s;;\n'
                '  --query-compute-apps=pid,process_name,used_memory,gpu_uuid) cat %s;;\n'
                '  *) echo "unexpected args: $*" >&2; exit 2;;\n'
                'esac\n') % (FIXTURES / gpu_file, FIXTURES / apps_file)
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.fixture
def devdir(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        (dev / name).write_text("")
    (dev / "nvidia-caps").mkdir()
    return dev


@pytest.fixture(autouse=True)
def module_side(monkeypatch):
    """Importing controller code (other tests' filter plugins) flips this flag, after which
    warnings go to the controller's Display instead of into the module result."""
    from ansible.module_utils import _internal
    monkeypatch.setattr(_internal, "is_controller", False)


def run_module(args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            gpu_info.main()
    return exc.value.code


def result(capsys):
    return json.loads(capsys.readouterr().out)


def test_facts_from_real_capture_and_holder_in_tmp_dev(tmp_path, devdir, capsys):
    holder = subprocess.Popen([sys.executable, "-c", "import sys,time; f=open(sys.argv[1]); print(1, flush=True); "
                               "time.sleep(30)", str(devdir / "nvidia0")], stdout=subprocess.PIPE)
    try:
        holder.stdout.readline()
        rc = run_module({"nvidia_smi": fake_nvidia_smi(tmp_path), "devices": [str(devdir / "nvidia*")]})
    finally:
        holder.kill()
        holder.wait()
    out = result(capsys)
    assert rc == 0, out
    assert out["changed"] is False
    facts = out["ansible_facts"]["gpu_info"]
    assert facts["gpus"][0]["name"] == "NVIDIA H200"
    assert facts["gpus"][0]["memory_used_mib"] == 21007
    assert facts["gpu_count"] == 1
    assert facts["driver_version"] == "580.159.04"
    assert facts["memory_used_mib_total"] == 21007
    assert facts["compute_apps"] == [{"pid": 419, "process_name": "python3", "used_memory_mib": 20998,
                                      "gpu_uuid": "GPU-0c659456-f90b-dc4f-2d09-40552f47d00c", "gpu_index": 0}]
    assert facts["device_files"] == sorted(str(devdir / n) for n in ("nvidia-uvm", "nvidia0", "nvidiactl"))
    holders = [h for h in facts["device_holders"] if h["pid"] == holder.pid]
    assert holders and holders[0]["devices"] == [str(devdir / "nvidia0")]
    assert facts["device_holders_source"] in ("fuser", "proc")
    # the same data at the top level
    assert out["gpus"] == facts["gpus"]


def test_check_mode_runs_anyway(tmp_path, devdir, capsys):
    rc = run_module({"nvidia_smi": fake_nvidia_smi(tmp_path, "query-gpu-after.csv"),
                     "devices": [str(devdir / "nvidia*")]}, check_mode=True)
    out = result(capsys)
    assert rc == 0
    assert out["changed"] is False
    assert out["gpus"][0]["memory_used_mib"] == 0
    assert out["device_holders"] == []


@pytest.mark.parametrize("fail,cause,words", [
    ((9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
         "NVIDIA driver is installed and running."), "driver_not_loaded", "driver is not loaded"),
    ((6, "No devices were found"), "no_devices", "lspci"),
])
def test_driver_errors_fail_with_cause(tmp_path, devdir, capsys, fail, cause, words):
    rc = run_module({"nvidia_smi": fake_nvidia_smi(tmp_path, fail=fail), "devices": [str(devdir / "x*")]})
    out = result(capsys)
    assert rc == 1
    assert out["failed"] is True
    assert out["cause"] == cause
    assert words in out["msg"]
    assert out["msg"].startswith("Failed to gather GPU facts: nvidia-smi failed")


def test_driver_error_not_required_warns(tmp_path, devdir, capsys):
    rc = run_module({"nvidia_smi": fake_nvidia_smi(tmp_path, fail=(6, "No devices were found")), "required": False,
                     "devices": [str(devdir / "nvidia*")]})
    out = result(capsys)
    assert rc == 0
    assert out["gpus"] == [] and out["gpu_count"] == 0
    assert out["error"]["cause"] == "no_devices"
    assert "No GPU facts" in json.dumps(out["warnings"])  # 2.21 wraps warnings in event dicts


def test_missing_nvidia_smi(tmp_path, capsys):
    missing = str(tmp_path / "no-such-nvidia-smi")
    rc = run_module({"nvidia_smi": missing, "fuser": False})
    out = result(capsys)
    assert rc == 1
    assert out["cause"] == "nvidia_smi_missing"
    assert "set nvidia_smi to its path" in out["msg"]

    rc = run_module({"nvidia_smi": "nvidia-smi-not-installed-here", "fuser": False, "required": False})
    out = result(capsys)
    assert rc == 0
    assert out["gpus"] == [] and out["nvidia_smi"] is None
    assert out["device_holders_source"] == "skipped"


def test_hung_nvidia_smi_times_out(tmp_path, capsys):
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    script.chmod(0o755)
    rc = run_module({"nvidia_smi": str(script), "fuser": False, "timeout": 1})
    out = result(capsys)
    assert rc == 1
    assert out["cause"] == "timeout"
    assert "Xid" in out["msg"]


def test_bad_timeout(capsys):
    rc = run_module({"timeout": 0, "fuser": False})
    assert rc == 1
    assert "timeout must be a positive" in result(capsys)["msg"]


def test_gather_falls_back_to_proc_without_fuser(tmp_path, devdir):
    """No fuser binary: the holders come from /proc (here: this very process)."""
    with open(str(devdir / "nvidia0")) as handle:
        assert handle
        warnings = []

        def which(name):
            return None if name == "fuser" else fake_nvidia_smi(tmp_path)

        from ansible.module_utils.basic import AnsibleModule
        with patch_module_args({}):
            run_command = AnsibleModule(argument_spec={}).run_command

        def runner(argv, merge_stderr=False):
            return gpu_info.procs.run_with_timeout(run_command, argv, 10, merge_stderr)
        info = gpu_info.gather({"nvidia_smi": "nvidia-smi", "required": True, "devices": [str(devdir / "nvidia*")],
                                "fuser": True, "timeout": 10}, which, runner, warnings.append)
    assert info["device_holders_source"] == "proc"
    assert [h["pid"] for h in info["device_holders"]] == [os.getpid()]
    assert warnings == []
