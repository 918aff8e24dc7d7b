"""Journal classification on excerpts shaped like real SGLang 0.5.23 crash logs (messages from
the release's source, reference notes section 4), with journald's short-iso prefixes."""

from pathlib import Path

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import journal

P = "2026-12-02T14:50:01+0000 node1 python[4242]: "


def lines(*texts):
    return [P + t for t in texts]


KV_OOM = lines(
    "[2026-12-02 14:50:01] server_args=ServerArgs(model_path='/models/Qwen3.5-122B-A10B', tp_size=4, ...)",
    "[2026-12-02 14:50:09 TP0] Load weight begin. avail mem=94.61 GB",
    "[2026-12-02 14:52:40 TP0] Load weight end. elapsed=151.2 s, type=Qwen3_5MoeForCausalLM, avail mem=33.80 GB, mem usage=60.81 GB.",
    "[2026-12-02 14:52:41 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/model_executor/pool_configurator.py", line 212, in configure',
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    "[2026-12-02 14:52:41] Received sigquit from a child process. It usually means the child failed.",
)

GRAPH = lines(
    "[2026-12-02 14:50:09 TP0] Load weight end. elapsed=151.2 s, avail mem=33.80 GB, mem usage=60.81 GB.",
    "[2026-12-02 14:50:12 TP0] Memory pool end. avail mem=9.91 GB",
    "[2026-12-02 14:50:13 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=9.80 GB",
    "[2026-12-02 14:51:02 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 94.97 GiB",
    "Possible solutions:",
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)",
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)",
    "[2026-12-02 14:51:02] Received sigquit from a child process. It usually means the child failed.",
)

GRAPH_BARE_OOM = lines(
    "[2026-12-02 14:50:13 TP1] Capture cuda graph begin. This can take up to several minutes. avail mem=1.80 GB",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 1 has a total capacity of 94.97 GiB",
)

LOAD_OOM = lines(
    "[2026-12-02 14:50:09 TP0] Load weight begin. avail mem=20.61 GB",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB.",
)

AMBIGUOUS = lines(
    "usage: sglang serve [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH]",
    "                    [--cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE]",
    "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill",
)

UNRECOGNIZED = lines(
    "usage: sglang serve [-h] --model-path MODEL_PATH",
    "sglang serve: error: unrecognized arguments: --mamba-scheduler-strategy extra_buffer",
)

INVALID_CHOICE = lines(
    "sglang serve: error: argument --kv-cache-dtype: invalid choice: 'fp9' (choose from 'auto', 'fp8_e5m2', 'bf16')",
)

PORT = lines(
    "[2026-12-02 14:55:00] The server is fired up and ready to roll!",
    "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use",
)

# The texts below are 0.5.23's, rendered with the sim's default-profile figures
# (mem_cache/kv_cache_configurator.py, model_executor/pool_configurator.py, utils/network.py).
WEIGHTS_BUDGET = lines(
    "[2026-12-02 14:52:41 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    "ValueError: Loaded weights leave no GPU memory for the KV cache under "
    "--mem-fraction-static=0.785126015625. Raise --mem-fraction-static above 0.616 (minimum viable = "
    "1 - available/pre = 0.6155). If using speculative decoding, draft weights are now counted.",
    "[2026-12-02 14:52:41] Received sigquit from a child process. It usually means the child failed.",
)

HYBRID_STATE = lines(
    "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
    "max_mamba_cache_size=-21 (total_rest_memory=-0.82 GB, mamba_cache_per_req=36.63 MB). Try: (1) "
    "reduce --max-running-requests, (2) increase --mem-fraction-static, (3) reduce "
    "--speculative-num-draft-tokens, or (4) use GPUs with more memory.",
)

HYBRID_TOO_SMALL = lines(
    "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
    "max_mamba_cache_size=4, mamba_ratio=5, resulting max_num_reqs=0. Try: (1) reduce "
    "--max-running-requests, (2) increase --mem-fraction-static, or (3) use GPUs with more memory.",
)

SWA_NO_ROOM = lines(
    "RuntimeError: SWA pool cap (196608 tokens, 3.00 GiB) leaves no room for the full KV pool within "
    "the available 2.50 GiB. Reduce --max-running-requests, lower SGLANG_SWA_EVICTION_INTERVAL, or "
    "increase --mem-fraction-static.",
)

