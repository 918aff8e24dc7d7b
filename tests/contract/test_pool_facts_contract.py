"""journal.pool_facts against the pinned release's own format strings: each line it reads is
rendered from the wheel's template (memory_pool.py MambaPool.__init__ and
_finalize_allocation_log, kv_cache_configurator.py resolve_max_num_reqs, scheduler.py's summary)
with known values, and the facts must carry those values back. Fails when a text drifts."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import release_contract as rc  # noqa: E402
from ansible_collections.blackwell.sglang.plugins.module_utils import journal  # noqa: E402

POOL = "srt/mem_cache/memory_pool.py"
KVC = "srt/mem_cache/kv_cache_configurator.py"
SCHEDULER = "srt/managers/scheduler.py"

pytestmark = pytest.mark.usefixtures("pinned_wheel")


def _render(template, *values):
    """The template with its ``{}`` fields filled in order."""
    parts = template.split("{}")
    assert len(parts) == len(values) + 1, (template, values)
    out = [parts[0]]
    for value, part in zip(values, parts[1:]):
        out.extend([str(value), part])
    return "".join(out)


def _one(path, *anchors):
    hits = sorted(set(t for t in rc.templates(path) if all(a in t for a in anchors)))
    assert len(hits) == 1, (path, anchors, hits)
    return hits[0]


def _release_launch(spec=True, capped="mamba"):
    if spec:
        lines = [_render(_one(POOL, "Mamba Cache is allocated", "intermediate_ssm_state_cache"),
                         693, "0.57", "24.40", "0.00", "0.11")]
    else:
        plain = set(t for t in rc.templates(POOL) if t.startswith("Mamba Cache is allocated") and "intermediate" not in t)
        assert len(plain) == 1, plain
        lines = [_render(plain.pop(), 693, "0.57", "24.40")]
    ring = rc.find_template(POOL, "GDN ReplaySSM ring buffers allocated")
    low = rc.find_template(POOL, "rawv={}GB, rawk={}GB, ")
    lines.append(_render(ring, 16, False, "0.108", "0.054", "0.002") + _render(low, "0.108", "0.054"))
    kv = _one(POOL, "#tokens: {}, K size: {} GB, V size: {} GB")
    lines.append(_render(kv, "KV Cache", "is allocated", "torch.bfloat16", 229170, "1.31", "1.31"))
    single = _one(POOL, "#tokens: {}, KV size: {} GB")
    lines.append(_render(single, "KV Cache", "is allocated", "torch.bfloat16", 229170, "0.22"))
    summary = _one(SCHEDULER, "max_total_num_tokens={}, chunked_prefill_size=")
    lines.append(_render(summary, 229170, 8192, 16384, 138, 262144, "available_gpu_mem", "13.38"))
    if capped == "mamba":
        warning = rc.find_template(KVC, "by the mamba state cache")
        lines.insert(0, _render(warning, 138, 693, 5))
    elif capped == "kv":
        warning = rc.find_template(KVC, "was reduced from the requested")
        lines.insert(0, _render(warning, 200, 138))
    return ["2026-12-07T12:00:00+0000 node1 python[77]: [2026-12-07 12:00:00 TP0] " + line for line in lines]


@pytest.mark.parametrize("capped", ["mamba", "kv", None])
def test_the_facts_read_back_what_the_release_printed(capped):
    facts = journal.pool_facts(_release_launch(capped=capped))
    assert facts == {
        "hybrid": True, "max_mamba_cache_size": 693, "conv_gb": 0.57, "ssm_gb": 24.4,
        "intermediate_ssm_gb": 0.0, "conv_window_gb": 0.11, "replayssm_ring_gb": 0.326,
        "replayssm_ring_figures": 5, "kv_tokens": 229170, "kv_gb": 2.84, "kv_gb_figures": 3,
        "max_running_requests": 138, "slots_per_request": 5 if capped == "mamba" else None,
        "capped_by": capped}


def test_the_non_speculative_pool_line():
    facts = journal.pool_facts(_release_launch(spec=False, capped=None))
    assert facts["max_mamba_cache_size"] == 693 and facts["ssm_gb"] == 24.4
    assert facts["intermediate_ssm_gb"] is None and facts["conv_window_gb"] is None


def test_the_release_divides_by_gib():
    # The sizes are bytes / GB with GB = 1 << 30: the model converts them back with the same.
    assert "GB = 1024 * 1024 * 1024" in rc.source(POOL)
