"""Memory model: which settings start and which die at init on the default profile."""

import pytest

from sglang_sim import config, memory, server_args

MODEL = "Qwen/Qwen3.5-122B-A10B"


def _plan(steps=None, extra=(), profile="rtx-pro-6000-x4", other=0.0):
    argv = ["--model-path", MODEL, "--tp-size", "4", "--kv-cache-dtype", "bf16"]
    if steps:
        argv += ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(steps),
                 "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)]
    argv += list(extra)
    settings = {"profile": profile, "gpu_memory_mib": None, "gpu_count": None}
    gpu = config.gpus(settings)[0]
    _unused, model = config.lookup_model(MODEL)
    args, _warnings = server_args.resolve(server_args.parse(argv), gpu["memory_mib"], model=model)
    capture = server_args.capture_batch_sizes(args["cuda_graph_max_bs_decode"], bool(steps))
    return args, memory.plan(gpu, model, args, other_used_mib=other, capture_bs=capture)


def test_default_profile_is_the_operators_card():
    g = config.gpus({"profile": "rtx-pro-6000-x4", "gpu_memory_mib": None, "gpu_count": None})
    assert len(g) == 4
    assert g[0]["memory_mib"] == 97887
    assert g[0]["compute_cap"] == "12.0"


def _capped(steps, extra=()):
    args, p = _plan(steps, extra)
    return p["max_running_requests"], p


@pytest.mark.parametrize("steps", range(1, 17))
def test_every_step_starts_with_the_radix_cache_on(steps):
    # 0.5.23 sizes the hybrid state pool jointly with the draft tokens and caps the running
    # requests (kv_cache_configurator.py resolve_max_num_reqs) instead of failing.
    args, p = _plan(steps)
    assert args["max_running_requests"] == 48  # speculative_hook.py
    assert 0 < p["max_running_requests"] < 48
    assert any(w.startswith("max_running_requests is capped to %d by the mamba state cache"
                            % p["max_running_requests"]) for w in p["warnings"])
    assert max(p["capture_bs"]) == p["max_running_requests"]  # capture clamp
    assert p["used_mib"] < 97887 - 540


def test_deeper_speculation_serves_fewer_requests():
    caps = [_capped(s)[0] for s in range(1, 17)]
    assert caps == sorted(caps, reverse=True)
    assert caps[0] == 29 and caps[-1] == 8


def test_auto_fraction_has_the_vision_reduction():
    args, _p = _plan(3)
    base = server_args.auto_memory_settings(97887, 4, None, None, None, False)[2]
    assert base == 0.849
    factor = server_args.vlm_mem_fraction_factor({"depth": 27, "hidden_size": 1152})
    assert factor == pytest.approx(0.95 * (1 - 0.1 * (1152 ** 2 / 1024.0 ** 2 - 1)))
    assert args["mem_fraction_static"] == pytest.approx(0.849 * factor)
    assert round(args["mem_fraction_static"], 4) == 0.7851


@pytest.mark.parametrize("steps", [8, 10, 16])
def test_without_radix_cache_deep_steps_leave_no_kv_budget(steps):
    # The state pool is sized from max_running_requests (48) plus one intermediate state per draft
    # token, and what it takes comes out of the budget before the KV check.
    with pytest.raises(memory.OOMError) as err:
        _plan(steps, ["--disable-radix-cache"])
    assert err.value.kind == "weights_budget" and err.value.exc_type == "ValueError"
    assert err.value.message.startswith(
        "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.785126")


@pytest.mark.parametrize("steps", range(1, 8))
def test_without_radix_cache_shallow_steps_keep_48_requests(steps):
    args, p = _plan(steps, ["--disable-radix-cache"])
    assert p["max_running_requests"] == 48 and p["max_mamba_cache_size"] == 48


@pytest.mark.parametrize("extra", [["--max-running-requests", "24"],
                                   ["--mem-fraction-static", "0.86"]])
def test_levers_that_fit_steps_10_without_radix_cache(extra):
    _args, p = _plan(10, ["--disable-radix-cache"] + extra)
    assert p["max_total_num_tokens"] > 0


def test_cuda_graph_bs_is_no_lever_for_the_state_pool():
    with pytest.raises(memory.OOMError) as err:
        _plan(10, ["--disable-radix-cache", "--cuda-graph-max-bs-decode", "16"])
    assert err.value.kind == "weights_budget"


def test_hybrid_state_pool_that_cannot_hold_one_slot():
    with pytest.raises(memory.OOMError) as err:
        _plan(3, ["--mem-fraction-static", "0.62"])
    assert err.value.kind == "hybrid_state" and err.value.exc_type == "RuntimeError"
    assert err.value.message.startswith(
        "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
        "Computed max_mamba_cache_size=")


