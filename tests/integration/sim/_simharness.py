"""Helpers to run the simulator as a real process on loopback, in a tmp state/dev dir,
and a tiny asyncio HTTP/SSE client."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from loopback import free_port

ROOT = Path(__file__).resolve().parents[3]
SIM_DIR = ROOT / "sim"
MODEL = "Qwen/Qwen3.5-122B-A10B"
SPEC3 = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def sim_env(tmp_path, **extra):
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": str(SIM_DIR),
        "SGLANG_SIM_CONFIG": str(tmp_path / "no-config.json"),
        "SGLANG_SIM_STATE_DIR": str(tmp_path / "state"),
        "SGLANG_SIM_DEV_DIR": str(tmp_path / "dev"),
        "SGLANG_SIM_TIME_SCALE": "0.05",
        "SGLANG_SIM_LOAD_SECONDS": "4",
        "SGLANG_SIM_PROFILE": "rtx-pro-6000-x4",
    })
    for k in ("SGLANG_SIM_ORPHANS", "SGLANG_SIM_ORPHANS_KEEP_PORT", "SGLANG_SIM_WEDGE_AFTER",
              "SGLANG_SIM_GPU_MEMORY_MIB", "SGLANG_SIM_SEED"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def state_pids(tmp_path):
    d = tmp_path / "state" / "procs"
    if not d.is_dir():
        return []
    out = []
    for f in d.glob("*.json"):
        try:
            out.append(int(json.loads(f.read_text())["pid"]))
        except (ValueError, KeyError, OSError):
            pass
    return out


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except OSError:
        return False


class Sim(object):
    def __init__(self, tmp_path, args, env_extra=None, port=None):
        self.tmp = tmp_path
        self.port = port or free_port()
        self.env = sim_env(tmp_path, **(env_extra or {}))
        self.log_path = tmp_path / ("sim-%d.log" % self.port)
        self.argv = [sys.executable, "-m", "sglang_sim.launch_server", "--model-path", MODEL,
                     "--tp-size", "4", "--host", "127.0.0.1", "--port", str(self.port)] + list(args)
        self.log = open(self.log_path, "wb")
        self.known_children = set()
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    @property
    def output(self):
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("sim exited %s:\n%s" % (self.proc.returncode, self.output))
            if "The server is fired up and ready to roll!" in self.output:
                self.known_children = set(self.children())
                return self
            time.sleep(0.05)
        raise AssertionError("sim not ready in %ss:\n%s" % (timeout, self.output))

    def wait_exit(self, timeout=30):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("sim did not exit:\n%s" % self.output)

    def children(self):
        """Pids of this sim's rank/detokenizer children (from /proc, by parent pid)."""
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % entry) as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == self.proc.pid:
                out.append(int(entry))
        return out

    def stop(self):
        pids = set(state_pids(self.tmp)) | set(self.children()) | self.known_children
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # Only pids this sim started (state files of this tmp dir / its children).
        for pid in pids:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        self.log.close()


# ---------------------------------------------------------------- a tiny asyncio client
async def request(port, method, path, body=None, headers=None, stream=False):
    """One HTTP/1.1 request. Returns (status, headers, body bytes) or, for stream=True,
    (status, headers, list of (arrival time, SSE data string))."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = b""
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"Host": "127.0.0.1", "Content-Type": "application/json",
            "Content-Length": str(len(data)), "Connection": "close"}
    hdrs.update(headers or {})
    head = "%s %s HTTP/1.1\r\n%s\r\n\r\n" % (
        method, path, "\r\n".join("%s: %s" % kv for kv in hdrs.items()))
    writer.write(head.encode() + data)
    await writer.drain()
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    rh = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        k, v = line.decode().split(":", 1)
        rh[k.strip().lower()] = v.strip()
    chunked = rh.get("transfer-encoding") == "chunked"
    events = []
    buf = b""
    raw = []
    while True:
        if chunked:
            size = int((await reader.readline()).strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                break
            chunk = await reader.readexactly(size)
            await reader.readline()
        else:
            chunk = await reader.read(65536)
            if not chunk:
                break
        raw.append(chunk)
        if stream:
            buf += chunk
            now = time.monotonic()
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                assert ev.startswith(b"data: "), ev
                events.append((now, ev[6:].decode()))
    writer.close()
    if stream:
        return status, rh, events
    return status, rh, b"".join(raw)


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)
