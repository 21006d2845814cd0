#!/usr/bin/env python3
"""Benchmark the local relay log (replicad/relay) against the disk it runs on.

One run, on one filesystem (`--dir`, default a temp dir under bench/data/, refused on tmpfs):
  1. appends N generated transactions with RelayWriter under each fsync policy
     (`os`, `interval`, `transaction`), open() to close() (the final fsync) timed;
  2. writes the same event bytes in the same per-transaction write sizes to a plain file
     (dd-style): no fsync, one fdatasync at the end, fdatasync after every transaction;
  3. records per-transaction latency: relay commit() calls vs raw write(+fdatasync);
  4. reads every relay directory back with RelayReader (cold: our files evicted from the
     page cache first) and the same files with plain 1 MiB reads, cold and warm;
  5. checks that every relay directory reads back exactly what was written (transaction and
     event counts, positions, commit timestamps, event lengths and a CRC32C of the bytes),
     prints a table and the relay / raw ratios (and JSON with --json); exits 1 on a mismatch.

The workload is generated deterministically from --seed in bounded batches (outside the
clock), as slices of one random pool, so memory does not grow with N.

Usage: .venv/bin/python bench/relay.py [--txns N] [--big-fraction F] [--json [PATH]]
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import io
import json
import logging
import mmap
import os
import platform
import pstats
import random
import shutil
import struct
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from crc32c import crc32c

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # python bench/relay.py: bench/ is sys.path[0]
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from replicad.binlog.position import Position  # noqa: E402
from replicad.errors import ReplicadError  # noqa: E402
from replicad.relay import records, segment  # noqa: E402
from replicad.relay.reader import RelayReader  # noqa: E402
from replicad.relay.writer import RelayOptions, RelayWriter  # noqa: E402
from tests.helpers.relay_helpers import fake_fde  # noqa: E402

DATA_DIR = ROOT / "bench" / "data"
DEFAULT_TXNS = 100_000
DEFAULT_SYNC_TXNS = 20_000  # the fdatasync-per-transaction runs (~0.25 ms each here)
SEED = 20240611
BINLOG_FILE = "mariadb-bin.000001"
BATCH_TXNS = 512  # transactions generated per batch (outside the clock)
BATCH_BYTES = 8 << 20  # ... or fewer, when they add up to this many event bytes
READ_BYTES = 1 << 20  # the raw read size (SegmentScan reads 1 MiB slices too)
POLICIES = ("os", "interval", "transaction")
MEMORY_FILESYSTEMS = {"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"}
DEFAULTS = RelayOptions()
MB = 1e6  # throughput in MB/s (10^6 bytes); sizes in the table too


# --------------------------------------------------------------------------- workload


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


# --------------------------------------------------------------------------- measurement


class Histogram:
    """Latencies in ns, bounded memory: buckets of < 1/64 relative width."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0
        self.max = 0

    def add_all(self, samples: array) -> None:
        counts = self.counts
        for ns in samples:
            shift = max(ns.bit_length() - 7, 0)
            key = (shift << 8) | (ns >> shift)
            counts[key] = counts.get(key, 0) + 1
        if samples:
            self.n += len(samples)
            self.max = max(self.max, max(samples))

    def percentile(self, p: float) -> float | None:
        if not self.n:
            return None
        rank = max(1, int(p / 100 * self.n + 0.999999))
        seen = 0
        for key in sorted(self.counts):
            seen += self.counts[key]
            if seen >= rank:
                shift, mantissa = key >> 8, key & 0xFF
                return ((mantissa << shift) + ((1 << shift) >> 1)) / 1000  # µs, bucket middle
        return self.max / 1000

    def as_json(self) -> dict[str, Any] | None:
        if not self.n:
            return None
        return {
            "n": self.n,
            "p50_us": self.percentile(50),
            "p99_us": self.percentile(99),
            "p99_9_us": self.percentile(99.9),
            "max_us": self.max / 1000,
        }


