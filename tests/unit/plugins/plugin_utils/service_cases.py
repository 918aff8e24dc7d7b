"""Settings and release flags the service unit tests share (moved from
tests/unit/plugins/filter/test_service.py)."""


FLAGS = {
    "model_path": "--model-path",
    "served_model_name": "--served-model-name",
    "tp_size": "--tp-size",
    "host": "--host",
    "port": "--port",
    "kv_cache_dtype": "--kv-cache-dtype",
    "mem_fraction_static": "--mem-fraction-static",
    "cuda_graph_max_bs": "--cuda-graph-max-bs-decode",
    "max_running_requests": "--max-running-requests",
    "context_length": "--context-length",
    "attention_backend": "--attention-backend",
    "speculative_algorithm": "--speculative-algorithm",
    "speculative_num_steps": "--speculative-num-steps",
    "speculative_eagle_topk": "--speculative-eagle-topk",
    "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
    "speculative_draft_model_path": "--speculative-draft-model-path",
    "trust_remote_code": "--trust-remote-code",
    "api_key": "--api-key",
    "config": "--config",
}


def base(**over):
    settings = {
        "model_path": "/models/Qwen3.5-122B-A10B",
        "served_model_name": "qwen",
        "tp_size": 4,
        "host": "127.0.0.1",
        "port": 30000,
        "kv_cache_dtype": "bf16",
        "mem_fraction_static": None,
        "cuda_graph_max_bs": None,
        "max_running_requests": None,
        "context_length": None,
        "attention_backend": None,
        "trust_remote_code": False,
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": 4,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": None,
        "speculative_draft_model_path": None,
        "config_file": None,
        "extra_args": [],
    }
    settings.update(over)
    return settings


def pairs(argv):
    """flag -> value for 'flag value' pairs (bare flags map to True)."""
    out, i = {}, 0
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[argv[i]] = argv[i + 1]
            i += 2
        else:
            out[argv[i]] = True
            i += 1
    return out


LEVERS = ("mamba_full_memory_ratio", "max_mamba_cache_size", "enable_linear_replayssm_spec")


LEVER_FLAGS = dict(FLAGS, mamba_full_memory_ratio="--mamba-full-memory-ratio",
                   max_mamba_cache_size="--max-mamba-cache-size",
                   enable_linear_replayssm_spec="--enable-linear-replayssm-spec")
