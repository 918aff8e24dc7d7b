#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: mtp_tune_report
short_description: Load or write the report of an MTP tuning run on the controller
version_added: "0.1.0"
description:
  - Keeps the results of C(blackwell.sglang.mtp_tune) in one directory per run and host on the
    Ansible controller. The work is done by the action plugin of the same name; nothing runs on
    the node.
  - O(op=write) writes C(results.json) (every attempt with settings, timings, metrics or failure),
    C(results.csv) (one row per attempt and concurrency level, with the candidate's notation, its
    running cap and whether the level is queue-bound), C(summary.md) (first the setting to run with
    its SGLang flags, its figure at every measured level and the rollout command; then how it was
    chosen; then candidate x concurrency with each candidate's running cap, levels above it marked
    C(q), winner marked) and C(plot.png) (tok/s vs concurrency, one line per candidate, and the
    figure against depth per level, queue-bound points hollow). Candidates are named
    C(s<steps>-k<topk>-d<draft tokens>) with a suffix per lever that is set (C(+cgbs64), C(+mrr20),
    C(+ratio4), C(+mms96), C(+replay)) in all three. Each file is
    written to a temporary file in the same directory and renamed over the old one, so a run that
    is interrupted at any point leaves complete files.
  - O(op=load) proves that the directory is writable (before any server is restarted) and reads an
    earlier C(results.json) to resume. A file that is not valid JSON or not in this tool's layout is
    renamed to C(results.json.corrupt-<UTC time>) and the task fails with that name, unless
    O(fresh=true). With O(force=true) an earlier file is kept as C(results.json.prev-<UTC time>) and
    the run starts afresh. Nothing is ever deleted.
  - The PNG needs matplotlib on the controller. Without it the plot is skipped with a warning; the
    run never fails for it.
options:
  path:
    description: Results directory on the controller (created when missing).
    type: path
    required: true
  op:
    description: V(load) an earlier run's results, or V(write) the report.
    type: str
    choices: [load, write]
    default: write
  results:
    description:
      - The results document to write (schema 1; see C(plugins/module_utils/mtp_report.py)).
      - Required with O(op=write).
    type: dict
  force:
    description: With O(op=load), set earlier results aside and start afresh.
    type: bool
    default: false
  fresh:
    description: With O(op=load), start afresh when the earlier results file is corrupt (it is still kept aside).
    type: bool
    default: false
  plot:
    description: Draw C(plot.png) when matplotlib is importable.
    type: bool
    default: true
  compare:
    description:
      - Add to C(summary.md) a table of the other runs for the same host found next to this one
        (C(<results_dir>/<run>/<host>)), e.g. a sweep and an adaptive run, with their winners,
        launches and wall time.
    type: bool
    default: true
extends_documentation_fragment:
  - blackwell.sglang.attributes
attributes:
  check_mode:
    support: partial
    details: O(op=load) runs normally (it only reads, or sets aside a corrupt file); O(op=write) writes nothing.
  diff_mode:
    support: none
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
    details: Runs on the controller.
author:
  - blackwell.sglang maintainers (@blackwell)
seealso:
  - name: mtp_tune role
    description: The tuning loop that fills the report.
    link: https://example.invalid/blackwell/sglang/roles/mtp_tune
"""

EXAMPLES = r"""
- name: Check the results directory and load an earlier run to resume
  blackwell.sglang.mtp_tune_report:
    path: "{{ playbook_dir }}/../results/tune/{{ inventory_hostname }}"
    op: load
  register: __mtp_tune_loaded

- name: Write the report after a candidate
  blackwell.sglang.mtp_tune_report:
    path: "{{ playbook_dir }}/../results/tune/{{ inventory_hostname }}"
    results: "{{ _mtp_tune_doc }}"
"""

RETURN = r"""
path:
  description: The results directory, absolute.
  returned: always
  type: str
results:
  description: With O(op=load), the earlier results document, or V(null) when there is none to resume.
  returned: op=load
  type: dict
set_aside:
  description: With O(op=load), where an earlier file was moved (corrupt or forced), else V(null).
  returned: op=load
  type: str
  sample: /srv/tune/default/node1/results.json.corrupt-20261202T150102Z
files:
  description: With O(op=write), the report files (written now or already up to date).
  returned: op=write
  type: list
  elements: str
written:
  description: With O(op=write), the files whose content changed and were rewritten.
  returned: op=write
  type: list
  elements: str
stats:
  description: With O(op=write), launches, failed launches, candidates and seconds (wall, starting, benchmarking) over all attempts.
  returned: op=write
  type: dict
msg:
  description: What was done.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.blackwell.sglang.plugins.module_utils.mtp_report import ARGSPEC


def main():
    # The action plugin does the work on the controller; reaching this code means the module was
    # called without it (e.g. by a tool that bypasses action plugins).
    module = AnsibleModule(argument_spec=ARGSPEC, supports_check_mode=True)
    module.fail_json(msg="mtp_tune_report runs on the controller through its action plugin; "
                         "call it as a task (blackwell.sglang.mtp_tune_report), not as a raw module")


if __name__ == "__main__":
    main()
