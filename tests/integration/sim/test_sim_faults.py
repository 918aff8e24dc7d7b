"""The production faults: a wedged server and orphans that keep the port."""

import asyncio
import os
import signal
import socket
import time

from _simharness import SPEC3, alive, request, run, state_pids


def _generate(port, timeout):
    params = {"max_new_tokens": 4, "temperature": 0.0, "ignore_eos": True}
    body = {"text": "hello", "sampling_params": params}
    try:
        return run(asyncio.wait_for(request(port, "POST", "/generate", body), timeout))[0]
    except asyncio.TimeoutError:
        return None


def test_wedge_answers_health_but_produces_no_tokens(start_sim):
    sim = start_sim(SPEC3, env={"SGLANG_SIM_WEDGE_AFTER": "20",
                                "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0"}).wait_ready()
    assert _generate(sim.port, 5) == 200  # before the wedge (20 sim s = 1 s wall)
    time.sleep(1.5)
    assert run(request(sim.port, "GET", "/health"))[0] == 200
    assert _generate(sim.port, 2) is None  # no token, no answer
    assert sim.proc.poll() is None
    # SGLang's generating health check (the default) does notice it.
    assert run(request(sim.port, "GET", "/health_generate"))[0] == 503


def test_no_wedge_by_default(start_sim):
    sim = start_sim(SPEC3).wait_ready()
    time.sleep(1.5)
    assert _generate(sim.port, 5) == 200


def _bind(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_orphans_keep_the_port(start_sim):
    first = start_sim(SPEC3, env={"SGLANG_SIM_ORPHANS": "1",
                                  "SGLANG_SIM_ORPHANS_KEEP_PORT": "1"}).wait_ready()
    assert _generate(first.port, 5) == 200
    orphans = set(state_pids(first.tmp)) | first.known_children
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    try:
        time.sleep(0.3)
        assert not _bind(first.port)  # the detokenizer still holds the listening socket
        second = start_sim(SPEC3, port=first.port, subdir="second",
                           env={"SGLANG_SIM_STATE_DIR": str(first.tmp / "state-2")})
        assert second.wait_exit() != 0
        assert "error while attempting to bind on address" in second.output
        assert "address already in use" in second.output
    finally:
        for pid in orphans:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    time.sleep(0.3)
    assert _bind(first.port)


def test_port_is_refused_while_loading_with_the_port_fault(start_sim):
    sim = start_sim(SPEC3, env={"SGLANG_SIM_ORPHANS": "1", "SGLANG_SIM_ORPHANS_KEEP_PORT": "1",
                                "SGLANG_SIM_LOAD_SECONDS": "20"})
    time.sleep(0.3)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", sim.port)) != 0
    sim.wait_ready()
    assert _generate(sim.port, 5) == 200


def _guard():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[3] / "roles" / "service" / "files" / "sglang_unit_guard.py"
    spec = importlib.util.spec_from_file_location("sglang_unit_guard", str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_watchdogs_probe_tells_a_wedge_from_a_server(start_sim, tmp_path):
    guard = _guard()
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text('api-key: "k-123"\n')
    key = guard.read_api_key(str(secrets))
    sim = start_sim(SPEC3 + ["--api-key", key],
                    env={"SGLANG_SIM_WEDGE_AFTER": "20",
                         "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0"}).wait_ready()
    url = "http://127.0.0.1:%d" % sim.port
    assert guard.probe_tokens(url, key, 4, 5) == (True, 4)
    assert guard.probe_tokens(url, "wrong", 4, 5) == (True, -401)  # answered: a refusal, not a wedge
    time.sleep(1.5)
    t0 = time.time()
    assert guard.probe_tokens(url, key, 4, 1.0) == (True, 0)
    assert time.time() - t0 < 3  # bounded by the deadline
