"""Write the config.json of a trimmed hybrid MoE that SGLang serves with random weights, no hub.

The operator's model family (Qwen3.5 MoE: Gated DeltaNet linear attention interleaved with gated
full attention, a mixture of experts, its own MTP layer) is served for real from a config alone:
``--load-format dummy`` builds ``Qwen3_5MoeForCausalLM`` with random weights, and
``--speculative-algorithm NEXTN`` with no draft path builds its MTP head
(``Qwen3_5ForCausalLMMTP``: ``configs/model_config.py`` renames the architecture for the draft
worker and sets ``num_nextn_predict_layers = 1``).

What is kept from the real model (Qwen3.5-122B-A10B's text config): the 48 layers and their
interleave (every 4th full attention: 12 full + 36 GDN), every width (hidden 3072, 32 query /
2 KV heads x 256, GDN 16 key / 64 value heads x 128, conv 4), 8 experts active per token of
width 1024 plus a shared expert of 1024, and the vocabulary size (248320: the lm_head the MTP
head runs per draft step). What is cut is the expert pool, which must be for one 80 GB card:

- ``--trim experts32`` (default): 32 experts of width 1024 (36 GiB of weights). A token reads the
  same expert bytes as on the real model, but a verify round of k+1 tokens reads the union of
  the experts they route to, and 8 (k+1) draws from 32 saturate after a few tokens, where 256
  do not: the marginal cost of a draft step falls faster than on the real model.
- ``--trim narrow256``: all 256 experts, each narrower (``--expert-width``, default 128). The
  union grows with k as on the real model, but each expert is a fraction of the real one's bytes,
  so expert traffic weighs less against attention and GDN than on the real model.

Neither is the real model; the two bracket it (README, "The round's physics").

The tokenizer is make_models.py's byte-level BPE (32768 tokens): the model's vocabulary is
larger, so ids above the tokenizer's are never in a prompt and decode to nothing.

Usage: python3 make_hybrid.py OUTDIR [--trim experts32|narrow256] [--experts N] [--expert-width W]
       [--tokenizer DIR]   (writes OUTDIR/config.json and the tokenizer files; prints the sizes)
"""

import argparse
import json
import os
import shutil
import sys

# Qwen3.5-122B-A10B's text_config (the fields the 0.5.17 loader reads).
REAL = {
    "hidden_size": 3072, "num_hidden_layers": 48, "full_attention_interval": 4,
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256,
    "linear_num_key_heads": 16, "linear_num_value_heads": 64, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 1024,
    "shared_expert_intermediate_size": 1024, "vocab_size": 248320,
}
TRIMS = {"experts32": {"num_experts": 32}, "narrow256": {"num_experts": 256, "moe_intermediate_size": 128}}


def build_config(trim="experts32", experts=None, expert_width=None, eos_id=1, bos_id=0):
    """The config.json dict of one trim (pure: tests build it too)."""
    dims = dict(REAL)
    dims.update(TRIMS[trim])
    if experts:
        dims["num_experts"] = experts
    if expert_width:
        dims["moe_intermediate_size"] = expert_width
    n, every = dims["num_hidden_layers"], dims["full_attention_interval"]
    layer_types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
    rope = {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25}
    cfg = {
        "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text",
        "torch_dtype": "bfloat16", "dtype": "bfloat16", "hidden_act": "silu",
        "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True,
        "layer_types": layer_types, "rope_parameters": rope, "rope_theta": rope["rope_theta"],
        "partial_rotary_factor": rope["partial_rotary_factor"],
        "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
        "intermediate_size": dims["moe_intermediate_size"], "output_router_logits": False,
        "router_aux_loss_coef": 0.001, "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False, "use_cache": True,
        "bos_token_id": bos_id, "eos_token_id": eos_id, "initializer_range": 0.02,
    }
    cfg.update(dims)
    return cfg


def param_counts(cfg):
    """Parameters of the target and its MTP layer by part, from the shapes 0.5.17 allocates
    (models/qwen3_5.py: gated q_proj, qkv of GDN as in_proj_qkvz + in_proj_ba; fused experts
    w13 + w2; the MTP layer is one full-attention MoE layer plus its fc and norms)."""
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    hd, nq, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    attn = h * hd * (2 * nq + 2 * nkv) + nq * hd * h
    kd = cfg["linear_key_head_dim"] * cfg["linear_num_key_heads"]
    vd = cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"]
    nv = cfg["linear_num_value_heads"]
    gdn = h * (2 * kd + 2 * vd) + h * 2 * nv + vd * h + (2 * kd + vd) * cfg["linear_conv_kernel_dim"]
    expert = 3 * h * cfg["moe_intermediate_size"]
    moe = cfg["num_experts"] * expert + 3 * h * cfg["shared_expert_intermediate_size"] + h * (cfg["num_experts"] + 1)
    full = cfg["layer_types"].count("full_attention")
    lin = cfg["num_hidden_layers"] - full
    layers = full * attn + lin * gdn + cfg["num_hidden_layers"] * moe
    embed = 2 * v * h
    mtp = attn + moe + 2 * h * h
    return {"attention": full * attn, "gdn": lin * gdn, "moe": cfg["num_hidden_layers"] * moe,
            "embed_and_head": embed, "target": layers + embed, "mtp_layer": mtp,
            "expert": expert, "active_expert_per_token_layer": cfg["num_experts_per_tok"] * expert}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("out")
    ap.add_argument("--trim", choices=sorted(TRIMS), default="experts32")
    ap.add_argument("--experts", type=int)
    ap.add_argument("--expert-width", type=int)
    ap.add_argument("--tokenizer", help="directory with make_models.py's tokenizer.json (built there if absent)")
    args = ap.parse_args(argv)
    tok_dir = args.tokenizer or os.path.join(os.path.dirname(os.path.abspath(args.out)), "tokenizer")
    if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import make_models  # pylint: disable=import-outside-toplevel
        make_models.build_tokenizer(tok_dir)
    vocab = json.load(open(os.path.join(tok_dir, "tokenizer.json")))["model"]["vocab"]
    cfg = build_config(args.trim, args.experts, args.expert_width, eos_id=vocab["</s>"], bos_id=vocab["<s>"])
    os.makedirs(args.out, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, name), os.path.join(args.out, name))
    with open(os.path.join(args.out, "config.json.part"), "w") as f:
        json.dump(cfg, f, indent=1)
    os.replace(os.path.join(args.out, "config.json.part"), os.path.join(args.out, "config.json"))
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"], "do_sample": False}, f)
    p = param_counts(cfg)
    print(args.trim, {k: cfg[k] for k in ("num_experts", "moe_intermediate_size", "num_hidden_layers", "vocab_size")},
          "target %.2f GiB, MTP layer %.2f GiB (bf16)" % (p["target"] * 2 / 2 ** 30, p["mtp_layer"] * 2 / 2 ** 30))


if __name__ == "__main__":
    main()
