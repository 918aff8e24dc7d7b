"""The install role's decisions: which recipe, which refusals (one line each, naming the fix),
which CUDA toolkit the unit points FlashInfer's JIT at."""

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.blackwell.sglang.plugins.plugin_utils.install import (
    sglang_install_compiler_problems,
    sglang_install_cuda_environment,
    sglang_install_facts,
    sglang_install_packages,
    sglang_install_pick_release,
    sglang_install_pip_args,
    sglang_install_problems,
    sglang_install_stale_files,
)

ROOT = Path(__file__).resolve().parents[4]
RECIPES = yaml.safe_load((ROOT / "roles/install/defaults/main.yml").read_text())["sglang_install_recipes"]
NEW = RECIPES["0.5.23"]
OLD = RECIPES["0.5.19"]

# A node that passes everything: bookworm (glibc 2.36, Python 3.11), R580, 4 x RTX PRO 6000.
GOOD = {
    "python_version": "3.11",
    "glibc_version": "2.36",
    "free_kib": 200 * 1024 * 1024,
    "driver_version": "580.95.05",
    "gpus": [{"index": i, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_cap": "12.0"}
             for i in range(4)],
}
SETTINGS = {"backend": "pip", "venv": "/opt/sglang/venv", "python": "python3", "min_free_gib": 30,
            "min_gpus": 4, "min_compute_capability": "8.0", "index_url": "", "find_links": ""}


def problems(recipe=NEW, release="0.5.23", **changes):
    facts = dict(GOOD)
    settings = dict(SETTINGS)
    for key, value in changes.items():
        (settings if key in SETTINGS or key == "known_releases" else facts)[key] = value
    return sglang_install_problems(facts, recipe, release, settings)


@pytest.mark.parametrize("driver, expected", [
    ("580.95.05", "0.5.23"),
    ("590.44.01", "0.5.23"),
    ("575.57.08", "0.5.19"),
    ("570.124.06", "0.5.19"),
    ("565.57.01", "none"),
    (None, "none"),
    ("", "none"),
])
def test_auto_picks_the_newest_recipe_the_driver_runs(driver, expected):
    assert sglang_install_pick_release(RECIPES, "auto", driver) == expected


def test_a_pinned_release_is_kept_whatever_the_driver():
    assert sglang_install_pick_release(RECIPES, "0.5.19", "590.1") == "0.5.19"


def test_a_good_node_has_no_problems():
    assert problems() == []


def test_every_refusal_is_one_line_naming_a_fix():
    found = problems(python_version="3.10", glibc_version="2.31", free_kib=5 * 1024 * 1024,
                     driver_version="570.124.06",
                     gpus=[{"index": 0, "name": "Tesla T4", "compute_cap": "7.5"}])
    assert len(found) == 6  # python, glibc, disk, driver, GPU count, compute capability
    for line in found:
        assert "\n" not in line and ": " in line
        assert any(word in line for word in ("install", "upgrade", "set ", "lower", "use ", "free space"))


def test_glibc_below_the_manylinux_tag_is_refused_before_pip_says_no_matching_distribution():
    (line,) = problems(glibc_version="2.31")
    assert "manylinux_2_34" in line and "glibc 2.31" in line and "upgrade the OS" in line
    assert problems(glibc_version="2.34") == []


def test_python_below_the_recipe_is_refused():
    (line,) = problems(python_version="3.10")
    assert "Python >= 3.11" in line and "sglang_install_python" in line


def test_free_disk_is_checked_in_gib():
    (line,) = problems(free_kib=29 * 1024 * 1024)
    assert "29.0 GiB free" in line and "30 GiB needed" in line
    assert problems(free_kib=30 * 1024 * 1024) == []


def test_an_r570_driver_cannot_run_the_cuda_13_recipe():
    (line,) = problems(driver_version="570.124.06")
    assert "CUDA 13.0" in line and "R580" in line


def test_no_driver_says_how_to_install_before_the_gpus():
    found = problems(driver_version=None, gpus=[])
    assert len(found) == 1 and "No NVIDIA driver" in found[0] and "sglang_install_gpu_preflight" in found[0]
    # auto found no recipe for want of a driver: that is the one problem, not a second one.
    assert problems(recipe=None, release="none", driver_version=None) == found


@pytest.mark.parametrize("cap, arch", [("7.5", None), ("11.0", "sm110"), ("12.1", "sm121")])
def test_gpus_outside_the_kernels_architectures_are_refused(cap, arch):
    found = problems(gpus=[{"index": i, "name": "G", "compute_cap": cap} for i in range(4)])
    assert len(found) == 4
    if arch:
        assert arch in found[0] and "sm120" in found[0]
    else:
        assert "below 8.0" in found[0]


@pytest.mark.parametrize("cap", ["8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "12.0"])
def test_the_architectures_of_the_recipe_pass(cap):
    assert problems(gpus=[{"index": i, "name": "G", "compute_cap": cap} for i in range(4)]) == []


def test_too_few_gpus_for_the_tensor_parallel_size():
    (line,) = problems(gpus=GOOD["gpus"][:2])
    assert "2 GPU(s), 4 needed" in line and "sglang_service_tp" in line


def test_the_cuda_12_recipe_from_pypi_is_refused_with_the_fix():
    (line,) = problems(recipe=OLD, release="0.5.19", driver_version="575.57.08")
    assert "not a CUDA 12.9 install" in line
    assert "R580" in line and "sglang_install_index_url" in line


def test_the_cuda_12_recipe_from_an_operator_index_is_allowed():
    assert problems(recipe=OLD, release="0.5.19", driver_version="575.57.08",
                    index_url="https://wheels.example.internal/cu129/simple") == []


def test_an_unknown_release_names_the_known_ones():
    (line,) = problems(recipe=None, release="0.6.0", known_releases=["0.5.23", "0.5.19"])
    assert "0.6.0" in line and "0.5.19, 0.5.23" in line


def test_the_sim_backend_skips_the_package_checks():
    assert problems(backend="sim", python_version="3.9", glibc_version="2.31") == []


def test_facts_not_measured_are_not_checked():
    assert sglang_install_problems({}, NEW, "0.5.23", SETTINGS) == []


def test_cuda_environment_points_at_the_nvcc_wheel_in_the_venv():
    env = sglang_install_cuda_environment("/opt/sglang/venv/lib/python3.11/site-packages", NEW, "/opt/sglang/venv")
    assert env["CUDA_HOME"] == "/opt/sglang/venv/lib/python3.11/site-packages/nvidia/cu13"
    assert env["PATH"].split(":")[:2] == [env["CUDA_HOME"] + "/bin", "/opt/sglang/venv/bin"]
    assert env["PATH"].endswith(":/usr/bin:/sbin:/bin")


def test_cuda_environment_prefers_the_operators_toolkit():
    env = sglang_install_cuda_environment("/sp", NEW, "/v", "/usr/local/cuda-13.0")
    assert env["CUDA_HOME"] == "/usr/local/cuda-13.0"
    assert env["PATH"].startswith("/usr/local/cuda-13.0/bin:/v/bin:")


def test_no_cuda_environment_without_a_compiler():
    assert sglang_install_cuda_environment("/sp", {"cuda": "13.0"}, "/v") == {}


# What the nvidia-cuda-nvcc 13.5.37 wheel's nvcc prints (the last two lines).
NVCC_13 = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2026 NVIDIA Corporation\n"
           "Cuda compilation tools, release 13.5, V13.5.37\nBuild cuda_13.5.r13.5/compiler.0")


def test_a_compiler_of_the_recipes_cuda_major_is_enough():
    assert sglang_install_compiler_problems(NVCC_13, NEW, "0.5.23", "/sp/nvidia/cu13") == []


def test_no_compiler_and_no_jit_cache_is_refused_naming_both_fixes():
    (line,) = sglang_install_compiler_problems("", NEW, "0.5.23", "/sp/nvidia/cu13")
    assert "no nvcc under /sp/nvidia/cu13" in line
    assert "sglang_install_cuda_home" in line and "flashinfer-jit-cache==0.7.2" in line


def test_a_compiler_of_another_cuda_major_is_refused():
    nvcc_12 = NVCC_13.replace("release 13.5, V13.5.37", "release 12.9, V12.9.86")
    (line,) = sglang_install_compiler_problems(nvcc_12, NEW, "0.5.23", "/usr/local/cuda")
    assert "CUDA 12.9" in line and "built for CUDA 13.0" in line


def test_the_precompiled_jit_cache_needs_no_compiler():
    assert sglang_install_compiler_problems("", NEW, "0.5.23", "", True) == []


def test_no_host_compiler_is_refused_naming_the_package_and_the_cache():
    (line,) = sglang_install_compiler_problems(NVCC_13, NEW, "0.5.23", "/sp/nvidia/cu13", False, "")
    assert "no c++" in line and "apt install g++" in line and "flashinfer-jit-cache==0.7.2" in line
    assert sglang_install_compiler_problems(NVCC_13, NEW, "0.5.23", "/sp", False, "/usr/bin/c++") == []
    assert sglang_install_compiler_problems("", NEW, "0.5.23", "/sp", True, "") == []


# --------------------------------------------------------------------------- the simulator's copy
WANT = {"src": "/src/sim", "dest": "/opt/sglang/sim", "owner": "sglang", "group": "sglang", "mode": "0644"}


def _found(root, rel, checksum, owner="sglang", group="sglang", mode="0644"):
    return {"path": "%s/%s" % (root, rel), "checksum": checksum, "pw_name": owner, "gr_name": group, "mode": mode}


@pytest.mark.parametrize("node_entry, stale", [
    ({}, False),
    (None, True),                               # the node lacks it
    ({"checksum": "b" * 40}, True),             # other content
    ({"owner": "root"}, True),
    ({"group": "root"}, True),
    ({"mode": "0600"}, True),
])
def test_stale_files_are_what_the_node_lacks_or_holds_differently(node_entry, stale):
    files = ["sglang_sim/server.py", "pyproject.toml"]
    source = [_found(WANT["src"], rel, "a" * 40) for rel in files]
    node = [_found(WANT["dest"], "pyproject.toml", "a" * 40)]
    if node_entry is not None:
        node.append(_found(WANT["dest"], "sglang_sim/server.py", **dict({"checksum": "a" * 40}, **node_entry)))
    got = sglang_install_stale_files(files, source, node, WANT)
    assert got == (["sglang_sim/server.py"] if stale else [])


def test_stale_files_match_paths_as_find_gives_them_unnormalized():
    # the role's source is "<role_path>/../../sim": find keeps the dots in every path it returns
    want = dict(WANT, src="/c/roles/install/../../sim")
    source = [_found("/c/roles/install/../../sim", "a.py", "a" * 40)]
    assert sglang_install_stale_files(["a.py"], source, [_found(WANT["dest"] + "/", "a.py", "a" * 40)], want) == []


def test_stale_files_copy_what_the_controller_listing_lacks_and_ignore_other_roots():
    # a node entry under another directory with the same tail is not the file
    node = [_found("/opt/other", "a.py", "a" * 40)]
    assert sglang_install_stale_files(["a.py"], [], node, WANT) == ["a.py"]


def test_facts_from_what_the_preflight_read():
    gpus = {"driver_version": "580.95.05", "gpus": GOOD["gpus"], "gpu_count": 4}
    facts = sglang_install_facts("3.11", "glibc 2.36", "209715200", gpus)
    assert facts == {"python_version": "3.11", "glibc_version": "2.36", "free_kib": "209715200",
                     "driver_version": "580.95.05", "gpus": GOOD["gpus"]}
    # nothing read (check mode, tags): nothing to check, and no GPU keys without the GPU checks
    assert sglang_install_facts(None, None, None) == {"python_version": None, "glibc_version": None, "free_kib": None}
    assert sglang_install_facts("", "", None)["python_version"] is None
    # gpu_info that found no driver: checked as such, no GPUs
    assert sglang_install_facts("3.11", "glibc 2.36", "1", {})["gpus"] == []
    assert sglang_install_facts("3.11", "glibc 2.36", "1", {})["driver_version"] is None
    # what the problems read from them: an old glibc refused
    assert any("glibc 2.31" in p for p in sglang_install_problems(
        sglang_install_facts("3.11", "glibc 2.31", GOOD["free_kib"], gpus), NEW, "0.5.23", SETTINGS))


def test_packages_with_and_without_the_jit_cache():
    assert sglang_install_packages(NEW) == NEW["packages"]
    assert sglang_install_packages(NEW, True) == NEW["packages"] + [NEW["flashinfer_jit_cache"]]
    assert NEW["flashinfer_jit_cache"] not in sglang_install_packages(NEW, False)
    with pytest.raises(AnsibleFilterError, match="sglang_install_flashinfer_jit_cache=false"):
        sglang_install_packages({"packages": ["sglang==0.5.23"]}, True)


PIP = {"index_url": "", "extra_index_urls": [], "find_links": "", "pip_extra_args": []}


def test_pip_args_pypi_with_the_recipes_torch_index():
    recipe = {"torch_index_url": "https://download.pytorch.org/whl/cu130"}
    assert sglang_install_pip_args(PIP) == []
    assert sglang_install_pip_args(PIP, recipe) == ["--extra-index-url", "https://download.pytorch.org/whl/cu130"]
    assert sglang_install_pip_args(PIP, {"torch_index_url": None}) == []
    extra = dict(PIP, extra_index_urls=["https://a", "https://b"], pip_extra_args=["--timeout", "60"])
    assert sglang_install_pip_args(extra, recipe) == ["--extra-index-url=https://a", "--extra-index-url=https://b",
                                                      "--timeout", "60",
                                                      "--extra-index-url", "https://download.pytorch.org/whl/cu130"]


def test_pip_args_the_operators_index_or_wheelhouse_replace_the_recipes():
    recipe = {"torch_index_url": "https://download.pytorch.org/whl/cu130"}
    assert sglang_install_pip_args(dict(PIP, index_url="https://mirror/simple"), recipe) == [
        "--index-url", "https://mirror/simple"]
    assert sglang_install_pip_args(dict(PIP, find_links="/srv/wheels", pip_extra_args=["-q"]), recipe) == [
        "--no-index", "--find-links", "/srv/wheels", "-q"]
