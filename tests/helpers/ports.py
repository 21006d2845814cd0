"""Free TCP ports on 127.0.0.1 for the private servers tests start, stop and restart."""

from __future__ import annotations

import random
import socket


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(count: int, low: int = 21000, high: int = 32000) -> int:
    """The first of `count` consecutive ports free on 127.0.0.1 (random, to avoid other runs).
    Below the kernel's ephemeral range (32768 up): there an outgoing connection can take the
    port of a server the test killed, and the server cannot start on it again."""
    for _ in range(200):
        base = random.randrange(low, high - count)
        if all(_port_free(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no block of {count} free ports found")
