"""The decode loop: continuous batching paced in (scaled) real time by perf.py.

One asyncio task. Each iteration either prefills newly admitted requests (each
gets its first token) or runs one speculative decode step over all running
requests: the step takes perf.step_time_ms(batch, steps) (with seeded noise) times
the time scale, and each request gains 1 + accepted drafts tokens. Outputs are
handed to per-request sinks synchronously at the end of each step, so a step with
256 streams costs 256 cheap callbacks and no task switches.

Token ids: a greedy request's (temperature 0 / top_k 1) are a function of its prompt ids
only (greedy_token), as a real model's argmax is a function of the context: the same on every
launch, draft depth, batch size and SGLANG_SIM_SEED. A sampled request's come from its own rng.
"""

import array
import asyncio
import collections
import hashlib
import random
import time

from sglang_sim import _proc, adaptive, perf, tokenizer

DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval default

HIST_BUCKETS_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                     2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 25.0, 30.0)
HIST_BUCKETS_ITL = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04,
                    0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
HIST_BUCKETS_E2E = (0.1, 0.25, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0, 80.0,
                    120.0, 160.0, 200.0, 300.0, 400.0, 600.0, 1200.0, 1800.0, 2400.0)


class Histogram(object):
    def __init__(self, buckets):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, v):
        self.sum += v
        self.count += 1
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1
                return
        self.counts[-1] += 1


_MASK64 = (1 << 64) - 1
_TOKEN_SPAN = 150000 - tokenizer.FIRST_WORD_ID  # the ids _next_token draws from (never EOS)


def prompt_hash(input_ids):
    """A stable 64-bit digest of a prompt's token ids."""
    raw = array.array("I", input_ids).tobytes()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")


def _mix(h):
    """splitmix64's finaliser: one cheap step of the greedy chain."""
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    h = (h ^ (h >> 27)) * 0x94D049BB133111EB & _MASK64
    return h ^ (h >> 31)


def greedy_token(state):
    """(token, next state) of a greedy chain: the token is the context's "argmax", the state
    folds the emitted token in, so each token is a function of prompt + tokens before it."""
    tok = tokenizer.FIRST_WORD_ID + state % _TOKEN_SPAN
    return tok, _mix(state ^ tok)


def drift_point(phash, fraction):
    """The replayssm-drift fault (SGLANG_SIM_REPLAYSSM_DRIFT): the output position at which a
    greedy prompt leaves the reference, or None for a prompt the fault spares. Which prompts
    (a `fraction` of them, by their digest) and where (token 2..17) depend on the prompt only,
    so every launch with the fault diverges on the same prompts at the same place."""
    if fraction <= 0 or (phash & 0xFFFF) >= fraction * 0x10000:
        return None
    return 2 + (phash >> 16) % 16


class Request(object):
    __slots__ = (
        "rid", "input_ids", "prompt_len", "max_new", "ignore_eos", "temperature", "alpha",
        "natural_len", "output_ids", "text", "ids_str", "verify_ct", "correct_drafts",
        "hist", "created", "first_token_at", "last_token_at", "finished", "finish_reason",
        "sink", "done", "rng", "log_metrics", "cached_tokens", "stop_ids", "aborted", "streaming",
        "greedy", "gstate", "drift_at", "n_drawn", "proposed_drafts",
    )

    def __init__(self, rid, input_ids, max_new, ignore_eos, temperature,
                 seed, sink=None, log_metrics=True, steps=0, stop_ids=()):
        self.rid = rid
        self.input_ids = input_ids
        self.prompt_len = len(input_ids)
        self.max_new = max_new
        self.ignore_eos = ignore_eos
        self.temperature = temperature
        self.alpha = perf.acceptance_alpha(temperature, ignore_eos)
        self.rng = random.Random("%s/%s" % (seed, rid))
        # Without ignore_eos the fake model ends its answer at a drawn length.
        self.natural_len = None if ignore_eos else self.rng.randint(24, 480)
        # layers/sampler.py Sampler.forward: an all-greedy batch takes torch.argmax of the logits,
        # and speculative/eagle_utils.py eagle_sample (verify_tree_greedy) accepts only drafts equal
        # to the target's argmax, so the output depends on the context alone, not on the draft
        # depth or the batch. (In exact arithmetic: on a GPU, other batch/verify shapes can flip a
        # near tie; see sim/README.md, known differences.)
        self.greedy = not temperature
        self.gstate = None
        self.drift_at = None
        self.n_drawn = 0
        if self.greedy:
            self.gstate = prompt_hash(input_ids)
            if self.natural_len is not None:
                # where the answer ends is the model's too (the rng draw above stays, so the
                # acceptance draws that follow keep their stream)
                self.natural_len = 24 + (self.gstate >> 20) % 457
        self.output_ids = []
        self.text = ""
        self.ids_str = ""
        self.verify_ct = 0
        self.correct_drafts = 0
        self.proposed_drafts = 0
        self.hist = [0] * (steps + 1)
        self.created = time.time()
        self.first_token_at = None
        self.last_token_at = None
        self.finished = False
        self.finish_reason = None
        self.sink = sink
        self.done = asyncio.get_event_loop().create_future()
        self.log_metrics = log_metrics
        self.cached_tokens = 0
        self.stop_ids = stop_ids
        self.aborted = False
        self.streaming = sink is not None

    def add_tokens(self, ids):
        self.output_ids.extend(ids)
        pieces = "".join(tokenizer.piece(i) for i in ids)
        if not self.text:
            pieces = pieces.lstrip(" ")
        self.text += pieces
        joined = ",".join(str(i) for i in ids)
        self.ids_str = joined if not self.ids_str else self.ids_str + "," + joined
        return pieces


