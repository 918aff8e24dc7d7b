"""--speculative-adaptive in the simulator: argument resolution and its fallback, slot routing
with graph padding, the EMA/warm-up/interval/hysteresis dynamics in the decode loop, the memory
plan (the state pool of the deepest candidate, graphs per candidate) and the decode speed of the
step in force. The release's own code is compared in tests/contract/test_sim_adaptive_contract.py."""

import asyncio
import json
import random

import pytest

from sglang_sim import adaptive, config, memory, perf, server_args
from sglang_sim.scheduler import Request, Scheduler

OPERATOR = "Qwen/Qwen3.5-122B-A10B"
BASE = ["--model-path", OPERATOR, "--tp-size", "4", "--kv-cache-dtype", "bf16"]


def _gpu():
    return config.gpus({"profile": "rtx-pro-6000-x4", "gpu_memory_mib": None, "gpu_count": None})[0]


def _resolve(extra):
    model = config.lookup_model(OPERATOR)[1]
    return server_args.resolve(server_args.parse(BASE + extra), _gpu()["memory_mib"], model=model)


def _plan(extra):
    args, _w = _resolve(extra)
    model = config.lookup_model(OPERATOR)[1]
    capture = server_args.capture_batch_sizes(args["cuda_graph_max_bs_decode"], True)
    if args.get("cuda_graph_bs_decode"):
        capture = sorted(set(args["cuda_graph_bs_decode"]))
    return args, memory.plan(_gpu(), model, args, capture_bs=capture)


def _static(steps):
    return ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)]


ADAPTIVE = ["--speculative-algorithm", "NEXTN", "--speculative-adaptive"]


# --------------------------------------------------------------------------- resolution

def test_default_config_starts_at_the_middle_candidate_with_topk_1():
    args, warnings = _resolve(ADAPTIVE)
    assert args["speculative_algorithm"] == "EAGLE" and args["speculative_adaptive"]
    assert args["_adaptive_candidate_steps"] == [0, 1, 3, 5, 7]
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"]) == (3, 1, 4)
    assert not any("disabled" in w for w in warnings)


@pytest.mark.parametrize("extra,reason", [
    (["--speculative-algorithm", "STANDALONE", "--speculative-adaptive"],
     "speculative_algorithm=STANDALONE (only EAGLE/EAGLE3 are supported)"),
    (["--speculative-adaptive"], "speculative_algorithm=None (only EAGLE/EAGLE3 are supported)"),
    (["--speculative-algorithm", "EAGLE", "--speculative-adaptive", "--speculative-num-steps", "3",
      "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6"],
     "speculative_eagle_topk=2 (only topk=1 is supported)"),
    (ADAPTIVE + ["--enable-two-batch-overlap"], adaptive.REASON_TBO),
    (ADAPTIVE + ["--enable-dp-attention", "--dp-size", "2"], adaptive.REASON_ATTN_DP),
])
def test_unsupported_cases_fall_back_to_static_with_the_reason(extra, reason):
    args, warnings = _resolve(extra + ["--speculative-adaptive-config", "/nonexistent.json"])
    assert not args["speculative_adaptive"]
    assert ("speculative_adaptive disabled: %s. Falling back to static speculative params." % reason) in warnings
    assert "_adaptive_candidate_steps" not in args  # the config file is never read


def test_nextn_resolves_to_eagle_and_is_served():
    args, _w = _resolve(["--speculative-algorithm", "nextn", "--speculative-adaptive"])
    assert args["speculative_adaptive"] and args["speculative_algorithm"] == "EAGLE"


def test_steps_outside_the_candidates_end_the_start(tmp_path):
    cfg = tmp_path / "a.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [2, 4]}, "16": {"candidate_steps": [1]}}))
    args, _w = _resolve(ADAPTIVE + ["--speculative-adaptive-config", str(cfg)])
    assert args["speculative_num_steps"] == 2 and args["_adaptive_candidate_steps"] == [1, 2, 4]
    with pytest.raises(server_args.ArgsError) as exc:
        _resolve(ADAPTIVE + ["--speculative-adaptive-config", str(cfg), "--speculative-num-steps", "3"])
    assert exc.value.exc_type == "ValueError"
    assert exc.value.message == ("--speculative-num-steps=3 is not in the adaptive config candidate_steps "
                                 "[1, 2, 4]. Pass one of those values.")


