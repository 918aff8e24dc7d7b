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


def _outputs(prompts, steps=3, seed=0, drift=0.0, others=0, temperature=0.0, max_new=40,
             ignore_eos=True, rid="g"):
    """output_ids of each prompt, run together (with `others` unrelated requests beside them)
    on a fresh scheduler."""
    async def go():
        s = Scheduler(48, steps, steps + 1, 10 ** 7, 1.0, 1e-4, seed, 262144, greedy_drift=drift)
        s.start()
        reqs = [Request("%s%d" % (rid, i), list(p), max_new, ignore_eos, temperature, seed,
                        steps=steps) for i, p in enumerate(prompts)]
        reqs += [Request("o%d" % i, [900 + i] * 5, 64, True, 0.0, seed, steps=steps)
                 for i in range(others)]
        for r in reqs:
            s.submit(r)
        await asyncio.gather(*[r.done for r in reqs])
        s.task.cancel()
        return [r.output_ids for r in reqs[:len(prompts)]]
    return _run(go())


PROMPTS = [[100 + 7 * i + j for j in range(5 + i)] for i in range(12)]


def test_greedy_output_is_a_function_of_the_prompt():
    """Launch, draft depth, batch size, seed and rid change nothing of a greedy output."""
    ref = _outputs(PROMPTS, steps=0)
    assert all(len(o) == 40 for o in ref)
    assert len(set(tuple(o) for o in ref)) == len(PROMPTS)  # distinct prompts, distinct outputs
    assert _outputs(PROMPTS, steps=3, others=20, rid="x") == ref
    assert _outputs(PROMPTS, steps=7, seed=5) == ref
    assert _outputs(PROMPTS[3:4], steps=1) == ref[3:4]  # alone in the batch
    # a prefix of a longer answer is the shorter answer
    assert [o[:40] for o in _outputs(PROMPTS[:2], max_new=90)] == ref[:2]


def test_greedy_stop_length_is_the_prompts():
    """Without ignore_eos the answer ends where the model ends it: same place every launch."""
    a = _outputs(PROMPTS, steps=1, max_new=600, ignore_eos=False)
    b = _outputs(PROMPTS, steps=5, max_new=600, ignore_eos=False, seed=9, rid="z")
    assert a == b
    assert all(o[-1] == tokenizer.EOS_TOKEN_ID for o in a)
    assert len(set(len(o) for o in a)) > 1


def test_sampled_output_still_comes_from_the_request():
    """temperature > 0 keeps per-request draws: the same prompt gives different outputs."""
    one = _outputs([PROMPTS[0]] * 2, temperature=0.7)
    assert one[0] != one[1]
    assert _outputs([PROMPTS[0]] * 2, temperature=0.7, seed=1) != one


def test_replayssm_drift_fault():
    """The fault knob: the prompts drift_point picks leave the reference at that token and
    stay off it; the others are untouched."""
    from sglang_sim import scheduler as sch
    prompts = [[200 + i, 300 + i, 400 + i] for i in range(120)]
    ref = _outputs(prompts, steps=3)
    assert _outputs(prompts, steps=3, drift=0.0) == ref
    full = _outputs(prompts, steps=3, drift=1.0)
    half = _outputs(prompts, steps=5, drift=0.5)
    picked = 0
    for p, r, f, h in zip(prompts, ref, full, half):
        at = sch.drift_point(sch.prompt_hash(p), 1.0)
        assert 2 <= at <= 17
        assert f[:at] == r[:at] and f[at] != r[at] and f[at + 1:] != r[at + 1:]
        if sch.drift_point(sch.prompt_hash(p), 0.5) is None:
            assert h == r
        else:
            picked += 1
            assert h == f  # same prompt, same place, whatever the depth
    assert 40 <= picked <= 80  # about half (binomial sd 5.5 around 60)


def _pinned_run(simulate_acc, reqs_args, steps=3, mrr=48):
    async def go():
        s = Scheduler(mrr, steps, steps + 1, 10 ** 7, 1.0, 1e-4, 0, 262144, simulate_acc=simulate_acc)
        s.start()
        per_step = []

        def sink(r, d, n):
            per_step.append((s.decode_steps, n))

        reqs = [Request("p%d" % i, ids, max_new, ignore_eos, 0.0, 0, sink=sink, steps=steps)
                for i, (ids, max_new, ignore_eos) in enumerate(reqs_args)]
        for r in reqs:
            s.submit(r)
        await asyncio.gather(*[r.done for r in reqs])
        s.task.cancel()
        return reqs, per_step

    return _run(go())


def test_pinned_accept_length_is_one_draw_per_batch():
    # SGLANG_SIMULATE_ACC_LEN=2.952 (match-expected, fixed): each verify accepts 2 or 3 tokens for
    # every request of the batch alike, with the pinned mean; the text is token 100 over and over
    reqs, per_step = _pinned_run((2.952, "match-expected", "fixed"), [([7] * 8, 600, True)] * 4)
    lengths = [len(r.output_ids) / float(r.verify_ct) for r in reqs]
    assert all(abs(a - 2.952) < 0.12 for a in lengths), lengths
    by_step = {}
    for step, n in per_step[4:]:
        by_step.setdefault(step, set()).add(n)
    shared = [ns for step, ns in by_step.items() if len(ns) == 1]
    assert len(shared) >= 0.9 * len(by_step)  # a request's last chunk is cut at max_new
    assert {n for ns in by_step.values() for n in ns} <= {1, 2, 3}
    assert all(set(r.output_ids[1:]) == {perf.SIMULATED_TOKEN_ID} for r in reqs)
    # unpinned, the same requests draw per request from the model's alpha (about 3.9 at steps 3)
    free, dummy = _pinned_run(None, [([7] * 8, 600, True)] * 4)
    assert all(len(r.output_ids) / float(r.verify_ct) > 3.5 for r in free)


def test_pinned_fixed_tokens_never_end_an_answer():
    # token 100 is never EOS: a request that lets the model stop runs to its max_new_tokens
    reqs, dummy = _pinned_run((2.0, "match-expected", "fixed"), [([3] * 8, 700, False)])
    assert reqs[0].finish_reason == {"type": "length", "length": 700}
    # in real-draft-token mode the tokens are the model's own (the greedy chain), so it ends
    real, dummy = _pinned_run((2.0, "match-expected", "real-draft-token"), [([3] * 8, 700, False)])
    free, dummy = _pinned_run(None, [([3] * 8, 700, False)])
    assert real[0].output_ids == free[0].output_ids
    assert real[0].finish_reason["type"] == "stop"


def test_pinned_length_is_clamped_to_the_tree():
    # a pin above steps + 1 accepts the whole tree every time (max_len = spec_steps + 1)
    reqs, dummy = _pinned_run((9.0, "match-expected", "fixed"), [([7] * 8, 199, True)], steps=2)
    assert (len(reqs[0].output_ids) - 1) / float(reqs[0].verify_ct) == 3.0
