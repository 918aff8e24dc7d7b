# -*- coding: utf-8 -*-
# Copyright: (c) 2026, blackwell.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""SGLang's per-load speculative schedule (``--speculative-adaptive-config``) as pure functions.

The schedule is a mapping of batch sizes to tiers; SGLang routes each decode batch (padded to
its CUDA-graph size) to the tier with the largest key <= that size and moves the tier's step
count among its ``candidate_steps`` by an EMA of the accept length
(speculative/adaptive_spec_params.py, 0.5.23 and 0.5.19 alike: AdaptiveSpeculativeParams,
AdaptiveStepSlot).

What the release accepts (``_load_adaptive_config``): keys that are digit strings become tiers,
any other key is skipped (and merged into every tier's settings); each tier needs
``candidate_steps``, a non-empty list of ints >= 0, else ``ValueError("BS <key>: candidate_steps
must be a list of non-negative ints, got ...")``; a file without a tier gives ``ValueError(
"speculative_adaptive_config must contain at least one integer-string BS key ...")``. Per-tier
fields read by AdaptiveStepSlot, with their defaults: ema_alpha 0.2, update_interval 5,
warmup_batches 10, down_hysteresis -0.25, up_hysteresis 0.0, ceiling_coeff 0; others are
ignored silently.

The role is stricter than the release where the release would start and then serve something
other than what was written: an unknown field (a typo serves the default silently), a key that
is not a batch size, an update interval of 0 (``update`` divides by it at the first decision:
the scheduler dies after warm-up), an EMA weight outside (0, 1].

``canonical`` is the one form of a schedule: keys as strings in numeric order, fields sorted.
The node's record holds it, the unit's settings comment shows it, and the file SGLang reads is
its JSON text, named after its digest (``file_name``) so a unit's text names exactly the
schedule it serves, also when a rollback or a restore puts an older unit back.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import math
import re

VAR = "sglang_service_speculative_adaptive_config"

# AdaptiveStepSlot.__init__ (0.5.23): the fields a tier may set besides candidate_steps.
TIER_FIELDS = ("ema_alpha", "update_interval", "warmup_batches", "down_hysteresis", "up_hysteresis", "ceiling_coeff")
FLOAT_FIELDS = ("ema_alpha", "down_hysteresis", "up_hysteresis", "ceiling_coeff")
# The algorithms adaptive_unsupported_reason accepts after the NEXTN -> EAGLE alias
# (arg_groups/speculative_hook.py _resolve_speculative_algorithm_alias runs first).
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")
# Argv switches under which adaptive_unsupported_reason disables the schedule (a warning, then
# static params): the server would start and silently serve static steps.
FALLBACK_FLAGS = (
    ("--enable-dp-attention", "attention DP is not supported (adaptive tier decisions are not synchronized "
                              "across DP ranks)"),
    ("--enable-multi-layer-eagle", "enable_multi_layer_eagle=True is not supported (MultiLayerEagleWorkerV2 does "
                                   "not implement adaptive)"),
    ("--enable-two-batch-overlap", "enable_two_batch_overlap=True is not supported (adaptive state swap would "
                                   "discard the TboAttnBackend wrapper)"),
    ("--enable-pdmux", "enable_pdmux=True is not supported (adaptive state swap does not update "
                       "decode_attn_backend_group)"),
)

_DIGITS = re.compile(r"^\s*[0-9]+\s*$")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and not (isinstance(value, float) and (math.isnan(value) or math.isinf(value))))


def parse(config):
    """``config`` as a dict: a JSON object given as text (``-e`` on the command line) is read."""
    if isinstance(config, str) and config.strip().startswith("{"):
        try:
            return json.loads(config)
        except ValueError:
            return config
    return config


def _tier_key(key):
    """The batch size a key names (an int, or a string of digits), else None."""
    if _is_int(key):
        return key
    if isinstance(key, str) and _DIGITS.match(key):
        return int(key)
    return None


def problems(config, var=VAR):
    """What is wrong with the schedule ``config`` (empty list when SGLang serves it as written).

    ``None`` and ``{}`` are no schedule of one's own (SGLang's built-in one): no problem."""
    config = parse(config)
    if config is None or config == {}:
        return []
    if not isinstance(config, dict):
        return ["%s must be a mapping of batch sizes to tiers, e.g. {1: {candidate_steps: [1, 3, 5]}, "
                "32: {candidate_steps: [0, 1]}}, got %r" % (var, config)]
    out = []
    seen = {}
    for key in config:
        size = _tier_key(key)
        if size is None:
            out.append("%s: key %r is not a batch size; give whole numbers >= 1 as keys and put %s inside "
                       "each batch size's entry" % (var, key, ", ".join(("candidate_steps",) + TIER_FIELDS)))
            continue
        if size < 1:
            out.append("%s: batch size %r must be >= 1 (a decode batch holds at least one request; the "
                       "smallest key serves every batch below the next one)" % (var, key))
            continue
        if size in seen:
            out.append("%s: keys %r and %r are the same batch size %d: keep one" % (var, seen[size], key, size))
            continue
        seen[size] = key
        out.extend(_tier_problems(var, size, config[key]))
    return out


