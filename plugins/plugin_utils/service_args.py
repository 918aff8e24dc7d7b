# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Filters that turn the service role's logical settings into an SGLang command line.

Why a filter and not template logic: the argv is the part that breaks when SGLang renames a flag
(0.5.23 dropped ``--cuda-graph-max-bs``), so it is built by one pure function that the contract
test feeds, for a matrix of settings, to the pinned release's own argument parser. The template
only joins the list.

Settings (a dict; keys absent or None are not rendered, so SGLang's default applies)::

    model_path, served_model_name, tp_size, host, port, kv_cache_dtype, mem_fraction_static,
    cuda_graph_max_bs, max_running_requests, mamba_full_memory_ratio, max_mamba_cache_size,
    context_length, attention_backend, trust_remote_code (bool), enable_linear_replayssm_spec
    (bool; the bare flag only when true), config_file (path of the SGLang ``--config`` YAML that holds the
    API key), speculative_algorithm, speculative_num_steps, speculative_eagle_topk,
    speculative_num_draft_tokens, speculative_draft_model_path, speculative_adaptive (bool; the bare
    flag only when true, with speculation on), speculative_adaptive_config (the per-load schedule, a
    dict of batch sizes to tiers, plugins/plugin_utils/spec_schedule.py; None or {} = SGLang's
    built-in one), speculative_adaptive_dir (where the schedule's file lives; rendered as the path of
    ``--speculative-adaptive-config``), extra_args (list of str), environment (dict; read by the
    checks only, never rendered here)

The release map gives, per logical key, the flag spelling of one SGLang release, e.g.
``{"cuda_graph_max_bs": "--cuda-graph-max-bs-decode", "tp_size": "--tp-size", ...}``
(roles/service/vars/sglang_releases.yml, generated from the real wheels).

Filters: sglang_service_args (settings, flags) -> argv list; sglang_service_spec (resolved
speculative settings); sglang_service_problems (list of what is wrong, empty when valid);
sglang_service_summary (one-line JSON of the logical settings, for the unit's comment);
sglang_service_adaptive_file (path and text of the schedule's file, {} when there is none);
sglang_systemd_exec (argv -> ExecStart= text); sglang_systemd_env (one Environment= word).

The node's own record of what it serves is kept by plugins/plugin_utils/service_record.py.
Controller-side library of plugins/filter/service.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re

from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only for running the pure functions without ansible
    class AnsibleFilterError(Exception):
        pass


# Logical key -> rendered as "flag value" (value keys) or as a bare flag (bool keys).
VALUE_KEYS = (
    "model_path",
    "served_model_name",
    "tp_size",
    "host",
    "port",
    "kv_cache_dtype",
    "mem_fraction_static",
    "cuda_graph_max_bs",
    "max_running_requests",
    "mamba_full_memory_ratio",
    "max_mamba_cache_size",
    "context_length",
    "attention_backend",
)
SPEC_KEYS = (
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_draft_model_path",
)
BOOL_KEYS = ("trust_remote_code", "enable_linear_replayssm_spec")
# The hybrid state pool's cap levers (a tuning run may choose them, like the two overrides
# above): the ratio of state memory to KV memory, the state slots outright, and ReplaySSM's
# spec-verify, which drops the per-draft-token intermediate states from the pool. Not set =
# SGLang's default (0.9, solved from memory, off).
LEVER_KEYS = ("mamba_full_memory_ratio", "max_mamba_cache_size", "enable_linear_replayssm_spec")
# The release's spelling of the levers (0.5.23 and 0.5.19 alike), to find them in extra_args.
LEVER_FLAGS = {"mamba_full_memory_ratio": "--mamba-full-memory-ratio", "max_mamba_cache_size": "--max-mamba-cache-size",
               "enable_linear_replayssm_spec": "--enable-linear-replayssm-spec"}
# SGLang's per-load schedule: the switch and the schedule (speculative/adaptive_spec_params.py).
# Not set = static speculation at speculative_num_steps.
ADAPTIVE_KEYS = ("speculative_adaptive", "speculative_adaptive_config")
ADAPTIVE_FLAGS = {"speculative_adaptive": "--speculative-adaptive",
                  "speculative_adaptive_config": "--speculative-adaptive-config"}

# Choices of SGLang 0.5.23 (srt/arg_groups/choices.py), checked before a unit is written so a typo
# fails the play instead of crash-looping the server with an argparse error.
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
ATTENTION_BACKENDS = (
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4",
    "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla",
    "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx",
    "ascend", "intel_xpu",
)

# SGLang lowers max_running_requests to this when any EAGLE/MTP/NGRAM/DFLASH speculation is on
# and the setting is unset ("Max running requests is reset to 48 for speculative decoding").
SPEC_DEFAULT_MAX_RUNNING_REQUESTS = 48

_ENV_REF = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BARE_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./${}-]+$")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _set(value):
    return value is not None and value != ""


INT_KEYS = ("tp_size", "port", "cuda_graph_max_bs", "max_running_requests", "max_mamba_cache_size",
            "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
FLOAT_KEYS = ("mem_fraction_static", "mamba_full_memory_ratio")
# Always rendered as a float, so a ratio given as 4 (YAML) and as 4.0 (a tuning run) is one unit
# text: no restart for the same setting.
FLOAT_ALWAYS = ("mamba_full_memory_ratio",)
_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off", "")


def normalize(settings):
    """Copy of ``settings`` with numeric strings of numeric keys made numbers.

    Extra vars given on the command line (``-e sglang_service_tp=4``) arrive as strings, and role
    argument validation checks them without converting the variables themselves.
    """
    out = dict(settings or {})
    for key in INT_KEYS:
        value = out.get(key)
        if isinstance(value, str) and re.match(r"^\s*[+-]?[0-9]+\s*$", value):
            out[key] = int(value)
    for key in FLOAT_KEYS:
        value = out.get(key)
        if isinstance(value, str):
            try:
                out[key] = float(value)
            except ValueError:
                pass
        elif key in FLOAT_ALWAYS and _is_int(value):
            out[key] = float(value)
    ctx = out.get("context_length")
    if isinstance(ctx, str) and re.match(r"^\s*[0-9]+\s*$", ctx):
        out["context_length"] = int(ctx)
    for key in BOOL_KEYS:
        value = out.get(key)
        if isinstance(value, str):
            word = value.strip().lower()
            if key in LEVER_KEYS and word not in _TRUE_WORDS + _FALSE_WORDS:
                continue  # left as given, so the checks name it instead of reading it as false
            out[key] = word in _TRUE_WORDS
    adaptive = out.get("speculative_adaptive")
    if isinstance(adaptive, str):
        word = adaptive.strip().lower()
        if word in _TRUE_WORDS + _FALSE_WORDS:
            out["speculative_adaptive"] = word in _TRUE_WORDS
    if "speculative_adaptive_config" in out:
        out["speculative_adaptive_config"] = spec_schedule.parse(out["speculative_adaptive_config"])
    return out


def sglang_service_spec(settings):
    """Resolved speculative settings: algorithm upper-cased, draft tokens derived when unset.

    Returns a dict with the five SPEC_KEYS (None where not set) plus ``enabled``. With no
    algorithm, speculation is off and the other speculative keys are ignored (all None).
    For topk 1 the draft token count is steps + 1 (SGLang forces that value anyway and logs an
    adjustment); for topk > 1 it cannot be derived and must be given.
    """
    settings = normalize(settings)
    algo = settings.get("speculative_algorithm")
    out = dict((key, None) for key in SPEC_KEYS)
    out["enabled"] = False
    if not _set(algo):
        return out
    out["enabled"] = True
    out["speculative_algorithm"] = str(algo).upper()
    steps = settings.get("speculative_num_steps")
    topk = settings.get("speculative_eagle_topk")
    draft = settings.get("speculative_num_draft_tokens")
    out["speculative_num_steps"] = steps
    out["speculative_draft_model_path"] = settings.get("speculative_draft_model_path") or None
    if steps is not None and topk is None:
        topk = 1  # what the operator means by "MTP with N steps"; SGLang's auto-choice is 1 too
    out["speculative_eagle_topk"] = topk
    if draft is None and _is_int(steps) and topk == 1:
        draft = steps + 1
    out["speculative_num_draft_tokens"] = draft
    return out


def sglang_service_problems(settings, flags=None, adaptive_default=None):
    """Human-readable problems with ``settings`` (empty list when they are valid).

    Ranges and consistency that argument_specs cannot express; each message says what to fix.
    ``flags`` (the release's flag map) and ``adaptive_default`` (the release's built-in schedule,
    roles/service/vars/sglang_releases.yml) let the per-load schedule be checked against the
    release; without them those checks are skipped.
    """
    settings = normalize(settings)
    problems = []

    def need_int(key, low, high=None, optional=True):
        value = settings.get(key)
        if value is None and optional:
            return None
        if not _is_int(value):
            problems.append("%s must be an integer, got %r" % (key, value))
            return None
        if value < low or (high is not None and value > high):
            rng = ">= %d" % low if high is None else "in %d..%d" % (low, high)
            problems.append("%s must be %s, got %d" % (key, rng, value))
            return None
        return value

    if not _set(settings.get("model_path")):
        problems.append("model_path must be set (a local directory or a Hugging Face repo id)")
    need_int("port", 1, 65535, optional=False)
    need_int("tp_size", 1)
    need_int("cuda_graph_max_bs", 1)
    need_int("max_running_requests", 1)
    ctx = settings.get("context_length")
    if ctx is not None and not (_is_int(ctx) and ctx >= 1) and not (
            isinstance(ctx, str) and re.match(r"^[0-9]+(\.[0-9]+)?([kKmMgG]i?)?$", ctx)):
        problems.append("context_length must be a positive integer or a size like 32k/128Ki, got %r" % (ctx,))
    mem = settings.get("mem_fraction_static")
    if mem is not None:
        if isinstance(mem, bool) or not isinstance(mem, (int, float)):
            problems.append("mem_fraction_static must be a number in (0, 1), got %r" % (mem,))
        elif not 0 < mem < 1:
            problems.append("mem_fraction_static must be in (0, 1) (exclusive), got %s" % mem)
    for key, choices in (("kv_cache_dtype", KV_CACHE_DTYPES), ("attention_backend", ATTENTION_BACKENDS)):
        value = settings.get(key)
        if _set(value) and value not in choices:
            problems.append("%s must be one of %s, got %r" % (key, ", ".join(choices), value))
    extra = settings.get("extra_args") or []
    words_ok = isinstance(extra, (list, tuple)) and all(
        isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in extra)
    if not words_ok:
        problems.append("extra_args must be a list of strings, one argv word each, got %r" % (extra,))
    config_file = settings.get("config_file")
    if _set(config_file) and not re.match(r"^/.*\.ya?ml$", str(config_file)):
        # SGLang's ConfigArgumentMerger refuses other suffixes; the unit has no working directory
        # worth relying on.
        problems.append("config_file must be an absolute path ending in .yaml or .yml, got %r" % (config_file,))
    problems.extend(_lever_problems(settings, extra if words_ok else []))
    problems.extend(_adaptive_problems(settings, extra if words_ok else [], flags, adaptive_default))

    if not _set(settings.get("speculative_algorithm")):
        return problems
    steps = need_int("speculative_num_steps", 1)
    topk = need_int("speculative_eagle_topk", 1)
    draft = need_int("speculative_num_draft_tokens", 1)
    if settings.get("speculative_num_steps") is None and (
            settings.get("speculative_eagle_topk") is not None or settings.get("speculative_num_draft_tokens") is not None):
        problems.append("speculative_num_steps must be set when eagle_topk or num_draft_tokens is "
                        "(SGLang only auto-chooses all three together)")
    if steps is None:
        return problems
    if topk is None and settings.get("speculative_eagle_topk") is None:
        topk = 1
    if topk == 1 and draft is not None and draft != steps + 1:
        problems.append("speculative_num_draft_tokens must be num_steps + 1 = %d when eagle_topk is 1 "
                        "(got %d; SGLang would silently override it): leave it unset to derive it"
                        % (steps + 1, draft))
    if topk is not None and topk > 1:
        if settings.get("speculative_num_draft_tokens") is None:
            problems.append("speculative_num_draft_tokens must be set when eagle_topk > 1 "
                            "(it cannot be derived; at most num_steps * topk + 1 = %d)" % (steps * topk + 1))
        elif draft is not None and draft > steps * topk + 1:
            problems.append("speculative_num_draft_tokens must be <= num_steps * eagle_topk + 1 = %d, got %d"
                            % (steps * topk + 1, draft))
    return problems


def _extra_value(extra, flag):
    """The value argparse would give ``flag`` from the argv words ``extra`` (the last one wins;
    ``--flag value`` and ``--flag=value``), None when absent; True for a bare switch."""
    found = None
    words = [str(w) for w in extra]
    for i, word in enumerate(words):
        if word == flag:
            found = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else True
        elif word.startswith(flag + "="):
            found = word[len(flag) + 1:]
    return found


def _var(key):
    return "%s (sglang_service_%s)" % (key, key)


def _lever_problems(settings, extra):
    """The cap levers against SGLang 0.5.23's rules, those the role can know before a start.

    ``mamba_full_memory_ratio``: the release has no range check (arg_groups/fields/schedule.py),
    but kv_cache_configurator.py _handle_max_mamba_cache gives the state pool
    budget * r / (1 + r), so r <= 0 leaves no state slot and the start dies with "Not enough GPU
    memory for hybrid (mamba/linear-attention) state cache". ``max_mamba_cache_size`` <= 0 is
    refused by the same function. ``enable_linear_replayssm_spec``: the preconditions of
    arg_groups/attention_hook.py handle_linear_attn_backend (texts quoted), plus speculation
    itself: without it the flag has no verify to replace, and _handle_max_mamba_cache sizes its
    ring from an unset --max-running-requests (a TypeError at start).
    """
    problems = []
    ratio = settings.get("mamba_full_memory_ratio")
    if ratio is not None:
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio):
            problems.append("%s must be a number > 0, got %r" % (_var("mamba_full_memory_ratio"), ratio))
        elif ratio <= 0:
            problems.append("%s must be > 0 (the state pool gets budget * r / (1 + r): %s leaves it no slot "
                            "and SGLang fails at start), got %s" % (_var("mamba_full_memory_ratio"), ratio, ratio))
    size = settings.get("max_mamba_cache_size")
    if size is not None:
        if not _is_int(size):
            problems.append("%s must be an integer >= 1, got %r" % (_var("max_mamba_cache_size"), size))
        elif size < 1:
            problems.append("%s must be >= 1 (SGLang refuses an empty state pool at start), got %d"
                            % (_var("max_mamba_cache_size"), size))
    replay = settings.get("enable_linear_replayssm_spec")
    if replay is not None and not isinstance(replay, bool):
        problems.append("%s must be true, false or null, got %r" % (_var("enable_linear_replayssm_spec"), replay))
        replay = None
    for key in LEVER_KEYS:
        if settings.get(key) is not None and _extra_value(extra, LEVER_FLAGS[key]) is not None:
            problems.append("%s is set and sglang_service_extra_args holds %s too (the later word would win "
                            "unseen by the record): remove it from sglang_service_extra_args"
                            % (_var(key), LEVER_FLAGS[key]))
    if replay:
        problems.extend(_replayssm_problems(settings, extra))
    return problems


def _adaptive_on(settings):
    """Whether the per-load schedule is served: the switch on and speculation on (without
    speculation, like the other speculative settings, it is not rendered)."""
    return settings.get("speculative_adaptive") is True and sglang_service_spec(settings)["enabled"]


def _adaptive_problems(settings, extra, flags, adaptive_default):
    """The per-load schedule against SGLang 0.5.23's rules (speculative/adaptive_spec_params.py,
    arg_groups/speculative_hook.py), each of which the release would meet only at start: a
    malformed file fails the start, a step count outside the schedule fails it ("is not in the
    adaptive config candidate_steps"), an algorithm or a switch it cannot serve under makes it
    fall back to static steps with a warning, which serves something else than the unit says."""
    var, cvar = "sglang_service_speculative_adaptive", spec_schedule.VAR
    adaptive = settings.get("speculative_adaptive")
    config = settings.get("speculative_adaptive_config")
    out = []
    if adaptive is not None and not isinstance(adaptive, bool):
        return ["%s must be true, false or null, got %r" % (var, adaptive)]
    out.extend(spec_schedule.problems(config, cvar))
    own = spec_schedule.canonical(config) is not None
    spec = sglang_service_spec(settings)
    if own and adaptive is not True and spec["enabled"]:
        out.append("%s is set but %s is %s: set %s: true to serve the schedule, or leave %s unset"
                   % (cvar, var, "false" if adaptive is False else "not set", var, cvar))
    if not _adaptive_on(settings):
        return out
    if isinstance(flags, dict):
        for key in ADAPTIVE_KEYS if own else ADAPTIVE_KEYS[:1]:
            if not flags.get(key):
                out.append("%s: the release's flag map (roles/service/vars/sglang_releases.yml) has no %s, so this "
                           "SGLang release cannot serve a per-load schedule: set %s: false or pin a release that has "
                           "%s" % (var, key, var, ADAPTIVE_FLAGS[key]))
    algo, topk = spec["speculative_algorithm"], spec["speculative_eagle_topk"]
    if algo not in spec_schedule.ALGORITHMS:
        out.append("%s needs sglang_service_speculative_algorithm EAGLE, EAGLE3 or NEXTN (SGLang falls back to "
                   "static steps with 'speculative_algorithm=%s (only EAGLE/EAGLE3 are supported)'), got %s: "
                   "set %s: false for %s" % (var, algo, algo, var, algo))
    if topk not in (None, 1):
        out.append("%s needs sglang_service_speculative_eagle_topk 1 (SGLang falls back to static steps with "
                   "'speculative_eagle_topk=%s (only topk=1 is supported)'): set eagle_topk 1 or %s: false"
                   % (var, topk, var))
    for flag, reason in spec_schedule.FALLBACK_FLAGS:
        if _extra_value(extra, flag) not in (None, "false", "False", "0"):
            out.append("%s: sglang_service_extra_args holds %s, under which SGLang serves static steps instead "
                       "('speculative_adaptive disabled: %s'): remove it or set %s: false" % (var, flag, reason, var))
    for key, flag in ADAPTIVE_FLAGS.items():
        if _extra_value(extra, flag) is not None:
            out.append("%s is set and sglang_service_extra_args holds %s too (the later word would win unseen by "
                       "the record): remove it from sglang_service_extra_args" % (_var(key), flag))
    union = spec_schedule.candidate_union(config) if own else (
        spec_schedule.candidate_union(adaptive_default) if adaptive_default else None)
    steps = spec["speculative_num_steps"]
    if union is not None and _is_int(steps) and steps not in union:
        out.append("sglang_service_speculative_num_steps=%d is not among the schedule's candidate steps %s (%s): "
                   "SGLang refuses to start ('--speculative-num-steps=%d is not in the adaptive config "
                   "candidate_steps %s. Pass one of those values.'): give one of %s"
                   % (steps, union, "of %s" % cvar if own else "SGLang's default schedule", steps, union,
                      [s for s in union if s > 0] or "them, with a step count >= 1 in the schedule"))
    return out


# arg_groups/attention_hook.py handle_linear_attn_backend (0.5.23): the decode backends the
# spec-verify runs on, and the ragged verify modes it accepts (speculative/ragged_verify.py).
REPLAYSSM_SPEC_DECODE = ("triton", "flashinfer")
RAGGED_VERIFY_MODES = ("static", "cap-accept", "compact")


def _replayssm_problems(settings, extra):
    var = _var("enable_linear_replayssm_spec")
    out = []
    spec = sglang_service_spec(settings)
    if not spec["enabled"]:
        out.append("%s needs speculative decoding on (sglang_service_speculative_algorithm): it replaces the "
                   "speculative verify's state snapshots, and without speculation SGLang sizes its ring from an "
                   "unset --max-running-requests and fails at start" % var)
        return out
    topk = spec["speculative_eagle_topk"]
    if topk not in (None, 1):
        out.append("%s requires a linear draft chain (--speculative-eagle-topk in {None, 1}): set "
                   "sglang_service_speculative_eagle_topk to 1, got %r" % (var, topk))
    decode = _extra_value(extra, "--linear-attn-decode-backend")
    inherited = _extra_value(extra, "--linear-attn-backend") or "triton"
    if decode is None:
        decode = "triton" if inherited == "flashkda" else inherited  # FlashKDA is prefill-only
    if decode not in REPLAYSSM_SPEC_DECODE:
        out.append("%s requires the triton or flashinfer linear-attn decode backend, got "
                   "--linear-attn-decode-backend=%r in sglang_service_extra_args" % (var, decode))
    env = settings.get("environment") if isinstance(settings.get("environment"), dict) else {}
    mode = str(env.get("SGLANG_RAGGED_VERIFY_MODE", "static"))
    if mode not in RAGGED_VERIFY_MODES:
        out.append("%s: sglang_service_environment has SGLANG_RAGGED_VERIFY_MODE=%r, which SGLang refuses "
                   "(expected one of %s)" % (var, mode, ", ".join(RAGGED_VERIFY_MODES)))
    elif mode != "static":
        verify = _extra_value(extra, "--linear-attn-verify-backend")
        if verify is None and decode == "flashinfer":
            verify = "flashinfer"
        if spec["speculative_algorithm"] not in ("DSPARK", "DFLASH") or verify not in ("triton", "nv_cutedsl"):
            out.append("%s with SGLANG_RAGGED_VERIFY_MODE=%s requires the KDA fold-every-commit family "
                       "(DSPARK/DFLASH) and a ring-writing verify kernel (--linear-attn-verify-backend triton or "
                       "nv_cutedsl); got algorithm=%r, verify=%r: use SGLANG_RAGGED_VERIFY_MODE=static"
                       % (var, mode, spec["speculative_algorithm"], verify))
    if _extra_value(extra, "--disaggregation-mode") == "prefill":
        out.append("%s is not supported on a PD prefill server (--disaggregation-mode prefill in "
                   "sglang_service_extra_args): the prefill server never runs spec verify" % var)
    if _extra_value(extra, "--enable-linear-replayssm") is not None:
        out.append("%s and --enable-linear-replayssm (in sglang_service_extra_args) are mutually exclusive: "
                   "remove one" % var)
    return out


# systemd's longest unit name (UNIT_NAME_MAX, 256 with the NUL), and the longest unit this role names
# after the server: sglang-<name>-watchdog.service.
UNIT_NAME_MAX = 255
_LONGEST_UNIT = "sglang-%s-watchdog.service"


def sglang_service_name_problems(name):
    """Problems with the server name ``name`` (sglang_service_name), which names the unit
    (sglang-<name>.service), its directories (<config_dir>/<name>, <status_root>/<name>) and files;
    empty when usable. Checked before the role creates anything, so a refused name leaves nothing
    behind: letters, digits, '_', '.', '-' only, not '.' or '..' (a path of its own), and short
    enough for systemd to load its longest unit."""
    if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9_.-]+$", name):
        return ["sglang_service_name may only hold letters, digits, '_', '.', '-' (got %r)" % (name,)]
    if name in (".", ".."):
        return ["sglang_service_name %r is a path, not a name: give a name such as qwen" % name]
    longest = len(_LONGEST_UNIT % name)
    if longest > UNIT_NAME_MAX:
        return ["sglang_service_name is %d characters long; at most %d fit in systemd's unit names (%s is %d "
                "characters, systemd allows %d): give a shorter name" % (
                    len(name), UNIT_NAME_MAX - len(_LONGEST_UNIT % ""), _LONGEST_UNIT % "<name>", longest,
                    UNIT_NAME_MAX)]
    return []


# The wedge watchdog's numbers (sglang_service_watchdog_*): the least each may be. A zero interval
# would make systemd refuse the timer (OnUnitInactiveSec=0 never fires again), a zero deadline or
# window can never see a token or a restart; zero restarts means "stop at the first wedge".
WATCHDOG_MINIMUM = (("interval", 1), ("deadline", 1), ("tokens", 1), ("max_restarts", 0), ("window", 1))


def sglang_service_watchdog_problems(watchdog):
    """Problems with the wedge watchdog's numbers ``watchdog`` ({interval, deadline, tokens,
    max_restarts, window}, as the role variables sglang_service_watchdog_<key> give them; numeric
    strings from ``-e`` count as numbers); empty when they are usable."""
    if not isinstance(watchdog, dict):
        return ["the watchdog settings must be a dict, got %r" % (watchdog,)]
    problems = []
    values = {}
    for key, low in WATCHDOG_MINIMUM:
        var = "sglang_service_watchdog_%s" % key
        value = watchdog.get(key)
        if isinstance(value, str) and re.match(r"^\s*[+-]?[0-9]+\s*$", value):
            value = int(value)
        if not _is_int(value):
            problems.append("%s must be a whole number of %s, got %r" % (
                var, "seconds" if key in ("interval", "deadline", "window") else key.replace("_", " "), value))
            continue
        if value < low:
            problems.append("%s must be >= %d, got %d%s" % (
                var, low, value, " (0 would never check again)" if key == "interval" else ""))
            continue
        values[key] = value
    if "interval" in values and "window" in values and values["window"] < values["interval"]:
        problems.append("sglang_service_watchdog_window (%d s) must be at least sglang_service_watchdog_interval "
                        "(%d s): a shorter window never holds two checks, so it never counts two restarts"
                        % (values["window"], values["interval"]))
    return problems


def _flag(flags, key):
    try:
        flag = flags[key]
    except (KeyError, TypeError):
        raise AnsibleFilterError(
            "sglang_service_args: the release flag map has no entry for %r, so this SGLang release "
            "cannot be told about it: unset the setting or add the flag to "
            "roles/service/vars/sglang_releases.yml" % key)
    if not flag or not str(flag).startswith("--"):
        raise AnsibleFilterError("sglang_service_args: flag for %r must start with '--', got %r" % (key, flag))
    return str(flag)


def _word(value):
    if isinstance(value, bool):
        raise AnsibleFilterError("sglang_service_args: boolean %r where a value was expected" % value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def sglang_service_adaptive_file(settings):
    """Where the per-load schedule's file goes and its text: ``{"path", "content", "name"}``,
    ``{}`` when the unit serves no schedule of its own (static speculation, or SGLang's built-in
    schedule). The name carries the schedule's digest, so the unit's ExecStart names the schedule
    it serves: a restored older unit still finds its own file."""
    settings = normalize(settings)
    if not _adaptive_on(settings):
        return {}
    name = spec_schedule.file_name(settings.get("speculative_adaptive_config"))
    if name is None:
        return {}
    folder = settings.get("speculative_adaptive_dir")
    if not _set(folder) or not str(folder).startswith("/"):
        raise AnsibleFilterError("sglang_service_adaptive_file: speculative_adaptive_dir must be an absolute "
                                 "directory, got %r" % (folder,))
    return {"path": "%s/%s" % (str(folder).rstrip("/"), name), "name": name,
            "content": spec_schedule.text(settings.get("speculative_adaptive_config"))}


def sglang_service_args(settings, flags):
    """The argv (list of str) for ``settings`` with the flag names in ``flags``."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError("sglang_service_args: settings must be a dict, got %s" % type(settings).__name__)
    if not isinstance(flags, dict):
        raise AnsibleFilterError("sglang_service_args: flags must be a dict (the release map entry), got %s"
                                 % type(flags).__name__)
    problems = sglang_service_problems(settings, flags)
    settings = normalize(settings)
    if problems:
        raise AnsibleFilterError("sglang_service_args: invalid settings: " + "; ".join(problems))
    argv = []
    for key in VALUE_KEYS:
        value = settings.get(key)
        if _set(value):
            argv += [_flag(flags, key), _word(value)]
    spec = sglang_service_spec(settings)
    if spec["enabled"]:
        for key in SPEC_KEYS:
            if _set(spec[key]):
                argv += [_flag(flags, key), _word(spec[key])]
    for key in BOOL_KEYS:
        if settings.get(key):
            argv.append(_flag(flags, key))
    if _adaptive_on(settings):
        argv.append(_flag(flags, "speculative_adaptive"))
        schedule = sglang_service_adaptive_file(settings)
        if schedule:
            argv += [_flag(flags, "speculative_adaptive_config"), schedule["path"]]
    config_file = settings.get("config_file")
    if _set(config_file):
        # The API key stays out of argv (and /proc/<pid>/cmdline): prepare_server_args
        # (srt/server_args.py) sees the exact word "--config" and its ConfigArgumentMerger
        # (srt/utils/server_args_config_parser.py) puts the file's options before the command
        # line, so a flag given here still wins. "--config=PATH" would be parsed but never merged.
        argv += [_flag(flags, "config"), str(config_file)]
    argv += [_word(a) for a in (settings.get("extra_args") or [])]
    return argv


def _levers(settings):
    """The cap levers that are set, in the form SGLang runs them: the ratio a float, the switch
    only when on (false and null render the same argv, so they are one setting)."""
    out = {}
    for key in LEVER_KEYS:
        value = settings.get(key)
        if key in BOOL_KEYS:
            value = True if value is True else None
        if value is not None:
            out[key] = value
    return out


def sglang_service_summary(settings):
    """The logical settings as one-line JSON, rendered as a comment in the unit so tools (rollout,
    mtp_tune) can read back what a unit runs without parsing flags of a given release."""
    settings = normalize(settings)
    spec = sglang_service_spec(settings)
    summary = {
        "speculative_algorithm": spec["speculative_algorithm"],
        "speculative_num_steps": spec["speculative_num_steps"],
        "speculative_eagle_topk": spec["speculative_eagle_topk"],
        "speculative_num_draft_tokens": spec["speculative_num_draft_tokens"],
    }
    for key in ("tp_size", "kv_cache_dtype", "mem_fraction_static", "cuda_graph_max_bs", "context_length",
                "attention_backend"):
        summary[key] = settings.get(key)
    mrr = settings.get("max_running_requests")
    summary["max_running_requests"] = mrr
    summary["max_running_requests_effective"] = (
        mrr if mrr is not None else (SPEC_DEFAULT_MAX_RUNNING_REQUESTS if spec["enabled"] else None))
    # Only when set: a unit without levers keeps the comment it had before they existed, so an
    # upgrade of the collection restarts no server.
    for key, value in _levers(settings).items():
        summary[key] = value
    # Likewise only when served: the schedule itself (null = SGLang's built-in one), so the unit
    # says what it serves without its file.
    if _adaptive_on(settings):
        summary["speculative_adaptive"] = True
        summary["speculative_adaptive_config"] = spec_schedule.canonical(settings.get("speculative_adaptive_config"))
    return json.dumps(summary, sort_keys=True, separators=(",", ":"))


def _systemd_escape(text):
    # %-specifiers are expanded in every ExecStart/Environment word; $ only in ExecStart.
    return text.replace("%", "%%")


def sglang_systemd_exec(argv):
    """Join argv words into a systemd ExecStart= command line.

    Words are double-quoted when they hold anything but plain characters; ``%`` becomes ``%%``
    and ``$`` becomes ``$$`` so systemd passes them through literally, except a word that is
    exactly ``${NAME}``, which systemd replaces by that variable (from Environment/EnvironmentFile)
    as one word.
    """
    words = []
    for raw in argv:
        word = str(raw)
        if _ENV_REF.match(word):
            words.append(word)
            continue
        if "\n" in word or "\r" in word:
            raise AnsibleFilterError("sglang_systemd_exec: argv words cannot contain newlines: %r" % word)
        word = _systemd_escape(word).replace("$", "$$")
        if word and _BARE_WORD.match(word) and "\\" not in word:
            words.append(word)
        else:
            words.append('"%s"' % word.replace("\\", "\\\\").replace('"', '\\"'))
    return " ".join(words)


def sglang_systemd_env(name, value):
    """One ``Environment=`` assignment, quoted for systemd: ``"NAME=value"``."""
    name = str(name)
    if not _ENV_NAME.match(name):
        raise AnsibleFilterError("sglang_systemd_env: %r is not a valid environment variable name" % name)
    if isinstance(value, bool):
        value = "1" if value else "0"
    text = "%s=%s" % (name, value)
    if "\n" in text:
        raise AnsibleFilterError("sglang_systemd_env: the value of %s contains a newline" % name)
    return '"%s"' % _systemd_escape(text).replace("\\", "\\\\").replace('"', '\\"')
