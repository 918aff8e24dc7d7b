# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Classify why an SGLang server failed to come up, from its journal lines.

Pure functions (no I/O), so they are tested on journal excerpts built from SGLang 0.5.23's own
messages (the rules name the file and function that prints them; tests/contract checks them
against the wheel) and on what a real server printed (tests/fixtures/real-sglang). Stdlib only,
Python >= 3.9.

Classes, in the order they are decided (the first class with a matching line wins, because a
crash leaves several symptoms in one journal and the *cause* comes first in this order):

``bad_args``
    argparse rejected the command line (``usage: sglang serve``, ``error: unrecognized
    arguments``, ``ambiguous option``, ``invalid choice``), or startup validation refused a
    combination (unknown speculative algorithm, trtllm_mha with topk > 1, a ``--context-length``
    above the model's derived one: ``configs/model_config.py`` ``_derive_context_length``, the
    same text in 0.5.17 and 0.5.23, seen on an H200; a ReplaySSM lever whose preconditions do
    not hold, ``arg_groups/attention_hook.py`` ``handle_linear_attn_backend``: topk > 1, a decode
    backend other than triton/flashinfer, the extra_buffer radix strategy, a PD prefill role,
    both ReplaySSM flags at once). Fix the unit.
``port_in_use``
    the HTTP port is taken (uvicorn's ``[Errno 98]`` / ``address already in use``, or
    ``<name> at <port> is not available in <n> seconds`` from ``utils/network.py``). The info
    lines of ``utils/network.py`` that only report a port being probed (``Port N is already in
    use, trying port N+1``, ``port N is in use. Waiting ...``) do not count.
``no_gpu``
    the rank found no usable GPU: ``CUDA error: invalid device ordinal`` (tp larger than the
    visible GPUs), ``No CUDA GPUs are available``, no NVIDIA driver, or 0.5.23's own
    ``No accelerator (CUDA, ...) or platform plugin is available`` (``get_device``, what a node
    without GPU or driver prints first), ``nvidia-smi not found`` / ``nvidia-smi failed`` /
    ``Failed to get GPU memory capacity from nvidia-smi`` (``utils/common.py``).
``model_missing``
    ``--model-path`` names no local folder and no model in the node's cache: the model config
    load at startup (srt/utils/hf_transformers/config.py ``get_config`` -> transformers
    ``AutoConfig.from_pretrained``) raises before any GPU work.
``install_broken``
    the install is incomplete: a module SGLang imports on its start path is missing
    (``ModuleNotFoundError: No module named``; SGLang's own ``Ignore import error when loading``
    lines for optional model files do not count), a shared library will not load, or FlashInfer's
    kernel JIT cannot build (``Ninja build failed``: no host compiler, no nvcc, or the package's
    sources missing). Both seen on an H200 with a partial 0.5.17 install: the draft worker's
    graph capture imports DeepGEMM, the RMSNorm layer JIT-builds FlashInfer's norm kernel at the
    first start. Re-run the install role; no setting fixes it.
``cuda_graph_capture``
    ``Capture cuda graph failed`` (or an OOM while a capture was in progress). Fix: smaller
    cuda-graph max batch size, lower mem fraction, fewer speculative steps.
``oom_weights``
    ``ValueError: Loaded weights leave no GPU memory for the KV cache under
    --mem-fraction-static=...`` (``mem_cache/kv_cache_configurator.py``
    ``_profile_available_bytes``): after the weights, the runtime slack and (hybrid models) the
    state pool, no budget is left.
``oom_hybrid_state``
    ``Not enough GPU memory for hybrid (mamba/linear-attention) state cache`` or ``Hybrid
    (mamba/linear-attention) state cache is too small to serve any requests``
    (``kv_cache_configurator.py`` ``_handle_max_mamba_cache`` / ``resolve_max_num_reqs``).
``oom_kv_cache``
    ``RuntimeError: Not enough memory. Please try to increase --mem-fraction-static``
    (``model_executor/pool_configurator.py``), or an SWA pool cap that ``leaves no room for the
    full KV pool``: the KV pool gets no tokens.
``cuda_oom``
    a CUDA out-of-memory error that is none of the above (e.g. while loading weights).
``timeout`` and ``unknown`` are decided by the caller (no line says "timeout"; nothing matched).
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

FAILURE_CLASSES = (
    "oom_weights",
    "oom_hybrid_state",
    "oom_kv_cache",
    "cuda_graph_capture",
    "cuda_oom",
    "no_gpu",
    "bad_args",
    "port_in_use",
    "model_missing",
    "install_broken",
    "timeout",
    "unknown",
)

READY_PATTERN = re.compile(r"The server is fired up and ready to roll!")

_I = re.IGNORECASE

