# -*- coding: utf-8 -*-
# Copyright: blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Note that this plugin util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""Whether a lever that can change numerics kept the model's greedy output.

``--enable-linear-replayssm-spec`` rebuilds the linear-attention state of a verify by replay instead of
reading stored per-draft-token states: exact in exact arithmetic, not necessarily bit for bit. Greedy
output (temperature 0) is a function of the prompt on a correct server, so the tuner asks the same
prompts with and without the lever (module ``sglang_greedy``) and adopts it only when nothing differs.
This is the comparison; the role only passes the two answers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_settings import AnsibleFilterError


def _entries(value, name):
    """(entries by index, max_new_tokens or None) of sglang_greedy's result or its outputs list."""
    max_new = None
    if isinstance(value, dict):
        if "outputs" not in value:
            raise AnsibleFilterError("mtp_tune_greedy_compare: %s is a dict without `outputs`; pass the result "
                                     "of blackwell.sglang.sglang_greedy or its `outputs` list" % name)
        max_new = value.get("max_new_tokens")
        value = value["outputs"]
    if not isinstance(value, list):
        raise AnsibleFilterError("mtp_tune_greedy_compare: %s must be the result of blackwell.sglang.sglang_greedy "
                                 "or its `outputs` list, got %s" % (name, type(value).__name__))
    if not value:
        raise AnsibleFilterError("mtp_tune_greedy_compare: %s holds no outputs; a check of no prompt checks "
                                 "nothing" % name)
    out = {}
    for pos, entry in enumerate(value):
        if not isinstance(entry, dict) or isinstance(entry.get("index"), bool) \
                or not isinstance(entry.get("index"), int):
            raise AnsibleFilterError("mtp_tune_greedy_compare: %s[%d] must be a dict with an integer `index` "
                                     "(sglang_greedy's outputs), got %r" % (name, pos, entry))
        if entry["index"] in out:
            raise AnsibleFilterError("mtp_tune_greedy_compare: %s has prompt index %d twice"
                                     % (name, entry["index"]))
        out[entry["index"]] = entry
    return out, max_new


def _same_prompts(ref, got, ref_max, got_max):
    if ref_max is not None and got_max is not None and ref_max != got_max:
        raise AnsibleFilterError("mtp_tune_greedy_compare: the reference asked max_new_tokens=%s and the outputs "
                                 "%s; ask both with the same sglang_greedy options" % (ref_max, got_max))
    if set(ref) != set(got):
        raise AnsibleFilterError("mtp_tune_greedy_compare: the reference answers prompts %s and the outputs %s; "
                                 "ask both with the same sglang_greedy prompts"
                                 % (sorted(ref), sorted(got)))
    other = sorted(i for i in ref if ref[i].get("prompt_sha1") and got[i].get("prompt_sha1")
                   and ref[i]["prompt_sha1"] != got[i]["prompt_sha1"])
    if other:
        raise AnsibleFilterError("mtp_tune_greedy_compare: prompt %s of the outputs is not the reference's "
                                 "(prompt_sha1 differs); ask both with the same sglang_greedy prompts"
                                 % ", ".join(str(i) for i in other))


def _basis(ref, got):
    """Token ids where both sides have them (a server may leave them out), else the text."""
    both = list(ref.values()) + list(got.values())
    if all(isinstance(e.get("output_ids"), list) for e in both):
        return "output_ids"
    if all(isinstance(e.get("text"), str) for e in both):
        return "text"
    raise AnsibleFilterError("mtp_tune_greedy_compare: some outputs have neither `output_ids` nor `text`; "
                             "pass sglang_greedy's results unchanged")


def _first_difference(a, b):
    for pos, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return pos
    return min(len(a), len(b))


def mtp_tune_greedy_compare(reference, outputs):
    """Compare two answers to the same greedy prompts: the reference (without the lever) and the
    outputs (with it).

    Returns ``{"checked": True, "differ": n, "of": N, "first_divergence": [{"index", "token"}...],
    "ok": n == 0, "compared": "output_ids"|"text"}``; ``token`` is the first output position that
    differs (``None`` when only text was compared; ``char`` then gives the first differing character).
    Raises AnsibleFilterError for answers of different prompts or requests.
    """
    ref, ref_max = _entries(reference, "reference")
    got, got_max = _entries(outputs, "outputs")
    _same_prompts(ref, got, ref_max, got_max)
    basis = _basis(ref, got)
    diverged = []
    for index in sorted(ref):
        a, b = ref[index][basis], got[index][basis]
        if a == b:
            continue
        pos = _first_difference(a, b)
        if basis == "output_ids":
            diverged.append({"index": index, "token": pos})
        else:
            diverged.append({"index": index, "token": None, "char": pos})
    return {"checked": True, "differ": len(diverged), "of": len(ref), "first_divergence": diverged,
            "ok": not diverged, "compared": basis}
