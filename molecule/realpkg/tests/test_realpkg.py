"""The node after the real-package scenario: what the install left, read from the node."""

import json


def test_venv_has_the_pinned_release(host):
    out = host.check_output("/opt/sglang/venv/bin/python -c "
                            "\"import importlib.metadata as m; print(m.version('sglang'), m.version('torch'))\"")
    assert out.split() == ["0.5.23", "2.14.1"]


def test_unit_reads_the_cuda_environment_file(host):
    unit = host.file("/etc/systemd/system/sglang-qwen.service").content_string
    assert "EnvironmentFile=-/etc/blackwell-sglang/cuda.env" in unit
    env = host.file("/etc/blackwell-sglang/cuda.env").content_string
    home = [line.split("=", 1)[1] for line in env.splitlines() if line.startswith("CUDA_HOME=")]
    assert len(home) == 1 and home[0].endswith("/site-packages/nvidia/cu13")
    assert host.run(home[0] + "/bin/nvcc --version").rc == 0


def test_status_file_names_the_no_gpu_class(host):
    status = json.loads(host.file("/var/lib/blackwell-sglang/qwen/status.json").content_string)
    assert (status.get("last_failure") or {}).get("class") == "no_gpu", status
