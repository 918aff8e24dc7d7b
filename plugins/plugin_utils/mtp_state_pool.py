# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hybrid state pool's running-request cap, predicted for lever values not launched yet.

A hybrid (linear-attention) model's server caps its running requests by its state pool. SGLang
0.5.23 sizes that pool in ``srt/mem_cache/kv_cache_configurator.py``
``_handle_max_mamba_cache`` and ``resolve_max_num_reqs`` (the simulator's
sim/sglang_sim/memory.py ``_handle_max_mamba_cache`` / ``resolve_max_num_reqs`` mirror them and
are the oracle of the tests). The pool budget R (the bytes left after the weights and the
mem-fraction slack) is shared by the state pool and the KV pool and depends neither on the
draft depth nor on the levers. One launch's journal (module_utils/journal.py ``pool_facts``)
tells, for that launch:

- the state bytes per slot p = (conv_gb + ssm_gb) / (max_mamba_cache_size + 1),
- the KV bytes per token b = kv_gb / kv_tokens,
- the ReplaySSM ring bytes per request = ring_gb / (max_running_requests + 1) (when on),
- R itself: the KV pool is what the state pool left, R = kv_tokens x b + state bytes (within
  one page of tokens), and, when the launch sized its pool automatically, its logged size pins
  R to one slot of the joint solve.

From these the same solve gives the cap, the state-pool size and the KV tokens of any other
draft depth, ``mamba_full_memory_ratio``, ``max_mamba_cache_size``, ``max_running_requests``
and ``enable_linear_replayssm_spec`` on the same node, model and ``mem_fraction_static``.

Rounding: the release prints the sizes in GB (1 << 30 bytes) with 2 decimals (the ring with 3),
so p, b and the ring are known to within half a unit per printed figure (conv + ssm: +-0.01 GB
over max_mamba_cache_size + 1 slots; each KV figure +-0.005 GB over kv_tokens). The (b, p) the
launch allows form a convex polygon (that box, cut by the budget range its logged pool size
implies); ``predict_range`` splits it into the cells of one predicted pool size each and returns
the lowest and highest outcome over their corners, where every figure computed for one size is
extreme: the release's value lies between (the ring's own box is sampled, not cut). ``predict``
returns the lowest, so it never promises a higher cap or more KV tokens than the release gives.
The spread grows with how far the setting moves the state pool from the launched one: the KV
tokens by about |state bytes moved| x (0.01 / (conv_gb + ssm_gb) + 0.01 / kv_gb) / b, plus one
pool size's worth where the rounding leaves two sizes possible. Measured against the simulator's
0.5.23 sizing over 580 pairs of settings on three hybrid nodes (tests/unit/plugins/filter/
test_mtp_state_pool.py): the cap at most 1 request low (exact in 95-100 %), the pool at most 13
slots low, the KV tokens at most 5.9 % of the launched KV pool low, never high; a launch predicted
for itself is exact.

Slots per request (``_calculate_mamba_ratio``) come from the mamba cap warning when the launch
was capped by the state pool; otherwise from which of 0.5.23's possible values (5: extra_buffer
with the overlap scheduler, Qwen3.5/Qwen3-Next's default; 4: extra_buffer without it; 3:
no_buffer; 1: no radix cache) agrees with the launched pool's joint solve and its running
requests; when several agree (a launch without speculation), the release's default rule for
those models: 1 with ``disable_radix_cache``, else 5 (or the largest that agrees: more slots per
request predict a lower cap, which errs on the safe side).

