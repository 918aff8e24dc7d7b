"""bench_watchdog: the decisions, and the two signs of a gone controller on real processes
(a pipe that lost its reader, as sshd leaves it; an ancestor that exited)."""

import os
import subprocess
import sys
import textwrap
import time

from ansible_collections.blackwell.sglang.plugins.module_utils import bench_watchdog as wd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")

# A stand-in for the module: a watchdog that, when it fires, writes why into a file and exits;
# meanwhile the main thread "benchmarks" (sleeps) far longer than any test waits.
CHILD = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, %r)
    from ansible_collections.blackwell.sglang.plugins.module_utils import bench_watchdog as wd
    out = sys.argv[1]
    deadline = float(sys.argv[2]) if sys.argv[2] != "none" else None
    def stop(reason, kind):
        with open(out, "w") as fh:
            fh.write(kind + ": " + reason)
        os._exit(3)
    wd.Watchdog(stop, deadline_s=deadline, interval=0.1).start()
    with open(out + ".ready", "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(60)
""") % COLLECTIONS


def _wait(path, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return True
        time.sleep(0.05)
    return False


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_decisions():
    assert wd.controller_gone([], False) is None
    assert "closed" in wd.controller_gone([], True)
    assert "1234" in wd.controller_gone([1234], False)
    assert not wd.deadline_passed(100.0, None, 1e9)
    assert not wd.deadline_passed(100.0, 5, 104.9)
    assert wd.deadline_passed(100.0, 5, 105.0)


def test_ancestors_name_this_process_chain():
    chain = wd.ancestors()
    assert chain and chain[0][0] == os.getppid()
    assert wd.gone_ancestors(chain) == []
    # a pid with another start time is another process
    assert wd.gone_ancestors([(chain[0][0], chain[0][1] + 1)]) == [chain[0][0]]


def test_stdout_of_a_terminal_or_file_is_never_closed(tmp_path):
    with open(tmp_path / "f", "w") as fh:
        assert wd.stdout_closed(fh.fileno()) is False


def test_pipe_that_lost_its_reader_stops_the_child(tmp_path):
    """Over SSH the module's stdout is sshd's pipe; the controller gone, sshd closes its end."""
    out = str(tmp_path / "why")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, out, "none"], stdout=subprocess.PIPE)
    try:
        assert _wait(out + ".ready")
        time.sleep(0.3)
        assert proc.poll() is None, "the watchdog fired with its reader still there"
        proc.stdout.close()  # what sshd does when the channel closes
        assert proc.wait(timeout=5) == 3
        assert open(out).read().startswith("controller: the connection that started it closed")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ancestor_exit_stops_the_grandchild(tmp_path):
    """The local connection: ansible-playbook -> worker -> sh -> module; the top one killed."""
    out = str(tmp_path / "why")
    # sh in the middle, as Ansible runs a module; stdout to a file so only the ancestor rule can fire
    log = open(tmp_path / "stdout", "w")
    middle = subprocess.Popen(["/bin/sh", "-c", '"$0" -c "$1" "$2" none; :', sys.executable, CHILD, out],
                              stdout=log)
    try:
        assert _wait(out + ".ready")
        child = int(open(out + ".ready").read())
        time.sleep(0.3)
        assert _alive(child)
        middle.kill()
        middle.wait()
        end = time.time() + 5
        while _alive(child) and time.time() < end:
            time.sleep(0.05)
        assert not _alive(child)
        assert open(out).read().startswith("controller: the process that started it exited (pid %d" % middle.pid)
    finally:
        log.close()
        if middle.poll() is None:
            middle.kill()
            middle.wait()


def test_deadline_stops_the_child(tmp_path):
    out = str(tmp_path / "why")
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-c", CHILD, out, "0.5"], stdout=subprocess.DEVNULL,
                          timeout=20, check=False)
    assert proc.returncode == 3
    assert time.time() - t0 < 10
    assert open(out).read() == "deadline: it ran past its deadline of 0.5 s"
