"""procs: fuser parsing (real H200 captures + forms seen on psmisc 23.6), /proc scanning on a
fake proc tree, and the allow/deny selection that decides what may ever be signalled."""

import os
import signal
import sys
from pathlib import Path

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import procs

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "nvidia-h200"
H200_DEVICES = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]


def fuser_sections():
    """fuser.txt = `ls -l /dev/nvidia*`, then `fuser -v`, then plain `fuser`, split by '---'."""
    parts = (FIXTURES / "fuser.txt").read_text().split("---\n")
    assert len(parts) == 3, "fixture layout changed"

    def strip_rc(text):
        return "\n".join(ln for ln in text.splitlines() if not ln.startswith("rc="))

    return strip_rc(parts[1]), strip_rc(parts[2])


@pytest.mark.parametrize("form", [0, 1], ids=["verbose", "plain"])
def test_parse_fuser_real_capture(form):
    text = fuser_sections()[form]
    holders = procs.parse_fuser(text, H200_DEVICES)
    assert [h["pid"] for h in holders] == [419]
    assert holders[0]["devices"] == H200_DEVICES
    assert "m" in holders[0]["access"]
    if form == 0:
        assert holders[0]["user"] == "root"
        assert holders[0]["command"] == "python3"
        assert holders[0]["access"] == "Fm"
    else:
        assert holders[0]["user"] is None


def test_parse_fuser_real_capture_without_names():
    """Same result when the caller does not pass the file names (regex fallback)."""
    assert procs.parse_fuser(fuser_sections()[0])[0]["devices"] == H200_DEVICES


# psmisc 23.6, merged stdout+stderr, a long file name: the row moves to the next line, and
# an unprivileged scan prints one "Cannot stat" line per unreadable fd.
LONG_NAME_VERBOSE = """Cannot stat file /proc/1/fd/0: Permission denied
Cannot stat file /proc/1/fd/1: Permission denied
                     USER        PID ACCESS COMMAND
/tmp/fusertest/nvidia0:
                     root      17231 f.... sleep
                     bob       17300 F...m sglang::schedu
/tmp/fusertest/nvidiactl:
                     root      17231 f.... sleep
"""


def test_parse_fuser_long_names_multiple_rows_and_noise():
    holders = procs.parse_fuser(LONG_NAME_VERBOSE, ["/tmp/fusertest/nvidia0", "/tmp/fusertest/nvidiactl"])
    assert [(h["pid"], h["user"], h["command"], h["devices"]) for h in holders] == [
        (17231, "root", "sleep", ["/tmp/fusertest/nvidia0", "/tmp/fusertest/nvidiactl"]),
        (17300, "bob", "sglang::schedu", ["/tmp/fusertest/nvidia0"]),
    ]
    assert holders[1]["access"] == "Fm"


# `fuser -v /dev/nvidia*` (psmisc, stdout+stderr merged) on a real H200 node (driver 580.159.04)
# with two CUDA processes of this project's H200 check holding the GPU.
H200_TWO_HOLDERS = """                     USER        PID ACCESS COMMAND
/dev/nvidia0:        root        445 F...m python3
                     root        446 F...m python3
/dev/nvidiactl:      root        445 F...m python3
                     root        446 F...m python3
/dev/nvidia-uvm:     root        445 F...m python3
                     root        446 F...m python3
"""


def test_parse_fuser_real_h200_two_holders():
    holders = procs.parse_fuser(H200_TWO_HOLDERS, H200_DEVICES + ["/dev/nvidia-uvm-tools"])
    assert [(h["pid"], h["user"], h["command"], h["access"], h["devices"]) for h in holders] == [
        (445, "root", "python3", "Fm", H200_DEVICES), (446, "root", "python3", "Fm", H200_DEVICES)]


def test_parse_fuser_plain_several_pids_per_line():
    text = "/dev/nvidia0:          419m   420m\n/dev/nvidia1:   421\n"
    holders = procs.parse_fuser(text)
    assert [(h["pid"], h["devices"]) for h in holders] == [
        (419, ["/dev/nvidia0"]), (420, ["/dev/nvidia0"]), (421, ["/dev/nvidia1"])]


