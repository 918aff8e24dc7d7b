"""Launches of the simulator's SGLang 0.5.23 as the pool-model tests need them: the memory plan of
a lever setting (sglang_sim.memory.plan after sglang_sim.server_args resolves the argv, as the
sim's launch_server does) and the journal lines that launch prints, produced by the sim's own
code (launch_server.server_args_line and a TP rank's _rank._Rank.run, in this process, with no
sleeps), so the tests read exactly what a sim node's journal holds."""

import io
import json
import os
import sys
import tempfile
from pathlib import Path

from sglang_sim import _rank, config, launch_server, memory, server_args

ROOT = Path(__file__).resolve().parents[1]
TRIMMED = json.loads((ROOT / "tests/fixtures/qwen3_5_moe_trimmed/config.json").read_text())
H100_MIB = 81559  # an H100 80GB HBM3's memory.total


def gpu_of(profile, memory_mib=None):
    return config.gpus({"profile": profile, "gpu_memory_mib": memory_mib, "gpu_count": None})[0]


# (name, gpu, model, tp): the hybrid profiles of the sim's catalog and the trimmed Qwen3.5-MoE.
NODES = (
    ("trimmed-h100", gpu_of("h200-x1", H100_MIB), config.model_from_hf_config(TRIMMED), 1),
    ("qwen3-next-h200-tp2", gpu_of("h200-x8"), config.CATALOG["Qwen/Qwen3-Next-80B-A3B-Instruct"], 2),
    ("qwen3.5-122b-rtx-tp4", gpu_of("rtx-pro-6000-x4"), config.CATALOG["Qwen/Qwen3.5-122B-A10B"], 4),
)


def argv_of(setting, tp=1):
    """The argv of a pool-model setting (draft_tokens + override keys + mem_fraction_static)."""
    argv = ["--model-path", "/models/m", "--tp-size", str(tp)]
    d = setting.get("draft_tokens")
    if d:
        argv += ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(d - 1),
                 "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(d)]
    for key in ("max_running_requests", "mamba_full_memory_ratio", "max_mamba_cache_size",
                "mem_fraction_static", "cuda_graph_max_bs"):
        if setting.get(key) is not None:
            flag = "--cuda-graph-max-bs-decode" if key == "cuda_graph_max_bs" else "--" + key.replace("_", "-")
            argv += [flag, str(setting[key])]
    if setting.get("enable_linear_replayssm_spec"):
        argv.append("--enable-linear-replayssm-spec")
    return argv


def resolve(gpu, model, setting, tp=1):
    args, _warnings = server_args.resolve(server_args.parse(argv_of(setting, tp)), gpu["memory_mib"], model=model)
    return args


def plan(gpu, model, setting, tp=1):
    """memory.plan of the setting, or the OOMError the start would die with."""
    args = resolve(gpu, model, setting, tp)
    capture = server_args.capture_batch_sizes(args["cuda_graph_max_bs_decode"], args["speculative_algorithm"] is not None)
    try:
        return memory.plan(gpu, model, args, capture_bs=capture)
    except memory.OOMError as exc:
        return exc


def journal_lines(gpu, model, setting, tp=1, rank=0, host="node1"):
    """What the launch of ``setting`` prints: the main process's server_args banner, then rank
    ``rank``'s own lines (_rank._Rank.run), with journald's short-iso prefix."""
    args = resolve(gpu, model, setting, tp)
    got = plan(gpu, model, setting, tp)
    assert isinstance(got, dict), "the launch fails: %s" % got
    out = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {"rank": rank, "log_prefix": " TP%d" % rank if tp > 1 else "", "state_dir": tmp,
               "time_scale": 1e-9, "plan": got, "load_seconds": 0, "dev_dir": tmp, "devices": [],
               "gpu_index": gpu["index"], "gpu_uuid": gpu["uuid"], "title": "sglang::scheduler_TP%d" % rank,
               "gpu_total_mib": gpu["memory_mib"], "gpu_reserved_mib": gpu["reserved_mib"],
               "arch": "Qwen3_5MoeForCausalLM", "draft_arch": "Qwen3_5MoeForCausalLMMTP",
               "disable_cuda_graph": False, "chunked_prefill_size": args["chunked_prefill_size"],
               "context_len": args.get("context_length") or model["context_length"]}
        saved = sys.stderr
        sys.stderr = out
        try:
            banner = launch_server.server_args_line(args)
            launch_server.log(banner)
            _rank._Rank(cfg).run()
        finally:
            sys.stderr = saved
            _rank._held[:] = []
    prefix = "2026-12-07T12:00:00+0000 %s python[%d]: " % (host, os.getpid())
    return [prefix + line for line in out.getvalue().splitlines()], got
