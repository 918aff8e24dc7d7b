#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_free
short_description: Free NVIDIA GPUs after an SGLang crash (end orphans, release /dev/nvidia*, wait for memory)
version_added: 0.1.0
description:
  - Finds orphaned SGLang processes by reading C(/proc) (no C(pkill)), that is every process whose command
    line or process title contains one of O(patterns). SGLang's scheduler and detokenizer children
    set titles such as C(sglang::scheduler_TP0) and can outlive a crashed parent while holding GPU memory.
  - Sends them C(SIGTERM), waits O(grace_period) seconds, then sends C(SIGKILL) to those still alive.
    Before each signal the pid's start time is checked again, so a recycled pid is never signalled.
  - With O(fuser_kill=true) it also ends every process that holds a file matching O(devices)
    (the manual C(fuser -k /dev/nvidia*) step), C(TERM) first and C(KILL) after the grace period.
  - O(only_pids), O(exclude_pids) and O(exclude_users) restrict what may be signalled. The module's
    own process and all its parents are never signalled. When any restriction is set, the module
    lists the holders with C(fuser) and signals the allowed pids itself; a bare C(fuser -k) runs
    only when every current holder may be signalled.
  - Then it waits, up to O(timeout) seconds, until C(nvidia-smi) shows every GPU at or below
    O(idle_memory_mib) and no process holds the device files any more (except O(ignore_holders) and the
    processes spared on purpose through O(exclude_pids) or O(exclude_users)), and reports what it did.
    If that does not happen in time it fails and says which GPU still uses memory and which
    process still holds which device file.
