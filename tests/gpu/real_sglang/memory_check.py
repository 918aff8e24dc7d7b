"""A real SGLang 0.5.17 server's start-up memory figures beside the simulator's memory plan.

The simulator (``sim/sglang_sim/memory.py``) claims to size the weights, the KV pool (tokens and
bytes) and the running-request cap the way SGLang does. Only a real start-up says whether it
does: this module reads the memory lines a real 0.5.17 server logs while it starts, runs the
simulator's ``memory.plan`` on the same model config, GPU and flags, and prints both side by side.

Inputs (``tests/fixtures/real-sglang/``): ``launch_nospec.log``, ``launch_steps<K>.log`` (stdout
and stderr of ``python -m sglang.launch_server``), ``config.json`` (the served model's HF config),
optionally ``draft_config.json`` (a draft that is not the served model) and ``meta.json`` (the
launch argv; when a launch has none, its flags are read back from the ``server_args=ServerArgs(...)``
line the server logs).

Usage:  python tests/gpu/real_sglang/memory_check.py tests/fixtures/real-sglang [--json FILE]
"""

import argparse
import ast
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
if os.path.join(ROOT, "sim") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "sim"))

from sglang_sim import config, memory, server_args  # noqa: E402

# The GPU the real launches ran on: one H200 (nvidia-smi memory.total). The sim's h200-x1 profile
# supplies the driver-reserved part.
GPU_MEMORY_MIB = 143771
SIM_PROFILE = "h200-x1"

