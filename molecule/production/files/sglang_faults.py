"""Fault driver of the production scenario, run on the node as root: inflicts a fault on the
running unit and measures how long the unit takes, on its own, to serve tokens again.

The API key is read from the unit's --config file and only sent in an HTTP header; nothing
this script prints or passes on a command line contains it. Prints one JSON object."""

import argparse
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


def key(path):
    with open(path) as fh:
        for line in fh:
            if line.strip().startswith("api-key:"):
                return json.loads(line.split(":", 1)[1].strip())
    return ""


def tokens(url, api_key, timeout):
    body = json.dumps({"text": "ping", "sampling_params": {"max_new_tokens": 4, "temperature": 0.0,
                                                           "ignore_eos": True}}).encode()
    req = urllib.request.Request(url + "/generate", data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + api_key})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(json.loads(resp.read())["meta_info"]["completion_tokens"])
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return 0


def health(url):
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


def show(unit, prop):
    return subprocess.run(["systemctl", "show", unit, "-p", prop, "--value"],
                          stdout=subprocess.PIPE, check=True).stdout.decode().strip()


def sglang_pids():
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as fh:
                if fh.read().startswith(b"sglang::"):
                    out.append(int(pid))
        except (OSError, ValueError):
            pass
    return sorted(out)


def port_taken(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def wait_serving(url, api_key, since, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if tokens(url, api_key, 2):
            return round(time.time() - since, 2)
        time.sleep(0.1)
    return None


def sim_config(path, **changes):
    with open(path) as fh:
        data = json.load(fh)
    for k, v in changes.items():
        if v is None:
            data.pop(k, None)
        else:
            data[k] = v
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


# SGLang 0.5.23's /dev/shm families (srt/utils/stale_shm_cleanup.py), for the report below.
SHM_FAMILIES = ("sgl_shm_", "multi_tokenizer_args_", "sglang_loads_", "cuda.shm.", "nccl-", "sem.loky-")


def shm_report(shm_dir, user):
    """Every file of /dev/shm with its owner, whether it is one of SGLang's families and which
    live processes map it or hold it open (read as root, so every process counts)."""
    holders = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        paths = set()
        try:
            with open("/proc/%s/maps" % pid) as fh:
                for line in fh:
                    parts = line.split(None, 5)
                    if len(parts) == 6:
                        paths.add(parts[5].strip())
            for fd in os.listdir("/proc/%s/fd" % pid):
                paths.add(os.readlink("/proc/%s/fd/%s" % (pid, fd)))
        except OSError:
            continue
        for path in paths:
            holders.setdefault(path, []).append(int(pid))
    uid = pwd.getpwnam(user).pw_uid
    out = []
    for name in sorted(os.listdir(shm_dir)):
        st = os.lstat(os.path.join(shm_dir, name))
        out.append({"name": name, "service_user": st.st_uid == uid, "sglang": name.startswith(SHM_FAMILIES),
                    "held_by": sorted(holders.get(os.path.join(shm_dir, name), []))})
    return out


def plant(shm_dir, user):
    """Segments a crash loop must leave alone or take: another user's (root's) NCCL segment,
    a service-user file outside SGLang's families, and a service-user SGLang segment whose
    creator (a process that ran and exited) is dead."""
    pw = pwd.getpwnam(user)
    dead = subprocess.Popen(["true"])
    dead.wait()
    made = {"foreign": "nccl-molRoo", "not_sglang": "psm_molecule",
            "dead_creator": "sgl_shm_mm_%d_0badc0de" % dead.pid}
    for key, name in made.items():
        path = os.path.join(shm_dir, name)
        with open(path, "wb") as fh:
            fh.write(b"\1" * 4096)
        os.chmod(path, 0o600)
        if key != "foreign":
            os.chown(path, pw.pw_uid, pw.pw_gid)
    return made


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fault", choices=["crash", "wedge", "flap", "plant", "shm"])
    ap.add_argument("--shm-dir", default="/dev/shm")
    ap.add_argument("--user", default="sglang")
    ap.add_argument("--unit", default="sglang-qwen.service")
    ap.add_argument("--url", default="http://127.0.0.1:30000")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--config", default="/etc/sglang/qwen/secrets.yaml")
    ap.add_argument("--sim-config", default="/etc/sglang-sim/config.json")
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--watchdog-record", default="/var/lib/blackwell-sglang/qwen/watchdog.json")
    a = ap.parse_args()
    if a.fault in ("plant", "shm"):
        json.dump(plant(a.shm_dir, a.user) if a.fault == "plant" else shm_report(a.shm_dir, a.user), sys.stdout)
        return 0
    api_key = key(a.config)
    out = {"fault": a.fault}
    if not tokens(a.url, api_key, 10):
        out["error"] = "not serving before the fault"
    elif a.fault == "crash":
        # What the operators saw: SGLang's main process dies and its ranks live on.
        main_pid = int(show(a.unit, "MainPID"))
        before = set(sglang_pids())
        t0 = time.time()
        os.kill(main_pid, signal.SIGKILL)
        time.sleep(0.3)
        out["orphans"] = len(before & set(sglang_pids()))
        out["port_held_by_orphans"] = port_taken(a.port)
        out["seconds_to_serving"] = wait_serving(a.url, api_key, t0, a.timeout)
        out["orphans_left"] = len(before & set(sglang_pids()))
    else:
        # The scheduler stops after 1 simulated second of serving; /health keeps answering.
        sim_config(a.sim_config, wedge_after=1)
        subprocess.run(["systemctl", "restart", a.unit], check=True)
        invocation = show(a.unit, "InvocationID")
        deadline = time.time() + a.timeout
        while time.time() < deadline and not tokens(a.url, api_key, 2) and health(a.url) != 200:
            time.sleep(0.1)
        if a.fault == "wedge":
            # Read at start by the server now up: one wedge, the next start is healthy again.
            sim_config(a.sim_config, wedge_after=None)
        t0 = None
        while time.time() < deadline:
            if health(a.url) == 200 and not tokens(a.url, api_key, 1):
                t0 = time.time()
                break
        out["wedged"] = t0 is not None
        out["health_while_wedged"] = health(a.url)
        if a.fault == "wedge":
            if t0 is not None:
                out["seconds_to_serving"] = wait_serving(a.url, api_key, t0, a.timeout)
            out["restarted"] = show(a.unit, "InvocationID") != invocation
        else:
            # A restart passes through "inactive" too: the watchdog's record says when it gave up.
            while time.time() < deadline:
                try:
                    with open(a.watchdog_record) as fh:
                        if json.load(fh).get("gave_up"):
                            break
                except (OSError, ValueError):
                    pass
                time.sleep(0.5)
            while time.time() < deadline and show(a.unit, "ActiveState") not in ("inactive", "failed"):
                time.sleep(0.5)
            sim_config(a.sim_config, wedge_after=None)
            out["seconds_to_stopped"] = round(time.time() - t0, 2) if t0 else None
            out["active_state"] = show(a.unit, "ActiveState")
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
