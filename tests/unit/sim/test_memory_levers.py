"""The state-pool levers of a hybrid model as 0.5.23 serves them: --enable-linear-replayssm-spec,
--mamba-full-memory-ratio, --max-mamba-cache-size and the state slots per request, per draft depth,
on the operator's node and on an H100-sized node with the trimmed Qwen3.5-MoE of
tests/fixtures/qwen3_5_moe_trimmed."""

import json
from pathlib import Path

import pytest

from sglang_sim import config, launch_server, memory, perf, server_args

ROOT = Path(__file__).resolve().parents[3]
TRIMMED = json.loads((ROOT / "tests/fixtures/qwen3_5_moe_trimmed/config.json").read_text())
OPERATOR = "Qwen/Qwen3.5-122B-A10B"
H100_MIB = 81559  # an H100 80GB HBM3's memory.total
REPLAY = ["--enable-linear-replayssm-spec"]


def _spec(steps):
    return ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)]


def _operator(steps=None, extra=()):
    argv = ["--model-path", OPERATOR, "--tp-size", "4", "--kv-cache-dtype", "bf16"]
    argv += (_spec(steps) if steps else []) + list(extra)
    gpu = config.gpus({"profile": "rtx-pro-6000-x4", "gpu_memory_mib": None, "gpu_count": None})[0]
    model = config.lookup_model(OPERATOR)[1]
    return _plan(gpu, model, argv)


def _trimmed(steps=None, extra=()):
    argv = ["--model-path", "/models/trimmed"] + (_spec(steps) if steps else []) + list(extra)
    gpu = config.gpus({"profile": "h200-x1", "gpu_memory_mib": H100_MIB, "gpu_count": None})[0]
    return _plan(gpu, config.model_from_hf_config(TRIMMED), argv)


def _plan(gpu, model, argv):
    args, warnings = server_args.resolve(server_args.parse(argv), gpu["memory_mib"], model=model)
    capture = server_args.capture_batch_sizes(args["cuda_graph_max_bs_decode"],
                                              args["speculative_algorithm"] is not None)
    return args, warnings, memory.plan(gpu, model, args, capture_bs=capture)


def _cap(plan_fn, steps, extra=()):
    return plan_fn(steps, extra)[2]["max_running_requests"]


# --------------------------------------------------------------------------- the cap per depth

@pytest.mark.parametrize("plan_fn", [_operator, _trimmed], ids=["operator", "trimmed-h100"])
def test_replayssm_cap_is_independent_of_depth_and_above_every_unlevered_cap(plan_fn):
    plain = [_cap(plan_fn, s) for s in (1, 3, 5, 8)]
    replay = [_cap(plan_fn, s, REPLAY) for s in (1, 3, 5, 8)]
    assert plain == sorted(plain, reverse=True) and plain[0] > plain[-1]
    # 0.5.23 charges the GDN ring as fixed scratch, (max_running_requests + 1) x ring(L): the
    # draft depth is not in the state-pool solve at all.
    assert len(set(replay)) == 1
    assert replay[0] > plain[0]


def test_operator_node_caps():
    assert [_cap(_operator, s) for s in (1, 3, 5, 8, 16)] == [29, 22, 18, 14, 8]
    assert [_cap(_operator, s, REPLAY) for s in (1, 8, 16)] == [40, 40, 40]


def test_trimmed_model_caps_follow_the_measured_direction():
    # Measured with 0.5.17 (3 slots per request): 18, 13, 10, 7 without levers; 17 at steps 5
    # with --mamba-full-memory-ratio 4; 31 / 30 at steps 3 / 8 with the ReplaySSM spec-verify.
    plain = {s: _cap(_trimmed, s) for s in (1, 3, 5, 8)}
    assert plain[1] > plain[3] > plain[5] > plain[8]
    ratio4 = _cap(_trimmed, 5, ["--mamba-full-memory-ratio", "4"])
    assert plain[5] < ratio4 < 2 * plain[5]
    replay = {s: _cap(_trimmed, s, REPLAY) for s in (1, 3, 5, 8)}
    assert len(set(replay.values())) == 1 and replay[1] > plain[1] and replay[8] >= 3 * plain[8]
    # Under no_buffer the sim's 0.5.23 gives 0.5.17's 3 slots per request: the cap is within
    # about 10 % of the measured one (one weight/fraction calibration apart).
    nb = ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"]
    measured = {1: 18, 3: 13, 5: 10, 8: 7}
    for steps, real in measured.items():
        got = _cap(_trimmed, steps, nb)
        assert abs(got - real) <= max(1, 0.1 * real), (steps, got, real)


