# -*- coding: utf-8 -*-
# Copyright: (c) 2026, blackwell.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Tuning several identical nodes together: one round launches one candidate per node.

The search itself stays sequential (one proposal at a time, from every measurement so far); a
round asks it for as many proposals as there are nodes, each time with the proposals already
handed out entered as launches whose result is not known yet (status ``pending``). The search
never proposes a candidate that has an attempt, so the proposals of a round are distinct, and a
fit retry, a re-measurement or a completing launch is handed out once. The nodes' results then
join one pool of attempts, from which the next round and the winner are decided.

What this rests on: the nodes are interchangeable (same GPUs, model, release, workload), so a
figure measured on one stands for all; the run checks what it can of that before the first launch
(``pool_problems``) and the launch-to-launch spread the pool measures includes the node-to-node
spread.

The filters of plugins/filter/mtp_pool.py (mtp_tune_pool_*) are the functions at the end.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_score import deciding_attempts, mtp_tune_pick_best
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_search import (
    alpha_of, chain_tau, mtp_tune_complete, tune_next)
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import AnsibleFilterError, candidate_key, spec_from

PENDING = "pending"
# Per-level fields of a measurement that describe that launch's own draft depth only.
_OWN_DEPTH_FIELDS = ("accept_histogram", "accept_length_bounds_by_depth", "accept_length_high_deeper")


def placeholder(nxt):
    """A proposal handed out in this round, entered as a launch without a result yet."""
    cand = nxt["candidate"]
    return {"key": cand["key"], "candidate": cand, "overrides": nxt.get("overrides") or {},
            "fit_rung": nxt.get("fit_rung"), "reason": nxt.get("reason"), "status": PENDING}


def believed(nxt, top, accept_length):
    """A proposal handed out in this round, entered as if it had measured what the best so far
    did (the "constant liar" of batch optimisation).

    Without a belief the search, asked again in the same round, only has what was measured
    before it and proposes little more; believing the proposal ties the best lets it propose
    what it would want next if that were so (the neighbours of a predicted peak, the next step
    of a climb), which fills the round with launches a sequential run would probably make
    anyway. The belief never reaches a decision: the round's results replace it.

    ``top`` is the best measured attempt; ``accept_length(steps, topk, draft_tokens, tau,
    top_candidate)`` gives the accept length the proposal's depth would have at the top's
    acceptance (each measurement's histogram speaks of its own depth only, so it is dropped).
    """
    out = placeholder(nxt)
    metrics = {}
    for level, node in ((top or {}).get("metrics") or {}).items():
        if not isinstance(node, dict):
            continue
        node = dict((k, v) for k, v in node.items() if k not in _OWN_DEPTH_FIELDS)
        tau = node.get("accept_length")
        if isinstance(tau, (int, float)) and tau > 0:
            node["accept_length"] = accept_length(nxt["candidate"], float(tau), top["candidate"])
        metrics[level] = node
    out.update(status="ok", believed=True, metrics=metrics)
    return out


def launched(attempts):
    """Launches that count against mtp_tune_max_launches (the search's own count)."""
    return sum(1 for a in attempts or [] if a.get("status") in ("ok", "failed")
               and not a.get("resumed") and not a.get("believed"))


def next_batch(next_one, attempts, slots, max_launches=None, believe=None):
    """Up to ``slots`` launches for one round, in the order the search wants them.

    ``next_one(attempts)`` is the sequential search (mtp_tune_next or mtp_tune_complete with the
    run's settings bound). Each proposal handed out is entered before the search is asked again:
    ``believe(attempts, proposal)`` returns the attempt to enter (see ``believed``), or None for a
    plain ``pending`` one. Stops early when the search has nothing more to launch, or when the
    round would pass ``max_launches``.
    """
    attempts = list(attempts or [])
    slots = int(slots)
    if max_launches not in (None, ""):
        slots = min(slots, int(max_launches) - launched(attempts))
    out, entered = [], []
    while len(out) < slots:
        nxt = next_one(attempts + entered)
        if nxt is None:
            break
        out.append(nxt)
        entry = believe(attempts + entered, nxt) if believe is not None else None
        entered.append(entry if entry is not None else placeholder(nxt))
    return out


# What must be equal on every node of a pool, and what each field is called in a refusal.
IDENTITY_FIELDS = (
    ("gpus", "GPUs (model and memory per card)"),
    ("gpu_count", "GPU count"),
    ("workload", "model, release, tensor parallelism and benchmark workload"),
    ("settings", "tuning settings (candidates, objective, levels, noise, strategy, fit search)"),
)


def pool_problems(identities):
    """Why the nodes cannot tune together, as messages (empty: they can).

    ``identities`` maps each node to what it reported of itself: ``gpus`` (name and memory per
    card), ``gpu_count``, ``workload`` (the run's fingerprint: model, release, tp, workload) and
    ``settings`` (what decides the search). Every field must be equal on every node; a message
    names the field, what to fix, and which nodes hold which value.
    """
    if not isinstance(identities, dict) or not identities:
        return ["mtp_tune_pool needs at least one node's identity, got %r" % (identities,)]
    hosts = sorted(identities)
    out = []
    for field, what in IDENTITY_FIELDS:
        groups = []
        for host in hosts:
            ident = identities[host] if isinstance(identities[host], dict) else {}
            value = ident.get(field)
            for group in groups:
                if group[0] == value:
                    group[1].append(host)
                    break
            else:
                groups.append((value, [host]))
        if len(groups) > 1:
            out.append("the nodes differ in %s: %s. mtp_tune_pool tunes identical nodes together; tune these "
                       "separately (mtp_tune_pool=false) or limit the play to identical nodes (-l)." % (
                           what, "; ".join("%s: %s" % (", ".join(hs), _short(v)) for v, hs in groups)))
    return out


