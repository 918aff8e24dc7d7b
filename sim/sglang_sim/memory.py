"""Per-GPU memory model of one SGLang TP rank (pure functions, MiB unless noted).

Mirrors the order in which SGLang fills a GPU:
1. CUDA context + NCCL buffers, then weights (target split over TP, plus the draft/MTP head);
2. the memory pools: SGLang gives them ``avail_after_weights - total*(1-mem_fraction_static)``
   (pool_configurator.py). For a hybrid model (Qwen3.5/Qwen3-Next: Gated DeltaNet +
   full attention) the mamba/SSM state pool comes first: one state per running-request
   slot, and with speculative decoding one intermediate state per draft token as well;
   then the speculative verify buffers sized for the largest captured batch
   (cuda-graph max bs x draft tokens); what is left is the KV cache. If nothing is left,
   ``RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.``;
3. CUDA graph capture out of the headroom that mem_fraction_static left; if it does not
   fit, ``Exception: Capture cuda graph failed: CUDA out of memory...``.

The constants are chosen so that, on the default profile (4x RTX PRO 6000, 97887 MiB,
Qwen3.5-122B-A10B bf16, tp 4, auto settings), speculative steps 1-5 start and steps 10
with the default cuda-graph max bs 512 dies in KV-cache allocation, as the operator saw;
a smaller --cuda-graph-max-bs-decode or --max-running-requests lets steps 10 fit.
"""

MIB = 1024 * 1024
# CUDA context + cuBLAS/NCCL workspaces that a rank holds before loading weights.
CONTEXT_MIB = 560
NCCL_MIB_TP = 420  # extra for tp > 1 (NCCL buffers, custom all-reduce)
# Speculative verify/draft buffers per (captured batch slot x draft token).
SPEC_BUFFER_MIB_PER_SLOT_TOKEN = 0.5
# Non-speculative decode keeps this many SSM state slots (hybrid models).
DEFAULT_MAMBA_SLOTS = 256
# Graph capture memory: fixed part + per (batch slot x tokens per slot, incl. draft passes).
GRAPH_BASE_MIB = 150
GRAPH_MIB_PER_SLOT_TOKEN = 0.25
# Capture needs this much slack on top of the graphs themselves.
GRAPH_SAFETY_MIB = 512

KV_DTYPE_BYTES = {
    "auto": 2, "bf16": 2, "bfloat16": 2, "fp8_e5m2": 1, "fp8_e4m3": 1, "mxfp8": 1,
    "nvfp4": 0.5, "fp4_mx_block16": 0.5,
}


class OOMError(Exception):
    """Startup failure: kind is 'kv' (pool allocation) or 'graph' (CUDA graph capture)."""

    def __init__(self, kind, message, plan):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.plan = plan


def weights_mib(model, tp_size, speculative, draft_model=None):
    """(target, draft) weight MiB per rank."""
    target = model["params"] * model["dtype_bytes"] / tp_size / MIB
    draft = 0.0
    if speculative:
        src = draft_model or model
        draft = src["draft_params"] * src["dtype_bytes"] / tp_size / MIB
    return target, draft


