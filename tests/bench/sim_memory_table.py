"""What the simulator says happens at start, per speculative step count, now and before its
memory model followed SGLang 0.5.23's code.

For one GPU profile (default: the operator's 4x RTX PRO 6000, Qwen3.5-122B-A10B, tp 4, bf16 KV,
NEXTN topk 1, every other setting automatic) and steps 1..16 it prints:

- ``0.5.23``: the current model (sim/sglang_sim/memory.py), radix cache on (the default);
- ``0.5.23, --disable-radix-cache``: the same without the radix cache;
- ``sim before``: the model as it was before it followed 0.5.23, run from the git history (the
  parent of the commit that removed its speculative-buffer charge), in a child interpreter.

Each cell is ``starts (N running)``, ``starts, capped at N running`` (0.5.23's warning), or the
error the rank raises.

With ``--levers`` it prints instead the running-request cap per draft depth x state-pool lever
(none, ``--mamba-full-memory-ratio 4``, ``--enable-linear-replayssm-spec``, both, and the
``no_buffer`` strategy's 3 slots per request) on the operator's node, and on an H100-sized node
(memory.total 81559 MiB) serving the trimmed Qwen3.5-MoE of tests/fixtures/qwen3_5_moe_trimmed next
to what SGLang 0.5.17 measured there. Usage::

    .venv/bin/python tests/bench/sim_memory_table.py [--profile P] [--steps 16] [--before REV]
    .venv/bin/python tests/bench/sim_memory_table.py --levers
"""

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = "Qwen/Qwen3.5-122B-A10B"

# Run in a child with an old sglang_sim on sys.path: print one JSON outcome per step.
CHILD = r"""
import json, sys
from sglang_sim import config, memory, server_args
profile, model_path, max_steps, radix_off = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
gpu = config.gpus({"profile": profile, "gpu_memory_mib": None, "gpu_count": None})[0]
_key, model = config.lookup_model(model_path)
out = []
for steps in range(1, max_steps + 1):
    argv = ["--model-path", model_path, "--tp-size", str(config.PROFILES[profile]["count"]),
            "--kv-cache-dtype", "bf16", "--speculative-algorithm", "NEXTN",
            "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(steps + 1)]
    if radix_off:
        argv.append("--disable-radix-cache")
    ns = server_args.parse(argv)
    try:
        args, _w = server_args.resolve(ns, gpu["memory_mib"], model=model)
    except TypeError:  # before the model argument existed
        args, _w = server_args.resolve(ns, gpu["memory_mib"])
    kwargs = {}
    if "capture_bs" in memory.plan.__code__.co_varnames:
        kwargs["capture_bs"] = server_args.capture_batch_sizes(args["cuda_graph_max_bs_decode"], True)
    try:
        p = memory.plan(gpu, model, args, **kwargs)
    except memory.OOMError as exc:
        out.append({"steps": steps, "fail": getattr(exc, "exc_type", None) or exc.kind,
                    "kind": exc.kind, "message": exc.message,
                    "frac": args["mem_fraction_static"]})
        continue
    out.append({"steps": steps, "mrr": p.get("max_running_requests") or args["max_running_requests"],
                "capped": any(w.startswith("max_running_requests is capped")
                              for w in p.get("warnings", [])),
                "tokens": p["max_total_num_tokens"], "frac": args["mem_fraction_static"],
                "graph_bs": max(p.get("capture_bs") or [args["cuda_graph_max_bs_decode"]])})
print(json.dumps(out))
"""

OLD_KIND_TEXT = {"kv": "RuntimeError: Not enough memory", "graph": "torch OOM in graph capture",
                 "pool": "torch OOM in pool allocation", "weights": "torch OOM loading weights"}


