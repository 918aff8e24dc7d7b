"""The greedy-output check of a lever that can change numerics (plugins/plugin_utils/mtp_numerics.py):
what it counts, where it says a prompt diverged, and the answers it refuses to compare."""

import copy

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.blackwell.sglang.plugins.filter.mtp_tune import FilterModule
from ansible_collections.blackwell.sglang.plugins.plugin_utils.mtp_numerics import mtp_tune_greedy_compare as compare


def answer(ids_per_prompt, max_new=8, text=True, ids=True):
    """An sglang_greedy result for these output ids (prompt i's sha1 is "p<i>")."""
    outs = []
    for i, out in enumerate(ids_per_prompt):
        entry = {"index": i, "prompt_sha1": "p%d" % i}
        if ids:
            entry["output_ids"] = list(out)
        if text:
            entry["text"] = " ".join("w%d" % t for t in out)
        outs.append(entry)
    return {"outputs": outs, "max_new_tokens": max_new, "digest": "x"}


REF = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]


def test_identical_answers_are_ok():
    got = compare(answer(REF), answer(copy.deepcopy(REF)))
    assert got == {"checked": True, "differ": 0, "of": 3, "first_divergence": [], "ok": True,
                   "compared": "output_ids"}


def test_counts_differing_prompts_and_where_they_diverge():
    other = [[1, 2, 3, 4], [5, 6, 70, 80], [9, 10, 11]]  # prompt 2 stopped one token early
    got = compare(answer(REF), answer(other))
    assert got["ok"] is False and got["differ"] == 2 and got["of"] == 3
    assert got["first_divergence"] == [{"index": 1, "token": 2}, {"index": 2, "token": 3}]


def test_bare_outputs_lists_compare_too():
    got = compare(answer(REF)["outputs"], answer([[1, 2, 3, 4], [5, 0, 7, 8], [9, 10, 11, 12]])["outputs"])
    assert (got["differ"], got["first_divergence"]) == (1, [{"index": 1, "token": 1}])


def test_text_when_a_side_has_no_token_ids():
    other = [[1, 2, 3, 4], [5, 6, 7, 9], [9, 10, 11, 12]]
    got = compare(answer(REF), answer(other, ids=False))
    assert got["compared"] == "text" and got["differ"] == 1
    ref_text = answer(REF)["outputs"][1]["text"]
    assert got["first_divergence"] == [{"index": 1, "token": None, "char": len(ref_text) - 1}]
    assert compare(answer(REF, ids=False), answer(REF, ids=False))["ok"] is True


@pytest.mark.parametrize("ref,out,needle", [
    (answer(REF), answer(REF[:2]), "answers prompts [0, 1, 2] and the outputs [0, 1]"),
    (answer(REF), answer(REF, max_new=16), "max_new_tokens=8 and the outputs 16"),
    (answer(REF), {"outputs": [dict(e, prompt_sha1="q") if e["index"] == 1 else e
                               for e in answer(REF)["outputs"]]}, "prompt 1 of the outputs is not the reference's"),
    (answer(REF), {"outputs": []}, "outputs holds no outputs"),
    ({"levels": []}, answer(REF), "reference is a dict without `outputs`"),
    ("abc", answer(REF), "reference must be the result of blackwell.sglang.sglang_greedy"),
    (answer(REF), {"outputs": [{"index": 0}, {"index": 0}]}, "outputs has prompt index 0 twice"),
    (answer(REF), {"outputs": [{"output_ids": [1]}]}, "outputs[0] must be a dict with an integer `index`"),
    (answer(REF), answer(REF, ids=False, text=False), "neither `output_ids` nor `text`"),
])
def test_refuses_answers_to_other_prompts(ref, out, needle):
    with pytest.raises(AnsibleFilterError) as err:
        compare(ref, out)
    assert needle in str(err.value)


def test_the_attempt_record_uses_it():
    # the verdict is taken inside mtp_tune_attempt (no role YAML calls it), so it is not a filter
    from ansible_collections.blackwell.sglang.plugins.plugin_utils import mtp_record
    assert mtp_record.mtp_tune_greedy_compare is compare
    assert "mtp_tune_greedy_compare" not in FilterModule().filters()
