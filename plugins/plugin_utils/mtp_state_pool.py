# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

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
- the ReplaySSM ring bytes per request = ring_gb / (max_running_requests + 1) (when on; for a
  launch without it, bracketed from the SSM state per slot: 0.5.23's GDN ring of
  configs/mamba_utils.py replayssm_ring_bytes_per_req is L/K x (1 + HK/HV + 1/K) of the fp32 state,
  L = 16 and K = V = 128 for Qwen3.5 / Qwen3-Next, HK/HV between 0 and 1: a lift to ReplaySSM is
  then predicted with the larger ring, at most a few state slots low, until a launch logs it),
- R itself: the KV pool is what the state pool left, R = kv_tokens x b + state bytes (within
  one page of tokens), and, when the launch sized its pool automatically, its logged size pins
  R to one slot of the joint solve.

From these the same solve gives the cap, the state-pool size and the KV tokens of any other
draft depth, ``mamba_full_memory_ratio``, ``max_mamba_cache_size``, ``max_running_requests``
and ``enable_linear_replayssm_spec`` on the same node, model and ``mem_fraction_static``.

Rounding: the release prints the sizes in GB (1 << 30 bytes) with 2 decimals (the ring with 3),
so p, b and the ring are known to within half a unit per printed figure (conv + ssm: +-0.01 GB
over max_mamba_cache_size + 1 slots; each KV figure +-0.005 GB over kv_tokens). What the launch
allows of (b, p, ring) is a convex polytope (that box, cut by the budget range its logged pool
size implies); ``predict_range`` splits it into the cells of one predicted pool size each and
returns the lowest and highest outcome over their corners, where every figure computed for one
size is extreme: the release's value lies between. ``predict`` returns the lowest, so it never
promises a higher cap or more KV tokens than the release gives. The spread grows with how far
the setting moves the state pool from the launched one: the KV tokens by about |state bytes
moved| x (0.01 / (conv_gb + ssm_gb) + 0.01 / kv_gb) / b, plus one pool size's worth where the
rounding leaves two sizes possible. Measured against the simulator's 0.5.23 sizing over about 690
pairs of settings on three hybrid nodes (tests/unit/plugins/plugin_utils/test_mtp_state_pool.py): never
high; the cap at most 1 request low (at most 4 for ReplaySSM predicted from a launch without it),
the pool at most 13 slots and the KV tokens at most 5.9 % of the launched KV pool low; a launch
predicted for itself is exact.

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
# The state pool's own levers (the search's cap levers); lift may also move the request cap.
POOL_LEVERS = ("mamba_full_memory_ratio", "max_mamba_cache_size", "enable_linear_replayssm_spec")
LEVERS = ("max_running_requests",) + POOL_LEVERS
OVERRIDE_KEYS = ("cuda_graph_max_bs",) + LEVERS
CONTEXT_KEYS = ("mem_fraction_static", "disable_radix_cache", "page_size")
# lift's grid for mamba_full_memory_ratio: hundredths (see lift), up to RATIO_MAX.
RATIO_STEP = 0.01
RATIO_MAX = 1000.0
# The ReplaySSM ring's size per request when no launch logged it: arg_groups/fields/exec_.py
# linear_replayssm_cache_len's default, and the GDN head dim of Qwen3.5 / Qwen3-Next.
REPLAYSSM_CACHE_LEN = 16
GDN_HEAD_DIM = 128


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

    def at_least(self, size, r):
        """(A_budget, A_p, A_ring): the automatic solve gives >= ``size`` slots exactly when
        A_budget x budget + A_p x p + A_ring x ring >= 0 (it divides by a positive p term)."""
        share = self.ratio / (1 + self.ratio)
        if self.reserves_spec_state:
            d = self.draft_tokens
            return share, -((1 + d) + size * (1 + d / float(self.slots(r)))), 0.0
        return share, -(size + 1.0), -self.fixed(1.0)

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
    # Without a logged ring, its size per request from the SSM state's (see the module docstring):
    # per layer and request the ring holds L x (2 HV V + 2 HK K) bf16 values (the low parts
    # doubling them) and L x HV fp32 gates, the state HV x V x K fp32 values; with V = K = 128
    # that is L/K x (1 + HK/HV + 1/K) of the state, HK/HV between 0 and 1.
    ssm = float(pool["ssm_gb"])
    per_state = ((max(ssm - GB_HALF_UNIT, 0.0)) * GIB / (size + 1), (ssm + GB_HALF_UNIT) * GIB / (size + 1))
    share = float(REPLAYSSM_CACHE_LEN) / GDN_HEAD_DIM
    ring_estimate = (per_state[0] * share * (1 + 1.0 / GDN_HEAD_DIM), per_state[1] * share * (2 + 1.0 / GDN_HEAD_DIM))
    return {"size": size, "tokens": tokens, "p": p_box, "b": b_box, "ring": ring_box, "ring_estimate": ring_estimate,
            "reqs": reqs, "slots": pool.get("slots_per_request"), "capped_by": pool.get("capped_by")}


def _vertices(planes):
    """The corners of the convex polytope {x = (b, p, ring): a . x + k >= 0 for every plane
    (a_b, a_p, a_ring, k)}: every point where three planes meet and every plane holds (a few
    dozen planes at most, so enumerating the triples is cheap and exact)."""
    out = []
    for one, two, three in itertools.combinations(planes, 3):
        rows = (one[:3], two[:3], three[:3])
        det = _det(rows)
        # Hadamard's bound: |det| relative to it says how far from parallel the planes are.
        scale = 1.0
        for row in rows:
            scale *= sum(v * v for v in row) ** 0.5
        if abs(det) <= scale * 1e-12:
            continue
        rhs = (-one[3], -two[3], -three[3])
        point = []
        for col in range(3):
            swapped = [list(row) for row in rows]
            for i in range(3):
                swapped[i][col] = rhs[i]
            point.append(_det(swapped) / det)
        if all(_holds(plane, point) for plane in planes):
            out.append(tuple(point))
    return out


