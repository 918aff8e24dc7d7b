# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

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

``pool_facts`` reads the hybrid state pool a launch built (its size, the per-slot state, the KV
pool and the running-request cap) from the same journal: the lines 0.5.23 logs while it sizes and
builds its pools (see the function).
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


# ----------------------------------------------------------------------------- pool facts
# SGLang 0.5.23's lines about the pools of a launch (GB = 1 << 30 bytes, as the release divides):
# srt/mem_cache/memory_pool.py MambaPool.__init__ (the speculative variant adds the two
# intermediate sizes; the GDN ReplaySSM ring line follows it under --enable-linear-replayssm-spec),
# MHATokenToKVPool._finalize_allocation_log (one line per pool: the target's and, with
# EAGLE/MTP, the draft worker's, both of #tokens tokens; "dtype: ..," is absent from the sim),
# srt/mem_cache/kv_cache_configurator.py resolve_max_num_reqs (the two cap warnings) and
# srt/managers/scheduler.py (the rank-0 summary line). tests/contract checks them against the wheel.
_NUM = r"(\d+(?:\.\d+)?)"
_POOL_BANNER = re.compile(r"server_args=")
_RANK_TAG = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d([^\]]*)\]")
_MAMBA = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: "
                    + _NUM + r"GB, ssm_state size: " + _NUM + r"GB")
_MAMBA_SPEC = re.compile(r"intermediate_ssm_state_cache size: " + _NUM + r"GB "
                         r"intermediate_conv_window_cache size: " + _NUM + r"GB")
_RING = re.compile(r"GDN ReplaySSM ring buffers allocated \(record_len=\d+, fold=\w+\): (.*)")
_RING_PART = re.compile(r"\b(d|k|g|rawv|rawk|beta)=" + _NUM + r"GB")
_KV = re.compile(r"KV Cache is allocated\. (?:dtype: [^,]+, )?#tokens: (\d+), "
                 r"(?:K size: " + _NUM + r" GB, V size: " + _NUM + r" GB|KV size: " + _NUM + r" GB)")
_SUMMARY = re.compile(r"max_total_num_tokens=(\d+), .*max_running_requests=(\d+), context_len=")
_WARN_MAMBA_CAP = re.compile(r"max_running_requests is capped to (-?\d+) by the mamba state cache "
                             r"\(max_mamba_cache_size=(\d+), (\d+) state slots per request\)")
_WARN_KV_CAP = re.compile(r"max_running_requests was reduced from the requested (\d+) to (\d+) "
                          r"\(per dp worker\) due to the available KV cache capacity")
# The rounding of the printed sizes: half a unit of the last printed digit per figure.
POOL_GB_HALF_UNIT = 0.005
RING_GB_HALF_UNIT = 0.0005


def _rank_key(line):
    """The rank part of SGLang's ``[date time TP0]`` prefix ('' without one)."""
    found = _RANK_TAG.search(line)
    return found.group(1).strip() if found else ""


def pool_facts(lines):
    """The hybrid state pool of the last launch in ``lines`` (journal lines, oldest first).

    The launch is what follows the last ``server_args=`` banner (the first line a start logs),
    or all lines when there is none. Under tensor parallelism every rank logs its own (equal)
    pools; the facts are TP0's (or the first rank's that logged the state pool). Within that
    rank the last state-pool line wins, and the KV sizes are summed over its KV pool lines of
    the same token count logged after that state-pool line (the target's and the draft's pool:
    0.5.23's per-token budget covers both).

    Returns {} when the launch logged no state pool (a dense model, or a start that died before
    the pools were built); else the dict of the project's "Pool facts" shape: ``hybrid`` (True),
    ``max_mamba_cache_size``, ``conv_gb``, ``ssm_gb``, ``intermediate_ssm_gb`` and
    ``conv_window_gb`` (None without speculation), ``replayssm_ring_gb`` (the sum of the ring
    buffers, None without the ring), ``kv_tokens``, ``kv_gb`` (K + V of every KV pool), the
    effective ``max_running_requests`` (the scheduler's summary, else a cap warning's),
    ``slots_per_request`` (from the mamba cap warning, else None) and ``capped_by`` ("mamba",
    "kv" or None). ``kv_gb_figures`` counts the printed figures summed into ``kv_gb`` (each
    rounded to 2 decimals) and ``replayssm_ring_figures`` those summed into the ring (3 decimals),
    for the rounding bound of plugin_utils/mtp_state_pool.py.
    """
    lines = list(lines)
    start = 0
    for i, line in enumerate(lines):
        if _POOL_BANNER.search(line):
            start = i + 1
    launch = lines[start:]
    ranks = [_rank_key(line) for line in launch if _MAMBA.search(line)]
    if not ranks:
        return {}
    rank = next((r for r in ranks if re.search(r"\bTP0\b", r)), ranks[0])
    facts = {"hybrid": True, "max_mamba_cache_size": None, "conv_gb": None, "ssm_gb": None,
             "intermediate_ssm_gb": None, "conv_window_gb": None, "replayssm_ring_gb": None,
             "replayssm_ring_figures": 0, "kv_tokens": None, "kv_gb": None, "kv_gb_figures": 0,
             "max_running_requests": None,
             "slots_per_request": None, "capped_by": None}
    at = [i for i, line in enumerate(launch) if _MAMBA.search(line) and _rank_key(line) == rank]
    # Without a banner several launches may be in the lines: the sizing warnings of the last one
    # come after the state-pool line before it (they precede its own, as the release sizes first).
    earliest = at[-2] + 1 if len(at) > 1 else 0
    summary_reqs = None
    warned_reqs = None
    for index in range(earliest, len(launch)):
        line = launch[index]
        mamba_cap = _WARN_MAMBA_CAP.search(line)
        kv_cap = _WARN_KV_CAP.search(line)
        summary = _SUMMARY.search(line)
        if summary and index < at[-1]:
            # the end of the launch before: what it warned is not this launch's
            warned_reqs = None
            facts["slots_per_request"] = facts["capped_by"] = None
        elif mamba_cap:
            warned_reqs = int(mamba_cap.group(1))
            facts["slots_per_request"] = int(mamba_cap.group(3))
            facts["capped_by"] = "mamba"
        elif kv_cap:
            warned_reqs = int(kv_cap.group(2))
            facts["capped_by"] = "kv"
        elif summary:
            summary_reqs = int(summary.group(2))
    for line in launch[at[-1]:]:
        if _rank_key(line) != rank:
            continue
        found = _MAMBA.search(line)
        if found:
            spec = _MAMBA_SPEC.search(line)
            facts.update({
                "max_mamba_cache_size": int(found.group(1)), "conv_gb": float(found.group(2)),
                "ssm_gb": float(found.group(3)),
                "intermediate_ssm_gb": float(spec.group(1)) if spec else None,
                "conv_window_gb": float(spec.group(2)) if spec else None})
            continue
        ring = _RING.search(line)
        if ring:
            parts = _RING_PART.findall(ring.group(1))
            facts["replayssm_ring_gb"] = round(sum(float(v) for _k, v in parts), 6)
            facts["replayssm_ring_figures"] = len(parts)
            continue
        kv = _KV.search(line)
        if kv and facts["kv_tokens"] in (None, int(kv.group(1))):
            sizes = [float(v) for v in kv.groups()[1:] if v is not None]
            facts["kv_tokens"] = int(kv.group(1))
            facts["kv_gb"] = round((facts["kv_gb"] or 0.0) + sum(sizes), 6)
            facts["kv_gb_figures"] += len(sizes)
    facts["max_running_requests"] = summary_reqs if summary_reqs is not None else warned_reqs
    return facts
