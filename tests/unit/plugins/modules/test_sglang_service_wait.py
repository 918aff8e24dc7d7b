"""The wait loop of sglang_service_wait against a scripted systemd, journal and HTTP server,
with a fake clock (no real sleeps), plus the module entry point's input checks."""

import json

import pytest

from ansible_collections.blackwell.sglang.plugins.modules import sglang_service_wait as m

PARAMS = {
    "unit": "sglang-qwen",
    "base_url": "http://127.0.0.1:30000",
    "api_key": None,
    "timeout": 600,
    "interval": 2.0,
    "request_timeout": 30.0,
    "probe_generate": True,
    "probe_max_new_tokens": 4,
    "max_restarts": 0,
    "journal_lines": 5,
    "fail_on_error": True,
    "since": None,
}

T0 = 1764687600  # 2025-12-02T15:00:00Z; the k-th invocation in a FakeNode journal starts at T0 + 10 k

KV_LINES = [
    "2026-12-02T15:00:00+0000 n python[7]: Load weight end. elapsed=1.0 s, avail mem=33.80 GB",
    "2026-12-02T15:00:01+0000 n python[7]: RuntimeError: Not enough memory. Please try to increase "
    "--mem-fraction-static.",
    "2026-12-02T15:00:01+0000 n python[7]: Received sigquit from a child process. It usually means the child failed.",
]


class Clock:
    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


class FakeNode:
    """states: list of dicts for successive `systemctl show` calls (the last one repeats).
    journal: invocation id -> lines, or a list of successive snapshots of lines. health: list of statuses per probe (last repeats)."""

    def __init__(self, states, journal=None, health=(200,), tokens=4, unit_journal=None):
        self.states = list(states)
        self.journal = journal or {}
        self.unit_journal = unit_journal or []
        self.health = list(health)
        self.tokens = tokens
        self.calls = []
        self.requests = []

    def run(self, argv):
        self.calls.append(argv)
        if argv[:2] == ["systemctl", "show"]:
            state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            props = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": "0",
                     "ExecMainPID": "7", "ExecMainStatus": "0", "InvocationID": "inv1", "Result": "success"}
            props.update(state)
            return 0, "".join("%s=%s\n" % kv for kv in props.items()), ""
        if argv[0] == "journalctl":
            assert argv[argv.index("-o") + 1] == "json" and "-u" in argv
            out = []
            for k, (inv, got) in enumerate(self.journal.items()):
                if got and isinstance(got[0], list):  # successive snapshots, the last one repeats
                    got = got.pop(0) if len(got) > 1 else got[0]
                for i, line in enumerate(got):
                    out.append(json.dumps({"_SYSTEMD_INVOCATION_ID": inv, "MESSAGE": line, "_PID": "7",
                                           "SYSLOG_IDENTIFIER": "python", "_HOSTNAME": "n",
                                           "__REALTIME_TIMESTAMP": str((T0 + 10 * k) * 1000000 + i)}))
            n = int(argv[argv.index("-n") + 1])
            return 0, "\n".join(out[-n:]) + ("\n" if out else ""), ""
        raise AssertionError("unexpected command %r" % argv)

    def http(self, method, url, body, headers, timeout):
        self.requests.append((method, url, body, headers))
        if url.endswith("/health_generate"):
            status = self.health.pop(0) if len(self.health) > 1 else self.health[0]
            return status, "" if status else "connection refused"
        if url.endswith("/generate"):
            return 200, json.dumps({"text": " Paris", "meta_info": {"completion_tokens": self.tokens}})
        raise AssertionError(url)


def wait(node, **over):
    params = dict(PARAMS, **over)
    clock = Clock()
    waiter = m.Waiter(params, node.run, node.http, clock=clock, sleep=clock.sleep)
    return waiter.wait(), clock


def test_ready_after_loading():
    node = FakeNode([{}], health=[None, None, 503, 200])
    data, clock = wait(node)
    assert data["ready"] is True
    assert data["failure_class"] is None
    assert data["generated_tokens"] == 4
    assert data["seconds"] == pytest.approx(6.0)
    assert data["invocation_ids"] == ["inv1"]
    body = json.loads(node.requests[-1][2])
    assert body["sampling_params"]["max_new_tokens"] == 4 and body["sampling_params"]["ignore_eos"] is True


