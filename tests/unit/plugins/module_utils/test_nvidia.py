"""nvidia-smi parsers against captures from a real H200 node (tests/fixtures/nvidia-h200/)."""

from pathlib import Path

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import nvidia

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "nvidia-h200"
UUID = "GPU-0c659456-f90b-dc4f-2d09-40552f47d00c"


def fixture(name):
    return (FIXTURES / name).read_text()


def test_parse_gpus_busy_capture():
    gpus = nvidia.parse_gpus(fixture("query-gpu-busy.csv"))
    assert gpus == [{
        "index": 0, "uuid": UUID, "name": "NVIDIA H200", "memory_used_mib": 21007,
        "memory_total_mib": 143771, "compute_cap": "9.0", "driver_version": "580.159.04",
    }]


def test_parse_gpus_after_capture_is_idle():
    gpus = nvidia.parse_gpus(fixture("query-gpu-after.csv"))
    assert gpus[0]["memory_used_mib"] == 0
    assert nvidia.busy_gpus(gpus, 0) == []
    assert nvidia.busy_gpus(nvidia.parse_gpus(fixture("query-gpu-busy.csv")), 0)[0]["index"] == 0


def test_parse_compute_apps_capture_maps_uuid_to_index():
    gpus = nvidia.parse_gpus(fixture("query-gpu-busy.csv"))
    apps = nvidia.parse_compute_apps(fixture("compute-apps.csv"), gpus)
    assert apps == [{"pid": 419, "process_name": "python3", "used_memory_mib": 20998,
                     "gpu_uuid": UUID, "gpu_index": 0}]


def test_parse_gpus_multi_gpu_sorted_and_na_cells():
    text = (
        "1, GPU-b, NVIDIA RTX PRO 6000 Blackwell Server Edition, [N/A], 97887, 12.0, 580.1\n"
        "0, GPU-a, NVIDIA RTX PRO 6000 Blackwell Server Edition, 5, 97887, 12.0, 580.1\n"
    )
    gpus = nvidia.parse_gpus(text)
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[1]["memory_used_mib"] is None
    assert gpus[0]["compute_cap"] == "12.0"
    # unknown memory is never counted as busy
    assert nvidia.busy_gpus(gpus, 0) == [gpus[0]]
    assert nvidia.busy_gpus(gpus, 16) == []


def test_parse_gpus_name_with_comma_and_without_compute_cap():
    fields = tuple(f for f in nvidia.GPU_FIELDS if f != "compute_cap")
    gpus = nvidia.parse_gpus("0, GPU-a, Odd, Name, 10, 100, 470.1\n", fields)
    assert gpus[0]["name"] == "Odd, Name"
    assert gpus[0]["compute_cap"] is None
    assert gpus[0]["memory_total_mib"] == 100


def test_parse_compute_apps_na_memory_and_unknown_uuid():
    apps = nvidia.parse_compute_apps("77, /usr/bin/python3, [N/A], GPU-x\n", [{"uuid": "GPU-a", "index": 0}])
    assert apps == [{"pid": 77, "process_name": "/usr/bin/python3", "used_memory_mib": None,
                     "gpu_uuid": "GPU-x", "gpu_index": None}]
    assert nvidia.parse_compute_apps("") == []


@pytest.mark.parametrize("bad", ["garbage", "0, GPU-a"])
def test_parse_gpus_rejects_short_rows(bad):
    with pytest.raises(ValueError):
        nvidia.parse_gpus(bad)


@pytest.mark.parametrize("rc,output,cause", [
    (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
        "the latest NVIDIA driver is installed and running.\n", "driver_not_loaded"),
    (6, "No devices were found\n", "no_devices"),
    (18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n",
     "driver_library_mismatch"),
    (15, "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error\n", "gpu_unreachable"),
    (255, "Failed to initialize NVML: Unknown Error\n", "nvml_init_failed"),
    (3, "something new\n", "nvidia_smi_failed"),
])
def test_classify_error(rc, output, cause):
    err = nvidia.classify_error(rc, output)
    assert err.cause == cause
    assert "rc=%s" % rc in err.message
    if cause != "nvidia_smi_failed":
        assert err.hint


def test_classify_error_success_is_none():
    assert nvidia.classify_error(0, fixture("query-gpu-busy.csv")) is None


class FakeRunner:
    """Answers the two CSV queries with canned output and records the calls."""

    def __init__(self, gpu=(0, "", ""), apps=(0, "", ""), gpu_retry=None):
        self.answers = {"--query-gpu": [gpu] + ([gpu_retry] if gpu_retry else []), "--query-compute-apps": [apps]}
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        key = argv[1].split("=")[0]
        return self.answers[key].pop(0)


def test_query_real_capture():
    runner = FakeRunner((0, fixture("query-gpu-busy.csv"), ""), (0, fixture("compute-apps.csv"), ""))
    facts = nvidia.query(runner, "/usr/bin/nvidia-smi")
    assert runner.calls[0] == ["/usr/bin/nvidia-smi",
                               "--query-gpu=index,uuid,name,memory.used,memory.total,compute_cap,driver_version",
                               "--format=csv,noheader,nounits"]
    assert runner.calls[1] == ["/usr/bin/nvidia-smi", "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
                               "--format=csv,noheader,nounits"]
    assert facts["gpu_count"] == 1
    assert facts["driver_version"] == "580.159.04"
    assert facts["memory_used_mib_total"] == 21007
    assert facts["memory_total_mib_total"] == 143771
    assert facts["compute_apps"][0]["gpu_index"] == 0


def test_query_retries_without_compute_cap_on_old_driver():
    runner = FakeRunner((2, 'Field "compute_cap" is not a valid field to query.\n', ""),
                        (0, "", ""),
                        gpu_retry=(0, "0, GPU-a, Tesla T4, 0, 15360, 470.82.01\n", ""))
    facts = nvidia.query(runner, "nvidia-smi")
    assert "compute_cap" not in runner.calls[1][1]
    assert facts["gpus"][0]["compute_cap"] is None
    assert facts["gpus"][0]["name"] == "Tesla T4"


def test_query_raises_with_cause():
    runner = FakeRunner((6, "No devices were found\n", ""))
    with pytest.raises(nvidia.NvidiaSmiError) as info:
        nvidia.query(runner, "nvidia-smi")
    assert info.value.cause == "no_devices"
    assert "lspci" in info.value.describe()


def test_query_empty_output_is_no_devices():
    with pytest.raises(nvidia.NvidiaSmiError) as info:
        nvidia.query(FakeRunner((0, "\n", "")), "nvidia-smi")
    assert info.value.cause == "no_devices"


def test_query_unparsable_output():
    with pytest.raises(nvidia.NvidiaSmiError) as info:
        nvidia.query(FakeRunner((0, "weird\n", "")), "nvidia-smi")
    assert info.value.cause == "unparsable_output"
