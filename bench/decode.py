#!/usr/bin/env python3
"""Benchmark binlog row decoding: replicad vs python-mysql-replication vs mariadb-binlog.

One run:
  1. builds (or reuses, see bench/data/binlog.json) a binlog holding only a mixed-type
     INSERT / UPDATE / DELETE workload on the local MariaDB (database `replicad_bench`);
  2. decodes it from disk with replicad, fully and events-only (no row decoding);
  3. streams the same GTID range from the server with python-mysql-replication;
  4. times `mariadb-binlog -v --base64-output=decode-rows` on the same files;
  5. runs every decoder in its own subprocess to get its peak RSS, plus replicad on the
     first 10% of the largest file to show that memory does not grow with the file;
  6. prints a table (and JSON with --json); exits non-zero when a decoder fails or the row
     counts (per operation) of replicad, python-mysql-replication and the workload differ.

Usage: python bench/decode.py [--rows N] [--rebuild] [--json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.mariadb import ensure_server, server_of
from bench.measure.decode_children import run_child
from bench.measure.decode_runs import run_benchmark
from bench.reports.decode_report import report
from bench.workloads.decode_rows import Plan, ensure_binlog

DEFAULT_ROWS = 300_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="row changes to build")
    parser.add_argument("--rebuild", action="store_true", help="rebuild even if the marker fits")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3306)
    parser.add_argument("--user", default="root")
    parser.add_argument("--password", default="root")
    parser.add_argument("--repl-user", default="repl")
    parser.add_argument("--repl-password", default="repl")
    parser.add_argument("--server-id", type=int, default=91234, help="the peer's replica id")
    child = parser.add_argument_group("internal: one decoder in a subprocess")
    child.add_argument("--child", choices=("replicad", "replicad-events", "peer"))
    child.add_argument("--files", nargs="+", default=[])
    child.add_argument("--stop", type=int, default=None, help="stop offset (first file)")
    child.add_argument("--gtid-start", default="")
    child.add_argument("--expected", type=int, default=0)
    child.add_argument("--last-file", default="")
    args = parser.parse_args(argv)
    if args.rows < 30:
        parser.error("--rows must be at least 30")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args)
    server = server_of(args)
    ensure_server(server)
    marker, built = ensure_binlog(server, Plan.for_rows(args.rows), args.rebuild)
    results, problems = run_benchmark(server, marker)
    report(marker, built, results, problems, args.json)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
