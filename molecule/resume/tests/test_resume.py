"""The node after the resume scenario: converged on a winner of the last run, no run marked in
progress, every run's pre-tuning copy kept (the first one the unit from before any tuning), no
benchmark left running."""

import json

STATE = "/var/lib/sglang-mtp-tune/sglang-qwen.service"
UNIT = "/etc/systemd/system/sglang-qwen.service"
RECORD = "/etc/sglang/qwen/setting.json"


def test_no_run_in_progress_and_copies_kept(host):
    assert not host.file(STATE + "/active.json").exists
    copies = sorted(host.run("ls %s", STATE).stdout.split())
    assert len(copies) == 2 and all(c.endswith(".pre-mtp-tune") for c in copies)
    first = host.file("%s/%s" % (STATE, copies[0]))
    assert first.mode == 0o600 and "--speculative-num-steps 3 " in first.content_string
    assert host.file(STATE).mode == 0o700


def test_converged_on_the_last_runs_winner(host):
    record = json.loads(host.file(RECORD).content_string)
    assert record["provenance"]["by"] == "mtp_tune" and record["provenance"]["run"] == "resume"
    steps = record["setting"]["speculative_num_steps"]
    assert steps in (1, 2)
    unit = host.file(UNIT).content_string
    assert "--speculative-num-steps %d " % steps in unit and "# mtp_tune resume: steps %d" % steps in unit
    assert host.service("sglang-qwen").is_running


def test_no_benchmark_left(host):
    out = host.run("grep -l '[A]nsiballZ_sglang_bench' /proc/[0-9]*/cmdline")
    assert out.stdout.strip() == ""