def test_replayssm_removes_the_intermediate_states_and_charges_the_ring():
    _a, _w, plain = _operator(3)
    _a, _w, replay = _operator(3, REPLAY)
    model = config.lookup_model(OPERATOR)[1]
    ring = memory.replayssm_ring_bytes_per_req(model, 4, 16)
    # GDN ring per layer: d (HV L V) + k (H L K) in bf16, g (HV L) fp32, + the bf16 low parts.
    assert ring == 36 * (2 * (16 * 16 * 128 * 2 + 4 * 16 * 128 * 2) + 16 * 16 * 4)
    assert replay["replayssm_fixed_mib"] == pytest.approx(ring * 49 / memory.MIB)
    assert replay["mamba_intermediate_mib"] == pytest.approx(0.0, abs=1e-6)
    assert plain["mamba_intermediate_mib"] > 1000 and plain["replayssm_fixed_mib"] == 0.0
    assert replay["max_mamba_cache_size"] > plain["max_mamba_cache_size"]


def test_replayssm_with_explicit_state_pool_frees_kv_budget():
    _a, _w, plain = _operator(5, ["--max-mamba-cache-size", "100"])
    _a, _w, replay = _operator(5, ["--max-mamba-cache-size", "100"] + REPLAY)
    assert plain["max_mamba_cache_size"] == replay["max_mamba_cache_size"] == 100
    assert plain["max_running_requests"] == replay["max_running_requests"] == 20
    # no intermediate reserve, only the (smaller) ring: more KV tokens
    assert replay["max_total_num_tokens"] > plain["max_total_num_tokens"]


def test_replayssm_without_radix_cache_sizes_the_pool_from_the_requests():
    args, _w, replay = _operator(10, ["--disable-radix-cache"] + REPLAY)
    assert replay["max_mamba_cache_size"] == 48 and replay["max_running_requests"] == 48
    # The same depth without the lever exhausts the budget (test_memory.py).
    with pytest.raises(memory.OOMError):
        _operator(10, ["--disable-radix-cache"])


def test_mamba_full_memory_ratio_raises_the_cap():
    assert _cap(_operator, 5, ["--mamba-full-memory-ratio", "4"]) > _cap(_operator, 5)


def test_replayssm_without_a_request_cap_is_the_release_type_error():
    # No speculation and no --max-running-requests: 0.5.23 computes None // 1 for the ring.
    with pytest.raises(memory.OOMError) as err:
        _operator(None, REPLAY)
    assert err.value.kind == "replayssm_mrr" and err.value.exc_type == "TypeError"
    assert err.value.message == "unsupported operand type(s) for //: 'NoneType' and 'int'"
    _a, _w, p = _operator(None, REPLAY + ["--max-running-requests", "32"])
    assert p["replayssm_fixed_mib"] > 0 and p["max_running_requests"] == 32


def test_replayssm_on_a_dense_model_changes_nothing():
    gpu = config.gpus({"profile": "h200-x1", "gpu_memory_mib": None, "gpu_count": None})[0]
    model = config.CATALOG["Qwen/Qwen3-8B"]
    base = ["--model-path", "Qwen/Qwen3-8B"] + _spec(3)
    _a, _w, plain = _plan(gpu, model, base)
    _a, _w, replay = _plan(gpu, model, base + REPLAY)
    assert plain["max_total_num_tokens"] == replay["max_total_num_tokens"]
    assert plain["max_running_requests"] == replay["max_running_requests"]


# --------------------------------------------------------------------------- slots per request

@pytest.mark.parametrize("extra,ratio,strategy", [
    ([], 5, "extra_buffer"),                                           # 3 + 2 tracking slots
    (["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"], 3, "no_buffer"),
    (["--mamba-radix-cache-strategy", "extra_buffer_lazy"], 4, "extra_buffer_lazy"),
    (["--mamba-radix-cache-strategy", "extra_buffer", "--disable-overlap-schedule"], 4, "extra_buffer"),
    (["--disable-overlap-schedule"], 3, "no_buffer"),                  # auto without overlap
    (["--linear-attn-backend", "flashinfer"], 3, "no_buffer"),         # extra_buffer needs triton
    (["--disable-radix-cache"], 1, "auto"),
])
def test_state_slots_per_request(extra, ratio, strategy):
    args, _w, p = _operator(3, extra)
    assert args["mamba_radix_cache_strategy"] == strategy
    assert memory.mamba_ratio(args) == ratio
    if ratio > 1:
        assert "%d state slots per request" % ratio in " ".join(p["warnings"])
    if strategy == "no_buffer":
        assert args["disable_overlap_schedule"] is True  # _mamba_radix_cache_resolution


