#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_bench
short_description: Benchmark a local SGLang server over a list of concurrency levels
version_added: "0.1.0"
description:
  - Runs on the node against the SGLang server there (its loopback address by default) and
    measures, for each concurrency level, aggregate output tok/s, request throughput, per-request
    decode tok/s, TTFT, ITL, TPOT and end-to-end latency (mean, p50, p90, p99), completed and
    failed request counts, the server-side speculative accept length, and whether the benchmark
    client itself was close to its own limit.
  - Closed-loop load; at concurrency C exactly C requests are in flight; each finished request is
    replaced at once by the next. Warmup requests run before each level and are not counted.
  - Metric names and definitions follow SGLang's C(sglang.benchmark.serving) (bench_serving) where
    it has them. C(tpot_ms) = (e2e - TTFT) / (n - 1) and C(decode_tps_per_request) =
    (n - 1) / (e2e - TTFT), where n is the server's completion token count; the first token comes
    from prefill at TTFT, so the decode phase yields n - 1 tokens. C(itl_ms) is per token. A chunk
    that carries k tokens after a gap g counts as k gaps of g / k, because speculative decoding
    streams several tokens per chunk. The raw gaps between chunks are in C(chunk_gap_ms).
    Percentiles use numpy's default linear interpolation, as bench_serving does.
    C(output_throughput) = output tokens of completed requests / wall time of the level, from the
    first request sent to the last one finished.
  - GuideLLM's TPOT and the per-request tok/s of llmperf divide by the whole e2e (TTFT included),
    so they read lower than C(decode_tps_per_request). Do not compare them one to one.
  - Accept length per level comes, in order of preference, from deltas of the server's own
    counters C(sglang:generation_tokens_total) / C(sglang:spec_verify_calls_total) on C(/metrics)
    (the server needs C(--enable-metrics)), then from the per-request C(meta_info)
    (token-weighted), then from C(/server_info) C(internal_states[0].avg_spec_accept_length). The
    last is a lifetime average, reset by C(/flush_cache); it is reported before and after each
    level.
  - The client is Python stdlib only (asyncio transports speaking HTTP/1.1 with keep-alive and SSE
    by hand), so it runs on any node Python >= 3.9 without extra packages. The module measures its
    own CPU time and event-loop lag during each level and sets C(client_limited) when the figures
    may reflect the client rather than the server (CPU > 85% of one core or loop lag p99 > 5 ms).
  - Every request has a deadline (O(timeout)). A server that dies mid-run ends the module with a
    failure that still returns the levels measured so far. Requests that only ran out of that
    client-side deadline, while the server still answers C(/health) (checked with a deadline of its
    own), are reported as such, naming O(timeout), not as a server that stopped answering.
  - A level where no request completed has no figures. By default the module then fails, naming
    the level, the number of failed requests and the most common error; the levels up to it are
    returned. Failures at a level above O(max_failure_rate) are a warning and set
    C(failure_rate_exceeded) on the level. Failed requests are grouped by HTTP status and a
    normalised message (prompts a server echoes back removed, length bounded), with counts.
  - It works against any OpenAI-compatible server, not only SGLang. The synthetic workload sends
    token ids where the server takes them and text where it does not (O(prompt_format)); text
    prompts are sized with the server's own token count (see O(prompt_format)). Each level
    reports the prompt tokens per request as the server counted them (C(usage) /
    C(meta_info)), the output tokens per request against the asked length, and warns when
    requests end short under O(ignore_eos).
author:
  - blackwell.sglang maintainers (@blackwell)
extends_documentation_fragment:
  - blackwell.sglang.api_key
attributes:
  action_group:
    description: Use C(group/blackwell.sglang.bench) in C(module_defaults) to set defaults for this module.
    support: full
    membership:
      - blackwell.sglang.bench