@pytest.mark.parametrize("text,exc_type,start", [
    ('{"1": {"candidate_steps": [1, -2]}}', "ValueError", "BS 1: candidate_steps must be"),
    ('{"ema_alpha": 0.1}', "ValueError", "speculative_adaptive_config must contain at least one"),
    ("{", "json.decoder.JSONDecodeError", "Expecting property name"),
])
def test_a_malformed_config_ends_the_start(tmp_path, text, exc_type, start):
    cfg = tmp_path / "a.json"
    cfg.write_text(text)
    with pytest.raises(server_args.ArgsError) as exc:
        _resolve(ADAPTIVE + ["--speculative-adaptive-config", str(cfg)])
    assert exc.value.exc_type == exc_type and exc.value.message.startswith(start)


# --------------------------------------------------------------------------- routing

def test_routing_without_a_graph_list_takes_the_closest_slot_at_or_below():
    p = adaptive.AdaptiveParams(3)
    assert [p.route(b) is p.slots[k] for b, k in [(1, 1), (7, 1), (8, 8), (31, 8), (32, 32), (63, 32),
                                                  (64, 64), (500, 64)]] == [True] * 8
    # each slot starts at the server's step if it is one of its candidates, else its middle one
    assert {k: s.current_steps for k, s in p.slots.items()} == {1: 3, 8: 3, 32: 1, 64: 0}
    assert [p.steps_for_batch(b) for b in (1, 8, 40, 64)] == [3, 3, 1, 0]


def test_routing_pads_to_the_graph_batch_size_first():
    p = adaptive.AdaptiveParams(3)
    p.set_cuda_graph_bs([16, 1, 2, 4, 24, 48])
    # 5 pads to 16 (slot 8), 17 to 24 (slot 8), 25 to 48 (slot 32), 49 is beyond the list (slot 32)
    assert [p.closest_bs(p.pad_to_cuda_graph_bs(b)) for b in (1, 4, 5, 17, 25, 49, 64)] == [1, 1, 8, 8, 32, 32, 64]
    # the graphs each step's state captures: the batch sizes whose slot may run it
    assert p.cuda_graph_bs_for_step(7) == [1, 2, 4]
    assert p.cuda_graph_bs_for_step(0) == [16, 24, 48]
    assert p.cuda_graph_bs_for_step(1) == [1, 2, 4, 16, 24, 48]
    p.set_cuda_graph_bs(None)
    assert p.cuda_graph_bs_for_step(7) is None and p.closest_bs(p.pad_to_cuda_graph_bs(5)) == 1


# --------------------------------------------------------------------------- dynamics

def test_slot_waits_for_warmup_and_interval_then_climbs():
    lines = []
    slot = adaptive.StepSlot(3, adaptive.DEFAULT_ADAPTIVE_CONFIG["1"], log=lines.append)
    changed = [slot.update([3, 3]) for _i in range(15)]
    # 10 warm-up batches, then a decision every 5th: the first one is batch 15
    assert changed == [False] * 14 + [True]
    assert slot.current_steps == 5
    assert lines == ["Adaptive spec params updated: steps 3 -> 5 (ema_accept_len=%.2f)" % slot.ema_accept_len]
    assert slot.ema_accept_len == pytest.approx(3 - 0.8 ** 15)


def test_down_hysteresis_holds_a_step_that_plain_thresholds_drop():
    """The EMA settles at 0.4 accepted drafts: under the default slot 1 (down hysteresis -0.25) the
    drop from 3 to 1 needs EMA <= 0.25, so it holds; with 0 hysteresis (<= 0.5) it drops."""
    held = adaptive.StepSlot(3, adaptive.DEFAULT_ADAPTIVE_CONFIG["1"])
    plain = adaptive.StepSlot(3, dict(adaptive.DEFAULT_ADAPTIVE_CONFIG["1"], down_hysteresis=0.0))
    for _i in range(60):
        held.update([0, 0, 2, 0, 0])
        plain.update([0, 0, 2, 0, 0])
    assert 0.25 < held.ema_accept_len <= 0.5
    assert held.current_steps == 3 and plain.current_steps == 1


