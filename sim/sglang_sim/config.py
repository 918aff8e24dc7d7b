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
    # Fault: fraction of greedy prompts whose output leaves the reference on a launch where
    # --enable-linear-replayssm-spec acts (scheduler.drift_point).
    "replayssm_drift": (float, 0.0),
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
    if out["replayssm_drift"] is not None and not 0 <= out["replayssm_drift"] <= 1:
        raise SimConfigError("SGLANG_SIM_REPLAYSSM_DRIFT is a fraction of the greedy prompts, "
                             "within [0, 1]; got %r" % out["replayssm_drift"])
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
    ({"catalog": "Qwen/Qwen3.5-122B-A10B"}); without one, a ``config.json`` whose shape
    model_from_hf_config models is that model. Unknown models are served with the default
    model's shape, so any weights directory works on the sim.
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
    # A local folder with a config.json is the model that config describes, as the release reads
    # it (configs/model_config.py ModelConfig -> srt/utils/hf_transformers/config.py get_config), where
    # model_from_hf_config models its shape; the trimmed hybrid the real runs serve is one.
    hf_path = os.path.join(key, "config.json")
    if os.path.isfile(hf_path):
        try:
            with open(hf_path) as fh:
                return key, model_from_hf_config(json.load(fh), name=key)
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            pass  # a shape it does not model: the catalog's, as before
    for name, entry in CATALOG.items():
        if name.rsplit("/", 1)[-1].lower() == base:
            return name, entry
    return DEFAULT_MODEL, CATALOG[DEFAULT_MODEL]


# HF config keys that mean a shape model_from_hf_config does not describe (its parameter count
# and KV cell would be wrong): a dense config with mixture of experts, MLA, linear attention /
# hybrid layers, sliding-window pools, a vision tower; a hybrid config with other MoE flavours,
# MLA, KDA linear attention or sliding windows.
_UNMODELLED_HF_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "kv_lora_rank",
                       "linear_num_value_heads", "layer_types", "sliding_window_pattern",
                       "vision_config", "text_config")
_UNMODELLED_HYBRID_KEYS = ("num_local_experts", "n_routed_experts", "kv_lora_rank",
                           "linear_attn_config", "sliding_window_pattern")
# GDN hybrids model_from_hf_config reads (configs/qwen3_next.py, configs/qwen3_5.py): the
# text-only entries (models/qwen3_5_text.py), the multimodal ones and Qwen3-Next.
HYBRID_ARCHS = ("Qwen3_5MoeForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForConditionalGeneration",
                "Qwen3_5ForConditionalGeneration", "Qwen3NextForCausalLM")
# Served dtype under --dtype auto: a float32 checkpoint is served in float16
# (configs/model_config.py _get_and_verify_dtype).
_HF_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 2}


def _hf_dtype_bytes(*configs):
    dtype = "bfloat16"
    for c in configs:
        found = c.get("torch_dtype") or c.get("dtype")
        if found:
            dtype = found
            break
    if dtype not in _HF_DTYPE_BYTES:
        raise ValueError("model_from_hf_config: unsupported dtype %r" % dtype)
    return _HF_DTYPE_BYTES[dtype]


