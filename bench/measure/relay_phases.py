"""relay.py's phases in order: the write rounds (raw file and relay log under each fsync policy),
the cold and warm reads that verify what was written, and the optional cProfile run."""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import sys
import time
from pathlib import Path

from bench.measure.page_cache import cache_state, evict
from bench.measure.relay_io import (
    POLICIES,
    RAW_MODES,
    read_raw,
    read_relay,
    read_relay_bare,
    relay_options,
    write_raw,
    write_relay,
)
from bench.measure.relay_meters import MB, Result
from bench.workloads.relay_txns import Digest, Workload, batches, events_of, make_pool
from replicad.errors import ReplicadError
from replicad.relay import records, segment
from replicad.relay.reader import RelayReader


def run(args: argparse.Namespace, root: Path, workload: Workload) -> tuple[list[Result], list[str]]:
    """Every write round, then the reads of the relay directories of the last one."""
    pool = make_pool(workload)
    # warm-up (not reported): imports, allocator, the pool's pages
    warm = root / "warmup"
    write_relay(warm, relay_options(args, "os"), workload, pool, min(2000, args.txns))
    os.sync()
    results: list[Result] = []
    problems: list[str] = []
    written: dict[str, tuple[Path, Digest]] = {}
    for rep in range(args.repeat):
        write_round(args, root, workload, pool, rep, results, problems, written)
        print(f"  writes #{rep + 1} done", file=sys.stderr)
    os.sync()
    for policy in POLICIES:
        read_back(args, policy, *written[policy], results, problems)
    return results, problems


def write_round(
    args: argparse.Namespace,
    root: Path,
    workload: Workload,
    pool: bytes,
    rep: int,
    results: list[Result],
    problems: list[str],
    written: dict[str, tuple[Path, Digest]],
) -> None:
    """Round `rep`: each raw write mode next to its relay fsync policy, then the pipelined
    `transaction` relay. The last round's relay directories stay (in `written`) for the
    cold reads; an earlier round's are verified warm and removed."""
    counts = {"os": args.txns, "interval": args.txns, "transaction": args.sync_txns}
    raw_counts = {"none": args.txns, "end": args.txns, "txn": args.sync_txns}
    raw_for = {"os": "end", "interval": "end", "transaction": "txn"}
    suffix = f" #{rep + 1}" * (args.repeat > 1)
    for raw_mode, policy in (("none", "os"), ("end", "interval"), ("txn", "transaction")):
        path = root / f"raw-{raw_mode}-{rep + 1}.bin"  # kept: no unlink/discard between phases
        os.sync()
        res = write_raw(path, raw_mode, workload, pool, raw_counts[raw_mode])
        res.name += suffix
        results.append(res)
        if res.note:
            problems.append(f"{res.name}: {res.note}")
        directory = root / f"relay-{policy}-{rep + 1}"
        os.sync()
        res = write_relay(directory, relay_options(args, policy), workload, pool, counts[policy])
        res.baseline = RAW_MODES[raw_for[policy]]
        res.name += suffix
        results.append(res)
        if rep + 1 < args.repeat:  # an earlier repeat: verify (warm), then make room
            problems += verify_and_remove(directory, res)
        else:
            written[policy] = (directory, res.digest)
    directory = root / f"relay-transaction-pipelined-{rep + 1}"
    os.sync()
    options = relay_options(args, "transaction")
    res = write_relay(directory, options, workload, pool, counts["transaction"], pipelined=True)
    res.baseline = RAW_MODES["txn"]
    res.name += suffix
    results.append(res)
    problems += verify_and_remove(directory, res)


def read_back(
    args: argparse.Namespace,
    policy: str,
    directory: Path,
    expected: Digest,
    results: list[Result],
    problems: list[str],
) -> None:
    """A relay directory read cold (which verifies it); for the `os` one also raw reads of
    its files, cold and warm, and warm relay reads."""
    files = sorted(directory.glob("relay-*.log"))
    evict(files, args.cache)
    try:
        cold = read_relay(directory, cache_state(files))
    except ReplicadError as exc:
        problems.append(f"relay read ({policy} dir) failed: {exc}")
        return
    cold.name, cold.baseline = f"relay read, cold ({policy} dir)", "raw read, cold"
    rows = [cold]
    if not cold.digest.same(expected):
        problems.append(
            f"{cold.name}: read back {cold.digest.as_json()} but wrote {expected.as_json()}"
        )
    if policy == "os":
        rows += warm_and_raw_reads(args, directory, files, expected, problems)
    for r in rows:
        if r.note:
            problems.append(f"{r.name}: {r.note}")
    results += rows


def warm_and_raw_reads(
    args: argparse.Namespace,
    directory: Path,
    files: list[Path],
    expected: Digest,
    problems: list[str],
) -> list[Result]:
    evict(files, args.cache)
    raw = read_raw(files, cache_state(files), expected)
    raw.name = "raw read, cold"
    warm = read_relay(directory, cache_state(files))
    warm.name, warm.baseline = "relay read, warm", "raw read, warm"
    bare = read_relay_bare(directory, cache_state(files))
    bare.baseline = "raw read, warm"
    warm_raw = read_raw(files, cache_state(files), expected)
    warm_raw.name = "raw read, warm"
    if not warm.digest.same(expected):
        problems.append(f"{warm.name}: read back differs from what was written")
    counted = (bare.digest.txns, bare.digest.events, bare.digest.event_bytes)
    if counted != (expected.txns, expected.events, expected.event_bytes):
        problems.append(f"{bare.name}: counted {counted}, wrote {expected.as_json()}")
    return [raw, warm, bare, warm_raw]


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