def _kthread_cpu_ticks() -> int:
    """CPU ticks of kernel threads (writeback workers, ...), children of kthreadd (pid 2)."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = common.stat_fields(name)
        if fields is None:
            continue
        if name == "2" or fields[1] == "2":  # ppid
            total += common.cpu_ticks(fields)
    return total


def _cpu_stall_us() -> int | None:
    """PSI: microseconds in which some runnable task waited for a CPU."""
    try:
        with open("/proc/pressure/cpu") as f:
            some = f.readline().split()
    except OSError:
        return None
    return int(some[-1].split("=")[1])


class CpuMeter:
    """CPU used during a phase: by this process, by kernel threads, and by everything else
    on the machine (another test run makes the phase's figures unreliable)."""

    TICK = common.CLK_TCK

    def __init__(self) -> None:
        self.wall = time.monotonic()
        self.self_cpu = sum(os.times()[:2])
        self.machine = common.machine_ticks()[0]
        self.kthreads = _kthread_cpu_ticks()
        self.stall = _cpu_stall_us()

    def stop(self) -> dict[str, float]:
        wall = max(time.monotonic() - self.wall, 1e-9)
        stall = _cpu_stall_us()
        own = sum(os.times()[:2]) - self.self_cpu
        machine = (common.machine_ticks()[0] - self.machine) / self.TICK
        kthreads = (_kthread_cpu_ticks() - self.kthreads) / self.TICK
        return {
            "self_cores": own / wall,
            "kernel_threads_cores": kthreads / wall,
            "other_cores": max(machine - own - kthreads, 0.0) / wall,
            "cpu_stall_share": (
                (stall - self.stall) / 1e6 / wall
                if stall is not None and self.stall is not None
                else -1.0
            ),
            "wall": wall,
        }


class SyncCounter:
    """Counts fdatasync / fsync calls (the relay's own included) while installed."""

    def __init__(self) -> None:
        self.calls = 0
        self._saved: dict[str, Callable[[int], None]] = {}

    def __enter__(self) -> SyncCounter:
        for name in ("fdatasync", "fsync"):
            original = getattr(os, name)
            self._saved[name] = original

            def counted(fd: int, _original: Callable[[int], None] = original) -> None:
                self.calls += 1
                _original(fd)

            setattr(os, name, counted)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._saved.items():
            setattr(os, name, original)


@dataclass(slots=True)
class Result:
    name: str
    kind: str  # write | read
    seconds: float
    digest: Digest
    file_bytes: int = 0
    latency: Histogram | None = None  # relay: commit(); raw: write(+fdatasync) per txn
    txn_latency: Histogram | None = None  # relay: first append() to commit() returned
    syncs: int | None = None
    cpu: dict[str, float] = field(default_factory=dict)
    cache: str | None = None  # reads: how much of the files was in the page cache
    baseline: str | None = None  # the raw row this one is compared with
    note: str = ""

    @property
    def mb_s(self) -> float:
        return self.digest.event_bytes / MB / self.seconds

    @property
    def txn_s(self) -> float:
        return self.digest.txns / self.seconds

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "seconds": round(self.seconds, 4),
            "event_mb_s": round(self.mb_s, 2),
            "txn_s": round(self.txn_s, 1),
            "file_bytes": self.file_bytes,
            "digest": self.digest.as_json(),
            "latency": self.latency.as_json() if self.latency else None,
            "txn_latency": self.txn_latency.as_json() if self.txn_latency else None,
            "syncs": self.syncs,
            "cpu": {k: round(v, 3) for k, v in self.cpu.items()},
            "cache": self.cache,
            "baseline": self.baseline,
            "note": self.note,
        }


# --------------------------------------------------------------------------- writing


def relay_options(args: argparse.Namespace, policy: str) -> RelayOptions:
    return RelayOptions(
        segment_bytes=args.segment_mib << 20,
        part_bytes=args.part_kib << 10,
        fsync=policy,  # type: ignore[arg-type]
        fsync_interval_ms=args.interval_ms,
    )


def write_relay(
    directory: Path,
    options: RelayOptions,
    workload: Workload,
    pool: bytes,
    count: int,
    profiler: cProfile.Profile | None = None,
    pipelined: bool = False,
) -> Result:
    """Appends `count` transactions; timed: open() .. close(), without the generation of
    the batches (done between timed stretches, and outside `profiler` if given).
    `pipelined`: commit(wait=False), as the relayed stream does under `transaction` (the
    sync thread groups the commits made during one fdatasync; close() waits for the last)."""
    on = profiler.enable if profiler else _nothing
    off = profiler.disable if profiler else _nothing
    digest, commit_h, txn_h = Digest(), Histogram(), Histogram()
    clock = time.perf_counter_ns
    elapsed = 0
    meter = CpuMeter()
    with SyncCounter() as syncs:
        on()
        start = clock()
        writer = RelayWriter(directory, options, source="bench")
        writer.open()
        writer.set_format(fake_fde(), True)
        append = writer.append
        commit = (lambda p, ts: writer.commit(p, ts, wait=False)) if pipelined else writer.commit
        elapsed += clock() - start
        off()
        for batch in batches(workload, count):
            digest_batch(digest, pool, batch)
            work = [(events_of(pool, txn), txn.position, txn.commit_ts) for txn in batch]
            commit_ns, txn_ns = array("q"), array("q")
            on()
            start = clock()
            for events, position, commit_ts in work:
                t0 = clock()
                for event in events:
                    append(event)
                t1 = clock()
                commit(position, commit_ts)
                t2 = clock()
                commit_ns.append(t2 - t1)
                txn_ns.append(t2 - t0)
            elapsed += clock() - start
            off()
            del work
            commit_h.add_all(commit_ns)
            txn_h.add_all(txn_ns)
        on()
        start = clock()
        writer.close()
        elapsed += clock() - start
        off()
    return Result(
        f"relay {options.fsync}"
        + (f" {options.fsync_interval_ms} ms" * (options.fsync == "interval"))
        + (", commit(wait=False)" * pipelined),
        "write",
        elapsed / 1e9,
        digest,
        file_bytes=sum(p.stat().st_size for p in directory.glob("relay-*.log")),
        latency=commit_h,
        txn_latency=txn_h,
        syncs=syncs.calls,
        cpu=meter.stop(),
    )