class Scheduler(object):
    def __init__(self, max_running_requests, steps, draft_tokens, token_capacity,
                 factor, time_scale, seed, context_len, log_prefix="", cuda_graph=True,
                 greedy_drift=0.0, adaptive=None, simulate_acc=None):
        self.mrr = max_running_requests
        # SGLANG_SIMULATE_ACC_LEN in force: (accept length, method, token mode), perf.simulated_accept
        self.simulate_acc = simulate_acc
        # --speculative-adaptive: an adaptive.AdaptiveParams whose routed slot sets the step in
        # force before each decode step and hears its verify results after it.
        self.adaptive = adaptive
        self.spec = bool(steps) or adaptive is not None
        self.step_changes = []  # (decode step index, old, new): the switches, in order
        self.decode_steps = 0
        # Fraction of greedy prompts the replayssm-drift fault makes diverge (drift_point);
        # launch_server sets it only where --enable-linear-replayssm-spec acts.
        self.greedy_drift = greedy_drift
        self.steps = steps or 0
        self.draft_tokens = draft_tokens or 1
        self.capacity = token_capacity
        self.factor = factor
        self.scale = time_scale
        self.seed = seed
        self.context_len = context_len
        self.rng = random.Random("sched/%s" % seed)
        self.waiting = collections.deque()
        self.running = []
        self.wake = asyncio.Event()
        self.task = None
        self.next_rid = 0
        # lifetime counters (metrics and /server_info)
        self.spec_accepted_tokens = 0
        self.spec_verify_forwards = 0
        # Per is_streaming label, updated when a request finishes (as SGLang's
        # TokenizerMetricsCollector.observe_one_finished_request does).
        self.prompt_tokens_total = {"false": 0, "true": 0}
        self.generation_tokens_total = {"false": 0, "true": 0}
        self.num_requests_total = {"false": 0, "true": 0}
        self.spec_verify_calls_total = 0
        self.last_gen_throughput = 0.0
        self.window_tokens = 0
        self.window_start = time.time()
        self.window_steps = 0
        self.window_accept = (0, 0)
        self.last_accept_length = None
        self.last_accept_rate = None
        self.ttft = Histogram(HIST_BUCKETS_TTFT)
        self.itl = Histogram(HIST_BUCKETS_ITL)
        self.e2e = {"false": Histogram(HIST_BUCKETS_E2E), "true": Histogram(HIST_BUCKETS_E2E)}
        self.last_receive = time.time()
        self.log_prefix = log_prefix
        self.cuda_graph = cuda_graph
        # accepted tokens, verify forwards, correct drafts, proposed drafts
        self.window_spec = [0, 0, 0, 0]
        self.wedged = False

    def wedge(self):
        """The wedge fault: the loop stops at its next step and never produces a token again,
        while the HTTP server keeps answering (hasso5703/dgx-spark-qwen38#2). Silent, like a
        hung collective: nothing is logged."""
        self.wedged = True
        self.wake.set()

    def start(self):
        self.task = asyncio.ensure_future(self._loop())

    def new_rid(self):
        self.next_rid += 1
        return "%032x" % random.Random("%s/%d" % (self.seed, self.next_rid)).getrandbits(128)

    def submit(self, req):
        if req.greedy and self.greedy_drift > 0:
            req.drift_at = drift_point(req.gstate, self.greedy_drift)
        self.waiting.append(req)
        self.wake.set()

    def abort(self, req):
        if req.finished:
            return
        req.aborted = True
        req.finished = True
        req.finish_reason = {"type": "abort", "message": "Abort before prefill"}
        self._finished_metrics(req, time.time())
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
        if not req.done.done():
            req.done.set_result(req)

    def _finished_metrics(self, req, now):
        if not req.log_metrics:
            return
        label = "true" if req.streaming else "false"
        self.prompt_tokens_total[label] += req.prompt_len
        self.generation_tokens_total[label] += len(req.output_ids)
        self.num_requests_total[label] += 1
        self.spec_verify_calls_total += req.verify_ct
        self.e2e[label].observe((now - req.created) / self.scale)

    def idle(self):
        return not self.running and not self.waiting

    def reset_spec_metrics(self):
        self.spec_accepted_tokens = 0
        self.spec_verify_forwards = 0
        self.last_accept_length = None
        self.last_accept_rate = None

    def avg_accept_length(self):
        if not self.spec_verify_forwards:
            return None
        return self.spec_accepted_tokens / float(self.spec_verify_forwards)

    @staticmethod
    def _reserve(req):
        # SGLang's admission clips the max_new_tokens estimate (CLIP_MAX_NEW_TOKENS, 4096).
        return req.prompt_len + min(req.max_new, 4096)

    def _tokens_in_use(self):
        return sum(self._reserve(r) for r in self.running)

    async def _sleep_until(self, deadline):
        delay = deadline - time.monotonic()
        # Always yield once, so HTTP handlers run even when the loop runs behind.
        await asyncio.sleep(delay if delay > 0 else 0)

    async def _loop(self):
        deadline = time.monotonic()
        while True:
            if self.wedged:
                await asyncio.Event().wait()
            if self.idle():
                self.wake.clear()
                await self.wake.wait()
                deadline = time.monotonic()
                self.window_start = time.time()
                self.window_steps = self.window_tokens = 0
            # Admission (prefill has priority, like SGLang's default schedule policy).
            new = []
            used = self._tokens_in_use()
            while self.waiting and len(self.running) + len(new) < self.mrr:
                req = self.waiting[0]
                need = self._reserve(req)
                if self.running or new:
                    if used + need > self.capacity:
                        break
                self.waiting.popleft()
                used += need
                new.append(req)
            if new:
                n_tok = sum(r.prompt_len for r in new)
                _proc.log("Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: 0, "
                          "token usage: %.2f, #running-req: %d, #queue-req: %d"
                          % (len(new), n_tok, self._usage(), len(self.running), len(self.waiting)),
                          self.log_prefix)
                ms = perf.prefill_time_ms(n_tok, self.factor)
                deadline = max(deadline, time.monotonic()) + ms / 1000.0 * self.scale
                await self._sleep_until(deadline)
                now = time.time()
                self.last_receive = now
                for req in new:
                    if req.finished:
                        continue
                    tok = self._next_token(req)
                    self._emit(req, [tok], now)
                    if not req.finished:
                        self.running.append(req)
                continue
            if not self.running:
                continue
            batch = len(self.running)
            if self.adaptive is not None:
                # eagle_worker_v2.py forward_batch_generation -> activate_step_by_batch.
                self._activate(self.adaptive.steps_for_batch(batch))
            ms = perf.noisy(self.rng, perf.step_time_ms(batch, self.steps, self.factor))
            deadline = max(deadline, time.monotonic() - 0.05) + ms / 1000.0 * self.scale
            await self._sleep_until(deadline)
            now = time.time()
            self.last_receive = now
            steps = self.steps
            step_tokens = 0
            correct = []
            pinned = fixed = None
            if self.spec and self.simulate_acc is not None:
                # eagle_utils.py verify -> spec_utils.py generate_simulated_accept_index: one
                # accept length for the whole batch, drawn after the real verify; in token mode
                # "fixed" every verified position becomes token 100 (predict.fill_(100)), so the
                # model never ends an answer on its own.
                acc_len, method, mode = self.simulate_acc
                pinned = perf.sample_simulated_acc_len(self.rng, acc_len, method, steps + 1)
                fixed = mode == "fixed"
            for req in list(self.running):
                if req.finished:
                    continue
                if pinned is not None:
                    acc = pinned - 1
                else:
                    acc = perf.draw_accepted(req.rng, steps, req.alpha) if steps else 0
                n = 1 + acc
                if fixed:
                    req.natural_len = None
                    ids = [perf.SIMULATED_TOKEN_ID] * n
                else:
                    ids = [self._next_token(req) for _i in range(n)]
                if self.spec:
                    # At steps 0 (adaptive) the verify still runs, on the bonus token alone
                    # (eagle_worker_v2.py _build_trivial_verify_input): accept length 1.
                    correct.append(acc)
                    req.verify_ct += 1
                    req.correct_drafts += acc
                    req.proposed_drafts += steps
                    if acc >= len(req.hist):
                        req.hist.extend([0] * (acc + 1 - len(req.hist)))
                    req.hist[acc] += 1
                    ws = self.window_spec
                    ws[0] += n
                    ws[1] += 1
                    ws[2] += acc
                    ws[3] += steps
                    if req.log_metrics:
                        self.spec_accepted_tokens += n
                        self.spec_verify_forwards += 1
                step_tokens += n
                self._emit(req, ids, now)
            self.running = [r for r in self.running if not r.finished]
            self.decode_steps += 1
            if self.adaptive is not None:
                # batch_result_processor.py -> on_verify_complete_cpu(num_correct_drafts_per_req,
                # batch_size=len(batch.reqs)); a switch applies from the next step.
                new = self.adaptive.on_verify_complete(correct, batch)
                if new is not None:
                    self._activate(new)
            self.window_steps += 1
            self.window_tokens += step_tokens
            if self.window_steps >= DECODE_LOG_INTERVAL:
                wall = max(now - self.window_start, 1e-9)
                self.last_gen_throughput = self.window_tokens / wall * self.scale
                self._log_decode(batch)
                self.window_steps = 0
                self.window_tokens = 0
                self.window_start = now

    def _usage(self):
        used = sum(r.prompt_len + len(r.output_ids) for r in self.running)
        return used / float(max(self.capacity, 1))

    def _log_decode(self, batch):
        used = sum(r.prompt_len + len(r.output_ids) for r in self.running)
        msg = "Decode batch, #running-req: %d, #token: %d, token usage: %.2f, " % (
            batch, used, self._usage())
        if self.spec:
            tokens, forwards, correct, proposed = self.window_spec
            acc_len = tokens / float(forwards) if forwards else 0.0
            rate = correct / float(proposed) if proposed else 0.0
            msg += "accept len: %.2f, accept rate: %.2f, " % (acc_len, rate)
            if forwards:
                self.last_accept_length = acc_len
                self.last_accept_rate = rate
            self.window_spec = [0, 0, 0, 0]
        msg += "cuda graph: %s, gen throughput (token/s): %.2f, #queue-req: %d" % (
            self.cuda_graph, self.last_gen_throughput, len(self.waiting))
        _proc.log(msg, self.log_prefix)

    def _activate(self, steps):
        """adaptive_runtime_state.py AdaptiveController._activate -> eagle_worker_v2.py
        apply_runtime_state: the state of ``steps`` (draft tokens steps + 1) takes over, logged
        when it differs from the one in force."""
        if steps == self.steps:
            return
        _proc.log(adaptive.MSG_SWITCH.format(old=self.steps, new=steps, old_d=self.draft_tokens,
                                             new_d=steps + 1), self.log_prefix)
        self.step_changes.append((self.decode_steps, self.steps, steps))
        self.steps = steps
        self.draft_tokens = steps + 1

    @staticmethod
    def _next_token(req):
        if not req.greedy:
            return req.rng.randrange(tokenizer.FIRST_WORD_ID, 150000)
        tok, state = greedy_token(req.gstate)
        if req.n_drawn == req.drift_at:
            # a different token here; the chain goes on from it, so the rest differs too, as a
            # real divergence does once one argmax flips
            tok = tokenizer.FIRST_WORD_ID + (tok - tokenizer.FIRST_WORD_ID + 1
                                             + req.gstate % (_TOKEN_SPAN - 1)) % _TOKEN_SPAN
            state = _mix(req.gstate ^ tok)
        req.gstate = state
        req.n_drawn += 1
        return tok

    def _emit(self, req, ids, now):
        """Append ids (cut at max_new_tokens / EOS) and notify the request's sink."""
        remaining = req.max_new - len(req.output_ids)
        ids = ids[:remaining]
        finish = None
        if req.natural_len is not None:
            left = max(req.natural_len - len(req.output_ids), 1)
            if left <= len(ids):
                ids = ids[:left - 1] + [tokenizer.EOS_TOKEN_ID]
                finish = {"type": "stop", "matched": tokenizer.EOS_TOKEN_ID}
        if finish is None and len(req.output_ids) + len(ids) >= req.max_new:
            finish = {"type": "length", "length": req.max_new}
        if ids and ids[-1] == tokenizer.EOS_TOKEN_ID:
            # EOS is not part of the visible text.
            visible = ids[:-1]
        else:
            visible = ids
        if req.first_token_at is None:
            req.first_token_at = now
            if req.log_metrics:
                self.ttft.observe((now - req.created) / self.scale)
        elif req.log_metrics and ids:
            gap = (now - req.last_token_at) / self.scale / len(ids)
            for _tok in ids:
                self.itl.observe(gap)
        req.last_token_at = now
        delta = req.add_tokens(visible) if visible else ""
        if len(ids) != len(visible):
            req.output_ids.append(tokenizer.EOS_TOKEN_ID)
        if finish is not None:
            req.finished = True
            req.finish_reason = finish
            self._finished_metrics(req, now)
        if req.sink is not None:
            try:
                req.sink(req, delta, len(ids))
            except Exception:  # a gone client must not stop the loop: abort its request
                req.sink = None
                if not req.finished:
                    self.abort(req)
                    return
        if req.finished and not req.done.done():
            req.done.set_result(req)