def test_text_only_qwen35_gets_5_slots_on_0_5_23():
    args, _w, p = _trimmed(3)
    assert args["mamba_radix_cache_strategy"] == "extra_buffer" and memory.mamba_ratio(args) == 5
    assert "5 state slots per request" in " ".join(p["warnings"])


def test_plan_resolves_an_unresolved_strategy():
    args, _w, p = _operator(3)
    raw = dict(args, mamba_radix_cache_strategy="auto")
    gpu = config.gpus({"profile": "rtx-pro-6000-x4", "gpu_memory_mib": None, "gpu_count": None})[0]
    again = memory.plan(gpu, config.lookup_model(OPERATOR)[1], raw,
                        capture_bs=server_args.capture_batch_sizes(args["cuda_graph_max_bs_decode"], True))
    assert again["max_running_requests"] == p["max_running_requests"]


# --------------------------------------------------------------------------- preconditions

def _refused(argv_extra, steps=3):
    with pytest.raises(server_args.ArgsError) as err:
        _operator(steps, argv_extra)
    assert err.value.exc_type == "ValueError"
    return err.value.message


def test_replayssm_spec_needs_a_linear_chain():
    argv = ["--model-path", OPERATOR, "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"] + REPLAY
    with pytest.raises(server_args.ArgsError) as err:
        server_args.resolve(server_args.parse(argv), 97887, model=config.lookup_model(OPERATOR)[1])
    assert err.value.message == (
        "--enable-linear-replayssm-spec requires a linear draft chain (--speculative-eagle-topk in "
        "{None, 1}); the chunked verify kernel uses a strictly-lower causal mask and is invalid for EAGLE "
        "tree verify. Got --speculative-eagle-topk=4.")


def test_replayssm_spec_needs_triton_or_flashinfer_decode():
    assert _refused(REPLAY + ["--linear-attn-decode-backend", "cutedsl"]) == (
        "--enable-linear-replayssm-spec requires the triton or flashinfer linear-attn decode backend, "
        "got --linear-attn-decode-backend='cutedsl'.")
    _operator(3, REPLAY + ["--linear-attn-decode-backend", "flashinfer"])  # served


def test_both_replayssm_flags_are_exclusive():
    msg = _refused(REPLAY + ["--enable-linear-replayssm", "--mamba-radix-cache-strategy", "no_buffer",
                             "--disable-overlap-schedule"])
    assert msg.startswith("--enable-linear-replayssm-spec and --enable-linear-replayssm are mutually exclusive")


def test_strategy_validation():
    # arg_groups/mamba_hook.py: an explicit no_buffer keeps the overlap scheduler unless told.
    with pytest.raises(server_args.ArgsError) as err:
        _operator(3, ["--mamba-radix-cache-strategy", "no_buffer"])
    assert (err.value.exc_type, err.value.message) == (
        "AssertionError", "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.")
    with pytest.raises(server_args.ArgsError) as err:
        _operator(3, ["--mamba-radix-cache-strategy", "extra_buffer", "--linear-attn-backend", "flashinfer"])
    assert err.value.message == "extra_buffer is not supported for Qwen3_5MoeForConditionalGeneration; use no_buffer."


def test_replayssm_decode_ring_needs_no_buffer():
    # 0.5.23 picks extra_buffer for Qwen3.5 before the hook runs, so the decode ring is refused
    # unless the strategy is set to no_buffer.
    assert _refused(["--enable-linear-replayssm"]) == (
        "--enable-linear-replayssm requires --mamba-radix-cache-strategy no_buffer (the default); the "
        "extra_buffer ping-pong donation path is not yet supported (follow-up). Got "
        "--mamba-radix-cache-strategy='extra_buffer'.")
    nb = ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"]
    _operator(3, ["--enable-linear-replayssm"] + nb)
    assert _refused(["--enable-linear-replayssm", "--linear-replayssm-cache-len", "0"] + nb) == \
        "--linear-replayssm-cache-len must be >= 1, got 0."


