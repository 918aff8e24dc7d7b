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
    args, _warnings = server_args.resolve(server_args.parse(argv), gpu["memory_mib"])
    _unused, model = config.lookup_model(MODEL)
    return args, memory.plan(gpu, model, args, other_used_mib=other)


def test_default_profile_is_the_operators_card():
    g = config.gpus({"profile": "rtx-pro-6000-x4", "gpu_memory_mib": None, "gpu_count": None})
    assert len(g) == 4
    assert g[0]["memory_mib"] == 97887
    assert g[0]["compute_cap"] == "12.0"


@pytest.mark.parametrize("steps", [1, 2, 3, 4, 5])
def test_steps_1_to_5_start(steps):
    args, p = _plan(steps)
    assert args["cuda_graph_max_bs_decode"] == 512  # auto: tp>=4 on a <160 GB GPU
    assert p["max_total_num_tokens"] > 100000
    assert p["used_mib"] < 97887 - 540


def test_steps_10_dies_in_kv_cache_allocation():
    with pytest.raises(memory.OOMError) as err:
        _plan(10)
    assert err.value.kind == "kv"
    assert err.value.message == (
        "Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.852")


@pytest.mark.parametrize("bs", ["64", "32", "16"])
def test_steps_10_fits_with_smaller_cuda_graph_bs(bs):
    args, p = _plan(10, ["--cuda-graph-max-bs-decode", bs])
    assert args["cuda_graph_max_bs_decode"] == int(bs)
    assert p["max_total_num_tokens"] > 0


def test_steps_10_fits_with_fewer_running_requests():
    args, p = _plan(10, ["--max-running-requests", "16"])
    # SGLang caps the default decode graph bs at max_running_requests.
    assert args["cuda_graph_max_bs_decode"] == 16
    assert p["max_total_num_tokens"] > 0


def test_memory_grows_with_draft_tokens_and_graph_bs():
    _unused, p3 = _plan(3)
    _unused, p5 = _plan(5)
    assert p5["mamba_mib"] > p3["mamba_mib"]
    assert p5["spec_buffer_mib"] > p3["spec_buffer_mib"]
    assert p5["graph_mib"] > p3["graph_mib"]
    assert p5["max_total_num_tokens"] < p3["max_total_num_tokens"]
    _unused, small = _plan(5, ["--cuda-graph-max-bs-decode", "64"])
    assert small["graph_mib"] < p5["graph_mib"]


def test_auto_mem_fraction_formula():
    # reserved = 512 + 1.5*8192 + 4/8*1024 + 2*512 + 8*len(prefill buckets), floored at 10 GB
    cps, bs, frac = server_args.auto_memory_settings(97887, 4, None, None, None, False)
    assert (cps, bs) == (8192, 512)
    n = len(server_args._prefill_buckets(8192))
    reserved = 512 + 1.5 * 8192 + 512 + 1024 + 8 * n
    assert frac == round((97887 - reserved) / 97887, 3)
    # B200-class memory: 16k chunk, bs 512 regardless of tp
    assert server_args.auto_memory_settings(183359, 1, None, None, None, False)[:2] == (16384, 512)
    # tp < 4 on a 96 GB card: 256
    assert server_args.auto_memory_settings(97887, 2, None, None, None, False)[1] == 256


def test_too_small_mem_fraction_fails_kv():
    with pytest.raises(memory.OOMError) as err:
        _plan(3, ["--mem-fraction-static", "0.6"])
    assert err.value.kind == "kv"
    assert "mem_fraction_static=0.6" in err.value.message


def test_too_large_mem_fraction_fails_graph_capture():
    with pytest.raises(memory.OOMError) as err:
        _plan(5, ["--mem-fraction-static", "0.98"])
    assert err.value.kind == "graph"
    assert "CUDA out of memory" in err.value.message
    # without graphs there is nothing to capture
    _plan(5, ["--mem-fraction-static", "0.98", "--disable-cuda-graph"])


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
