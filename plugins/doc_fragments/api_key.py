# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The key file option of the modules that talk to a served node (module_utils/sglang_api_key.py)."""

    DOCUMENTATION = r"""
options:
  api_key_file:
    description:
      - Path on the node of SGLang's C(--config) YAML whose C(api-key) is sent, read where the module
        runs (the service role publishes it as C(sglang_service_names.api_key_file)), so the key never
        passes through the controller. A missing file means the server runs without a key.
      - Mutually exclusive with O(api_key).
    type: path
"""