POOL_LINES = [
    "[2026-12-02 15:00:00] server_args=ServerArgs(model_path='/models/Qwen3.5-122B-A10B', ...)",
    "[2026-12-02 15:00:09 TP0] max_running_requests is capped to 10 by the mamba state cache (max_mamba_cache_size=51, "
    "5 state slots per request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or "
    "halve the state size with --mamba-ssm-dtype bfloat16.",
    "[2026-12-02 15:00:09 TP0] Mamba Cache is allocated. max_mamba_cache_size: 51, conv_state size: 0.13GB, "
    "ssm_state size: 7.31GB intermediate_ssm_state_cache size: 6.19GB intermediate_conv_window_cache size: 0.05GB ",
    "[2026-12-02 15:00:09 TP0] KV Cache is allocated. #tokens: 642365, K size: 7.96 GB, V size: 7.96 GB",
    "[2026-12-02 15:00:20 TP0] max_total_num_tokens=642365, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=10, context_len=262144, available_gpu_mem=9.00 GB",
]


def test_ready_returns_the_state_pool_of_the_current_invocation():
    old = [line.replace("51", "77") for line in POOL_LINES]
    node = FakeNode([{}], journal={"old": old, "inv1": POOL_LINES + ["filler"] * m.JOURNAL_SCAN_LINES})
    data, _clock = wait(node)
    assert data["ready"] is True
    assert data["pool"]["max_mamba_cache_size"] == 51 and data["pool"]["max_running_requests"] == 10
    assert data["pool"]["capped_by"] == "mamba" and data["pool"]["slots_per_request"] == 5
    assert data["pool"]["kv_tokens"] == 642365 and data["pool"]["kv_gb"] == pytest.approx(15.92)


def test_pool_is_empty_without_a_state_pool():
    data, _clock = wait(FakeNode([{}], journal={"inv1": ["Load weight end."]}))
    assert data["ready"] is True and data["pool"] == {}
    node = FakeNode([{"ActiveState": "activating", "SubState": "auto-restart"}],
                    journal={"inv1": KV_LINES}, health=[None])
    data, _clock = wait(node)
    assert data["failure_class"] == "oom_kv_cache" and data["pool"] == {}


def test_a_failed_start_after_its_pools_returns_them():
    lines = POOL_LINES[:-1] + ["[2026-12-02 15:00:12 TP0] Capture cuda graph failed: CUDA out of memory."]
    node = FakeNode([{"ActiveState": "failed", "Result": "exit-code"}], journal={"inv1": lines}, health=[None])
    data, _clock = wait(node)
    assert data["failure_class"] == "cuda_graph_capture"
    assert data["pool"]["max_mamba_cache_size"] == 51 and data["pool"]["max_running_requests"] == 10


def test_health_alone_is_not_ready_when_no_tokens_come():
    # The MTP verify hang: /health_generate says 200 but generate returns nothing useful.
    node = FakeNode([{}], health=[200], tokens=0)
    data, _clock = wait(node, timeout=20)
    assert data["ready"] is False
    assert data["failure_class"] == "timeout"
    assert "0 of 4 tokens" in data["msg"]


def test_probe_generate_off_trusts_health_generate():
    node = FakeNode([{}], health=[200], tokens=0)
    data, _clock = wait(node, probe_generate=False)
    assert data["ready"] is True
    assert not [r for r in node.requests if r[1].endswith("/generate")]


def test_api_key_is_sent_as_bearer():
    node = FakeNode([{}])
    wait(node, api_key="s3cret")
    assert node.requests[-1][3]["Authorization"] == "Bearer s3cret"


