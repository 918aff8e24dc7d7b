"""Simulator settings (env vars + JSON config file), GPU profiles and the model catalog.

Sim-only knobs are environment variables (SGLANG_SIM_*) or keys of a JSON file
(SGLANG_SIM_CONFIG, default /etc/sglang-sim/config.json) with the same names in
lower case and without the prefix; the environment wins over the file. They are
never CLI flags, so a unit's ExecStart stays identical to a real node's.
"""

import hashlib
import json
import os
import uuid

DEFAULT_CONFIG_PATH = "/etc/sglang-sim/config.json"

# name -> (type, default). Keep in step with README.md.
SETTINGS = {
    "profile": (str, "rtx-pro-6000-x4"),
    "time_scale": (float, 1.0),
    "load_seconds": (float, 20.0),
    "orphans": (bool, False),
    "orphans_keep_port": (bool, False),
    "wedge_after": (float, 0.0),
    "state_dir": (str, "/run/sglang-sim"),
    "dev_dir": (str, "/dev"),
    # Where ranks create SGLang's shared-memory segments (shm.py), and their size in KiB.
    "shm_dir": (str, "/dev/shm"),
    "shm_kib": (int, 4),
    "gpu_memory_mib": (int, None),
    "gpu_count": (int, None),
    "seed": (int, 0),
}


class SimConfigError(Exception):
    """A bad simulator setting (env var or config file)."""


def _coerce(name, typ, raw):
    if raw is None:
        return None
    if typ is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise SimConfigError("%s must be a boolean (0/1), got %r" % (name, raw))
    try:
        return typ(raw)
    except (TypeError, ValueError):
        raise SimConfigError("%s must be of type %s, got %r" % (name, typ.__name__, raw))


def load_settings(environ=None):
    """Merge defaults, the JSON config file and SGLANG_SIM_* env vars (env wins)."""
    env = os.environ if environ is None else environ
    path = env.get("SGLANG_SIM_CONFIG", DEFAULT_CONFIG_PATH)
    file_values = {}
    if path and os.path.exists(path):
        try:
            with open(path) as fh:
                file_values = json.load(fh)
        except (OSError, ValueError) as exc:
            raise SimConfigError("cannot read simulator config %s: %s" % (path, exc))
        if not isinstance(file_values, dict):
            raise SimConfigError("simulator config %s must hold a JSON object" % path)
    out = {"config_path": path}
    for name, (typ, default) in SETTINGS.items():
        raw = default
        if name in file_values:
            raw = file_values[name]
        env_name = "SGLANG_SIM_" + name.upper()
        if env.get(env_name, "") != "":
            raw = env[env_name]
        out[name] = _coerce(env_name, typ, raw)
    if out["time_scale"] is not None and out["time_scale"] <= 0:
        raise SimConfigError("SGLANG_SIM_TIME_SCALE must be > 0, got %r" % out["time_scale"])
    if out["profile"] not in PROFILES:
        raise SimConfigError(
            "unknown SGLANG_SIM_PROFILE %r; known profiles: %s"
            % (out["profile"], ", ".join(sorted(PROFILES)))
        )
    return out


# GPU profiles. memory_mib is what nvidia-smi reports as memory.total for that card.
# reserved_mib is the driver-reserved part (nvidia-smi -q "Reserved"), never usable.
PROFILES = {
    "rtx-pro-6000-x4": {
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "count": 4,
        "memory_mib": 97887,
        "reserved_mib": 540,
        "compute_cap": "12.0",
        "driver_version": "580.159.04",
        "cuda_version": "13.0",
        "power_cap_w": 600,
        "idle_power_w": 34,
        "pci_bus_base": 0x17,
    },
    "rtx-pro-6000-x1": {
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "count": 1,
        "memory_mib": 97887,
        "reserved_mib": 540,
        "compute_cap": "12.0",
        "driver_version": "580.159.04",
        "cuda_version": "13.0",
        "power_cap_w": 600,
        "idle_power_w": 34,
        "pci_bus_base": 0x17,
    },
    "b200-x8": {
        "name": "NVIDIA B200",
        "count": 8,
        "memory_mib": 183359,
        "reserved_mib": 780,
        "compute_cap": "10.0",
        "driver_version": "580.159.04",
        "cuda_version": "13.0",
        "power_cap_w": 1000,
        "idle_power_w": 140,
        "pci_bus_base": 0x18,
    },
    "h200-x1": {
        "name": "NVIDIA H200",
        "count": 1,
        "memory_mib": 143771,
        "reserved_mib": 616,
        "compute_cap": "9.0",
        "driver_version": "580.159.04",
        "cuda_version": "13.0",
        "power_cap_w": 700,
        "idle_power_w": 129,
        "pci_bus_base": 0x06,
        # The captured node (tests/fixtures/nvidia-h200) is a VM: device 06 on bus 00.
        "pci_bus_fmt": "00000000:00:%02X.0",
        "uuids": ["GPU-0c659456-f90b-dc4f-2d09-40552f47d00c"],
    },
    "h200-x8": {
        "name": "NVIDIA H200",
        "count": 8,
        "memory_mib": 143771,
        "reserved_mib": 616,
        "compute_cap": "9.0",
        "driver_version": "580.159.04",
        "cuda_version": "13.0",
        "power_cap_w": 700,
        "idle_power_w": 129,
        "pci_bus_base": 0x06,
    },
}


