"""journal.pool_facts: the hybrid state pool a launch built, from the sim's real journal lines
(tests/pool_sim.py runs the sim's own rank code) and from lines shaped as SGLang 0.5.23 prints
them (memory_pool.py MambaPool.__init__ and _finalize_allocation_log, kv_cache_configurator.py
resolve_max_num_reqs, scheduler.py; tests/contract/test_pool_facts_contract.py checks the
patterns against the wheel's own format strings)."""

from pathlib import Path

import pytest

import pool_sim
from ansible_collections.blackwell.sglang.plugins.module_utils import journal

ROOT = Path(__file__).resolve().parents[4]
GIB_MIB = 1024.0


def _launch(node, **setting):
    name, gpu, model, tp = pool_sim.NODES[node]
    setting = dict({"draft_tokens": 4, "mem_fraction_static": 0.83}, **setting)
    return pool_sim.journal_lines(gpu, model, setting, tp)


@pytest.mark.parametrize("node,setting", [
    (0, {}),
    (0, {"draft_tokens": 9, "mamba_full_memory_ratio": 4.5}),
    (0, {"draft_tokens": 3, "max_running_requests": 4}),
    (1, {}),
    (1, {"enable_linear_replayssm_spec": True, "max_running_requests": 64}),
    (1, {"draft_tokens": 0}),
    (2, {"max_mamba_cache_size": 150}),
])
def test_the_facts_are_what_the_sim_planned(node, setting):
    lines, plan = _launch(node, **setting)
    facts = journal.pool_facts(lines)
    assert facts["hybrid"] is True
    assert facts["max_mamba_cache_size"] == plan["max_mamba_cache_size"]
    assert facts["kv_tokens"] == plan["max_total_num_tokens"]
    assert facts["max_running_requests"] == plan["max_running_requests"]
    assert facts["conv_gb"] == pytest.approx(plan["mamba_conv_mib"] / GIB_MIB, abs=0.005)
    assert facts["ssm_gb"] == pytest.approx(plan["mamba_ssm_mib"] / GIB_MIB, abs=0.005)
    assert facts["kv_gb"] == pytest.approx(plan["kv_mib"] / GIB_MIB, abs=0.01) and facts["kv_gb_figures"] == 2
    capped = any("by the mamba state cache" in w for w in plan["warnings"])
    assert facts["capped_by"] == ("mamba" if capped else "kv" if plan["warnings"] else None)
    assert (facts["slots_per_request"] is not None) == capped
    if plan["speculative"]:
        assert facts["intermediate_ssm_gb"] == pytest.approx(plan["mamba_intermediate_ssm_mib"] / GIB_MIB, abs=0.005)
        assert facts["conv_window_gb"] == pytest.approx(plan["mamba_conv_window_mib"] / GIB_MIB, abs=0.005)
    else:
        assert facts["intermediate_ssm_gb"] is None and facts["conv_window_gb"] is None
    if setting.get("enable_linear_replayssm_spec"):
        ring = plan["replayssm_ring_per_req_mib"] * (plan["max_running_requests"] + 1) / GIB_MIB
        assert facts["replayssm_ring_gb"] == pytest.approx(ring, abs=0.0025) and facts["replayssm_ring_figures"] == 5
    else:
        assert facts["replayssm_ring_gb"] is None


def test_a_capped_launch_names_the_slots_per_request():
    lines, plan = _launch(0)
    facts = journal.pool_facts(lines)
    assert facts["capped_by"] == "mamba" and facts["slots_per_request"] == 5
    assert facts["max_running_requests"] == plan["max_mamba_cache_size"] // 5 < 48


def test_a_launch_the_kv_pool_capped():
    lines = [
        "[2026-12-07 12:00:00] server_args=ServerArgs(model_path='/m')",
        "[2026-12-07 12:00:09] max_running_requests was reduced from the requested 64 to 31 (per dp worker) "
        "due to the available KV cache capacity.",
        "[2026-12-07 12:00:09] Mamba Cache is allocated. max_mamba_cache_size: 400, conv_state size: 0.30GB, "
        "ssm_state size: 14.10GB ",
        "[2026-12-07 12:00:09] KV Cache is allocated. #tokens: 62, K size: 0.00 GB, V size: 0.00 GB",
    ]
    facts = journal.pool_facts(lines)
    assert facts["capped_by"] == "kv" and facts["max_running_requests"] == 31 and facts["slots_per_request"] is None


