# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The classifier on what a real SGLang printed: start failures provoked on an H200 with SGLang
0.5.17 (tests/gpu/real_sglang/README.md says how), the whole log of each start as captured."""

from __future__ import absolute_import, division, print_function

import os

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import journal

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "real-sglang")

# log -> (class, a piece of the line that must be the evidence)
EXPECTED = {
    "fail_context.log": ("bad_args", "is greater than the derived context_length (4096)"),
    "fail_mem_high.log": ("cuda_oom", "CUDA out of memory. Tried to allocate"),
    "fail_mem_low.log": ("oom_weights", "Loaded weights leave no GPU memory for the KV cache"),
    "fail_model_missing.log": ("model_missing", "Repo id must be in the form"),
    "fail_unknown_flag.log": ("bad_args", "usage: sglang serve"),
    "fail_nospec_flashinfer_jit.log": ("install_broken", "Ninja build failed"),
    "fail_jit_spec_draft2.log": ("install_broken", "Ninja build failed"),
    "launch_nospec.log": ("port_in_use", "[Errno 98] error while attempting to bind"),
    "launch_steps3.log": ("install_broken", "No module named 'deep_gemm'"),
}


def _lines(name):
    with open(os.path.join(FIXTURES, name), errors="replace") as f:
        return f.read().splitlines()


def test_every_captured_log_has_an_expectation():
    logs = sorted(n for n in os.listdir(FIXTURES) if n.endswith(".log"))
    assert logs == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_start_failure_is_classified(name):
    cls, piece = EXPECTED[name]
    lines = _lines(name)
    got, line = journal.classify(lines)
    assert (got, piece in (line or "")) == (cls, True), (got, line)
    assert journal.is_fatal(lines)
    assert not journal.saw_ready(lines)


@pytest.mark.parametrize("name,cause", [
    ("launch_nospec.log", "[Errno 98]"),
    ("launch_steps3.log", "Traceback"),
    ("fail_mem_high.log", "Traceback"),
])
def test_what_a_start_prints_before_its_failure_is_not_fatal(name, cause):
    # Everything up to the failure is what a healthy start prints too (warnings, the optional
    # model files SGLang skips - "Ignore import error when loading ...: No module named
    # 'helion'" -, the RLIMIT notice, memory and capture lines): no rule may fire on it.
    lines = _lines(name)
    before = lines[:next(i for i, line in enumerate(lines) if cause in line)]
    assert len(before) > 10
    assert journal.classify(before) == ("unknown", None)
    assert not journal.is_fatal(before)


def test_the_overwrite_warning_is_not_a_failure():
    # With SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 the same text is logged as a warning and
    # the start goes on.
    line = ("[2026-12-04 14:31:40] Warning: User-specified context_length (1000000) is greater "
            "than the derived context_length (4096). This may lead to incorrect model outputs")
    assert journal.classify([line]) == ("unknown", None)


def test_install_broken_has_a_hint_naming_the_install():
    assert "install" in journal.hint("install_broken")


@pytest.mark.parametrize("name", ["serve_nospec.log", "serve_steps3.log"])
def test_a_real_start_that_served_is_ready_and_fires_no_rule(name):
    # Whole logs of two starts that served /generate on the H200 (plain, and STANDALONE at 3
    # steps), up to the TERM that stopped them: the ready line is seen and nothing is fatal.
    lines = _lines(os.path.join("live", name))
    assert journal.saw_ready(lines)
    assert journal.classify(lines) == ("unknown", None)
    assert not journal.is_fatal(lines)
