#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_greedy
short_description: Ask a local SGLang server fixed prompts greedily and return the exact outputs
version_added: "1.0.0"
description:
  - Sends fixed prompts, one at a time, to the server's native C(/generate) on the node (its loopback address by
    default) with C(temperature=0), O(max_new_tokens) and C(ignore_eos=false), and returns each output's token ids
    and text, with a digest of them all.
  - Greedy output is a function of the prompt on a correct server, whatever the batch, the draft depth or the
    launch. Two answers of this module to the same prompts, one from a launch without a setting that can change
    numerics (such as C(--enable-linear-replayssm-spec)) and one with it, tell whether the setting kept the model's
    output; P(blackwell.sglang.mtp_tune_greedy_compare#filter) compares them.
  - The built-in prompts are the same on every run (short English text, so they work with any model's tokenizer);
    O(prompts) gives others.
  - Works against any server with SGLang's C(/generate). A server whose answer has no C(output_ids) gets
    RV(outputs[].output_ids=null); its outputs are then compared by text (RV(digest_of=text)).
  - Any error (no connection, an HTTP error, an answer that is not C(/generate)'s) fails the task with a message
    naming the prompt and the cause, and returns no RV(outputs) (only how many prompts were answered before,
    C(answered)); nothing is retried.
  - Never changes anything on the node, so it always reports RV(ignore:changed=false).
options:
  url:
    description: Base URL of the server as seen from the node. Only C(http://) is supported.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: The server's C(--api-key), sent as a bearer token. Never logged or returned.
    type: str
  num_prompts:
    description:
      - How many of the built-in prompts to send (the first O(num_prompts) of 16).
      - Ignored when O(prompts) is given.
    type: int
    default: 8
  prompts:
    description:
      - Prompts to send instead of the built-in ones, in this order. Each is a string (sent as C(text)) or a
        list of token ids (sent as C(input_ids)).
    type: list
    elements: raw
  max_new_tokens:
    description: Output tokens asked per prompt (C(max_new_tokens)); an output may end earlier at end-of-sequence.
    type: int
    default: 32
  timeout:
    description: Seconds each request may take, connection included.
    type: float
    default: 120
extends_documentation_fragment:
  - blackwell.sglang.attributes
  - blackwell.sglang.api_key
  - blackwell.sglang.attributes.info_module
author:
  - blackwell.sglang maintainers (@blackwell)
seealso:
  - plugin: blackwell.sglang.mtp_tune_greedy_compare
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Greedy outputs of the running server (the reference)
  blackwell.sglang.sglang_greedy:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_service_api_key | default(omit) }}"
  register: greedy_reference

- name: The same prompts after a restart with the lever
  blackwell.sglang.sglang_greedy:
    url: http://127.0.0.1:30000
  register: greedy_with_lever

- name: Refuse the lever when any output changed
  ansible.builtin.assert:
    that: numerics.ok
    fail_msg: "{{ numerics.differ }} of {{ numerics.of }} greedy outputs changed"
  vars:
    numerics: "{{ greedy_reference | blackwell.sglang.mtp_tune_greedy_compare(greedy_with_lever) }}"
"""

RETURN = r"""
outputs:
  description: One entry per prompt, in the order sent.
  returned: success
  type: list
  elements: dict
  contains:
    index:
      description: The prompt's position (0-based).
      type: int
    prompt_sha1:
      description: SHA-1 of the prompt as sent (C({"text"...}) or C({"input_ids"...}) as canonical JSON).
      type: str
    output_ids:
      description: The output token ids (end-of-sequence included where the server returns it); V(null) when
        the server's answer has none.
      type: list
      elements: int
    text:
      description: The output text.
      type: str
    finish_reason:
      description: C(meta_info.finish_reason.type) of the answer (V(length), V(stop)), V(null) when absent.
      type: str
  sample:
    - {"index": 0, "prompt_sha1": "5f0c...", "output_ids": [27, 4080, 311], "text": " The sky", "finish_reason": "length"}
digest:
  description: SHA-1 of every output's token ids in order (of the texts when an answer had no ids, see RV(digest_of)).
  returned: success
  type: str
digest_of:
  description: V(output_ids) or V(text), what RV(digest) covers.
  returned: success
  type: str
max_new_tokens:
  description: O(max_new_tokens) as asked (the check compares only answers asked alike).
  returned: success
  type: int
prompt_source:
  description: V(builtin) or V(given) (O(prompts)).
  returned: success
  type: str
"""

import asyncio
import hashlib
import json
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_api_key
from ansible_collections.blackwell.sglang.plugins.module_utils.sglang_transport import Client, ClientError

# Fixed on purpose: a check compares two runs' answers to these exact prompts. Plain text, so every tokenizer
# reads them; varied, so the outputs are unlike each other.
BUILTIN_PROMPTS = (
    "The capital of France is",
    "Write a Python function that returns the n-th Fibonacci number.",
    "List three prime numbers greater than 100 and explain why each is prime.",
    "Translate into German: The train leaves at seven in the morning.",
    "Summarize in one sentence why the sky is blue.",
    "Q: A farmer has 17 sheep and all but 9 run away. How many are left?\nA:",
    "Once upon a time, in a village at the edge of a forest,",
    "Explain the difference between TCP and UDP to a new engineer.",
    "def quicksort(arr):\n",
    "The three laws of thermodynamics are",
    "Give a recipe for a simple tomato soup.",
    "What is 37 multiplied by 43? Show the steps.",
    "Describe the water cycle for a ten-year-old.",
    "SELECT name, COUNT(*) FROM orders GROUP BY",
    "Write a haiku about autumn rain.",
    "In 1969, the first humans to walk on the Moon",
)
ERROR_BODY_CHARS = 300


def _prompt_field(module, pos, prompt):
    """(field, value) to send for one given prompt, or fail_json naming what is wrong."""
    if isinstance(prompt, str):
        if not prompt:
            module.fail_json(msg="prompts[%d] is an empty string; give text or a list of token ids" % pos)
        return "text", prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                   for t in prompt):
        return "input_ids", prompt
    module.fail_json(msg="prompts[%d] must be a non-empty string or a non-empty list of token ids (integers >= 0); "
                         "got %s" % (pos, json.dumps(prompt)[:80]))
    return None  # not reached


def _sha1(obj):
    return hashlib.sha1(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def _answer(status, body):
    """The /generate answer as a dict, or a one-line reason it is not one."""
    if status != 200:
        text = body.decode("utf-8", "replace").strip().replace("\n", " ")
        return None, "HTTP %s: %s" % (status, text[:ERROR_BODY_CHARS] or "(empty body)")
    try:
        obj = json.loads(body)
    except ValueError:
        return None, "the answer is not JSON: %s" % body[:80]
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        return None, ("the answer has no `text`, so it is not SGLang's native /generate (%s)"
                      % json.dumps(obj)[:120])
    return obj, None


def _entry(index, sha1, obj):
    ids = obj.get("output_ids")
    if not (isinstance(ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in ids)):
        ids = None
    finish = (obj.get("meta_info") or {}).get("finish_reason") if isinstance(obj.get("meta_info"), dict) else None
    return {"index": index, "prompt_sha1": sha1, "output_ids": ids, "text": obj["text"],
            "finish_reason": finish.get("type") if isinstance(finish, dict) else None}


async def _ask_all(url, api_key, fields, max_new, timeout):
    """Every prompt in turn; returns (outputs, None) or (outputs so far, error message)."""
    client = Client(url, api_key=api_key, timeout=timeout)
    outputs = []
    try:
        for index, (field, value) in enumerate(fields):
            payload = {field: value, "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new,
                                                         "ignore_eos": False}}
            try:
                status, dummy, body = await client.request("POST", "/generate", payload)
            except ClientError as exc:
                return outputs, "prompt %d: %s" % (index, exc)
            obj, why = _answer(status, body)
            if obj is None:
                hint = " (the server has no /generate; sglang_greedy needs SGLang's native API)" if status == 404 else ""
                return outputs, "prompt %d: POST /generate answered %s%s" % (index, why, hint)
            outputs.append(_entry(index, _sha1({field: value}), obj))
    finally:
        client.close()
    return outputs, None


def _digest(outputs):
    if all(o["output_ids"] is not None for o in outputs):
        return _sha1([o["output_ids"] for o in outputs]), "output_ids"
    return _sha1([o["text"] for o in outputs]), "text"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            api_key=dict(type="str", no_log=True),
            api_key_file=dict(type="path"),
            num_prompts=dict(type="int", default=8),
            prompts=dict(type="list", elements="raw"),
            max_new_tokens=dict(type="int", default=32, no_log=False),
            timeout=dict(type="float", default=120.0),
        ),
        mutually_exclusive=[["api_key", "api_key_file"]],
        supports_check_mode=True,
    )
    p = module.params
    key_error = sglang_api_key.resolve(p, module)
    if key_error:
        module.fail_json(msg=key_error)
    if not p["url"].startswith("http://"):
        module.fail_json(msg="url must start with http:// (got %r); sglang_greedy talks to the server on the node"
                             % p["url"])
    if p["max_new_tokens"] < 1:
        module.fail_json(msg="max_new_tokens must be >= 1; got %s" % p["max_new_tokens"])
    if p["timeout"] <= 0:
        module.fail_json(msg="timeout must be > 0; got %s" % p["timeout"])
    if p["prompts"] is not None:
        if not p["prompts"]:
            module.fail_json(msg="prompts is empty; give at least one prompt or leave it out for the built-in ones")
        fields = [_prompt_field(module, pos, prompt) for pos, prompt in enumerate(p["prompts"])]
        source = "given"
    else:
        if not 1 <= p["num_prompts"] <= len(BUILTIN_PROMPTS):
            module.fail_json(msg="num_prompts must be within 1..%d (the built-in prompts); got %s; give more with "
                                 "prompts" % (len(BUILTIN_PROMPTS), p["num_prompts"]))
        fields = [("text", t) for t in BUILTIN_PROMPTS[:p["num_prompts"]]]
        source = "builtin"
    try:
        outputs, error = asyncio.run(_ask_all(p["url"], p["api_key"], fields, p["max_new_tokens"], p["timeout"]))
    except ClientError as exc:  # a URL the client cannot use
        module.fail_json(msg="sglang_greedy: %s" % exc)
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg="sglang_greedy failed unexpectedly (%s: %s); please report it with the exception "
                             "shown by -vvv" % (type(exc).__name__, exc), exception=traceback.format_exc())
    if error is not None:
        # no `outputs` on failure: a caller that ignores the error must not take a partial answer for one
        module.fail_json(msg="sglang_greedy at %s: %s" % (p["url"], error), answered=len(outputs))
    digest, digest_of = _digest(outputs)
    module.exit_json(changed=False, outputs=outputs, digest=digest, digest_of=digest_of,
                     max_new_tokens=p["max_new_tokens"], prompt_source=source)


if __name__ == "__main__":
    main()
