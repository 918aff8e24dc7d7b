#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Gather NVIDIA GPU facts from nvidia-smi and who holds the device files
version_added: 0.1.0
description:
  - Runs C(nvidia-smi) with its CSV query formats (C(--query-gpu) and C(--query-compute-apps),
    C(--format=csv,noheader,nounits)) and returns the GPUs, their memory use and the compute
    processes as facts under C(ansible_facts.gpu_info), and the same data at the top level.
  - Lists the processes that hold the NVIDIA device files open (C(/dev/nvidia*)) with C(fuser -v);
    when C(fuser) (package C(psmisc)) is missing, reads C(/proc/<pid>/fd) and C(/proc/<pid>/maps)
    directly instead.
  - Read-only. Runs in check mode too, and never reports a change.
options:
  nvidia_smi:
    description:
      - Name or path of the C(nvidia-smi) binary. A bare name is searched on E(PATH) and the usual
        system directories.
    type: str
    default: nvidia-smi
  required:
    description:
      - When V(true), a missing C(nvidia-smi), a failing driver or a node without GPUs fails the task
        with a message that says what to fix.
      - When V(false), such a node returns O(ignore:gpus=[]) with a warning instead, so a play can
        branch on RV(gpu_count).
    type: bool
    default: true
  devices:
    description:
      - Glob patterns of the device files whose holders are reported.
      - Point this at another directory only for tests or simulated nodes.
    type: list
    elements: str
    default: ['/dev/nvidia*']
  fuser:
    description:
      - Whether to look up the holders of O(devices). V(false) skips it and returns an empty
        RV(device_holders).
    type: bool
    default: true
  timeout:
    description:
      - Seconds each external command (C(nvidia-smi), C(fuser)) may run. C(nvidia-smi) can hang
        for minutes when a GPU falls off the bus; the task then fails instead of hanging.
    type: int
    default: 30
extends_documentation_fragment:
  - blackwell.sglang.attributes
  - blackwell.sglang.attributes.facts
  - blackwell.sglang.attributes.info_module