Dicts ``launched`` and ``setting``: ``draft_tokens`` (int; None or 0 = no speculation) plus
any of the override keys ``max_running_requests``, ``mamba_full_memory_ratio``,
``max_mamba_cache_size``, ``enable_linear_replayssm_spec``, ``cuda_graph_max_bs`` (no effect on
the pools); absent or None = SGLang's default (48 running requests under speculation,
speculative_hook.py ``_handle_eagle_family``; without speculation and without a cap the release
estimates 2048 to 4096 and this model takes 2048). Optional context keys, the same for both
when given: ``mem_fraction_static`` (a different one makes the prediction None: the budget moves
with it; when neither gives it, both launches are taken to resolve the same one, which 0.5.23's
automatic fraction (arg_groups/memory_hook.py) does not always do: a --max-running-requests
below the graph batch size lowers its graph reserve unless the 10 GB floor of GPUs over 60 GB
binds, so pin the fraction for exact predictions),
``disable_radix_cache``, ``page_size``. A setting with speculation predicted from a launch
without it (or the reverse) is None as well: the draft's weights move the budget. ``--max-total-tokens`` is not modelled.
Controller-side, pure, stdlib only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import AnsibleFilterError

GIB = float(1 << 30)
# speculative_hook.py _handle_eagle_family: the running-request cap speculation sets when unset.
SPEC_DEFAULT_MAX_RUNNING_REQUESTS = 48
# kv_cache_configurator.py resolve_max_num_reqs: the least of its request-pool estimate.
REQ_POOL_ESTIMATE_MIN = 2048
# arg_groups/fields/schedule.py mamba_full_memory_ratio's default.
MAMBA_FULL_MEMORY_RATIO = 0.9
# _calculate_mamba_ratio's possible values, the default rule's first.
SLOTS_PER_REQUEST_CHOICES = (5, 4, 3, 1)
DEFAULT_SLOTS_PER_REQUEST = 5
# Half a unit of the last printed digit (journal.py prints nothing itself; the release does).
GB_HALF_UNIT = 0.005
RING_GB_HALF_UNIT = 0.0005
LEVERS = ("max_running_requests", "mamba_full_memory_ratio", "max_mamba_cache_size",
          "enable_linear_replayssm_spec")
OVERRIDE_KEYS = ("cuda_graph_max_bs",) + LEVERS
CONTEXT_KEYS = ("mem_fraction_static", "disable_radix_cache", "page_size")
# lift's grid for mamba_full_memory_ratio: hundredths (see lift), up to RATIO_MAX.
RATIO_STEP = 0.01
RATIO_MAX = 1000.0
RING_SAMPLES = 9


