"""Shared by the relay tests: a fake FORMAT_DESCRIPTION event and random transactions.
The relay stores event bytes opaquely (only the FDE's identity matters to it), so random
bytes are fair events here; tests through the daemon use real binlog events."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

from replicad.binlog.position import Position
from replicad.relay.writer import RelayWriter


def fake_fde(server_version: bytes = b"10.11.6-MariaDB", created: int = 0) -> bytes:
    """19-byte header, binlog version 4, server version (50), create timestamp (4), header
    length 19, a few post-header lengths, checksum algorithm 1 and a CRC trailer."""
    body = (
        (4).to_bytes(2, "little")
        + server_version.ljust(50, b"\0")
        + created.to_bytes(4, "little")
        + bytes([19])
        + bytes(range(1, 40))
        + bytes([1])
    )
    size = 19 + len(body) + 4
    header = bytes(4) + bytes([15]) + (1).to_bytes(4, "little") + size.to_bytes(4, "little")
    header += bytes(6)
    return header + body + created.to_bytes(4, "little")


@dataclass(slots=True)
class Txn:
    events: list[bytes]
    position: Position
    commit_ts: int


def random_transactions(
    rng: random.Random, n: int, *, start_pos: int = 4, big: int = 0
) -> list[Txn]:
    """n transactions of 1..8 events of 0..3000 bytes; `big` of them with 100 KiB events
    adding up to 1-3 MiB."""
    out: list[Txn] = []
    pos = start_pos
    big_at = set(rng.sample(range(n), min(big, n)))
    for i in range(n):
        if i in big_at:
            events = [rng.randbytes(100 * 1024) for _ in range(rng.randint(10, 30))]
        else:
            events = [rng.randbytes(rng.randint(0, 3000)) for _ in range(rng.randint(1, 8))]
        pos += sum(len(e) for e in events) + 19
        out.append(Txn(events, Position("mariadb-bin.000001", pos), 1_700_000_000 + i))
    return out


def crash(writer: RelayWriter) -> None:
    """What the kernel does for a writer whose process died: its descriptors close (the
    directory lock goes with them), nothing is synced, the manifest is left as it was."""
    if writer._fd is not None:
        os.close(writer._fd)
        writer._fd = None
    writer._process_lock.release()


def events_of(i: int) -> list[bytes]:
    """Transaction i's events, the same in every process: mostly small, every 5th spans
    several 64 KiB blocks and parts."""
    rng = random.Random(i)
    if i % 5 == 0:
        return [rng.randbytes(40_000) for _ in range(rng.randint(3, 20))]
    return [rng.randbytes(rng.randint(0, 2000)) for _ in range(rng.randint(1, 6))]
