"""The simulator's memory model and the journal classifier against the pinned release's source.

Fails when a text the sim prints or the classifier matches, a default the memory model uses
(the 48 running requests, the auto-fraction terms, the vision factor, the state-pool ratios) or
a metric name the sim exports changes or disappears in the wheel. Pure functions of the release
(the vision adjustment, the capture-bucket generators) are run from the wheel itself; formulas
that need a live server are compared as expressions of the release's source.
"""

import ast
import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "sim"))

import release_contract as rc  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.module_utils import journal  # noqa: E402
from sglang_sim import _rank, config, memory, server_args  # noqa: E402

KVC = "srt/mem_cache/kv_cache_configurator.py"
POOL = "srt/model_executor/pool_configurator.py"
HOOK = "srt/arg_groups/memory_hook.py"


pytestmark = pytest.mark.usefixtures("pinned_wheel")


def _sim_templates(path):
    return rc.templates_of_tree(ast.parse(Path(path).read_text()))


# --------------------------------------------------------------------------- message texts

@pytest.mark.parametrize("sim_text,path,anchor", [
    (memory.MSG_WEIGHTS_LEAVE_NO_MEMORY, KVC, "Loaded weights leave no GPU memory"),
    (memory.MSG_HYBRID_STATE, KVC, "Not enough GPU memory for hybrid"),
    (memory.MSG_HYBRID_TOO_SMALL, KVC, "state cache is too small to serve"),
    (memory.MSG_NOT_ENOUGH_MEMORY, POOL, "Not enough memory. Please try"),
    (memory.WARN_MAMBA_CAP, KVC, "by the mamba state cache"),
    (memory.WARN_KV_CAP, KVC, "was reduced from the requested"),
    (memory.WARN_MAX_TOTAL_TOKENS, KVC, "is larger than the profiled value"),
    (_rank.CUDA_GRAPH_CAPTURE_FAILED_MSG, "srt/model_executor/runner_backend_utils/__init__.py",
     "Possible solutions"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None)
def test_sim_prints_the_release_text(sim_text, path, anchor):
    assert rc.normalise(sim_text) == rc.find_template(path, anchor)


def test_capture_failure_wrapper_and_spec_reset_warning():
    assert rc.find_template("srt/model_executor/runner/decode_cuda_graph_runner.py",
                            "Capture cuda graph failed") == "Capture cuda graph failed: {}\n{}"
    theirs = rc.find_template("srt/arg_groups/speculative_hook.py", "Max running requests is reset to")
    assert theirs in _sim_templates(ROOT / "sim/sglang_sim/server_args.py")


# --------------------------------------------------------------------------- defaults

def test_speculation_resets_max_running_requests_to_48():
    body = rc.function_source("srt/arg_groups/speculative_hook.py", "_handle_eagle_family")
    assert int(re.search(r"max_running_requests=(\d+)", body).group(1)) == 48
    ns = server_args.parse(["--model-path", "m", "--speculative-algorithm", "NEXTN"])
    assert server_args.resolve(ns, 97887)[0]["max_running_requests"] == 48


def test_memory_hook_runs_before_the_speculative_reset():
    # So the graph reserve of the auto fraction uses the 512 graph batch, not the 48.
    src = rc.source("srt/arg_groups/pipeline.py")
    assert src.index("run_hook(handle_gpu_memory_settings") < src.index("run_hook(handle_speculative_decoding")


@pytest.mark.parametrize("expr", [
    "reserved_mem = 512",
    "reserved_mem += activation_tokens * 1.5",
    "reserved_mem += cfg.tp_size * cfg.pp_size / 8 * 1024",
    "reserved_mem += reserve_for_graph_mb(server_args)",
    "reserved_mem = max(reserved_mem, 10 * 1024)",
    "round((gpu_mem - reserved_mem) / gpu_mem, 3)",
    "activation_tokens = max(cfg.chunked_prefill_size, 2048)",
    "elif gpu_mem < 160 * 1024:",
    "decode_cuda_graph_config.max_bs = 512",
    "declare_resolution(server_args, '_handle_gpu_memory_settings', chunked_prefill_size=8192)",
    "mem_fraction_static = adjust_mem_fraction_for_vlm(",
])
def test_auto_fraction_terms(expr):
    assert expr in rc.function_source(HOOK, "handle_gpu_memory_settings")


@pytest.mark.parametrize("expr", [
    "reserved_mem += decode_cuda_graph_config.max_bs * 2",
    "reserved_mem += len(prefill_cuda_graph_config.bs) * 8",
])
def test_graph_reserve_terms(expr):
    assert expr in rc.function_source(HOOK, "reserve_for_graph_mb")


def test_post_capture_sizing_is_off_by_default():
    # When on, the hook skips the graph/activation reserve the sim's fraction includes.
    assert "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING = EnvBool(False)" in rc.source("srt/environ.py")


@pytest.mark.parametrize("vision", [
    {"depth": 27, "hidden_size": 1152},           # Qwen3.5: no num_hidden_layers -> 24
    {"num_hidden_layers": 32, "hidden_size": 1280},
    {"num_hidden_layers": 63, "hidden_size": 1536},  # clamped at 0.8
    {"num_hidden_layers": 12, "hidden_size": 768},   # clamped at 1.05
])
def test_vision_factor_is_the_release_function(release_fn, vision):
    adjust = release_fn("sglang.srt.arg_groups.memory_hook:adjust_mem_fraction_for_vlm")
    model_config = types.SimpleNamespace(hf_config=types.SimpleNamespace(
        vision_config=types.SimpleNamespace(**vision)))
    theirs = adjust(0.849, model_config, False, 97887)
    assert theirs == pytest.approx(0.849 * server_args.vlm_mem_fraction_factor(vision), abs=1e-12)


def test_default_profile_fraction_and_vision_factor():
    _key, model = config.lookup_model(config.DEFAULT_MODEL)
    assert round(server_args.vlm_mem_fraction_factor(model["vision_config"]), 4) == 0.9248
    frac = server_args.auto_memory_settings(97887, 4, None, None, None, False, model=model)[2]
    assert round(frac, 4) == 0.7851


def test_qwen35_is_multimodal_and_its_vision_config_has_no_layer_count():
    assert '"Qwen3_5MoeForConditionalGeneration"' in rc.source("srt/configs/model_config.py")
    vl = rc.function_source("srt/configs/qwen3_vl.py", "Qwen3VLVisionConfig.__init__")
    assert "self.depth = depth" in vl and "num_hidden_layers" not in vl
    assert "getattr(vision_config, 'num_hidden_layers', 24)" in rc.function_source(HOOK, "adjust_mem_fraction_for_vlm")


@pytest.mark.parametrize("max_bs", [8192, 4096, 1000, 16384])
def test_prefill_capture_buckets(release_fn, max_bs):
    gen = release_fn("sglang.srt.arg_groups.cuda_graph_hook:generate_prefill_cuda_graph_batch_sizes")
    assert server_args._prefill_buckets(max_bs) == gen(max_bs)


def test_state_pool_constants(release_fn):
    assert rc.module_constant(KVC, "MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO") \
        == memory.MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
    slots = release_fn("sglang.srt.mem_cache.allocation_sizing:get_mamba_tracking_slots")
    assert slots(extra_buffer=True, overlap=True) == memory.MAMBA_EXTRA_BUFFER_TRACKING_SLOTS
    fields = rc.source("srt/arg_groups/fields/schedule.py")
    ratio = re.search(r"mamba_full_memory_ratio: A\[.*?fallback=([\d.]+)", fields, re.S).group(1)
    assert float(ratio) == memory.MAMBA_FULL_MEMORY_RATIO
    vlm = re.search(r"SGLANG_VLM_CACHE_SIZE_MB = EnvInt\((\d+)\)", rc.source("srt/environ.py")).group(1)
    assert int(vlm) == memory.VLM_CACHE_SIZE_MB
    extra = rc.source("srt/arg_groups/overrides.py")
    archs = re.search(r"_MAMBA_EXTRA_BUFFER_ARCHS = frozenset\((.*?)\)", extra, re.S).group(1)
    assert '"Qwen3_5MoeForConditionalGeneration"' in archs


@pytest.mark.parametrize("qualname,expr", [
    ("KVCacheConfigurator._profile_available_bytes",
     "slack_gb = pre_model_load_memory * (1 - get_schedule().mem_fraction_static)"),
    ("KVCacheConfigurator._profile_available_bytes",
     "rest_memory = available_gpu_memory - slack_gb - mm_reservation_gb"),
    ("KVCacheConfigurator._profile_available_bytes", "rest_memory = self._handle_max_mamba_cache(rest_memory)"),
    ("KVCacheConfigurator._profile_available_bytes", "if rest_memory <= 0:"),
    ("KVCacheConfigurator._profile_available_bytes",
     "minimum_mem_fraction_static = 1 - available_gpu_memory / pre_model_load_memory"),
    ("KVCacheConfigurator._handle_max_mamba_cache",
     "mamba_budget = total_rest_memory * get_schedule().mamba_full_memory_ratio / "
     "(1 + get_schedule().mamba_full_memory_ratio)"),
    ("KVCacheConfigurator._handle_max_mamba_cache",
     "max_mamba_cache_size=int((mamba_budget_bytes - per_req * (1 + D) - extra_per_slot) // "
     "(per_req * (1 + D / ratio) + extra_per_slot))"),
    ("KVCacheConfigurator._handle_max_mamba_cache", "intermediate_size = per_req * (capped_reqs + 1) * D"),
    ("KVCacheConfigurator._handle_max_mamba_cache",
     "max_mamba_cache_size=max(1, get_schedule().max_running_requests // self.attn_dp_size)"),
    ("KVCacheConfigurator._handle_max_mamba_cache",
     "mamba_state_memory = ((get_schedule().max_mamba_cache_size + 1) * (stage_per_req + extra_per_slot)"),
    ("KVCacheConfigurator._calculate_mamba_ratio", "if get_memory().disable_radix_cache:\n        return 1"),
    ("KVCacheConfigurator.resolve_max_num_reqs",
     "estimated = int(token_capacity / self.model_config.context_len * 512)"),
    ("KVCacheConfigurator.resolve_max_num_reqs", "estimated = max(min(estimated, 4096), 2048)"),
    ("KVCacheConfigurator.resolve_max_num_reqs", "max_num_reqs = min(requested_per_worker, token_capacity // 2)"),
    ("KVCacheConfigurator.resolve_max_num_reqs", "mamba_cap = get_schedule().max_mamba_cache_size // ratio"),
])
def test_pool_sizing_expressions(qualname, expr):
    assert expr in rc.function_source(KVC, qualname)


def test_kv_tokens_and_capture_clamp():
    assert "available_bytes // self._cell_size" in rc.function_source(
        POOL, "DefaultPoolConfigurator.calculate_pool_sizes")
    clamp = rc.function_source("srt/model_executor/runner/base_cuda_graph_runner.py",
                               "get_batch_sizes_to_capture")
    assert "num_max_requests = model_runner.req_to_token_pool.size" in clamp
    assert "capture_bs = [bs for bs in capture_bs if bs <= num_max_requests]" in clamp


# --------------------------------------------------------------------------- classifier

@pytest.mark.parametrize("path,anchor,cls", [
    (KVC, "Loaded weights leave no GPU memory", "oom_weights"),
    (KVC, "Not enough GPU memory for hybrid", "oom_hybrid_state"),
    (KVC, "state cache is too small to serve", "oom_hybrid_state"),
    (POOL, "Not enough memory. Please try", "oom_kv_cache"),
    (POOL, "leaves no room for the full KV pool within the available {} GiB", "oom_kv_cache"),
    (POOL, "leaves no room for the full KV pool within the available {} GB", "oom_kv_cache"),
    ("srt/model_executor/runner/decode_cuda_graph_runner.py", "Capture cuda graph failed", "cuda_graph_capture"),
    ("srt/utils/common.py", "nvidia-smi failed (exit code", "no_gpu"),
    ("srt/utils/common.py", "Failed to get GPU memory capacity from nvidia-smi", "no_gpu"),
    ("srt/utils/network.py", "is not available in {} seconds", "port_in_use"),
    ("srt/speculative/spec_info.py", "Unknown speculative algorithm name", "bad_args"),
])
def test_classifier_matches_the_release_text(path, anchor, cls):
    line = rc.render(rc.find_template(path, anchor))
    if cls == "no_gpu":
        line = "RuntimeError: " + line  # _cuda_mem_fallback raises RuntimeError(reason)
    assert journal.classify([line])[0] == cls, line


def test_readiness_line():
    assert journal.READY_PATTERN.search(rc.find_template("srt/entrypoints/http_server.py", "ready to roll"))


# Where SGLang logs while a server starts and serves (models/ and layers/ excluded: thousands of
# files that log kernel choices, read in minutes on a small controller).
SERVING_PACKAGES = ("srt/entrypoints/", "srt/managers/", "srt/mem_cache/", "srt/model_executor/",
                    "srt/utils/", "srt/distributed/", "srt/arg_groups/", "srt/speculative/",
                    "srt/observability/", "srt/server_args.py", "srt/configs/model_config.py")


def test_no_rule_matches_an_info_line_of_the_release():
    hits = []
    paths = [p for prefix in SERVING_PACKAGES for p in rc.files(prefix)]
    assert len(paths) > 300
    scanned = 0
    for path in paths:
        try:
            calls = rc.log_calls(path, methods=("debug", "info"))
        except SyntaxError:
            continue
        scanned += len(calls)
        for method, template, lineno in calls:
            line = rc.render(template)
            cls = journal.classify([line])[0]
            if cls != "unknown":
                hits.append("%s:%d logger.%s %r -> %s" % (path, lineno, method, template, cls))
    assert scanned > 500
    assert not hits, "\n".join(hits)


@pytest.mark.parametrize("path", ["srt/utils/network.py", KVC, "srt/arg_groups/speculative_hook.py",
                                  "srt/distributed/bootstrap.py"])
def test_no_rule_matches_a_warning_on_the_start_path(path):
    for method, template, lineno in rc.log_calls(path, methods=("warning",)):
        line = rc.render(template)
        assert journal.classify([line])[0] == "unknown", "%s:%d %r" % (path, lineno, template)


# --------------------------------------------------------------------------- metrics

def test_sim_metric_names_exist_in_the_release():
    names = re.findall(r'metric\("([a-z_]+)"', (ROOT / "sim/sglang_sim/server.py").read_text())
    assert "max_total_num_tokens" in names and "kv_cache_memory_usage_gb" in names
    theirs = set(rc.templates("srt/observability/metrics_collector.py"))
    missing = [n for n in sorted(set(names)) if "sglang:" + n not in theirs]
    assert not missing, missing
