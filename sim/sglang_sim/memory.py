"""Per-GPU memory model of one SGLang 0.5.23 TP rank (pure functions, MiB unless noted).

Each step follows the release's own code (paths relative to ``sglang/srt/``):

1. ``distributed/bootstrap.py`` ``measure_pre_model_load_memory``: the free memory before the
   weights load (``pre``), after the CUDA context and NCCL buffers (sim constants: the real
   figures are measured on the device, not computed);
2. the weights load (target split over TP, then the draft/MTP head); a shard that does not fit
   is torch's ``CUDA out of memory``;
3. ``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``: the pool budget is
   ``free - pre*(1-mem_fraction_static) - multimodal reservation``; for a hybrid
   (linear-attention) model ``_handle_max_mamba_cache`` first takes the state pool, solved
   jointly with the draft-token count (or sized from --max-running-requests when the radix cache
   is off; under --enable-linear-replayssm-spec without intermediate states, the ReplaySSM ring
   charged as fixed scratch), and raises ``Not enough GPU memory for hybrid ...`` when no state
   slot fits; a
   budget that is gone raises ``ValueError: Loaded weights leave no GPU memory for the KV cache``;
4. ``model_executor/pool_configurator.py`` ``DefaultPoolConfigurator.calculate_pool_sizes``: KV
   tokens = budget // bytes per token (full-attention layers + the draft layer), page-aligned;
   ``MemoryPoolConfig.__post_init__`` raises ``Not enough memory. Please try to increase
   --mem-fraction-static.`` at zero tokens;
5. ``kv_cache_configurator.py`` ``resolve_max_num_reqs``: the request pool (the flag, 48 with
   speculation, else an estimate from the token count), capped by the KV tokens and by the
   hybrid state pool, with 0.5.23's warnings;
6. ``model_executor/runner/base_cuda_graph_runner.py`` ``get_batch_sizes_to_capture``: captured
   decode batch sizes are clamped to the request pool; capture memory comes out of the headroom
   the fraction left (the per-graph cost is a sim constant: 0.5.23 measures it, it has no formula).

There is no speculative-buffer charge against the KV budget: 0.5.23 has none.
"""

import math

from sglang_sim import adaptive

MIB = 1024 * 1024
GIB = 1024 * MIB
# CUDA context + cuBLAS/NCCL workspaces that a rank holds before loading weights (measured
# figures of a real node, not a formula of the release).
CONTEXT_MIB = 560
NCCL_MIB_TP = 420  # extra for tp > 1 (NCCL buffers, custom all-reduce)
# Graph capture memory: fixed part + per (batch slot x tokens per slot, incl. draft passes).
# Sim calibration: 0.5.23 measures capture memory on the device.
GRAPH_BASE_MIB = 150
GRAPH_MIB_PER_SLOT_TOKEN = 0.25
# Capture needs this much slack on top of the graphs themselves.
GRAPH_SAFETY_MIB = 512

# kv_cache_configurator.py: MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO (state slots per running
# request with the radix cache), plus mem_cache/allocation_sizing.py get_mamba_tracking_slots
# under the extra_buffer strategy (2 with the overlap scheduler, 1 without or when lazy) that
# arg_groups/overrides.py _mamba_radix_cache_resolution picks for Qwen3.5/Qwen3-Next.
MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3
MAMBA_EXTRA_BUFFER_TRACKING_SLOTS = 2
# arg_groups/overrides.py: the architectures whose radix cache is a mamba radix cache, and those
# of them that support the extra_buffer strategy (0.5.23 lists the text-only Qwen3.5 entries too;
# 0.5.17 did not, so a Qwen3_5MoeForCausalLM checkpoint got 3 slots per request there).
MAMBA_RADIX_CACHE_ARCHS = ("Qwen3NextForCausalLM", "Qwen3_5MoeForConditionalGeneration",
                           "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM",
                           "Qwen3_5ForCausalLM")
