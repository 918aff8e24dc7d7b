"""Adaptive speculative decoding (``--speculative-adaptive``) as SGLang 0.5.23 serves it.

Pure code, no I/O but the config file read. Each piece follows the release (paths relative to
``sglang/srt/``; ``tests/contract/test_sim_adaptive_contract.py`` checks texts, defaults and
behaviour against the wheel):

- ``speculative/adaptive_spec_params.py``: ``DEFAULT_ADAPTIVE_CONFIG``,
  ``adaptive_unsupported_reason``, ``_load_adaptive_config`` (and its errors),
  ``resolve_candidate_steps_from_config``, ``AdaptiveStepSlot`` (EMA, warm-up, update interval,
  hysteresis, ceiling) and ``AdaptiveSpeculativeParams`` (batch size -> padded to a CUDA-graph
  batch size -> the closest slot at or below it);
- ``arg_groups/speculative_hook.py``: ``_maybe_disable_adaptive`` (the fallback line) and
  ``_init_adaptive_speculative_params`` (topk 1, the middle candidate as the start, draft tokens
  = steps + 1);
- ``speculative/spec_info.py`` ``resolve_max_speculative_num_draft_tokens``: the pools are sized
  for the deepest candidate (max + 1 draft tokens);
- ``speculative/adaptive_runtime_state.py`` ``AdaptiveController.init_states``: one runtime state
  (its own CUDA graphs) per candidate step, graph batch sizes pruned per step.
"""

import bisect
import json
import math

# speculative/adaptive_spec_params.py DEFAULT_ADAPTIVE_CONFIG.
DEFAULT_ADAPTIVE_CONFIG = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25,
          "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
          "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
}
# AdaptiveStepSlot.__init__ defaults (cfg.get(...)).
SLOT_DEFAULTS = {"ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10,
                 "down_hysteresis": -0.25, "up_hysteresis": 0.0, "ceiling_coeff": 0}

# 0.5.23's texts.
MSG_BAD_STEPS = "BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}"
MSG_NO_BS_KEY = ("speculative_adaptive_config must contain at least one integer-string "
                 'BS key, e.g. {{"1": {{"candidate_steps": [1,3,7]}}}}. Got keys: {keys}')
MSG_FALLBACK = "speculative_adaptive disabled: {reason}. Falling back to static speculative params."
MSG_STEPS_NOT_CANDIDATE = ("--speculative-num-steps={steps} is not in the adaptive config "
                           "candidate_steps {candidates}. Pass one of those values.")
MSG_UPDATED = "Adaptive spec params updated: steps {old} -> {new} (ema_accept_len={ema:.2f})"
MSG_INITIALIZED = "AdaptiveSpeculativeParams initialized: steps={steps}, candidate_steps={candidates}"
# speculative/eagle_worker_v2.py apply_runtime_state / build_adaptive_runtime_state.
MSG_SWITCH = ("Switch adaptive runtime state: steps {old} -> {new}, draft_tokens {old_d} -> {new_d}")
MSG_BUILT = "Built adaptive runtime state steps={steps}: elapsed={elapsed:.2f}s, mem={mem:.2f}GB"

REASON_ALGO = "speculative_algorithm={algo} (only EAGLE/EAGLE3 are supported)"
REASON_TOPK = "speculative_eagle_topk={topk} (only topk=1 is supported)"
REASON_ATTN_DP = ("attention DP is not supported "
                  "(adaptive tier decisions are not synchronized across DP ranks)")
REASON_MULTI_LAYER = ("enable_multi_layer_eagle=True is not supported "
                      "(MultiLayerEagleWorkerV2 does not implement adaptive)")
REASON_TBO = ("enable_two_batch_overlap=True is not supported "
              "(adaptive state swap would discard the TboAttnBackend wrapper)")
REASON_PDMUX = ("enable_pdmux=True is not supported "
                "(adaptive state swap does not update decode_attn_backend_group)")


class ConfigError(Exception):
    """What loading the config raised in the release: ``exc_type`` is the exception's class
    name (ValueError for the release's own checks; json's JSONDecodeError, OSError's
    FileNotFoundError, AttributeError for a non-object entry, as Python raises them there)."""

    def __init__(self, exc_type, message):
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message


def unsupported_reason(algo, topk, attn_dp=False, multi_layer_eagle=False,
                       two_batch_overlap=False, pdmux=False):
    """adaptive_spec_params.py adaptive_unsupported_reason, in its order. ``algo`` is the
    resolved name (NEXTN is EAGLE by then: speculative_hook.py
    _resolve_speculative_algorithm_alias runs first); ``topk`` the user's value (None = auto).
    The platform-worker check is None on CUDA, so it never fires here."""
    if algo not in ("EAGLE", "EAGLE3"):
        return REASON_ALGO.format(algo=algo)
    if topk is not None and topk != 1:
        return REASON_TOPK.format(topk=topk)
    if attn_dp:
        return REASON_ATTN_DP
    if multi_layer_eagle:
        return REASON_MULTI_LAYER
    if two_batch_overlap:
        return REASON_TBO
    if pdmux:
        return REASON_PDMUX
    return None


