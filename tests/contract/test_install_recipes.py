"""The install recipes against the released wheels' own metadata.

Each recipe in roles/install/defaults/main.yml pins packages, a Python, a glibc and a CUDA lane;
the sglang wheel of that release says what it really requires (Requires-Dist, Requires-Python,
its manylinux tag). The wheel comes from the air-gapped wheelhouse cache (tools/wheelhouse.sh)
when there is one, else from PyPI through tests/contract/sglang_release.py; a test skips, saying
why, when neither is reachable. The wheelhouse's other wheels (sglang-kernel, nvidia-cuda-nvcc)
check the recipe's GPU architectures and compiler location.
"""

import email.parser
import os
import re
import zipfile
from pathlib import Path

import pytest
import yaml

import sglang_release

ROOT = Path(__file__).resolve().parents[2]
RECIPES = yaml.safe_load((ROOT / "roles/install/defaults/main.yml").read_text())["sglang_install_recipes"]
WHEELHOUSES = Path(os.environ.get("WHEELHOUSE_ROOT") or Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "blackwell-sglang" / "wheelhouse")


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def wheelhouse(release):
    """A complete wheelhouse of the release (tools/wheelhouse.sh), or None."""
    for directory in sorted(WHEELHOUSES.glob("%s-*" % release)):
        if (directory / ".complete").is_file():
            return directory
    return None


def wheel_in(directory, dist, version=None):
    found = sorted(directory.glob("%s-%s-*.whl" % (dist, version or "*")))
    return found[-1] if found else None


def sglang_wheel(release):
    house = wheelhouse(release)
    if house is not None and wheel_in(house, "sglang", release):
        return wheel_in(house, "sglang", release)
    if release not in sglang_release.SUPPORTED:
        pytest.skip("no wheelhouse of sglang %s and tests/contract/sglang_release.py does not fetch it" % release)
    try:
        return sglang_release.wheel_path(release)
    except sglang_release.ReleaseUnavailable as exc:
        pytest.skip("sglang %s wheel unavailable (no wheelhouse, PyPI unreachable): %s" % (release, exc))


def metadata(wheel):
    with zipfile.ZipFile(str(wheel)) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(zf.read(name).decode())


def requirements(meta):
    """{normalized name: (extras, specifier)} of the unconditional Requires-Dist."""
    found = {}
    for line in meta.get_all("Requires-Dist") or []:
        if "extra ==" in line:
            continue
        req = line.split(";")[0].strip()
        match = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)", req)
        found[_norm(match.group(1))] = (match.group(2) or "", match.group(3).strip())
    return found


def pins(recipe):
    """{normalized name: version} of the recipe's == pins."""
    out = {}
    for spec in recipe["packages"]:
        name, version = spec.split("==", 1)
        out[_norm(name)] = version
    return out


@pytest.mark.parametrize("release", sorted(RECIPES))
def test_recipe_pins_are_the_wheels_own(release):
    recipe = RECIPES[release]
    meta = metadata(sglang_wheel(release))
    assert meta["Version"] == release
    reqs = requirements(meta)
    for name, version in pins(recipe).items():
        if name == "sglang":
            assert version == release
            continue
        assert name in reqs, "sglang %s does not require %s" % (release, name)
        assert reqs[name][1] == "==" + version, (
            "recipe %s pins %s==%s, the wheel requires %s%s" % (release, name, version, name, reqs[name][1]))


@pytest.mark.parametrize("release", sorted(RECIPES))
def test_recipe_python_and_glibc_are_the_wheels(release):
    recipe = RECIPES[release]
    wheel = sglang_wheel(release)
    meta = metadata(wheel)
    floor = re.search(r">=\s*(\d+\.\d+)", meta.get("Requires-Python") or "")
    assert floor, meta.get("Requires-Python")
    assert tuple(map(int, recipe["python_min"].split("."))) >= tuple(map(int, floor.group(1).split(".")))
    tag = re.search(r"manylinux_(\d+)_(\d+)_x86_64", wheel.name)
    assert tag, wheel.name
    assert recipe["glibc_min"] == "%s.%s" % tag.groups(), (
        "the sglang %s wheel is %s: glibc_min must be %s.%s" % ((release, wheel.name) + tag.groups()))


@pytest.mark.parametrize("release", sorted(RECIPES))
def test_recipe_cuda_lane_is_what_the_wheel_pulls_or_it_needs_its_own_index(release):
    """A recipe whose CUDA major differs from the CUDA builds its sglang wheel requires from PyPI
    cannot be installed from PyPI: it must say so (index_required), so preflight refuses it."""
    recipe = RECIPES[release]
    reqs = requirements(metadata(sglang_wheel(release)))
    pulled = set()
    for name, (extras, spec) in reqs.items():
        pulled.update(re.findall(r"cu(\d\d)", extras + name))
        if name == "cuda-python":
            pulled.update(re.findall(r">=\s*(\d+)", spec))
    assert pulled, "sglang %s names no CUDA build in its requirements" % release
    major = recipe["cuda"].split(".")[0]
    if pulled == {major}:
        assert not recipe.get("index_required"), "recipe %s is installable from PyPI" % release
    else:
        assert recipe.get("index_required"), (
            "sglang %s from PyPI pulls CUDA %s builds, the recipe is CUDA %s: set index_required"
            % (release, sorted(pulled), recipe["cuda"]))


@pytest.mark.parametrize("release", sorted(RECIPES))
def test_flashinfer_jit_cache_matches_flashinfer(release):
    recipe = RECIPES[release]
    assert recipe["flashinfer_jit_cache"] == "flashinfer-jit-cache==" + pins(recipe)["flashinfer-python"]


def _house_or_skip(release):
    house = wheelhouse(release)
    if house is None:
        pytest.skip("no wheelhouse of %s under %s: run tools/wheelhouse.sh %s" % (release, WHEELHOUSES, release))
    return house


@pytest.mark.parametrize("release", sorted(RECIPES))
def test_gpu_archs_are_those_sglang_kernel_carries(release):
    """sgl_kernel/load_utils.py loads sm90/ on compute capability 9.0 and sm100/ on every other
    GPU; the recipe's architectures are 9.0 plus those the sm100 build serves."""
    house = _house_or_skip(release)
    recipe = RECIPES[release]
    wheel = wheel_in(house, "sglang_kernel", pins(recipe)["sglang-kernel"])
    assert wheel, "no sglang-kernel wheel in %s" % house
    with zipfile.ZipFile(str(wheel)) as zf:
        builds = sorted({m.group(1) for n in zf.namelist() for m in [re.match(r"sgl_kernel/(sm\d+)/", n)] if m})
        loader = zf.read("sgl_kernel/load_utils.py").decode()
    assert builds == ["sm100", "sm90"]
    assert 'ops_subdir = "sm90"' in loader and 'ops_subdir = "sm100"' in loader
    assert set(builds) <= set(recipe["gpu_archs"])


@pytest.mark.parametrize("release", sorted(RECIPES))
def test_nvcc_dir_is_where_the_nvcc_wheel_puts_nvcc(release):
    house = _house_or_skip(release)
    recipe = RECIPES[release]
    wheel = wheel_in(house, "nvidia_cuda_nvcc")
    assert wheel, "the wheelhouse of %s has no nvidia-cuda-nvcc: FlashInfer's JIT would have no compiler" % release
    with zipfile.ZipFile(str(wheel)) as zf:
        assert recipe["nvcc_dir"] + "/bin/nvcc" in zf.namelist()
    assert wheel.name.split("-")[1].split(".")[0] == recipe["cuda"].split(".")[0]
