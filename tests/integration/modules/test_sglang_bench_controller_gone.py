"""sglang_bench stops when the ansible-playbook that started it is killed (the local
connection: an ancestor of the module exits), instead of benchmarking for nobody; and it stops
at its deadline with a message while the controller still waits."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench"))
from fake_sglang import FakeServerThread  # noqa: E402

# Each request streams 2000 tokens one per 50 ms: far longer than any wait below.
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: A benchmark that would run for minutes
      blackwell.sglang.sglang_bench:
        url: "{url}"
        concurrency: [2]
        num_prompts: 4
        warmup: 0
        output_len: 2000
        timeout: 600
        deadline: {deadline}
"""


def _module_pids(marker):
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmd and "AnsiballZ_sglang_bench" in cmd:
            out.append(int(name))
    return out


def _run(tmp_path, url, deadline):
    playbook = ROOT / ".venv" / "bin" / "ansible-playbook"
    if not playbook.exists():
        pytest.skip("no controller venv at .venv (make venv)")
    (tmp_path / "pb.yml").write_text(textwrap.dedent(PLAYBOOK.format(url=url, deadline=deadline)))
    remote_tmp = tmp_path / "remote-tmp"  # names the module's file, so only this test's module is found
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_NOCOLOR="1", ANSIBLE_PIPELINING="0", ANSIBLE_REMOTE_TMP=str(remote_tmp),
               ANSIBLE_KEEP_REMOTE_FILES="0")
    proc = subprocess.Popen([str(playbook), "pb.yml"], cwd=str(tmp_path), env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, str(remote_tmp)


def _wait_for(pred, timeout):
    end = time.time() + timeout
    while time.time() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    return None


def test_module_stops_when_the_controller_is_killed(tmp_path):
    with FakeServerThread(tokens_per_chunk=1, chunk_gap=0.05) as f:
        proc, marker = _run(tmp_path, f.url, 600)
        try:
            pids = _wait_for(lambda: _module_pids(marker) if f.fake.requests >= 2 else None, 120)
            assert pids, "the benchmark never started"
            os.kill(proc.pid, signal.SIGKILL)  # only ansible-playbook itself, as a crash would
            proc.wait(timeout=10)
            t0 = time.time()
            gone = _wait_for(lambda: not _module_pids(marker), 10)
            took = time.time() - t0
            assert gone, "the benchmark kept running after its controller was killed"
            assert took < 5
            print("benchmark ended %.1f s after its controller was killed" % took)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the session this test started (orphaned worker)
            except ProcessLookupError:
                pass


def test_module_stops_at_its_deadline_and_says_so(tmp_path):
    with FakeServerThread(tokens_per_chunk=1, chunk_gap=0.05) as f:
        t0 = time.time()
        proc, _marker = _run(tmp_path, f.url, 2)
        out, _err = proc.communicate(timeout=120)
        took = time.time() - t0
    assert proc.returncode != 0
    assert "sglang_bench stopped: it ran past its deadline of 2.0 s" in out, out[-3000:]
    assert "Traceback" not in out
    assert took < 60
