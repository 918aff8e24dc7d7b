"""Throughput model of speculative (MTP/EAGLE, topk 1) decoding (pure functions).

One scheduler step runs `steps` sequential draft passes and one verify pass over
batch x (steps+1) tokens; each running request then gains 1 + (accepted drafts)
tokens. The step time (milliseconds, default profile and model) is

    t(B, k) = T0 + TD*k + B*(TB + TK2*k^2) + TQ*(B*(k+1))^2 + max(0, k-4)*(TP0 + TP1*B)

- T0: fixed per-step cost (launches, all-reduce latency, sampling) - dominant at C=1;
- B*(TB + TK2*k^2): per-request cost of the draft chain, which grows with depth
  (each MTP pass attends over the previous drafts);
- TQ*(B*(k+1))^2: the verify pass turning compute-bound as batch x draft tokens grows;
- the last term: more than 5 tokens per request per verify leave the fast verify path.

Acceptance: draft position j (1-based) is accepted with probability alpha while all
earlier ones were, so the expected accept length is sum_{i=0..k} alpha^i. alpha depends
on two properties of the request only, never on its wording: `ignore_eos` and the
temperature. A benchmark run (ignore_eos true, as sglang.benchmark.serving and the
synthetic workload of sglang_bench send) gets the synthetic regime, ~0.99 per draft token at
temperature 0 (a model pushed past its end of answer repeats itself, which drafts well);
a request that lets the model stop (ignore_eos false) gets the realistic-text regime, ~0.72.
Both drop with temperature. So token-id prompts and random-word prompts of the same request
get the same server.

Calibrated (least squares) on the operator's table for Qwen3.5-122B-A10B bf16, tp 4 on
4x RTX PRO 6000 Blackwell, temperature 0, ignore_eos, max-running-requests 48:
per-request tok/s at C=1: steps1 123, steps3 234, steps4 277, steps5 282; aggregate:
steps3 C=32 1979, steps4 C=16 1596, steps5 C=16 1119. The model keeps every cell
within +-5% and the shape: steps 4 best at C=1, steps 3 best aggregate at C=32.
"""

import math
import random

T0 = 15.345
TD = 0.0076
TB = 0.7308
TK2 = 0.08586
TQ = 1.41e-5
TP0 = 1.5817
TP1 = 1.284
FAST_VERIFY_MAX_STEPS = 4

ALPHA_SYNTHETIC = 0.99
ALPHA_REALISTIC = 0.72
# Prefill (per request entering the batch): fixed + per prompt token, milliseconds.
PREFILL_BASE_MS = 1.0
PREFILL_MS_PER_TOKEN = 0.012

# Relative step-time factor per GPU profile (1.0 = default profile) and model size.
# Only the default profile is calibrated (on the operator's table); the others are
# rough guesses that keep the ordering B200 < H200 < RTX PRO 6000 in step time.
PROFILE_SPEED = {
    "rtx-pro-6000-x4": 1.0,
    "rtx-pro-6000-x1": 1.0,
    "b200-x8": 0.6,
    "h200-x1": 0.8,
    "h200-x8": 0.8,
}
# --enable-linear-replayssm-spec on a hybrid (GDN) model, 0.5.23
# layers/attention/linear/gdn_backend.py GDNAttnBackend._replayssm_target_verify: the verify no
# longer writes D full SSM-state snapshots per request and layer (the intermediate states); it
# rebuilds the window's outputs from the checkpoint plus the request's compact ring of up to L
# records (a replay) and appends this window's records; the ring is folded into the checkpoint
# after acceptance once it fills. Both sides are memory traffic of the same order, so the net
# step-time factor is taken from the one measurement, not derived: SGLang 0.5.17 on an H100, a
# trimmed Qwen3.5-MoE hybrid (48 layers, 32 experts), NEXTN, C=1 where the request cap does not
# bind: steps 3 200 -> 204 tok/s, steps 8 232 -> 233-239 (236 mid); 200/204 = 0.980,
# 232/236 = 0.983, mean 0.982. Calibrated on those two cells only (label: measured, 0.5.17).
REPLAYSSM_STEP_FACTOR = 0.982
REFERENCE_PARAMS = 122e9
REFERENCE_TP = 4