def _tier_problems(var, size, tier):
    where = "%s[%d]" % (var, size)
    if not isinstance(tier, dict):
        return ["%s must be a mapping with candidate_steps (a list of step counts, 0 = no speculation), got %r"
                % (where, tier)]
    out = []
    steps = tier.get("candidate_steps")
    if not isinstance(steps, list) or not steps or not all(_is_int(s) and s >= 0 for s in steps):
        # SGLang's own text for this (adaptive_spec_params.py _load_adaptive_config), with the place.
        out.append("%s.candidate_steps must be a non-empty list of whole numbers >= 0 (0 = no speculation at "
                   "this load); SGLang refuses the file with 'BS %d: candidate_steps must be a list of "
                   "non-negative ints, got %r'" % (where, size, steps))
    for field in sorted(set(tier) - set(("candidate_steps",) + TIER_FIELDS), key=str):
        out.append("%s: unknown field %r (SGLang ignores it and serves its default); known: %s"
                   % (where, field, ", ".join(("candidate_steps",) + TIER_FIELDS)))
    checks = (
        ("ema_alpha", lambda v: _is_num(v) and 0 < v <= 1,
         "a number in (0, 1] (the EMA weight of the newest batch; 0 would never move the step)"),
        ("update_interval", lambda v: _is_int(v) and v >= 1,
         "a whole number >= 1 (SGLang divides by it: 0 kills the scheduler after warm-up)"),
        ("warmup_batches", lambda v: _is_int(v) and v >= 0, "a whole number >= 0"),
        ("down_hysteresis", _is_num, "a number"),
        ("up_hysteresis", _is_num, "a number"),
        ("ceiling_coeff", lambda v: _is_num(v) and v >= 0, "a number >= 0 (0 = no ceiling)"),
    )
    for field, good, what in checks:
        if field in tier and not good(tier[field]):
            out.append("%s.%s must be %s, got %r" % (where, field, what, tier[field]))
    return out


def canonical(config):
    """The one form of a valid schedule (keys as strings in numeric order, fields sorted); None for
    no schedule of one's own (None or ``{}``). A schedule with problems is returned as given."""
    config = parse(config)
    if config is None or config == {}:
        return None
    if problems(config):
        return config
    out = {}
    for size, key in sorted((_tier_key(k), k) for k in config):
        tier = dict(config[key])
        # What SGLang makes of them (sorted(set(...)), float arithmetic): one spelling per schedule.
        tier["candidate_steps"] = sorted(set(tier["candidate_steps"]))
        for field in FLOAT_FIELDS:
            if field in tier:
                tier[field] = float(tier[field])
        out[str(size)] = dict(sorted(tier.items()))
    return out


def text(config):
    """The JSON file SGLang reads (``--speculative-adaptive-config``), one tier a line."""
    canon = canonical(config)
    if canon is None:
        return None
    lines = ["  %s: %s" % (json.dumps(k), json.dumps(v, sort_keys=True)) for k, v in canon.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def digest(config):
    """Short digest of the schedule's file text (names the file)."""
    body = text(config)
    return None if body is None else hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]


def file_name(config):
    """``adaptive-<digest>.json``, None for no schedule of one's own."""
    dig = digest(config)
    return None if dig is None else "adaptive-%s.json" % dig


def candidate_union(config):
    """Every tier's candidate steps together, sorted (resolve_candidate_steps_from_config): the
    step counts SGLang captures graphs for, and the ones --speculative-num-steps may name."""
    canon = canonical(config)
    if not isinstance(canon, dict) or problems(canon):
        return None
    return sorted(set(s for tier in canon.values() for s in tier["candidate_steps"]))


def label(config):
    """Short human label: ``1:1/3/5 8:0/1/3 32:0/1`` or ``SGLang's default``."""
    canon = canonical(config)
    if canon is None:
        return "SGLang's default"
    if not isinstance(canon, dict) or problems(canon):
        return "invalid schedule"
    return " ".join("%s:%s" % (k, "/".join(str(s) for s in v["candidate_steps"])) for k, v in canon.items())


def split_overrides(overrides):
    """(the schedule's label, or None when the overrides serve no schedule; the other overrides):
    a launch or winner named by its slots (``1:4 4:2``), not by its config dict."""
    rest = dict(overrides or {})
    on = rest.pop("speculative_adaptive", None)
    config = rest.pop("speculative_adaptive_config", None)
    return (label(config) if on else None), rest