DSV4_SWA_NO_ROOM = lines(
    "RuntimeError: The DSV4 SWA pool cap (65536 tokens, 1.25 GB) leaves no room for the full KV pool "
    "within the available 1.00 GB. Reduce --max-running-requests, lower --swa-prefix-tails or "
    "SGLANG_SWA_EVICTION_INTERVAL, or increase --mem-fraction-static.",
)

NO_GPU = lines(
    "[2026-12-02 14:50:05 TP3] Scheduler hit an exception: Traceback (most recent call last):",
    "RuntimeError: CUDA error: invalid device ordinal",
)

NVSMI = lines("RuntimeError: nvidia-smi failed (exit code 9: NVIDIA-SMI has failed because it couldn't "
              "communicate with the NVIDIA driver.).")

PORT_TIMEOUT = lines("ValueError: HTTP server at 30000 is not available in 30 seconds. HTTP server is "
                     "used by a process already. process.name()='python3'")

# Harmless lines of 0.5.23 that mention ports in use or memory (utils/network.py info/warning,
# the mamba cap warning of kv_cache_configurator.py resolve_max_num_reqs).
HARMLESS = lines(
    "[2026-12-02 14:50:01] Port 30001 is already in use, trying port 30002",
    "[2026-12-02 14:50:12] port 5757 is in use. Waiting for 15 seconds for nccl_port to be available. "
    "nccl_port is used by a process already. process.name()='python3'",
    "[2026-12-02 14:50:12] The port 5757 is in use, but we could not find the process that uses it.",
    "[2026-12-02 14:52:41 TP0] max_running_requests is capped to 12 by the mamba state cache "
    "(max_mamba_cache_size=61, 5 state slots per request). To raise it: increase "
    "--mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size with "
    "--mamba-ssm-dtype bfloat16.",
    "[2026-12-02 14:52:41 TP0] max_running_requests was reduced from the requested 48 to 40 (per dp "
    "worker) due to the available KV cache capacity.",
    "[2026-12-02 14:50:01] Max running requests is reset to 48 for speculative decoding. You can "
    "override this by explicitly setting --max-running-requests.",
)

UNKNOWN = lines(
    "[2026-12-02 14:50:09 TP0] Load weight begin. avail mem=94.61 GB",
    "[2026-12-02 14:50:20] Rank 2 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), "
    "a common cause is the OS OOM killer. Run dmesg -T | grep -i oom",
)

READY = lines(
    "[2026-12-02 14:53:00 TP0] Capture cuda graph end. Time elapsed: 41.2 s. mem usage=3.10 GB. avail mem=6.70 GB.",
    "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
    "[2026-12-02 14:53:05] The server is fired up and ready to roll!",
)


@pytest.mark.parametrize("excerpt,expected", [
    (KV_OOM, "oom_kv_cache"),
    (GRAPH, "cuda_graph_capture"),
    (GRAPH_BARE_OOM, "cuda_graph_capture"),
    (LOAD_OOM, "cuda_oom"),
    (AMBIGUOUS, "bad_args"),
    (UNRECOGNIZED, "bad_args"),
    (INVALID_CHOICE, "bad_args"),
    (PORT, "port_in_use"),
    (PORT_TIMEOUT, "port_in_use"),
    (WEIGHTS_BUDGET, "oom_weights"),
    (HYBRID_STATE, "oom_hybrid_state"),
    (HYBRID_TOO_SMALL, "oom_hybrid_state"),
    (SWA_NO_ROOM, "oom_kv_cache"),
    (DSV4_SWA_NO_ROOM, "oom_kv_cache"),
    (NO_GPU, "no_gpu"),
    (NVSMI, "no_gpu"),
    (HARMLESS, "unknown"),
    (UNKNOWN, "unknown"),
    (READY, "unknown"),
    ([], "unknown"),
])
def test_classify(excerpt, expected):
    cls, line = journal.classify(excerpt)
    assert cls == expected
    if expected == "unknown":
        assert line is None
    else:
        assert line in excerpt


def test_evidence_line_is_the_cause():
    assert "Not enough memory" in journal.classify(KV_OOM)[1]
    assert "ambiguous option" in journal.classify(AMBIGUOUS)[1] or "usage:" in journal.classify(AMBIGUOUS)[1]