# --------------------------------------------------------------------------- log formats
# Each pattern is one logger call of SGLang 0.5.17 (paths under python/sglang/srt/). The log
# prefix is configure_logger's "[%(asctime)s{.ms}{ TPn}] " (utils/common.py), so patterns are
# searched, not anchored. GB in these lines is GiB: get_available_gpu_memory divides by 1 << 30,
# memory_pool.py's GB is 1024**3.
#
# name -> (source file, function, anchor text of the format, compiled regex)
SOURCES = {
    # First: its repr holds other patterns' field names.
    # entrypoints/engine.py Engine._launch_subprocesses: logger.info(f"{server_args=}") (dataclass repr)
    "server_args": ("entrypoints/engine.py", "Engine._launch_subprocesses", "{server_args=}",
                    re.compile(r"server_args=ServerArgs\((?P<body>.*)\)\s*$")),
    # distributed/bootstrap.py init_torch_distributed:
    #   f"Init torch distributed ends. elapsed={...:.2f} s, mem usage={...:.2f} GB"
    "dist_end": ("distributed/bootstrap.py", "init_torch_distributed",
                 "Init torch distributed ends. elapsed=",
                 re.compile(r"Init torch distributed ends\. elapsed=(?P<elapsed>[\d.]+) s, "
                            r"mem usage=(?P<usage>-?[\d.]+) GB")),
    # model_executor/model_runner.py ModelRunner.load_model:
    #   f"Load weight begin. avail mem={...:.2f} GB"
    "load_begin": ("model_executor/model_runner.py", "ModelRunner.load_model",
                   "Load weight begin. avail mem=",
                   re.compile(r"Load weight begin\. avail mem=(?P<avail>-?[\d.]+) GB")),
    # model_executor/model_runner.py ModelRunner.load_model:
    #   f"Load weight end. elapsed={...:.2f} s, type={type(self.model).__name__}, "
    #   f"{quant_str + ', ' if quant_str else ''}avail mem={...:.2f} GB, mem usage={...:.2f} GB."
    "load_end": ("model_executor/model_runner.py", "ModelRunner.load_model", "Load weight end. ",
                 re.compile(r"Load weight end\. elapsed=(?P<elapsed>[\d.]+) s, type=(?P<type>\w+), "
                            r"(?:(?P<quant>.*?), )?avail mem=(?P<avail>-?[\d.]+) GB, "
                            r"mem usage=(?P<usage>-?[\d.]+) GB\.")),
    # mem_cache/memory_pool.py KVCache._finalize_allocation_log (MHATokenToKVPool and kin):
    #   f"{cache_name} is allocated. dtype: {self.dtype}, #tokens: {num_tokens}, "
    #   f"K size: {k:.2f} GB, V size: {v:.2f} GB"   (or "KV size: {kv:.2f} GB" for one buffer);
    #   cache_name is "KV Cache", or "Full KV Cache" / "SWA KV Cache" (swa_memory_pool.py).
    #   The simulator's line has no "dtype: ..., " part, hence optional.
    "kv_alloc": ("mem_cache/memory_pool.py", "KVCache._finalize_allocation_log",
                 "is allocated. dtype: ",
                 re.compile(r"(?:(?P<label>Full|SWA) )?KV Cache is allocated\. "
                            r"(?:dtype: (?P<dtype>[\w.]+), )?#tokens: (?P<tokens>\d+), "
                            r"(?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB"
                            r"|KV size: (?P<kv>[\d.]+) GB)")),
    # mem_cache/kv_cache_configurator.py KVCacheConfigurator.configure:
    #   f"Memory pool end. avail mem={...:.2f} GB"
    "pool_end": ("mem_cache/kv_cache_configurator.py", "KVCacheConfigurator.configure",
                 "Memory pool end. ",
                 re.compile(r"Memory pool end\. avail mem=(?P<avail>-?[\d.]+) GB")),
    # model_executor/model_runner_components/cuda_graph_setup.py capture_decode_graph /
    # capture_prefill_graph: f"Capture {capture_name} {graph_backend} end. elapsed={:.2f} s, "
    # f"mem usage={:.2f} GB, avail mem={:.2f} GB."  with capture_name "target decode",
    # "target verify", "target prefill", "draft prefill"; speculative/eagle_worker_v2.py
    # EagleDraftWorker._capture_cuda_graphs: "Capture draft decode CUDA graph end. " / "Capture draft
    # extend CUDA graph end. " + the same tail (multi-layer EAGLE adds "step=N, ").
    "graph_end": ("model_executor/model_runner_components/cuda_graph_setup.py",
                  "capture_decode_graph", "CUDA graph end. ",
                  re.compile(r"Capture (?P<name>[\w ]+?) CUDA graph end\. (?P<mid>.*?)"
                             r"mem usage=(?P<usage>-?[\d.]+) GB, avail mem=(?P<avail>-?[\d.]+) GB")),
    # managers/scheduler.py Scheduler.init_model_worker (tp rank 0, after graph capture):
    #   f"max_total_num_tokens={}, chunked_prefill_size={}, max_prefill_tokens={}, "
    #   f"max_running_requests={}, context_len={}, available_gpu_mem={:.2f} GB"
    "scheduler": ("managers/scheduler.py", "Scheduler.init_model_worker",
                  "max_running_requests={self.max_running_requests}",
                  re.compile(r"max_total_num_tokens=(?P<max_total_num_tokens>\d+), "
                             r"chunked_prefill_size=(?P<chunked_prefill_size>-?\d+), "
                             r"max_prefill_tokens=(?P<max_prefill_tokens>\d+), "
                             r"max_running_requests=(?P<max_running_requests>\d+), "
                             r"context_len=(?P<context_len>\d+), "
                             r"available_gpu_mem=(?P<available_gpu_mem>-?[\d.]+) GB")),
    # arg_groups/speculative_hook.py _handle_eagle_family (logger.warning):
    "reset_48": ("arg_groups/speculative_hook.py", "_handle_eagle_family",
                 "Max running requests is reset to 48 for speculative decoding",
                 re.compile(r"Max running requests is reset to (?P<reqs>\d+) for speculative decoding")),
    # mem_cache/kv_cache_configurator.py KVCacheConfigurator.resolve_max_num_reqs (warning):
    "reqs_reduced": ("mem_cache/kv_cache_configurator.py", "KVCacheConfigurator.resolve_max_num_reqs",
                     "max_running_requests was reduced from the requested",
                     re.compile(r"max_running_requests was reduced from the requested (?P<requested>\d+) "
                                r"to (?P<reqs>\d+)")),
    # mem_cache/kv_cache_configurator.py KVCacheConfigurator._apply_token_constraints (warning):
    "total_tokens_capped": ("mem_cache/kv_cache_configurator.py",
                            "KVCacheConfigurator._apply_token_constraints",
                            "is larger than the profiled value",
                            re.compile(r"max_total_tokens=(?P<limit>\d+) is larger than the profiled "
                                       r"value (?P<tokens>\d+)")),
}
# Start-up failures worth naming in the table (texts of 0.5.17, and torch's).
FAILURES = (
    ("kv", "Not enough memory. Please try to increase --mem-fraction-static"),
    ("weights_budget", "Loaded weights leave no GPU memory for the KV cache"),
    ("graph", "Capture cuda graph failed"),
    ("torch_oom", "CUDA out of memory"),
    # mem_cache/kv_cache_configurator.py _handle_max_mamba_cache / resolve_max_num_reqs (hybrids)
    ("hybrid_state", "Not enough GPU memory for hybrid (mamba/linear-attention) state cache"),
    ("hybrid_reqs", "Hybrid (mamba/linear-attention) state cache is too small to serve any requests"),
)
READY = "The server is fired up and ready to roll!"