def test_fails_fast_on_auto_restart_with_kv_oom():
    node = FakeNode(
        [{}, {"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "1", "ExecMainStatus": "1",
              "Result": "exit-code"}],
        journal={"inv1": [[], KV_LINES]}, health=[None])
    data, clock = wait(node)
    assert data["ready"] is False
    assert data["failure_class"] == "oom_kv_cache"
    assert "Not enough memory" in data["failure_line"]
    assert [line.split(": ", 1)[1] for line in data["journal_tail"]] == KV_LINES
    assert all(line.startswith("2025-12-02T") and " n python[7]: " in line for line in data["journal_tail"])
    assert data["nrestarts"] == 1
    assert data["restarts_during_wait"] == 1
    assert clock.now - 1000.0 <= 2.0  # one poll interval, not the 600 s timeout
    assert "failure_class=oom_kv_cache" in data["msg"]


def test_fails_fast_on_fatal_journal_line_while_still_active():
    node = FakeNode([{}], journal={"inv1": KV_LINES}, health=[None])
    data, clock = wait(node)
    assert data["failure_class"] == "oom_kv_cache"
    assert "while the process still runs" in data["msg"]
    assert clock.sleeps == []


def test_nrestarts_growth_between_polls_is_caught():
    # A crash + restart between two polls: state looks healthy, but the counter grew and the
    # invocation changed.
    node = FakeNode([{}, {"NRestarts": "1", "InvocationID": "inv2"}],
                    journal={"inv1": [KV_LINES[:1], KV_LINES], "inv2": ["2026-12-02T15:00:12+0000 n python[9]: Load weight begin."]},
                    health=[None])
    data, _clock = wait(node)
    assert data["ready"] is False
    assert data["invocation_ids"] == ["inv1", "inv2"]
    assert data["failure_class"] == "oom_kv_cache"


def test_crash_before_first_poll_counts_and_first_cause_wins():
    # The handler restarted the unit; by the first poll it already crashed once (KV pool) and the
    # second try failed on the memory the first try's orphans still hold (CUDA OOM).
    second = ["2026-12-02T15:00:05+0000 n python[9]: Load weight begin. avail mem=94.11 GB",
              "2026-12-02T15:00:05+0000 n python[9]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.21 GiB."]
    node = FakeNode([{"NRestarts": "4", "InvocationID": "inv2"}],
                    journal={"old": ["from an earlier run: Capture cuda graph failed"], "inv1": KV_LINES,
                             "inv2": second})
    data, _clock = wait(node, since=T0 + 10)  # the restart happened just before inv1 began
    assert data["failure_class"] == "oom_kv_cache"
    assert set(data["invocation_ids"]) == {"inv1", "inv2"}  # "old" belongs to a previous run
    assert data["restarts_during_wait"] == 1  # counted from the journal, NRestarts was not reset
    assert any("Not enough memory" in line for line in data["journal_tail"])


def test_old_restart_count_without_since_is_ignored():
    node = FakeNode([{"NRestarts": "7"}, {"NRestarts": "7"}, {"NRestarts": "7"}], health=[None, None, 200])
    data, _clock = wait(node)
    assert data["ready"] is True
    assert data["restarts_during_wait"] == 0


def test_current_run_selection():
    entries = [("a", "1", 10), ("", "no id", 11), ("b", "2", 20), ("b", "3", 21), ("c", "4", 30)]
    # Without since: the current invocation and `previous` before it.
    assert m.current_run(entries, None, None, 0) == [("c", ["4"])]
    assert m.current_run(entries, "c", None, 1) == [("b", ["2", "3"]), ("c", ["4"])]
    assert m.current_run(entries, "c", None, 9) == [("a", ["1"]), ("b", ["2", "3"]), ("c", ["4"])]
    assert m.current_run([], None, None, 3) == []
    # Anchored at the unit's current invocation: a just-restarted unit with no line yet must not
    # be judged by the previous run's crash.
    assert m.current_run(entries, "d", None, 0) == [("d", [])]
    assert m.current_run(entries, "b", None, 1) == [("a", ["1"]), ("b", ["2", "3"])]
    # With since (seconds; entries in usec): every invocation that began since then.
    assert m.current_run(entries, "c", 15e-6, 0) == [("b", ["2", "3"]), ("c", ["4"])]
    assert m.current_run(entries, "d", 25e-6, 0) == [("c", ["4"]), ("d", [])]
    assert m.current_run(entries, "d", 99e-6, 0) == [("d", [])]