# What transformers / huggingface_hub raise from SGLang 0.5.23's model config load
# (srt/utils/hf_transformers/config.py get_config -> HfModelConfigParser.parse ->
# AutoConfig.from_pretrained) when --model-path is neither a local folder nor a cached model:
# an absolute path fails huggingface_hub's repo-id check, an unknown id is not on the Hub, an
# offline node finds nothing in its cache, a folder without config.json has no model.
_MODEL_MISSING = (
    re.compile(r"HFValidationError: Repo id must be in the form"),
    re.compile(r"Incorrect path_or_model_id: "),
    re.compile(r"is not a local folder and is not a valid model identifier"),
    re.compile(r"couldn't find (it|them) in the cached files"),
    re.compile(r"does not appear to have a file named config\.json"),
)

# (class, patterns) in decision order; see the module docstring for why this order.
_RULES = (
    ("bad_args", (
        re.compile(r"usage: sglang serve"),
        re.compile(r"usage: .*launch_server"),
        re.compile(r"error: unrecognized arguments:"),
        re.compile(r"error: ambiguous option:"),
        re.compile(r"error: argument [^:]+: invalid choice:"),
        re.compile(r"error: argument [^:]+: invalid \w+ value:"),
        re.compile(r"error: argument [^:]+: expected (one|at least one) argument"),
        re.compile(r"error: the following arguments are required:"),
        re.compile(r"Unknown speculative algorithm name"),
        re.compile(r"trtllm_mha backend only supports topk = 1"),
        # raised, not the warning SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 logs and goes on from
        re.compile(r"ValueError: Warning: .*context_length \(\d+\) is greater than the derived"),
        # arg_groups/attention_hook.py handle_linear_attn_backend: the ReplaySSM levers'
        # preconditions (topk, decode backend, radix strategy, PD role, exclusivity, ring length).
        re.compile(r"--enable-linear-replayssm(-spec)? requires "),
        re.compile(r"--enable-linear-replayssm-spec with SGLANG_RAGGED_VERIFY_MODE=\S+ requires "),
        re.compile(r"--enable-linear-replayssm-spec and --enable-linear-replayssm are mutually exclusive"),
        re.compile(r"--enable-linear-replayssm-spec is not supported on a PD prefill server"),
        re.compile(r"--enable-linear-replayssm is not supported under PD disaggregation"),
        re.compile(r"--linear-replayssm-cache-len must be >= 1"),
        re.compile(r"--linear-attn-decode-backend flashkda is not supported"),
        re.compile(r"invalid SGLANG_RAGGED_VERIFY_MODE="),
        # arg_groups/mamba_hook.py validate_mamba_no_buffer / validate_mamba_extra_buffer.
        re.compile(r"no_buffer do not support overlap schedule"),
        re.compile(r"no_buffer only supports page_size=1"),
        re.compile(r"no_buffer do not support trtllm_mha attention backend"),
        re.compile(r"extra_buffer is not supported for \S+; use no_buffer"),
    )),
    ("port_in_use", (
        re.compile(r"\[Errno 98\]"),
        re.compile(r"address already in use", _I),
        # utils/network.py wait_port_available's ValueError (its waiting lines are info).
        re.compile(r" at \d+ is not available in \d+ seconds"),
    )),
    ("no_gpu", (
        re.compile(r"CUDA error: invalid device ordinal"),
        re.compile(r"No CUDA GPUs are available"),
        re.compile(r"Found no NVIDIA driver on your system"),
        # srt/utils/common.py get_device, from the argument resolution (serving_hook.py
        # handle_missing_default_values) when torch sees no CUDA device and no other platform.
        re.compile(r"No accelerator \([A-Z, ]+\) or platform plugin is available"),
        # utils/common.py get_nvgpu_memory_capacity, nvidia-smi missing and torch without CUDA.
        re.compile(r"RuntimeError: nvidia-smi not found\. Ensure NVIDIA drivers are installed"),
        # utils/common.py _cuda_mem_fallback, when torch sees no CUDA either.
        re.compile(r"RuntimeError: nvidia-smi failed \(exit code"),
        re.compile(r"RuntimeError: Failed to get GPU memory capacity from nvidia-smi"),
    )),
    ("model_missing", _MODEL_MISSING),
    ("install_broken", (
        re.compile(r"ModuleNotFoundError: No module named "),
        re.compile(r"ImportError: .*cannot open shared object file"),
        re.compile(r"RuntimeError: Ninja build failed"),
    )),
    ("cuda_graph_capture", (
        re.compile(r"Capture cuda graph failed", _I),
    )),
    ("oom_weights", (
        re.compile(r"Loaded weights leave no GPU memory for the KV cache"),
    )),
    ("oom_hybrid_state", (
        re.compile(r"Not enough GPU memory for hybrid \(mamba/linear-attention\) state cache"),
        re.compile(r"Hybrid \(mamba/linear-attention\) state cache is too small to serve any requests"),
    )),
    ("oom_kv_cache", (
        re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static"),
        re.compile(r"RuntimeError: Not enough memory"),
        # model_executor/pool_configurator.py, SWA models (HybridSWA / DSV4 configurators).
        re.compile(r"SWA pool cap \(\d+ tokens, [\d.]+ Gi?B\) leaves no room for the full KV pool"),
    )),
    ("cuda_oom", (
        re.compile(r"OutOfMemoryError: CUDA out of memory"),
        re.compile(r"CUDA error: out of memory"),
        re.compile(r"CUDA out of memory", _I),
        re.compile(r"CUBLAS_STATUS_ALLOC_FAILED", _I),
    )),
)