ROLES = ("target", "draft")
# ServerArgs fields the sim needs (flag = "--" + name with dashes).
ARG_FIELDS = ("model_path", "tp_size", "mem_fraction_static", "context_length",
              "max_running_requests", "max_total_tokens", "page_size", "kv_cache_dtype",
              "chunked_prefill_size", "cuda_graph_max_bs_decode", "speculative_algorithm",
              "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
              "speculative_draft_model_path")
ARG_ALIASES = {"model": "model_path", "tp": "tp_size", "tensor_parallel_size": "tp_size",
               "cuda_graph_max_bs": "cuda_graph_max_bs_decode",
               "speculative_draft_model": "speculative_draft_model_path"}
BOOL_FLAGS = ("disable_cuda_graph",)


def _num(text):
    return float(text) if any(c in text for c in ".e") else int(text)


def _role_of(counts, kind):
    """Target first, then draft: the scheduler builds the target worker, then the draft worker
    (managers/scheduler.py init_model_worker: init_tp_model_worker, maybe_init_draft_worker), and
    allocates the target pools before the draft's (init_memory_pools); neither role is named in
    the line itself and tp=1 has no rank prefix."""
    n = counts.get(kind, 0)
    counts[kind] = n + 1
    return ROLES[n] if n < len(ROLES) else "extra%d" % n


def parse_server_args_repr(body):
    """The scalar fields of a ``ServerArgs(...)`` repr (strings, numbers, None, booleans)."""
    out = {}
    for m in re.finditer(r"(?:^|, )(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|None|True|False"
                         r"|-?\d+(?:\.\d+)?(?:e-?\d+)?)(?=, \w+=|$)", body):
        try:
            out[m.group(1)] = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            pass
    return out