def test_explicit_mamba_cache_size_too_small_to_serve():
    with pytest.raises(memory.OOMError) as err:
        _plan(3, ["--max-mamba-cache-size", "4"])
    assert err.value.kind == "hybrid_reqs"
    assert err.value.message.startswith(
        "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
        "max_mamba_cache_size=4, mamba_ratio=5, resulting max_num_reqs=0.")


def test_memory_grows_with_draft_tokens():
    _unused, p3 = _plan(3)
    _unused, p5 = _plan(5)
    assert p5["graph_mib"] > 0 and p3["graph_mib"] > 0
    assert p5["max_mamba_cache_size"] < p3["max_mamba_cache_size"]
    assert "spec_buffer_mib" not in p5  # 0.5.23 charges no speculative buffer


def test_auto_mem_fraction_formula():
    # reserved = 512 + 1.5*8192 + 4/8*1024 + 2*512 + 8*len(prefill buckets), floored at 10 GB
    cps, bs, frac = server_args.auto_memory_settings(97887, 4, None, None, None, False)
    assert (cps, bs) == (8192, 512)
    n = len(server_args._prefill_buckets(8192))
    assert n == 58  # cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes(8192)
    reserved = 512 + 1.5 * 8192 + 512 + 1024 + 8 * n
    assert frac == round((97887 - reserved) / 97887, 3)
    # B200-class memory: 16k chunk, bs 512 regardless of tp
    assert server_args.auto_memory_settings(183359, 1, None, None, None, False)[:2] == (16384, 512)
    # tp < 4 on a 96 GB card: 256
    assert server_args.auto_memory_settings(97887, 2, None, None, None, False)[1] == 256


def test_too_small_mem_fraction_leaves_no_budget():
    # A hybrid model meets the state-pool check first; with the radix cache off the state pool
    # is sized from the request count and the budget check speaks.
    with pytest.raises(memory.OOMError) as err:
        _plan(3, ["--mem-fraction-static", "0.6"])
    assert err.value.kind == "hybrid_state"
    with pytest.raises(memory.OOMError) as err:
        _plan(3, ["--mem-fraction-static", "0.6", "--disable-radix-cache"])
    assert err.value.kind == "weights_budget"
    assert "--mem-fraction-static=0.6. Raise --mem-fraction-static above 0.616" in err.value.message


def test_too_large_mem_fraction_fails_graph_capture():
    with pytest.raises(memory.OOMError) as err:
        _plan(5, ["--mem-fraction-static", "0.995"])
    assert err.value.kind == "graph"
    assert "CUDA out of memory" in err.value.message
    # without graphs there is nothing to capture
    _plan(5, ["--mem-fraction-static", "0.995", "--disable-cuda-graph"])


def test_memory_held_by_orphans_breaks_the_next_start():
    _unused, p = _plan(3)
    with pytest.raises(memory.OOMError) as err:
        _plan(3, other=p["used_mib"])
    assert err.value.kind == "weights"


def test_fp8_kv_doubles_token_capacity():
    _unused, bf16 = _plan(3)
    argv = ["--kv-cache-dtype", "fp8_e4m3"]
    args, fp8 = _plan(3, argv)
    assert fp8["max_total_num_tokens"] > 1.9 * bf16["max_total_num_tokens"]


def test_profiles():
    b200 = config.gpus({"profile": "b200-x8", "gpu_memory_mib": None, "gpu_count": None})
    h200 = config.gpus({"profile": "h200-x1", "gpu_memory_mib": None, "gpu_count": None})
    assert len(b200) == 8 and b200[0]["compute_cap"] == "10.0"
    assert h200[0]["memory_mib"] == 143771 and h200[0]["driver_version"] == "580.159.04"
    assert h200[0]["uuid"] == "GPU-0c659456-f90b-dc4f-2d09-40552f47d00c"
    small = config.gpus({"profile": "rtx-pro-6000-x4", "gpu_memory_mib": 40000, "gpu_count": None})
    assert small[0]["memory_mib"] == 40000
    # UUIDs are stable per profile + index and distinct
    again = config.gpus({"profile": "b200-x8", "gpu_memory_mib": None, "gpu_count": None})
    assert [g["uuid"] for g in b200] == [g["uuid"] for g in again]
    assert len(set(g["uuid"] for g in b200)) == 8


def test_fraction_above_one_fails_in_pool_allocation():
    with pytest.raises(memory.OOMError) as err:
        _plan(3, ["--mem-fraction-static", "1.05"])
    assert err.value.kind == "pool"
    assert "CUDA out of memory" in err.value.message