def _nothing() -> None:
    pass


RAW_MODES = {
    "none": "raw write, no fsync",
    "end": "raw write, fdatasync at end",
    "txn": "raw write+fdatasync/txn",
}


def write_raw(path: Path, mode: str, workload: Workload, pool: bytes, count: int) -> Result:
    """dd-style: each transaction's event bytes as one write() (a zero-copy slice of the
    pool), to one file; timed: open() .. close()."""
    digest, lat = Digest(), Histogram()
    clock = time.perf_counter_ns
    view = memoryview(pool)
    per_txn = mode == "txn"
    write, fdatasync = os.write, os.fdatasync
    elapsed = 0
    meter = CpuMeter()
    start = clock()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    elapsed += clock() - start
    for batch in batches(workload, count):
        digest_batch(digest, pool, batch)
        work = [view[t.offset : t.offset + t.nbytes] for t in batch]
        samples = array("q")
        start = clock()
        for data in work:
            t0 = clock()
            while data:
                data = data[write(fd, data) :]
            if per_txn:
                fdatasync(fd)
            samples.append(clock() - t0)
        elapsed += clock() - start
        lat.add_all(samples)
    start = clock()
    if mode == "end":
        fdatasync(fd)
    os.close(fd)
    elapsed += clock() - start
    size = path.stat().st_size
    return Result(
        RAW_MODES[mode],
        "write",
        elapsed / 1e9,
        digest,
        file_bytes=size,
        latency=lat,
        syncs={"none": 0, "end": 1, "txn": digest.txns}[mode],
        cpu=meter.stop(),
        note=""
        if size == digest.event_bytes
        else f"file holds {size} bytes, not {digest.event_bytes}",
    )


# --------------------------------------------------------------------------- reading


def read_relay(directory: Path, cache: str) -> Result:
    digest = Digest()
    clock = time.perf_counter_ns
    meter = CpuMeter()
    start = clock()
    data_crc, meta = 0, digest.add_meta
    nbytes, bad_counts = 0, 0
    for txn in RelayReader(directory).transactions():
        lengths = []
        for event in txn.events:
            data_crc = crc32c(event, data_crc)
            lengths.append(len(event))
        nbytes += sum(lengths)
        commit = txn.commit
        if commit.events != len(lengths) or commit.position.file != BINLOG_FILE:
            bad_counts += 1
        meta(commit.position.pos, commit.commit_ts, lengths)
    elapsed = clock() - start
    digest.data_crc, digest.event_bytes = data_crc, nbytes
    return Result(
        "relay read",
        "read",
        elapsed / 1e9,
        digest,
        file_bytes=sum(p.stat().st_size for p in directory.glob("relay-*.log")),
        cpu=meter.stop(),
        cache=cache,
        note=f"{bad_counts} commits disagree with their events" if bad_counts else "",
    )


def read_relay_bare(directory: Path, cache: str) -> Result:
    """The reader alone: transactions iterated, events counted (no checksum)."""
    clock = time.perf_counter_ns
    meter = CpuMeter()
    txns = events = nbytes = 0
    start = clock()
    for txn in RelayReader(directory).transactions():
        txns += 1
        events += len(txn.events)
        nbytes += sum(map(len, txn.events))
    elapsed = clock() - start
    return Result(
        "relay read, warm, bare loop",
        "read",
        elapsed / 1e9,
        Digest(txns, events, nbytes),
        file_bytes=sum(p.stat().st_size for p in directory.glob("relay-*.log")),
        cpu=meter.stop(),
        cache=cache,
    )


