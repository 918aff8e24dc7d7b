"""The SGLang 0.5.23 command line, as far as the simulator needs it.

Option strings, types, choices, defaults and nargs follow the release's own field
definitions (sglang/srt/arg_groups/fields/*.py and server_args.add_cli_args):
the parser is a plain ``argparse.ArgumentParser(prog="sglang serve")``, so unique
prefixes are accepted and ``--cuda-graph-max-bs`` is an ambiguous prefix of
``--cuda-graph-max-bs-decode`` / ``--cuda-graph-max-bs-prefill``.

Resolution (auto memory settings, speculative parameters) follows
arg_groups/memory_hook.py and arg_groups/speculative_hook.py.
"""

import argparse
import json
import os
import re
import sys
from decimal import Decimal

FLAGS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                          "sglang_0_5_23_flags.json")
IGNORED_PREFIX = "_ignored_"

KV_CACHE_DTYPE_CHOICES = [
    "auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16",
]
DTYPE_CHOICES = ["auto", "half", "float16", "bfloat16", "float", "float32"]
ATTENTION_BACKEND_CHOICES = [
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed",
    "fa3", "fa4", "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla",
    "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "hpc_ops", "minicpm_flashattn",
    "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
]
LOAD_FORMAT_CHOICES = [
    "auto", "pt", "safetensors", "instanttensor", "npcache", "dummy", "sharded_state",
    "presharded", "gguf", "expert_pack", "bitsandbytes", "mistral", "layered", "flash_rl",
    "remote", "remote_instance", "fastsafetensors", "private", "runai_streamer",
]
REASONING_PARSER_NAMES = [
    "apertus2509", "beam", "deepseek-r1", "deepseek-v3", "deepseek-v4", "deepseek-v41",
    "dots", "glm45", "ling3", "hunyuan", "gpt-oss", "k2_horizon", "kimi", "kimi_k2",
    "kimi_k3", "mimo", "muse", "poolside_v1", "qwen3", "qwen3-thinking", "minimax",
    "minimax-append-think", "minimax-m3", "nanbeige", "step3", "step3p5", "mistral",
    "nemotron_3", "granite_thinking_parser", "interns1", "gemma4", "inkling", "iquest_q1",
    "cohere_command4", "gigachat35", "response_template",
]
TOOL_CALL_PARSER_NAMES = [
    "apertus2509", "beam", "cohere_command4", "deepseekv3", "deepseekv31", "deepseekv32",
    "deepseekv4", "deepseekv41", "dots", "glm", "glm45", "glm47", "gpt-oss", "k2_horizon",
    "kimi_k2", "kimi_k3", "lfm2", "ling3", "llama3", "mimo", "minicpm5", "mistral", "muse",
    "poolside_v1", "pythonic", "qwen", "qwen25", "qwen3_coder", "spark25", "step3",
    "step3p5", "minimax-m2", "minimax-m3", "nanbeige", "trinity", "interns1", "hermes",
    "hunyuan", "gigachat3", "gigachat35", "gemma4", "inkling", "iquest_q1",
    "response_template",
]
MAMBA_SSM_DTYPE_CHOICES = ["float32", "bfloat16", "float16"]
# Built-in names accepted by SpeculativeAlgorithm.from_string (upper-cased first).
SPECULATIVE_ALGORITHMS = [
    "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO",
]
# Algorithms that draft with a model whose cost/acceptance the sim models like MTP.
_EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")


def human_readable_int(value):
    """Integers with SI (k, M, G, T) or IEC (Ki, Mi, Gi, Ti) suffixes, as SGLang takes them."""
    value = value.strip()
    si = {"k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}
    iec = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    "Decimals are not allowed with IEC suffixes like '%s'. Use an integer IEC "
                    "value such as '%d%s', or an SI value such as '%s%s'."
                    % (suffix, int(Decimal(number)), suffix, number, suffix[0])
                )
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "Invalid integer value: '%s'. Use a plain integer, SI suffixes (1k, 1M), or IEC "
            "suffixes (1Ki, 1Mi). Suffixes are case-sensitive." % value
        )


class _DeprecatedStoreTrue(argparse.Action):
    """Like SGLang's DeprecatedStoreTrueAction: stores True and warns."""

    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True,
                 default=False, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default,
                         **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        replacement = " Use '%s' instead." % self.new_flag if self.new_flag else ""
        deprecations = getattr(namespace, "_deprecations", None)
        if deprecations is None:
            deprecations = []
            setattr(namespace, "_deprecations", deprecations)
        deprecations.append(
            "'%s' is deprecated and will be removed in a future release.%s"
            % (option_string, replacement)
        )
        setattr(namespace, self.dest, True)


