"""The simulator's state-pool levers against the pinned release's source: --enable-linear-replayssm-spec
(what it removes from and adds to the hybrid state pool, its preconditions and their texts, the
lines MambaPool logs), the state slots per request (_calculate_mamba_ratio and the radix strategy
that feeds it), and the journal classifier on those texts. Fails when the wheel's code or texts
drift from what the sim does."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "sim"))

import release_contract as rc  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.module_utils import journal  # noqa: E402
from sglang_sim import memory, server_args  # noqa: E402

KVC = "srt/mem_cache/kv_cache_configurator.py"
HOOK = "srt/arg_groups/attention_hook.py"
POOL = "srt/mem_cache/memory_pool.py"
OVERRIDES = "srt/arg_groups/overrides.py"
MAMBA_HOOK = "srt/arg_groups/mamba_hook.py"


pytestmark = pytest.mark.usefixtures("pinned_wheel")


def _norm(sim_text):
    """The sim's str.format template normalised like the release's (its escaped literal braces
    unescaped first: the release's f-string keeps "{None, 1}" literal, which normalises to {})."""
    return rc.normalise(sim_text.replace("{{", "{").replace("}}", "}"))


# --------------------------------------------------------------------------- texts

@pytest.mark.parametrize("sim_text,path,anchor", [
    (server_args.MSG_REPLAYSSM_SPEC_TOPK, HOOK, "requires a linear draft chain"),
    (server_args.MSG_REPLAYSSM_SPEC_DECODE, HOOK, "requires the triton or flashinfer"),
    (server_args.MSG_REPLAYSSM_SPEC_RAGGED, HOOK, "requires the KDA fold-every-commit family"),
    (server_args.MSG_REPLAYSSM_SPEC_PREFILL, HOOK, "is not supported on a PD prefill server"),
    (server_args.MSG_REPLAYSSM_EXCLUSIVE, HOOK, "are mutually exclusive"),
    (server_args.MSG_REPLAYSSM_SPEC_SSM_DTYPE, HOOK, "setting --mamba-ssm-dtype float32"),
    (server_args.WARN_REPLAYSSM_SPEC_SSM_DTYPE, HOOK, "the compact checkpoint is materialized"),
    (server_args.MSG_REPLAYSSM_DECODE_BACKEND, HOOK, "requires Triton, or Helion for KDA"),
    (server_args.MSG_REPLAYSSM_NO_BUFFER, HOOK, "the extra_buffer ping-pong donation path"),
    (server_args.MSG_REPLAYSSM_DISAGG, HOOK, "is not supported under PD disaggregation yet"),
    (server_args.MSG_REPLAYSSM_CACHE_LEN, HOOK, "--linear-replayssm-cache-len must be >= 1"),
    (server_args.MSG_FLASHKDA_DECODE, HOOK, "FlashKDA is prefill-only. Use"),
    (server_args.MSG_RAGGED_MODE_INVALID, "srt/speculative/ragged_verify.py", "invalid SGLANG_RAGGED_VERIFY_MODE"),
    (server_args.MSG_NO_BUFFER_PAGE, MAMBA_HOOK, "no_buffer only supports page_size=1"),
    (server_args.MSG_NO_BUFFER_OVERLAP, MAMBA_HOOK, "no_buffer do not support overlap schedule"),
    (server_args.MSG_NO_BUFFER_TRTLLM, MAMBA_HOOK, "no_buffer do not support trtllm_mha"),
    (server_args.MSG_EXTRA_BUFFER_ARCH, MAMBA_HOOK, "is not supported for {}; use no_buffer"),
    (memory.MSG_REPLAYSSM_RING, POOL, "GDN ReplaySSM ring buffers allocated"),
    (memory.MSG_REPLAYSSM_RING_LOW, POOL, "rawv={}GB, rawk={}GB, "),
], ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None)
def test_sim_prints_the_release_text(sim_text, path, anchor):
    assert _norm(sim_text) == rc.find_template(path, anchor)


def test_mamba_allocated_lines():
    theirs = rc.templates(POOL)
    # The speculative pool's line and the plain one (memory_pool.py MambaPool.__init__).
    assert _norm(memory.MSG_MAMBA_ALLOCATED + memory.MSG_MAMBA_SPEC_TAIL) in theirs
    assert _norm(memory.MSG_MAMBA_ALLOCATED) in theirs


def test_the_type_error_of_an_unset_request_cap():
    body = rc.function_source(KVC, "KVCacheConfigurator._handle_max_mamba_cache")
    assert "replay_req_slots = max(1, get_schedule().max_running_requests // self.attn_dp_size) + 1" in body
    try:
        None // 1
    except TypeError as exc:
        assert str(exc) == memory.MSG_REPLAYSSM_NO_MRR
    # and nothing sets max_running_requests without speculation (the speculative hook's 48 only)
    setters = [p for p in rc.files("srt/arg_groups/") if "max_running_requests=48" in rc.source(p)]
    assert setters == ["srt/arg_groups/speculative_hook.py"]


# --------------------------------------------------------------------------- the hook

@pytest.mark.parametrize("expr", [
    "decode = cfg.linear_attn_decode_backend or cfg.linear_attn_backend",
    "if cfg.speculative_eagle_topk not in (None, 1):",
    "if decode not in ('triton', 'flashinfer'):",
    "if decode not in {'triton', 'helion'}:",
    "if mamba_extra_buffer_of(resolved_view(server_args)):",
    "if cfg.disaggregation_mode != 'null':",
    "if cfg.linear_replayssm_cache_len < 1:",
    "if ragged_mode is not RaggedVerifyMode.STATIC:",
    "if _algo not in ('DSPARK', 'DFLASH') or verify not in ('triton', 'nv_cutedsl'):",
    "if cfg.disaggregation_mode == 'prefill':",
    "if cfg.enable_linear_replayssm:",
    "if cfg.mamba_ssm_dtype is None:",
    "declare_resolution(server_args, '_handle_linear_attn_backend', mamba_ssm_dtype='float32')",
    "elif cfg.mamba_ssm_dtype != 'float32':",
])
def test_hook_conditions(expr):
    assert expr in rc.function_source(HOOK, "handle_linear_attn_backend")


def test_hook_order_and_ragged_default():
    src = rc.source("srt/arg_groups/pipeline.py")
    # the strategy is resolved before the hook, the topk is still the user's when it runs
    assert src.index("run_hook(handle_model_specific_adjustments") < src.index("run_hook(handle_linear_attn_backend")
    assert src.index("run_hook(handle_linear_attn_backend") < src.index("run_hook(handle_speculative_decoding")
    assert 'SGLANG_RAGGED_VERIFY_MODE = EnvStr("static")' in rc.source("srt/environ.py")
    modes = re.findall(r'^\s+\w+ = "([\w-]+)"$', rc.source("srt/speculative/ragged_verify.py"), re.M)
    assert tuple(modes[:3]) == server_args.RAGGED_VERIFY_MODES


# --------------------------------------------------------------------------- the state pool

@pytest.mark.parametrize("expr", [
    "replayssm_active = get_exec().mamba.enable_linear_replayssm_spec and (self.hybrid_gdn_config is not None "
    "or self.hybrid_kda_config is not None)",
    "record_len = get_exec().mamba.linear_replayssm_cache_len",
    "if replayssm_active and self.hybrid_kda_config is None:",
    "replayssm_fixed_bytes = replayssm_ring_per_req * replay_req_slots",
    "replayssm_ring_per_slot = 0",
    "reserves_spec_state = has_spec_dec and (not replayssm_active) and (not _pd_prefill_skips_mamba_spec_state())",
    "max_mamba_cache_size=int((mamba_budget_bytes - replayssm_fixed_bytes - per_slot) // per_slot)",
    "per_slot = per_req + extra_per_slot",
    "mamba_state_memory = ((get_schedule().max_mamba_cache_size + 1) * (stage_per_req + extra_per_slot) "
    "+ replayssm_fixed_bytes) / (1 << 30)",
])
def test_state_pool_under_replayssm(expr):
    assert expr in rc.function_source(KVC, "KVCacheConfigurator._handle_max_mamba_cache")


def test_no_other_extra_bytes_per_slot():
    # extra_mamba_cache_bytes_per_req (the sim charges none) stays 0 for a plain configurator.
    assert "extra_mamba_cache_bytes_per_req: int = 0" in rc.source(KVC)


@pytest.mark.parametrize("expr", [
    "hv, v_dim, k_dim = self.shape.temporal",
    "h_k = self.shape.num_k_heads_per_tp",
    "per_layer = hv * record_len * v_dim * conv_b + h_k * record_len * k_dim * conv_b + hv * record_len * fp32_b",
    "if self.dtype.conv != torch.float32:",
    "per_layer += hv * record_len * v_dim * conv_b + h_k * record_len * k_dim * conv_b",
    "return per_layer * len(self.layers)",
])
def test_ring_bytes_per_request(expr):
    assert expr in rc.function_source("srt/configs/mamba_utils.py",
                                      "BaseLinearStateParams.replayssm_ring_bytes_per_req")


@pytest.mark.parametrize("expr", [
    "if enable_linear_replayssm_spec: intermediate_ssm_state_cache = None",
    "num_slots = spec_state_size + 1 if enable_linear_replayssm_spec and (not cache_params.is_kda) else size + 1",
    "ring_dtype = conv_dtype if enable_linear_replayssm_spec else ssm_dtype",
    "self.replayssm_spec_fold = bool(enable_linear_replayssm_spec and cache_params.is_kda)",
    "physical_conv_shape[window_axis] = speculative_num_draft_tokens + win - 1",
])
def test_pool_allocation(expr):
    body = rc.function_source(POOL, "MambaPool.__init__") + rc.function_source(
        POOL, "MambaPool._allocate_deduplicated_conv_window")
    assert expr in re.sub(r"\s+", " ", body)


def test_conv_window_dedup_rule():
    body = rc.function_source(POOL, "conv_window_dedup_enabled")
    assert "(speculative_eagle_topk is None or speculative_eagle_topk <= 1)" in body


def test_request_pool_is_the_spec_state_size_and_conv_dtype_is_bf16():
    assert "mamba_spec_state_size=max_num_reqs" in rc.function_source(KVC, "KVCacheConfigurator._build_hybrid_req_pool")
    assert "conv_dtype = dtype_map.get(envs.SGLANG_MAMBA_CONV_DTYPE.get(), torch.bfloat16)" in \
        rc.function_source("srt/configs/mamba_utils.py", "mamba2_state_dtype")
    assert 'SGLANG_MAMBA_CONV_DTYPE = EnvStr("bfloat16")' in rc.source("srt/environ.py")
    assert memory.CONV_DTYPE_BYTES == 2


def test_replayssm_cache_len_default():
    fields = rc.source("srt/arg_groups/fields/exec_.py")
    default = re.search(r"linear_replayssm_cache_len: A\[.*?\] = (\d+)", fields, re.S).group(1)
    assert int(default) == memory.LINEAR_REPLAYSSM_CACHE_LEN


# --------------------------------------------------------------------------- slots per request

@pytest.mark.parametrize("extra_buffer", [True, False])
@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("lazy", [True, False])
def test_tracking_slots_are_the_release_function(release_fn, extra_buffer, overlap, lazy):
    theirs = release_fn("sglang.srt.mem_cache.allocation_sizing:get_mamba_tracking_slots")
    assert theirs(extra_buffer=extra_buffer, overlap=overlap, lazy=lazy) == \
        memory.mamba_tracking_slots(extra_buffer, overlap, lazy)


@pytest.mark.parametrize("expr", [
    "if get_memory().disable_radix_cache:\n        return 1",
    "base = MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO - (MAMBA_CACHE_BASE_RATIO_DROP_ON_SKIP if skip_decode_lock else 0)",
    "additional_ratio = get_mamba_tracking_slots(extra_buffer=True, overlap=not get_schedule().disable_overlap_schedule, "
    "lazy=get_exec().mamba.enable_mamba_extra_buffer_lazy)",
    "return base + additional_ratio",
])
def test_ratio_expressions(expr):
    assert expr in rc.function_source(KVC, "KVCacheConfigurator._calculate_mamba_ratio")
    assert "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK = EnvBool(False)" in rc.source("srt/environ.py")


def test_strategy_resolution():
    body = rc.function_source(OVERRIDES, "_mamba_radix_cache_resolution")
    for expr in ("if view.disable_radix_cache:\n        return {}",
                 "if view.mamba_radix_cache_strategy == 'auto':",
                 "wants_overlap = not view.disable_overlap_schedule",
                 "wants_paging = view.page_size is not None and view.page_size > 1",
                 "if (wants_overlap or wants_paging) and supports_mamba_cache_extra_buffer(view, hf_config):",
                 "declared['mamba_radix_cache_strategy'] = 'extra_buffer'",
                 "declared['mamba_radix_cache_strategy'] = 'no_buffer'",
                 "declared['disable_overlap_schedule'] = True"):
        assert expr in body, expr
    assert "return view.linear_attn_backend == 'triton'" in rc.function_source(
        OVERRIDES, "supports_mamba_cache_extra_buffer")
    src = rc.source(OVERRIDES)
    for name in ("_MAMBA_RADIX_CACHE_ARCHS", "_MAMBA_EXTRA_BUFFER_ARCHS"):
        listed = re.search(name + r" = frozenset\((.*?)\)\n", src, re.S).group(1)
        for arch in memory.MAMBA_RADIX_CACHE_ARCHS:
            assert '"%s"' % arch in listed, (name, arch)


@pytest.mark.parametrize("expr", [
    "assert view.page_size in (1, None), 'no_buffer only supports page_size=1.'",
    "assert view.disable_overlap_schedule,",
    "assert view.attention_backend != 'trtllm_mha',",
])
def test_no_buffer_validation(expr):
    assert expr in rc.function_source(MAMBA_HOOK, "validate_mamba_no_buffer")


# --------------------------------------------------------------------------- classifier

@pytest.mark.parametrize("path,anchor", [
    (HOOK, "requires a linear draft chain"),
    (HOOK, "requires the triton or flashinfer"),
    (HOOK, "requires the KDA fold-every-commit family"),
    (HOOK, "is not supported on a PD prefill server"),
    (HOOK, "are mutually exclusive"),
    (HOOK, "requires Triton, or Helion for KDA"),
    (HOOK, "the extra_buffer ping-pong donation path"),
    (HOOK, "is not supported under PD disaggregation yet"),
    (HOOK, "--linear-replayssm-cache-len must be >= 1"),
    (HOOK, "FlashKDA is prefill-only. Use"),
    ("srt/speculative/ragged_verify.py", "invalid SGLANG_RAGGED_VERIFY_MODE"),
    (MAMBA_HOOK, "no_buffer only supports page_size=1"),
    (MAMBA_HOOK, "no_buffer do not support overlap schedule"),
    (MAMBA_HOOK, "no_buffer do not support trtllm_mha"),
    (MAMBA_HOOK, "is not supported for {}; use no_buffer"),
])
def test_classifier_reads_the_refusals_as_bad_args(path, anchor):
    line = "ValueError: " + rc.render(rc.find_template(path, anchor), "x")
    assert journal.classify([line])[0] == "bad_args", line


@pytest.mark.parametrize("anchor", ["setting --mamba-ssm-dtype float32", "the compact checkpoint is materialized"])
def test_classifier_leaves_the_hook_s_notes_alone(anchor):
    line = rc.render(rc.find_template(HOOK, anchor), "x")
    assert journal.classify([line]) == ("unknown", None)
    ring = rc.render(rc.find_template(POOL, "GDN ReplaySSM ring buffers allocated"), "1")
    assert journal.classify([ring]) == ("unknown", None)