class _Setting(object):
    """One launch's resolved lever values."""

    def __init__(self, values):
        values = values or {}
        self.draft_tokens = int(values.get("draft_tokens") or 0)
        self.spec = self.draft_tokens >= 1
        mrr = values.get("max_running_requests")
        if mrr is not None:
            self.mrr = max(1, int(mrr))
        else:
            self.mrr = SPEC_DEFAULT_MAX_RUNNING_REQUESTS if self.spec else None
        self.ratio = float(values.get("mamba_full_memory_ratio") or MAMBA_FULL_MEMORY_RATIO)
        size = values.get("max_mamba_cache_size")
        self.size = None if size is None else int(size)
        self.replay = bool(values.get("enable_linear_replayssm_spec"))
        self.no_radix = bool(values.get("disable_radix_cache"))
        self.page = int(values.get("page_size") or 1)
        self.mem_fraction = values.get("mem_fraction_static")

    @property
    def reserves_spec_state(self):
        return self.spec and not self.replay

    @property
    def auto(self):
        """The pool is solved from the budget (neither an explicit size nor one from the cap)."""
        return self.size is None and not (self.no_radix and self.mrr is not None)

    def slots(self, r):
        return 1 if self.no_radix else r

    def fixed(self, ring):
        """The ReplaySSM ring, charged as fixed scratch for (max_running_requests + 1) requests
        (without a cap 0.5.23 fails sizing it: _outcome says so)."""
        if not self.replay or self.mrr is None:
            return 0.0
        return ring * (max(1, self.mrr) + 1)

    def state_bytes(self, size, p, ring, r):
        """What _handle_max_mamba_cache takes out of the budget for a pool of ``size`` slots."""
        total = (size + 1) * p + self.fixed(ring)
        if self.reserves_spec_state:
            if self.size is None and self.no_radix and self.mrr is not None:
                total += p * (size + 1) * self.draft_tokens
            else:
                capped = min(max(1, self.mrr), size // self.slots(r))
                total += p * (capped + 1) * self.draft_tokens
        return total

    def auto_size(self, budget, p, ring, r):
        """_handle_max_mamba_cache's solve for ``budget`` bytes."""
        mamba = budget * self.ratio / (1 + self.ratio)
        if self.reserves_spec_state:
            d = self.draft_tokens
            return int((mamba - p * (1 + d)) // (p * (1 + d / float(self.slots(r)))))
        return int((mamba - self.fixed(ring) - p) // p)

    def at_least(self, size, ring, r):
        """(A_budget, A_p, const): the automatic solve gives >= ``size`` slots exactly when
        A_budget x budget + A_p x p + const >= 0 (the solve divides by a positive p term)."""
        share = self.ratio / (1 + self.ratio)
        if self.reserves_spec_state:
            d = self.draft_tokens
            return share, -((1 + d) + size * (1 + d / float(self.slots(r)))), 0.0
        return share, -(size + 1.0), -self.fixed(ring)

    def size_for(self, budget, p, ring, r):
        if self.size is not None:
            return self.size
        if self.no_radix and self.mrr is not None:
            return max(1, self.mrr)
        return self.auto_size(budget, p, ring, r)

    def auto_budget(self, size, p, ring, r):
        """[lo, hi) of the budgets whose solve gives ``size`` (auto only)."""
        if self.reserves_spec_state:
            d = self.draft_tokens
            step = p * (1 + d / float(self.slots(r)))
            mamba = (p * (1 + d) + size * step, p * (1 + d) + (size + 1) * step)
        else:
            base = self.fixed(ring) + p
            mamba = (base + size * p, base + (size + 1) * p)
        scale = (1 + self.ratio) / self.ratio
        return mamba[0] * scale, mamba[1] * scale


def _observed(pool, launched):
    """The launch's figures with their rounding boxes, or None when the facts cannot carry a
    prediction (no state pool, no KV line)."""
    if not pool or not pool.get("hybrid"):
        return None
    size = pool.get("max_mamba_cache_size")
    tokens = pool.get("kv_tokens")
    if not size or size < 1 or not tokens or pool.get("kv_gb") is None:
        return None
    if pool.get("conv_gb") is None or pool.get("ssm_gb") is None:
        return None
    state = float(pool["conv_gb"]) + float(pool["ssm_gb"])
    half = 2 * GB_HALF_UNIT
    p_box = (max(state - half, GB_HALF_UNIT / 10) * GIB / (size + 1), (state + half) * GIB / (size + 1))
    kv = float(pool["kv_gb"])
    kv_half = (pool.get("kv_gb_figures") or 2) * GB_HALF_UNIT
    page = _Setting(launched).page
    # + page: the release's KV buffers hold a page more than the pool's tokens.
    b_box = (max(kv - kv_half, GB_HALF_UNIT / 10) * GIB / (tokens + page), (kv + kv_half) * GIB / tokens)
    ring_box = None
    ring = pool.get("replayssm_ring_gb")
    reqs = pool.get("max_running_requests")
    if ring is not None and reqs:
        ring_half = (pool.get("replayssm_ring_figures") or 5) * RING_GB_HALF_UNIT
        ring_box = (max(ring - ring_half, 0.0) * GIB / (reqs + 1), (ring + ring_half) * GIB / (reqs + 1))
    return {"size": size, "tokens": tokens, "p": p_box, "b": b_box, "ring": ring_box,
            "reqs": reqs, "slots": pool.get("slots_per_request"), "capped_by": pool.get("capped_by")}


def _clip(polygon, a, c, k):
    """The part of a convex ``polygon`` [(b, p), ...] where a b + c p + k >= 0
    (Sutherland-Hodgman against one half-plane)."""
    out = []
    for i, here in enumerate(polygon):
        there = polygon[(i + 1) % len(polygon)]
        f_here = a * here[0] + c * here[1] + k
        f_there = a * there[0] + c * there[1] + k
        if f_here >= 0:
            out.append(here)
        if (f_here >= 0) != (f_there >= 0):
            t = f_here / (f_here - f_there)
            out.append((here[0] + t * (there[0] - here[0]), here[1] + t * (there[1] - here[1])))
    return out


def _area(polygon):
    """Shoelace area of a polygon [(b, p), ...]."""
    twice = 0.0
    for i, here in enumerate(polygon):
        there = polygon[(i + 1) % len(polygon)]
        twice += here[0] * there[1] - there[0] * here[1]
    return abs(twice) / 2.0


def _solid(polygon, box_area):
    """A polygon of positive area: clipping along a bound leaves slivers of no area (a vertex on
    the line itself), which stand for no point the launch allows."""
    return len(polygon) >= 3 and _area(polygon) > box_area * 1e-9


def _regions(obs, launch, r, strict=True):
    """(ring, budget form, polygon) triples that span what the launch allows.

    The budget is the KV pool's bytes (kv_tokens x b, plus up to a page of tokens) plus what the
    state pool took (linear in p); for an automatic launch the joint solve must also give the
    logged pool size from it, two more linear bounds in (b, p). So for each end of the ring box
    and of the page, the (b, p) the launch allows are a convex polygon: the box of the printed
    figures clipped by those bounds, and its corners are the extremes of every figure the
    prediction computes for a given pool size (linear in them, or a ratio of linear ones).
    ``strict`` False drops the solve's bounds (the KV pool was cut by something not modelled,
    such as --max-total-tokens)."""
    size, tokens = obs["size"], obs["tokens"]
    if obs["ring"] is None:
        if launch.replay:
            return []
        rings = (0.0,)
    else:
        # The ring is a third figure of the box; it is sampled (its ends and between) rather
        # than clipped in three dimensions: its box is a fraction of a percent wide.
        lo, hi = obs["ring"]
        rings = [lo + (hi - lo) * i / float(RING_SAMPLES - 1) for i in range(RING_SAMPLES)]
    box = [(obs["b"][0], obs["p"][0]), (obs["b"][1], obs["p"][0]),
           (obs["b"][1], obs["p"][1]), (obs["b"][0], obs["p"][1])]
    out = []
    for ring in rings:
        # Linear in p: the constant and the slope apart (a difference of two large figures
        # would lose the bytes the bounds below are drawn at).
        used0 = launch.state_bytes(size, 0.0, ring, r)
        used_c = launch.state_bytes(size, 1.0, 0.0, r)
        for extra, margin in ((0, 0.5), (launch.page, -0.5)):
            # budget = (tokens + extra) b + margin + used0 + used_c p
            polygon = box
            if launch.auto and strict:
                s0 = launch.auto_budget(size, 0.0, ring, r)
                slope = launch.auto_budget(size, 1.0, 0.0, r)
                # solve's lo <= budget < solve's hi, a byte inside each (float rounding at a
                # bound would otherwise count the next size's budget as this one's)
                polygon = _clip(polygon, tokens + extra, used_c - slope[0], margin + used0 - s0[0] - 1)
                polygon = _clip(polygon, -(tokens + extra), slope[1] - used_c, s0[1] - margin - used0 - 1)
            if _solid(polygon, _area(box)):
                # budget = form[0] b + form[1] p + form[2]
                out.append((ring, (tokens + extra, used_c, margin + used0), polygon))
    return out


def _budget(form, b, p):
    """The budget at (b, p) of a region's form: form[0] b + form[1] p + form[2]."""
    return form[0] * b + form[1] * p + form[2]


def _slots_per_request(obs, launch):
    """Slots per request of the launch: logged, else what agrees with it (see the docstring)."""
    if launch.no_radix:
        return 1
    if obs["slots"]:
        return int(obs["slots"])
    if obs["capped_by"] == "mamba" and obs["reqs"]:
        return max(1, obs["size"] // obs["reqs"])
    agree = []
    for r in SLOTS_PER_REQUEST_CHOICES:
        if obs["reqs"] and obs["size"] // r < obs["reqs"]:
            continue  # the state pool would have capped the launch, and it logged no such cap
        if _regions(obs, launch, r):
            agree.append(r)
    if DEFAULT_SLOTS_PER_REQUEST in agree or not agree:
        return DEFAULT_SLOTS_PER_REQUEST
    return max(agree)


def _outcome(setting, size, budget, p, b, ring, r):
    """0.5.23's sizing of ``setting`` for one budget and corner, its state pool ``size`` slots."""
    failed = {"cap": 0, "max_mamba_cache_size": size, "kv_tokens": 0}
    if setting.replay and setting.mrr is None:
        return failed  # the ring is sized from an unset cap: 0.5.23 raises a TypeError
    if size <= 0:
        return failed
    rest = budget - setting.state_bytes(size, p, ring, r)
    tokens = int(rest // b) // setting.page * setting.page if rest > 0 else 0
    if tokens <= 0:
        return failed
    requested = setting.mrr if setting.mrr is not None else REQ_POOL_ESTIMATE_MIN
    cap = min(requested, tokens // 2, size // setting.slots(r))
    return {"cap": max(cap, 0), "max_mamba_cache_size": size, "kv_tokens": tokens}


def predict_range(pool, launched, setting):
    """(lowest, highest) prediction over the rounding box (see the module docstring), each
    ``{"cap", "max_mamba_cache_size", "kv_tokens"}``; None when the pool facts are empty or
    lack what the setting needs (the ring of a launch without ReplaySSM, another
    ``mem_fraction_static``, speculation on one side only: the draft's weights are loaded with
    speculation only, so the budget differs)."""
    obs = _observed(pool, launched)
    if obs is None:
        return None
    launch, target = _Setting(launched), _Setting(setting)
    if launch.mem_fraction is not None and target.mem_fraction is not None \
            and float(launch.mem_fraction) != float(target.mem_fraction):
        return None
    if target.replay and obs["ring"] is None:
        return None
    if target.spec != launch.spec:
        return None  # the draft's weights come out of the budget with speculation only
    r = _slots_per_request(obs, launch)
    regions = _regions(obs, launch, r) or _regions(obs, launch, r, strict=False)
    outcomes = []
    for ring, form, polygon in regions:
        if not target.auto:
            cells = [(target.size_for(0.0, 0.0, ring, r), polygon)]
        else:
            # The solve's size steps along lines in (b, p): split the polygon into the cells of
            # one size each, so that each is evaluated at its own corners with its own size (the
            # KV tokens of one size are a ratio of linear forms: extreme at a cell's corners).
            sizes = [target.size_for(_budget(form, b, p), p, ring, r) for b, p in polygon]
            cells = []
            for size in range(min(sizes), max(sizes) + 1):
                cell = polygon
                for bound, sign in ((size, 1.0), (size + 1, -1.0)):
                    coef_budget, coef_p, const = target.at_least(bound, ring, r)
                    cell = _clip(cell, sign * coef_budget * form[0],
                                 sign * (coef_budget * form[1] + coef_p),
                                 sign * (coef_budget * form[2] + const))
                if _solid(cell, _area(polygon)):
                    cells.append((size, cell))
        for size, cell in cells:
            outcomes.extend(_outcome(target, size, _budget(form, b, p), p, b, ring, r) for b, p in cell)
    if not outcomes:
        return None
    keys = ("cap", "max_mamba_cache_size", "kv_tokens")
    return (dict((k, min(o[k] for o in outcomes)) for k in keys),
            dict((k, max(o[k] for o in outcomes)) for k in keys))


def predict(pool, launched, setting):
    """``{"cap", "max_mamba_cache_size", "kv_tokens"}`` 0.5.23 gives ``setting`` on the node
    and model of the launch ``launched`` whose pool facts are ``pool``: the lowest value the
    printed figures allow (never above the release's). A cap of 0 means the start would fail
    (the state pool or the KV pool gets nothing). None for a dense model ({} pool) or a setting
    the facts cannot tell (see predict_range)."""
    found = predict_range(pool, launched, setting)
    return None if found is None else found[0]


def _check_levers(allowed):
    levers = []
    for key in allowed or ():
        if key not in OVERRIDE_KEYS:
            raise ValueError("lift: allowed names %r, which is no override lever (one of %s)"
                             % (key, ", ".join(OVERRIDE_KEYS)))
        if key in LEVERS and key not in levers:
            levers.append(key)
    return levers


def lift(pool, launched, draft_tokens, target, kv_need, allowed):
    """The levers, changed least, that give ``draft_tokens`` a running-request
    cap >= ``target`` and >= ``kv_need`` KV tokens (None or 0: any), by ``predict``.

    The predictions take the overrides of ``launched`` that ``allowed`` does not name as they
    are (its ``max_running_requests``, say); the levers it names start from SGLang's defaults
    (unset). The least change: no lever if none is needed,
    else the fewest levers, tried in ``allowed``'s order (one lever each in turn, then pairs,
    ...), each at its least value: ``max_running_requests`` = ``target``,
    ``enable_linear_replayssm_spec`` = True, ``max_mamba_cache_size`` = ``target`` x slots per
    request, ``mamba_full_memory_ratio`` = the least hundredth that sizes the pool for ``target``
    (the argv carries any float; a hundredth moves about R/100/(1+ratio)^2 bytes between the
    pools, a few state slots on a large GPU, so a coarser grid, say halves, would give the state
    pool up to tens of slots' worth of KV it does not need, and a finer one is below what the
    printed figures let the prediction tell apart). ``max_mamba_cache_size`` and
    ``mamba_full_memory_ratio`` are never set together (an explicit size ignores the ratio).
    ``cuda_graph_max_bs`` in ``allowed`` is no cap lever and is ignored.

    Returns the levers to set, keys of ``allowed`` only, for the caller to merge over the
    candidate's own overrides ({} when none is needed), or None when no combination of the
    allowed levers can (or the facts cannot tell)."""
    levers = _check_levers(allowed)
    target = int(target)
    if target < 1:
        raise ValueError("lift: target must be >= 1 running requests, got %r" % (target,))
    need = int(kv_need or 0)
    launched = dict(launched or {})
    context = dict((k, launched[k]) for k in CONTEXT_KEYS if launched.get(k) is not None)
    base = dict((k, v) for k, v in launched.items()
                if k in OVERRIDE_KEYS and k not in levers and v is not None)

    def predicted(overrides):
        return predict(pool, launched, dict(context, draft_tokens=draft_tokens, **overrides))

    def fits(overrides):
        got = predicted(overrides)
        return got is not None and got["cap"] >= target and got["kv_tokens"] >= need

    obs = _observed(pool, launched)
    if obs is None:
        return None
    r = _slots_per_request(obs, _Setting(launched))
    for count in range(len(levers) + 1):
        for combo in itertools.combinations(levers, count):
            if "mamba_full_memory_ratio" in combo and "max_mamba_cache_size" in combo:
                continue
            overrides = dict(base)
            if "enable_linear_replayssm_spec" in combo:
                overrides["enable_linear_replayssm_spec"] = True
            if "max_running_requests" in combo:
                overrides["max_running_requests"] = target
            if "max_mamba_cache_size" in combo:
                overrides["max_mamba_cache_size"] = target * _Setting(dict(context, **overrides)).slots(r)
            if "mamba_full_memory_ratio" in combo:
                ratio = _least_ratio(predicted, overrides, target * _Setting(dict(context, **overrides)).slots(r))
                if ratio is None:
                    continue
                overrides["mamba_full_memory_ratio"] = ratio
            if fits(overrides):
                return dict((k, v) for k, v in overrides.items() if k in combo)
    return None


def _least_ratio(predicted, overrides, size_need):
    """The least mamba_full_memory_ratio on the RATIO_STEP grid whose predicted (lowest) pool
    has ``size_need`` slots; None when even RATIO_MAX does not (or the facts cannot tell). The
    pool only grows with the ratio, so a bisection over the grid finds it."""
    def big_enough(steps):
        got = predicted(dict(overrides, mamba_full_memory_ratio=round(steps * RATIO_STEP, 2)))
        return got is not None and got["max_mamba_cache_size"] >= size_need

    lo, hi = 1, int(round(RATIO_MAX / RATIO_STEP))
    if not big_enough(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if big_enough(mid):
            hi = mid
        else:
            lo = mid + 1
    return round(lo * RATIO_STEP, 2)


# --------------------------------------------------------------------------- filter

def launch_of(setting):
    """A pool-model setting from either shape: the model's own (``draft_tokens`` + override keys)
    or a serving setting as the service role records it (``speculative_algorithm``,
    ``speculative_num_draft_tokens``, the override keys; no algorithm = no speculation)."""
    setting = dict(setting or {})
    if "draft_tokens" not in setting and "speculative_num_draft_tokens" in setting:
        spec = setting.get("speculative_algorithm")
        setting["draft_tokens"] = setting.get("speculative_num_draft_tokens") if spec else 0
    return dict((k, setting[k]) for k in ("draft_tokens",) + OVERRIDE_KEYS + CONTEXT_KEYS
                if setting.get(k) is not None)


def mtp_tune_pool_predict(pool, launched, settings):
    """For each of ``settings``, what 0.5.23 would give it on the node whose launch ``launched``
    built ``pool`` (sglang_service_wait's RV(pool)): ``{"setting", "cap", "max_mamba_cache_size",
    "kv_tokens", "cap_highest", "kv_tokens_highest", "why"}``, the lowest values the printed
    figures allow and the highest (``why`` None); with the figures None and ``why`` saying why
    when the pool facts cannot tell (see predict_range)."""
    if pool is not None and not isinstance(pool, dict):
        raise AnsibleFilterError("mtp_tune_pool_predict: the pool facts must be a dict "
                                 "(sglang_service_wait's pool), got %r" % (pool,))
    if not isinstance(launched, dict):
        raise AnsibleFilterError("mtp_tune_pool_predict: launched must be the launch's setting as a dict, got %r"
                                 % (launched,))
    if not isinstance(settings, (list, tuple)) or not all(isinstance(s, dict) for s in settings):
        raise AnsibleFilterError("mtp_tune_pool_predict: settings must be a list of dicts (draft_tokens "
                                 "plus override keys), got %r" % (settings,))
    launch = launch_of(launched)
    out = []
    for given in settings:
        setting = launch_of(given)
        try:
            found = predict_range(pool or {}, launch, setting)
        except (TypeError, ValueError) as exc:
            raise AnsibleFilterError("mtp_tune_pool_predict: setting %r: %s" % (given, exc))
        row = {"setting": setting, "cap": None, "max_mamba_cache_size": None, "kv_tokens": None,
               "cap_highest": None, "kv_tokens_highest": None, "why": None}
        if found is None:
            row["why"] = _why_not(pool, launch, setting)
        else:
            lo, hi = found
            row.update(lo, cap_highest=hi["cap"], kv_tokens_highest=hi["kv_tokens"])
        out.append(row)
    return out


def _why_not(pool, launch, setting):
    if _observed(pool or {}, launch) is None:
        return "the launch logged no hybrid state pool (a dense model, or a start that died first)"
    if bool(launch.get("draft_tokens")) != bool(setting.get("draft_tokens")):
        return "speculation on one side only: the draft's weights change the budget"
    if setting.get("enable_linear_replayssm_spec") and not (pool or {}).get("replayssm_ring_gb"):
        return "the launch logged no ReplaySSM ring, so its size per request is unknown"
    return "another mem_fraction_static: the budget moves with it"