def parse_log(text):
    """Memory figures of one start-up log: {"target": {...}, "draft": {...}, top-level fields}.

    Per role: dist_mem_gb, load_begin_avail_gb, weights_gb ("Load weight end" mem usage),
    avail_after_weights_gb, weights_type, kv_tokens, k_gb, v_gb, kv_gb, kv_dtype, pool_end_avail_gb,
    graphs ({capture name: GB}), graph_gb (their sum), avail_after_graph_gb. Top level: the
    scheduler line's fields (max_total_num_tokens, chunked_prefill_size, max_prefill_tokens,
    max_running_requests, context_len, available_gpu_mem_gb = free memory after capture),
    avail_before_kv_gb (free memory when the target sized its pool: after the last weights load),
    reset_to_48, warnings, server_args, ready, failure.
    """
    out = {"target": {}, "draft": {}, "warnings": [], "reset_to_48": False, "ready": False,
           "failure": None, "server_args": {}}
    counts = {}
    last_load_avail = None
    for line in text.splitlines():
        for name, (_f, _fn, _a, rx) in SOURCES.items():
            m = rx.search(line)
            if not m:
                continue
            g = m.groupdict()
            if name == "dist_end":
                out[_role_of(counts, name)].setdefault("dist_mem_gb", float(g["usage"]))
            elif name == "load_begin":
                out[_role_of(counts, name)]["load_begin_avail_gb"] = float(g["avail"])
            elif name == "load_end":
                r = out.setdefault(_role_of(counts, name), {})
                r.update(weights_gb=float(g["usage"]), avail_after_weights_gb=float(g["avail"]),
                         weights_type=g["type"])
                last_load_avail = float(g["avail"])
            elif name == "kv_alloc":
                r = out.setdefault(_role_of(counts, name), {})
                if "avail_before_kv_gb" not in out and last_load_avail is not None:
                    out["avail_before_kv_gb"] = last_load_avail
                k = float(g["k"]) if g["k"] is not None else None
                v = float(g["v"]) if g["v"] is not None else None
                kv = float(g["kv"]) if g["kv"] is not None else k + v
                r.update(kv_tokens=int(g["tokens"]), k_gb=k, v_gb=v, kv_gb=kv,
                         kv_dtype=g["dtype"], kv_label=g["label"])
            elif name == "pool_end":
                out.setdefault(_role_of(counts, name), {})["pool_end_avail_gb"] = float(g["avail"])
            elif name == "graph_end":
                words = g["name"].split()
                role = words[0] if words[0] in ROLES else "target"
                r = out[role]
                r.setdefault("graphs", {})[g["name"]] = float(g["usage"])
                r["graph_gb"] = round(sum(r["graphs"].values()), 2)
                r["avail_after_graph_gb"] = float(g["avail"])
            elif name == "scheduler":
                for key, val in g.items():
                    key = "available_gpu_mem_gb" if key == "available_gpu_mem" else key
                    out[key] = _num(val)
            elif name == "reset_48":
                out["reset_to_48"] = True
            elif name in ("reqs_reduced", "total_tokens_capped"):
                out["warnings"].append(m.group(0))
            elif name == "server_args":
                out["server_args"] = parse_server_args_repr(g["body"])
            break
        if READY in line:
            out["ready"] = True
        if out["failure"] is None:
            for kind, text_ in FAILURES:
                if text_ in line:
                    out["failure"] = {"kind": kind, "line": line.strip()}
                    break
    return out


# --------------------------------------------------------------------------- launch inputs

def parse_argv(argv):
    """The sim-relevant flags of a launch argv (``--flag value`` / ``--flag=value``), keyed by
    ServerArgs field name; everything else is ignored."""
    out = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("--"):
            continue
        key, eq, val = tok[2:].partition("=")
        key = key.replace("-", "_")
        key = ARG_ALIASES.get(key, key)
        if key in BOOL_FLAGS:
            out[key] = True
            continue
        if key not in ARG_FIELDS:
            continue
        if not eq:
            if i >= len(argv):
                break
            val = argv[i]
            i += 1
        try:
            out[key] = _num(val)
        except ValueError:
            out[key] = val
    return out


