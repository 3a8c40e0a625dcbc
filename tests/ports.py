"""A free loopback TCP port for a server a test starts, chosen outside the kernel's ephemeral
range.

A port found by binding to 0 comes from the ephemeral range, and so does every port Ray, vLLM
and their workers pick the same way (and Ray's dashboard agent listens on 52365, inside it): a
test that picks such a port and hands it to a server started a moment later races them for it
(a Ray Serve proxy once failed with "Failed to bind to address '127.0.0.1:52365'"). Ports
between 20000 (above Ray's worker ports, 10002-19999) and the start of the ephemeral range are
taken by nothing that binds to 0."""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOW = 20000
RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_start() -> int:
    try:
        return int(RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port free on loopback now, below the ephemeral range where it can be (else any
    free port the kernel gives)."""
    high = _ephemeral_start() - 1
    if high - LOW >= 1000:
        rng = random.SystemRandom()
        for _ in range(200):
            port = rng.randint(LOW, high)
            if _bindable(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
