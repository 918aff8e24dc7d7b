# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Reading systemd's answers on the node, shared by the modules that watch the unit
(sglang_service_wait, sglang_node_info). Stdlib only, Python >= 3.9.
"""

from __future__ import annotations


def parse_show(text):
    """``systemctl show -p A,B`` (or ``-p A -p B``) output, KEY=value lines, to ``{KEY: value}``.

    Only the first ``=`` splits a line (ExecStart and Environment values hold more); keys and
    values are stripped; lines without ``=`` (none in systemd 252's output) are passed over.
    """
    props = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props
