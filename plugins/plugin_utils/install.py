# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Decisions of the install role (``roles/install``) as pure functions.

sglang_install_pick_release
    the recipe a node gets: the pinned one, or (auto) the newest one its driver runs.
sglang_install_problems
    every preflight refusal for what was measured on the node (Python, glibc, free disk, driver
    branch against the recipe's CUDA, GPU count and architecture against the kernels the recipe's
    wheels carry, a recipe that only forms a consistent CUDA lane from its own wheel index), one
    line each, naming the fix.
sglang_install_cuda_environment
    CUDA_HOME and PATH for the unit: FlashInfer compiles kernels at first use and finds ``nvcc``
    through CUDA_HOME, then PATH, then /usr/local/cuda (flashinfer/jit/cpp_ext.py
    ``get_cuda_path``); the recipe's wheels bring one into the venv's site-packages.
sglang_install_compiler_problems
    whether that compiler runs and matches the recipe's CUDA major version, or the precompiled
    FlashInfer JIT cache is installed instead.
sglang_install_facts
    what the preflight measured on the node, as the one input of sglang_install_problems.
sglang_install_packages
    the pinned packages of a recipe, with its precompiled FlashInfer JIT cache when asked for.
sglang_install_pip_args
    where pip takes packages from: the operator's index, extra indexes and wheelhouse, else the
    recipe's own torch index beside PyPI.
sglang_install_stale_files
    which of a source tree's files a node lacks or holds with other content, owner, group or mode,
    from one listing on each side: a re-run that changes nothing makes no per-file round trip.