def _run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_a_load_that_moves_moves_the_step_in_force(capsys):
    """Two requests (slot 1, start 3, acceptance 0.99) climb to 7; twenty more route the batch to
    slot 8, whose step (3) takes over at once; when the batch is back under 8, slot 1's 7 does."""
    policy = adaptive.AdaptiveParams(3, log=print)

    async def go():
        s = Scheduler(48, 3, 4, 10 ** 7, 1.0, 1e-5, 0, 262144, adaptive=policy)
        s.start()
        long = [Request("l%d" % i, [7] * 8, 1500, True, 0.0, 0, steps=3) for i in range(2)]
        for r in long:
            s.submit(r)
        while s.decode_steps < 40:
            await asyncio.sleep(0.001)
        burst = [Request("b%d" % i, [9] * 8, 200, True, 0.0, 0, steps=3) for i in range(20)]
        for r in burst:
            s.submit(r)
        await asyncio.gather(*[r.done for r in burst])
        await asyncio.gather(*[r.done for r in long])
        s.task.cancel()
        return s, long

    s, long = _run(go())
    moves = [(old, new) for _i, old, new in s.step_changes]
    assert moves[:2] == [(3, 5), (5, 7)]  # slot 1 climbs, one candidate per decision
    assert (7, 3) in moves and moves.index((7, 3)) > 1  # the burst: slot 8's step
    assert moves[-1] == (3, 7)  # back to slot 1, which kept its 7
    out = capsys.readouterr()
    assert "Adaptive spec params updated: steps 3 -> 5" in out.out
    assert "Switch adaptive runtime state: steps 7 -> 3, draft_tokens 8 -> 4" in out.err + out.out
    assert max(i for i, n in enumerate(long[0].hist) if n) == 7  # drafts of 7 were verified
    assert long[0].proposed_drafts > 3 * long[0].verify_ct


# --------------------------------------------------------------------------- memory plan

def test_cap_of_an_adaptive_server_is_the_cap_of_its_deepest_candidate():
    _a, adaptive_plan = _plan(ADAPTIVE)
    _s, deepest = _plan(_static(7))
    _m, middle = _plan(_static(3))
    assert adaptive_plan["pool_draft_tokens"] == 8
    assert adaptive_plan["max_running_requests"] == deepest["max_running_requests"] < middle["max_running_requests"]
    assert adaptive_plan["max_mamba_cache_size"] == deepest["max_mamba_cache_size"]
    assert adaptive_plan["mamba_log"] == deepest["mamba_log"]


def test_custom_config_pays_its_own_deepest_candidate(tmp_path):
    cfg = tmp_path / "a.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [1, 2]}, "8": {"candidate_steps": [1]}}))
    _a, plan = _plan(ADAPTIVE + ["--speculative-adaptive-config", str(cfg)])
    assert plan["max_running_requests"] == _plan(_static(2))[1]["max_running_requests"]


def test_graphs_are_captured_per_candidate_step():
    args, plan = _plan(ADAPTIVE)
    _s, static = _plan(_static(3))
    # the startup state (3) plus one per other candidate, each over the whole list
    assert [st["steps"] for st in plan["adaptive_states"]] == [0, 1, 5, 7]
    assert all(st["capture_bs"] == plan["capture_bs"] for st in plan["adaptive_states"])
    assert plan["startup_graph_mib"] == pytest.approx(memory.graph_state_mib(plan["capture_bs"], 7))
    assert plan["graph_mib"] == pytest.approx(plan["startup_graph_mib"]
                                              + sum(st["graph_mib"] for st in plan["adaptive_states"]))
    assert plan["graph_mib"] > static["graph_mib"]
    assert args["speculative_num_steps"] == 3
    # with an explicit list, each state captures only its slots' batch sizes (none: eager)
    _a, pruned = _plan(ADAPTIVE + ["--cuda-graph-bs-decode", "1", "2", "4", "12", "16"])
    by_step = {st["steps"]: st["capture_bs"] for st in pruned["adaptive_states"]}
    assert by_step == {0: [12, 15], 1: [1, 2, 4, 12, 15], 5: [1, 2, 4], 7: [1, 2, 4]}
    assert pruned["graph_mib"] < plan["graph_mib"]


# --------------------------------------------------------------------------- decode speed

def test_decode_speed_is_the_step_in_forces(tmp_path):
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"1": {"candidate_steps": [5]}}))
    for level in (1, 8):
        out = perf.adaptive_run(level, adaptive.AdaptiveParams(5, str(one)), 0.99, 1.0, 48, rng=random.Random(1))
        assert out["steps"] == {5: 2000}
        # seeded draws over 2000 steps: the expected accept length within 1 %
        assert out["tps"] == pytest.approx(perf.aggregate_tps(level, 5, 0.99), rel=0.01)
    # the default config at C=1 climbs to 7 and decodes at (about) steps 7's speed, warm-up included
    out = perf.adaptive_run(1, adaptive.AdaptiveParams(3), 0.99, 1.0, 48, rng=random.Random(1))
    assert out["final"] == 7 and out["steps"][7] > 1900
    assert out["tps"] == pytest.approx(perf.per_request_tps(1, 7, 0.99), rel=0.02)
    assert out["tps"] < perf.per_request_tps(1, 4, 0.99)  # not the best static at C=1