def build_parser():
    """The simulator's CLI: a subset of ``sglang serve`` with the same option specs."""
    p = argparse.ArgumentParser(prog="sglang serve")
    modeled = []

    def add(*names, **kwargs):
        modeled.append((names, kwargs))
    # Model and tokenizer
    add("--model-path", "--model", type=str, required=True, dest="model_path",
        help="The path of the model weights. This can be a local folder or a Hugging Face repo ID.")
    add("--tokenizer-path", type=str, default=None, help="The path of the tokenizer.")
    add("--load-format", type=str, choices=LOAD_FORMAT_CHOICES, default="auto",
        help="The format of the model weights to load.")
    add("--trust-remote-code", action="store_true", default=False,
        help="Whether or not to allow for custom models defined on the Hub in their own modeling files.")
    add("--context-length", type=human_readable_int, default=None,
        help="The model's maximum context length.")
    add("--dtype", type=str, choices=DTYPE_CHOICES, default="auto",
        help="Data type for model weights and activations.")
    add("--kv-cache-dtype", type=str, choices=KV_CACHE_DTYPE_CHOICES, default="auto",
        help="Data type for kv cache storage.")
    # HTTP server
    add("--host", type=str, default="127.0.0.1", help="The host of the HTTP server.")
    add("--port", type=int, default=30000, help="The port of the HTTP server.")
    add("--skip-server-warmup", action="store_true", default=False, help="If set, skip warmup.")
    add("--served-model-name", type=str, default=None,
        help="Override the model name returned by the v1/models endpoint in OpenAI API server.")
    add("--api-key", type=str, default=None,
        help="Set API key of the server. It is also used in the OpenAI API compatible server.")
    add("--reasoning-parser", type=str, choices=["auto"] + REASONING_PARSER_NAMES, default=None,
        help="Specify the parser for reasoning models.")
    add("--tool-call-parser", type=str, choices=["auto"] + TOOL_CALL_PARSER_NAMES, default=None,
        help="Specify the parser for handling tool-call interactions.")
    # Memory and scheduling
    add("--mem-fraction-static", type=float, default=None,
        help="The fraction of the memory used for static allocation (model weights and KV cache memory pool).")
    add("--max-running-requests", type=int, default=None,
        help="The maximum number of running requests.")
    add("--max-total-tokens", type=human_readable_int, default=None,
        help="The maximum number of tokens in the memory pool.")
    add("--chunked-prefill-size", type=int, default=None,
        help="The maximum number of tokens in a chunk for the chunked prefill.")
    add("--page-size", type=int, default=None, help="The number of tokens in a page.")
    add("--disable-radix-cache", action="store_true", default=False,
        help="Disable RadixAttention for prefix caching.")
    # Parallelism
    add("--tp-size", "--tensor-parallel-size", type=int, default=1, dest="tp_size",
        help="The tensor parallelism size.")
    # Kernels and CUDA graphs
    add("--attention-backend", type=str, choices=ATTENTION_BACKEND_CHOICES, default=None,
        help="Choose the kernels for attention layers.")
    add("--mamba-ssm-dtype", type=str, choices=MAMBA_SSM_DTYPE_CHOICES, default=None,
        help="The data type of the SSM states in mamba cache.")
    add("--cuda-graph-max-bs-decode", type=int, default=None,
        help="Maximum batch size captured for the decode cuda graph.")
    add("--cuda-graph-max-bs-prefill", type=int, default=None,
        help="Maximum batch size captured for the prefill cuda graph.")
    add("--disable-cuda-graph", action=_DeprecatedStoreTrue,
        new_flag="--cuda-graph-backend-{decode,prefill}=disabled",
        help="Deprecated. Use --cuda-graph-backend-{decode,prefill}=disabled instead.")
    # Speculative decoding
    add("--speculative-algorithm", type=str, default=None,
        help="Speculative algorithm. Builtins: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO.")
    add("--speculative-draft-model-path", "--speculative-draft-model", type=str, default=None,
        dest="speculative_draft_model_path",
        help="The path of the draft model weights. This can be a local folder or a Hugging Face repo ID.")
    add("--speculative-num-steps", type=int, default=None,
        help="The number of steps sampled from draft model in Speculative Decoding.")
    add("--speculative-eagle-topk", type=int, default=None,
        help="The number of tokens sampled from the draft model in eagle2 each step.")
    add("--speculative-num-draft-tokens", type=int, default=None,
        help="The number of tokens sampled from the draft model in Speculative Decoding.")
    # Observability / runtime
    add("--enable-metrics", action="store_true", default=False, help="Enable log prometheus metrics.")
    add("--log-level", type=str, default="info", help="The logging level of all loggers.")
    add("--watchdog-timeout", type=float, default=300,
        help="Set watchdog timeout in seconds.")
    _register(p, modeled)
    return p