def read_raw(files: list[Path], cache: str, digest: Digest) -> Result:
    """Plain sequential 1 MiB reads of the same files (no decoding, no checksum)."""
    buf = bytearray(READ_BYTES)
    clock = time.perf_counter_ns
    meter = CpuMeter()
    total = 0
    start = clock()
    for path in files:
        with open(path, "rb", buffering=0) as f:
            readinto = f.readinto
            while n := readinto(buf):
                total += n
    elapsed = clock() - start
    expected = sum(p.stat().st_size for p in files)
    return Result(
        "raw read (same files)",
        "read",
        elapsed / 1e9,
        digest,  # the event bytes those files hold, for MB/s on the same basis
        file_bytes=total,
        cpu=meter.stop(),
        cache=cache,
        note="" if total == expected else f"read {total} bytes of {expected}",
    )


# --------------------------------------------------------------------------- page cache


_PROT_READ, _MAP_SHARED = mmap.PROT_READ, mmap.MAP_SHARED
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
except (OSError, AttributeError):  # pragma: no cover - not Linux / glibc
    _libc = None


def resident_bytes(path: Path) -> int | None:
    """How much of the file is in the page cache (mincore on a mapping; no page is read)."""
    size = path.stat().st_size
    if _libc is None:
        return None
    if size == 0:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                return None
            return (pages - bytes(vec).count(0)) * mmap.PAGESIZE
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def cache_state(files: list[Path]) -> str:
    size = sum(p.stat().st_size for p in files)
    resident = [resident_bytes(p) for p in files]
    if None in resident or not size:
        return "unknown"
    share = min(sum(r for r in resident if r is not None) / size, 1.0)
    return f"{100 * share:.0f}% cached"


def evict(files: list[Path], how: str) -> None:
    """Make the next read of `files` cold: write back, then drop their pages (`evict`:
    posix_fadvise DONTNEED on these files only; `drop`: the whole page cache, root)."""
    if how == "warm":
        return
    os.sync()
    if how == "drop":
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def can_drop_caches() -> bool:
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")  # page cache only: cheap, and proves it works
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- environment


def mount_of(path: Path) -> dict[str, str]:
    """The mount holding `path` (longest mount point prefix in /proc/self/mountinfo)."""
    real = os.path.realpath(path)
    best: dict[str, str] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            parts = left.split()
            point = parts[4].replace("\\040", " ")
            fstype, source, *rest = right.split()
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best.get("mount", "")):
                best = {
                    "mount": point,
                    "fstype": fstype,
                    "source": source,
                    "options": parts[5],
                    "super_options": rest[0] if rest else "",
                    "dev": parts[2],
                }
    return best


def block_device(dev: str) -> dict[str, Any]:
    """rotational / scheduler / model of the block device behind major:minor `dev`."""
    out: dict[str, Any] = {}
    base = Path("/sys/dev/block") / dev
    if not base.exists():
        return out
    queue = base / "queue"
    if not queue.exists():  # a partition: the queue is the parent's
        queue = base.resolve().parent / "queue"
    for key in ("rotational", "scheduler"):
        try:
            out[key] = (queue / key).read_text().strip()
        except OSError:
            pass
    out["name"] = base.resolve().name
    return out


def machine_info(directory: Path) -> dict[str, Any]:
    mount = mount_of(directory)
    stat = os.statvfs(directory)
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), ""
            )
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "dir": str(directory),
        "filesystem": mount,
        "device": block_device(mount.get("dev", "")),
        "free_gb": round(stat.f_bavail * stat.f_frsize / 1e9, 1),
        "loadavg_start": os.getloadavg(),
        "uid": os.getuid(),
    }


# --------------------------------------------------------------------------- the run