def gpus(settings):
    """The simulated GPUs: a list of dicts (index, uuid, name, memory_mib, ...)."""
    prof = PROFILES[settings["profile"]]
    count = settings.get("gpu_count") or prof["count"]
    mem = settings.get("gpu_memory_mib") or prof["memory_mib"]
    out = []
    for i in range(count):
        digest = hashlib.sha256(("%s/%d" % (settings["profile"], i)).encode()).digest()
        pinned = prof.get("uuids", [])
        out.append({
            "index": i,
            # Stable per profile and index, so a restarted node keeps its UUIDs.
            "uuid": pinned[i] if i < len(pinned) else "GPU-" + str(uuid.UUID(bytes=digest[:16])),
            "name": prof["name"],
            "memory_mib": mem,
            "reserved_mib": prof["reserved_mib"],
            "compute_cap": prof["compute_cap"],
            "driver_version": prof["driver_version"],
            "cuda_version": prof["cuda_version"],
            "power_cap_w": prof["power_cap_w"],
            "idle_power_w": prof["idle_power_w"],
            "pci_bus_id": prof.get("pci_bus_fmt", "00000000:%02X:00.0") % (prof["pci_bus_base"] + i),
        })
    return out


# Model catalog. params are the target model's; draft_params the built-in MTP head
# (NEXTN/EAGLE with no --speculative-draft-model-path). Hybrid models (Gated DeltaNet
# linear attention + full attention) keep a per-request SSM state; with speculative
# decoding SGLang also keeps one intermediate state per draft token.
CATALOG = {
    "Qwen/Qwen3.5-122B-A10B": {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "params": 122e9,
        "draft_params": 2.4e9,
        "dtype_bytes": 2,
        "context_length": 262144,
        "full_attn_layers": 12,
        "linear_attn_layers": 36,
        "kv_heads": 2,
        "head_dim": 256,
        # Gated DeltaNet shapes of config.json (text_config): the state pool per request is
        # computed from them as configs/mamba_utils.py does (memory.mamba_cache_per_req).
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 64,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "hybrid": True,
        # A vision tower: configs/model_config.py lists the architecture as multimodal and
        # arg_groups/memory_hook.py scales the auto mem fraction down from vision_config
        # (Qwen3VLVisionConfig names its layer count "depth", so the hook's
        # getattr(num_hidden_layers, 24) default applies).
        "multimodal": True,
        "vision_config": {"depth": 27, "hidden_size": 1152},
    },
    "Qwen/Qwen3-Next-80B-A3B-Instruct": {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "params": 80e9,
        "draft_params": 1.6e9,
        "dtype_bytes": 2,
        "context_length": 262144,
        "full_attn_layers": 12,
        "linear_attn_layers": 36,
        "kv_heads": 2,
        "head_dim": 256,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "hybrid": True,
    },
    "Qwen/Qwen3-8B": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "params": 8.2e9,
        "draft_params": 0.4e9,
        "dtype_bytes": 2,
        "context_length": 40960,
        "full_attn_layers": 36,
        "linear_attn_layers": 0,
        "kv_heads": 8,
        "head_dim": 128,
        "hybrid": False,
    },
}
DEFAULT_MODEL = "Qwen/Qwen3.5-122B-A10B"


