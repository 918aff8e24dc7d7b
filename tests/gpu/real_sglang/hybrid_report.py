"""Tables of the trimmed hybrid MoE's real starts: memory per depth and the verify round's physics.

Reads what ``device.sh hybrid`` brought back (``tests/fixtures/real-sglang/hybrid/``):
``mem_<label>.txt`` (the entry's header, ``ready=``, nvidia-smi's used memory and the start's
memory lines), ``bench_<label>.json`` (hybrid_bench.py) and, for failed starts, ``<label>.log``.
Labels are ``hyb_<trim>_s<K>[_r<N>|_f<F>]``: depth K, relaunch N, mem fraction F.

Pure functions (unit tests call them on the fixtures) and a ``main`` that prints the tables:

  python tests/gpu/real_sglang/hybrid_report.py tests/fixtures/real-sglang/hybrid
"""

import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import memory_check  # noqa: E402  pylint: disable=wrong-import-position
from memory_check import parse_log  # noqa: E402  pylint: disable=wrong-import-position

LABEL = re.compile(r"^hyb_(?P<trim>[a-z0-9]+)_s(?P<k>\d+)(?:_r(?P<r>\d+))?(?:_f(?P<f>[\d.]+))?$")
HEADER = re.compile(r"entry=(?P<entry>\S+) depth=(?P<k>\d+) accept_pinned=(?P<acc>\S+) "
                    r"mem_fraction=(?P<frac>[\d.]+) trim=(?P<trim>\S+)(?: args=(?P<args>.*))?")
# mem_cache/memory_pool.py MambaPool.__init__ (0.5.17): "Mamba Cache is allocated.
# max_mamba_cache_size: N, conv_state size: X GB, ssm_state size: Y GB [intermediate_ssm_state_cache
# size: Z GB intermediate_conv_window_cache size: W GB]" (GB = 1024**3)
MAMBA = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (?P<slots>\d+), "
                   r"conv_state size: (?P<conv>[\d.]+)GB, ssm_state size: (?P<ssm>[\d.]+)GB"
                   r"(?: intermediate_ssm_state_cache size: (?P<issm>[\d.]+)GB"
                   r" intermediate_conv_window_cache size: (?P<iconv>[\d.]+)GB)?")
# mem_cache/kv_cache_configurator.py resolve_max_num_reqs (warning)
CAPPED = re.compile(r"max_running_requests is capped to (?P<cap>\d+) by the mamba state cache "
                    r"\(max_mamba_cache_size=(?P<slots>\d+), (?P<ratio>\d+) state slots per request\)")
# What 0.5.17 resolved for the hybrid at start (ServerArgs repr): the state pool's strategy and
# whether the overlap scheduler runs are decided there, not by the launch flags.
SERVER_ARGS_KEPT = ("mamba_radix_cache_strategy", "uses_mamba_radix_cache", "disable_overlap_schedule",
                    "disable_radix_cache", "max_running_requests", "mamba_full_memory_ratio",
                    "max_mamba_cache_size", "mamba_ssm_dtype", "linear_attn_backend", "mem_fraction_static")
SMI = re.compile(r"^(?P<used>\d+) MiB, (?P<total>\d+) MiB$")


def parse_label(label):
    m = LABEL.match(label)
    if not m:
        return None
    return {"trim": m.group("trim"), "depth": int(m.group("k")), "launch": int(m.group("r") or 1),
            "fraction": float(m.group("f")) if m.group("f") else None}


