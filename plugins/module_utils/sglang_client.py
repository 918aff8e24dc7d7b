# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Transitional: the names of sglang_bench's load generator at their old address while its
users move to sglang_transport, sglang_workload, sglang_runner and sglang_results."""

from __future__ import absolute_import, division, print_function

from ansible_collections.blackwell.sglang.plugins.module_utils.sglang_results import (  # noqa: F401
    CI_FIGURES, config_echo)
from ansible_collections.blackwell.sglang.plugins.module_utils.sglang_runner import (  # noqa: F401
    DEFAULTS, BenchError, LoopLagMonitor, plan, run_benchmark, run_requests)
from ansible_collections.blackwell.sglang.plugins.module_utils.sglang_transport import (  # noqa: F401
    ENDPOINT_PATHS, Client, ClientError, GenerateStream, OpenAIStream, ProtocolError,
    ResponseParser, SSEParser, _fast_meta, make_handler, new_record)
from ansible_collections.blackwell.sglang.plugins.module_utils.sglang_workload import (  # noqa: F401
    build_payload, load_jsonl, random_prompts)

__metaclass__ = type