def speed_factor(profile, params=REFERENCE_PARAMS, tp_size=REFERENCE_TP):
    """Step-time multiplier for a profile, model size and TP size (1.0 = calibrated case)."""
    base = PROFILE_SPEED.get(profile, 1.0)
    size = (params / REFERENCE_PARAMS) ** 0.7
    tp = (REFERENCE_TP / float(tp_size)) ** 0.3
    return base * size * tp


def replayssm_acts(model, args):
    """--enable-linear-replayssm-spec changes the verify only on a hybrid model with
    speculative decoding."""
    return bool(args.get("enable_linear_replayssm_spec") and model.get("hybrid")
                and args.get("speculative_algorithm") is not None)


def replayssm_factor(model, args):
    """Step-time multiplier of --enable-linear-replayssm-spec (REPLAYSSM_STEP_FACTOR) where it
    acts (replayssm_acts); 1.0 elsewhere."""
    return REPLAYSSM_STEP_FACTOR if replayssm_acts(model, args) else 1.0


def step_time_ms(batch, steps, factor=1.0):
    """Milliseconds of one decode step for `batch` running requests and `steps` drafts."""
    if batch <= 0:
        return 0.0
    k = steps or 0
    n = batch * (k + 1)
    t = T0 + TD * k + batch * (TB + TK2 * k * k) + TQ * n * n
    if k > FAST_VERIFY_MAX_STEPS:
        t += (k - FAST_VERIFY_MAX_STEPS) * (TP0 + TP1 * batch)
    return t * factor


def prefill_time_ms(prompt_tokens, factor=1.0):
    return (PREFILL_BASE_MS + PREFILL_MS_PER_TOKEN * prompt_tokens) * factor


def acceptance_alpha(temperature=0.0, ignore_eos=True):
    """Per-draft-token acceptance probability of a request (see the module docstring)."""
    base = ALPHA_SYNTHETIC if ignore_eos else ALPHA_REALISTIC
    t = min(max(float(temperature or 0.0), 0.0), 2.0)
    return base * (1.0 - 0.15 * t)


def expected_accept_length(steps, alpha=ALPHA_SYNTHETIC):
    """Expected tokens per verify step: 1 + expected accepted drafts."""
    k = steps or 0
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def per_request_tps(concurrency, steps, alpha=ALPHA_SYNTHETIC, factor=1.0,
                    max_running_requests=48):
    """Steady-state decode tok/s of one request at a given concurrency (no prefill)."""
    batch = min(concurrency, max_running_requests)
    return expected_accept_length(steps, alpha) / step_time_ms(batch, steps, factor) * 1000.0


def aggregate_tps(concurrency, steps, alpha=ALPHA_SYNTHETIC, factor=1.0,
                  max_running_requests=48):
    """Steady-state decode tok/s summed over all requests; beyond the cap requests queue."""
    batch = min(concurrency, max_running_requests)
    return batch * per_request_tps(batch, steps, alpha, factor, max_running_requests)


def adaptive_run(concurrency, policy, alpha=ALPHA_SYNTHETIC, factor=1.0, max_running_requests=48,
                 decode_steps=2000, rng=None, step_ms=None):
    """An adaptive server (``policy``: a fresh adaptive.AdaptiveParams) decoding ``concurrency``
    requests for ``decode_steps`` steps, as scheduler.py runs it: before each step the routed
    slot's step is put in force (eagle_worker_v2.py activate_step_by_batch), the step takes
    step_time_ms at that step, each request gains 1 + its accepted drafts (drawn with ``rng``,
    a seeded random.Random), and the drafts go back to the slot (on_verify_complete), which may
    switch the step for the next one. Beyond the cap requests queue, as in aggregate_tps.

    ``step_ms(batch, steps, factor)``: another round time than step_time_ms (a bench's made-up
    landscape driven through the same slot dynamics).

    Returns {"tps": aggregate tok/s over the run (warm-up included), "steps": {step: decode
    steps run at it}, "final": the step in force at the end}."""
    rng = rng or random.Random(0)
    batch = min(concurrency, max_running_requests)
    tokens = 0
    ms = 0.0
    spent = {}
    for _i in range(decode_steps):
        steps = policy.steps_for_batch(batch)
        spent[steps] = spent.get(steps, 0) + 1
        ms += (step_ms or step_time_ms)(batch, steps, factor)
        correct = [draw_accepted(rng, steps, alpha) for _r in range(batch)]
        tokens += batch + sum(correct)
        policy.on_verify_complete(correct, batch)
    return {"tps": tokens / ms * 1000.0 if ms else 0.0, "steps": spent,
            "final": policy.steps_for_batch(batch)}