def model_from_hf_config(hf, name=None):
    """A catalog-shaped entry for a model given as its HF ``config.json`` dict, so memory.plan can
    size a model that is not in CATALOG (a trimmed or random-weight model on a real GPU, compared
    against the real server's start-up log): a dense decoder-only model (Llama, Mistral, Qwen2/3),
    or a Qwen3.5 / Qwen3-Next GDN hybrid, dense or MoE, flat or nested under ``text_config``
    (hybrid_from_hf_config).

    ``params`` counts what SGLang allocates for the checkpoint: embedding, lm_head (unless
    tied), q/k/v/o (+ biases), gate/up/down, the norms. A model used as a draft
    (``--speculative-draft-model-path``) is loaded whole and gives the KV pool every layer
    (0.5.17 spec_aux_hidden_state.py _resolve_eagle_aux_hidden_state: num_nextn_predict_layers,
    else max(num_hidden_layers, num_attention_layers)), so ``draft_params`` / ``draft_kv_layers``
    are the whole model unless the config names MTP layers. Raises ValueError for a shape it does
    not describe (MoE outside the hybrids, MLA, sliding window, KDA) rather than return a wrong
    plan.
    """
    text = hf.get("text_config") if isinstance(hf.get("text_config"), dict) else hf
    archs = hf.get("architectures") or text.get("architectures") or []
    if text.get("linear_num_value_heads") or "linear_attention" in (text.get("layer_types") or []) \
            or (archs and archs[0] in HYBRID_ARCHS):
        return hybrid_from_hf_config(hf, name)
    bad = [k for k in _UNMODELLED_HF_KEYS if hf.get(k)]
    if bad:
        raise ValueError("model_from_hf_config models dense decoder-only attention and the "
                         "Qwen3.5/Qwen3-Next hybrids only; this config has %s" % ", ".join(bad))
    hidden = hf["hidden_size"]
    layers = hf["num_hidden_layers"]
    heads = hf["num_attention_heads"]
    kv_heads = hf.get("num_key_value_heads") or heads
    head_dim = hf.get("head_dim") or hidden // heads
    inter = hf["intermediate_size"]
    vocab = hf["vocab_size"]
    archs = archs or ["LlamaForCausalLM"]
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
    mtp = hf.get("num_nextn_predict_layers")
    return {
        "name": name or hf.get("_name_or_path") or archs[0],
        "architectures": archs,
        "model_type": hf.get("model_type", "llama"),
        "params": params,
        "draft_params": params if not mtp else mtp * per_layer,
        "draft_kv_layers": mtp or layers,
        "dtype_bytes": _hf_dtype_bytes(hf),
        "context_length": hf.get("max_position_embeddings", 4096),
        "full_attn_layers": layers,
        "linear_attn_layers": 0,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "hybrid": False,
    }


def hybrid_layer_types(text):
    """Per-layer kinds of a GDN hybrid: ``layer_types`` when the config lists them, else
    configs/qwen3_next.py layers_block_type (layer i is full attention when (i + 1) is a multiple
    of full_attention_interval)."""
    layers = text["num_hidden_layers"]
    kinds = text.get("layer_types")
    if kinds:
        if len(kinds) != layers or set(kinds) - {"full_attention", "linear_attention"}:
            raise ValueError("model_from_hf_config: layer_types must list full_attention / "
                             "linear_attention once per layer (%d layers), got %r" % (layers, kinds))
        return list(kinds)
    interval = text.get("full_attention_interval")
    if not interval:
        raise ValueError("model_from_hf_config: a hybrid config needs layer_types or "
                         "full_attention_interval")
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]


def _vision_params(v):
    """Parameters of a Qwen3-VL vision tower (models/qwen3_vl.py Qwen3VLMoeVisionModel): patch
    embedding (Conv3d), position embedding, depth x (2 LayerNorms, qkv, proj, fc1, fc2 with
    biases), the patch merger and one per deepstack index. configs/qwen3_vl.py defaults."""
    h = v.get("hidden_size", 1152)
    inter = v.get("intermediate_size", 4304)
    depth = v.get("depth", v.get("num_hidden_layers", 27))
    patch = v.get("in_channels", 3) * v.get("temporal_patch_size", 2) * v.get("patch_size", 16) ** 2 * h + h
    pos = v.get("num_position_embeddings", 2304) * h
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * inter + inter) + (inter * h + h)
    m = h * v.get("spatial_merge_size", 2) ** 2
    out = v.get("out_hidden_size", 3584)
    merger = 2 * m + (m * m + m) + (m * out + out)
    mergers = 1 + len(v.get("deepstack_visual_indexes", [8, 16, 24]))
    return patch + pos + depth * block + mergers * merger