def lookup_model(model_path):
    """Catalog entry for a model path: an HF id, or a local dir whose name matches one.

    A local directory may also hold a ``sim_model.json`` naming a catalog entry
    ({"catalog": "Qwen/Qwen3.5-122B-A10B"}). Unknown models are served with the
    default model's shape, so any weights directory works on the sim.
    """
    key = model_path.rstrip("/")
    if key in CATALOG:
        return key, CATALOG[key]
    base = os.path.basename(key).lower()
    marker = os.path.join(key, "sim_model.json")
    if os.path.isfile(marker):
        try:
            with open(marker) as fh:
                name = json.load(fh).get("catalog")
            if name in CATALOG:
                return name, CATALOG[name]
        except (OSError, ValueError, AttributeError):
            pass
    for name, entry in CATALOG.items():
        if name.rsplit("/", 1)[-1].lower() == base:
            return name, entry
    return DEFAULT_MODEL, CATALOG[DEFAULT_MODEL]


# HF config keys that mean a shape model_from_hf_config does not describe (its parameter count
# and KV cell would be wrong): mixture of experts, MLA, linear attention / hybrid layers,
# sliding-window pools, a vision tower.
_UNMODELLED_HF_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "kv_lora_rank",
                       "linear_num_value_heads", "layer_types", "sliding_window_pattern",
                       "vision_config", "text_config")
# Served dtype under --dtype auto: a float32 checkpoint is served in float16
# (configs/model_config.py _get_and_verify_dtype).
_HF_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 2}


def model_from_hf_config(hf, name=None):
    """A catalog-shaped entry for a dense decoder-only model (Llama, Mistral, Qwen2/3) given as
    its HF ``config.json`` dict, so memory.plan can size a model that is not in CATALOG (a tiny
    random-weight model on a real GPU, compared against the real server's start-up log).

    ``params`` counts what SGLang allocates for the checkpoint: embedding, lm_head (unless
    tied), q/k/v/o (+ biases), gate/up/down, the norms. A model used as a draft
    (``--speculative-draft-model-path``) is loaded whole and gives the KV pool every layer
    (0.5.17 spec_aux_hidden_state.py _resolve_eagle_aux_hidden_state: num_nextn_predict_layers,
    else max(num_hidden_layers, num_attention_layers)), so ``draft_params`` / ``draft_kv_layers``
    are the whole model unless the config names MTP layers. Raises ValueError for a shape it does
    not describe (MoE, MLA, hybrid/linear attention, sliding window, multimodal) rather than
    return a wrong plan.
    """
    bad = [k for k in _UNMODELLED_HF_KEYS if hf.get(k)]
    if bad:
        raise ValueError("model_from_hf_config models dense decoder-only attention only; this "
                         "config has %s" % ", ".join(bad))
    hidden = hf["hidden_size"]
    layers = hf["num_hidden_layers"]
    heads = hf["num_attention_heads"]
    kv_heads = hf.get("num_key_value_heads") or heads
    head_dim = hf.get("head_dim") or hidden // heads
    inter = hf["intermediate_size"]
    vocab = hf["vocab_size"]
    archs = hf.get("architectures") or ["LlamaForCausalLM"]
    qkv_bias = bool(hf.get("attention_bias")) or archs[0] == "Qwen2ForCausalLM"
    mlp_bias = bool(hf.get("mlp_bias"))
    q, kv = heads * head_dim, kv_heads * head_dim
    attn = hidden * (q + 2 * kv) + q * hidden + ((q + 2 * kv) if qkv_bias else 0)
    attn += hidden if hf.get("attention_bias") else 0  # o_proj bias (Llama attention_bias)
    if archs[0] == "Qwen3ForCausalLM":
        attn += 2 * head_dim  # q_norm, k_norm
    mlp = 3 * hidden * inter + ((2 * inter + hidden) if mlp_bias else 0)
    per_layer = attn + mlp + 2 * hidden  # input / post-attention RMSNorm
    embed = vocab * hidden
    lm_head = 0 if hf.get("tie_word_embeddings", False) else vocab * hidden
    params = embed + lm_head + layers * per_layer + hidden  # + final norm
    dtype = hf.get("torch_dtype") or hf.get("dtype") or "bfloat16"
    if dtype not in _HF_DTYPE_BYTES:
        raise ValueError("model_from_hf_config: unsupported dtype %r" % dtype)
    mtp = hf.get("num_nextn_predict_layers")
    return {
        "name": name or hf.get("_name_or_path") or archs[0],
        "architectures": archs,
        "model_type": hf.get("model_type", "llama"),
        "params": params,
        "draft_params": params if not mtp else mtp * per_layer,
        "draft_kv_layers": mtp or layers,
        "dtype_bytes": _HF_DTYPE_BYTES[dtype],
        "context_length": hf.get("max_position_embeddings", 4096),
        "full_attn_layers": layers,
        "linear_attn_layers": 0,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "hybrid": False,
    }