def run(args: argparse.Namespace, root: Path, workload: Workload) -> tuple[list[Result], list[str]]:
    pool = make_pool(workload)
    problems: list[str] = []
    results: list[Result] = []
    written: dict[str, tuple[Path, Digest]] = {}
    counts = {"os": args.txns, "interval": args.txns, "transaction": args.sync_txns}
    raw_counts = {"none": args.txns, "end": args.txns, "txn": args.sync_txns}
    raw_for = {"os": "end", "interval": "end", "transaction": "txn"}
    # warm-up (not reported): imports, allocator, the pool's pages
    warm = root / "warmup"
    write_relay(warm, relay_options(args, "os"), workload, pool, min(2000, args.txns))
    os.sync()
    for rep in range(args.repeat):
        for raw_mode, policy in (("none", "os"), ("end", "interval"), ("txn", "transaction")):
            path = root / f"raw-{raw_mode}-{rep + 1}.bin"  # kept: no unlink/discard between phases
            os.sync()
            res = write_raw(path, raw_mode, workload, pool, raw_counts[raw_mode])
            res.name += f" #{rep + 1}" * (args.repeat > 1)
            results.append(res)
            if res.note:
                problems.append(f"{res.name}: {res.note}")
            directory = root / f"relay-{policy}-{rep + 1}"
            os.sync()
            res = write_relay(
                directory, relay_options(args, policy), workload, pool, counts[policy]
            )
            res.baseline = RAW_MODES[raw_for[policy]]
            res.name += f" #{rep + 1}" * (args.repeat > 1)
            results.append(res)
            if rep + 1 < args.repeat:  # an earlier repeat: verify (warm), then make room
                problems += verify_and_remove(directory, res)
            else:
                written[policy] = (directory, res.digest)
        directory = root / f"relay-transaction-pipelined-{rep + 1}"
        os.sync()
        res = write_relay(
            directory,
            relay_options(args, "transaction"),
            workload,
            pool,
            counts["transaction"],
            pipelined=True,
        )
        res.baseline = RAW_MODES["txn"]
        res.name += f" #{rep + 1}" * (args.repeat > 1)
        results.append(res)
        problems += verify_and_remove(directory, res)
        print(f"  writes #{rep + 1} done", file=sys.stderr)
    os.sync()
    # reads: every relay directory, cold (this verifies them); raw reads of the `os` one
    for policy in POLICIES:
        directory, expected = written[policy]
        files = sorted(directory.glob("relay-*.log"))
        evict(files, args.cache)
        try:
            cold = read_relay(directory, cache_state(files))
        except ReplicadError as exc:
            problems.append(f"relay read ({policy} dir) failed: {exc}")
            continue
        cold.name, cold.baseline = f"relay read, cold ({policy} dir)", "raw read, cold"
        rows = [cold]
        if not cold.digest.same(expected):
            problems.append(
                f"{cold.name}: read back {cold.digest.as_json()} but wrote {expected.as_json()}"
            )
        if policy == "os":
            evict(files, args.cache)
            raw = read_raw(files, cache_state(files), expected)
            raw.name = "raw read, cold"
            warm = read_relay(directory, cache_state(files))
            warm.name, warm.baseline = "relay read, warm", "raw read, warm"
            bare = read_relay_bare(directory, cache_state(files))
            bare.baseline = "raw read, warm"
            warm_raw = read_raw(files, cache_state(files), expected)
            warm_raw.name = "raw read, warm"
            rows += [raw, warm, bare, warm_raw]
            if not warm.digest.same(expected):
                problems.append(f"{warm.name}: read back differs from what was written")
            counted = (bare.digest.txns, bare.digest.events, bare.digest.event_bytes)
            if counted != (expected.txns, expected.events, expected.event_bytes):
                problems.append(f"{bare.name}: counted {counted}, wrote {expected.as_json()}")
        for r in rows:
            if r.note:
                problems.append(f"{r.name}: {r.note}")
        results += rows
    return results, problems


def verify_and_remove(directory: Path, written: Result) -> list[str]:
    """A relay directory not kept for the cold reads: read it back (warm), then delete it."""
    problems = []
    try:
        if not read_relay(directory, "warm").digest.same(written.digest):
            problems.append(f"{written.name}: read back differs from what was written")
    except ReplicadError as exc:
        problems.append(f"{written.name}: reading it back failed: {exc}")
    shutil.rmtree(directory)
    return problems


# --------------------------------------------------------------------------- profiling


def profile(args: argparse.Namespace, root: Path, workload: Workload) -> str:
    """cProfile of the writer (`os` policy: CPU only, no per-commit fsync) and the reader
    (warm), plus the encode-only CPU cost (segment + record framing, no write)."""
    pool = make_pool(workload)
    count = min(args.txns, args.profile_txns)
    out = io.StringIO()
    # encode only: what the writer computes per transaction, without the syscalls
    clock = time.perf_counter_ns
    elapsed, nbytes, offset = 0, 0, 0
    for batch in batches(workload, count):
        work = [(events_of(pool, txn), txn) for txn in batch]
        start = clock()
        for events, txn in work:
            commit = segment.CommitRecord(txn.position, txn.commit_ts, len(events))
            data = records.encode_record(segment.encode_end(commit, events), offset)
            offset += len(data)
        elapsed += clock() - start
        nbytes += sum(t.nbytes for t in batch)
    print(
        f"encode only (encode_end + encode_record, no I/O): {count:,} txns, "
        f"{nbytes / MB / (elapsed / 1e9):,.0f} MB/s, {count / (elapsed / 1e9):,.0f} txn/s, "
        f"{elapsed / count / 1000:.2f} µs/txn\n",
        file=out,
    )
    directory = root / "profile"
    profiler = cProfile.Profile()
    write_relay(directory, relay_options(args, "os"), workload, pool, count, profiler)
    print(f"-- writer, policy os, {count:,} txns (cProfile; own time first)", file=out)
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(14)
    reader = RelayReader(directory)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in reader.transactions():
        pass
    profiler.disable()
    print(f"-- reader (bare loop), {count:,} txns, warm (cProfile; own time first)", file=out)
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(14)
    shutil.rmtree(directory)
    return out.getvalue()