def hybrid_from_hf_config(hf, name=None):
    """A catalog entry for a Qwen3.5 / Qwen3-Next GDN hybrid from its config.json (flat, or the
    multimodal one with ``text_config`` and ``vision_config``). Counts what 0.5.23 allocates
    (models/qwen3_5.py):

    - full-attention layer (Qwen3_5AttentionDecoderLayer): qkv_proj with the output gate doubling
      q (attn_output_gate, default on), o_proj, q_norm / k_norm;
    - GDN layer (Qwen3_5GatedDeltaNet): in_proj_qkvz (2 x key dim + 2 x value dim), in_proj_ba
      (2 x value heads), conv1d ((2 x key dim + value dim) x kernel), dt_bias, A_log, the gated
      norm (value head dim), out_proj;
    - every layer's MLP: the sparse MoE block (Qwen2MoeSparseMoeBlock: router, num_experts x
      gate/up/down of moe_intermediate_size, the shared expert and its gate) when the config has
      experts, else a dense gate/up/down of intermediate_size; two RMSNorms per layer;
    - embedding, lm_head unless tied, final norm, and a vision tower for a multimodal config.

    The MTP head (models/qwen3_5_mtp.py Qwen3_5ForCausalLMMTP, the NEXTN draft; the config names
    it as mtp_num_hidden_layers or num_nextn_predict_layers) is fc (2h x h), two
    pre-fc norms and a one-layer model: its own embedding, one full-attention layer with the MLP,
    a norm and an lm_head unless tied; one KV layer (configs/model_config.py sets
    num_nextn_predict_layers = 1 for the draft).
    """
    text = hf.get("text_config") if isinstance(hf.get("text_config"), dict) else hf
    archs = hf.get("architectures") or text.get("architectures") or ["Qwen3_5MoeForCausalLM"]
    bad = [k for k in _UNMODELLED_HYBRID_KEYS if text.get(k) or hf.get(k)]
    if archs[0] not in HYBRID_ARCHS:
        bad.append("architecture %s" % archs[0])
    if bad:
        raise ValueError("model_from_hf_config models the Qwen3.5/Qwen3-Next GDN hybrids (%s) only; "
                         "this config has %s" % (", ".join(HYBRID_ARCHS), ", ".join(bad)))
    kinds = hybrid_layer_types(text)
    full, linear = kinds.count("full_attention"), kinds.count("linear_attention")
    hidden = text["hidden_size"]
    heads = text["num_attention_heads"]
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or hidden // heads
    vocab = text["vocab_size"]
    gate = 1 if text.get("attn_output_gate", True) else 0
    q, kv = heads * head_dim, kv_heads * head_dim
    attn = hidden * (q * (1 + gate) + 2 * kv) + q * hidden + 2 * head_dim
    k_heads, v_heads = text["linear_num_key_heads"], text["linear_num_value_heads"]
    k_dim, v_dim = text["linear_key_head_dim"], text["linear_value_head_dim"]
    kernel = text.get("linear_conv_kernel_dim", 4)
    key_dim, value_dim = k_heads * k_dim, v_heads * v_dim
    gdn = (hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * v_heads
           + (2 * key_dim + value_dim) * kernel + 2 * v_heads + v_dim + value_dim * hidden)
    experts = text.get("num_experts") or 0
    if experts:
        shared = text.get("shared_expert_intermediate_size") or 0
        mlp = (hidden * experts + experts * 3 * hidden * text["moe_intermediate_size"]
               + ((3 * hidden * shared + hidden) if shared else 0))
    else:
        mlp = 3 * hidden * text["intermediate_size"]
    norms = 2 * hidden
    embed = vocab * hidden
    tied = bool(text.get("tie_word_embeddings", hf.get("tie_word_embeddings", False)))
    lm_head = 0 if tied else embed
    params = embed + lm_head + hidden + full * (attn + mlp + norms) + linear * (gdn + mlp + norms)
    vision = hf.get("vision_config") if text is not hf else None
    if vision:
        params += _vision_params(vision)
    # Qwen3_5ForCausalLMMTP builds its one layer whatever the config's MTP count says.
    draft = 2 * hidden * hidden + 2 * hidden + embed + attn + mlp + norms + hidden + lm_head
    entry = {
        "name": name or hf.get("_name_or_path") or archs[0],
        "architectures": archs,
        "model_type": hf.get("model_type") or text.get("model_type") or "qwen3_5_moe_text",
        "params": params,
        "draft_params": draft,
        "draft_kv_layers": 1,
        "dtype_bytes": _hf_dtype_bytes(text, hf),
        "context_length": text.get("max_position_embeddings", 262144),
        "full_attn_layers": full,
        "linear_attn_layers": linear,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "linear_num_key_heads": k_heads,
        "linear_num_value_heads": v_heads,
        "linear_key_head_dim": k_dim,
        "linear_value_head_dim": v_dim,
        "linear_conv_kernel_dim": kernel,
        "hybrid": True,
        "num_experts": experts,
        "num_experts_per_tok": text.get("num_experts_per_tok") or 0,
        "mtp_layers": text.get("mtp_num_hidden_layers") or text.get("num_nextn_predict_layers") or 0,
    }
    if vision:
        entry["multimodal"] = True
        entry["vision_config"] = dict(vision)
    return entry
