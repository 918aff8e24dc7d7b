# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters of the install role (``roles/install``); the decisions are made in
plugins/plugin_utils/install.py, this file only publishes them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils.install import (
    sglang_install_compiler_problems, sglang_install_cuda_environment, sglang_install_facts, sglang_install_packages,
    sglang_install_pick_release, sglang_install_pip_args, sglang_install_problems, sglang_install_stale_files)


class FilterModule(object):
    """Install decisions (plugins/plugin_utils/install.py)."""

    def filters(self):
        return {
            "sglang_install_pick_release": sglang_install_pick_release,
            "sglang_install_problems": sglang_install_problems,
            "sglang_install_cuda_environment": sglang_install_cuda_environment,
            "sglang_install_compiler_problems": sglang_install_compiler_problems,
            "sglang_install_stale_files": sglang_install_stale_files,
            "sglang_install_facts": sglang_install_facts,
            "sglang_install_packages": sglang_install_packages,
            "sglang_install_pip_args": sglang_install_pip_args,
        }
