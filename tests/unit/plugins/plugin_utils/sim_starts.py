"""A simulated start on the operator's node without a server: the memory plan of 0.5.23's sizing
(sim/sglang_sim/memory.py) and the journal lines a start logs about its pools, for the tests of
what the tuner reads from a start (the cap, the state pool, the lift)."""

from sglang_sim import config, memory, server_args

MODEL = "Qwen/Qwen3.5-122B-A10B"


def operator_start(steps, overrides=None, topk=1, draft=None):
    """(plan, journal lines, args) of a start on the operator's node (4 x RTX PRO 6000, tp 4)."""
    gpu = config.gpus({"profile": "rtx-pro-6000-x4", "gpu_memory_mib": None, "gpu_count": None})[0]
    model = config.lookup_model(MODEL)[1]
    argv = ["--model-path", MODEL, "--tp-size", "4", "--kv-cache-dtype", "bf16", "--speculative-algorithm", "NEXTN",
            "--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
            "--speculative-num-draft-tokens", str(draft or steps + 1)]
    for k, v in sorted((overrides or {}).items()):
        if k == "enable_linear_replayssm_spec":
            argv += ["--enable-linear-replayssm-spec"] if v else []
        else:
            argv += ["--" + k.replace("_", "-"), str(v)]
    args, _w = server_args.resolve(server_args.parse(argv), gpu["memory_mib"], model=model)
    plan = memory.plan(gpu, model, args, capture_bs=server_args.capture_batch_sizes(args["cuda_graph_max_bs_decode"], True))
    half = plan["kv_mib"] / 1024.0 / 2
    lines = list(plan["warnings"]) + list(plan["mamba_log"]) + [
        "KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB" % (plan["max_total_num_tokens"], half, half),
        "max_total_num_tokens=%d, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=%d, "
        "context_len=262144, available_gpu_mem=1.00 GB" % (plan["max_total_num_tokens"], plan["max_running_requests"])]
    return plan, lines, args
