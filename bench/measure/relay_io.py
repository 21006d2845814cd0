"""relay.py's timed phases: writing and reading the relay log, and the raw disk beside it."""

from __future__ import annotations

import argparse
import cProfile
import os
import time
from array import array
from pathlib import Path

from crc32c import crc32c

from bench.measure.relay_meters import CpuMeter, Histogram, Result, SyncCounter
from bench.workloads.relay_txns import (
    BINLOG_FILE,
    Digest,
    Workload,
    batches,
    digest_batch,
    events_of,
)
from replicad.relay.reader import RelayReader
from replicad.relay.writer import RelayOptions, RelayWriter
from tests.helpers.relay_helpers import fake_fde

READ_BYTES = 1 << 20  # the raw read size (SegmentScan reads 1 MiB slices too)


POLICIES = ("os", "interval", "transaction")


DEFAULTS = RelayOptions()


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