"""

from __future__ import absolute_import, division, print_function

import posixpath
import re

from ansible.errors import AnsibleFilterError

__metaclass__ = type

# The PATH systemd gives a unit (systemd 252, Debian bookworm), after the CUDA and venv bin dirs.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _version_tuple(text):
    """'2.36' / '3.11.2' / '580.95.05' -> (2, 36) / (3, 11, 2) / (580, 95, 5); () if none."""
    match = re.search(r"\d+(\.\d+)*", str(text or ""))
    if not match:
        return ()
    return tuple(int(part) for part in match.group(0).split("."))


def _arch(compute_cap):
    """'12.0' -> 'sm120', '9.0' -> 'sm90'."""
    parts = _version_tuple(compute_cap)
    if len(parts) < 2:
        return None
    return "sm%d%d" % (parts[0], parts[1])


def _driver_branch(driver_version):
    parts = _version_tuple(driver_version)
    return parts[0] if parts else None


def sglang_install_pick_release(recipes, requested="auto", driver_version=None):
    """The recipe key to install: ``requested`` when it is not ``auto``; else the recipe with the
    highest ``driver_min`` the driver meets (the newest CUDA it runs), or ``none``."""
    if requested and requested != "auto":
        return str(requested)
    branch = _driver_branch(driver_version)
    if branch is None:
        return "none"
    fitting = [(int(recipe.get("driver_min", 0)), key) for key, recipe in (recipes or {}).items()
               if int(recipe.get("driver_min", 0)) <= branch]
    if not fitting:
        return "none"
    return max(fitting)[1]


def sglang_install_problems(facts, recipe, release, settings=None):
    """Preflight refusals, one line each with its fix, for the facts measured on the node.

    ``facts`` keys (each checked only when present): ``python_version``, ``glibc_version``,
    ``free_kib``, ``driver_version``, ``gpus`` (gpu_info's list, with ``compute_cap``).
    ``recipe`` is ``sglang_install_recipes[release]`` (None when there is no such recipe).
    ``settings``: ``backend``, ``venv``, ``python``, ``min_free_gib``, ``min_gpus``,
    ``min_compute_capability``, ``index_url``, ``find_links``.
    """
    facts = facts or {}
    settings = settings or {}
    backend = settings.get("backend", "pip")
    problems = []
    no_driver = "driver_version" in facts and _driver_branch(facts.get("driver_version")) is None
    if not recipe and not (no_driver and release == "none"):
        problems.append(
            "No install recipe %r (known: %s): pin sglang_install_release to one of them, or upgrade "
            "the driver so that auto finds one (SGLang 0.5.23 / CUDA 13 needs R580+)."
            % (release, ", ".join(sorted(settings.get("known_releases", []))) or "none"))
    recipe = recipe or {}
    python_version = facts.get("python_version")
    if python_version and backend == "pip" and recipe.get("python_min"):
        if _version_tuple(python_version) < _version_tuple(recipe["python_min"]):
            problems.append(
                "SGLang %s needs Python >= %s, %s is %s: install a newer Python (with venv) and set "
                "sglang_install_python to it." % (release, recipe["python_min"],
                                                  settings.get("python", "python3"), python_version))
    glibc_version = facts.get("glibc_version")
    if glibc_version and backend == "pip" and recipe.get("glibc_min"):
        if _version_tuple(glibc_version) < _version_tuple(recipe["glibc_min"]):
            problems.append(
                "SGLang %s ships only manylinux_%s wheels (glibc >= %s), this node has glibc %s (pip "
                "would only say 'No matching distribution'): upgrade the OS (Debian 12, Ubuntu 22.04, "
                "RHEL 10 or newer) or pin an older recipe."
                % (release, str(recipe["glibc_min"]).replace(".", "_"), recipe["glibc_min"], glibc_version))
    free_kib = facts.get("free_kib")
    min_free_gib = settings.get("min_free_gib")
    if free_kib is not None and min_free_gib is not None:
        if int(free_kib) < int(min_free_gib) * 1024 * 1024:
            problems.append(
                "Only %.1f GiB free under %s, %s GiB needed for the venv: free space there or set "
                "sglang_install_venv to a larger filesystem."
                % (int(free_kib) / 1024.0 / 1024.0, settings.get("venv", "the venv"), min_free_gib))
    if backend == "pip" and recipe.get("index_required") and not (
            settings.get("index_url") or settings.get("find_links")):
        problems.append(
            "SGLang %s from PyPI is not a CUDA %s install (%s): upgrade the driver to R580+ and use "
            "SGLang 0.5.23 / CUDA 13, or set sglang_install_index_url (or sglang_install_find_links) "
            "to a CUDA %s wheel index that has them."
            % (release, recipe.get("cuda"), recipe["index_required"], recipe.get("cuda")))
    driver_version = facts.get("driver_version")
    if "driver_version" in facts:
        branch = _driver_branch(driver_version)
        if branch is None:
            problems.append(
                "No NVIDIA driver answers: install it (R580+ for SGLang 0.5.23 / CUDA 13) and check "
                "nvidia-smi, or set sglang_install_gpu_preflight=false to install before the GPUs.")
        elif recipe and branch < int(recipe.get("driver_min", 0)):
            problems.append(
                "Driver %s (R%d) cannot run CUDA %s, which SGLang %s is built for: upgrade the driver "
                "to R%s or newer." % (driver_version, branch, recipe.get("cuda"), release, recipe.get("driver_min")))
    gpus = facts.get("gpus")
    if gpus is not None and not no_driver:  # without a driver the GPU list says nothing more
        min_gpus = int(settings.get("min_gpus") or 0)
        if len(gpus) < min_gpus:
            problems.append(
                "%d GPU(s), %d needed for the tensor-parallel size: lower sglang_service_tp or use a "
                "bigger node." % (len(gpus), min_gpus))
        unknown = [gpu for gpu in gpus if not gpu.get("compute_cap")]
        if unknown:
            problems.append(
                "The driver reports no compute capability for GPU(s) %s: upgrade the driver (>= 510 "
                "reports it)." % ", ".join(str(gpu.get("index")) for gpu in unknown))
        min_cc = settings.get("min_compute_capability")
        archs = recipe.get("gpu_archs") or []
        for gpu in gpus:
            cap = gpu.get("compute_cap")
            if not cap:
                continue
            if min_cc and _version_tuple(cap) < _version_tuple(min_cc):
                problems.append(
                    "GPU %s (%s) has compute capability %s, below %s: use newer GPUs or lower "
                    "sglang_install_min_compute_capability." % (gpu.get("index"), gpu.get("name"), cap, min_cc))
            elif archs and _arch(cap) not in archs:
                problems.append(
                    "GPU %s (%s, %s) is not an architecture SGLang %s's kernels are built for (%s): "
                    "use such GPUs, or pin a recipe built for %s."
                    % (gpu.get("index"), gpu.get("name"), _arch(cap), release, ", ".join(archs), _arch(cap)))
    return problems


def sglang_install_cuda_environment(site_packages, recipe, venv, cuda_home=""):
    """``{CUDA_HOME, PATH}`` for the unit: ``cuda_home`` when the operator names a CUDA toolkit,
    else the recipe's ``nvcc_dir`` under the venv's ``site_packages`` (the nvidia-cuda-nvcc
    wheel's layout, e.g. nvidia/cu13). The venv's bin comes next on PATH (ninja, the console
    scripts). Empty when the recipe names no compiler and none is given."""
    recipe = recipe or {}
    home = cuda_home or ""
    if not home and recipe.get("nvcc_dir") and site_packages:
        home = "%s/%s" % (str(site_packages).rstrip("/"), str(recipe["nvcc_dir"]).strip("/"))
    if not home:
        return {}
    return {
        "CUDA_HOME": home,
        "PATH": "%s/bin:%s/bin:%s" % (home.rstrip("/"), str(venv).rstrip("/"), SYSTEM_PATH),
    }


def sglang_install_compiler_problems(nvcc_version, recipe, release, cuda_home="", jit_cache=False,
                                     host_compiler=None):
    """Refusals when FlashInfer could not build its kernels: ``nvcc_version`` is the output of
    ``$CUDA_HOME/bin/nvcc --version`` (empty when it did not run). A compiler of the recipe's CUDA
    major version, or the precompiled JIT cache (``jit_cache`` true), is enough. ``host_compiler``:
    the path of ``c++`` (FlashInfer's default ``CXX``, also nvcc's host compiler), empty when there
    is none; None = not checked."""
    recipe = recipe or {}
    if jit_cache:
        return []
    if host_compiler is not None and not str(host_compiler).strip():
        return ["FlashInfer compiles its kernels at first use with nvcc and the host C++ compiler "
                "(c++), and this node has no c++: install one (Debian/Ubuntu: apt install g++), or "
                "install the precompiled FlashInfer JIT cache (sglang_install_flashinfer_jit_cache=true "
                "with an index or wheelhouse that has %s), or set "
                "sglang_install_host_compiler_check=false if the unit's CXX names one."
                % (recipe.get("flashinfer_jit_cache") or "flashinfer-jit-cache")]
    cuda = recipe.get("cuda")
    match = re.search(r"release (\d+)\.(\d+)", str(nvcc_version or ""))
    fix = ("set sglang_install_cuda_home to a CUDA %s toolkit, or install the precompiled FlashInfer "
           "JIT cache (sglang_install_flashinfer_jit_cache=true with an index or wheelhouse that has "
           "%s)" % (cuda, recipe.get("flashinfer_jit_cache") or "flashinfer-jit-cache"))
    if not match:
        return ["FlashInfer compiles its kernels at first use and finds no nvcc under %s (SGLang %s, "
                "CUDA %s): %s." % (cuda_home or "CUDA_HOME", release, cuda, fix)]
    if cuda and int(match.group(1)) != _version_tuple(cuda)[0]:
        return ["The nvcc under %s is CUDA %s.%s, SGLang %s is built for CUDA %s: %s."
                % (cuda_home or "CUDA_HOME", match.group(1), match.group(2), release, cuda, fix)]
    return []


def _by_relpath(found, root):
    """{relative path: file entry} of ``ansible.builtin.find`` results under ``root``."""
    root = posixpath.normpath(str(root)) + "/"
    paths = ((posixpath.normpath(str(f.get("path", ""))), f) for f in found or [])
    return dict((path[len(root):], f) for path, f in paths if path.startswith(root))


def sglang_install_stale_files(files, source, node, want):
    """The entries of ``files`` (paths relative to ``want.src``) to copy to ``want.dest``: those the
    node lacks, or holds with another checksum, owner, group or mode than ``want`` asks.
    ``source`` and ``node`` are the ``files`` lists of ``ansible.builtin.find`` with
    ``get_checksum`` on the controller and on the node; a file the controller listing lacks is
    copied (the copy then says what is wrong with it)."""
    here = _by_relpath(source, want["src"])
    there = _by_relpath(node, want["dest"])
    stale = []
    for rel in files:
        mine, theirs = here.get(rel) or {}, there.get(rel)
        if theirs is None or not mine.get("checksum") or theirs.get("checksum") != mine["checksum"] \
                or theirs.get("pw_name") != want["owner"] or theirs.get("gr_name") != want["group"] \
                or str(theirs.get("mode", "")).lstrip("0") != str(want["mode"]).lstrip("0"):
            stale.append(rel)
    return stale


def sglang_install_facts(python_version, glibc=None, free_kib=None, gpus=None):
    """The facts sglang_install_problems checks, from what the preflight read on the node.

    ``python_version``: the interpreter's ``major.minor`` (empty or None: not read); ``glibc``: the
    output of ``getconf GNU_LIBC_VERSION`` (``glibc 2.36``); ``free_kib``: free disk where the venv
    goes, as read; ``gpus``: gpu_info's result when the GPU checks run, None when they do not (then
    neither the driver nor the GPUs are checked).
    """
    facts = {
        "python_version": python_version or None,
        "glibc_version": str(glibc or "").rsplit(" ", maxsplit=1)[-1] or None,
        "free_kib": free_kib,
    }
    if gpus is not None:
        facts["driver_version"] = gpus.get("driver_version")
        facts["gpus"] = gpus.get("gpus", [])
    return facts


def sglang_install_packages(recipe, jit_cache=False):
    """The recipe's pinned packages, and its precompiled FlashInfer JIT cache when ``jit_cache``."""
    recipe = recipe or {}
    packages = list(recipe.get("packages") or [])
    if jit_cache:
        if not recipe.get("flashinfer_jit_cache"):
            raise AnsibleFilterError("sglang_install_packages: the recipe names no flashinfer_jit_cache package: add it to "
                                     "its sglang_install_recipes entry, or set sglang_install_flashinfer_jit_cache=false")
        packages.append(recipe["flashinfer_jit_cache"])
    return packages


def sglang_install_pip_args(settings, recipe=None):
    """pip's arguments for where packages come from.

    ``settings``: ``index_url`` (replaces PyPI), ``extra_index_urls``, ``find_links`` (a wheelhouse,
    with ``--no-index``), ``pip_extra_args``. With ``recipe``, its own ``torch_index_url`` is added
    as an extra index, unless the operator chose where packages come from (an index or a wheelhouse).
    """
    settings = settings or {}
    index_url = settings.get("index_url") or ""
    find_links = settings.get("find_links") or ""
    args = ["--index-url", index_url] if index_url else []
    args += ["--extra-index-url=%s" % url for url in settings.get("extra_index_urls") or []]
    if find_links:
        args += ["--no-index", "--find-links", find_links]
    args += list(settings.get("pip_extra_args") or [])
    torch_index = (recipe or {}).get("torch_index_url") or ""
    if recipe is not None and torch_index and not index_url and not find_links:
        args += ["--extra-index-url", torch_index]
    return args
