# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Workload of sglang_bench's load generator: what is sent, stdlib only (Python >= 3.9), no I/O.

Synthetic prompts (distinct, seeded), JSONL datasets, the request body of one prompt on each
endpoint, and the payloads of a level's warmup and measured requests. How the synthetic prompts
fit a given server (token ids or text, words per prompt) is found by ``sglang_runner``'s probes.
"""

from __future__ import absolute_import, division, print_function

import functools
import json
import random

__metaclass__ = type

_WORDS = ("alpha", "beta", "gamma", "delta", "kernel", "tensor", "river", "stone", "cloud",
          "green", "vector", "matrix", "signal", "buffer", "packet", "token", "shard", "graph",
          "orbit", "lambda", "socket", "thread", "queue", "cache")


def random_prompts(n, input_len, seed, as_text):
    """n distinct synthetic prompts: token-id lists of exactly input_len ids, or (as_text) text
    of input_len words (the caller turns a token target into a word count, see sglang_runner.calibrate_words).
    Distinct prompts keep the prefix cache from helping."""
    rng = random.Random(seed)
    out = []
    for dummy in range(n):
        if as_text:
            out.append({"text": " ".join(rng.choice(_WORDS) for dummy in range(input_len))})
        else:
            out.append({"input_ids": [rng.randint(1000, 30000) for dummy in range(input_len)]})
    return out


def load_jsonl(lines, source="dataset"):
    """Parse JSONL prompt lines -> list of prompt dicts with one of text / input_ids / messages
    and optional output_len. Raises ValueError with the line number for a bad line."""
    prompts = []
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s:
            continue
        try:
            obj = json.loads(s)
        except ValueError as exc:
            raise ValueError("%s line %d is not valid JSON (%s): %r" % (source, i, exc, s[:60]))
        item = {}
        if isinstance(obj, str):
            item["text"] = obj
        elif isinstance(obj, dict):
            if isinstance(obj.get("messages"), list) and obj["messages"]:
                item["messages"] = obj["messages"]
            elif isinstance(obj.get("prompt"), str):
                item["text"] = obj["prompt"]
            elif isinstance(obj.get("text"), str):
                item["text"] = obj["text"]
            elif isinstance(obj.get("input_ids"), list):
                item["input_ids"] = obj["input_ids"]
            else:
                raise ValueError("%s line %d has none of prompt, text, messages or input_ids"
                                 % (source, i))
            for key in ("output_len", "max_tokens", "max_new_tokens"):
                if obj.get(key) is not None:
                    try:
                        item["output_len"] = int(obj[key])
                    except (TypeError, ValueError):
                        raise ValueError("%s line %d: %s must be an integer" % (source, i, key))
                    break
        else:
            raise ValueError("%s line %d must be a JSON object or string" % (source, i))
        prompts.append(item)
    if not prompts:
        raise ValueError("%s holds no prompts (empty file)" % (source,))
    return prompts


def build_payload(endpoint, prompt, output_len, temperature, ignore_eos, model=None):
    """Request body (bytes) for one prompt on the chosen endpoint."""
    n = int(prompt.get("output_len") or output_len)
    if endpoint == "generate":
        if "messages" in prompt:
            raise ValueError("a 'messages' prompt needs endpoint=chat (the generate endpoint has "
                             "no chat template)")
        body = {"sampling_params": {"max_new_tokens": n, "temperature": temperature,
                                    "ignore_eos": ignore_eos},
                "stream": True}
        if "input_ids" in prompt:
            body["input_ids"] = prompt["input_ids"]
        else:
            body["text"] = prompt["text"]
    elif endpoint == "completions":
        if "messages" in prompt:
            raise ValueError("a 'messages' prompt needs endpoint=chat")
        body = {"model": model or "default",
                "prompt": prompt["input_ids"] if "input_ids" in prompt else prompt["text"],
                "max_tokens": n, "temperature": temperature, "ignore_eos": ignore_eos,
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    elif endpoint == "chat":
        if "messages" in prompt:
            messages = prompt["messages"]
        elif "text" in prompt:
            messages = [{"role": "user", "content": prompt["text"]}]
        else:
            raise ValueError("endpoint=chat needs text prompts, not input_ids")
        body = {"model": model or "default", "messages": messages, "max_tokens": n,
                "temperature": temperature, "ignore_eos": ignore_eos, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    else:
        raise ValueError("unknown endpoint %r" % (endpoint,))
    return json.dumps(body, separators=(",", ":")).encode()


def prompts_needed(cfg, concurrency):
    """Measured requests per repeat of a level that is not bound by a duration."""
    if cfg.get("num_prompts"):
        return int(cfg["num_prompts"])
    # bench_serving's guidance: several times the concurrency, so ramp/drain are a small part
    return max(10, 5 * concurrency)


# ------------------------------------------------------------------ a level's payloads
def _random_payload(ep, cfg, ignore_eos, workload, seed, output_len, i):
    as_text = workload["prompt_format"] == "text"
    length = workload["words"] if as_text else cfg["input_len"]
    prompt = random_prompts(1, length, "%s-%d" % (seed, i), as_text)[0]
    return (build_payload(ep, prompt, output_len, cfg["temperature"], ignore_eos,
                          cfg.get("model")), output_len)


def _dataset_payload(ep, cfg, ignore_eos, prompt, cap=None):
    n = int(prompt.get("output_len") or cfg["output_len"])
    if cap is not None:
        n = min(n, cap)
    return (build_payload(ep, dict(prompt, output_len=n), n, cfg["temperature"], ignore_eos,
                          cfg.get("model")), n)


def _cycled(items, offset, i):
    return items[(i + offset) % len(items)]


def warmup_payloads(ep, cfg, c, rep, prompts, workload, n_warm):
    """The n_warm payloads of a repeat's warmup at concurrency c."""
    # the measured requests' shape (endpoint, prompt form, input length, ignore_eos);
    # only the output is capped at warmup_output_len
    wlen = min(cfg["output_len"], cfg["warmup_output_len"])
    ignore_eos = cfg["ignore_eos"]
    if prompts is None:
        wmake = functools.partial(_random_payload, ep, cfg, ignore_eos, workload,
                                  "warm-%d-%d-%d" % (cfg["seed"], rep, c), wlen)
        return [wmake(i) for i in range(n_warm)]
    # from the end of the list, away from the prompts this level measures first
    return [_dataset_payload(ep, cfg, ignore_eos, prompts[-1 - (i % len(prompts))], wlen)
            for i in range(n_warm)]


def measured_payloads(ep, cfg, c, rep, prompts, workload, count, bounded):
    """payload_for(i) of one repeat's measured requests (bounded: by a duration, not a count)."""
    ignore_eos = cfg["ignore_eos"]
    if prompts is None:
        make = functools.partial(_random_payload, ep, cfg, ignore_eos, workload,
                                 cfg["seed"] + 1000003 * rep + c, cfg["output_len"])
        # build payloads before the clock starts, so prompt generation is not measured
        # (a duration-bound level cannot know how many it needs: it builds them as it goes)
        return make if bounded else [make(i) for i in range(count)].__getitem__
    pre_all = [_dataset_payload(ep, cfg, ignore_eos, p) for p in prompts]
    return functools.partial(_cycled, pre_all, (rep * count) % len(pre_all))