def test_capture_text_mentioning_mem_fraction_is_not_kv_oom():
    # The capture failure's advice mentions --mem-fraction-static; that must not read as the KV error.
    assert journal.classify(GRAPH)[0] == "cuda_graph_capture"


def test_oom_after_capture_end_is_not_a_capture_failure():
    excerpt = READY[:1] + lines("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB.")
    assert journal.classify(excerpt)[0] == "cuda_oom"


@pytest.mark.parametrize("excerpt,fatal", [
    (KV_OOM, True), (GRAPH, True), (UNKNOWN, True), (AMBIGUOUS, True), (READY, False),
    (WEIGHTS_BUDGET, True), (HYBRID_STATE, True), (HARMLESS, False),
    (lines("Load weight begin. avail mem=94.61 GB", "Decode batch, #running-req: 1, accept len: 3.2"), False),
])
def test_is_fatal(excerpt, fatal):
    assert journal.is_fatal(excerpt) is fatal


def test_saw_ready():
    assert journal.saw_ready(READY)
    assert not journal.saw_ready(KV_OOM)


def test_tail_and_hint():
    assert journal.tail(["a", "b", "c"], 2) == ["b", "c"]
    assert journal.tail(["a"], 5) == ["a"]
    assert journal.tail(["a"], 0) == []
    for cls in journal.FAILURE_CLASSES:
        assert journal.hint(cls)
    assert journal.hint("nonsense") == journal.hint("unknown")


@pytest.mark.parametrize("line", HARMLESS)
def test_no_rule_matches_a_harmless_line(line):
    assert journal.classify([line]) == ("unknown", None)


def test_memory_hints_name_the_levers_of_their_pool():
    # The decode graph batch size frees no state or KV memory in 0.5.23: only the capture hint
    # names it.
    for cls in ("oom_weights", "oom_hybrid_state", "oom_kv_cache"):
        assert "cuda_graph_max_bs" not in journal.hint(cls) and "graph" not in journal.hint(cls)
        assert "mem_fraction_static" in journal.hint(cls)
    assert "max_running_requests" in journal.hint("oom_hybrid_state")
    assert "cuda_graph_max_bs_decode" in journal.hint("cuda_graph_capture")


# --model-path that is no folder and no cached model: SGLang 0.5.23 dies while resolving its
# arguments (srt/utils/hf_transformers/config.py get_config -> AutoConfig.from_pretrained).
MODEL_MISSING = lines(
    "Traceback (most recent call last):",
    '  File "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/utils/hf_transformers/config.py", line 373, in get_config',
    "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
    "'/models/missing'. Use `repo_type` argument if needed.",
    "The above exception was the direct cause of the following exception:",
    "OSError: Incorrect path_or_model_id: '/models/missing'. Please provide either the path to a local folder "
    "or the repo_id of a model on the Hub.",
    "sglang-qwen.service: Main process exited, code=exited, status=1/FAILURE",
)

MODEL_NOT_CACHED = lines(
    "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
    "cached files.",
)


def test_model_missing_has_its_own_class_and_quotes_the_line():
    cls, line = journal.classify(MODEL_MISSING)
    assert cls == "model_missing"
    assert "'/models/missing'" in line and "HFValidationError" in line
    assert journal.is_fatal(MODEL_MISSING)
    assert "sglang_service_model_path" in journal.hint(cls)
    assert journal.hint(cls) != journal.hint("unknown")
    assert journal.classify(MODEL_NOT_CACHED)[0] == "model_missing"
    assert "model_missing" in journal.FAILURE_CLASSES


def test_model_missing_does_not_take_a_memory_failure():
    # A crash that loaded weights has a model: its memory class wins over any later noise.
    assert journal.classify(KV_OOM)[0] == "oom_kv_cache"
    assert journal.classify(lines("Loading safetensors checkpoint shards: 100% Completed"))[0] == "unknown"


# Captured from the real sglang 0.5.23 started on a node without GPU or driver
# (tests/fixtures/sglang-0.5.23-no-gpu/README.md says how), each line as journald stores it.
REAL_NO_ACCELERATOR = [
    P + line for line in (Path(__file__).resolve().parents[3] / "fixtures" / "sglang-0.5.23-no-gpu"
                          / "launch-no-accelerator.log").read_text().splitlines()]


