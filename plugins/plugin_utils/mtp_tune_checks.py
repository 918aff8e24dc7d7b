# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Checks and advice of the mtp_tune role that are decided without a server.

mtp_tune_dataset_problems: what is wrong with a benchmark prompt file, read on the node before
any server launch (the same JSONL rules the benchmark client applies, for the endpoint it uses).
mtp_tune_no_winner_hint: what to change when no candidate won, fitted to why they lost (memory
failures, a model that is not there, an SLO no candidate met, a benchmark that failed), so the
advice never names a lever that cannot help; mtp_tune_no_winner_message the whole message the run
stops with then.
mtp_tune_smoke_due: whether the converged server is benchmarked again (a smoke run).
mtp_tune_spec_problems: what is wrong with the run's spec, checked before any restart; the filter
registry plugins/filter/mtp_tune_checks.py publishes mtp_settings.spec_problems under that name.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.module_utils import journal
from ansible_collections.blackwell.sglang.plugins.module_utils.sglang_workload import load_jsonl
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import spec_from

MEMORY_CLASSES = ("oom_kv_cache", "cuda_graph_capture", "cuda_oom")


def mtp_tune_dataset_problems(text, path="dataset", endpoint="generate", truncated=False):
    """Problems of the JSONL prompt file ``text`` (read from ``path``); empty when usable.

    Each line must be a JSON string or an object with ``prompt``, ``text`` or ``input_ids``
    (``messages`` only with ``endpoint=chat``), with an optional integer ``output_len`` /
    ``max_tokens`` / ``max_new_tokens``, as blackwell.sglang.sglang_bench reads it.
    ``truncated``: only the start of a larger file was read; its last, partial line is skipped.
    """
    if text is None:
        return ["%s could not be read" % path]
    lines = str(text).splitlines()
    if truncated and lines:
        lines = lines[:-1]
    problems = []
    try:
        prompts = load_jsonl(lines, source=path)
    except ValueError as exc:
        return [str(exc)]
    if endpoint != "chat":
        for i, item in enumerate(prompts, 1):
            if "messages" in item:
                problems.append("%s prompt %d is a chat 'messages' list, which the %s endpoint "
                                "cannot send (use prompt, text or input_ids)" % (path, i, endpoint))
                break
    for i, item in enumerate(prompts, 1):
        if item.get("output_len") is not None and item["output_len"] < 1:
            problems.append("%s prompt %d asks for %d output tokens (must be >= 1)"
                            % (path, i, item["output_len"]))
            break
    return problems


def _failure_classes(attempts):
    out = []
    for att in attempts or []:
        if att.get("status") == "failed":
            cls = att.get("failure_class") or "unknown"
            if cls not in out:
                out.append(cls)
    return out


def mtp_tune_no_winner_hint(attempts, spec=None):
    """One sentence on what to change when no candidate won, fitted to why they lost.

    ``spec`` is the run's (a TuneSpec, or what spec_from takes). ``mtp_tune_fit_retry`` is
    suggested only when a candidate failed on memory (the classes in ``spec.fit_classes``, default
    MEMORY_CLASSES) and the fit search was off; an SLO that the candidates that ran all missed gets
    its limits named; any other failure class gets its own hint (journal.hint).
    """
    spec = spec_from(spec)
    objective, fit_retry = spec.objective, spec.fit_retry
    slo_min_tps, slo_max_ttft_p99_ms = spec.slo_min_tps, spec.slo_max_ttft_p99_ms
    classes = _failure_classes(attempts)
    fit = tuple(spec.fit_classes) if spec.fit_classes else MEMORY_CLASSES
    ran = [a for a in attempts or [] if a.get("status") == "ok"]
    parts = []
    memory = [c for c in classes if c in fit]
    if memory:
        if fit_retry:
            parts.append("%s even with the fit search: lower mtp_tune_fit_bs_floor or "
                         "mtp_tune_fit_mrr_floor, raise sglang_service_mem_fraction_static, or "
                         "try fewer steps" % "/".join(memory))
        else:
            parts.append("%s: try mtp_tune_fit_retry=true (smaller CUDA-graph batch, fewer "
                         "running requests) or fewer steps" % "/".join(memory))
    for cls in classes:
        if cls in fit:
            continue
        if cls == "bench_failed":
            parts.append("bench_failed: the server started but the benchmark did not finish; read "
                         "the attempt's failure_line (dataset, mtp_tune_bench_timeout, the "
                         "server's journal)")
        else:
            parts.append("%s: %s" % (cls, journal.hint(cls).rstrip(".")))
    if objective == "slo" and ran:
        limits = []
        if slo_min_tps is not None:
            limits.append("mtp_tune_slo_min_tps=%s" % slo_min_tps)
        if slo_max_ttft_p99_ms is not None:
            limits.append("mtp_tune_slo_max_ttft_p99_ms=%s" % slo_max_ttft_p99_ms)
        parts.append("%d candidate(s) ran but none met the SLO at any measured level: relax %s, "
                     "or add lower concurrency levels to mtp_tune_concurrency"
                     % (len(ran), " / ".join(limits) or "the SLO"))
    if not parts:
        return "No candidate was measured: check mtp_tune_steps and mtp_tune_max_launches."
    return "; ".join(parts) + "."


def mtp_tune_no_winner_message(attempts, spec=None, restored=False, summary=None, judged_floor=None):
    """The message a run stops with when no candidate won: what each launch ended in, whether the
    unit from before tuning was put back, where the report is, and what to change
    (mtp_tune_no_winner_hint; for a server SGLang capped below the judged level, the override).

    ``restored``: the pre-tuning unit was restored; ``summary``: the report's path;
    ``judged_floor``: the running-request floor of the judged level (mtp_tune_fit_ladder).
    """
    spec = spec_from(spec)
    attempts = list(attempts or [])
    outcomes = ", ".join("%s: %s" % (a.get("key") or "?", a.get("failure_class") or "ran") for a in attempts)
    msg = "No candidate %s (%s)." % ("met the SLO" if spec.objective == "slo" else "started and finished its benchmark",
                                     outcomes or "none launched")
    if restored:
        msg += " The pre-tuning unit was restored."
    if summary:
        msg += " See %s." % summary
    msg += " " + mtp_tune_no_winner_hint(attempts, spec)
    if "capped" in [a.get("failure_class") for a in attempts]:
        msg += (" Or set mtp_tune_fit_allow_capped=true to accept a server SGLang capped below C=%s."
                % (judged_floor if judged_floor is not None else "the judged level"))
    return msg


def mtp_tune_smoke_due(winner_key, unit_changed, previous=None):
    """True when the converged server must be benchmarked (a smoke run): its unit changed (so the
    server restarted), or the node's last convergence was to another setting or was never
    verified. Otherwise the earlier verification stands and a re-run changes nothing.

    ``previous``: the converge record of the node's last run (key, verify.ok), or None.
    """
    previous = previous if isinstance(previous, dict) else {}
    verify = previous.get("verify") if isinstance(previous.get("verify"), dict) else {}
    return bool(unit_changed or previous.get("key") != winner_key or not verify.get("ok"))