def launch_args(name, parsed, meta):
    """Flags of one launch: meta.json's argv for it when there is one (what was typed; the sim
    resolves it as SGLang does), else the ``server_args=ServerArgs(...)`` line of its log."""
    entry = _meta_entry(meta, name)
    argv = entry.get("argv") if isinstance(entry, dict) else entry
    if isinstance(argv, str):
        argv = argv.split()
    if argv:
        args = parse_argv(list(argv))
        args["_source"] = "meta.json argv"
        return args
    sa = parsed.get("server_args") or {}
    args = {k: sa[k] for k in ARG_FIELDS + BOOL_FLAGS if sa.get(k) is not None}
    args["_source"] = "server_args line" if sa else "none"
    return args


def _meta_entry(meta, name):
    """meta.json: {"<log name>": {"argv": [...]}} or the same under "launches", keyed by the log's
    file name or stem; {"argv": {...}} per name; or one {"argv": [...]} for every launch."""
    stem = os.path.splitext(name)[0]
    per_name_argv = meta.get("argv") if isinstance(meta.get("argv"), dict) else None
    for table in (meta.get("launches"), meta, per_name_argv):
        if isinstance(table, dict):
            for key in (name, stem):
                if key in table and key not in ("argv", "launches"):
                    return table[key]
    if isinstance(meta.get("argv"), (list, str)):
        return {"argv": meta["argv"]}
    return {}


def sim_argv(args):
    """The sim's command line for these flags (its own parser and resolution then apply)."""
    argv = ["--model-path", str(args.get("model_path") or "model")]
    for key in ARG_FIELDS[1:]:
        if args.get(key) is not None:
            argv += ["--" + key.replace("_", "-"), str(args[key])]
    for key in BOOL_FLAGS:
        if args.get(key):
            argv.append("--" + key.replace("_", "-"))
    return argv


def draft_hf_config(fixture_dir, args, target_hf, meta_entry=None):
    """The draft's HF config: the served model's when the draft path is the model path, else
    meta.json's "draft_config" (a path relative to the fixtures) or ``draft_config.json``."""
    path = args.get("speculative_draft_model_path")
    if not args.get("speculative_algorithm") or not path:
        return None
    if str(path).rstrip("/") == str(args.get("model_path") or "").rstrip("/"):
        return target_hf
    names = []
    if isinstance(meta_entry, dict) and meta_entry.get("draft_config"):
        names.append(meta_entry["draft_config"])
    names += ["draft_config.json", os.path.join("draft", "config.json")]
    for n in names:
        p = os.path.join(fixture_dir, n)
        if os.path.isfile(p):
            with open(p) as fh:
                return json.load(fh)
    raise FileNotFoundError("draft %s is not the served model and the fixtures hold no "
                            "draft_config.json" % path)


# --------------------------------------------------------------------------- the sim's side

def sim_plan(args, target_hf, draft_hf=None, gpu_memory_mib=GPU_MEMORY_MIB, extra_argv=()):
    """memory.plan for these flags and configs, as the sim's launch_server computes it
    (server_args.resolve, capture_batch_sizes, memory.plan); ``extra_argv``: more sim flags
    (a lever such as ``--mamba-radix-cache-strategy no_buffer``). Returns the plan dict plus
    kv_gb_target (the target pool's share of the KV bytes); an OOMError gives
    {"error": kind, "message": ...} with the partial plan."""
    gpu = config.gpus({"profile": SIM_PROFILE, "gpu_memory_mib": gpu_memory_mib, "gpu_count": 1})[0]
    model = config.model_from_hf_config(target_hf)
    draft = config.model_from_hf_config(draft_hf) if draft_hf is not None else None
    try:
        ns = server_args.parse(sim_argv(args) + list(extra_argv))
    except SystemExit as exc:
        return {"error": "bad_args", "message": "sim parser exited %s on %s" % (
            exc.code, sim_argv(args) + list(extra_argv))}
    resolved, _warnings = server_args.resolve(ns, gpu["memory_mib"], model=model)
    spec = resolved.get("speculative_algorithm") is not None
    capture = server_args.capture_batch_sizes(resolved["cuda_graph_max_bs_decode"], spec)
    try:
        p = memory.plan(gpu, model, resolved, draft, capture_bs=capture)
    except memory.OOMError as exc:
        return {"error": exc.kind, "message": exc.message, "plan": exc.plan}
    target_bytes = memory.kv_bytes_per_token(model, resolved["tp_size"],
                                             resolved.get("kv_cache_dtype", "auto"), False)
    p["kv_gb_target"] = p["max_total_num_tokens"] * target_bytes / memory.GIB
    p["context_len"] = resolved.get("context_length") or model["context_length"]
    return p