options:
  patterns:
    description:
      - Plain substrings matched against each process's command line and process name.
      - The default is SGLang's own sweep set (C(python -m sglang.cli.killall)) plus the simulator's server.
      - An empty list disables the process sweep (then only O(fuser_kill) signals anything).
    type: list
    elements: str
    default: ['sglang::', 'sglang.launch_server', 'sglang_sim.launch_server', 'sglang.srt', 'sglang.bench', 'sglang.data_parallel']
  grace_period:
    description: Seconds between C(SIGTERM) and C(SIGKILL).
    type: float
    default: 10
  fuser_kill:
    description:
      - Also signal every process that holds a file matching O(devices).
      - This ends B(every) GPU user on the node (other jobs, monitoring agents), hence off by default.
        Combine with O(exclude_pids), O(exclude_users) or O(only_pids) to spare some.
    type: bool
    default: false
  devices:
    description:
      - Glob patterns of the device files whose holders are listed (and, with O(fuser_kill), signalled).
      - Point this at another directory only for tests or simulated nodes.
    type: list
    elements: str
    default: ['/dev/nvidia*']
  only_pids:
    description:
      - When set, no process outside this list is ever signalled, whichever way it was found.
        An empty list signals nothing.
    type: list
    elements: int
  exclude_pids:
    description: Pids never signalled. The module's own pid and its parents are always excluded.
    type: list
    elements: int
    default: []
  exclude_users:
    description: Processes owned by these users are never signalled (for example a monitoring agent's user).
    type: list
    elements: str
    default: []
  ignore_holders:
    description:
      - Names of processes (process name or the base name of C(argv[0])) whose device files do not
        count as busy and that O(fuser_kill) never signals.
      - The default lists daemons that hold C(/dev/nvidia*) without using GPU memory, and C(nvidia-smi)
        itself, which a monitoring agent may be running at the moment the holders are listed.
    type: list
    elements: str
    default: [nvidia-persistenced, nv-hostengine, nvidia-powerd, nvidia-smi, dcgm-exporter]
  nvidia_smi:
    description:
      - Name or path of C(nvidia-smi). When it is not found, the memory check is skipped with a warning
        and only the device holders are waited for.
    type: str
    default: nvidia-smi
  idle_memory_mib:
    description:
      - A GPU counts as free when its used memory is at or below this many MiB.
      - An idle H200 reports 0 MiB; some boards (a display attached, MIG) report a few MiB with no
        process, so raise this there.
    type: int
    default: 0
  wait:
    description: Wait for the GPUs to be free. V(false) signals and returns at once.
    type: bool
    default: true
  timeout:
    description:
      - Seconds to wait, after the last signal, for the memory and the device files to be released.
    type: float
    default: 60
  poll_interval:
    description: Seconds between two checks while waiting.
    type: float
    default: 0.5
extends_documentation_fragment:
  - blackwell.sglang.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reports in RV(would_kill) what would be signalled, and signals nothing.
  diff_mode:
    support: none
  idempotent:
    description: When run twice in a row, the second run reports no change.
    support: full
requirements:
  - Linux C(/proc).
  - C(fuser) from C(psmisc) to list device holders (C(/proc) is read without it) and for O(fuser_kill).
  - C(nvidia-smi) for the memory check (optional).
notes:
  - Run it with become; without root only the caller's own processes can be seen and signalled.
  - Stop the systemd unit first (its C(KillMode=control-group) ends the children it still tracks);
    this module is for what is left behind.
seealso:
  - module: blackwell.sglang.gpu_info
author:
  - blackwell.sglang maintainers (@blackwell)
"""

EXAMPLES = r"""
---
- name: End SGLang orphans and wait until the GPUs are free
  blackwell.sglang.gpu_free:
  become: true
  register: __sglang_gpu_reset_free

- name: Also free the device files, sparing the DCGM exporter
  blackwell.sglang.gpu_free:
    fuser_kill: true
    exclude_users: [dcgm]
    grace_period: 15
    timeout: 120
    idle_memory_mib: 16
  become: true

- name: Only ever touch the pids a previous task found
  blackwell.sglang.gpu_free:
    only_pids: "{{ ansible_facts.gpu_info.device_holders | map(attribute='pid') | list }}"
    fuser_kill: true
  become: true

- name: See what would be ended
  blackwell.sglang.gpu_free:
  check_mode: true
  register: __preview
"""

RETURN = r"""
killed:
  description: Processes that were signalled.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process id.
      type: int
    cmdline:
      description: Command line (or process title) when it was found.
      type: str
      sample: sglang::scheduler_TP0
    user:
      description: Owner.
      type: str
    signal:
      description: The last signal sent, V(TERM) or V(KILL) (V(KILL) when it outlived the grace period).
      type: str
      sample: TERM
    via:
      description: V(pattern) (matched O(patterns)) or V(fuser) (held a device file).
      type: str
      sample: pattern
    pattern:
      description: The pattern that matched; null for V(fuser).
      type: str
    exited:
      description: Whether the process was gone when the signalling phase ended.
      type: bool
would_kill:
  description: In check mode, what would be signalled (same keys as RV(killed) without RV(killed[].signal)).
  returned: always
  type: list
  elements: dict
spared:
  description: Matching processes or device holders that were not signalled, and why.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process id.
      type: int
    cmdline:
      description: Command line.
      type: str
    user:
      description: Owner.
      type: str
    via:
      description: V(pattern) or V(fuser).
      type: str
    reason:
      description: Why it was spared (O(only_pids), O(exclude_pids), O(exclude_users), or the module's own process tree).
      type: str
      sample: not in only_pids
survivors:
  description: Signalled pids still alive after C(SIGKILL) (typically stuck in the driver, state D).
  returned: always
  type: list
  elements: int
memory_before:
  description: Per-GPU memory before anything was signalled; empty without nvidia-smi.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: GPU index.
      type: int
    uuid:
      description: GPU UUID.
      type: str
    memory_used_mib:
      description: Used memory in MiB.
      type: int
    memory_total_mib:
      description: Total memory in MiB.
      type: int
memory_after:
  description: Per-GPU memory at the end (same keys as RV(memory_before)).
  returned: always
  type: list
  elements: dict
holders_after:
  description: Device-file holders left at the end (same keys as M(blackwell.sglang.gpu_info)'s device_holders).
  returned: always
  type: list
  elements: dict
seconds_to_free:
  description:
    - Seconds from the first C(SIGTERM) until the GPUs were seen free; null when nothing was
      signalled or the wait was skipped.
  returned: always
  type: float
  sample: 3.2
seconds_waited:
  description: Seconds spent in the final wait (also when nothing was signalled).
  returned: always
  type: float
memory_checked:
  description: Whether GPU memory was checked (false without nvidia-smi).
  returned: always
  type: bool
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.blackwell.sglang.plugins.module_utils import nvidia
from ansible_collections.blackwell.sglang.plugins.module_utils import procs
from ansible_collections.blackwell.sglang.plugins.module_utils.procs import device_files

# After SIGKILL a process is gone within milliseconds unless it is stuck in the driver;
# do not wait the whole timeout on it before reporting it as a survivor.
KILL_WAIT = 5.0


def _summary(proc, via):
    return {
        "pid": proc["pid"],
        "cmdline": proc.get("cmdline") or proc.get("comm") or proc.get("command"),
        "user": proc.get("user"),
        "via": via,
        "pattern": proc.get("pattern"),
        "starttime": proc.get("starttime"),
    }


def _public(item):
    return dict((k, v) for k, v in item.items() if k != "starttime")


class GpuFreer:
    """The whole procedure, with every effect injectable so it can run on a fake /proc.

    query()            -> nvidia.query()'s dict (gpus, compute_apps, ...); raises
                          NvidiaSmiError; None instead of a callable when nvidia-smi is absent.
    list_holders()     -> list of holder dicts (procs.parse_fuser shape).
    fuser_kill_all(s)  -> signal every holder of the device files with signal name `s`
                          (`fuser -k -s`), or None when fuser is absent.
    """

    def __init__(self, params, check_mode, warn, query, list_holders, fuser_kill_all=None,
                 proc_root="/proc", kill=os.kill, clock=time.monotonic, sleep=time.sleep, self_pid=None):
        self.p = params
        self.check_mode = check_mode
        self.warn = warn
        self.query = query
        self.list_holders = list_holders
        self.fuser_kill_all = fuser_kill_all
        self.proc_root = proc_root
        self.kill = kill
        self.clock = clock
        self.sleep = sleep
        self.protected = procs.ancestors(self_pid if self_pid is not None else os.getpid(), proc_root)
        self.memory_checked = query is not None
        self.last_smi_error = None
        self.last_apps = []

    # -- observation ----------------------------------------------------------------------

    def gpus(self):
        if not self.memory_checked:
            return None
        try:
            facts = self.query()
        except nvidia.NvidiaSmiError as exc:
            self.last_smi_error = exc.describe()
            return None
        except (procs.CommandTimeout, OSError) as exc:
            self.last_smi_error = str(exc)
            return None
        self.last_smi_error = None
        self.last_apps = facts.get("compute_apps") or []
        return facts["gpus"]

    def _select(self, candidates):
        return procs.select_targets(
            candidates, protected_pids=self.protected, only_pids=self.p["only_pids"],
            exclude_pids=self.p["exclude_pids"], exclude_users=self.p["exclude_users"])

    def find_targets(self):
        """(allowed, spared, holders): allowed/spared are summaries with `via`."""
        candidates = []
        seen = set()
        if self.p["patterns"]:
            for proc in procs.find_matching(procs.scan(self.proc_root), self.p["patterns"]):
                if procs.is_alive(proc["pid"], proc["starttime"], self.proc_root):
                    candidates.append(_summary(proc, "pattern"))
                    seen.add(proc["pid"])
        holders = self.list_holders()
        ignored = []
        if self.p["fuser_kill"]:
            for holder in holders:
                if holder["pid"] in seen:
                    continue
                if procs.is_ignored(holder, self.p["ignore_holders"]):
                    ignored.append({"pid": holder["pid"], "cmdline": holder.get("cmdline") or holder.get("command"),
                                    "user": holder.get("user"), "via": "fuser", "pattern": None,
                                    "reason": "in ignore_holders"})
                    continue
                proc = procs.read_process(holder["pid"], self.proc_root)
                if proc is None:
                    continue  # gone meanwhile, or in a pid namespace we cannot see
                info = _summary(proc, "fuser")
                info["devices"] = holder.get("devices", [])
                candidates.append(info)
                seen.add(proc["pid"])
        allowed, spared = self._select(candidates)
        return allowed, spared + ignored, holders

    def remaining_holders(self, holders):
        """Holders that keep a GPU busy: everyone except the pids we were told to spare and
        the O(ignore_holders) daemons."""
        holders = [h for h in holders if not procs.is_ignored(h, self.p["ignore_holders"])]
        summaries = [dict(h, via="fuser") for h in holders]
        allowed, refused = self._select(summaries)
        deliberately_spared = [h for h in refused if h["reason"] != "not in only_pids"]
        spared_pids = set(h["pid"] for h in deliberately_spared)
        return [h for h in holders if h["pid"] not in spared_pids]

    # -- action ---------------------------------------------------------------------------

    def _signal_each(self, targets, signame, killed):
        for target in targets:
            try:
                sent = procs.send_signal(target["pid"], signame, target.get("starttime"), self.proc_root, self.kill)
            except PermissionError:
                # Another user's process without root: report it, keep going with the rest.
                killed[target["pid"]]["error"] = "permission denied sending SIG%s (run the task with become)" % signame
                continue
            if sent:
                killed[target["pid"]]["signal"] = signame

    def run(self):
        result = {
            "changed": False, "killed": [], "would_kill": [], "spared": [], "survivors": [],
            "memory_before": [], "memory_after": [], "holders_after": [], "seconds_to_free": None,
            "seconds_waited": 0.0, "memory_checked": self.memory_checked,
        }
        before = self.gpus()
        if before is None and self.memory_checked:
            self.warn("nvidia-smi failed before anything was signalled (%s); GPU memory is not checked"
                      % self.last_smi_error)
            self.memory_checked = False
            result["memory_checked"] = False
        result["memory_before"] = nvidia.memory_by_gpu(before or [])

        allowed, spared, holders = self.find_targets()
        result["spared"] = [_public(s) for s in spared]
        if self.check_mode:
            result["would_kill"] = [_public(a) for a in allowed]
            result["changed"] = bool(allowed)
            result["memory_after"] = result["memory_before"]
            result["holders_after"] = holders
            return True, result, None

        killed = dict((t["pid"], dict(t, signal=None)) for t in allowed)
        first_term = None
        if allowed:
            # A bare `fuser -k` also catches holders that appear after the listing; only safe
            # when nothing is restricted and every current holder may be signalled.
            bare_fuser = (self.p["fuser_kill"] and self.fuser_kill_all is not None
                          and self.p["only_pids"] is None and not self.p["exclude_pids"]
                          and not self.p["exclude_users"]
                          and not any(s["via"] == "fuser" or s["pid"] in set(h["pid"] for h in holders)
                                      for s in spared))
            by_pattern = [t for t in allowed if t["via"] == "pattern"]
            by_fuser = [t for t in allowed if t["via"] == "fuser"]
            first_term = self.clock()
            self._signal_each(by_pattern, "TERM", killed)
            if bare_fuser and by_fuser:
                self.fuser_kill_all("TERM")
                for t in by_fuser:
                    killed[t["pid"]]["signal"] = "TERM"
            else:
                self._signal_each(by_fuser, "TERM", killed)
            sent = [t for t in allowed if killed[t["pid"]]["signal"]]
            alive = procs.wait_gone(sent, first_term + self.p["grace_period"], self.proc_root,
                                    min(0.1, self.p["poll_interval"]), self.clock, self.sleep)
            if alive:
                self._signal_each(alive, "KILL", killed)
                if bare_fuser and any(t["via"] == "fuser" for t in alive):
                    self.fuser_kill_all("KILL")
                alive = procs.wait_gone(alive, self.clock() + KILL_WAIT, self.proc_root,
                                        min(0.1, self.p["poll_interval"]), self.clock, self.sleep)
            result["survivors"] = sorted(t["pid"] for t in alive)
            survivors = set(result["survivors"])
            for pid in sorted(killed):
                entry = killed[pid]
                if entry.get("error") and entry["signal"] is None:
                    result["spared"].append(_public(dict(entry, reason=entry.pop("error"))))
                    continue
                if entry["signal"] is None:
                    continue  # it was gone before we got to it
                entry["exited"] = pid not in survivors
                entry.pop("error", None)
                result["killed"].append(_public(entry))
            result["changed"] = bool(result["killed"])

        ok, msg = True, None
        if self.p["wait"]:
            ok, msg = self.wait_free(result, first_term if result["changed"] else None)
        else:
            after = self.gpus()
            result["memory_after"] = nvidia.memory_by_gpu(after or [])
            result["holders_after"] = self.list_holders()
        return ok, result, msg

    def wait_free(self, result, first_term):
        start = self.clock()
        deadline = start + self.p["timeout"]
        while True:
            gpus = self.gpus()
            holders = self.list_holders()
            remaining = self.remaining_holders(holders)
            busy = nvidia.busy_gpus(gpus or [], self.p["idle_memory_mib"])
            smi_pending = self.memory_checked and gpus is None
            now = self.clock()
            if not busy and not remaining and not smi_pending:
                result["memory_after"] = nvidia.memory_by_gpu(gpus or [])
                result["holders_after"] = holders
                result["seconds_waited"] = round(now - start, 3)
                if first_term is not None:
                    result["seconds_to_free"] = round(now - first_term, 3)
                return True, None
            if now >= deadline:
                result["memory_after"] = nvidia.memory_by_gpu(gpus or [])
                result["holders_after"] = holders
                result["seconds_waited"] = round(now - start, 3)
                return False, self.describe_busy(busy, remaining, holders, result)
            self.sleep(min(self.p["poll_interval"], max(0.0, deadline - now)))

    def describe_busy(self, busy, remaining, holders, result):
        parts = []
        for gpu in busy:
            apps = ["%s %s %s MiB" % (a["pid"], a["process_name"], a["used_memory_mib"])
                    for a in self.last_apps if a.get("gpu_index") == gpu["index"]]
            parts.append("GPU %s uses %s MiB (idle_memory_mib is %s)%s"
                         % (gpu["index"], gpu["memory_used_mib"], self.p["idle_memory_mib"],
                            ", compute apps: " + ", ".join(apps) if apps else ""))
        for holder in remaining:
            parts.append("pid %s (%s, user %s) holds %s%s" % (
                holder["pid"], holder.get("command") or "?", holder.get("user") or "?",
                ", ".join(holder.get("devices") or ["a device file"]),
                "" if self.p["fuser_kill"] else " (set fuser_kill: true to end device holders)"))
        if self.memory_checked and self.last_smi_error:
            parts.append("nvidia-smi fails: %s" % self.last_smi_error)
        if result["survivors"]:
            parts.append("pids %s survived SIGKILL (stuck in the driver? check dmesg)"
                         % ", ".join(str(p) for p in result["survivors"]))
        return "GPUs still not free %s s after the last signal: %s" % (self.p["timeout"], "; ".join(parts))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            patterns=dict(type="list", elements="str", default=list(procs.DEFAULT_SGLANG_PATTERNS)),
            grace_period=dict(type="float", default=10.0),
            fuser_kill=dict(type="bool", default=False),
            devices=dict(type="list", elements="str", default=["/dev/nvidia*"]),
            only_pids=dict(type="list", elements="int"),
            exclude_pids=dict(type="list", elements="int", default=[]),
            exclude_users=dict(type="list", elements="str", default=[]),
            ignore_holders=dict(type="list", elements="str", default=list(procs.DEFAULT_IGNORED_HOLDERS)),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            idle_memory_mib=dict(type="int", default=0),
            wait=dict(type="bool", default=True),
            timeout=dict(type="float", default=60.0),
            poll_interval=dict(type="float", default=0.5),
        ),
        supports_check_mode=True,
    )
    params = module.params
    for name in ("grace_period", "timeout", "idle_memory_mib"):
        if params[name] < 0:
            module.fail_json(msg="%s must not be negative, got %s" % (name, params[name]))
    if params["poll_interval"] <= 0:
        module.fail_json(msg="poll_interval must be positive, got %s" % params["poll_interval"])
    if any(not p.strip() for p in params["patterns"]):
        module.fail_json(msg="patterns must not contain empty strings (an empty pattern would match every process)")

    files = device_files(params["devices"])
    fuser_bin = procs.find_binary("fuser", module.get_bin_path)
    smi = procs.find_binary(params["nvidia_smi"], module.get_bin_path)
    command_timeout = max(10.0, min(30.0, params["timeout"] or 10.0))
    timeout_bin = procs.find_binary("timeout", module.get_bin_path)

    def run(argv, merge_stderr=False):
        return procs.run_with_timeout(module.run_command, argv, command_timeout, merge_stderr, timeout_bin)

    query = None
    if smi is None:
        module.warn("nvidia-smi (%s) not found: GPU memory is not checked, only the device files"
                    % params["nvidia_smi"])
    else:
        def query():
            return nvidia.query(run, smi)

    def list_holders():
        if not files:
            return []
        if fuser_bin is None:
            return procs.holders_from_proc(files)
        try:
            rc, out, dummy = run(procs.fuser_argv(fuser_bin, files), merge_stderr=True)
        except (procs.CommandTimeout, OSError):
            return procs.holders_from_proc(files)
        if rc not in (0, 1):
            return procs.holders_from_proc(files)
        return procs.enrich_holders(procs.parse_fuser(out, files))

    fuser_kill_all = None
    if fuser_bin is not None and files:
        def fuser_kill_all(signame):
            run([fuser_bin, "-k", "-" + signame] + files, merge_stderr=True)

    freer = GpuFreer(params, module.check_mode, module.warn, query, list_holders, fuser_kill_all)
    try:
        ok, result, msg = freer.run()
    except (procs.CommandTimeout, OSError) as exc:
        module.fail_json(msg="Failed to free the GPUs: %s" % exc)
    if not ok:
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