def real_flags():
    """The release's own arguments (names, dest, nargs), generated from its parser."""
    with open(FLAGS_FILE) as fh:
        return json.load(fh)["arguments"]


def _register(parser, modeled):
    """Add arguments in the real release's order: modeled ones with their full spec, every
    other real flag with its arity only (accepted, ignored with a warning).

    So a unit written for a real node starts on the sim, and abbreviations, ambiguity
    errors and usage order are those of the real parser (which knows ~530 flags).
    """
    by_name = {}
    for names, kwargs in modeled:
        for n in names:
            by_name[n] = (names, kwargs)
    done = set()
    for arg in real_flags():
        hit = next((by_name[n] for n in arg["names"] if n in by_name), None)
        if hit is not None:
            if hit[0] not in done:
                parser.add_argument(*hit[0], **hit[1])
                done.add(hit[0])
            continue
        dest = IGNORED_PREFIX + arg["dest"]
        if arg["nargs"] == 0:
            action = parser.add_argument(*arg["names"], dest=dest, action="store_true",
                                         default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        else:
            action = parser.add_argument(*arg["names"], dest=dest, nargs=arg["nargs"], type=str,
                                         default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        action.sim_ignored = True
    for names, kwargs in modeled:  # (none expected: the contract test checks)
        if names not in done:
            parser.add_argument(*names, **kwargs)


class ArgsError(Exception):
    """A setting SGLang rejects after parsing (its ValueError/AssertionError)."""

    def __init__(self, exc_type, message, hint=None):
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message
        self.hint = hint


def capture_batch_sizes(max_bs, speculative):
    """Decode CUDA-graph batch sizes (arg_groups/cuda_graph_hook.py)."""
    if not speculative:
        bs = ([1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16))
              + list(range(512, max_bs + 1, 32)))
    else:
        bs = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
              + list(range(72, 257, 8)) + list(range(272, max_bs + 1, 16)))
    bs = [b for b in bs if b <= max_bs]
    if max_bs not in bs:
        bs.append(max_bs)
    return bs


def auto_memory_settings(gpu_mem_mib, tp_size, chunked_prefill_size, decode_max_bs,
                         max_running_requests, disable_cuda_graph):
    """(chunked_prefill_size, decode_max_bs, mem_fraction_static) per memory_hook.py.

    The fraction is (gpu_mem - reserved)/gpu_mem with reserved (MB) = 512 +
    1.5*activation_tokens + tp/8*1024 + 2*decode_max_bs + 8*len(prefill graph bs),
    floored at 10 GB on GPUs over 60 GB. There is no speculative term.
    """
    max_bs_default = decode_max_bs is None
    if gpu_mem_mib < 20 * 1024:
        cps, bs = 2048, 8
    elif gpu_mem_mib < 35 * 1024:
        cps, bs = 4096, (48 if tp_size < 4 else 160)
    elif gpu_mem_mib < 60 * 1024:
        cps, bs = 4096, (32 if tp_size < 4 else 160)
    elif gpu_mem_mib < 160 * 1024:
        cps, bs = 8192, (256 if tp_size < 4 else 512)
    else:
        cps, bs = 16384, 512
    if chunked_prefill_size is None:
        chunked_prefill_size = cps
    if decode_max_bs is None:
        decode_max_bs = bs
    if max_bs_default and max_running_requests is not None and decode_max_bs > max_running_requests:
        decode_max_bs = max_running_requests
    activation_tokens = max(chunked_prefill_size if chunked_prefill_size > 0 else 16384, 2048)
    reserved = 512 + activation_tokens * 1.5 + tp_size / 8 * 1024
    if not disable_cuda_graph:
        reserved += decode_max_bs * 2
        # Prefill graph batch sizes: token buckets up to chunked_prefill_size.
        n_prefill_bs = len(_prefill_buckets(chunked_prefill_size))
        reserved += n_prefill_bs * 8
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    frac = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
    return chunked_prefill_size, decode_max_bs, frac


def _prefill_buckets(max_tokens):
    out, b = [], 16
    while b < max_tokens:
        out.append(b)
        b = b * 2 if b < 1024 else b + 1024
    out.append(max_tokens)
    return out