def draw_accepted(rng, steps, alpha):
    """Accepted draft tokens of one request in one verify step (0..steps)."""
    n = 0
    while n < steps and rng.random() < alpha:
        n += 1
    return n


# SGLang's benchmarking knob that pins the accept length while the real draft and verify kernels
# run (speculative/spec_utils.py, 0.5.23: SIMULATE_ACC_LEN, SIMULATE_ACC_METHOD and
# SIMULATE_ACC_TOKEN_MODE, read once at import from environ.py's EnvFloat(-1),
# EnvStr("match-expected") and EnvStr("fixed")).
SIMULATE_ACC_METHODS = ("multinomial", "match-expected")
SIMULATE_ACC_TOKEN_MODES = ("fixed", "real-draft-token")
# spec_utils.py generate_simulated_accept_index, token mode "fixed": predict.fill_(100)
SIMULATED_TOKEN_ID = 100


def simulated_accept(environ):
    """(accept length, method, token mode) the knob pins, or None when it is off (<= 0).

    Raises ValueError with the release's texts: environ.py EnvFloat.parse for a value that is
    not a float, spec_utils.py sample_simulated_acc_len / eagle_utils.py verify for a method or
    token mode it does not know (the release raises those at the first verify, which the
    launch's warm-up request runs, so the start fails either way)."""
    raw = environ.get("SGLANG_SIMULATE_ACC_LEN")
    if raw is None:
        return None
    try:
        acc_len = float(raw)
    except ValueError:
        raise ValueError('"%s" is not a valid float value' % raw)
    if math.isnan(acc_len) or acc_len <= 0:  # off, as the release's `SIMULATE_ACC_LEN > 0` is
        return None
    method = environ.get("SGLANG_SIMULATE_ACC_METHOD", "match-expected")
    mode = environ.get("SGLANG_SIMULATE_ACC_TOKEN_MODE", "fixed")
    if method not in SIMULATE_ACC_METHODS:
        raise ValueError("Invalid simulate_acc_method: %s" % method)
    if mode not in SIMULATE_ACC_TOKEN_MODES:
        raise ValueError("Invalid SGLANG_SIMULATE_ACC_TOKEN_MODE %r; expected 'fixed' or "
                         "'real-draft-token'." % mode)
    return acc_len, method, mode


def sample_simulated_acc_len(rng, acc_len, method, max_len):
    """spec_utils.py sample_simulated_acc_len: the accept length (1..max_len) of one verify, one
    draw for the whole batch. match-expected takes floor or ceil with the weights that make its
    mean the pinned value; multinomial a normal draw (sd 1) clamped and rounded (torch.round and
    Python's round both round half to even)."""
    if method == "multinomial":
        return int(round(min(max(rng.gauss(acc_len, 1.0), 1.0), max_len)))
    acc_len = max(1.0, min(max_len, acc_len))
    lower = int(acc_len // 1)
    upper = lower + 1 if lower < max_len else lower
    if lower == upper:
        return lower
    return upper if rng.random() < acc_len - lower else lower


def noisy(rng, value, rel_sigma=0.012):
    """value with seeded gaussian noise (about 1-2%), never below half of it."""
    return max(value * 0.5, value * (1.0 + rng.gauss(0.0, rel_sigma)))


def calibration_table(factor=1.0):
    """The operator's cells as the model predicts them (for tests and the README)."""
    return {
        "c1": {k: per_request_tps(1, k, factor=factor) for k in (1, 2, 3, 4, 5)},
        "c16": {k: aggregate_tps(16, k, factor=factor) for k in (1, 2, 3, 4, 5)},
        "c32": {k: aggregate_tps(32, k, factor=factor) for k in (1, 2, 3, 4, 5)},
    }


def _round(x):
    return math.floor(x + 0.5)