def test_real_gpu_less_start_is_no_gpu_with_a_driver_hint():
    cls, line = journal.classify(REAL_NO_ACCELERATOR)
    assert cls == "no_gpu"
    assert line.endswith(
        "RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available.")
    assert journal.is_fatal(REAL_NO_ACCELERATOR)
    assert "driver" in journal.hint(cls) and "nvidia-smi" in journal.hint(cls)


def test_real_gpu_less_start_was_unknown_without_its_rule():
    """The log names no other class: without the get_device rule it would be `unknown`."""
    rest = [ln for ln in REAL_NO_ACCELERATOR if "No accelerator" not in ln]
    assert journal.classify(rest) == ("unknown", None)


def test_nvidia_smi_missing_is_no_gpu():
    excerpt = lines("RuntimeError: nvidia-smi not found. Ensure NVIDIA drivers are installed and accessible.")
    assert journal.classify(excerpt)[0] == "no_gpu"


# arg_groups/attention_hook.py handle_linear_attn_backend refusals, as prepare_server_args' traceback
# ends (the sim prints the same), and the harmless lines the ReplaySSM levers log.
REPLAYSSM_TOPK = lines(
    "Traceback (most recent call last):",
    '  File "sglang/srt/server_args.py", in prepare_server_args',
    "ValueError: --enable-linear-replayssm-spec requires a linear draft chain (--speculative-eagle-topk "
    "in {None, 1}); the chunked verify kernel uses a strictly-lower causal mask and is invalid for EAGLE "
    "tree verify. Got --speculative-eagle-topk=4.",
)
REPLAYSSM_REFUSALS = [
    "ValueError: --enable-linear-replayssm-spec requires the triton or flashinfer linear-attn decode "
    "backend, got --linear-attn-decode-backend='cutedsl'.",
    "ValueError: --enable-linear-replayssm-spec and --enable-linear-replayssm are mutually exclusive: "
    "they share the ring storage but drive it with incompatible cursor protocols (per-decode-forward vs "
    "per-verify-commit advance).",
    "ValueError: --enable-linear-replayssm requires --mamba-radix-cache-strategy no_buffer (the default); "
    "the extra_buffer ping-pong donation path is not yet supported (follow-up). Got "
    "--mamba-radix-cache-strategy='extra_buffer'.",
    "ValueError: --enable-linear-replayssm-spec is not supported on a PD prefill server: the ring is "
    "spec-verify-only scratch and the prefill server never runs spec verify.",
    "ValueError: --enable-linear-replayssm-spec with SGLANG_RAGGED_VERIFY_MODE=compact requires the KDA "
    "fold-every-commit family (DSPARK/DFLASH) and a ring-writing verify kernel "
    "(--linear-attn-verify-backend triton or nv_cutedsl); got algorithm='NEXTN', verify=None. Use "
    "SGLANG_RAGGED_VERIFY_MODE=static.",
    "ValueError: --linear-replayssm-cache-len must be >= 1, got 0.",
    "AssertionError: no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.",
    "AssertionError: extra_buffer is not supported for Qwen3_5MoeForCausalLM; use no_buffer.",
]
REPLAYSSM_HARMLESS = lines(
    "[2026-12-02 14:50:01] --enable-linear-replayssm-spec: setting --mamba-ssm-dtype float32 (cached "
    "replay uses compensated checkpoint projection and materialization).",
    "[2026-12-02 14:52:41 TP0] GDN ReplaySSM ring buffers allocated (record_len=16, fold=False): "
    "d=0.090GB, k=0.023GB, g=0.001GB rawv=0.090GB, rawk=0.023GB, ",
)


def test_replayssm_preconditions_are_bad_args():
    cls, line = journal.classify(REPLAYSSM_TOPK)
    assert cls == "bad_args" and "linear draft chain" in line
    for text in REPLAYSSM_REFUSALS:
        assert journal.classify(lines(text))[0] == "bad_args", text


def test_replayssm_info_lines_are_harmless():
    assert journal.classify(REPLAYSSM_HARMLESS) == ("unknown", None)
    assert journal.is_fatal(REPLAYSSM_HARMLESS) is False
