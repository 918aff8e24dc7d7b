"""sglang_bench against LLMock (PyPI `llmock`, pinned in requirements-dev.txt), an
OpenAI-compatible mock server written by others: chat streaming with a set first-token latency
and chunk delay, injected HTTP errors, text that ignores max_tokens, usage only at the end.

LLMock serves chat only (no /v1/completions, no /generate), so these tests use endpoint=chat."""

import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from loopback import free_port

from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_runner as runner

LLMOCK = shutil.which("llmock", path=str(Path(sys.executable).parent)) or shutil.which("llmock")
if LLMOCK is None:
    pytest.skip("llmock is not installed in this venv: .venv/bin/python -m pip install -r "
                "requirements-dev.txt", allow_module_level=True)


@pytest.fixture
def llmock(tmp_path):
    procs = []

    def start(*extra):
        port = free_port()
        log = open(tmp_path / ("llmock-%d.log" % port), "wb")
        proc = subprocess.Popen([LLMOCK, "serve", "--host", "127.0.0.1", "--port", str(port),
                                 "--log-level", "warning"] + list(extra),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(proc)
        url = "http://127.0.0.1:%d" % port
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(url + "/health", timeout=1):
                    return url
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(0.2)
        pytest.fail("llmock did not start: %s" % (tmp_path / ("llmock-%d.log" % port)).read_text())
    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _run(url, **kw):
    cfg = {"url": url, "endpoint": "chat", "concurrency": [1, 4], "num_prompts": 8,
           "input_len": 80, "output_len": 24, "timeout": 30}
    cfg.update(kw)
    return runner.run_benchmark(cfg)


def test_timing_and_calibration_against_llmock(llmock):
    url = llmock("--latency-ms", "40", "--stream-chunk-delay-ms", "10")
    res = _run(url)
    wl = res["workload"]
    assert wl["prompt_format"] == "text" and wl["calibration"], wl
    for lv in res["levels"]:
        assert lv["completed"] == 8 and lv["failed"] == 0, lv["errors"]
        # its delay is added before each chunk after the first; the first waits the latency
        assert lv["ttft_ms"]["p50"] >= 40
        assert 10 <= lv["chunk_gap_ms"]["p50"] <= 40
        # its usage estimate of our prompt, after calibration, close to input_len
        assert abs(lv["prompt_tokens_per_request"] - 80) <= 8, lv["prompt_tokens_per_request"]


def test_llmock_text_ignores_max_tokens_and_is_reported(llmock):
    url = llmock("--response-style", "static")
    res = _run(url, output_len=200, concurrency=[2])
    lv = res["levels"][0]
    assert lv["completed"] == 8
    assert lv["output_tokens_per_request"] < 200 and lv["ended_short"] is True
    assert any("ended short of the asked output length" in w for w in res["warnings"])


def test_llmock_injected_errors_are_grouped(llmock):
    url = llmock("--error-rate", "500=0.5")
    res = _run(url, num_prompts=24, concurrency=[4], max_failure_rate=0.1)
    lv = res["levels"][0]
    assert 0 < lv["failed"] < 24
    assert [g["status"] for g in lv["error_groups"]] == [500]
    assert lv["error_groups"][0]["count"] == lv["failed"]
    assert lv["failure_rate_exceeded"] is True
    assert any("above max_failure_rate 10.0%" in w for w in res["warnings"])


def test_llmock_failing_everything_fails_the_level(llmock):
    url = llmock("--error-rate", "503=1.0")
    with pytest.raises(runner.BenchError) as exc:
        _run(url, concurrency=[2, 4])
    assert "no request completed at concurrency 2" in str(exc.value)
    assert "HTTP 503" in str(exc.value)