def test_tensor_parallel_ranks_give_tp0s_facts():
    _n, gpu, model, tp = pool_sim.NODES[2]
    setting = {"draft_tokens": 4, "mem_fraction_static": 0.83}
    rank0, plan = pool_sim.journal_lines(gpu, model, setting, tp, rank=0)
    rank1, _plan = pool_sim.journal_lines(gpu, model, setting, tp, rank=1)
    assert any(" TP1] Mamba Cache" in line for line in rank1)
    # the banner once, then the ranks' lines interleaved (rank 1 first: it may log first)
    body0, body1 = rank0[1:], [line for line in rank1 if "server_args=" not in line]
    mixed = rank0[:1] + [line for pair in zip(body1, body0) for line in pair] + body0[len(body1):]
    facts = journal.pool_facts(mixed)
    assert facts == journal.pool_facts(rank0)
    assert facts["kv_gb_figures"] == 2 and facts["kv_tokens"] == plan["max_total_num_tokens"]


def test_the_last_launch_wins():
    first, _plan = _launch(0)
    second, plan = _launch(0, max_running_requests=4)
    assert journal.pool_facts(first)["capped_by"] == "mamba"
    facts = journal.pool_facts(first + ["some unrelated line"] + second)
    assert facts == journal.pool_facts(second)
    assert facts["capped_by"] is None and facts["slots_per_request"] is None
    assert facts["max_running_requests"] == plan["max_running_requests"] == 4
    # without the banner (a journal read from the middle of a start) the last launch still wins,
    # and the first one's cap warning is not taken for the second's
    bare = [line for line in first + second if "server_args=" not in line]
    assert journal.pool_facts(bare) == facts
    # a second start that died after its pools (in graph capture) has no summary line: the
    # first start's summary is not taken for its cap
    died = [line for line in second if "server_args=" not in line and "max_total_num_tokens=" not in line]
    unsummed = journal.pool_facts([line for line in first if "server_args=" not in line] + died)
    assert unsummed["max_running_requests"] is None
    assert dict(unsummed, max_running_requests=4) == facts


def test_the_release_lines_with_a_draft_kv_pool_and_the_ring():
    # 0.5.23's texts: MHATokenToKVPool logs its dtype, the MTP draft worker logs its own KV pool
    # (same tokens; the budget's per-token cost covers both), the ring line carries rawv/rawk.
    p = "2026-12-07T12:00:00+0000 node1 python[77]: "
    lines = [p + t for t in (
        "[2026-12-07 12:00:00] server_args=ServerArgs(model_path='/models/q', ...)",
        "[2026-12-07 12:01:10 TP0] Mamba Cache is allocated. max_mamba_cache_size: 693, conv_state size: 0.57GB, "
        "ssm_state size: 24.40GB intermediate_ssm_state_cache size: 0.00GB intermediate_conv_window_cache size: 0.11GB ",
        "[2026-12-07 12:01:10 TP0] GDN ReplaySSM ring buffers allocated (record_len=16, fold=False): d=0.108GB, "
        "k=0.054GB, g=0.002GB rawv=0.108GB, rawk=0.054GB, ",
        "[2026-12-07 12:01:11 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 229170, K size: 1.31 GB, "
        "V size: 1.31 GB",
        "[2026-12-07 12:01:12 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 229170, K size: 0.11 GB, "
        "V size: 0.11 GB",
        "[2026-12-07 12:01:40 TP0] max_total_num_tokens=229170, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=48, context_len=262144, available_gpu_mem=13.38 GB",
    )]
    assert journal.pool_facts(lines) == {
        "hybrid": True, "max_mamba_cache_size": 693, "conv_gb": 0.57, "ssm_gb": 24.4,
        "intermediate_ssm_gb": 0.0, "conv_window_gb": 0.11, "replayssm_ring_gb": 0.326,
        "replayssm_ring_figures": 5, "kv_tokens": 229170, "kv_gb": 2.84, "kv_gb_figures": 4,
        "max_running_requests": 48, "slots_per_request": None, "capped_by": None}


def test_no_state_pool_no_facts():
    assert journal.pool_facts([]) == {}
    # a dense model's real start (0.5.17 on an H200): a KV pool, no state pool
    real = (ROOT / "tests/fixtures/real-sglang/launch_nospec.log").read_text().splitlines()
    assert any("KV Cache is allocated" in line for line in real)
    assert journal.pool_facts(real) == {}
    # a hybrid start that died sizing its pools
    died = ["[2026-12-02 14:50:01] server_args=ServerArgs(model_path='/models/Qwen3.5-122B-A10B', ...)",
            "[2026-12-02 14:52:41 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
            "max_mamba_cache_size=-3 (total_rest_memory=1.20 GB, mamba_cache_per_req=146.53 MB)."]
    assert journal.pool_facts(died) == {}
    # an earlier launch's pool is not the failed one's
    lines, _plan = _launch(0)
    assert journal.pool_facts(lines + died) == {}