# --------------------------------------------------------------------------- reporting


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


VOLUME_HEAD = ("txns", "event MB", "file MB", "seconds", "MB/s", "txn/s")  # _volume_cells


def format_table(results: list[Result]) -> str:
    head = (
        "write",
        *VOLUME_HEAD,
        "lat p50 µs",
        "p99 µs",
        "max µs",
        "txn max µs",
        "syncs",
        "self CPU",
        "other CPU",
    )
    rows: list[tuple[str, ...]] = []
    for r in results:
        if r.kind != "write":
            continue
        lat = r.latency
        rows.append(
            (
                *_volume_cells(r),
                _us(lat.percentile(50) if lat else None),
                _us(lat.percentile(99) if lat else None),
                _us(lat.max / 1000 if lat else None),
                _us((r.txn_latency or lat).max / 1000 if (r.txn_latency or lat) else None),
                f"{r.syncs:,}" if r.syncs is not None else "-",
                *_cpu_cells(r),
            )
        )
    read_head = (
        "read",
        *VOLUME_HEAD,
        "cache",
        "self CPU",
        "other CPU",
    )
    read_rows: list[tuple[str, ...]] = []
    for r in results:
        if r.kind != "read":
            continue
        read_rows.append(
            (
                *_volume_cells(r),
                r.cache or "-",
                *_cpu_cells(r),
            )
        )
    return common.grid(head, rows) + "\n\n" + common.grid(read_head, read_rows)


def _volume_cells(r: Result) -> tuple[str, ...]:
    """The first columns of both tables: name, txns, event MB, file MB, seconds, MB/s, txn/s."""
    return (
        r.name,
        f"{r.digest.txns:,}",
        f"{r.digest.event_bytes / MB:,.1f}",
        f"{r.file_bytes / MB:,.1f}",
        f"{r.seconds:.2f}",
        f"{r.mb_s:,.0f}",
        f"{r.txn_s:,.0f}",
    )


def _cpu_cells(r: Result) -> tuple[str, str]:
    """Cores used by this process / by other processes; '-' for phases under 0.5 s (the
    kernel counts CPU time in ticks of 10 ms)."""
    if r.cpu.get("wall", 0) < 0.5:
        return "-", "-"
    return f"{r.cpu['self_cores']:.2f}", f"{r.cpu['other_cores']:.2f}"