def parse_mem(text):
    """The figures of one ``mem_<label>.txt`` (or a whole start log): memory_check.parse_log's
    fields plus the hybrid state pool (slots, per-slot state, intermediate state), the cap the
    state pool set, nvidia-smi's used MiB and the entry header."""
    out = parse_log(text)
    out.pop("server_args", None)
    for line in text.splitlines():
        m = HEADER.search(line)
        if m:
            out.update(entry=m.group("entry"), depth=int(m.group("k")), mem_fraction=float(m.group("frac")),
                       accept_pinned=None if m.group("acc") == "none" else float(m.group("acc")),
                       launch_argv=(m.group("args") or "").split())
        m = MAMBA.search(line)
        if m:
            pools = out.setdefault("mamba", [])
            g = {k: (float(v) if v is not None else None) for k, v in m.groupdict().items()}
            g["slots"] = int(g["slots"])
            pools.append(g)
        m = CAPPED.search(line)
        if m:
            out["capped_to"] = int(m.group("cap"))
            out["state_slots_per_request"] = int(m.group("ratio"))
        m = SMI.match(line.strip())
        if m:
            out["smi_used_mib"], out["smi_total_mib"] = int(m.group("used")), int(m.group("total"))
        if line.startswith("ready="):
            out["ready"] = line.strip() == "ready=1"
    if out.get("mamba"):
        first = out["mamba"][0]
        slots = first["slots"]
        out["state_gb"] = round(first["conv"] + first["ssm"], 3)
        # the pool allocates one padding slot beside the request slots (memory_pool.py)
        out["per_slot_state_mib"] = round((first["conv"] + first["ssm"]) * 1024 / (slots + 1), 2) if slots else None
        out["intermediate_gb"] = round((first["issm"] or 0) + (first["iconv"] or 0), 3)
    return out


def load(fixture_dir):
    """{label: {"meta", "mem", "bench", "log_failure"}} for every entry in the folder."""
    out = {}
    for name in sorted(os.listdir(fixture_dir)):
        m = re.match(r"^mem_(hyb_.+)\.txt$", name)
        if not m:
            continue
        label = m.group(1)
        with open(os.path.join(fixture_dir, name), errors="replace") as f:
            mem = parse_mem(f.read())
        rec = {"meta": parse_label(label), "mem": mem, "bench": None, "args": {}}
        lpath = os.path.join(fixture_dir, "%s.log" % label)
        if os.path.exists(lpath):
            with open(lpath, errors="replace") as f:
                full = parse_log(f.read())
            rec["args"] = {k: full["server_args"].get(k) for k in SERVER_ARGS_KEPT}
        bpath = os.path.join(fixture_dir, "bench_%s.json" % label)
        if os.path.exists(bpath):
            with open(bpath) as f:
                rec["bench"] = json.load(f)
        out[label] = rec
    return out


def rounds(entries, trim="experts32"):
    """{(depth, C): [round_ms of each launch]} and the same for accept length and tok/s."""
    rt, acc, tps = {}, {}, {}
    for rec in entries.values():
        meta = rec["meta"]
        if not meta or meta["trim"] != trim or meta["fraction"] is not None or not rec["bench"]:
            continue
        for lv in rec["bench"]["levels"]:
            if lv.get("round_ms") is None:
                continue
            key = (meta["depth"], lv["concurrency"])
            rt.setdefault(key, []).append(lv["round_ms"])
            acc.setdefault(key, []).append(lv.get("accept_length"))
            tps.setdefault(key, []).append(lv.get("output_throughput"))
    return rt, acc, tps


def spread_pct(values):
    vals = [v for v in values if v is not None]
    if len(vals) < 2 or min(vals) <= 0:
        return None
    return (max(vals) - min(vals)) / min(vals) * 100.0


def marginal_costs(rt, concurrency):
    """Per extra draft step between consecutive measured depths at one C, from the launches'
    medians: [(k_from, k_to, ms per step)]. Depth 0 (no speculation) is left out: a draft at all
    adds the draft model's fixed costs, not one step's."""
    ks = sorted(k for (k, c) in rt if c == concurrency and k > 0)
    med = {k: statistics.median(rt[(k, concurrency)]) for k in ks}
    return [(a, b, (med[b] - med[a]) / (b - a)) for a, b in zip(ks, ks[1:])]


def shape(costs, noise_ms):
    """'concave', 'convex' or 'linear' from successive marginal costs: falling by more than the
    noise somewhere and never rising by more is concave; the reverse convex; else linear."""
    diffs = [b[2] - a[2] for a, b in zip(costs, costs[1:])]
    falls = any(d < -noise_ms for d in diffs)
    rises = any(d > noise_ms for d in diffs)
    if falls and not rises:
        return "concave"
    if rises and not falls:
        return "convex"
    return "linear" if not falls else "mixed"


def _f(v, nd=2):
    return "" if v is None else ("%.*f" % (nd, v) if isinstance(v, float) else str(v))