def test_fresh_invocation_without_lines_is_not_judged_by_the_previous_run():
    node = FakeNode([{"InvocationID": "new"}], journal={"old": KV_LINES}, health=[None, 200])
    data, _clock = wait(node)
    assert data["ready"] is True


def test_parse_journal_formats_and_splits():
    text = "\n".join([
        json.dumps({"_SYSTEMD_INVOCATION_ID": "x", "MESSAGE": "a\nb", "_PID": "5", "SYSLOG_IDENTIFIER": "python",
                    "_HOSTNAME": "h", "__REALTIME_TIMESTAMP": "0"}),
        json.dumps({"INVOCATION_ID": "x", "MESSAGE": [104, 105], "SYSLOG_IDENTIFIER": "systemd", "_HOSTNAME": "h",
                    "__REALTIME_TIMESTAMP": "0"}),
        "-- No entries --",
    ])
    assert m.parse_journal(text) == [("x", "1970-01-01T00:00:00+0000 h python[5]: a", 0),
                                     ("x", "1970-01-01T00:00:00+0000 h python[5]: b", 0),
                                     ("x", "1970-01-01T00:00:00+0000 h systemd: hi", 0)]


def test_max_restarts_tolerates_some():
    node = FakeNode([{}, {"NRestarts": "1", "InvocationID": "inv2"}, {"NRestarts": "1", "InvocationID": "inv2"}],
                    health=[None, None, 200])
    data, _clock = wait(node, max_restarts=1)
    assert data["ready"] is True


def test_failed_unit_with_bad_args():
    lines = ["x sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
             "--cuda-graph-max-bs-prefill"]
    node = FakeNode([{"ActiveState": "failed", "SubState": "failed", "ExecMainStatus": "2", "Result": "exit-code"}],
                    journal={"inv1": lines})
    data, _clock = wait(node, fail_on_error=False)
    assert data["failure_class"] == "bad_args"
    assert data["exec_main_status"] == 2
    assert node.requests == []  # never probed a dead server


def test_timeout_class_and_no_busy_loop():
    node = FakeNode([{}], health=[503])
    data, clock = wait(node, timeout=30)
    assert data["failure_class"] == "timeout"
    assert clock.now - 1000.0 == pytest.approx(30.0)
    assert all(s <= 2.0 for s in clock.sleeps) and len(clock.sleeps) == 15


def test_unit_not_found():
    node = FakeNode([{"LoadState": "not-found", "ActiveState": "inactive", "InvocationID": ""}])
    data, _clock = wait(node)
    assert data["ready"] is False
    assert "not installed" in data["msg"]
    assert data["invocation_ids"] == []


def test_port_in_use():
    node = FakeNode([{"ActiveState": "failed", "SubState": "failed"}],
                    journal={"inv1": ["y [Errno 98] error while attempting to bind on address: address already in use"]})
    data, _clock = wait(node)
    assert data["failure_class"] == "port_in_use"
    assert data["port_holders"] == []


def test_port_in_use_names_the_process_holding_the_port():
    node = FakeNode([{"ActiveState": "failed", "SubState": "failed"}],
                    journal={"inv1": ["y [Errno 98] error while attempting to bind on address: address already in use"]})
    asked = []
    holder = {"pid": 4242, "user": "root", "command": "python3", "cmdline": "python3 -m http.server 30000",
              "state": "listen"}

    def holders(port):
        asked.append(port)
        return [holder]

    clock = Clock()
    data = m.Waiter(dict(PARAMS, base_url="http://127.0.0.1:30000"), node.run, node.http, clock=clock,
                    sleep=clock.sleep, holders=holders).wait()
    assert asked == [30000]
    assert data["port_holders"] == [holder]
    assert "pid 4242 (python3 -m http.server 30000, user root)" in data["hint"]
    assert "sglang_service_port" in data["hint"]
    assert "pid 4242" in data["msg"]