MAMBA_EXTRA_BUFFER_ARCHS = MAMBA_RADIX_CACHE_ARCHS
# arg_groups/fields/exec_.py linear_replayssm_cache_len default: the ReplaySSM ring length L.
LINEAR_REPLAYSSM_CACHE_LEN = 16
# configs/mamba_utils.py mamba2_state_dtype: conv states in bf16 (SGLANG_MAMBA_CONV_DTYPE).
CONV_DTYPE_BYTES = 2
# arg_groups/fields/schedule.py mamba_full_memory_ratio fallback.
MAMBA_FULL_MEMORY_RATIO = 0.9
# environ.py SGLANG_VLM_CACHE_SIZE_MB: kv_cache_configurator.py mm_runtime_reservation_gb
# reserves it out of the KV budget for a multimodal model (cpu feature transport).
VLM_CACHE_SIZE_MB = 100
# The request-pool estimate of resolve_max_num_reqs.
REQ_POOL_ESTIMATE_MIN = 2048
REQ_POOL_ESTIMATE_MAX = 4096

KV_DTYPE_BYTES = {
    "auto": 2, "bf16": 2, "bfloat16": 2, "fp8_e5m2": 1, "fp8_e4m3": 1, "mxfp8": 1,
    "nvfp4": 0.5, "fp4_mx_block16": 0.5,
}
SSM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# 0.5.23's texts (the contract test checks them against the wheel).
MSG_WEIGHTS_LEAVE_NO_MEMORY = (
    "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={frac}. "
    "Raise --mem-fraction-static above {suggested:.3f} (minimum viable = 1 - available/pre = "
    "{minimum:.4f}). If using speculative decoding, draft weights are now counted.")
MSG_HYBRID_STATE = (
    "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
    "max_mamba_cache_size={size} (total_rest_memory={rest:.2f} GB, mamba_cache_per_req="
    "{per_req:.2f} MB). Try: (1) reduce --max-running-requests, (2) increase "
    "--mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or (4) use GPUs with "
    "more memory.")
MSG_HYBRID_TOO_SMALL = (
    "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
    "max_mamba_cache_size={size}, mamba_ratio={ratio}, resulting max_num_reqs={reqs}. Try: "
    "(1) reduce --max-running-requests, (2) increase --mem-fraction-static, or (3) use GPUs "
    "with more memory.")
MSG_NOT_ENOUGH_MEMORY = "Not enough memory. Please try to increase --mem-fraction-static."
# memory_pool.py MambaPool.__init__ info lines (the speculative variant adds the tail).
MSG_MAMBA_ALLOCATED = ("Mamba Cache is allocated. max_mamba_cache_size: {size}, conv_state size: "
                       "{conv:.2f}GB, ssm_state size: {ssm:.2f}GB ")
MSG_MAMBA_SPEC_TAIL = ("intermediate_ssm_state_cache size: {inter:.2f}GB "
                       "intermediate_conv_window_cache size: {window:.2f}GB ")
MSG_REPLAYSSM_RING = ("GDN ReplaySSM ring buffers allocated (record_len={record}, fold={fold}): "
                      "d={d:.3f}GB, k={k:.3f}GB, g={g:.3f}GB ")
MSG_REPLAYSSM_RING_LOW = "rawv={rawv:.3f}GB, rawk={rawk:.3f}GB, "
# Python's own text for int // None in kv_cache_configurator.py _handle_max_mamba_cache.
MSG_REPLAYSSM_NO_MRR = "unsupported operand type(s) for //: 'NoneType' and 'int'"
WARN_MAMBA_CAP = (
    "max_running_requests is capped to {cap} by the mamba state cache (max_mamba_cache_size="
    "{size}, {ratio} state slots per request). To raise it: increase --mamba-full-memory-ratio "
    "or --max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype bfloat16.")
WARN_KV_CAP = (
    "max_running_requests was reduced from the requested {requested} to {reqs} (per dp worker) "
    "due to the available KV cache capacity.")
WARN_MAX_TOTAL_TOKENS = (
    "max_total_tokens={limit} is larger than the profiled value {tokens}. Use the profiled value "
    "instead.")