def state_pool_size(args, target_hf, pool_budget_gb, gpu_memory_mib=GPU_MEMORY_MIB, extra_argv=()):
    """The state pool's slot count (max_mamba_cache_size) that the release's joint solve gives for
    a pool budget of ``pool_budget_gb``: free memory after the weights less the static slack, the
    figure kv_cache_configurator.py ``_profile_available_bytes`` hands to
    ``_handle_max_mamba_cache`` (the sim's copy, memory._handle_max_mamba_cache). A real start's
    own logged budget fed here says whether a slot the sim's plan gains or loses is the solve's
    rounding of a budget that differs, or a different solve."""
    gpu = config.gpus({"profile": SIM_PROFILE, "gpu_memory_mib": gpu_memory_mib, "gpu_count": 1})[0]
    model = config.model_from_hf_config(target_hf)
    resolved, _warnings = server_args.resolve(server_args.parse(sim_argv(args) + list(extra_argv)),
                                              gpu["memory_mib"], model=model)
    conv, ssm = memory.mamba_cache_per_req(model, resolved["tp_size"], resolved.get("mamba_ssm_dtype"))
    p = {}
    try:
        memory._handle_max_mamba_cache(  # pylint: disable=protected-access
            p, resolved, model, pool_budget_gb, conv + ssm, resolved.get("speculative_algorithm") is not None,
            resolved.get("speculative_num_draft_tokens") or 1, resolved.get("max_running_requests"))
    except memory.OOMError:
        pass
    return p.get("max_mamba_cache_size")


# --------------------------------------------------------------------------- comparison

def _gb(mib):
    return None if mib is None else mib / 1024.0


def rows_for(parsed, plan):
    """(quantity, real, sim) for one launch. Real KV GB sums both pools' K and V; the sim charges
    the draft at the target's per-layer size (as 0.5.17's DefaultPoolConfigurator does), so the
    target pool is also compared alone."""
    t, d = parsed["target"], parsed["draft"]
    real_kv = None
    if "kv_gb" in t:
        real_kv = t["kv_gb"] + d.get("kv_gb", 0.0)
    ok = plan is not None and "error" not in plan
    g = plan.get if ok else (lambda k: None)
    return [
        ("free before weights GB", t.get("load_begin_avail_gb"), _gb(g("avail_begin_mib"))),
        ("weights GB (target)", t.get("weights_gb"), _gb(g("weights_mib"))),
        ("weights GB (draft)", d.get("weights_gb"), _gb(g("draft_weights_mib")) if d else None),
        ("free before KV GB", parsed.get("avail_before_kv_gb"), _gb(g("avail_after_weights_mib"))),
        ("KV tokens", parsed.get("max_total_num_tokens", t.get("kv_tokens")), g("max_total_num_tokens")),
        ("running-request cap", parsed.get("max_running_requests"), g("max_running_requests")),
        ("KV GB (target pool)", t.get("kv_gb"), g("kv_gb_target")),
        ("KV GB (all pools)", real_kv, _gb(g("kv_mib"))),
        ("graph GB", (t.get("graph_gb") or 0.0) + (d.get("graph_gb") or 0.0) if t.get("graphs") else None,
         _gb(g("graph_mib"))),
        ("free after graphs GB", parsed.get("available_gpu_mem_gb"), _gb(g("avail_after_graph_mib"))),
    ]


