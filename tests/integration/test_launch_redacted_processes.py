"""roles/service/files/sglang_launch_redacted.py as the unit runs it: real processes, real pipes.

A program stands in for SGLang and prints the key the way 0.5.23 does (one ``server_args=``
line from the main process), from multiprocessing children (fork and spawn), from a grandchild,
in pieces; the launcher's output must never hold the key, while the program keeps the
launcher's PID, exit status and signals."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

LAUNCHER = str(Path(__file__).resolve().parents[2] / "roles" / "service" / "files" / "sglang_launch_redacted.py")
KEY = "it-K3y-0f-th3-n0de"

PROGRAM = textwrap.dedent("""
    import multiprocessing, os, sys, time, subprocess
    KEY = open(sys.argv[2]).read().split('"')[1]  # as SGLang: from the --config file, not argv

    def child(tag):
        sys.stderr.write("[child %s] api_key=%s\\n" % (tag, KEY))
        sys.stderr.flush()
        half = len(KEY) // 2
        os.write(2, ("[child %s split] " % tag + KEY[:half]).encode())
        time.sleep(0.05)
        os.write(2, (KEY[half:] + " done\\n").encode())

    if __name__ == "__main__":
        print("[t] server_args=%r" % {"model_path": "m", "api_key": KEY, "port": 1}, flush=True)
        for method in ("fork", "spawn"):
            p = multiprocessing.get_context(method).Process(target=child, args=(method,))
            p.start(); p.join()
        subprocess.run(["sh", "-c", "printf 'grandchild %s\\\\n' \\"$0\\" >&2", KEY])
        print("pid=%d" % os.getpid(), flush=True)
        print("argv0=" + open("/proc/self/cmdline").read().split("\\0")[1], flush=True)
        sys.exit(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
""")


@pytest.fixture
def config(tmp_path):
    from ansible_collections.blackwell.sglang.plugins.plugin_utils.service_record import sglang_service_secrets_yaml

    path = tmp_path / "secrets.yaml"
    path.write_text(sglang_service_secrets_yaml(KEY, ["Ansible managed"]))
    path.chmod(0o600)
    return str(path)


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "server.py"  # a file: multiprocessing's spawn re-imports __main__
    path.write_text(PROGRAM)
    return str(path)


def run(args, merge=False, **kwargs):
    return subprocess.run([sys.executable, LAUNCHER] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merge else subprocess.PIPE, timeout=60, check=False, **kwargs)


def filters_running():
    """Filter processes of this user still alive (their command line names the launcher)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if LAUNCHER.encode() in argv and b"--filter" in argv:
            found.append(int(pid))
    return found


@pytest.mark.parametrize("merge", [False, True], ids=["stdout-stderr-apart", "one-stream"])
def test_key_never_in_the_output_of_the_program_or_its_children(config, program, merge):
    out = run(["--", sys.executable, program, "--config", config, "0"], merge=merge)
    text = out.stdout + (out.stderr or b"")
    assert out.returncode == 0, text
    assert KEY.encode() not in text
    assert b"server_args={'model_path': 'm', 'api_key': '<redacted>', 'port': 1}" in out.stdout
    for tag in (b"fork", b"spawn"):
        assert b"[child %s] api_key=<redacted>" % tag in text
        assert b"[child %s split] <redacted> done" % tag in text
    assert b"grandchild <redacted>" in text
    assert not filters_running()  # gone once every writer closed the pipes


def test_control_without_the_launcher_the_key_is_printed(config, program):
    """The program really prints the key: the test above can fail."""
    out = subprocess.run([sys.executable, program, "--config", config], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=60, check=False)
    assert out.stdout.count(KEY.encode()) >= 5


def test_same_pid_and_exit_status(config, program):
    proc = subprocess.Popen([sys.executable, LAUNCHER, "--", sys.executable, program, "--config", config, "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, _stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert ("pid=%d" % proc.pid).encode() in stdout.splitlines()
    assert b"argv0=" + program.encode() in stdout.splitlines()  # the program's own command line, not the launcher's


def test_module_form_runs_the_same_interpreter(tmp_path, config):
    (tmp_path / "fake_server.py").write_text(
        "import os, sys\nprint('argv', sys.argv[1:], 'exe', sys.executable == os.path.realpath(sys.executable) or 1)\n"
        "print('key', open(sys.argv[2]).read().split('\"')[1])\n")
    out = run(["-m", "fake_server", "--config", config], cwd=str(tmp_path),
              env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert b"argv ['--config', '%s']" % config.encode() in out.stdout
    assert b"key <redacted>" in out.stdout


def test_signals_reach_the_program_and_its_last_lines_are_kept(config):
    program = ("import signal, sys, time\n"
               "key = open(sys.argv[2]).read().split('\"')[1]\n"
               "def bye(signum, frame):\n"
               "    sys.stderr.write('got %d, key was ' % signum + key + '\\n'); sys.exit(7)\n"
               "signal.signal(signal.SIGTERM, bye)\n"
               "print('ready', flush=True)\n"
               "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, LAUNCHER, "--", sys.executable, "-c", program, "--config", config],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 7
    assert stderr == b"got 15, key was <redacted>\n"


def test_a_killed_program_keeps_its_last_words(config):
    """SGLang ends a crash with kill_process_tree (SIGKILL to itself): what it wrote before
    still gets out, redacted (the filter is not in its process tree)."""
    program = ("import os, signal, sys, multiprocessing\n"
               "key = open(sys.argv[2]).read().split('\"')[1]\n"
               "sys.stderr.write('RuntimeError: crash with ' + key + '\\n'); sys.stderr.flush()\n"
               "os.kill(os.getpid(), signal.SIGKILL)\n")
    out = run(["--", sys.executable, "-c", program, "--config", config])
    assert out.returncode == -signal.SIGKILL
    assert out.stderr == b"RuntimeError: crash with <redacted>\n"


def test_key_in_no_process_argv_or_environment(config):
    program = ("import sys, time\nprint('up', flush=True)\ntime.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, LAUNCHER, "--", sys.executable, "-c", program, "--config", config],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"up\n"
        filters = filters_running()
        assert len(filters) == 1
        checked = 0
        for pid in os.listdir("/proc"):
            for name in ("cmdline", "environ"):
                try:
                    with open("/proc/%s/%s" % (pid, name), "rb") as fh:
                        data = fh.read()
                except OSError:
                    continue
                checked += 1
                assert KEY.encode() not in data, (pid, name)
        assert checked > 4
        # The filter is no child of the program (SGLang's kill_process_tree cannot reach it).
        with open("/proc/%d/stat" % filters[0]) as fh:
            ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        assert ppid != proc.pid
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    deadline = time.time() + 5
    while filters_running() and time.time() < deadline:
        time.sleep(0.05)
    assert not filters_running()


def test_without_a_secret_the_program_runs_directly(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text("log-level: info\n")
    for args in (["--config", str(plain)], ["--config", str(tmp_path / "missing.yaml")], []):
        out = run(["--", sys.executable, "-c", "import sys; print('ran', sys.argv[1:])"] + args)
        assert out.returncode == 0 and out.stdout.startswith(b"ran"), out.stderr
    assert not filters_running()


def test_unreadable_secrets_stop_the_start(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("api-key: [unclosed\n")
    out = run(["--", sys.executable, "-c", "print('started')", "--config", str(bad)])
    assert out.returncode == 2 and b"started" not in out.stdout
    assert b"cannot read the secrets of %s" % str(bad).encode() in out.stderr


def test_usage_and_missing_program():
    out = run([])
    assert out.returncode == 2 and b"usage:" in out.stderr
    out = run(["--", "/nonexistent/program"])
    assert out.returncode == 127 and b"cannot run /nonexistent/program" in out.stderr