def kv_bytes_per_token(model, tp_size, kv_cache_dtype, speculative):
    """KV bytes per token per rank (full-attention layers; the draft layer adds one)."""
    heads = max(1, model["kv_heads"] // tp_size)
    layers = model["full_attn_layers"] + (1 if speculative else 0)
    return layers * heads * model["head_dim"] * 2 * KV_DTYPE_BYTES[kv_cache_dtype]


def plan(gpu, model, args, draft_model=None, other_used_mib=0.0):
    """Memory plan of one rank. Returns a dict; raises OOMError when init would fail.

    gpu: dict with memory_mib and reserved_mib; args: resolved server args;
    other_used_mib: memory other processes (e.g. orphaned ranks) already hold on it.
    """
    total = gpu["memory_mib"]
    tp = args["tp_size"]
    spec = args.get("speculative_algorithm") is not None
    steps = args.get("speculative_num_steps") or 0
    draft_tokens = args.get("speculative_num_draft_tokens") or 1
    frac = args["mem_fraction_static"]
    max_bs = args["cuda_graph_max_bs_decode"]
    graphs_on = not args.get("disable_cuda_graph")
    mrr = args.get("max_running_requests")

    p = {"total_mib": total, "mem_fraction_static": frac, "speculative": spec,
         "draft_tokens": draft_tokens, "cuda_graph_max_bs": max_bs}
    p["context_mib"] = CONTEXT_MIB + (NCCL_MIB_TP if tp > 1 else 0)
    p["other_used_mib"] = other_used_mib
    p["avail_begin_mib"] = total - gpu["reserved_mib"] - other_used_mib - p["context_mib"]
    target, draft = weights_mib(model, tp, spec, draft_model)
    p["weights_mib"] = target
    p["draft_weights_mib"] = draft
    if target + draft > p["avail_begin_mib"]:
        # Weights load shard by shard; the one that does not fit raises.
        shard = (target + draft) / 48.0
        loaded = max(int(p["avail_begin_mib"] // shard), 0) * shard
        free = max(p["avail_begin_mib"] - loaded, 0)
        in_use = (loaded + p["context_mib"]) / 1024
        msg = ("CUDA out of memory. Tried to allocate %.2f GiB. GPU %d has a total capacity of "
               "%.2f GiB of which %.2f GiB is free. Including non-PyTorch memory, this process "
               "has %.2f GiB memory in use."
               % (shard / 1024, gpu.get("index", 0), total / 1024, free / 1024, in_use))
        raise OOMError("weights", msg, p)
    p["avail_after_weights_mib"] = p["avail_begin_mib"] - target - draft
    rest = p["avail_after_weights_mib"] - total * (1 - frac)
    p["pool_budget_mib"] = rest

    if model.get("hybrid"):
        slots = mrr if mrr is not None else DEFAULT_MAMBA_SLOTS
        state = model["ssm_state_mib_per_layer"] * model["linear_attn_layers"] / tp
        p["mamba_slots"] = slots
        p["mamba_mib"] = slots * state * (1 + (draft_tokens if spec else 0))
    else:
        p["mamba_slots"] = 0
        p["mamba_mib"] = 0.0
    p["spec_buffer_mib"] = (SPEC_BUFFER_MIB_PER_SLOT_TOKEN * max_bs * draft_tokens) if spec else 0.0
    kv = rest - p["mamba_mib"] - p["spec_buffer_mib"]
    per_tok = kv_bytes_per_token(model, tp, args.get("kv_cache_dtype", "auto"), spec)
    tokens = int(kv * MIB // per_tok) if kv > 0 else 0
    if args.get("max_total_tokens") and tokens > args["max_total_tokens"]:
        tokens = args["max_total_tokens"]
        kv = tokens * per_tok / MIB
    p["kv_bytes_per_token"] = per_tok
    p["max_total_num_tokens"] = tokens
    p["kv_mib"] = max(kv, 0.0)
    if tokens <= 0:
        msg = ("Not enough memory. Please try to increase --mem-fraction-static. "
               "Current value: mem_fraction_static=%s" % frac)
        raise OOMError("kv", msg, p)
    static = target + draft + p["mamba_mib"] + p["spec_buffer_mib"] + p["kv_mib"]
    p["avail_after_pool_mib"] = p["avail_begin_mib"] - static
    if p["avail_after_pool_mib"] < 0:
        # mem_fraction_static > 1 - reserve: the pool itself does not fit.
        free = max(p["avail_after_weights_mib"], 0) / 1024
        msg = ("CUDA out of memory. Tried to allocate %.2f GiB. GPU %d has a total capacity of "
               "%.2f GiB of which %.2f GiB is free."
               % (p["kv_mib"] / 1024, gpu.get("index", 0), total / 1024, free))
        raise OOMError("pool", msg, p)

    if graphs_on:
        per_slot_tokens = (draft_tokens + steps) if spec else 1
        p["graph_mib"] = GRAPH_BASE_MIB + GRAPH_MIB_PER_SLOT_TOKEN * max_bs * per_slot_tokens
    else:
        p["graph_mib"] = 0.0
    if graphs_on and p["graph_mib"] + GRAPH_SAFETY_MIB > p["avail_after_pool_mib"]:
        need = (p["graph_mib"] + GRAPH_SAFETY_MIB) / 1024
        free = max(p["avail_after_pool_mib"], 0) / 1024
        msg = ("CUDA out of memory. Tried to allocate %.2f GiB. GPU %d has a total capacity of "
               "%.2f GiB of which %.2f GiB is free." % (need, gpu.get("index", 0), total / 1024, free))
        raise OOMError("graph", msg, p)
    p["avail_after_graph_mib"] = p["avail_after_pool_mib"] - p["graph_mib"]
    p["used_mib"] = p["context_mib"] + static + p["graph_mib"]
    return p
