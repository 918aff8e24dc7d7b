"""Build the small random-weight models the real-SGLang checks serve, with no hub access.

Two Llama models that share one tokenizer:

- ``target``: what the server serves. Used as its own draft (``--speculative-algorithm
  STANDALONE --speculative-draft-model-path <target>``) it proposes exactly the tokens the
  target would pick at temperature 0, so the accept length approaches its ceiling (steps + 1):
  the regime the seed's benchmark measures.
- ``draft``: a smaller model with other random weights. Its proposals agree with the target's
  only by chance (1 in the vocabulary), so the accept length stays near 1: the regime where
  every extra draft step is pure cost.

The tokenizer is a byte-level BPE trained here on generated text, so SGLang, its benchmark and
the collection's client tokenize and detokenize real text with it (random-token prompts decode
to text and back).  Weights are seeded, so two machines build the same models.

Usage: python3 make_models.py OUTDIR   (writes OUTDIR/target, OUTDIR/draft; skips what exists)
"""

import json
import os
import random
import sys

VOCAB = 32768
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL = ["<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]

TARGET = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
              num_attention_heads=16, num_key_value_heads=8)
DRAFT = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=2,
             num_attention_heads=8, num_key_value_heads=4)


def _corpus(n_words=1500000, seed=0):
    rnd = random.Random(seed)
    syl = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "an", "el", "on", "ur", "is", "em",
           "qu", "th", "st", "ch", "de", "va", "zo", "be", "gi", "ho"]
    words = ["".join(rnd.choice(syl) for dummy in range(rnd.randint(2, 6))) for dummy in range(60000)]
    line = []
    for i in range(n_words):
        line.append(rnd.choice(words))
        if i % 20 == 19:
            yield " ".join(line) + ".\n"
            line = []


def build_tokenizer(path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer=trainer)
    os.makedirs(path, exist_ok=True)
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
                   "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 4096,
                   "chat_template": CHAT_TEMPLATE, "add_bos_token": False}, f, indent=1)
    return tok


def build_model(path, dims, seed, tok_dir):
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    if os.path.exists(os.path.join(path, "config.json")):
        return
    os.makedirs(path, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, name), os.path.join(path, name))
    vocab = json.load(open(os.path.join(tok_dir, "tokenizer.json")))["model"]["vocab"]
    cfg = LlamaConfig(vocab_size=len(vocab), max_position_embeddings=4096,
                      bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"],
                      torch_dtype="bfloat16", tie_word_embeddings=False, **dims)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path, safe_serialization=True)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id,
                   "do_sample": False}, f)


def main(out):
    tok_dir = os.path.join(out, "tokenizer")
    if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
        build_tokenizer(tok_dir)
    build_model(os.path.join(out, "target"), TARGET, 1, tok_dir)
    build_model(os.path.join(out, "draft"), DRAFT, 2, tok_dir)
    for name in ("target", "draft"):
        cfg = json.load(open(os.path.join(out, name, "config.json")))
        print(name, {k: cfg[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size")})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/rs/models")