def memory_table(entries, trim="experts32"):
    rows = ["| depth | launch | weights GiB target / draft | state slots | per-slot state MiB | intermediate GiB "
            "| KV tokens | cap (slots/req) | graph GiB | free after graphs GiB | nvidia-smi used MiB |",
            "|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    for label, rec in sorted(entries.items(), key=lambda kv: (kv[1]["meta"] or {}).get("depth", -1)):
        meta, mem = rec["meta"], rec["mem"]
        if not meta or meta["trim"] != trim or meta["fraction"] is not None:
            continue
        t, d = mem.get("target", {}), mem.get("draft", {})
        cap = mem.get("max_running_requests")
        ratio = mem.get("state_slots_per_request")
        graph = (t.get("graph_gb") or 0) + (d.get("graph_gb") or 0)
        rows.append("| %d | %d | %s / %s | %s | %s | %s | %s | %s%s | %s | %s | %s |" % (
            meta["depth"], meta["launch"], _f(t.get("weights_gb")), _f(d.get("weights_gb")),
            _f((mem.get("mamba") or [{}])[0].get("slots")), _f(mem.get("per_slot_state_mib")),
            _f(mem.get("intermediate_gb")), _f(t.get("kv_tokens")), _f(cap),
            " (%d)" % ratio if ratio else "", _f(round(graph, 2) if graph else None),
            _f(mem.get("available_gpu_mem_gb")), _f(mem.get("smi_used_mib"))))
    return "\n".join(rows)


def physics_table(entries, trim="experts32"):
    rt, acc, tps = rounds(entries, trim)
    levels = sorted(set(c for (_k, c) in rt))
    rows = ["| depth | accept | " + " | ".join("round ms C=%d (spread %%)" % c for c in levels) + " |",
            "|---:|---:|" + "---:|" * len(levels)]
    for k in sorted(set(k for (k, _c) in rt)):
        a = [x for c in levels for x in acc.get((k, c), []) if x is not None]
        cells = []
        for c in levels:
            vals = rt.get((k, c))
            if not vals:
                cells.append("")
                continue
            sp = spread_pct(vals)
            cells.append("%s x%d%s" % (_f(statistics.median(vals)), len(vals), " (%.1f)" % sp if sp is not None else ""))
        rows.append("| %d | %s | %s |" % (k, _f(statistics.median(a)) if a else "", " | ".join(cells)))
    return "\n".join(rows)


# --------------------------------------------------------------------------- the sim's plan, same config

# Sim flags a start's own command line carries over (levers passed with RS_HYB_ARGS); the rest
# (backends, ports, --load-format, --disable-prefill-cuda-graph) do not move the sim's pools.
SIM_LEVERS = {"--enable-linear-replayssm-spec": 0, "--mamba-radix-cache-strategy": 1,
              "--mamba-ssm-dtype": 1, "--max-running-requests": 1, "--max-mamba-cache-size": 1,
              "--mamba-full-memory-ratio": 1, "--linear-replayssm-cache-len": 1}
# The state-pool resolutions the sim is asked for: 0.5.17 on the text-only trim gives 3 slots per
# request (README "What the releases' source says"), which the sim reproduces with no_buffer;
# the sim's own resolution is 0.5.23's (extra_buffer, 5 slots, for this architecture).
# (no_buffer runs without the overlap scheduler: arg_groups/mamba_hook.py validate_mamba_no_buffer.)
SIM_VARIANTS = (("no_buffer", ("--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule")),
                ("0.5.23", ()))


def levers(argv):
    """The sim flags (SIM_LEVERS) of one start's launch argv, in order."""
    out, i = [], 0
    while i < len(argv):
        n = SIM_LEVERS.get(argv[i])
        if n is None:
            i += 1
            continue
        out.extend(argv[i:i + 1 + n])
        i += 1 + n
    return out


def gpu_total_mib(entries):
    """nvidia-smi's memory.total of the card the starts ran on (any ready start's line)."""
    for rec in entries.values():
        if rec["mem"].get("smi_total_mib"):
            return rec["mem"]["smi_total_mib"]
    return None


def sim_args(rec):
    """memory_check's launch-args dict for one start (its depth and mem fraction)."""
    k = rec["meta"]["depth"]
    args = {"model_path": "hyb", "tp_size": 1, "mem_fraction_static": rec["mem"]["mem_fraction"],
            "context_length": 4096, "cuda_graph_max_bs_decode": 32}
    if k:
        args.update(speculative_algorithm="NEXTN", speculative_num_steps=k, speculative_eagle_topk=1,
                    speculative_num_draft_tokens=k + 1)
    return args


def _sim_argv(rec, variant_argv):
    argv = list(variant_argv)
    own = levers(rec["mem"].get("launch_argv") or [])
    if "--mamba-radix-cache-strategy" in own:
        argv = []
    return argv + own


def sim_plan(rec, hf_config, total_mib, variant_argv=(), more_argv=()):
    """memory_check.sim_plan (model_from_hf_config + memory.plan) for one real start: the same
    config, depth, fraction and levers, on a card of the real one's size."""
    try:
        return memory_check.sim_plan(sim_args(rec), hf_config, None, total_mib,
                                     _sim_argv(rec, variant_argv) + list(more_argv))
    except memory_check.server_args.ArgsError as exc:
        return {"error": "bad_args", "message": "%s: %s" % (exc.exc_type, exc)}


# The budget a real start's log shows is good to its rounding: two GB figures printed to 0.01
# (free memory after the weights, and before them times the slack's 1 - fraction), so +-0.0056 GB.
LOG_BUDGET_ROUNDING_GB = 0.0056
# Below the printed budget, what the pool's profile may see less: the log prints free memory
# when the MTP head's weights end, and the profile reads it later. At depth 3 of the H100 starts
# the real slot count needs at least 1.7 MiB of it (README "Real against the sim").
UNLOGGED_BELOW_GB = 0.008


def real_pool_budget_gb(mem):
    """kv_cache_configurator.py _profile_available_bytes on the real start's own log: free memory
    once every weight is loaded less the slack (free memory before the weights x (1 - fraction))."""
    t = mem.get("target", {})
    avail = mem.get("avail_before_kv_gb")
    if avail is None or t.get("load_begin_avail_gb") is None or mem.get("mem_fraction") is None:
        return None
    return avail - t["load_begin_avail_gb"] * (1 - mem["mem_fraction"])


def slots_on_real_budget(rec, hf_config, total_mib, variant_argv=()):
    """(fewest, most) state slots the release's solve gives over the budget the real start's log
    allows (real_pool_budget_gb, less UNLOGGED_BELOW_GB and the rounding, plus the rounding)."""
    budget = real_pool_budget_gb(rec["mem"])
    if budget is None:
        return None
    argv = _sim_argv(rec, variant_argv)
    return tuple(memory_check.state_pool_size(sim_args(rec), hf_config, b, total_mib, argv)
                 for b in (budget - LOG_BUDGET_ROUNDING_GB - UNLOGGED_BELOW_GB, budget + LOG_BUDGET_ROUNDING_GB))


def _journal():
    import server  # pylint: disable=import-outside-toplevel
    server.import_collection()
    from ansible_collections.blackwell.sglang.plugins.module_utils import journal  # pylint: disable=import-outside-toplevel
    return journal


def sim_failure_class(plan):
    """The collection's class of the sim's start failure: its log line (launch_server.py prints
    ``exc_type: message``) through journal.classify, as the role reads the sim's journal."""
    if "error" not in plan:
        return None
    exc_type = memory_check.memory.OOMError.EXC_TYPES.get(plan["error"], "torch.OutOfMemoryError")
    return _journal().classify(["%s: %s" % (exc_type, plan.get("message", ""))])[0]


def real_failure_class(fixture_dir, label):
    journal = _journal()
    path = os.path.join(fixture_dir, "%s.log" % label)
    if not os.path.exists(path):
        path = os.path.join(fixture_dir, "mem_%s.txt" % label)
    with open(path, errors="replace") as f:
        return journal.classify(f.read().splitlines())


def sim_compare(entries, hf_config, total_mib=None):
    """Per start: the real figures beside the sim's plan for each SIM_VARIANTS resolution.
    {label: {"real": {...}, "sim": {variant: {...} or {"error": kind}}}}."""
    total_mib = total_mib or gpu_total_mib(entries)
    out = {}
    for label, rec in entries.items():
        if not rec["meta"] or total_mib is None:
            continue
        mem = rec["mem"]
        t, d = mem.get("target", {}), mem.get("draft", {})
        pool = (mem.get("mamba") or [{}])[0]
        real = {"ready": mem.get("ready"), "weights_gib": t.get("weights_gb"), "draft_weights_gib": d.get("weights_gb"),
                "free_before_weights_gib": t.get("load_begin_avail_gb"), "slots": pool.get("slots"),
                "state_gib": mem.get("state_gb"), "intermediate_gib": mem.get("intermediate_gb"),
                "kv_tokens": mem.get("max_total_num_tokens", t.get("kv_tokens")),
                "cap": mem.get("max_running_requests"), "slots_per_request": mem.get("state_slots_per_request")}
        real["draft_path"] = "--speculative-draft-model-path" in (mem.get("launch_argv") or [])
        sims = {}
        for name, argv in SIM_VARIANTS:
            p = sim_plan(rec, hf_config, total_mib, argv)
            if "error" in p:
                sims[name] = {"error": p["error"], "class": sim_failure_class(p), "message": p.get("message")}
                continue
            pathless = rec["meta"]["depth"] > 0 and not real["draft_path"]
            sims[name] = {"weights_gib": p["weights_mib"] / 1024.0, "draft_weights_gib": p["draft_weights_mib"] / 1024.0,
                          "free_before_weights_gib": p["avail_begin_mib"] / 1024.0,
                          "slots": p["max_mamba_cache_size"],
                          "state_gib": (p["mamba_conv_mib"] + p["mamba_ssm_mib"]) / 1024.0,
                          "intermediate_gib": (p.get("mamba_intermediate_ssm_mib", 0.0)
                                               + p.get("mamba_conv_window_mib", 0.0)) / 1024.0,
                          "kv_tokens": p["max_total_num_tokens"], "cap": p["max_running_requests"],
                          "kv_tokens_0517": kv_tokens_0517(p, hf_config) if pathless else p["max_total_num_tokens"],
                          "slots_per_request": memory_check.memory.mamba_ratio(_strategy_of(argv, rec)),
                          "slots_on_real_budget": slots_on_real_budget(rec, hf_config, total_mib, argv)}
            # the same plan with the real start's slot count: what the rest of the pools become
            # when the solve lands where the real one did
            same = p
            if real["slots"] is not None and real["slots"] != p["max_mamba_cache_size"]:
                same = sim_plan(rec, hf_config, total_mib, argv, ("--max-mamba-cache-size", str(real["slots"])))
            if "error" not in same:
                sims[name]["at_real_slots"] = {
                    "cap": same["max_running_requests"], "kv_tokens": same["max_total_num_tokens"],
                    "pool_budget_gib": same["pool_budget_mib"] / 1024.0,
                    "kv_tokens_0517": kv_tokens_0517(same, hf_config) if pathless else same["max_total_num_tokens"],
                    "intermediate_gib": (same.get("mamba_intermediate_ssm_mib", 0.0)
                                         + same.get("mamba_conv_window_mib", 0.0)) / 1024.0}
        out[label] = {"meta": rec["meta"], "real": real, "sim": sims}
    return out


def kv_tokens_0517(plan, hf_config):
    """The KV tokens 0.5.17 sizes from the sim's budget for a draft without a path (NEXTN's own
    MTP head): its ``model_runner_components/spec_aux_hidden_state.py``
    ``_resolve_eagle_aux_hidden_state`` sets ``eagle_draft_num_layers`` only when
    ``--speculative-draft-model-path`` is given, so ``pool_configurator.py``
    ``DefaultPoolConfigurator.__init__`` leaves the cell at the target's full-attention layers, and
    the draft worker then allocates its own pool of as many tokens outside that budget. The sim
    follows 0.5.23, which charges the MTP layer in the cell (MEMORY.md, difference 2). Same budget
    after the state pool as the sim's plan; page size 1."""
    model = memory_check.config.model_from_hf_config(hf_config)
    cell = memory_check.memory.kv_bytes_per_token(model, 1, "auto", False)
    rest_mib = plan["pool_budget_mib"] - plan["mamba_mib"]
    return int(rest_mib * memory_check.memory.MIB) // cell


def _strategy_of(argv, rec):
    own = levers(rec["mem"].get("launch_argv") or [])
    for seq in (own, list(argv)):
        if "--mamba-radix-cache-strategy" in seq:
            return {"mamba_radix_cache_strategy": seq[seq.index("--mamba-radix-cache-strategy") + 1],
                    "disable_overlap_schedule": True}
    return {"mamba_radix_cache_strategy": "extra_buffer"}


def sim_table(cmp_, trim="experts32"):
    rows = ["| start | slots real / sim nb / sim 23 | cap real / sim nb / sim 23 | KV tokens real / sim nb (diff) "
            "| KV tokens sim nb, 0.5.17's path-less draft cell (diff) "
            "| state GiB real / sim nb | intermediate GiB real / sim nb | weights GiB real / sim "
            "| slots: the release's solve on the real budget |",
            "|---|---|---|---|---|---|---|---|---|"]
    for label, c in sorted(cmp_.items(), key=lambda kv: (kv[1]["meta"]["depth"], kv[0])):
        if c["meta"]["trim"] != trim or c["meta"]["fraction"] is not None:
            continue
        r, nb, v23 = c["real"], c["sim"]["no_buffer"], c["sim"]["0.5.23"]
        kvd = memory_check.rel_diff(r["kv_tokens"], nb.get("kv_tokens"))
        kvd17 = memory_check.rel_diff(r["kv_tokens"], nb.get("kv_tokens_0517"))
        window = nb.get("slots_on_real_budget")
        window = "" if not window else ("%d" % window[0] if window[0] == window[1] else "%d-%d" % tuple(window))
        rows.append("| %s | %s / %s / %s | %s / %s / %s | %s / %s (%s) | %s (%s) | %s / %s | %s / %s | %s / %s | %s |" % (
            label, _f(r["slots"]), _f(nb.get("slots", nb.get("error"))), _f(v23.get("slots", v23.get("error"))),
            _f(r["cap"]), _f(nb.get("cap")), _f(v23.get("cap")),
            _f(r["kv_tokens"]), _f(nb.get("kv_tokens")), "" if kvd is None else "%+.1f %%" % (100 * kvd),
            _f(nb.get("kv_tokens_0517")), "" if kvd17 is None else "%+.1f %%" % (100 * kvd17),
            _f(r["state_gib"]), _f(nb.get("state_gib")), _f(r["intermediate_gib"]), _f(nb.get("intermediate_gib")),
            _f(r["weights_gib"]), _f(nb.get("weights_gib")), window))
    return "\n".join(rows)


def boundary_table(cmp_, fixture_dir):
    rows = ["| start | fraction | real: ready / class | sim no_buffer | sim 0.5.23 |", "|---|---:|---|---|---|"]
    for label, c in sorted(cmp_.items(), key=lambda kv: (kv[1]["meta"]["depth"], kv[1]["meta"]["fraction"] or 1)):
        if c["meta"]["fraction"] is None:
            continue
        real_cls = "" if c["real"]["ready"] else real_failure_class(fixture_dir, label)[0]
        cells = []
        for name, _argv in SIM_VARIANTS:
            sim = c["sim"][name]
            cells.append("%s (%s)" % (sim["error"], sim["class"]) if "error" in sim
                         else "starts, cap %s" % sim["cap"])
        rows.append("| %s | %s | %s | %s | %s |" % (label, c["meta"]["fraction"],
                                                    "ready" if c["real"]["ready"] else "fails: %s" % real_cls,
                                                    cells[0], cells[1]))
    return "\n".join(rows)


def predicted_rec(depth, fraction, argv=()):
    """A start as sim_compare's inputs describe it, for the sim alone (no real start yet)."""
    return {"meta": {"trim": "experts32", "depth": depth, "launch": 1, "fraction": None},
            "mem": {"mem_fraction": fraction, "launch_argv": list(argv)}}


def sim_boundary(hf_config, depth, total_mib, variant_argv=(), lo=0.05, hi=0.99, tol=0.001):
    """The sim's failure boundary at one depth: (highest failing fraction, lowest starting one,
    the failing plan's error kind and class), by bisection on --mem-fraction-static (the plan
    starts above the boundary and fails below it). None when even ``hi`` fails or ``lo`` starts."""
    def plan_at(f):
        return sim_plan(predicted_rec(depth, round(f, 4)), hf_config, total_mib, variant_argv)
    if "error" in plan_at(hi) or "error" not in plan_at(lo):
        return None
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if "error" in plan_at(mid):
            lo = mid
        else:
            hi = mid
    failing = plan_at(lo)
    return round(lo, 4), round(hi, 4), failing["error"], sim_failure_class(failing)


def predict_table(hf_config, total_mib, depths, fraction=0.88):
    """The sim's plan per depth for the served config on a card of ``total_mib``: what a real
    start of device.sh hybrid is to be held against, per SIM_VARIANTS resolution."""
    rows = ["| depth | sim no_buffer: slots / cap / KV tokens / intermediate GiB | boundary (fails / starts, class) "
            "| sim 0.5.23: slots / cap | boundary |", "|---:|---|---|---|---|"]
    for k in depths:
        cells = []
        for _name, argv in SIM_VARIANTS:
            p = sim_plan(predicted_rec(k, fraction), hf_config, total_mib, argv)
            b = sim_boundary(hf_config, k, total_mib, argv)
            bnd = "" if b is None else "%.3f / %.3f (%s: %s)" % b
            if "error" in p:
                cells.append(("%s" % p["error"], bnd))
                continue
            inter = (p.get("mamba_intermediate_ssm_mib", 0.0) + p.get("mamba_conv_window_mib", 0.0)) / 1024.0
            cells.append(("%s / %s / %s / %.2f" % (p["max_mamba_cache_size"], p["max_running_requests"],
                                                   p["max_total_num_tokens"], inter), bnd))
        nb, v23 = cells
        rows.append("| %d | %s | %s | %s | %s |" % (k, nb[0], nb[1], " / ".join(v23[0].split(" / ")[:2]), v23[1]))
    return "\n".join(rows)


def main(argv=None):
    argv = argv if argv is not None else sys.argv[1:]
    if argv and argv[0] == "--predict":
        # --predict CONFIG MIB [DEPTHS...]: the sim's side alone, before any real start
        with open(argv[1]) as f:
            hf = json.load(f)
        depths = [int(x) for x in argv[3:]] or [0, 1, 2, 3, 4, 5, 6, 8, 10, 12]
        print("## experts32 on a %s MiB card, --mem-fraction-static 0.88: the sim's plan\n" % argv[2])
        print(predict_table(hf, int(argv[2]), depths))
        return
    fixture_dir = argv[0] if argv else os.path.join(HERE, "..", "..", "fixtures", "real-sglang", "hybrid")
    entries = load(fixture_dir)
    for trim in sorted(set(r["meta"]["trim"] for r in entries.values() if r["meta"])):
        print("## %s: memory per depth\n" % trim)
        print(memory_table(entries, trim))
        print("\n## %s: verify round per depth and concurrency\n" % trim)
        print(physics_table(entries, trim))
        rt = rounds(entries, trim)[0]
        for c in sorted(set(c for (_k, c) in rt)):
            costs = marginal_costs(rt, c)
            print("C=%d marginal ms per draft step: %s" % (c, ", ".join("%d->%d %.2f" % x for x in costs)))
        print()
    for label, rec in sorted(entries.items()):
        if rec["meta"] and rec["meta"]["fraction"] is not None:
            mem = rec["mem"]
            print("boundary %s: ready=%s failure=%s" % (label, mem.get("ready"), mem.get("failure")))
    cfg_path = os.path.join(fixture_dir, "config_experts32.json")
    if os.path.exists(cfg_path) and gpu_total_mib(entries):
        with open(cfg_path) as f:
            cmp_ = sim_compare(entries, json.load(f))
        print("\n## experts32: real vs the sim's plan (same config.json, %d MiB card)\n" % gpu_total_mib(entries))
        print(sim_table(cmp_))
        print()
        print(boundary_table(cmp_, fixture_dir))


if __name__ == "__main__":
    main()
