"""relay.py's workload: deterministic transactions of binlog-sized events cut from one random
pool, generated in bounded batches, and the digest that checks what is read back."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from crc32c import crc32c

from replicad.binlog.position import Position

SEED = 20240611


BINLOG_FILE = "mariadb-bin.000001"


BATCH_TXNS = 512  # transactions generated per batch (outside the clock)


BATCH_BYTES = 8 << 20  # ... or fewer, when they add up to this many event bytes


@dataclass(frozen=True, slots=True)
class Workload:
    seed: int
    events: tuple[int, int]  # events per ordinary transaction (inclusive)
    event_bytes: tuple[int, int]  # bytes per event of an ordinary transaction
    big_fraction: float  # share of transactions that are big
    big_mib: tuple[float, float]  # size of a big transaction
    big_event_bytes: tuple[int, int] = (2048, 8192)  # row events are ~8 KiB at most

    @property
    def pool_bytes(self) -> int:
        return (16 << 20) + int(self.big_mib[1] * (1 << 20) if self.big_fraction else 0)

    def mean_txn_bytes(self) -> float:
        small = (sum(self.events) / 2) * (sum(self.event_bytes) / 2)
        big = sum(self.big_mib) / 2 * (1 << 20)
        return (1 - self.big_fraction) * small + self.big_fraction * big


@dataclass(slots=True)
class Txn:
    """One generated transaction: its events are consecutive slices of the pool starting at
    `offset`, so the raw writer can write the whole transaction as one zero-copy slice."""

    offset: int
    sizes: list[int]
    position: Position
    commit_ts: int

    @property
    def nbytes(self) -> int:
        return sum(self.sizes)


def make_pool(workload: Workload) -> bytes:
    return random.Random(workload.seed ^ 0x5EED).randbytes(workload.pool_bytes)


def generate(workload: Workload, count: int) -> Iterator[Txn]:
    """The first `count` transactions of the workload (the same prefix for any count)."""
    rng = random.Random(workload.seed)
    rand = rng.random
    ev_lo, ev_hi = workload.events
    sz_lo, sz_hi = workload.event_bytes
    big_lo, big_hi = (int(m * (1 << 20)) for m in workload.big_mib)
    bev_lo, bev_hi = workload.big_event_bytes
    cursor, pos = 0, 4
    for i in range(count):
        if workload.big_fraction and rand() < workload.big_fraction:
            target = big_lo + int((big_hi - big_lo) * rand())
            sizes, total = [], 0
            while total < target:
                size = min(bev_lo + int((bev_hi - bev_lo + 1) * rand()), target - total)
                sizes.append(size)
                total += size
        else:
            n = ev_lo + int((ev_hi - ev_lo + 1) * rand())
            sizes = [sz_lo + int((sz_hi - sz_lo + 1) * rand()) for _ in range(n)]
            total = sum(sizes)
        if cursor + total > workload.pool_bytes:
            cursor = 0
        pos += total + 19
        yield Txn(cursor, sizes, Position(BINLOG_FILE, pos), 1_700_000_000 + i // 100)
        cursor += total


def batches(workload: Workload, count: int) -> Iterator[list[Txn]]:
    batch: list[Txn] = []
    size = 0
    for txn in generate(workload, count):
        batch.append(txn)
        size += txn.nbytes
        if len(batch) >= BATCH_TXNS or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def events_of(pool: bytes, txn: Txn) -> list[bytes]:
    """The transaction's events as bytes objects (as the source hands them over)."""
    out, at = [], txn.offset
    for size in txn.sizes:
        out.append(pool[at : at + size])
        at += size
    return out


@dataclass(slots=True)
class Digest:
    """What a stream of transactions holds: counts, and CRC32Cs of the event bytes (in order)
    and of each transaction's position, commit timestamp and event lengths."""

    txns: int = 0
    events: int = 0
    event_bytes: int = 0
    data_crc: int = 0
    meta_crc: int = 0

    def add_meta(self, pos: int, commit_ts: int, lengths: list[int]) -> None:
        n = len(lengths)
        meta = struct.pack(f"<QQI{n}I", pos, commit_ts, n, *lengths)
        self.meta_crc = crc32c(meta, self.meta_crc)
        self.txns += 1
        self.events += n

    def as_json(self) -> dict[str, Any]:
        return {
            "txns": self.txns,
            "events": self.events,
            "event_bytes": self.event_bytes,
            "data_crc32c": f"{self.data_crc:08x}",
            "meta_crc32c": f"{self.meta_crc:08x}",
        }

    def same(self, other: Digest) -> bool:
        return self.as_json() == other.as_json()


def digest_batch(digest: Digest, pool: bytes, batch: list[Txn]) -> None:
    view = memoryview(pool)
    for txn in batch:
        total = txn.nbytes
        digest.data_crc = crc32c(view[txn.offset : txn.offset + total], digest.data_crc)
        digest.event_bytes += total
        digest.add_meta(txn.position.pos, txn.commit_ts, txn.sizes)