# A capture in progress: an OOM after this line (and before its "end") is a capture failure even
# when SGLang's own "Capture cuda graph failed" wrapper line did not make it into the journal.
_CAPTURE_BEGIN = re.compile(r"Capture .*cuda graph begin", _I)
_CAPTURE_END = re.compile(r"Capture .*cuda graph end", _I)

# Lines that mean "this server process is going down", though they do not name a cause.
_FATAL_MARKERS = (
    re.compile(r"Received sigquit from a child process"),
    re.compile(r"scheduler died during initialization"),
    re.compile(r"Scheduler hit an exception"),
    re.compile(r"Initialization failed\. warmup error"),
)

HINTS = {
    "oom_weights": "Weights (target + draft) and the runtime slack leave no KV budget: raise "
                   "mem_fraction_static, use more tensor parallelism; on a hybrid model without "
                   "the radix cache the state pool is max_running_requests x (1 + draft tokens) "
                   "states, so lower max_running_requests or the speculative steps.",
    "oom_hybrid_state": "The hybrid (linear-attention) state pool does not fit: lower "
                        "max_running_requests or the speculative steps (draft tokens), raise "
                        "mem_fraction_static, or halve the state with --mamba-ssm-dtype bfloat16.",
    "oom_kv_cache": "The KV pool gets no tokens: raise mem_fraction_static or use more tensor "
                    "parallelism (an SWA model: lower max_running_requests).",
    "cuda_graph_capture": "CUDA graph capture failed: lower the cuda-graph max batch size "
                          "(cuda_graph_max_bs_decode) or max_running_requests, or lower "
                          "mem_fraction_static to leave capture headroom.",
    "cuda_oom": "CUDA ran out of memory: check that no other process holds the GPUs (gpu_reset), "
                "then lower mem_fraction_static or use more tensor parallelism.",
    "no_gpu": "SGLang found no usable GPU, or fewer than it needs: check that the NVIDIA driver is "
              "installed and answers (nvidia-smi; R580+ for CUDA 13), CUDA_VISIBLE_DEVICES, and that "
              "tp_size does not exceed the GPU count.",
    "bad_args": "SGLang rejected its command line: check the rendered ExecStart against the "
                "pinned release's flags (extra args, choices, flag names).",
    "port_in_use": "The HTTP port is already taken: stop the other listener or change the port.",
    "model_missing": "SGLang found no model at sglang_service_model_path: copy the weights there "
                     "(a folder with config.json) or put the model in the service user's Hugging "
                     "Face cache (nodes are offline), or fix the path.",
    "install_broken": "The SGLang install on the node is incomplete (a module it imports is "
                      "missing, a library does not load, or FlashInfer's kernel JIT cannot build): "
                      "re-run the install role (playbooks/install.yml), check the host C++ "
                      "compiler (g++) and that the unit's CUDA_HOME has nvcc.",
    "timeout": "The server did not become ready in time: raise the wait timeout, or look for a "
               "hang (health answers but no tokens are generated).",
    "unknown": "No known failure pattern in the journal: read the journal tail.",
}


def _match_class(line):
    for name, patterns in _RULES:
        for pattern in patterns:
            if pattern.search(line):
                return name
    return None


def classify(lines):
    """Return ``(failure_class, evidence_line)`` for journal ``lines`` (oldest first).

    ``failure_class`` is one of the matching classes above, or ``"unknown"`` with
    ``evidence_line`` None when no line matches.
    """
    found = {}
    capturing = False
    for line in lines:
        if _CAPTURE_BEGIN.search(line):
            capturing = True
        elif _CAPTURE_END.search(line):
            capturing = False
        name = _match_class(line)
        if name is None:
            continue
        if name == "cuda_oom" and capturing:
            name = "cuda_graph_capture"
        found.setdefault(name, line)
    for name, _patterns in _RULES:
        if name in found:
            return name, found[name]
    return "unknown", None


def is_fatal(lines):
    """True when ``lines`` show the server is going down (a classified error or a crash marker)."""
    for line in lines:
        if _match_class(line) is not None:
            return True
        for pattern in _FATAL_MARKERS:
            if pattern.search(line):
                return True
    return False


def saw_ready(lines):
    """True when SGLang logged its readiness line."""
    return any(READY_PATTERN.search(line) for line in lines)


def tail(lines, count):
    """The last ``count`` lines; none when ``count`` <= 0."""
    if count <= 0:
        return []
    return list(lines[-count:])


def hint(failure_class):
    """What to fix, in one sentence, for a failure class."""
    return HINTS.get(failure_class, HINTS["unknown"])
