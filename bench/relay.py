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
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.machine import MEMORY_FILESYSTEMS, machine_info, mount_of
from bench.harness.paths import DATA_DIR
from bench.measure.page_cache import can_drop_caches
from bench.measure.relay_io import DEFAULTS
from bench.measure.relay_phases import profile, run
from bench.reports.relay_report import MB, report
from bench.workloads.relay_txns import SEED, Workload

DEFAULT_TXNS = 100_000
DEFAULT_SYNC_TXNS = 20_000  # the fdatasync-per-transaction runs (~0.25 ms each here)


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


def refusal(args: argparse.Namespace, parent: Path, fstype: str, workload: Workload) -> str | None:
    """Why the run cannot measure what it means to in `parent`, if it cannot."""
    if fstype in MEMORY_FILESYSTEMS and not args.allow_memory_fs:
        return f"{parent} is on {fstype} (memory): pick a disk with --dir"
    if args.cache == "drop" and not can_drop_caches():
        return "--cache drop: cannot write /proc/sys/vm/drop_caches (not root?)"
    per_round = 2 * args.txns + args.sync_txns  # raw files are kept, relay dirs of the last
    need = workload.mean_txn_bytes() * per_round * (args.repeat + 1) * 1.1
    stat = os.statvfs(parent)
    if stat.f_bavail * stat.f_frsize < need + (1 << 30):
        return f"need about {need / 1e9:.1f} GB free in {parent}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parent = args.dir or DATA_DIR
    parent.mkdir(parents=True, exist_ok=True)
    fstype = mount_of(parent).get("fstype", "?")
    workload = Workload(
        args.seed,
        tuple(args.events),
        tuple(args.event_bytes),
        args.big_fraction,
        tuple(args.big_mib),
    )
    refused = refusal(args, parent, fstype, workload)
    if refused:
        print(f"!!! {refused}", file=sys.stderr)
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
