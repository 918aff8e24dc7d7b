"""The decode loop in-process at a tiny time scale: batching, caps, finish reasons."""

import asyncio

from sglang_sim import perf, tokenizer
from sglang_sim.scheduler import Request, Scheduler


def _run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def _sched(mrr=48, steps=3, capacity=10 ** 7, scale=1e-4):
    return Scheduler(mrr, steps, steps + 1, capacity, 1.0, scale, 0, 262144)


def test_length_finish_and_counts():
    async def go():
        s = _sched()
        s.start()
        seen = []
        req = Request("r1", list(range(100, 110)), 37, True, 0.0, 0,
                      sink=lambda r, d, n: seen.append(n), steps=3)
        s.submit(req)
        await req.done
        s.task.cancel()
        return s, req, seen

    s, req, seen = _run(go())
    assert len(req.output_ids) == 37 and sum(seen) == 37
    assert req.finish_reason == {"type": "length", "length": 37}
    assert seen[0] == 1  # the prefill gives the first token
    assert all(1 <= n <= 4 for n in seen)
    assert req.verify_ct == len(seen) - 1
    assert sum(req.hist) == req.verify_ct
    assert len(req.text.split()) == 37
    # counted when the request finishes, under is_streaming="true" (it had a sink)
    assert s.generation_tokens_total == {"false": 0, "true": 37}
    assert s.prompt_tokens_total["true"] == 10 and s.num_requests_total["true"] == 1
    assert s.spec_verify_calls_total == req.verify_ct


def test_eos_without_ignore_eos():
    async def go():
        s = _sched()
        s.start()
        req = Request("r2", [1, 2, 3], 5000, False, 0.0, 0, steps=3)
        s.submit(req)
        await req.done
        s.task.cancel()
        return req

    req = _run(go())
    assert req.finish_reason == {"type": "stop", "matched": tokenizer.EOS_TOKEN_ID}
    assert req.output_ids[-1] == tokenizer.EOS_TOKEN_ID
    assert len(req.output_ids) == req.natural_len
    assert len(req.text.split()) == req.natural_len - 1  # EOS is not in the text


def test_max_running_requests_caps_the_batch():
    async def go():
        s = _sched(mrr=4)
        s.start()
        peak = [0]

        def sink(r, d, n):
            peak[0] = max(peak[0], len(s.running))

        reqs = [Request("q%d" % i, [5] * 8, 20, True, 0.0, 0, sink=sink, steps=3)
                for i in range(10)]
        for r in reqs:
            s.submit(r)
        await asyncio.gather(*[r.done for r in reqs])
        s.task.cancel()
        return peak[0], reqs

    peak, reqs = _run(go())
    assert peak == 4
    assert all(len(r.output_ids) == 20 for r in reqs)


def test_accept_length_tracks_the_model():
    async def go():
        s = _sched()
        s.start()
        # ignore_eos picks the regime (perf.acceptance_alpha): benchmark-style requests
        # draft well, requests that may stop early draft like real text
        reqs = [Request("a%d" % i, [7] * 8, 400, ignore_eos, 0.0, 0, steps=3)
                for i, ignore_eos in enumerate([True] * 4 + [False] * 4)]
        for r in reqs:
            s.submit(r)
        await asyncio.gather(*[r.done for r in reqs])
        s.task.cancel()
        return reqs

    reqs = _run(go())
    synth = [len(r.output_ids) / r.verify_ct for r in reqs[:4]]
    real = [len(r.output_ids) / r.verify_ct for r in reqs[4:]]
    assert all(abs(a - perf.expected_accept_length(3, perf.ALPHA_SYNTHETIC)) < 0.15 for a in synth)
    assert all(abs(a - perf.expected_accept_length(3, perf.ALPHA_REALISTIC)) < 0.35 for a in real)


def test_abort_and_flush_counters():
    async def go():
        s = _sched(scale=1e-3)
        s.start()
        req = Request("x", [1] * 4, 100000, True, 0.0, 0, steps=3)
        s.submit(req)
        await asyncio.sleep(0.05)
        s.abort(req)
        await req.done
        await asyncio.sleep(0.01)
        idle = s.idle()
        acc = s.avg_accept_length()
        s.reset_spec_metrics()
        s.task.cancel()
        return req, idle, acc, s.avg_accept_length()

    req, idle, acc, after = _run(go())
    assert req.finish_reason["type"] == "abort"
    assert idle
    assert acc is not None and 3.5 < acc <= 4.0
    assert after is None