def _det(rows):
    (a, b, c), (d, e, f), (g, h, i) = rows
    return a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)


def _holds(plane, point):
    terms = (plane[0] * point[0], plane[1] * point[1], plane[2] * point[2], plane[3])
    return sum(terms) >= -1e-9 * sum(abs(t) for t in terms)


def _regions(obs, launch, r, strict=True):
    """(budget form, planes, corners) of what the launch allows, one per end of the page of KV
    tokens its budget may hold beyond kv_tokens.

    The unknowns are the KV bytes per token b, the state bytes per slot p and the ring bytes per
    request (x = (b, p, ring)), each within the box its printed figures allow (the ring at 0 when
    neither the launch nor the setting has one). The budget is linear in them: the KV pool's
    bytes, kv_tokens x b (plus up to a page), plus what the state pool took; for an automatic
    launch the joint solve must also give the logged pool size from that budget, two more linear
    bounds. So what the launch allows is a convex polytope, and every figure the prediction
    computes for one pool size (linear in x, or a ratio of linear forms) is extreme at its
    corners. ``strict`` False drops the solve's bounds (the KV pool was cut by something not
    modelled, such as --max-total-tokens)."""
    size, tokens = obs["size"], obs["tokens"]
    if launch.replay and obs["ring"] is None:
        return []
    ring = obs["ring"] if obs["ring"] is not None else obs["ring_estimate"]
    box = [(1.0, 0.0, 0.0, -obs["b"][0]), (-1.0, 0.0, 0.0, obs["b"][1]),
           (0.0, 1.0, 0.0, -obs["p"][0]), (0.0, -1.0, 0.0, obs["p"][1]),
           (0.0, 0.0, 1.0, -ring[0]), (0.0, 0.0, -1.0, ring[1])]
    # What the state pool took, linear in (p, ring): its slots and scratch, its fixed ring.
    used_p = launch.state_bytes(size, 1.0, 0.0, r)
    used_ring = launch.fixed(1.0)
    out = []
    for extra, margin in ((0, 0.5), (launch.page, -0.5)):
        form = (tokens + extra, used_p, used_ring, margin)  # budget = form . (b, p, ring, 1)
        planes = list(box)
        if launch.auto and strict:
            lo_p, hi_p = launch.auto_budget(size, 1.0, 0.0, r)
            lo_ring, hi_ring = launch.auto_budget(size, 0.0, 1.0, r)
            # solve's lo <= budget < solve's hi, a byte inside each (float rounding at a bound
            # would otherwise count the next size's budget as this one's)
            planes.append((form[0], form[1] - lo_p, form[2] - lo_ring, form[3] - 1))
            planes.append((-form[0], hi_p - form[1], hi_ring - form[2], -form[3] - 1))
        corners = _vertices(planes)
        if corners:
            out.append((form, planes, corners))
    return out


def _budget(form, x):
    """The budget at x = (b, p, ring) of a region's form."""
    return form[0] * x[0] + form[1] * x[1] + form[2] * x[2] + form[3]


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
    lack what the setting needs (another ``mem_fraction_static``, speculation on one side only: the draft's weights are loaded with
    speculation only, so the budget differs)."""
    obs = _observed(pool, launched)
    if obs is None:
        return None
    launch, target = _Setting(launched), _Setting(setting)
    if launch.mem_fraction is not None and target.mem_fraction is not None \
            and float(launch.mem_fraction) != float(target.mem_fraction):
        return None
    if target.spec != launch.spec:
        return None  # the draft's weights come out of the budget with speculation only
    r = _slots_per_request(obs, launch)
    regions = _regions(obs, launch, r) or _regions(obs, launch, r, strict=False)
    outcomes = []
    for form, planes, corners in regions:
        if not target.auto:
            cells = [(target.size_for(0.0, 0.0, 0.0, r), corners)]
        else:
            # The solve's size steps along planes in x: split the polytope into the cells of one
            # size each, every cell evaluated at its own corners with its own size (the KV tokens
            # of one size are a ratio of linear forms in x: extreme at a cell's corners). A byte
            # inside each step drops the slivers a step's own plane would leave.
            sizes = [target.size_for(_budget(form, x), x[1], x[2], r) for x in corners]
            cells = []
            for size in range(min(sizes), max(sizes) + 1):
                cell = list(planes)
                for bound, sign in ((size, 1.0), (size + 1, -1.0)):
                    a_budget, a_p, a_ring = target.at_least(bound, r)
                    cell.append((sign * a_budget * form[0], sign * (a_budget * form[1] + a_p),
                                 sign * (a_budget * form[2] + a_ring), sign * a_budget * form[3] - a_budget))
                found = _vertices(cell)
                if found:
                    cells.append((size, found))
        for size, cell in cells:
            outcomes.extend(_outcome(target, size, _budget(form, x), x[1], x[0], x[2], r) for x in cell)
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

    The predictions take ``launched``'s ``max_running_requests`` and ``cuda_graph_max_bs`` as
    they are unless ``allowed`` names them; every state-pool lever starts from SGLang's default
    (unset): one ``allowed`` does not name is one not to use (a lever the release or the greedy
    check refused, say), whatever the launch ran with. The least change: no lever if none is needed,
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
                if k in OVERRIDE_KEYS and k not in levers and k not in POOL_LEVERS and v is not None)

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
    return "another mem_fraction_static: the budget moves with it"