def rel_diff(real, sim):
    """(sim - real) / real, None when either is missing or real is 0."""
    if real is None or sim is None or real == 0:
        return None
    return (sim - real) / float(real)


def launch_key(name):
    """nospec first, then steps 1, 2, ... 10 (numeric), then anything else by name."""
    m = re.match(r"launch_steps(\d+)\.log$", name)
    if name == "launch_nospec.log":
        return (0, 0, name)
    return (1, int(m.group(1)), name) if m else (2, 0, name)


def launch_logs(fixture_dir):
    if not os.path.isdir(fixture_dir):
        return []
    return sorted((n for n in os.listdir(fixture_dir) if re.match(r"launch_.*\.log$", n)),
                  key=launch_key)


def check(fixture_dir, gpu_memory_mib=GPU_MEMORY_MIB):
    """Every launch of the fixtures: {"launch", "args", "real", "sim", "rows"}."""
    with open(os.path.join(fixture_dir, "config.json")) as fh:
        target_hf = json.load(fh)
    meta = {}
    meta_path = os.path.join(fixture_dir, "meta.json")
    if os.path.isfile(meta_path):
        with open(meta_path) as fh:
            meta = json.load(fh)
    out = []
    for name in launch_logs(fixture_dir):
        with open(os.path.join(fixture_dir, name), errors="replace") as fh:
            parsed = parse_log(fh.read())
        args = launch_args(name, parsed, meta)
        try:
            draft_hf = draft_hf_config(fixture_dir, args, target_hf, _meta_entry(meta, name))
            plan = sim_plan(args, target_hf, draft_hf, gpu_memory_mib)
        except (FileNotFoundError, ValueError, KeyError) as exc:
            plan = {"error": "inputs", "message": str(exc)}
        rows = [{"quantity": q, "real": r, "sim": s, "rel_diff": rel_diff(r, s)}
                for q, r, s in rows_for(parsed, plan)]
        out.append({"launch": name, "args": args, "real": parsed,
                    "sim": {k: v for k, v in plan.items() if k != "plan"}, "rows": rows})
    return out


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.2f" % v if abs(v) < 1e5 else "%.0f" % v
    return str(v)


def markdown(results):
    """One table: a row per launch and quantity, real vs sim and (sim - real) / real."""
    lines = ["| launch | quantity | real 0.5.17 | sim | rel diff |", "|---|---|---:|---:|---:|"]
    for res in results:
        launch = os.path.splitext(res["launch"])[0].replace("launch_", "")
        if res["real"].get("failure"):
            launch += " (real: %s)" % res["real"]["failure"]["kind"]
        if "error" in res["sim"]:
            launch += " (sim: %s)" % res["sim"]["error"]
        for row in res["rows"]:
            rd = row["rel_diff"]
            lines.append("| %s | %s | %s | %s | %s |" % (
                launch, row["quantity"], _fmt(row["real"]), _fmt(row["sim"]),
                "-" if rd is None else "%+.1f%%" % (100 * rd)))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixture_dir", nargs="?", default=os.path.join(ROOT, "tests/fixtures/real-sglang"))
    ap.add_argument("--gpu-memory-mib", type=int, default=GPU_MEMORY_MIB)
    ap.add_argument("--json", help="write the JSON dump here instead of after the table")
    a = ap.parse_args(argv)
    if not launch_logs(a.fixture_dir):
        print("no launch_*.log under %s" % a.fixture_dir, file=sys.stderr)
        return 1
    results = check(a.fixture_dir, a.gpu_memory_mib)
    print(markdown(results))
    dump = json.dumps(results, indent=1, sort_keys=True, default=str)
    if a.json:
        with open(a.json, "w") as fh:
            fh.write(dump + "\n")
    else:
        print("\n```json\n%s\n```" % dump)
    return 0


if __name__ == "__main__":
    sys.exit(main())