class OOMError(Exception):
    """Startup failure. kind: 'weights' / 'pool' / 'graph' (torch OOM), 'weights_budget'
    (ValueError), 'hybrid_state' / 'hybrid_reqs' / 'kv' (RuntimeError), 'replayssm_mrr'
    (TypeError: the ReplaySSM ring sized from an unset --max-running-requests)."""

    EXC_TYPES = {"weights_budget": "ValueError", "hybrid_state": "RuntimeError",
                 "hybrid_reqs": "RuntimeError", "kv": "RuntimeError", "replayssm_mrr": "TypeError"}

    def __init__(self, kind, message, plan):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.plan = plan

    @property
    def exc_type(self):
        return self.EXC_TYPES.get(self.kind, "torch.OutOfMemoryError")


def weights_mib(model, tp_size, speculative, draft_model=None):
    """(target, draft) weight MiB per rank."""
    target = model["params"] * model["dtype_bytes"] / tp_size / MIB
    draft = 0.0
    if speculative:
        src = draft_model or model
        draft = src["draft_params"] * src["dtype_bytes"] / tp_size / MIB
    return target, draft


def kv_bytes_per_token(model, tp_size, kv_cache_dtype, speculative, draft_model=None):
    """KV bytes per token per rank: pool_configurator.py DefaultPoolConfigurator (full-attention
    layers of a hybrid model only). EAGLE/STANDALONE add the draft's layers at the same cell size:
    the draft's ``draft_kv_layers`` (spec_aux_hidden_state.py eagle_draft_num_layers:
    num_nextn_predict_layers, else every layer of a draft checkpoint), 1 for a catalog entry,
    whose draft is its MTP head."""
    heads = max(1, model["kv_heads"] // tp_size)
    draft_layers = (draft_model or model).get("draft_kv_layers", 1) if speculative else 0
    layers = model["full_attn_layers"] + draft_layers
    return layers * heads * model["head_dim"] * 2 * KV_DTYPE_BYTES[kv_cache_dtype]


def mamba_cache_per_req(model, tp_size, ssm_dtype=None):
    """(conv, temporal) bytes of linear-attention state per request per rank: configs/mamba_utils.py
    Mamba2CacheParams.mamba_cache_per_req with the GDN shapes of configs/qwen3_next.py
    (temporal: value heads/tp x v dim x k dim in the SSM dtype, fp32 by default; conv:
    (2 x key dim + value dim)/tp x (kernel - 1) in bf16)."""
    if not model.get("hybrid"):
        return 0, 0
    tp = tp_size
    temporal = (model["linear_num_value_heads"] // tp) * model["linear_value_head_dim"] \
        * model["linear_key_head_dim"]
    key_dim = model["linear_key_head_dim"] * model["linear_num_key_heads"]
    value_dim = model["linear_value_head_dim"] * model["linear_num_value_heads"]
    conv = (2 * key_dim + value_dim) // tp * (model["linear_conv_kernel_dim"] - 1)
    ssm_bytes = SSM_DTYPE_BYTES[ssm_dtype or "float32"]
    return conv * 2 * model["linear_attn_layers"], temporal * ssm_bytes * model["linear_attn_layers"]


def gdn_shapes(model, tp_size):
    """Per-rank GDN state shapes of configs/qwen3_next.py mamba2_cache_params
    (Mamba2StateShape.create): temporal (HV, V, K) = (value heads/tp, v dim, k dim), the key
    heads per rank (num_k_heads_per_tp) and the conv rows ((2 x key dim + value dim)/tp)."""
    hv = model["linear_num_value_heads"] // tp_size
    hk = model["linear_num_key_heads"] // tp_size
    conv_dim = (2 * model["linear_key_head_dim"] * model["linear_num_key_heads"]
                + model["linear_value_head_dim"] * model["linear_num_value_heads"]) // tp_size
    return hv, hk, model["linear_value_head_dim"], model["linear_key_head_dim"], conv_dim


def mamba_radix_cache_strategy(model, args):
    """arg_groups/overrides.py _mamba_radix_cache_resolution: an architecture with a mamba radix
    cache, radix cache on, strategy auto -> extra_buffer when the overlap scheduler is on (or
    pages > 1) and the architecture supports it on the triton linear-attention backend
    (supports_mamba_cache_extra_buffer), else no_buffer (which also turns the overlap scheduler
    off). Returns (strategy, disable_overlap_schedule)."""
    strategy = args.get("mamba_radix_cache_strategy") or "auto"
    overlap_off = bool(args.get("disable_overlap_schedule"))
    arch = (model.get("architectures") or [""])[0]
    if not model.get("hybrid") or arch not in MAMBA_RADIX_CACHE_ARCHS or args.get("disable_radix_cache"):
        return strategy, overlap_off
    if strategy == "auto":
        page = args.get("page_size")
        wants = (not overlap_off) or (page is not None and page > 1)
        if wants and arch in MAMBA_EXTRA_BUFFER_ARCHS \
                and (args.get("linear_attn_backend") or "triton") == "triton":
            return "extra_buffer", overlap_off
        return "no_buffer", True
    return strategy, overlap_off


def mamba_tracking_slots(extra_buffer, overlap, lazy=False):
    """mem_cache/allocation_sizing.py get_mamba_tracking_slots."""
    if not extra_buffer:
        return 0
    if lazy:
        return 1
    return MAMBA_EXTRA_BUFFER_TRACKING_SLOTS if overlap else 1


def mamba_ratio(args):
    """kv_cache_configurator.py _calculate_mamba_ratio: state slots per running request. 1
    without the radix cache; else 3, plus the extra_buffer tracking slots (2 with the overlap
    scheduler, 1 without or lazy): 5 for Qwen3.5/Qwen3-Next on 0.5.23's defaults, 3 under
    no_buffer. (SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK, off by default, is not modelled.)"""
    if args.get("disable_radix_cache"):
        return 1
    strategy = args.get("mamba_radix_cache_strategy") or "auto"
    extra = strategy in ("extra_buffer", "extra_buffer_lazy")
    return MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO + mamba_tracking_slots(
        extra, not args.get("disable_overlap_schedule"), strategy == "extra_buffer_lazy")


def replayssm_active(model, args):
    """kv_cache_configurator.py _handle_max_mamba_cache: --enable-linear-replayssm-spec acts on a
    GDN (or KDA) hybrid only; on any other model the flag changes nothing."""
    return bool(args.get("enable_linear_replayssm_spec")) and bool(model.get("hybrid"))


def replayssm_ring_bytes_per_req(model, tp_size, record_len):
    """configs/mamba_utils.py BaseLinearStateParams.replayssm_ring_bytes_per_req, GDN: per layer
    the compact d (HV x L x V) and normalised k (H x L x K) in the conv dtype, the scalar gate g
    (HV x L, fp32), and, the conv dtype being bf16, the low parts of d and k again."""
    hv, hk, v_dim, k_dim, _conv = gdn_shapes(model, tp_size)
    c = CONV_DTYPE_BYTES
    d, k = hv * record_len * v_dim * c, hk * record_len * k_dim * c
    per_layer = d + k + hv * record_len * 4
    if c != 4:
        per_layer += d + k
    return per_layer * model["linear_attn_layers"]


def capture_sizes(decode_bs, req_pool_size):
    """base_cuda_graph_runner.py get_batch_sizes_to_capture: the configured decode batch sizes
    clamped to the request pool (which is captured itself when the list goes beyond it)."""
    bs = list(decode_bs)
    if bs and max(bs) > req_pool_size:
        bs.append(req_pool_size)
    return sorted(set(b for b in bs if b <= req_pool_size))


def _oom_text(tried_mib, index, total_mib, free_mib, in_use_mib=None):
    msg = ("CUDA out of memory. Tried to allocate %.2f GiB. GPU %d has a total capacity of "
           "%.2f GiB of which %.2f GiB is free."
           % (tried_mib / 1024, index, total_mib / 1024, max(free_mib, 0) / 1024))
    if in_use_mib is not None:
        msg += (" Including non-PyTorch memory, this process has %.2f GiB memory in use."
                % (in_use_mib / 1024))
    return msg


def _handle_max_mamba_cache(p, args, model, rest_gb, per_req, spec, draft_tokens, mrr):
    """kv_cache_configurator.py _handle_max_mamba_cache (tp only, no PP/DP, GDN).

    --enable-linear-replayssm-spec (replayssm_active): no intermediate state is reserved
    (reserves_spec_state is False), the auto size is solved like the non-speculative one, and the
    GDN ring is fixed request scratch: replayssm_ring_bytes_per_req(L) x (max_running_requests + 1),
    charged whatever the draft depth.

    Returns the budget left after the state pool, in GB; sets p["max_mamba_cache_size"]."""
    ratio = mamba_ratio(args)
    replay = replayssm_active(model, args)
    fixed = 0
    if replay:
        ring = replayssm_ring_bytes_per_req(model, args["tp_size"], args.get(
            "linear_replayssm_cache_len") or LINEAR_REPLAYSSM_CACHE_LEN)
        p["replayssm_ring_per_req_mib"] = ring / MIB
        if mrr is None:
            # replay_req_slots = max(1, get_schedule().max_running_requests // attn_dp_size) + 1
            # with no request cap set (no speculation, no --max-running-requests).
            raise OOMError("replayssm_mrr", MSG_REPLAYSSM_NO_MRR, p)
        fixed = ring * (max(1, mrr) + 1)
    p["replayssm_fixed_mib"] = fixed / MIB
    reserves_spec_state = spec and not replay
    if args.get("max_mamba_cache_size") is not None:
        size = args["max_mamba_cache_size"]
        if reserves_spec_state:
            capped = min(max(1, mrr), size // ratio)
            rest_gb -= per_req * (capped + 1) * draft_tokens / GIB
    elif args.get("disable_radix_cache") and mrr is not None:
        size = max(1, mrr)
        if reserves_spec_state:
            rest_gb -= per_req * (size + 1) * draft_tokens / GIB
    else:
        r = args.get("mamba_full_memory_ratio") or MAMBA_FULL_MEMORY_RATIO
        budget_bytes = rest_gb * r / (1 + r) * GIB
        if reserves_spec_state:
            d = draft_tokens
            # Joint solve: main states + per-draft-token intermediate states = the budget.
            size = int((budget_bytes - per_req * (1 + d)) // (per_req * (1 + d / ratio)))
            capped = min(max(1, mrr), size // ratio)
            rest_gb -= per_req * (capped + 1) * d / GIB
        else:
            size = int((budget_bytes - fixed - per_req) // per_req)
    p["max_mamba_cache_size"] = size
    if size <= 0:
        raise OOMError("hybrid_state", MSG_HYBRID_STATE.format(
            size=size, rest=rest_gb, per_req=per_req / MIB), p)
    # +1: each pool's padding slot.
    return rest_gb - ((size + 1) * per_req + fixed) / GIB


def mamba_log_lines(model, args, p):
    """The lines memory_pool.py MambaPool.__init__ logs once the pools exist, sized as it
    allocates them: the persistent states for max_mamba_cache_size + 1 slots, and, with
    speculation, the per-draft-token scratch for the request pool + 1 (spec_state_size =
    max_running_requests after the cap): intermediate SSM states (none under
    --enable-linear-replayssm-spec) and the conv windows (deduplicated, D + K - 2 columns, for a
    linear chain; D x (K - 1) for a tree); the ReplaySSM ring (GDN: record_len = L, fold False)
    for the same slots."""
    if not p.get("max_mamba_cache_size"):
        return []
    gb = 1024.0  # MiB per GB as the release prints it (bytes / (1 << 30))
    head = MSG_MAMBA_ALLOCATED.format(size=p["max_mamba_cache_size"], conv=p["mamba_conv_mib"] / gb,
                                      ssm=p["mamba_ssm_mib"] / gb)
    tp = args["tp_size"]
    hv, hk, v_dim, k_dim, conv_dim = gdn_shapes(model, tp)
    layers = model["linear_attn_layers"]
    slots = p["max_running_requests"] + 1
    replay = replayssm_active(model, args)
    lines = []
    if p["speculative"]:
        d = p.get("pool_draft_tokens") or p["draft_tokens"]
        ssm_b = SSM_DTYPE_BYTES[args.get("mamba_ssm_dtype") or "float32"]
        inter = 0 if replay else layers * slots * d * hv * v_dim * k_dim * ssm_b
        width = model["linear_conv_kernel_dim"] - 1
        # memory_pool.py conv_window_dedup_enabled: one shared (D + K - 2)-column window on CUDA
        # for a linear chain; a tree (topk > 1) keeps D dense (K - 1)-column windows.
        cols = d + width - 1 if (args.get("speculative_eagle_topk") or 1) <= 1 else d * width
        window = layers * slots * conv_dim * cols * CONV_DTYPE_BYTES
        p["mamba_intermediate_ssm_mib"] = inter / MIB
        p["mamba_conv_window_mib"] = window / MIB
        lines.append(head + MSG_MAMBA_SPEC_TAIL.format(inter=inter / GIB, window=window / GIB))
    else:
        lines.append(head)
    if replay:
        record = args.get("linear_replayssm_cache_len") or LINEAR_REPLAYSSM_CACHE_LEN
        c = CONV_DTYPE_BYTES
        ring_d = layers * slots * hv * record * v_dim * c
        ring_k = layers * slots * hk * record * k_dim * c
        ring_g = layers * slots * hv * record * 4
        line = MSG_REPLAYSSM_RING.format(record=record, fold=False, d=ring_d / GIB, k=ring_k / GIB,
                                         g=ring_g / GIB)
        if c != 4:
            line += MSG_REPLAYSSM_RING_LOW.format(rawv=ring_d / GIB, rawk=ring_k / GIB)
        lines.append(line)
    return lines


def resolve_max_num_reqs(p, args, tokens, context_len, hybrid):
    """kv_cache_configurator.py resolve_max_num_reqs; returns (max_num_reqs, warnings)."""
    warnings = []
    estimated = int(tokens / float(context_len) * 512)
    estimated = max(min(estimated, REQ_POOL_ESTIMATE_MAX), REQ_POOL_ESTIMATE_MIN)
    requested = args.get("max_running_requests")
    if requested is not None:
        requested = max(1, requested)
        reqs = min(requested, tokens // 2)
    else:
        reqs = min(estimated, tokens // 2)
    capped_by_mamba = False
    if hybrid:
        ratio = mamba_ratio(args)
        cap = p["max_mamba_cache_size"] // ratio
        if cap < reqs:
            capped_by_mamba = True
            warnings.append(WARN_MAMBA_CAP.format(cap=cap, size=p["max_mamba_cache_size"],
                                                  ratio=ratio))
        reqs = min(reqs, cap)
        if reqs <= 0:
            raise OOMError("hybrid_reqs", MSG_HYBRID_TOO_SMALL.format(
                size=p["max_mamba_cache_size"], ratio=ratio, reqs=reqs), p)
    if requested is not None and reqs < requested and not capped_by_mamba:
        warnings.append(WARN_KV_CAP.format(requested=requested, reqs=reqs))
    return reqs, warnings


def graph_state_mib(capture_bs, per_slot_tokens):
    """Capture memory of one set of decode graphs (sim calibration: 0.5.23 measures it)."""
    if not capture_bs:
        return 0.0
    return GRAPH_BASE_MIB + GRAPH_MIB_PER_SLOT_TOKEN * max(capture_bs) * per_slot_tokens


def adaptive_graph_states(args, initial_steps, startup_bs, reqs):
    """The runtime states adaptive builds after the startup graphs (adaptive.runtime_states,
    eagle_worker_v2.py build_adaptive_runtime_state): per other candidate step its own draft,
    verify and draft-extend graphs at steps + 1 draft tokens, over the startup list when no
    --cuda-graph-bs-decode was given, else over the pruned list clamped to the request pool
    (get_batch_sizes_to_capture), none when the pruned list is empty (captured eagerly)."""
    out = []
    for step, bs, startup in adaptive.runtime_states(
            initial_steps, args.get("speculative_adaptive_config"), args.get("cuda_graph_bs_decode")):
        if startup:
            continue
        captured = list(startup_bs) if bs is None else (capture_sizes(bs, reqs) if bs else [])
        out.append({"steps": step, "capture_bs": captured,
                    "graph_mib": graph_state_mib(captured, 2 * step + 1)})
    return out


def plan(gpu, model, args, draft_model=None, other_used_mib=0.0, capture_bs=None):
    """Memory plan of one rank. Returns a dict; raises OOMError when init would fail.

    gpu: dict with memory_mib and reserved_mib; args: resolved server args;
    other_used_mib: memory other processes (e.g. orphaned ranks) already hold on it;
    capture_bs: the configured decode capture batch sizes (cuda_graph_hook.py).
    """
    if model.get("hybrid") and (args.get("mamba_radix_cache_strategy") or "auto") == "auto":
        # Args not resolved by server_args.resolve: resolve the strategy as 0.5.23 would.
        strategy, overlap_off = mamba_radix_cache_strategy(model, args)
        args = dict(args, mamba_radix_cache_strategy=strategy, disable_overlap_schedule=overlap_off)
    total = gpu["memory_mib"]
    tp = args["tp_size"]
    spec = args.get("speculative_algorithm") is not None
    steps = args.get("speculative_num_steps") or 0
    draft_tokens = args.get("speculative_num_draft_tokens") or 1
    frac = args["mem_fraction_static"]
    graphs_on = not args.get("disable_cuda_graph")
    mrr = args.get("max_running_requests")
    hybrid = bool(model.get("hybrid"))
    context_len = args.get("context_length") or model["context_length"]
    if capture_bs is None:
        capture_bs = [args["cuda_graph_max_bs_decode"]]
    candidates = args.get("_adaptive_candidate_steps") if spec and args.get("speculative_adaptive") else None
    # spec_info.py resolve_max_speculative_num_draft_tokens: under adaptive the state pool (and
    # its per-draft-token scratch) is sized for the deepest candidate, whatever step is in force.
    pool_draft_tokens = adaptive.max_draft_tokens(candidates) if candidates else draft_tokens

    p = {"total_mib": total, "mem_fraction_static": frac, "speculative": spec,
         "draft_tokens": draft_tokens, "pool_draft_tokens": pool_draft_tokens,
         "adaptive_candidate_steps": candidates, "adaptive_states": [],
         "cuda_graph_max_bs": args["cuda_graph_max_bs_decode"],
         "warnings": [], "mamba_mib": 0.0, "mamba_intermediate_mib": 0.0,
         "mamba_conv_mib": 0.0, "mamba_ssm_mib": 0.0, "replayssm_fixed_mib": 0.0, "mamba_log": [],
         "max_mamba_cache_size": 0, "kv_mib": 0.0, "max_total_num_tokens": 0,
         "graph_mib": 0.0, "max_running_requests": 0, "capture_bs": []}
    p["context_mib"] = CONTEXT_MIB + (NCCL_MIB_TP if tp > 1 else 0)
    p["other_used_mib"] = other_used_mib
    # bootstrap.py measure_pre_model_load_memory: free memory before the weights.
    pre = total - gpu["reserved_mib"] - other_used_mib - p["context_mib"]
    p["avail_begin_mib"] = pre
    target, draft = weights_mib(model, tp, spec, draft_model)
    p["weights_mib"] = target
    p["draft_weights_mib"] = draft
    if target + draft > pre:
        # Weights load shard by shard; the one that does not fit raises.
        shard = (target + draft) / 48.0
        loaded = max(int(pre // shard), 0) * shard
        raise OOMError("weights", _oom_text(shard, gpu.get("index", 0), total, pre - loaded,
                                            loaded + p["context_mib"]), p)
    avail = pre - target - draft
    p["avail_after_weights_mib"] = avail

    # _profile_available_bytes (GB as in the release: the message prints GB figures).
    pre_gb, avail_gb = pre / 1024.0, avail / 1024.0
    slack_gb = pre_gb * (1 - frac)
    mm_gb = VLM_CACHE_SIZE_MB / 1024.0 if model.get("multimodal") else 0.0
    rest_gb = avail_gb - slack_gb - mm_gb
    p["pool_budget_mib"] = rest_gb * 1024
    if hybrid:
        conv, ssm = mamba_cache_per_req(model, tp, args.get("mamba_ssm_dtype"))
        per_req = conv + ssm
        p["mamba_cache_per_req_mib"] = per_req / MIB
        before = rest_gb
        rest_gb = _handle_max_mamba_cache(p, args, model, rest_gb, per_req, spec, pool_draft_tokens, mrr)
        p["mamba_mib"] = (before - rest_gb) * 1024
        slots = p["max_mamba_cache_size"] + 1
        p["mamba_conv_mib"] = slots * conv / MIB
        p["mamba_ssm_mib"] = slots * ssm / MIB
        # What the budget reserved for speculation's scratch (0 under ReplaySSM) and the ring.
        p["mamba_intermediate_mib"] = p["mamba_mib"] - p["mamba_conv_mib"] - p["mamba_ssm_mib"] \
            - p["replayssm_fixed_mib"]
    if rest_gb <= 0:
        minimum = 1 - avail_gb / pre_gb
        raise OOMError("weights_budget", MSG_WEIGHTS_LEAVE_NO_MEMORY.format(
            frac=frac, suggested=math.ceil(minimum * 1000) / 1000, minimum=minimum), p)

    # pool_configurator.py DefaultPoolConfigurator.calculate_pool_sizes (page_size 1 unless set).
    per_tok = kv_bytes_per_token(model, tp, args.get("kv_cache_dtype", "auto"), spec,
                                 draft_model)
    page = args.get("page_size") or 1
    tokens = int(rest_gb * GIB) // per_tok // page * page
    p["kv_bytes_per_token"] = per_tok
    if tokens <= 0:
        raise OOMError("kv", MSG_NOT_ENOUGH_MEMORY, p)
    limit = args.get("max_total_tokens")
    if limit is not None:
        if limit > tokens:
            p["warnings"].append(WARN_MAX_TOTAL_TOKENS.format(limit=limit, tokens=tokens))
        tokens = min(tokens, limit) // page * page
        if tokens <= 0:
            raise OOMError("kv", MSG_NOT_ENOUGH_MEMORY, p)
    p["max_total_num_tokens"] = tokens
    p["kv_mib"] = tokens * per_tok / MIB

    reqs, warns = resolve_max_num_reqs(p, args, tokens, context_len, hybrid)
    p["warnings"].extend(warns)
    p["max_running_requests"] = reqs
    if candidates:
        p["adaptive_init_line"] = adaptive.AdaptiveParams(steps, args.get("speculative_adaptive_config")).init_line
    # The pools are built after the sizing (and its warnings): MambaPool's own lines.
    p["mamba_log"] = mamba_log_lines(model, args, p) if hybrid else []

    static = target + draft + p["mamba_mib"] + p["kv_mib"]
    p["avail_after_pool_mib"] = pre - static
    if p["avail_after_pool_mib"] < 0:
        # mem_fraction_static > 1: the pool asks for more than is free and torch refuses.
        raise OOMError("pool", _oom_text(p["kv_mib"], gpu.get("index", 0), total, avail), p)

    if graphs_on:
        p["capture_bs"] = capture_sizes(capture_bs, reqs)
        per_slot_tokens = (draft_tokens + steps) if spec else 1
        p["graph_mib"] = graph_state_mib(p["capture_bs"], per_slot_tokens)
        p["startup_graph_mib"] = p["graph_mib"]
        if candidates:
            p["adaptive_states"] = adaptive_graph_states(args, steps, p["capture_bs"], reqs)
            p["graph_mib"] += sum(st["graph_mib"] for st in p["adaptive_states"])
        if p["graph_mib"] + GRAPH_SAFETY_MIB > p["avail_after_pool_mib"]:
            raise OOMError("graph", _oom_text(p["graph_mib"] + GRAPH_SAFETY_MIB,
                                              gpu.get("index", 0), total,
                                              p["avail_after_pool_mib"]), p)
    p["avail_after_graph_mib"] = p["avail_after_pool_mib"] - p["graph_mib"]
    p["used_mib"] = p["context_mib"] + static + p["graph_mib"]
    return p
