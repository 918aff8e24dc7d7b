# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of blackwell.sglang.sglang_bench: with dataset_src=controller, read the JSONL
prompt file on the controller (searched like copy's src, role files/ included) and hand its lines
to the module inline, so a prompt set kept with the playbook needs no separate copy task. Every
other call goes to the module unchanged."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

# a prompt set this large belongs on the node (dataset_src=node); inline args travel in memory
MAX_INLINE_BYTES = 64 * 1024 * 1024


class ActionModule(ActionBase):

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        if args.get("dataset_src", "node") == "controller":
            src = args.get("dataset")
            if not src or src == "random":
                result.update(failed=True, msg="dataset_src=controller needs `dataset` set to a "
                                               "JSONL file on the controller")
                return result
            if args.get("dataset_lines") is not None:
                result.update(failed=True, msg="give either dataset_src=controller or "
                                               "dataset_lines, not both")
                return result
            try:
                path = self._find_needle("files", src)
            except AnsibleError as exc:
                result.update(failed=True, msg="dataset %s not found on the controller: %s"
                              % (src, to_text(exc)))
                return result
            try:
                with open(path, "rb") as fh:
                    raw = fh.read(MAX_INLINE_BYTES + 1)
            except (IOError, OSError) as exc:
                result.update(failed=True, msg="cannot read dataset %s on the controller: %s"
                              % (path, to_text(exc)))
                return result
            if len(raw) > MAX_INLINE_BYTES:
                result.update(failed=True, msg="dataset %s is larger than %d MiB; copy it to the "
                              "node and use dataset_src=node" % (path, MAX_INLINE_BYTES >> 20))
                return result
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                result.update(failed=True, msg="dataset %s is not UTF-8 text: %s" % (path, exc))
                return result
            args["dataset_lines"] = text.splitlines()
        result.update(self._execute_module(module_name="blackwell.sglang.sglang_bench",
                                           module_args=args, task_vars=task_vars))
        return result