def test_replayssm_spec_refused_on_a_prefill_server():
    assert _refused(REPLAY + ["--disaggregation-mode", "prefill"]).startswith(
        "--enable-linear-replayssm-spec is not supported on a PD prefill server")


def test_replayssm_spec_with_ragged_verify(monkeypatch):
    monkeypatch.setenv("SGLANG_RAGGED_VERIFY_MODE", "compact")
    assert _refused(REPLAY) == (
        "--enable-linear-replayssm-spec with SGLANG_RAGGED_VERIFY_MODE=compact requires the KDA "
        "fold-every-commit family (DSPARK/DFLASH) and a ring-writing verify kernel "
        "(--linear-attn-verify-backend triton or nv_cutedsl); got algorithm='NEXTN', verify=None. Use "
        "SGLANG_RAGGED_VERIFY_MODE=static.")
    monkeypatch.setenv("SGLANG_RAGGED_VERIFY_MODE", "sideways")
    assert _refused(REPLAY).startswith("invalid SGLANG_RAGGED_VERIFY_MODE='sideways'; expected one of "
                                       "'static', 'cap-accept', 'compact'")


def test_replayssm_spec_pins_the_ssm_dtype():
    args, warnings, _p = _operator(3, REPLAY)
    assert args["mamba_ssm_dtype"] == "float32"
    assert "--enable-linear-replayssm-spec: setting --mamba-ssm-dtype float32" in warnings[0]
    args, warnings, _p = _operator(3, REPLAY + ["--mamba-ssm-dtype", "bfloat16"])
    assert args["mamba_ssm_dtype"] == "bfloat16"
    assert any(w.startswith("--enable-linear-replayssm-spec with --mamba-ssm-dtype=bfloat16: the compact "
                            "checkpoint") for w in warnings)


def test_refusal_changes_nothing_and_ends_like_the_release(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SGLANG_SIM_CONFIG", str(tmp_path / "none.json"))
    monkeypatch.setenv("SGLANG_SIM_STATE_DIR", str(tmp_path / "state"))
    argv = ["--model-path", OPERATOR, "--tp-size", "4"] + _spec(3) + REPLAY + [
        "--linear-attn-decode-backend", "helion"]
    with pytest.raises(SystemExit) as exc:
        launch_server.main(argv)
    assert exc.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("ValueError: --enable-linear-replayssm-spec requires the triton or flashinfer "
                       "linear-attn decode backend, got --linear-attn-decode-backend='helion'.")
    assert '  File "sglang/srt/server_args.py", in prepare_server_args' in err
    assert not (tmp_path / "state").exists()  # refused before any process or state


# --------------------------------------------------------------------------- log lines

def test_mamba_log_lines():
    _a, _w, plain = _operator(3)
    _a, _w, replay = _operator(3, REPLAY)
    _a, _w, nospec = _operator(None)
    (line,) = plain["mamba_log"]
    assert line.startswith("Mamba Cache is allocated. max_mamba_cache_size: 113, conv_state size: ")
    assert "intermediate_ssm_state_cache size: 3.23GB intermediate_conv_window_cache size: " in line
    # the intermediate SSM states of the request pool + 1 at 4 draft tokens (fp32, tp 4)
    assert plain["mamba_intermediate_ssm_mib"] == pytest.approx(36 * 23 * 4 * 16 * 128 * 128 * 4 / memory.MIB)
    head, ring = replay["mamba_log"]
    assert "intermediate_ssm_state_cache size: 0.00GB" in head
    assert ring.startswith("GDN ReplaySSM ring buffers allocated (record_len=16, fold=False): d=")
    assert ring.endswith("rawv=0.090GB, rawk=0.023GB, ")
    conv_dim = (2 * 16 * 128 + 64 * 128) // 4
    assert plain["mamba_conv_window_mib"] == pytest.approx(36 * 23 * conv_dim * (4 + 2) * 2 / memory.MIB)
    tree_argv = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk",
                 "2", "--speculative-num-draft-tokens", "6"]
    _a, _w, tree = _operator(None, tree_argv)
    slots = tree["max_running_requests"] + 1
    assert tree["mamba_conv_window_mib"] == pytest.approx(36 * slots * conv_dim * 6 * 3 * 2 / memory.MIB)
    (only,) = nospec["mamba_log"]
    assert "intermediate" not in only and only.endswith("GB ")