def test_holders_are_only_looked_up_for_a_port_in_use():
    lines = ["x sglang serve: error: unrecognized arguments: --bogus"]
    node = FakeNode([{"ActiveState": "failed", "SubState": "failed"}], journal={"inv1": lines})
    clock = Clock()

    def holders(port):
        raise AssertionError("asked for the holders of %s" % port)

    data = m.Waiter(dict(PARAMS), node.run, node.http, clock=clock, sleep=clock.sleep, holders=holders).wait()
    assert data["failure_class"] == "bad_args" and data["port_holders"] == []


def test_journal_argv_reads_the_unit_as_json():
    argv = m.journal_argv("sglang-qwen.service", 50)
    assert argv[argv.index("-n") + 1] == "50"
    assert argv[argv.index("-o") + 1] == "json"
    assert argv[argv.index("-u") + 1] == "sglang-qwen.service"


def test_unit_name_and_parse_show():
    assert m.unit_name("sglang-qwen") == "sglang-qwen.service"
    assert m.unit_name("sglang-qwen.service") == "sglang-qwen.service"
    assert m.parse_show("A=1\nB=x=y\n\n") == {"A": "1", "B": "x=y"}


def _run_main(capsys, args):
    from ansible.module_utils.testing import patch_module_args

    with patch_module_args(args):
        with pytest.raises(SystemExit):
            m.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("args,needle", [
    ({"unit": "sglang-qwen", "base_url": "127.0.0.1:30000"}, "base_url must start with http://"),
    ({"unit": "sglang-qwen", "timeout": 0}, "timeout must be >= 1"),
    ({"unit": "sglang-qwen", "interval": 0}, "interval and request_timeout must be > 0"),
    ({"unit": "sglang-qwen", "probe_max_new_tokens": 0}, "probe_max_new_tokens must be >= 1"),
])
def test_main_rejects_bad_input_with_a_message(capsys, args, needle):
    out = _run_main(capsys, args)
    assert out["failed"] is True
    assert needle in out["msg"]


def _a_unit_that_failed_logging(monkeypatch, key):
    """systemctl and the journal of a unit that failed on memory after logging its arguments, key included."""
    lines = ["x server_args=ServerArgs(api_key='%s')" % key,
             "x RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."]

    def fake_run(self, argv, **kwargs):
        if argv[:2] == ["systemctl", "show"]:
            return 0, "LoadState=loaded\nActiveState=failed\nSubState=failed\nNRestarts=0\nInvocationID=i1\n", ""
        return 0, "".join(json.dumps({"_SYSTEMD_INVOCATION_ID": "i1", "MESSAGE": line}) + "\n" for line in lines), ""

    from ansible.module_utils.basic import AnsibleModule

    monkeypatch.setattr(AnsibleModule, "run_command", fake_run)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/bin/" + name)


def test_main_fails_with_class_and_masks_the_api_key(capsys, monkeypatch):
    key = "s3cret-key-value"
    _a_unit_that_failed_logging(monkeypatch, key)
    out = _run_main(capsys, {"unit": "sglang-qwen", "api_key": key})
    assert out["failed"] is True
    assert out["failure_class"] == "oom_kv_cache"
    assert "failure_class=oom_kv_cache" in out["msg"]
    assert key not in json.dumps(out)  # no_log values are scrubbed from the journal tail too
    out = _run_main(capsys, {"unit": "sglang-qwen", "fail_on_error": False})
    assert not out.get("failed")
    assert out["ready"] is False and out["changed"] is False
    assert out["ansible_facts"]["sglang_service_wait"]["failure_class"] == "oom_kv_cache"


def test_main_reads_the_key_file_and_masks_its_key(capsys, monkeypatch, tmp_path):
    """api_key_file: the key read on the node is masked like a no_log argument, also in the journal tail."""
    key = "s3cret-from-the-file"
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text('api-key: "%s"\n' % key)
    _a_unit_that_failed_logging(monkeypatch, key)
    out = _run_main(capsys, {"unit": "sglang-qwen", "api_key_file": str(secrets)})
    assert out["failure_class"] == "oom_kv_cache"
    assert key not in json.dumps(out)
    secrets.write_text("api-key: [%s\n" % key)
    out = _run_main(capsys, {"unit": "sglang-qwen", "api_key_file": str(secrets)})
    assert out["failed"] is True and str(secrets) in out["msg"] and key not in json.dumps(out)
