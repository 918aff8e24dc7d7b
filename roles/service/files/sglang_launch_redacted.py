# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Start SGLang with the secrets of its ``--config`` file kept out of what it prints.

Usage (the unit's ExecStart)::

    <venv>/bin/python sglang_launch_redacted.py -m sglang.launch_server ... --config FILE ...
    <venv>/bin/python sglang_launch_redacted.py -- /path/to/program args...

Why: SGLang 0.5.23 logs every server argument once at startup, the API key included
(srt/entrypoints/engine.py ``Engine._launch_subprocesses``: ``logger.info(f"server_args=...")``
with ``_server_args_for_logging``, whose ``redact_watermark_secrets`` hides watermark keys only).
Under systemd that line goes to the journal, which every member of the adm and systemd-journal
groups reads.

How, and what it keeps:

* The secrets are the string values of the options in the ``--config`` file whose name ends in
  ``key``, ``password``, ``secret`` or ``token`` (``api-key``, ``admin-api-key``, ...). They are
  read here from the file and handed to the filter through an anonymous pipe: never in argv,
  never in the environment.
* stdout and stderr become pipes before SGLang starts, so SGLang and every process it starts
  (schedulers, detokenizer, anything multiprocessing spawns or forks) write into them; a filter
  process replaces each secret, its Python ``repr`` and JSON spellings included, by
  ``<redacted>`` and writes the rest to the original stdout/stderr (the journal), in order.
  The filter holds back only a trailing piece that could be the start of a secret, so a secret
  split across writes is still found, and nothing else waits.
* This process then ``exec``s SGLang: the unit's MainPID is the SGLang server itself, so its
  exit status, the signals systemd sends and ``systemctl show -p MainPID`` are SGLang's own.
* The filter is not SGLang's child (it is forked twice and re-executed under its own command
  line), so SGLang's ``kill_process_tree`` on a crash cannot take it down before the crash's
  last lines are written, and process sweeps looking for ``sglang.launch_server`` do not match
  it. It ignores SIGTERM/SIGINT/SIGHUP and exits once every writer has closed the pipes, which
  KillMode=control-group guarantees at a stop.

Without a ``--config`` file, or one that holds no secret, SGLang is exec'd directly.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import select
import signal
import stat
import sys

REDACTED = b"<redacted>"
SECRET_OPTION = re.compile(r"(key|password|secret|token)$")
PROG = "sglang_launch_redacted"


# --------------------------------------------------------------------------- the secrets

def _plain_scalar(word):
    word = word.strip()
    if len(word) >= 2 and word[0] == word[-1] == '"':
        return json.loads(word)
    if len(word) >= 2 and word[0] == word[-1] == "'":
        return word[1:-1].replace("''", "'")
    return word.split(" #", 1)[0].strip()


def _load_flat_yaml(text):
    """The ``key: value`` subset the service role writes, for a Python without PyYAML."""
    data = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition(":")
        if not sep or line[:1].isspace():
            raise ValueError("only flat 'option: value' lines can be read without PyYAML")
        data[name.strip()] = _plain_scalar(value)
    return data


def load_config(path):
    """The ``--config`` file as a dict (yaml.safe_load, as SGLang's ConfigArgumentMerger)."""
    with open(path) as handle:
        text = handle.read()
    try:
        import yaml
    except ImportError:
        return _load_flat_yaml(text)
    data = yaml.safe_load(text)
    return data if isinstance(data, dict) else {}


def secrets_of(config):
    """Secret values of a ``--config`` dict, longest first."""
    found = set()
    for name, value in config.items():
        option = str(name).strip().lstrip("-").replace("_", "-").lower()
        if not SECRET_OPTION.search(option):
            continue
        if value is None or isinstance(value, (bool, dict, list)):
            continue
        text = str(value)
        if text:
            found.add(text)
    return sorted(found, key=lambda text: (-len(text), text))


def spellings(secret):
    """The byte strings a secret can appear as in a log: itself, inside a Python repr (SGLang
    logs a dict of its arguments) and inside JSON."""
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1],
             json.dumps(secret, ensure_ascii=False)[1:-1]}
    out = set()
    for form in forms:
        if form:
            out.add(form.encode("utf-8", "surrogateescape"))
    return sorted(out, key=len, reverse=True)


def config_path(command):
    """The word after ``--config`` (SGLang merges the file only for that exact word)."""
    for index, word in enumerate(command[:-1]):
        if word == "--config":
            return command[index + 1]
    return None


# --------------------------------------------------------------------------- the filter

class Redactor(object):
    """Streaming replacement of a set of byte strings: ``feed`` returns what can be written now,
    ``flush`` the rest at the end. Only a trailing piece that is a proper prefix of a pattern is
    held back, so no pattern can pass split over two writes."""

    def __init__(self, patterns):
        self.patterns = sorted(set(p for p in patterns if p), key=len, reverse=True)
        self.pending = b""

    def _replace(self, data):
        for pattern in self.patterns:
            data = data.replace(pattern, REDACTED)
        return data

    def _held(self, data):
        keep = 0
        for pattern in self.patterns:
            for size in range(min(len(pattern) - 1, len(data)), keep, -1):
                if data.endswith(pattern[:size]):
                    keep = size
                    break
        return keep

    def feed(self, chunk):
        if not self.patterns:
            return chunk
        data = self._replace(self.pending + chunk)
        keep = self._held(data)
        self.pending = data[len(data) - keep:] if keep else b""
        return data[:len(data) - keep] if keep else data

    def flush(self):
        data, self.pending = self.pending, b""
        return data