def resolve(ns, gpu_mem_mib):
    """Resolve a parsed namespace like SGLang's hooks. Returns (args dict, warnings).

    Raises ArgsError for settings the real server rejects during argument resolution.
    """
    a = dict(vars(ns))
    warnings = ["\033[1;33m%s\033[0m" % m for m in a.pop("_deprecations", [])]
    ignored = sorted(k[len(IGNORED_PREFIX):] for k in a if k.startswith(IGNORED_PREFIX))
    for k in list(a):
        if k.startswith(IGNORED_PREFIX):
            del a[k]
    if ignored:
        warnings.append("sglang_sim: accepted but not modeled (no effect on the simulation): %s"
                        % ", ".join("--" + k.replace("_", "-") for k in ignored))
    if a["tp_size"] < 1:
        raise ArgsError("ValueError", "tp_size must be >= 1, got %d" % a["tp_size"])
    if a["mem_fraction_static"] is not None and not 0 < a["mem_fraction_static"] < 1:
        raise ArgsError(
            "ValueError",
            "mem_fraction_static must be in (0, 1), got %s" % a["mem_fraction_static"])
    user_max_bs = a["cuda_graph_max_bs_decode"]
    cps, max_bs, frac = auto_memory_settings(
        gpu_mem_mib, a["tp_size"], a["chunked_prefill_size"], a["cuda_graph_max_bs_decode"],
        a["max_running_requests"], a["disable_cuda_graph"])
    a["chunked_prefill_size"] = cps
    a["cuda_graph_max_bs_decode"] = max_bs
    if a["mem_fraction_static"] is None:
        a["mem_fraction_static"] = frac
    a["_user_cuda_graph_max_bs"] = user_max_bs

    algo = a["speculative_algorithm"]
    if algo is not None:
        upper = algo.upper()
        if upper not in SPECULATIVE_ALGORITHMS:
            raise ArgsError("ValueError", "Unknown speculative algorithm name: %s" % algo)
        if upper == "NEXTN":
            upper = "EAGLE"
        a["speculative_algorithm"] = upper
        if upper in ("NGRAM", "DFLASH", "DSPARK", "UNO"):
            # These need draft machinery the sim does not model; refuse honestly.
            raise ArgsError(
                "NotImplementedError",
                "sglang_sim models EAGLE/EAGLE3/NEXTN/STANDALONE speculative decoding only, "
                "not %s" % upper)
        if a["max_running_requests"] is None:
            a["max_running_requests"] = 48
            warnings.append(
                "Max running requests is reset to 48 for speculative decoding. You can "
                "override this by explicitly setting --max-running-requests.")
        if a["speculative_num_steps"] is None:
            if a["speculative_eagle_topk"] is not None or a["speculative_num_draft_tokens"] is not None:
                raise ArgsError(
                    "AssertionError", "",
                    hint="speculative_num_steps is unset, so speculative_eagle_topk and "
                         "speculative_num_draft_tokens must be unset too (auto params)")
            a["speculative_num_steps"], a["speculative_eagle_topk"], a["speculative_num_draft_tokens"] = 3, 1, 4
        if a["speculative_num_steps"] < 1:
            raise ArgsError("ValueError", "speculative_num_steps must be positive, got %d"
                            % a["speculative_num_steps"])
        if a["speculative_eagle_topk"] is None:
            a["speculative_eagle_topk"] = 1
        if a["speculative_eagle_topk"] < 1:
            raise ArgsError("ValueError", "speculative_eagle_topk must be positive, got %d"
                            % a["speculative_eagle_topk"])
        if a["attention_backend"] == "trtllm_mha" and a["speculative_eagle_topk"] > 1:
            raise ArgsError("ValueError",
                            "trtllm_mha backend only supports topk = 1 for speculative decoding.")
        if a["speculative_num_draft_tokens"] is None:
            a["speculative_num_draft_tokens"] = a["speculative_num_steps"] + 1
        if (a["speculative_eagle_topk"] == 1
                and a["speculative_num_draft_tokens"] != a["speculative_num_steps"] + 1):
            warnings.append(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                "speculative_eagle_topk == 1")
            a["speculative_num_draft_tokens"] = a["speculative_num_steps"] + 1
    else:
        for name in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
            a[name] = None
    if a["max_running_requests"] is not None and a["max_running_requests"] < 1:
        raise ArgsError("ValueError", "max_running_requests must be positive, got %d"
                        % a["max_running_requests"])
    if a["served_model_name"] is None:
        a["served_model_name"] = a["model_path"]
    if a["tokenizer_path"] is None:
        a["tokenizer_path"] = a["model_path"]
    return a, warnings


def parse(argv=None):
    """Parse like ``prepare_server_args``: argparse errors exit 2 with its message."""
    return build_parser().parse_args(sys.argv[1:] if argv is None else argv)