def before_rev():
    """Parent of the commit that removed the speculative-buffer charge from memory.py."""
    rev = subprocess.run(["git", "log", "-1", "--format=%H", "-S", "SPEC_BUFFER_MIB_PER_SLOT_TOKEN",
                          "--", "sim/sglang_sim/memory.py"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    if not rev:
        raise SystemExit("no commit in this history changed SPEC_BUFFER_MIB_PER_SLOT_TOKEN; pass --before")
    return rev + "^"


def run_child(sim_dir, profile, steps, radix_off):
    env = dict(os.environ, PYTHONPATH=str(sim_dir))
    res = subprocess.run([sys.executable, "-c", CHILD, profile, MODEL, str(steps), "1" if radix_off else "0"],
                         env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit("simulator at %s failed:\n%s" % (sim_dir, res.stderr))
    return json.loads(res.stdout)


def old_sim(rev):
    """Extract sim/ of ``rev`` into a temp dir; return the dir to put on PYTHONPATH."""
    data = subprocess.run(["git", "archive", "--format=tar", rev, "sim/sglang_sim"], cwd=ROOT,
                          capture_output=True, check=True).stdout
    tmp = Path(tempfile.mkdtemp(prefix="sim-before-"))
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp, filter="data")
        else:
            tar.extractall(tmp)
    return tmp / "sim"


def cell(o, old=False):
    if "fail" in o:
        if old:
            return OLD_KIND_TEXT.get(o["kind"], o["kind"])
        return "%s: %s" % (o["fail"], o["message"].split(" under ")[0].split(". ")[0])
    if o.get("capped"):
        return "starts, capped at %d running" % o["mrr"]
    return "starts (%d running)" % o["mrr"]


# --------------------------------------------------------------------------- --levers

H100_MIB = 81559  # an H100 80GB HBM3's memory.total
TRIMMED = ROOT / "tests/fixtures/qwen3_5_moe_trimmed/config.json"
NO_BUFFER = ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"]
LEVERS = [
    ("none", []),
    ("ratio 4", ["--mamba-full-memory-ratio", "4"]),
    ("replayssm", ["--enable-linear-replayssm-spec"]),
    ("replayssm + ratio 4", ["--enable-linear-replayssm-spec", "--mamba-full-memory-ratio", "4"]),
    ("no_buffer (3 slots)", NO_BUFFER),
    ("no_buffer + ratio 4", NO_BUFFER + ["--mamba-full-memory-ratio", "4"]),
    ("no_buffer + replayssm", NO_BUFFER + ["--enable-linear-replayssm-spec"]),
]
# SGLang 0.5.17 on one H100, the trimmed model, NEXTN, dummy weights (3 slots per request logged).
MEASURED_0517 = {1: {"none": 18}, 3: {"none": 13, "replayssm": 31}, 5: {"none": 10, "ratio 4": 17},
                 8: {"none": 7, "replayssm": 30}}


def _lever_plan(gpu, model, model_path, tp, steps, extra):
    sys.path.insert(0, str(ROOT / "sim"))
    from sglang_sim import memory, server_args  # pylint: disable=import-outside-toplevel
    argv = ["--model-path", model_path, "--tp-size", str(tp), "--kv-cache-dtype", "bf16",
            "--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)] + extra
    args, _w = server_args.resolve(server_args.parse(argv), gpu["memory_mib"], model=model)
    try:
        return args, memory.plan(gpu, model, args, capture_bs=server_args.capture_batch_sizes(
            args["cuda_graph_max_bs_decode"], True))
    except memory.OOMError as exc:
        return args, {"fail": exc.kind}


def cap_0517_replayssm(model, args, plan, steps):
    """0.5.17's rule, re-derived here (not the sim's): its kv_cache_configurator.py
    _handle_max_mamba_cache charged the GDN ring on every state slot with record_len = the draft
    tokens, and its Qwen3_5MoeForCausalLM had no mamba radix strategy (3 slots per request)."""
    from sglang_sim import memory  # pylint: disable=import-outside-toplevel
    conv, ssm = memory.mamba_cache_per_req(model, args["tp_size"], "float32")
    per_slot = conv + ssm + memory.replayssm_ring_bytes_per_req(model, args["tp_size"], steps + 1)
    r = args.get("mamba_full_memory_ratio") or memory.MAMBA_FULL_MEMORY_RATIO
    budget = plan["pool_budget_mib"] / 1024.0 * r / (1 + r) * memory.GIB
    return min(48, int((budget - per_slot) // per_slot) // 3)


def levers():
    sys.path.insert(0, str(ROOT / "sim"))
    from sglang_sim import config  # pylint: disable=import-outside-toplevel
    names = [n for n, _x in LEVERS]

    def cell(plan):
        return plan["fail"] if "fail" in plan else str(plan["max_running_requests"])

    gpu = config.gpus({"profile": "rtx-pro-6000-x4", "gpu_memory_mib": None, "gpu_count": None})[0]
    model = config.lookup_model(MODEL)[1]
    print("Running-request cap, sim of 0.5.23: rtx-pro-6000-x4 (operator), %s, tp 4, bf16 KV, NEXTN "
          "topk 1, auto fraction; 5 slots per request unless no_buffer" % MODEL)
    print("| steps | %s |" % " | ".join(names))
    print("|%s|" % "|".join("---" for _n in range(len(names) + 1)))
    for steps in (1, 2, 3, 4, 5, 8, 16):
        row = [cell(_lever_plan(gpu, model, MODEL, 4, steps, extra)[1]) for _n, extra in LEVERS]
        print("| %d | %s |" % (steps, " | ".join(row)))

    gpu = config.gpus({"profile": "h200-x1", "gpu_memory_mib": H100_MIB, "gpu_count": None})[0]
    model = config.model_from_hf_config(json.loads(TRIMMED.read_text()))
    print()
    print("Running-request cap on an H100-sized node (h200-x1 profile, memory.total %d MiB), the trimmed "
          "Qwen3.5-MoE (%s: %.1f GiB + %.2f GiB MTP), tp 1, NEXTN topk 1, auto fraction"
          % (H100_MIB, TRIMMED.relative_to(ROOT), model["params"] * 2 / 2 ** 30, model["draft_params"] * 2 / 2 ** 30))
    head = names + ["0.5.17 measured", "0.5.17 rule, replayssm"]
    print("| steps | %s |" % " | ".join(head))
    print("|%s|" % "|".join("---" for _n in range(len(head) + 1)))
    for steps in (1, 3, 5, 8):
        row = []
        for _n, extra in LEVERS:
            row.append(cell(_lever_plan(gpu, model, "/models/trimmed", 1, steps, extra)[1]))
        measured = ", ".join("%s %d" % kv for kv in sorted(MEASURED_0517[steps].items()))
        args, plan = _lever_plan(gpu, model, "/models/trimmed", 1, steps, NO_BUFFER)
        row += [measured, str(cap_0517_replayssm(model, args, plan, steps))]
        print("| %d | %s |" % (steps, " | ".join(row)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="rtx-pro-6000-x4")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--before", default=None, help="git revision of the old simulator")
    ap.add_argument("--levers", action="store_true", help="the cap per depth x state-pool lever")
    opts = ap.parse_args()
    if opts.levers:
        levers()
        return
    rev = opts.before or before_rev()
    short = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.strip()
    now = run_child(ROOT / "sim", opts.profile, opts.steps, False)
    now_off = run_child(ROOT / "sim", opts.profile, opts.steps, True)
    before = run_child(old_sim(rev), opts.profile, opts.steps, False)
    print("profile %s, %s, NEXTN topk 1, auto mem fraction: 0.5.23 %.4f, sim before %.3f"
          % (opts.profile, MODEL, now[0]["frac"], before[0]["frac"]))
    head = ("steps (draft)", "0.5.23 (radix cache on)", "0.5.23, --disable-radix-cache",
            "sim before (%s)" % short)
    print("| %s |" % " | ".join(head))
    print("|%s|" % "|".join("---" for _h in head))
    for a, b, c in zip(now, now_off, before):
        print("| %d (%d) | %s | %s | %s |" % (a["steps"], a["steps"] + 1, cell(a), cell(b), cell(c, old=True)))


if __name__ == "__main__":
    main()
