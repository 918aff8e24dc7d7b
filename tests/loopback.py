"""Loopback helpers shared by the tests and benches (importable as ``loopback`` once
tests/conftest.py has run)."""

import socket


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