def _short(value, limit=160):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def assign(batch, hosts, host):
    """The launch of ``host`` in this round (None: it sits the round out)."""
    order = sorted(hosts)
    if host not in order:
        return None
    i = order.index(host)
    return batch[i] if i < len(batch) else None


def identity(gpus, workload, settings):
    """What a node says of itself for ``pool_problems``: its GPUs (from gpu_info, as "count x name
    memory"), the run's workload fingerprint and the settings that decide the search."""
    cards = []
    for gpu in (gpus or {}).get("gpus") or []:
        if isinstance(gpu, dict):
            cards.append("%s %s MiB" % (gpu.get("name"), gpu.get("memory_total_mib")))
    kinds = []
    for card in cards:
        if card not in kinds:
            kinds.append(card)
    return {"gpus": ", ".join("%d x %s" % (cards.count(k), k) for k in kinds) or "none",
            "gpu_count": len(cards), "workload": workload, "settings": settings}


def host_facts(hostvars, hosts, name):
    """Each node's fact ``name`` (None where the node or the fact is missing), by node."""
    out = {}
    for host in hosts or []:
        try:
            out[host] = hostvars[host].get(name)
        except KeyError:
            out[host] = None
    return out


def pool_attempts(hostvars, hosts, name="_mtp_tune_attempts"):
    """Every node's attempts in one list, in node order, each tagged with its ``node``."""
    out = []
    facts = host_facts(hostvars, hosts, name)
    for host in sorted(facts):
        for att in facts[host] or []:
            if isinstance(att, dict):
                att = dict(att)
                att.setdefault("node", host)
                out.append(att)
    return out


def _accept_length(cand, tau, top):
    """The accept length ``cand`` would have at the acceptance ``top`` measured (chain drafts;
    a tree keeps the figure as measured)."""
    if cand.get("topk") == 1 and top.get("topk") == 1 and top.get("draft_tokens", 0) > 1:
        return chain_tau(cand["draft_tokens"] - 1, alpha_of(top["draft_tokens"] - 1, tau))
    return tau


def _belief(spec):
    def believe(attempts, nxt):
        key = nxt["candidate"]["key"]
        if any((a.get("key") or candidate_key(a["candidate"])) == key for a in attempts):
            return None  # a repeat (fit, re-measurement, completion): its earlier figures stand
        top = mtp_tune_pick_best(attempts, spec)["top"]
        if top is None:
            return None
        return believed(nxt, deciding_attempts(attempts)[top["key"]], _accept_length)
    return believe


def pool_next(pool, hosts, host, candidates, fit_ladder=None, spec=None, complete=False):
    """This round of a pool: the launch of ``host`` and whether the pool goes on.

    ``pool``: every node's attempts (``pool_attempts``); ``hosts``: the nodes taking part now;
    ``complete``: whether the run completes the winner and its ties at every level after the
    search (mtp_tune_search_levels=judged). The search's round comes first, then the completing
    launches, each spread over the nodes in node order.

    Returns ``{"launch": proposal|None, "more": bool, "round": int, "labels": [str]}``; ``launch``
    carries ``node`` and ``round`` for its attempt record; ``more`` is false once no node has
    anything left to launch.
    """
    spec = spec_from(spec)
    hosts = sorted(hosts or [])
    pool = list(pool or [])
    batch = next_batch(lambda atts: tune_next(atts, candidates, fit_ladder, spec, pooled=True),
                       pool, len(hosts), spec.max_launches, _belief(spec))
    if not batch and complete:
        batch = next_batch(lambda atts: mtp_tune_complete(atts, spec), pool, len(hosts), spec.max_launches)
    rnd = max([int(a.get("round") or 0) for a in pool] + [0]) + 1
    launch = assign(batch, hosts, host)
    if launch is not None:
        launch = dict(launch, node=host, round=rnd)
    return {"launch": launch, "more": bool(batch), "round": rnd, "labels": [b.get("label") for b in batch]}


# --------------------------------------------------------------------------- the role's filters

def mtp_tune_pool_identity(gpus, workload=None, settings=None):
    """What a node says of itself for the pool's check: GPUs, workload fingerprint, settings."""
    if gpus is not None and not isinstance(gpus, dict):
        raise AnsibleFilterError("mtp_tune_pool_identity takes gpu_info's result (a dict), got %r" % (gpus,))
    return identity(gpus, workload, settings)


def mtp_tune_pool_problems(hosts, hostvars, name="_mtp_tune_pool_identity"):
    """Why the nodes ``hosts`` cannot tune together (empty: they can), from each one's identity."""
    return pool_problems(host_facts(hostvars, hosts, name))


def mtp_tune_pool_attempts(hostvars, hosts):
    """Every node's attempts in one list, in node order, each tagged with its node."""
    return pool_attempts(hostvars, hosts)


def mtp_tune_pool_next(pool, hosts, host, candidates, fit_ladder=None, spec=None, complete=False):
    """This round's launch for ``host`` and whether the pool goes on (see pool_next)."""
    if not isinstance(hosts, (list, tuple)) or host not in hosts:
        raise AnsibleFilterError("mtp_tune_pool_next: %r is not among the pool's nodes %r" % (host, hosts))
    return pool_next(pool, hosts, host, candidates, fit_ladder, spec, complete)
