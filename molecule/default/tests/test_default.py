"""The test bed itself: a node must boot systemd as PID 1 and offer Python to Ansible."""


def test_systemd_is_pid1(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"


def test_system_is_up(host):
    state = host.run("systemctl is-system-running").stdout.strip()
    assert state in ("running", "degraded"), state


def test_python3_present(host):
    cmd = host.run("python3 -c 'import sys, venv; print(sys.version_info[:2] >= (3, 9))'")
    assert cmd.rc == 0 and cmd.stdout.strip() == "True", cmd.stderr


def test_no_network(host):
    # Containers run with --network none: only loopback may exist.
    links = host.run("ip -o link show").stdout
    names = {line.split(":")[1].strip().split("@")[0] for line in links.splitlines()}
    assert names == {"lo"}, names