requirements:
  - C(nvidia-smi) from the NVIDIA driver (or the simulator's stand-in).
  - C(fuser) from C(psmisc) for device holders (optional; C(/proc) is read without it).
notes:
  - Without root, C(fuser) and C(/proc) only show the caller's own processes as holders.
seealso:
  - module: blackwell.sglang.gpu_free
author:
  - blackwell.sglang maintainers (@blackwell)
"""

EXAMPLES = r"""
---
- name: Gather GPU facts
  blackwell.sglang.gpu_info:

- name: Stop early on nodes whose GPUs are too small
  ansible.builtin.assert:
    that:
      - ansible_facts.gpu_info.gpu_count >= 4
      - ansible_facts.gpu_info.gpus | map(attribute='memory_total_mib') | min >= 90000
    fail_msg: "{{ inventory_hostname }} needs 4 GPUs with at least 90 GB each"

- name: Tolerate hosts without GPUs (controller, CPU-only nodes)
  blackwell.sglang.gpu_info:
    required: false
  register: __gpus

- name: Use an nvidia-smi outside PATH and skip the fuser scan
  blackwell.sglang.gpu_info:
    nvidia_smi: /usr/local/nvidia/bin/nvidia-smi
    fuser: false
"""

RETURN = r"""
gpus:
  description: One entry per GPU, ordered by index.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: GPU index as nvidia-smi numbers it.
      type: int
      sample: 0
    uuid:
      description: GPU UUID.
      type: str
      sample: GPU-0c659456-f90b-dc4f-2d09-40552f47d00c
    name:
      description: Product name.
      type: str
      sample: NVIDIA H200
    memory_used_mib:
      description: Used framebuffer memory in MiB; null when the driver does not report it.
      type: int
      sample: 21007
    memory_total_mib:
      description: Total framebuffer memory in MiB.
      type: int
      sample: 143771
    compute_cap:
      description: CUDA compute capability; null on drivers older than 510.
      type: str
      sample: "9.0"
    driver_version:
      description: Driver version.
      type: str
      sample: 580.159.04
compute_apps:
  description: Compute processes as nvidia-smi lists them.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process id (as seen from the driver's pid namespace).
      type: int
      sample: 419
    process_name:
      description: Process name.
      type: str
      sample: python3
    used_memory_mib:
      description: GPU memory used by the process in MiB; null where the driver hides it.
      type: int
      sample: 20998
    gpu_uuid:
      description: UUID of the GPU the process uses.
      type: str
      sample: GPU-0c659456-f90b-dc4f-2d09-40552f47d00c
    gpu_index:
      description: Index of that GPU; null if the UUID is not in RV(gpus).
      type: int
      sample: 0
device_holders:
  description:
    - Processes that hold a file matching O(devices) open or mapped; empty when O(fuser=false).
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process id.
      type: int
      sample: 419
    user:
      description: Owner of the process.
      type: str
      sample: root
    command:
      description: Process name (comm).
      type: str
      sample: python3
    access:
      description: fuser access letters (C(f)/C(F) open, C(m) mapped, C(c) cwd, C(e) executable, C(r) root).
      type: str
      sample: Fm
    cmdline:
      description: Command line, where SGLang's process titles show (C(sglang::scheduler_TP0)); null if unreadable.
      type: str
      sample: sglang::scheduler_TP0
    devices:
      description: The device files this process holds.
      type: list
      elements: str
      sample: [/dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm]
device_holders_source:
  description: How the holders were found.
  returned: always
  type: str
  choices: [fuser, proc, skipped]
  sample: fuser
device_files:
  description: The files that matched O(devices).
  returned: always
  type: list
  elements: str
  sample: [/dev/nvidia0, /dev/nvidiactl]
driver_version:
  description: Driver version (of the first GPU); null without GPUs.
  returned: always
  type: str
  sample: 580.159.04
gpu_count:
  description: Number of GPUs.
  returned: always
  type: int
  sample: 1
memory_used_mib_total:
  description: Used memory summed over all GPUs, in MiB.
  returned: always
  type: int
  sample: 21007
memory_total_mib_total:
  description: Total memory summed over all GPUs, in MiB.
  returned: always
  type: int
  sample: 143771
nvidia_smi:
  description: Path of the nvidia-smi that was run; null when it was not found.
  returned: always
  type: str
  sample: /usr/bin/nvidia-smi
error:
  description: With O(required=false), why no GPU was found (cause key and message); null otherwise.
  returned: always
  type: dict
  sample: {cause: driver_not_loaded, message: "nvidia-smi failed: ..."}
ansible_facts:
  description: Facts to add to the host's facts.
  returned: always
  type: dict
  contains:
    gpu_info:
      description: All of the values above, in one dict.
      returned: always
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.blackwell.sglang.plugins.module_utils import nvidia
from ansible_collections.blackwell.sglang.plugins.module_utils import procs
from ansible_collections.blackwell.sglang.plugins.module_utils.procs import device_files


def find_holders(files, fuser_bin, runner, proc_root="/proc"):
    """(holders, source, warning). fuser exits 1 when nobody holds any file."""
    if not files:
        return [], "fuser" if fuser_bin else "proc", None
    if not fuser_bin:
        return procs.holders_from_proc(files, proc_root), "proc", None
    try:
        rc, out, dummy = runner(procs.fuser_argv(fuser_bin, files), merge_stderr=True)
    except (procs.CommandTimeout, OSError) as exc:
        return procs.holders_from_proc(files, proc_root), "proc", "fuser failed (%s); read /proc instead" % exc
    holders = procs.parse_fuser(out, files)
    if rc not in (0, 1) or (rc == 0 and not holders):
        return (procs.holders_from_proc(files, proc_root), "proc",
                "fuser rc=%s gave no usable output (%s); read /proc instead" % (rc, out.strip()[-200:]))
    return procs.enrich_holders(holders, proc_root), "fuser", None


def gather(params, which, runner, warn):
    """The facts for `params`. `which(name)` finds a binary (None if absent),
    `runner(argv, merge_stderr=False) -> (rc, out, err)` runs one.
    Raises nvidia.NvidiaSmiError when GPUs are required."""
    info = {
        "gpus": [],
        "compute_apps": [],
        "device_holders": [],
        "device_holders_source": "skipped",
        "device_files": [],
        "driver_version": None,
        "gpu_count": 0,
        "memory_used_mib_total": 0,
        "memory_total_mib_total": 0,
        "nvidia_smi": None,
        "error": None,
    }
    nvidia_smi = which(params["nvidia_smi"])
    try:
        if nvidia_smi is None:
            raise nvidia.NvidiaSmiError(
                "nvidia_smi_missing",
                "nvidia-smi not found (looked for %r on PATH and in /usr/bin, /usr/sbin, /usr/local/bin)" % params["nvidia_smi"],
                "install the NVIDIA driver utilities (Debian: nvidia-smi; NVIDIA .run/CUDA repo: nvidia-utils-<ver>) "
                "or set nvidia_smi to its path")
        info["nvidia_smi"] = nvidia_smi
        try:
            info.update(nvidia.query(runner, nvidia_smi))
        except procs.CommandTimeout as exc:
            raise nvidia.NvidiaSmiError(
                "timeout", str(exc),
                "a hung nvidia-smi usually means a GPU fell off the bus: check dmesg for Xid errors")
        except OSError as exc:
            raise nvidia.NvidiaSmiError("exec_failed", "could not run %s: %s" % (nvidia_smi, exc))
    except nvidia.NvidiaSmiError as exc:
        if params["required"]:
            raise
        info["error"] = {"cause": exc.cause, "message": exc.describe()}
        warn("No GPU facts: %s" % exc.describe())

    if params["fuser"]:
        files = device_files(params["devices"])
        info["device_files"] = files
        holders, source, warning = find_holders(files, which("fuser"), runner)
        info["device_holders"] = holders
        info["device_holders_source"] = source
        if warning:
            warn(warning)
    return info


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            required=dict(type="bool", default=True),
            devices=dict(type="list", elements="str", default=["/dev/nvidia*"]),
            fuser=dict(type="bool", default=True),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    if module.params["timeout"] <= 0:
        module.fail_json(msg="timeout must be a positive number of seconds, got %s" % module.params["timeout"])

    def which(name):
        return procs.find_binary(name, module.get_bin_path)

    timeout_bin = which("timeout")

    def runner(argv, merge_stderr=False):
        return procs.run_with_timeout(module.run_command, argv, module.params["timeout"], merge_stderr, timeout_bin)

    try:
        info = gather(module.params, which, runner, module.warn)
    except nvidia.NvidiaSmiError as exc:
        module.fail_json(msg="Failed to gather GPU facts: %s" % exc.describe(), cause=exc.cause, rc=exc.rc,
                         output=exc.output)

    result = dict(info)
    result["changed"] = False
    result["ansible_facts"] = {"gpu_info": info}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
