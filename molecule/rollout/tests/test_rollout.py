"""The fleet after the rollout scenario: every node serves (the last rollout, a tuning winner of
steps=5 with cuda-graph max bs 256, on nodes 1 and 2; node 3, unreachable during that run, still
steps=4), and only the unit's own processes hold the (simulated) GPUs."""

import json

import pytest

UNIT = "sglang-qwen.service"
UNIT_PATH = "/etc/systemd/system/" + UNIT
EXPECTED_STEPS = {"sglang-rollout-1": 5, "sglang-rollout-2": 5, "sglang-rollout-3": 4}
# The tuning winner rolled out last carried a smaller CUDA-graph batch; node 3 never got it.
EXPECTED_GRAPH_BS = {"sglang-rollout-1": 256, "sglang-rollout-2": 256, "sglang-rollout-3": None}


def _settings(host):
    for line in host.file(UNIT_PATH).content_string.splitlines():
        if line.startswith("# sglang-settings: "):
            return json.loads(line[len("# sglang-settings: "):])
    pytest.fail("no sglang-settings comment in the unit")


def _name(host):
    return host.backend.get_hostname()


def test_unit_runs_the_expected_setting(host):
    settings = _settings(host)
    want = EXPECTED_STEPS[_name(host)]
    assert settings["speculative_num_steps"] == want
    assert settings["speculative_num_draft_tokens"] == want + 1
    assert "--speculative-num-steps %d " % want in host.file(UNIT_PATH).content_string
    assert settings["cuda_graph_max_bs"] == EXPECTED_GRAPH_BS[_name(host)]


def test_unit_is_active_and_serves_tokens(host):
    assert host.service(UNIT).is_running
    probe = host.run(
        "python3 -c \"import json, urllib.request; "
        "r = urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:30000/generate', "
        "data=json.dumps({'text': 'hi', 'sampling_params': {'max_new_tokens': 4, 'ignore_eos': True}}).encode(), "
        "headers={'Content-Type': 'application/json'}), timeout=30); "
        "print(json.load(r)['meta_info']['completion_tokens'])\"")
    assert probe.rc == 0, probe.stderr
    assert int(probe.stdout.strip()) == 4


def test_only_the_unit_holds_the_gpus(host):
    # Every process with /dev/nvidia<N> open must belong to the unit's control group: nothing
    # left over from the failed start on node 2 or from the stop of node 3.
    holders = host.run("fuser /dev/nvidia[0-9]* 2>/dev/null").stdout.split()
    pids = sorted({int(p.rstrip("cemfrmF")) for p in holders if p.rstrip("cemfrmF").isdigit()})
    assert pids, "the running server should hold its GPUs"
    for pid in pids:
        cgroup = host.file("/proc/%d/cgroup" % pid).content_string
        assert UNIT in cgroup, (pid, cgroup)
    main_pid = int(host.run("systemctl show -p MainPID --value %s" % UNIT).stdout.strip())
    assert main_pid > 0


def test_previous_unit_kept_for_rollback(host):
    prev = host.file("/etc/sglang/%s.prev" % UNIT)
    assert prev.exists
    assert prev.content_string != host.file(UNIT_PATH).content_string