def test_parse_fuser_stdout_only_has_pids_without_devices():
    holders = procs.parse_fuser(" 17231 17231 17300")
    assert [(h["pid"], h["devices"]) for h in holders] == [(17231, []), (17300, [])]


def test_parse_fuser_nobody_and_kernel_rows():
    assert procs.parse_fuser("") == []
    assert procs.parse_fuser("Specified filename /dev/nvidia9 does not exist.\n") == []
    text = "                     USER        PID ACCESS COMMAND\n/dev/sda1:           root     kernel mount /boot\n"
    assert procs.parse_fuser(text) == []


def test_real_fuser_merged_output_parses(tmp_path, run_command):
    """Run the real fuser (if installed) on a file that a child of this test holds."""
    fuser = "/usr/bin/fuser" if os.path.exists("/usr/bin/fuser") else "/bin/fuser"
    if not os.path.exists(fuser):
        pytest.skip("fuser (psmisc) is not installed on this machine")
    held = tmp_path / "nvidia0"
    free = tmp_path / "nvidia1"
    held.write_text("")
    free.write_text("")
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "import sys,time; f=open(sys.argv[1]); print(1, flush=True); time.sleep(30)",
                              str(held)], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()
        rc, out, dummy = procs.run_with_timeout(run_command, procs.fuser_argv(fuser, [str(held), str(free)]), 10,
                                                merge_stderr=True)
        holders = procs.parse_fuser(out, [str(held), str(free)])
        assert rc == 0
        assert [(h["pid"], h["devices"]) for h in holders] == [(child.pid, [str(held)])]
        rc, out, dummy = procs.run_with_timeout(run_command, procs.fuser_argv(fuser, [str(free)]), 10,
                                                merge_stderr=True)
        assert rc == 1
        assert procs.parse_fuser(out, [str(free)]) == []
    finally:
        child.kill()
        child.wait()


# ----------------------------------------------------------------------------------------
# fake /proc
# ----------------------------------------------------------------------------------------