def load_config(cfg_path=None):
    """adaptive_spec_params.py _load_adaptive_config: (cfg, {bs: entry}). The default config
    without a path; keys that are not digit strings are shared settings, not slots."""
    if cfg_path is not None:
        try:
            with open(cfg_path) as fh:
                cfg = json.load(fh)
        except json.JSONDecodeError as exc:
            raise ConfigError("json.decoder.JSONDecodeError", str(exc))
        except OSError as exc:
            raise ConfigError(type(exc).__name__, str(exc))
    else:
        cfg = DEFAULT_ADAPTIVE_CONFIG
    try:
        items = list(cfg.items())
    except AttributeError as exc:
        raise ConfigError("AttributeError", str(exc))
    entries = {}
    for key, entry in items:
        if not key.isdigit():
            continue
        try:
            steps = entry.get("candidate_steps")
        except AttributeError as exc:
            raise ConfigError("AttributeError", str(exc))
        if (not isinstance(steps, list) or not steps
                or not all(isinstance(s, int) and s >= 0 for s in steps)):
            raise ConfigError("ValueError", MSG_BAD_STEPS.format(key=key, steps=steps))
        entries[int(key)] = entry
    if not entries:
        raise ConfigError("ValueError", MSG_NO_BS_KEY.format(keys=list(cfg.keys())))
    return cfg, entries


def candidate_steps(cfg_path=None):
    """adaptive_spec_params.py resolve_candidate_steps_from_config: the union of every slot's
    candidates, sorted (it sizes the runtime buffers)."""
    _cfg, entries = load_config(cfg_path)
    steps = set()
    for entry in entries.values():
        steps.update(entry["candidate_steps"])
    return sorted(steps)


def max_draft_tokens(candidates):
    """spec_info.py resolve_max_speculative_num_draft_tokens under adaptive: topk 1, so the
    deepest runtime state needs max(candidates) + 1 draft-token slots; the KV/state pools, the
    request-pool padding and the verify buffers are all sized with it."""
    return max(candidates) + 1


