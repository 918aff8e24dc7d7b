# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of blackwell.sglang.mtp_tune_report: the report lives on the controller, so
this action does the work itself and never ships a module to the node."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.blackwell.sglang.plugins.module_utils import mtp_report

ARGSPEC = mtp_report.ARGSPEC


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validated, args = self.validate_argument_spec(argument_spec=ARGSPEC,
                                                       required_if=[("op", "write", ("results",))])
        directory = os.path.abspath(os.path.expanduser(args["path"]))
        result.update(changed=False, path=directory)
        try:
            if args["op"] == "load":
                loaded = mtp_report.load(directory, force=args["force"], fresh=args["fresh"])
                result.update(results=loaded["doc"], set_aside=loaded["set_aside"], msg=loaded["message"])
                if loaded["set_aside"]:
                    result["changed"] = True
                    result.setdefault("warnings", []).append(loaded["message"])
                return result
            if self._task.check_mode:
                result.update(msg="check mode: would write the report to %s" % directory, files=[])
                return result
            out = mtp_report.write(directory, args["results"], plot=args["plot"], compare=args["compare"])
        except mtp_report.ReportError as exc:
            raise AnsibleActionFail(str(exc))
        except (IOError, OSError) as exc:
            raise AnsibleActionFail("cannot write the report in %s: %s" % (directory, exc))
        result.update(changed=out["changed"], files=out["files"], written=out["written"],
                      stats=out["doc"]["stats"], updated=out["doc"].get("updated"),
                      msg=("report written to %s" % directory) if out["changed"] else "report unchanged")
        if out["warnings"]:
            result.setdefault("warnings", []).extend(out["warnings"])
        return result