def test_cap_warning_text():
    _a, _w, p = _trimmed(8)
    cap = p["max_running_requests"]
    assert ("max_running_requests is capped to %d by the mamba state cache (max_mamba_cache_size=%d, 5 "
            "state slots per request). To raise it: increase --mamba-full-memory-ratio or "
            "--max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype bfloat16."
            % (cap, p["max_mamba_cache_size"])) in p["warnings"]


# --------------------------------------------------------------------------- compute

def test_replayssm_step_factor():
    model = config.lookup_model(OPERATOR)[1]
    args, _w, _p = _operator(3, REPLAY)
    assert perf.replayssm_factor(model, args) == perf.REPLAYSSM_STEP_FACTOR
    assert perf.replayssm_factor(model, dict(args, enable_linear_replayssm_spec=False)) == 1.0
    assert perf.replayssm_factor(config.CATALOG["Qwen/Qwen3-8B"], args) == 1.0
    # Calibrated on 0.5.17's C=1 cells: 200 -> 204 (steps 3), 232 -> 236 (steps 8).
    for before, after in ((200, 204), (232, 236)):
        assert before / perf.REPLAYSSM_STEP_FACTOR == pytest.approx(after, rel=0.01)


# --------------------------------------------------------------------------- the HF reader

def test_trimmed_config_weights():
    m = config.model_from_hf_config(TRIMMED)
    assert (m["full_attn_layers"], m["linear_attn_layers"], m["hybrid"]) == (12, 36, True)
    assert m["params"] * 2 / memory.GIB == pytest.approx(36, abs=0.5)        # ~36 GB
    assert m["draft_params"] * 2 / memory.GIB == pytest.approx(1.1, abs=0.1)  # the MTP layer
    _a, _w, p = _trimmed(3)
    assert p["weights_mib"] / 1024 == pytest.approx(35.9, abs=0.1)
    assert p["draft_weights_mib"] / 1024 == pytest.approx(1.14, abs=0.02)
    # KV: 12 full-attention layers + the MTP layer, 2 KV heads x 256, bf16
    assert p["kv_bytes_per_token"] == 13 * 2 * 256 * 2 * 2
    assert p["mamba_cache_per_req_mib"] == pytest.approx(36 * (64 * 128 * 128 * 4 + 12288 * 3 * 2) / memory.MIB)


def test_reader_takes_the_interval_or_the_layer_list():
    no_list = dict(TRIMMED)
    del no_list["layer_types"]
    assert config.model_from_hf_config(no_list) == config.model_from_hf_config(TRIMMED)
    bad = dict(TRIMMED, layer_types=["full_attention"] * 3)
    with pytest.raises(ValueError, match="layer_types must list"):
        config.model_from_hf_config(bad)
    neither = dict(no_list)
    del neither["full_attention_interval"]
    with pytest.raises(ValueError, match="layer_types or full_attention_interval"):
        config.model_from_hf_config(neither)


def test_reader_takes_the_multimodal_layout():
    text = {k: v for k, v in TRIMMED.items() if k not in ("architectures", "model_type")}
    nested = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
              "text_config": dict(text, model_type="qwen3_5_moe_text"),
              "vision_config": {"depth": 27, "hidden_size": 1152, "out_hidden_size": 3072}}
    flat = config.model_from_hf_config(TRIMMED)
    m = config.model_from_hf_config(nested)
    assert m["multimodal"] and m["vision_config"]["depth"] == 27
    assert 0.3e9 < m["params"] - flat["params"] < 0.6e9  # a Qwen3-VL tower of 27 x 1152
    assert m["draft_params"] == flat["draft_params"]


def test_dense_qwen35_and_refusals():
    dense = {k: v for k, v in TRIMMED.items() if not k.startswith(("num_experts", "moe_", "shared_"))}
    dense.update(architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text", intermediate_size=8192)
    m = config.model_from_hf_config(dense)
    assert m["num_experts"] == 0 and m["params"] < config.model_from_hf_config(TRIMMED)["params"]
    with pytest.raises(ValueError, match="GDN hybrids"):
        config.model_from_hf_config(dict(TRIMMED, linear_attn_config={"kda_layers": [1]}))
    with pytest.raises(ValueError, match="GDN hybrids"):
        config.model_from_hf_config(dict(TRIMMED, architectures=["KimiLinearForCausalLM"]))