class StepSlot(object):
    """adaptive_spec_params.py AdaptiveStepSlot: one batch-size slot's EMA of accepted drafts
    per request and its step. ``log`` receives the update line (log_info_on_rank0)."""

    def __init__(self, initial_steps, cfg, log=None):
        self.candidate_steps = sorted(set(cfg["candidate_steps"]))
        self.ema_alpha = cfg.get("ema_alpha", SLOT_DEFAULTS["ema_alpha"])
        self.update_interval = cfg.get("update_interval", SLOT_DEFAULTS["update_interval"])
        self.warmup_batches = cfg.get("warmup_batches", SLOT_DEFAULTS["warmup_batches"])
        self.down_hysteresis = cfg.get("down_hysteresis", SLOT_DEFAULTS["down_hysteresis"])
        self.up_hysteresis = cfg.get("up_hysteresis", SLOT_DEFAULTS["up_hysteresis"])
        self.ceiling_coeff = cfg.get("ceiling_coeff", SLOT_DEFAULTS["ceiling_coeff"])
        if initial_steps in self.candidate_steps:
            self.current_steps = initial_steps
        else:
            self.current_steps = self.candidate_steps[len(self.candidate_steps) // 2]
        # the neutral start: one accepted draft fewer than the steps
        self.ema_accept_len = float(self.current_steps - 1)
        self._batch_count = 0
        self._log = log

    def update(self, correct_drafts_per_req):
        """AdaptiveStepSlot.update: True when the step changed. A slot at steps 0 drafts
        nothing, so its EMA stands still; the batch count still runs."""
        if not correct_drafts_per_req:
            return False
        if self.current_steps > 0:
            batch_avg = sum(correct_drafts_per_req) / float(len(correct_drafts_per_req))
            self.ema_accept_len = (1 - self.ema_alpha) * self.ema_accept_len + self.ema_alpha * batch_avg
        self._batch_count += 1
        if self._batch_count <= self.warmup_batches:
            return False
        if (self._batch_count - self.warmup_batches) % self.update_interval != 0:
            return False
        return self._recompute()

    def _recompute(self):
        """AdaptiveStepSlot._recompute_params: from steps 0, probe the next candidate; else drop
        while the EMA is at or below (previous candidate - 0.5, 0.5 for a 0 floor) + down
        hysteresis, or, not having dropped, rise while it is above current - 0.5 + up
        hysteresis; the ceiling (ceil(EMA x coeff), at least 1) only caps a target that is not a
        rise."""
        old = self.current_steps
        idx = self.candidate_steps.index(old)
        old_idx = idx
        if old == 0:
            idx = min(idx + 1, len(self.candidate_steps) - 1)
            target = self.candidate_steps[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            return self._apply(old, target)
        while idx > 0:
            prev = self.candidate_steps[idx - 1]
            drop = (0.5 if prev == 0 else prev - 0.5) + self.down_hysteresis
            if self.ema_accept_len <= drop:
                idx -= 1
            else:
                break
        if not idx < old_idx:
            while idx < len(self.candidate_steps) - 1:
                rise = self.candidate_steps[idx] - 0.5 + self.up_hysteresis
                if self.ema_accept_len > rise:
                    idx += 1
                else:
                    break
        target = self.candidate_steps[idx]
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            if ceiling < target <= old:
                while idx > 0 and self.candidate_steps[idx] > ceiling:
                    idx -= 1
                target = self.candidate_steps[idx]
        return self._apply(old, target)

    def _apply(self, old, target):
        """AdaptiveStepSlot._apply_target_steps: the update line on a change."""
        if target == old:
            return False
        self.current_steps = target
        if self._log is not None:
            self._log(MSG_UPDATED.format(old=old, new=target, ema=self.ema_accept_len))
        return True


class AdaptiveParams(object):
    """adaptive_spec_params.py AdaptiveSpeculativeParams: one StepSlot per integer key, each
    with the shared (non-digit) settings under its own; routes a batch size to a slot."""

    def __init__(self, initial_steps, cfg_path=None, log=None, log_init=True):
        cfg, entries = load_config(cfg_path)
        self.bs_list = sorted(entries)
        self.slots = {}
        self.cuda_graph_bs = None
        for bs in self.bs_list:
            merged = dict(cfg)
            merged.update(entries[bs])
            self.slots[bs] = StepSlot(initial_steps, merged, log=log)
        first = self.slots[self.bs_list[0]]
        self.init_line = MSG_INITIALIZED.format(steps=first.current_steps,
                                                candidates=first.candidate_steps)
        if log is not None and log_init:
            log(self.init_line)

    @property
    def candidate_steps(self):
        return sorted({s for slot in self.slots.values() for s in slot.candidate_steps})

    def set_cuda_graph_bs(self, cuda_graph_bs):
        """AdaptiveSpeculativeParams.set_cuda_graph_bs: eagle_worker_v2.py init_cuda_graphs
        passes ``--cuda-graph-bs-decode`` (None unless given, and None with graphs off)."""
        self.cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    def steps_for_batch(self, batch_size):
        """get_steps_for_batch: the routed slot's step."""
        return self.route(batch_size).current_steps

    def on_verify_complete(self, correct_drafts_per_req, batch_size):
        """on_verify_complete: the new step when the routed slot switches, else None."""
        slot = self.route(batch_size)
        if slot.update(correct_drafts_per_req):
            return slot.current_steps
        return None

    def cuda_graph_bs_for_step(self, step):
        """cuda_graph_bs_for_step: the graph batch sizes whose slot may run ``step`` (None: no
        explicit list, every state captures the whole list)."""
        if self.cuda_graph_bs is None:
            return None
        return [v for v in self.cuda_graph_bs
                if step in self.slots[self.closest_bs(v)].candidate_steps]

    def route(self, batch_size):
        """_route: batch size -> padded to a graph batch size -> closest slot at or below."""
        return self.slots[self.closest_bs(self.pad_to_cuda_graph_bs(batch_size))]

    def pad_to_cuda_graph_bs(self, batch_size):
        """_pad_to_cuda_graph_bs: the smallest graph batch size >= batch_size (itself beyond
        the largest, or without a list)."""
        if self.cuda_graph_bs is None:
            return batch_size
        idx = bisect.bisect_left(self.cuda_graph_bs, batch_size)
        return self.cuda_graph_bs[idx] if idx < len(self.cuda_graph_bs) else batch_size

    def closest_bs(self, target):
        """_find_closest_bs: the largest slot key <= target (the smallest key below it)."""
        idx = bisect.bisect_right(self.bs_list, target) - 1
        return self.bs_list[max(0, idx)]


def runtime_states(initial_steps, cfg_path, cuda_graph_bs):
    """adaptive_runtime_state.py AdaptiveController.init_states as eagle_worker_v2.py
    init_cuda_graphs drives it: the startup state (initial steps, captured by the worker's own
    init with the full list) is registered first; every other candidate step gets a state built
    with cuda_graph_bs_for_step: None = the full list, [] = no graphs (capture disabled for it,
    eagle_worker_v2.py _override_worker_state). Returns [(steps, bs list or None, startup?)]."""
    params = AdaptiveParams(initial_steps, cfg_path)
    params.set_cuda_graph_bs(cuda_graph_bs)
    states = [(initial_steps, None, True)]
    for step in params.candidate_steps:
        if step == initial_steps:
            continue
        states.append((step, params.cuda_graph_bs_for_step(step), False))
    return states