def make_proc(root, pid, argv, comm=None, ppid=1, uid=0, state="S", starttime=1000, fds=(), maps=()):
    base = root / str(pid)
    (base / "fd").mkdir(parents=True)
    comm = comm if comm is not None else (os.path.basename(argv[0])[:15] if argv else "kworker")
    rest = [state, str(ppid)] + ["0"] * 17 + [str(starttime)] + ["0"] * 20
    (base / "stat").write_text("%d (%s) %s\n" % (pid, comm, " ".join(rest)))
    (base / "status").write_text("Name:\t%s\nUid:\t%d\t%d\t%d\t%d\n" % (comm, uid, uid, uid, uid))
    (base / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    for number, target in enumerate(fds):
        os.symlink(target, base / "fd" / str(number))
    (base / "maps").write_text("".join("7f00-7f01 rw-s 00000000 00:05 1 %s\n" % m for m in maps))
    return base


@pytest.fixture
def proc_root(tmp_path):
    root = tmp_path / "proc"
    root.mkdir()
    make_proc(root, 1, ["/sbin/init"], comm="systemd", ppid=0)
    make_proc(root, 2, [], comm="kthreadd", ppid=0)
    make_proc(root, 100, ["/usr/bin/python3", "-m", "sglang.launch_server", "--tp-size", "2"], ppid=1)
    make_proc(root, 101, ["sglang::scheduler_TP0"], comm="sglang::schedul", ppid=1,
              fds=["/dev/nvidia0", "/dev/nvidiactl"], maps=["/dev/nvidia0"])
    make_proc(root, 102, ["sglang::scheduler_TP1"], ppid=1, uid=1000, fds=["/dev/nvidia1"])
    make_proc(root, 103, ["/usr/bin/python3", "train.py"], ppid=1, fds=["/dev/nvidia1", "/dev/nvidia-uvm"])
    make_proc(root, 104, ["vim", "notes"], ppid=1)
    make_proc(root, 105, ["sglang::detokenizer"], ppid=1, state="Z")
    make_proc(root, 200, ["/bin/bash"], ppid=1)
    make_proc(root, 201, ["/usr/bin/python3", "AnsiballZ_gpu_free.py", "sglang::"], ppid=200)
    return root


def test_parse_stat_handles_parentheses_in_comm():
    stat = procs.parse_stat("42 (a) b (c)) R 7 9 " + "0 " * 16 + "555 0\n")
    assert stat == {"pid": 42, "comm": "a) b (c)", "state": "R", "ppid": 7, "pgrp": 9, "starttime": 555}
    assert procs.parse_stat("") is None
    assert procs.parse_stat("garbage") is None


def test_parse_stat_on_real_self():
    stat = procs.parse_stat(Path("/proc/%d/stat" % os.getpid()).read_text())
    assert (stat["pid"], stat["ppid"], stat["state"]) == (os.getpid(), os.getppid(), "R")
    assert stat["pgrp"] == os.getpgrp()
    me = procs.read_process(os.getpid())
    # pytest itself, or one of pytest-xdist's workers (started as "python -c ...")
    assert ("pytest" in me["cmdline"] or "-c" in me["cmdline"].split()) and me["pid"] == os.getpid()
    assert me["cmdline"] == " ".join(Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").decode().split("\0"))
    assert me["starttime"] == stat["starttime"] > 0


def test_parse_cmdline_proctitle_padding():
    assert procs.parse_cmdline(b"sglang::scheduler_TP0\0\0\0\0") == ["sglang::scheduler_TP0"]
    assert procs.parse_cmdline(b"") == []


def test_scan_skips_kernel_threads_and_reads_fields(proc_root):
    found = {p["pid"]: p for p in procs.scan(str(proc_root))}
    assert 2 not in found
    assert found[100]["cmdline"] == "/usr/bin/python3 -m sglang.launch_server --tp-size 2"
    assert found[101]["comm"] == "sglang::schedul"
    assert found[102]["uid"] == 1000


def test_find_matching_default_patterns(proc_root):
    matched = procs.find_matching(procs.scan(str(proc_root)), procs.DEFAULT_SGLANG_PATTERNS)
    by_pid = {p["pid"]: p["pattern"] for p in matched}
    # 105 is a zombie: still listed by the scan, weeded out later by is_alive()
    assert by_pid == {100: "sglang.launch_server", 101: "sglang::", 102: "sglang::", 105: "sglang::",
                      201: "sglang::"}


def test_ancestors(proc_root):
    assert procs.ancestors(201, str(proc_root)) == [201, 200, 1]
    assert procs.ancestors(99999, str(proc_root)) == [99999]


def test_is_alive_zombie_missing_and_recycled(proc_root):
    root = str(proc_root)
    assert procs.is_alive(101, 1000, root)
    assert not procs.is_alive(101, 999, root)  # same pid, different process
    assert not procs.is_alive(105, None, root)  # zombie
    assert not procs.is_alive(4242, None, root)


def test_select_targets_protects_self_and_honours_deny_lists(proc_root):
    root = str(proc_root)
    cands = procs.find_matching(procs.scan(root), procs.DEFAULT_SGLANG_PATTERNS)
    allowed, refused = procs.select_targets(cands, protected_pids=procs.ancestors(201, root), exclude_pids=[100])
    assert [c["pid"] for c in allowed] == [101, 102, 105]
    reasons = {c["pid"]: c["reason"] for c in refused}
    assert reasons == {100: "in exclude_pids", 201: "protected (this module or one of its parents)"}

    allowed, refused = procs.select_targets(cands, exclude_users=["nobody-%d" % 1000, procs._user_name(1000)])
    assert 102 not in [c["pid"] for c in allowed]


def test_select_targets_only_pids_is_an_allow_list(proc_root):
    cands = procs.find_matching(procs.scan(str(proc_root)), procs.DEFAULT_SGLANG_PATTERNS)
    allowed, refused = procs.select_targets(cands, only_pids=[101, 999])
    assert [c["pid"] for c in allowed] == [101]
    assert all(c["reason"] == "not in only_pids" for c in refused)
    # an empty allow list allows nothing (it is not the same as "no list")
    assert procs.select_targets(cands, only_pids=[])[0] == []
    # deny wins over allow
    assert procs.select_targets(cands, only_pids=[101], exclude_pids=[101])[0] == []


def test_holders_from_proc(proc_root):
    holders = procs.holders_from_proc(["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"], str(proc_root))
    assert [(h["pid"], h["devices"], h["access"]) for h in holders] == [
        (101, ["/dev/nvidia0", "/dev/nvidiactl"], "fm"),
        (102, ["/dev/nvidia1"], "f"),
        (103, ["/dev/nvidia1"], "f"),
    ]


@pytest.mark.parametrize("holder,ignored", [
    ({"command": "nvidia-persiste", "cmdline": None}, True),  # comm cut to 15 chars
    ({"command": None, "cmdline": "/usr/bin/nvidia-persistenced --user x"}, True),
    ({"command": "nvidia-smi", "cmdline": "nvidia-smi --query-gpu=index"}, True),
    ({"command": "python3", "cmdline": "sglang::scheduler_TP0"}, False),
    ({"command": "nvidia-sm", "cmdline": None}, False),  # a prefix that is not a cut comm
])
def test_is_ignored(holder, ignored):
    assert procs.is_ignored(holder, procs.DEFAULT_IGNORED_HOLDERS) is ignored
    assert procs.is_ignored(holder, []) is False


def test_send_signal_checks_identity_first(proc_root):
    sent = []

    def kill(pid, sig):
        sent.append((pid, sig))

    root = str(proc_root)
    assert procs.send_signal(101, "TERM", 1000, root, kill)
    assert not procs.send_signal(101, "KILL", 1, root, kill)  # recycled pid: never signalled
    assert not procs.send_signal(105, "KILL", None, root, kill)  # zombie
    assert sent == [(101, signal.SIGTERM)]


def test_wait_gone_returns_survivors(proc_root):
    now = [0.0]

    def clock():
        return now[0]

    def sleep(seconds):
        now[0] += max(seconds, 0.05)

    left = procs.wait_gone([{"pid": 101, "starttime": 1000}, {"pid": 4242}], 1.0, str(proc_root), 0.1, clock, sleep)
    assert [t["pid"] for t in left] == [101]
    assert now[0] >= 1.0


@pytest.fixture(scope="module")
def run_command():
    """A real AnsibleModule's run_command, so the keyword arguments are the real ones."""
    from ansible.module_utils.basic import AnsibleModule
    from ansible.module_utils.testing import patch_module_args
    with patch_module_args({}):
        return AnsibleModule(argument_spec={}).run_command


TIMEOUT_BIN = "/usr/bin/timeout"


def test_run_with_timeout(run_command):
    code = "import os,sys; print(os.environ['LC_ALL'] + ' $HOME ~'); sys.stderr.write('e')"
    rc, out, err = procs.run_with_timeout(run_command, [sys.executable, "-c", code], 10, timeout_bin=TIMEOUT_BIN)
    assert (rc, out, err) == (0, "C $HOME ~\n", "e")  # no ~ / $VAR expansion of arguments
    rc, out, err = procs.run_with_timeout(run_command, [sys.executable, "-c", "import sys; sys.stderr.write('e')"],
                                          10, merge_stderr=True, timeout_bin=TIMEOUT_BIN)
    assert (out, err) == ("e", "")
    rc, out, err = procs.run_with_timeout(run_command, [sys.executable, "-c", "import sys; sys.exit(3)"], 10)
    assert rc == 3


def test_run_with_timeout_limits_a_hung_command(run_command):
    if not os.path.exists(TIMEOUT_BIN):
        pytest.skip("coreutils timeout is not at %s" % TIMEOUT_BIN)
    with pytest.raises(procs.CommandTimeout):
        procs.run_with_timeout(run_command, [sys.executable, "-c", "import time; time.sleep(30)"], 0.5,
                               timeout_bin=TIMEOUT_BIN)


def test_run_with_timeout_missing_binary(run_command):
    with pytest.raises(OSError):
        procs.run_with_timeout(run_command, ["/nonexistent/binary"], 1)


# ----------------------------------------------------------------------------------------
# who holds a TCP port
# ----------------------------------------------------------------------------------------

_TCP_HEADER = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
               "timeout inode\n")


def _tcp_row(n, local, remote, state, inode):
    return ("%4d: %s %s %s 00000000:00000000 00:00000000 00000000     0        0 %s 1 "
            "0000000000000000 100 0 0 10 0\n" % (n, local, remote, state, inode))


def test_parse_proc_net_tcp_keeps_listening_and_bound_sockets_of_the_port():
    # 0x7530 = 30000; a connected socket on the port (an accepted client) is not a holder
    text = (_TCP_HEADER
            + _tcp_row(0, "0100007F:7530", "00000000:0000", "0A", "111")
            + _tcp_row(1, "0100007F:7530", "0100007F:D431", "01", "222")
            + _tcp_row(2, "00000000:7530", "00000000:0000", "07", "333")
            + _tcp_row(3, "0100007F:7531", "00000000:0000", "0A", "444"))
    assert procs.parse_proc_net_tcp(text, 30000) == {"111": "listen", "333": "bound"}
    assert procs.parse_proc_net_tcp(text, 30002) == {}
    assert procs.parse_proc_net_tcp("", 30000) == {}


def test_port_holders_maps_socket_inodes_to_processes(proc_root):
    (proc_root / "net").mkdir()
    (proc_root / "net" / "tcp").write_text(_TCP_HEADER + _tcp_row(0, "0100007F:7530", "00000000:0000", "0A", "5151"))
    (proc_root / "net" / "tcp6").write_text(_TCP_HEADER)
    make_proc(proc_root, 300, ["/usr/bin/python3", "-m", "http.server", "30000"], ppid=1,
              fds=["/dev/null", "socket:[5151]"])
    make_proc(proc_root, 301, ["/usr/bin/python3", "client.py"], ppid=1, fds=["socket:[9999]"])
    holders = procs.port_holders(30000, str(proc_root))
    assert [(h["pid"], h["cmdline"], h["state"]) for h in holders] == [
        (300, "/usr/bin/python3 -m http.server 30000", "listen")]
    assert procs.describe_holders(holders) == "pid 300 (/usr/bin/python3 -m http.server 30000, user root)"
    assert procs.port_holders(30001, str(proc_root)) == []


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc/net/tcp")
def test_port_holders_finds_this_process_listening_on_loopback():
    import socket
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        holders = procs.port_holders(port)
        assert os.getpid() in [h["pid"] for h in holders]
        assert [h["state"] for h in holders if h["pid"] == os.getpid()] == ["listen"]
    finally:
        sock.close()
    assert os.getpid() not in [h["pid"] for h in procs.port_holders(port)]


# ---------------------------------------------------------------------------- device_files

def test_device_files_are_absolute_unique_and_skip_directories(tmp_path, monkeypatch):
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    for name in ("nvidia1", "nvidia0", "nvidiactl", "nvidia-uvm", "null"):
        (dev / name).write_text("")
    monkeypatch.chdir(tmp_path)
    got = procs.device_files(["dev/nvidiactl", "dev/nvidia*", str(dev / "nvidia0"), "dev/absent*"])
    # pattern order first, name order within a pattern, each file once, never the caps directory
    assert got == [str(dev / n) for n in ("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1")]


def test_device_files_of_no_pattern_or_no_match_are_none(tmp_path):
    assert procs.device_files([]) == []
    assert procs.device_files([str(tmp_path / "nvidia*")]) == []


def test_the_gpu_modules_share_device_files():
    from ansible_collections.blackwell.sglang.plugins.modules import gpu_free, gpu_info

    assert gpu_info.device_files is procs.device_files and gpu_free.device_files is procs.device_files