def _write_all(fd, data):
    while data:
        try:
            written = os.write(fd, data)
        except InterruptedError:
            continue
        except OSError:
            return False  # the journal went away: keep draining so the writers never block
        data = data[written:]
    return True


def run_filter(secrets_fd, pipes):
    """The filter process: ``pipes`` maps a read end to the fd its redacted text goes to."""
    chunks = []
    while True:
        chunk = os.read(secrets_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(secrets_fd)
    patterns = []
    for secret in json.loads(b"".join(chunks).decode("utf-8", "surrogateescape")):
        patterns.extend(spellings(secret))
    redactors = dict((fd, Redactor(patterns)) for fd in pipes)
    open_fds = set(pipes)
    alive = dict((out, True) for out in pipes.values())
    while open_fds:
        try:
            ready, _unused_w, _unused_x = select.select(sorted(open_fds), [], [])
        except InterruptedError:
            continue
        for fd in ready:
            try:
                chunk = os.read(fd, 65536)
            except InterruptedError:
                continue
            out = pipes[fd]
            data = redactors[fd].feed(chunk) if chunk else redactors[fd].flush()
            if data and alive[out]:
                alive[out] = _write_all(out, data)
            if not chunk:
                open_fds.discard(fd)
                os.close(fd)
    return 0


# --------------------------------------------------------------------------- the launch

def _same_file(fd_a, fd_b):
    try:
        a, b = os.fstat(fd_a), os.fstat(fd_b)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) and not stat.S_ISREG(a.st_mode)


def _usable(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def start_filter(secrets):
    """Pipes for fds 1 and 2, the filter process behind them; returns {target fd: write end}."""
    targets = [fd for fd in (1, 2) if _usable(fd)]
    if not targets:
        return {}
    shared = len(targets) == 2 and _same_file(1, 2)
    read_ends, write_ends = {}, {}
    for fd in ([1] if shared else targets):
        read_end, write_end = os.pipe()
        read_ends[read_end] = fd
        write_ends[fd] = write_end
    if shared:
        write_ends[2] = write_ends[1]
    secrets_read, secrets_write = os.pipe()
    payload = json.dumps(secrets).encode("utf-8", "surrogateescape")
    if len(payload) > 60000:
        raise ValueError("the --config file holds too many secrets to pass through a pipe")
    os.write(secrets_write, payload)  # fits the pipe's buffer: nobody reads it yet
    os.close(secrets_write)

    middle = os.fork()
    if middle == 0:  # pragma: no cover - runs in a forked process
        try:
            if os.fork() != 0:
                os._exit(0)
            # The filter: reparented to the nearest subreaper (systemd), still in the unit's cgroup.
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)  # kept across exec: drain until EOF instead
            for write_end in set(write_ends.values()):
                os.close(write_end)
            argv = [sys.executable, "-I", os.path.abspath(__file__), "--filter", str(secrets_read)]
            for read_end, fd in sorted(read_ends.items()):
                os.set_inheritable(read_end, True)
                argv.append("%d:%d" % (read_end, fd))
            os.set_inheritable(secrets_read, True)
            os.execv(sys.executable, argv)
        finally:
            os._exit(127)
    os.close(secrets_read)
    for read_end in read_ends:
        os.close(read_end)
    os.waitpid(middle, 0)
    return write_ends


def launch(args):
    if args[:1] == ["-m"] and len(args) >= 2:
        command = [sys.executable] + args
    elif args[:1] == ["--"] and len(args) >= 2:
        command = args[1:]
    else:
        sys.stderr.write("usage: %s -m MODULE [ARGS...] | -- PROGRAM [ARGS...]\n" % PROG)
        return 2
    path = config_path(command)
    secrets = []
    if path is not None:
        try:
            secrets = secrets_of(load_config(path))
        except (IOError, OSError):
            secrets = []  # SGLang cannot read it either, and says so itself
        except Exception as exc:  # a file SGLang may read: never start without hiding its secrets
            sys.stderr.write("%s: cannot read the secrets of %s (%s); not starting SGLang with "
                             "them in its log. Fix the file, or turn log redaction off.\n"
                             % (PROG, path, type(exc).__name__))
            return 2
    if secrets:
        write_ends = start_filter(secrets)
        for fd, write_end in write_ends.items():
            os.dup2(write_end, fd)
        for write_end in set(write_ends.values()):
            if write_end not in (1, 2):
                os.close(write_end)
    try:
        os.execv(command[0], command)
    except OSError as exc:
        sys.stderr.write("%s: cannot run %s: %s\n" % (PROG, command[0], exc.strerror))
        return 127


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--filter"]:
        pipes = dict((int(a), int(b)) for a, b in (word.split(":") for word in args[2:]))
        return run_filter(int(args[1]), pipes)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