options:
  url:
    description: Base URL of the SGLang server, as seen from the node. Only C(http://) is supported.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: The server's C(--api-key), sent as a bearer token. Never logged.
    type: str
  endpoint:
    description:
      - C(generate) is SGLang's native C(/generate). It counts tokens from C(meta_info) and
        reports the per-request accept length.
      - C(completions) and C(chat) are the OpenAI-compatible C(/v1/completions) and
        C(/v1/chat/completions). Token counts come from streamed C(usage) blocks
        (C(continuous_usage_stats)). A server that reports usage only at the end gets its total
        spread evenly over the chunks after the first.
    type: str
    choices: [generate, completions, chat]
    default: generate
  model:
    description: Model name for the OpenAI endpoints. Default is the first id from C(/v1/models).
    type: str
  concurrency:
    description: Concurrency levels to measure, in this order. Each must be >= 1.
    type: list
    elements: int
    default: [1, 2, 4, 8, 16, 32]
  num_prompts:
    description:
      - Measured requests per level (and per repeat).
      - Default 5 x the concurrency, at least 10, so that ramp-up and drain are a small part of
        the level.
      - Mutually exclusive with O(duration).
    type: int
  duration:
    description:
      - Instead of O(num_prompts), issue requests for this many seconds per level, then wait for
        the requests in flight.
      - Seconds are in the server's time, divided by O(time_scale) on the wall clock.
    type: float
  warmup:
    description:
      - Warmup requests before each level (and each repeat). They are not counted. They open the
        pooled connections and warm the server.
      - They have the measured requests' shape, on the same endpoint with the same prompt form,
        input length and O(ignore_eos); only their output is capped at O(warmup_output_len). With
        a dataset they are its prompts taken from the end of the list, away from the ones a level
        measures first.
      - Default is the level's concurrency; C(0) turns warmup off.
    type: int
  warmup_output_len:
    description: Output tokens of a warmup request at most (O(output_len) when that is smaller).
    type: int
    default: 16
  prompt_format:
    description:
      - How the synthetic (C(random)) prompts are sent.
      - C(token_ids) sends lists of O(input_len) token ids (C(input_ids) on C(/generate), a
        token-id C(prompt) on completions), exact in length.
      - C(text) sends text of random words, sized so that the server counts about O(input_len)
        prompt tokens. The server's tokenizer (and, on chat, its chat template) decides the
        count, so the module measures it before the first level. Four distinct probe prompts of
        w words (one output token each) report their C(usage.prompt_tokens). A linear fit over
        two sizes gives the next w, up to four sizes, until the mean is within one token or
        0.5%. The probes are returned in C(workload.calibration). A server that reports no
        usage gets O(input_len) words and a warning.
      - C(auto) picks C(token_ids) on C(/generate) and on a server that is SGLang (its
        C(/server_info), or C(owned_by=sglang) in C(/v1/models)), C(text) on chat. On other
        servers' completions it sends one short token-id request and uses C(token_ids) when it
        is accepted, C(text) when it is refused with HTTP 4xx. The choice and why are in
        C(workload).
      - A dataset's prompts are sent as written. C(text) with C(input_ids) lines, or
        C(token_ids) with text lines, is refused.
    type: str
    choices: [auto, token_ids, text]
    default: auto
  fail_on_empty_level:
    description:
      - Fail the module at the first level where no request completed. The message names the
        level, the failed count and the most common error; the levels up to it are in C(levels).
      - C(false) records such a level (C(measured=false), zero throughput, a warning) and goes on,
        for callers that judge an empty level themselves.
    type: bool
    default: true
  max_failure_rate:
    description:
      - Share of a level's requests (0 to 1) that may fail without a warning.
      - Above it, the level gets C(failure_rate_exceeded=true) and a warning in
        C(bench_warnings) with the most common error. The default C(0.0) warns at the first
        failure.
    type: float
    default: 0.0
  input_len:
    description: Prompt length in tokens of the synthetic (C(random)) workload.
    type: int
    default: 1024
  output_len:
    description:
      - Output tokens per request (C(max_new_tokens) / C(max_tokens)).
      - A dataset line may set its own value with C(output_len) or C(max_tokens).
    type: int
    default: 1024
  temperature:
    description: Sampling temperature.
    type: float
    default: 0.0
  ignore_eos:
    description:
      - Keep generating past end-of-sequence until the output length is reached.
      - Default C(true) for the synthetic workload and C(false) for a dataset file.
    type: bool
  dataset:
    description:
      - C(random) is synthetic prompts of O(input_len) tokens, as token ids or text (see
        O(prompt_format)). Each prompt is distinct, so the prefix cache does not help.
      - Otherwise, the path on the node of a JSONL file with one prompt per line. A line is a JSON
        string, or an object with C(prompt) or C(text) (a string), C(messages) (a chat list, only
        with O(endpoint=chat)) or C(input_ids). An optional C(output_len) / C(max_tokens) may be
        given. Blank lines are skipped.
      - The file is read on the node. For a file on the controller, set O(dataset_src=controller);
        the collection's action plugin then reads it there (relative paths are searched like
        M(ansible.builtin.copy)'s C(src), including a role's C(files/)) and passes its lines to
        the module.
      - Prompts are used in order and cycled when a level needs more.
    type: str
    default: random
  dataset_src:
    description:
      - Where the O(dataset) file is. C(node) is the managed node. C(controller) is the Ansible
        controller; its action plugin reads the file there and passes the lines inline.
    type: str
    choices: [node, controller]
    default: node
  dataset_lines:
    description:
      - The dataset's lines, passed inline. The action plugin sets this for
        O(dataset_src=controller). The format is the same JSONL as O(dataset).
    type: list
    elements: str
  seed:
    description: Seed of the synthetic prompts.
    type: int
    default: 42
  repeats:
    description:
      - Measure each level this many times.
      - With more than one repeat, each level also gets C(repeats) (the headline figures per
        repeat) and C(ci) (a Student-t interval of their mean at O(confidence)).
    type: int
    default: 1
  confidence:
    description: Confidence level of the intervals over repeats.
    type: float
    default: 0.95
  timeout:
    description:
      - Wall-clock deadline of each request in seconds (connect + whole stream), on the client side.
      - The probes before the levels use it too (up to 30 s); a level whose requests all ran out of it
        fails naming this option (or is recorded empty with O(fail_on_empty_level=false)).
    type: float
    default: 600
  flush_cache:
    description:
      - POST C(/flush_cache) before each level (after its warmup). This empties the radix cache and resets the
        server's lifetime accept-length average, so the C(/server_info) figure is per level.
      - The server refuses the flush while requests are pending; then a warning is returned.
    type: bool
    default: false
  deadline:
    description:
      - Wall-clock seconds the whole benchmark may take on the node. Past it the module stops
        the benchmark, drops its open requests and fails saying so (the levels measured so far
        are not returned).
      - Default no deadline; a run that nobody waits for any more then lasts as long as its requests.
    type: float
  watch_controller:
    description:
      - Stop the benchmark (and exit, with a line in the node's log) when the controller that
        started it is gone, instead of loading the server for nobody.
      - Seen over SSH (the connection's pipe loses its reader, or the C(sshd) session exits) and
        under the C(local) connection (an ancestor process exits). Under C(docker exec) the Docker
        daemon keeps the pipes open after its client is gone, so there only O(deadline) holds.
    type: bool
    default: true
  time_scale:
    description:
      - Only for simulators running faster than real time (the simulator's
        C(SGLANG_SIM_TIME_SCALE)).
      - Measured durations are divided by it and rates multiplied, so figures read in the
        simulated server's seconds and compare with a real server's.
      - Leave it at C(1.0) for a real server.
      - Fixed costs that the simulator does not scale are magnified by 1 / O(time_scale) too. The
        HTTP exchange and the client's own delays are such costs. At 0.05, 2 ms of real request
        handling reads as 40 ms more TTFT. Compare TTFT with the server's own histogram when it
        matters.
    type: float
    default: 1.0
  steady_state_ratio:
    description:
      - C(steady_state.output_throughput) covers the longest window with at least this fraction of
        the concurrency in flight (ramp-up and drain excluded).
    type: float
    default: 0.9
notes:
  - Supports check mode. It then returns C(would_run) (levels, request counts, request shape) and
    sends no request.
  - C(changed) is always false.
  - Steady-state throughput follows SGLang's C(steady_state) idea. It needs enough requests per
    level to have a window.
seealso:
  - name: SGLang bench_serving
    description: The reference client whose metric names this module reuses.
    link: https://docs.sglang.io/developer_guide/bench_serving.html
"""

EXAMPLES = r"""
- name: Benchmark the local server at the default levels (synthetic 1024/1024, temperature 0)
  blackwell.sglang.sglang_bench:
    url: http://127.0.0.1:30000
  register: __mtp_tune_bench

- name: Show aggregate output tok/s at C=32 and per-request decode tok/s at C=1
  ansible.builtin.debug:
    msg: >-
      {{ ansible_facts.sglang_bench['32'].output_throughput | round(0) }} tok/s aggregate,
      {{ ansible_facts.sglang_bench['1'].decode_tps_per_request.p50 | round(1) }} tok/s per request

- name: Benchmark the chat endpoint on real agentic-coding prompts kept on the controller
  blackwell.sglang.sglang_bench:
    endpoint: chat
    api_key: "{{ sglang_service_api_key }}"
    dataset: agentic_prompts.jsonl   # files/ of the playbook or role
    dataset_src: controller
    concurrency: [1, 8]
    num_prompts: 40
    repeats: 3
    flush_cache: true

- name: Completions on another OpenAI-compatible server; text prompts sized by its tokenizer
  blackwell.sglang.sglang_bench:
    url: http://127.0.0.1:8000
    endpoint: completions
    prompt_format: text
    concurrency: [1, 8]
    input_len: 512
    output_len: 256
    max_failure_rate: 0.02   # up to 2 % failed requests per level without a warning

- name: Record a level where nothing completed instead of failing (the caller judges it)
  blackwell.sglang.sglang_bench:
    concurrency: [1, 64]
    fail_on_empty_level: false
  register: __bench

- name: Against the simulator running 20x faster than real time
  blackwell.sglang.sglang_bench:
    url: http://127.0.0.1:31000
    concurrency: [1, 32]
    input_len: 256
    output_len: 256
    time_scale: 0.05
"""

RETURN = r"""
levels:
  description:
    - One entry per concurrency level, in the order measured.
    - Times in ms and rates in tok/s or req/s, in the server's time (see O(time_scale)).
    - The per-level keys are listed below.
  returned: success, and on failure the levels measured before it
  type: list
  elements: dict
  contains:
    concurrency: {description: "Requests in flight.", type: int}
    completed: {description: "Requests that finished with a full stream.", type: int}
    failed: {description: "Requests that failed (HTTP error, timeout, malformed or cut stream).", type: int}
    errors:
      description:
        - >-
          Failure reasons with their counts, keyed by "HTTP status: message" or the client's
          message (timeout, cut stream). The message is normalised (echoed prompts removed, at
          most 160 characters), so identical failures share one key.
      type: dict
    error_groups: {description: "The same groups as a list, most frequent first; each has status (null without an HTTP answer), message and count.", type: list}
    failure_rate: {description: "failed / (completed + failed); null without requests.", type: float}
    failure_rate_exceeded: {description: "failure_rate is above O(max_failure_rate).", type: bool}
    measured: {description: "At least one request completed, so the level has figures.", type: bool}
    output_tokens_per_request: {description: "Mean output tokens of a completed request (server count).", type: float}
    output_len_asked: {description: "Mean output length asked of the completed requests.", type: float}
    short_outputs: {description: "Completed requests with fewer output tokens than asked.", type: int}
    ended_short: {description: "Requests ended short under O(ignore_eos); the figures describe shorter requests than asked.", type: bool}
    prompt_tokens_per_request:
      description: Mean prompt tokens of a completed request as the server counted them (usage or meta_info); null when it does not say.
      type: float
    finish_reasons: {description: "Completed requests per finish reason (length, stop, ...).", type: dict}
    level_warnings: {description: "The warnings about this level (also in bench_warnings).", type: list}
    duration_s: {description: "Wall time of the level, first send to last completion.", type: float}
    total_output_tokens: {description: "Output tokens of completed requests (server count).", type: int}
    total_input_tokens: {description: "Prompt tokens of completed requests (server count).", type: int}
    output_throughput: {description: "Aggregate output tok/s.", type: float}
    request_throughput: {description: "Completed requests per second.", type: float}
    decode_tps_per_request: {description: "Per-request decode tok/s, (n - 1) / (e2e - TTFT): mean and p50.", type: dict}
    ttft_ms: {description: "Time to first token: mean, p50, p90, p99.", type: dict}
    itl_ms: {description: "Inter-token latency per token: mean, p50, p90, p99.", type: dict}
    chunk_gap_ms: {description: "Gaps between token-bearing stream chunks: mean, p50, p90, p99.", type: dict}
    tpot_ms: {description: "(e2e - TTFT) / (n - 1): mean, p50, p90, p99.", type: dict}
    e2e_latency_ms: {description: "End-to-end latency: mean, p50, p90, p99.", type: dict}
    mean_concurrency: {description: "Sum of e2e / duration (bench_serving's Concurrency).", type: float}
    tokens_per_chunk: {description: "Output tokens per token-bearing chunk.", type: float}
    steady_state:
      description:
        - Output tok/s over the longest window with >= O(steady_state_ratio) x C requests in flight.
        - Keys C(window_s), C(output_tokens), C(output_throughput); null without such a window.
      type: dict
    accept_length: {description: "Speculative accept length for this level from the best source available.", type: float}
    accept_length_source: {description: "metrics_counters, request_meta_info or server_info_lifetime.", type: str}
    counter_accept_length: {description: "Delta generation_tokens_total / delta spec_verify_calls_total over the level.", type: float}
    server_output_tokens:
      description:
        - Delta of the server's C(sglang:generation_tokens_total) over the level; null without C(/metrics).
        - Compare it with C(total_output_tokens).
      type: float
    request_accept_length: {description: "Token-weighted accept length from the requests' meta_info.", type: float}
    accept_histogram:
      description:
        - Verify rounds by the number of correct draft tokens in them (index 0 = none, bonus token
          excluded), summed over the level's requests from C(/generate) C(meta_info.spec_correct_drafts_histogram).
        - Null on the OpenAI endpoints, where SGLang 0.5.23 returns it only to a request that sets
          C(return_spec_tokens_details), and without speculative decoding.
      type: list
      elements: int
    accept_length_bounds_by_depth:
      description:
        - "[low, high] accept length each chain depth up to the launched one would have had, from
          C(accept_histogram) (topk 1 drafts propose the same first k tokens at every depth). Keys are
          depths as strings."
        - The interval holds whether a draft token's correctness is set by its place in the output (a
          draft model reading tokens) or by its place in the round (EAGLE/MTP heads); see
          C(bench_metrics.accept_length_bounds_by_depth). One round per request of slack each way for the
          rounds the output limit cuts.
        - Per verify round; SGLang's own accept length also counts the prefill's first token.
      type: dict
    server_accept_length_before: {description: "/server_info avg_spec_accept_length before the level.", type: float}
    server_accept_length_after: {description: "/server_info avg_spec_accept_length after the level.", type: float}
    client_cpu_fraction: {description: "Benchmark process CPU time / wall time during the level (1.0 = one core busy).", type: float}
    client_loop_lag_p99_ms: {description: "p99 of the client's event-loop scheduling delay.", type: float}
    client_limited: {description: "True when the figures may be limited by the client (CPU > 85% or lag p99 > 5 ms).", type: bool}
    client_limit_reason: {description: "Which client limit was hit or close; null when none.", type: str}
    server_lost: {description: "The server stopped answering during this level.", type: bool}
    repeats: {description: "Headline figures of each repeat (only with repeats > 1).", type: list}
    ci: {description: "Student-t interval (mean, low, high, half_width, n, confidence) per headline figure over repeats; null with one repeat.", type: dict}
  sample:
    - concurrency: 1
      completed: 10
      failed: 0
      output_throughput: 241.7
      decode_tps_per_request: {mean: 245.3, p50: 245.1}
      ttft_ms: {mean: 61.2, p50: 60.9, p90: 63.0, p99: 64.1}
      accept_length: 3.9
      accept_length_source: metrics_counters
      client_limited: false
by_concurrency:
  description: The same level dicts keyed by concurrency as strings ("1", "2", ...).
  returned: success
  type: dict
config:
  description: The options used, with defaults filled in (api_key replaced by api_key_set).
  returned: always
  type: dict
server:
  description: What the server reported about itself (version, model, speculative settings, whether /metrics is on).
  returned: success
  type: dict
duration_s:
  description: Wall-clock seconds of the whole benchmark.
  returned: success
  type: float
workload:
  description:
    - How the prompts were sent. C(synthetic), C(prompt_format) (token_ids or text) and
      C(prompt_format_reason).
    - For synthetic text prompts also C(words) (words per prompt) and C(calibration) (the
      probes, each C(words) and mean C(prompt_tokens)).
  returned: success, and on failure as far as it was decided
  type: dict
  sample:
    synthetic: true
    prompt_format: text
    prompt_format_reason: "the server rejected a token-id prompt (HTTP 422: body.prompt: Input should be a valid string)"
    words: 511
    calibration: [{words: 1000, prompt_tokens: 1958.25}, {words: 511, prompt_tokens: 998.25}]
bench_warnings:
  description:
    - Non-fatal problems (failures above O(max_failure_rate), empty levels with
      O(fail_on_empty_level=false), outputs ending short under O(ignore_eos), missing
      C(/metrics), client limits). Each is also shown as an Ansible warning.
  returned: always
  type: list
  elements: str
would_run:
  description: Check mode only. The levels, request counts and request shape that would be sent.
  returned: check mode
  type: dict
ansible_facts:
  description:
    - C(sglang_bench) holds the level dicts keyed by concurrency as strings ("1", "2", ...).
    - It also holds C(levels), C(config), C(server), C(duration_s), C(workload) and C(warnings)
      (the C(bench_warnings)), as in the top-level results.
  returned: success
  type: dict
"""

import os
import sys
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.blackwell.sglang.plugins.module_utils import bench_watchdog
from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_api_key
from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_results
from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_runner
from ansible_collections.blackwell.sglang.plugins.module_utils.sglang_transport import ClientError
from ansible_collections.blackwell.sglang.plugins.module_utils.sglang_workload import load_jsonl


def _watch(module, p):
    """Start the watchdog: at the deadline, fail with a message; with the controller gone, leave a
    line in the node's log and exit. Either way the process ends from the watchdog thread, whatever
    the benchmark is waiting on (open sockets close with it, so the server aborts the requests)."""

    def stop(reason, kind):
        msg = "sglang_bench stopped: %s" % reason
        try:
            module.log(msg)
        except Exception:  # pylint: disable=broad-except
            pass  # the log is a courtesy; stopping is the point
        if kind == "deadline":
            try:
                module.fail_json(msg="%s; no level result is returned. Raise `deadline` or lower "
                                     "num_prompts/concurrency" % msg, stopped=kind)
            except SystemExit:
                pass
        try:
            sys.stdout.flush()  # os._exit skips the flush that a normal exit does
        except Exception:  # pylint: disable=broad-except
            pass  # nobody left to read it
        os._exit(1)

    if p["deadline"] is not None and p["deadline"] <= 0:
        module.fail_json(msg="deadline must be > 0 seconds; got %s" % p["deadline"])
    return bench_watchdog.Watchdog(stop, deadline_s=p["deadline"],
                                   watch_controller=p["watch_controller"]).start()


def _validate(module, p):
    conc = p["concurrency"]
    if not conc:
        module.fail_json(msg="concurrency must list at least one level")
    bad = [c for c in conc if c is None or c < 1]
    if bad:
        module.fail_json(msg="concurrency levels must be >= 1; got %s" % bad)
    for key in ("num_prompts", "input_len", "output_len", "repeats", "warmup_output_len"):
        if p[key] is not None and p[key] < 1:
            module.fail_json(msg="%s must be >= 1; got %s" % (key, p[key]))
    if p["warmup"] is not None and p["warmup"] < 0:
        module.fail_json(msg="warmup must be >= 0; got %s" % p["warmup"])
    for key in ("timeout", "time_scale"):
        if p[key] <= 0:
            module.fail_json(msg="%s must be > 0; got %s" % (key, p[key]))
    if p["duration"] is not None and p["duration"] <= 0:
        module.fail_json(msg="duration must be > 0; got %s" % p["duration"])
    if not 0 < p["confidence"] < 1:
        module.fail_json(msg="confidence must be between 0 and 1; got %s" % p["confidence"])
    if not 0 < p["steady_state_ratio"] <= 1:
        module.fail_json(msg="steady_state_ratio must be in (0, 1]; got %s"
                         % p["steady_state_ratio"])
    if not 0 <= p["max_failure_rate"] <= 1:
        module.fail_json(msg="max_failure_rate is a fraction of the level's requests, within "
                             "[0, 1]; got %s" % p["max_failure_rate"])
    if p["endpoint"] == "chat" and p["prompt_format"] == "token_ids":
        module.fail_json(msg="prompt_format=token_ids does not fit endpoint=chat (chat messages "
                             "are text); use prompt_format=auto or text")
    if p["temperature"] < 0:
        module.fail_json(msg="temperature must be >= 0; got %s" % p["temperature"])
    if not p["url"].startswith("http://"):
        module.fail_json(msg="url must start with http:// (got %r); the benchmark talks to the "
                             "server on the node" % p["url"])


def _load_dataset(module, p):
    if p["dataset_lines"] is not None:
        source = "dataset %s (from the controller)" % p["dataset"]
        try:
            prompts = load_jsonl(p["dataset_lines"], source=source)
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        return _check_prompts(module, prompts, source, p["endpoint"])
    if p["dataset_src"] == "controller":
        module.fail_json(msg="dataset_src=controller needs the collection's action plugin, which "
                             "reads the file on the controller; call the module through a "
                             "playbook task as blackwell.sglang.sglang_bench")
    if p["dataset"] == "random":
        return None
    path = p["dataset"]
    if not os.path.isfile(path):
        module.fail_json(msg="dataset file %s does not exist on the node; copy it there first "
                             "(e.g. ansible.builtin.copy) or use dataset=random" % path)
    try:
        with open(path, "rb") as fh:
            lines = fh.read().decode("utf-8").splitlines()
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read dataset %s: %s" % (path, exc))
    except UnicodeDecodeError as exc:
        module.fail_json(msg="dataset %s is not UTF-8 text: %s" % (path, exc))
    try:
        prompts = load_jsonl(lines, source="dataset %s" % path)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    return _check_prompts(module, prompts, "dataset %s" % path, p["endpoint"])


def _check_prompts(module, prompts, source, ep):
    for i, pr in enumerate(prompts, 1):
        if "messages" in pr and ep != "chat":
            module.fail_json(msg="%s prompt %d has 'messages'; use endpoint=chat (or give "
                                 "'prompt' text)" % (source, i))
        if "input_ids" in pr and ep == "chat":
            module.fail_json(msg="%s prompt %d has 'input_ids'; endpoint=chat needs text or "
                                 "messages" % (source, i))
    return prompts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            api_key=dict(type="str", no_log=True),
            api_key_file=dict(type="path"),
            endpoint=dict(type="str", default="generate",
                          choices=["generate", "completions", "chat"]),
            model=dict(type="str"),
            concurrency=dict(type="list", elements="int", default=[1, 2, 4, 8, 16, 32]),
            num_prompts=dict(type="int"),
            duration=dict(type="float"),
            warmup=dict(type="int"),
            input_len=dict(type="int", default=1024),
            output_len=dict(type="int", default=1024),
            temperature=dict(type="float", default=0.0),
            ignore_eos=dict(type="bool"),
            dataset=dict(type="str", default="random"),
            dataset_src=dict(type="str", default="node", choices=["node", "controller"]),
            dataset_lines=dict(type="list", elements="str"),
            seed=dict(type="int", default=42),
            repeats=dict(type="int", default=1),
            confidence=dict(type="float", default=0.95),
            timeout=dict(type="float", default=600.0),
            flush_cache=dict(type="bool", default=False),
            time_scale=dict(type="float", default=1.0),
            deadline=dict(type="float"),
            watch_controller=dict(type="bool", default=True),
            steady_state_ratio=dict(type="float", default=0.9),
            prompt_format=dict(type="str", default="auto", choices=["auto", "token_ids", "text"]),
            fail_on_empty_level=dict(type="bool", default=True),
            max_failure_rate=dict(type="float", default=0.0),
            warmup_output_len=dict(type="int", default=16),
        ),
        mutually_exclusive=[["num_prompts", "duration"], ["api_key", "api_key_file"]],
        supports_check_mode=True,
    )
    p = dict(module.params)
    key_error = sglang_api_key.resolve(p, module)
    if key_error:
        module.fail_json(msg=key_error)
    p.pop("api_key_file")
    _validate(module, p)
    cfg = dict(p)
    cfg["prompts"] = _load_dataset(module, p)
    cfg.pop("dataset_lines")  # the parsed prompts carry them; keep them out of the result
    if cfg["ignore_eos"] is None:
        cfg["ignore_eos"] = cfg["prompts"] is None
    if module.check_mode:
        full = dict(sglang_runner.DEFAULTS)
        full.update(cfg)
        module.exit_json(changed=False, would_run=sglang_runner.plan(full),
                         config=sglang_results.config_echo(full))
    for key in ("deadline", "watch_controller"):
        cfg.pop(key)
    watchdog = _watch(module, p)
    try:
        result = sglang_runner.run_benchmark(cfg)
    except sglang_runner.BenchError as exc:
        partial = exc.partial or {}
        module.fail_json(msg=str(exc), levels=partial.get("levels", []),
                         config=partial.get("config"), workload=partial.get("workload"),
                         bench_warnings=partial.get("warnings", []))
    except ClientError as exc:
        module.fail_json(msg="benchmark client error: %s" % exc)
    except Exception as exc:  # pylint: disable=broad-except
        # a bug or an environment problem: still one clear message, the trace kept for -vvv
        module.fail_json(msg="sglang_bench failed unexpectedly (%s: %s); please report it with "
                             "the exception shown by -vvv" % (type(exc).__name__, exc),
                         exception=traceback.format_exc())
    finally:
        watchdog.cancel()
    facts = dict(result["by_concurrency"])
    for key in ("levels", "config", "server", "duration_s", "workload", "warnings"):
        facts[key] = result[key]
    warnings = result.pop("warnings")
    for w in warnings:
        module.warn(w)
    module.exit_json(changed=False, ansible_facts={"sglang_bench": facts},
                     bench_warnings=warnings, **result)


if __name__ == "__main__":
    main()