def ratios(results: list[Result]) -> list[dict[str, Any]]:
    """Relay ÷ its raw baseline (MB/s of event bytes; the median of repeats), and the
    latency added per transaction."""
    out = []

    def pick(name: str) -> list[Result]:
        return [r for r in results if r.name == name or r.name.startswith(name + " #")]

    def median(values: list[float]) -> float:
        values = sorted(values)
        return values[len(values) // 2]

    seen: set[str] = set()
    for r in results:
        base_name = r.name.split(" #")[0]
        if not r.baseline or base_name in seen:
            continue
        seen.add(base_name)
        mine, base = pick(base_name), pick(r.baseline)
        if not mine or not base:
            continue
        entry: dict[str, Any] = {
            "relay": base_name,
            "raw": r.baseline,
            "mb_s_ratio": median([m.mb_s for m in mine]) / median([b.mb_s for b in base]),
        }
        if r.kind == "write":
            entry["vs_no_fsync"] = median([m.mb_s for m in mine]) / median(
                [b.mb_s for b in pick(RAW_MODES["none"])]
            )
            for p in (50, 99):
                got = [m.latency.percentile(p) for m in mine if m.latency]
                ref = [b.latency.percentile(p) for b in base if b.latency]
                if got and ref:
                    entry[f"added_p{p}_us"] = median(got) - median(ref)  # type: ignore[arg-type]
        out.append(entry)
    return out


def report(
    info: dict[str, Any],
    workload: Workload,
    args: argparse.Namespace,
    results: list[Result],
    problems: list[str],
    seconds: float,
) -> dict[str, Any]:
    fs, dev = info["filesystem"], info["device"]
    print(
        f"machine: {info['nproc']} CPUs ({info['cpu']}), Linux {info['kernel']}, "
        f"Python {info['python']}; load average at start "
        f"{' '.join(f'{x:.2f}' for x in info['loadavg_start'])}"
    )
    print(
        f"disk: {info['dir']} on {fs.get('fstype')} ({fs.get('source')} mounted at "
        f"{fs.get('mount')}, {fs.get('options')}; {fs.get('super_options')}); device "
        f"{dev.get('name', '?')} rotational={dev.get('rotational', '?')} scheduler "
        f"{dev.get('scheduler', '?')}; "
        f"{info['free_gb']} GB free"
    )
    big = (
        f", {workload.big_fraction:.2%} big ({workload.big_mib[0]:g}-{workload.big_mib[1]:g} MiB "
        f"in {workload.big_event_bytes[0]}-{workload.big_event_bytes[1]} B events)"
        if workload.big_fraction
        else ""
    )
    print(
        f"workload: seed {workload.seed}, {workload.events[0]}-{workload.events[1]} events of "
        f"{workload.event_bytes[0]}-{workload.event_bytes[1]} B per transaction{big}; relay "
        f"segments {args.segment_mib} MiB, parts {args.part_kib} KiB, interval "
        f"{args.interval_ms} ms, manifest every 1 s; cold reads: {args.cache}\n"
    )
    print(format_table(results))
    print(
        "\nlat: relay = the commit() call (its fdatasync under `transaction`, a due one under "
        "`interval`); raw = write(+fdatasync) of the transaction. txn max: relay = first "
        "append() .. commit() returned (a segment rotation, with its fdatasync of the sealed "
        "segment, happens in the first append() of a transaction). Timed: open() .. close() "
        "(close = final fdatasync), generation excluded. syncs = fdatasync+fsync calls "
        "(manifest and rotations included). self / other CPU: cores used by this process / by "
        "other processes (kernel threads excluded) during the phase. MB = 10^6 B of event bytes."
    )
    table = ratios(results)
    print("\nrelay ÷ raw (event MB/s):")
    w1 = max((len(e["relay"]) for e in table), default=0)
    w2 = max((len(e["raw"]) for e in table), default=0)
    for entry in table:
        extra = ""
        if "vs_no_fsync" in entry:
            extra = f"  (÷ no fsync {entry['vs_no_fsync']:.2f})"
        if "added_p50_us" in entry:
            extra += (
                f"  added latency p50 {entry['added_p50_us']:+,.1f} µs, "
                f"p99 {entry.get('added_p99_us', 0):+,.1f} µs"
            )
        print(
            f"  {entry['relay']:<{w1}}  ÷ {entry['raw']:<{w2}}  {entry['mb_s_ratio']:5.2f}{extra}"
        )
    timed = [r for r in results if r.cpu.get("wall", 0) >= 0.5]
    others = max((r.cpu["other_cores"] for r in timed), default=0.0)
    stall = max((r.cpu.get("cpu_stall_share", -1) for r in timed), default=-1.0)
    if others > 0.3 or stall > 0.1:
        print(
            f"\nnote: other processes used up to {others:.2f} cores during a phase (of "
            f"{info['nproc']}), tasks waited for a CPU up to {max(stall, 0):.0%} of a phase "
            "(PSI cpu some): figures may be disturbed; compare with a re-run"
        )
    print(
        f"\ntotal run time {seconds:.0f} s; load average at end "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    for problem in problems:
        print(f"!!! {problem}", file=sys.stderr)
    if not problems:
        n = len([r for r in results if r.name.startswith("relay read, cold (")])
        print(f"verified: all {n} relay directories read back exactly what was written")
    return {
        "machine": info,
        "workload": {
            "seed": workload.seed,
            "txns": args.txns,
            "sync_txns": args.sync_txns,
            "events": workload.events,
            "event_bytes": workload.event_bytes,
            "big_fraction": workload.big_fraction,
            "big_mib": workload.big_mib,
        },
        "options": {
            "segment_mib": args.segment_mib,
            "part_kib": args.part_kib,
            "interval_ms": args.interval_ms,
            "cache": args.cache,
            "repeat": args.repeat,
        },
        "results": [r.as_json() for r in results],
        "ratios": table,
        "problems": problems,
        "seconds": round(seconds, 1),
    }


# --------------------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dir",
        type=Path,
        help="run in a new temp dir inside this directory (default: bench/data/, gitignored)",
    )
    parser.add_argument("--txns", type=int, default=DEFAULT_TXNS, help="transactions per run")
    parser.add_argument(
        "--sync-txns",
        type=int,
        default=None,
        help="transactions for the "
        "fdatasync-per-transaction runs (the same prefix; default: --txns)",
    )
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--events", type=int, nargs=2, default=(1, 8), metavar=("MIN", "MAX"))
    parser.add_argument(
        "--event-bytes", type=int, nargs=2, default=(100, 2000), metavar=("MIN", "MAX")
    )
    parser.add_argument(
        "--big-fraction", type=float, default=0.0, help="share of big transactions, e.g. 0.002"
    )
    parser.add_argument(
        "--big-mib", type=float, nargs=2, default=(1.0, 8.0), metavar=("MIN", "MAX")
    )
    parser.add_argument("--segment-mib", type=int, default=DEFAULTS.segment_bytes >> 20)
    parser.add_argument("--part-kib", type=int, default=DEFAULTS.part_bytes >> 10)
    parser.add_argument("--interval-ms", type=int, default=DEFAULTS.fsync_interval_ms)
    parser.add_argument(
        "--cache",
        choices=("evict", "drop", "warm"),
        default="evict",
        help="before a cold read: evict (posix_fadvise DONTNEED on the files "
        "read, default), drop (echo 3 > /proc/sys/vm/drop_caches: root, the "
        "whole machine) or warm (nothing)",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="write phases per policy (ratios use the medians)"
    )
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="write the results as JSON to PATH (- or no PATH: stdout)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also cProfile the writer and the reader (a separate pass)",
    )
    parser.add_argument("--profile-txns", type=int, default=20_000)
    parser.add_argument("--keep", action="store_true", help="keep the files written")
    parser.add_argument("--allow-memory-fs", action="store_true", help="run on tmpfs anyway")
    args = parser.parse_args(argv)
    if args.sync_txns is None:
        args.sync_txns = min(args.txns, DEFAULT_SYNC_TXNS)
    if args.txns < 1 or not 1 <= args.sync_txns <= args.txns:
        parser.error("need 1 <= --sync-txns <= --txns")
    if args.events[0] < 0 or args.events[0] > args.events[1]:
        parser.error("--events MIN MAX")
    if args.event_bytes[0] < 0 or args.event_bytes[0] > args.event_bytes[1]:
        parser.error("--event-bytes MIN MAX")
    if not 0 <= args.big_fraction <= 1 or not 0 < args.big_mib[0] <= args.big_mib[1]:
        parser.error("--big-fraction in [0, 1], --big-mib 0 < MIN <= MAX")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parent = args.dir or DATA_DIR
    parent.mkdir(parents=True, exist_ok=True)
    fstype = mount_of(parent).get("fstype", "?")
    if fstype in MEMORY_FILESYSTEMS and not args.allow_memory_fs:
        print(f"!!! {parent} is on {fstype} (memory): pick a disk with --dir", file=sys.stderr)
        return 2
    if args.cache == "drop" and not can_drop_caches():
        print(
            "!!! --cache drop: cannot write /proc/sys/vm/drop_caches (not root?)", file=sys.stderr
        )
        return 2
    workload = Workload(
        args.seed,
        tuple(args.events),
        tuple(args.event_bytes),
        args.big_fraction,
        tuple(args.big_mib),
    )
    per_round = 2 * args.txns + args.sync_txns  # raw files are kept, relay dirs of the last
    need = workload.mean_txn_bytes() * per_round * (args.repeat + 1) * 1.1
    stat = os.statvfs(parent)
    if stat.f_bavail * stat.f_frsize < need + (1 << 30):
        print(f"!!! need about {need / 1e9:.1f} GB free in {parent}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="relay-", dir=parent))
    info = machine_info(root)
    mean_mb = workload.mean_txn_bytes() * args.txns / MB
    started = time.monotonic()
    try:
        print(
            f"writing {args.txns:,} transactions (~{mean_mb:,.0f} MB of events) per run in "
            f"{root} ({fstype})...",
            file=sys.stderr,
        )
        results, problems = run(args, root, workload)
        prof = profile(args, root, workload) if args.profile else ""
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    data = report(info, workload, args, results, problems, time.monotonic() - started)
    if prof:
        print("\n" + prof)
    if args.keep:
        print(f"files kept in {root}")
    if args.json:
        text = json.dumps(data, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
