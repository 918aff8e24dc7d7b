"""sglang_bench through a real ansible-playbook run (action plugin + module) against the fake
SGLang server: a controller-side JSONL dataset, a bad one, and check mode."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench"))
from fake_sglang import FakeServerThread  # noqa: E402

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Benchmark on a dataset that lives on the controller
      blackwell.sglang.sglang_bench:
        url: "{url}"
        dataset: prompts.jsonl
        dataset_src: controller
        concurrency: [2]
        num_prompts: 4
        output_len: 7
      register: r
    - name: Check what came back
      ansible.builtin.assert:
        that:
          - r.levels[0].completed == 4
          - r.levels[0].failed == 0
          - r.config.dataset_prompts == 2
          - r.config.ignore_eos == false
          - ansible_facts.sglang_bench['2'].total_output_tokens == 12 + 7 + 12 + 7
          - r is not changed
    - name: A controller dataset that is not JSONL
      blackwell.sglang.sglang_bench:
        url: "{url}"
        dataset: bad.jsonl
        dataset_src: controller
      register: b
      ignore_errors: true
    - name: It fails with the line number
      ansible.builtin.assert:
        that: [b is failed, "'line 2 is not valid JSON' in b.msg"]
    - name: A controller dataset that does not exist
      blackwell.sglang.sglang_bench:
        url: "{url}"
        dataset: missing.jsonl
        dataset_src: controller
      register: m
      ignore_errors: true
    - name: It fails saying so
      ansible.builtin.assert:
        that: [m is failed, "'not found on the controller' in m.msg"]
    - name: Check mode sends nothing
      blackwell.sglang.sglang_bench:
        url: "{url}"
        dataset: prompts.jsonl
        dataset_src: controller
      check_mode: true
      register: c
    - name: It reports the plan
      ansible.builtin.assert:
        that: [c.would_run.levels | length == 6, c is not changed]
"""


def test_playbook_with_controller_dataset(tmp_path):
    playbook = ROOT / ".venv" / "bin" / "ansible-playbook"
    if not playbook.exists():
        pytest.skip("no controller venv at .venv (make venv)")
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "prompts.jsonl").write_text(
        '{"prompt": "fix the failing test", "output_len": 12}\n"explain this diff"\n')
    (tmp_path / "files" / "bad.jsonl").write_text('"ok"\n{broken\n')
    with FakeServerThread(tokens_per_chunk=3) as f:
        (tmp_path / "pb.yml").write_text(textwrap.dedent(PLAYBOOK.format(url=f.url)))
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
                   ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
                   ANSIBLE_NOCOLOR="1")
        r = subprocess.run([str(playbook), "pb.yml"],
                           cwd=str(tmp_path), capture_output=True, text=True, env=env,
                           timeout=300, check=False)
        sent = f.fake.requests
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "failed=0" in r.stdout and "ignored=2" in r.stdout
    # warmup 2 + 4 measured; nothing in check mode or for the failed datasets
    assert sent == 6
