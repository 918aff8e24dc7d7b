# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Results of sglang_bench's load generator: a level's figures from its repeats, its accept
length from the server's counters, its judgement (failures, short outputs, prompt length) and
the whole run's result dict. Pure functions over ``bench_metrics``' figures, stdlib only."""

from __future__ import absolute_import, division, print_function

from ansible_collections.blackwell.sglang.plugins.module_utils import bench_metrics as bm

__metaclass__ = type

# figures that get a Student-t interval over repeats: (path in the level dict, output key)
CI_FIGURES = (
    (("output_throughput",), "output_throughput"),
    (("request_throughput",), "request_throughput"),
    (("decode_tps_per_request", "mean"), "decode_tps_per_request_mean"),
    (("decode_tps_per_request", "p50"), "decode_tps_per_request_p50"),
    (("ttft_ms", "p50"), "ttft_ms_p50"),
    (("ttft_ms", "p99"), "ttft_ms_p99"),
    (("tpot_ms", "mean"), "tpot_ms_mean"),
    (("itl_ms", "p50"), "itl_ms_p50"),
    (("e2e_latency_ms", "p50"), "e2e_latency_ms_p50"),
    (("accept_length",), "accept_length"),
)


def _get(d, path):
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


# ------------------------------------------------------------------ one repeat
def add_accept_length(m, m_before, m_after, i_before, i_after):
    """A repeat's accept length and where it comes from, given the server's /metrics and
    /server_info before and after it."""
    ctr = bm.counter_accept_length(m_before, m_after)
    sb = bm.server_info_accept_length(i_before)
    sa = bm.server_info_accept_length(i_after)
    m["counter_accept_length"] = ctr
    # the server's own count of tokens generated during the level (accuracy cross-check)
    try:
        m["server_output_tokens"] = m_after[bm.GEN_TOKENS] - m_before[bm.GEN_TOKENS]
    except (TypeError, KeyError):
        m["server_output_tokens"] = None
    m["server_accept_length_before"] = sb
    m["server_accept_length_after"] = sa
    if ctr is not None:
        m["accept_length"], m["accept_length_source"] = ctr, "metrics_counters"
    elif m.get("request_accept_length") is not None:
        m["accept_length"], m["accept_length_source"] = m["request_accept_length"], \
            "request_meta_info"
    elif sa is not None:
        m["accept_length"], m["accept_length_source"] = sa, "server_info_lifetime"
    else:
        m["accept_length"], m["accept_length_source"] = None, None


def add_client_limit(m, cpu, lag):
    """Whether the client's CPU share or event-loop lag limited a repeat's figures."""
    limited, reason = bm.client_limit(cpu, lag)
    m["client_cpu_fraction"] = cpu
    m["client_loop_lag_p99_ms"] = lag
    m["client_limited"] = limited
    m["client_limit_reason"] = reason
    near, near_reason = bm.client_limit(cpu, lag, cpu_threshold=0.6, lag_threshold_ms=2.0)
    if near and not limited:
        # not limited yet, but say which limit is close so the reader can judge
        m["client_limit_reason"] = "close to the client's limit: " + near_reason


# ------------------------------------------------------------------ one level
def _merge_repeats(reps, all_records, c, cfg):
    """One level's figures from several repeats: records pooled, throughputs averaged, the
    client's worst state kept, each repeat's headline figures listed."""
    walls = sum(r["duration_s"] for r in reps) * cfg["time_scale"]
    level = bm.level_metrics(all_records, walls, c, cfg["time_scale"],
                             cfg["steady_state_ratio"])
    level["output_throughput"] = bm.mean([r["output_throughput"] for r in reps
                                          if r["output_throughput"] is not None])
    level["request_throughput"] = bm.mean([r["request_throughput"] for r in reps
                                           if r["request_throughput"] is not None])
    ss = [r["steady_state"]["output_throughput"] for r in reps if r.get("steady_state")]
    level["steady_state"] = {"output_throughput": bm.mean(ss), "repeats_with_window": len(ss)}
    for key in ("accept_length", "accept_length_source", "counter_accept_length",
                "server_accept_length_before"):
        level[key] = reps[0].get(key) if key in ("accept_length_source",
                                                 "server_accept_length_before") else \
            bm.mean([r[key] for r in reps if r.get(key) is not None])
    level["server_accept_length_after"] = reps[-1].get("server_accept_length_after")
    srv = [r.get("server_output_tokens") for r in reps]
    level["server_output_tokens"] = sum(srv) if None not in srv else None
    level["client_cpu_fraction"] = max(r["client_cpu_fraction"] or 0 for r in reps)
    lags = [r["client_loop_lag_p99_ms"] for r in reps if r["client_loop_lag_p99_ms"] is not None]
    level["client_loop_lag_p99_ms"] = max(lags) if lags else None
    level["client_limited"] = any(r["client_limited"] for r in reps)
    level["client_limit_reason"] = "; ".join(sorted(set(
        r["client_limit_reason"] for r in reps if r["client_limit_reason"]))) or None
    level["repeats"] = []
    for r in reps:
        item = dict((out, _get(r, path_)) for path_, out in CI_FIGURES)
        item.update(completed=r["completed"], failed=r["failed"])
        level["repeats"].append(item)
    return level


def combine_repeats(reps, all_records, c, cfg):
    """A level's figures from its repeats' figures and records, with confidence intervals when
    there are several."""
    level = reps[0] if len(reps) == 1 else _merge_repeats(reps, all_records, c, cfg)
    level["ci"] = {out: bm.confidence_interval([_get(r, path_) for r in reps],
                                               cfg["confidence"])
                   for path_, out in CI_FIGURES} if len(reps) > 1 else None
    return level


def most_common_error(level):
    groups = level.get("error_groups") or []
    if not groups:
        return "none recorded"
    g = groups[0]
    key = ("HTTP %s: %s" % (g["status"], g["message"])) if g["status"] is not None \
        else g["message"]
    return "%s (x%d)" % (key, g["count"])


def judge_level(level, cfg, workload, synthetic):
    """Flags and warnings of one measured level: failures against max_failure_rate, a level
    with no completed request, outputs shorter than asked under ignore_eos, prompts whose
    server-counted length is far from input_len."""
    c = level["concurrency"]
    out = []
    total = level["completed"] + level["failed"]
    level["measured"] = level["completed"] > 0
    rate = level.get("failure_rate")
    level["failure_rate_exceeded"] = bool(rate is not None and rate > cfg["max_failure_rate"])
    if not level["measured"]:
        out.append("C=%d: no request completed (%d of %d failed; most common: %s); the level "
                   "has no figures" % (c, level["failed"], total, most_common_error(level)))
    elif level["failure_rate_exceeded"]:
        out.append("C=%d: %d of %d requests failed (%.1f%%, above max_failure_rate %.1f%%); "
                   "most common: %s" % (c, level["failed"], total, 100.0 * rate,
                                        100.0 * cfg["max_failure_rate"], most_common_error(level)))
    short = level.get("short_outputs") or 0
    if short and cfg["ignore_eos"]:
        out.append("C=%d: %d of %d completed requests ended short of the asked output length "
                   "under ignore_eos (mean %.1f tokens per request, %.1f asked): the server "
                   "ignores ignore_eos or caps the output; the figures describe shorter requests"
                   % (c, short, level["completed"], level["output_tokens_per_request"] or 0.0,
                      level["output_len_asked"] or 0.0))
    level["ended_short"] = bool(short and cfg["ignore_eos"])
    ptr = level.get("prompt_tokens_per_request")
    if synthetic and ptr is not None and workload["prompt_format"] == "text":
        if abs(ptr - cfg["input_len"]) > max(2.0, 0.05 * cfg["input_len"]):
            out.append("C=%d: prompts averaged %.1f tokens as the server counts them, for "
                       "input_len %d" % (c, ptr, cfg["input_len"]))
    level["level_warnings"] = out


# ------------------------------------------------------------------ whole benchmark
def config_echo(cfg):
    out = {k: v for k, v in cfg.items() if k not in ("api_key", "prompts")}
    out["api_key_set"] = bool(cfg.get("api_key"))
    if cfg.get("prompts") is not None:
        out["dataset_prompts"] = len(cfg["prompts"])
    return out


def bench_result(cfg, server, levels, warnings, duration, workload=None):
    """The result dict of a run (or, in BenchError.partial, of the part run before it stopped)."""
    return {"levels": levels,
            "by_concurrency": dict((str(lv["concurrency"]), lv) for lv in levels),
            "config": config_echo(cfg), "server": server, "duration_s": duration,
            "workload": workload or {}, "warnings": warnings}
