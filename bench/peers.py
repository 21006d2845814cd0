#!/usr/bin/env python3
"""replicad beside Debezium: one run, one machine, the same MariaDB, the same Kafka.

For each contender (replicad and Debezium's MariaDB connector in Kafka Connect standalone,
bench/peers/debezium), each with its defaults and tuned, one after the other on the local
MariaDB (3306) and Apache Kafka (9092), both writing Debezium-shaped JSON (replicad with
`envelope.values: debezium`; Connect's JsonConverter; `schemas.enable` false on both) to
topics of one partition:

  1. Initial snapshot of `snap` (--snapshot-rows rows of snapshot.py's 10-column table, made
     once for all contenders): spawn -> last snapshot message consumed, and first -> last.
  2. Live streaming into the contender's own empty table `live_<n>` (captured from the
     start): --rows row changes written as fast as one client can, as client libraries
     send them: multi-row INSERTs of --batch rows, one transaction each, each followed by an
     UPDATE of those rows (both images). First commit -> last message consumed; CPU seconds
     of the process tree (Connect's JVM; replicad with its children) per 1000 rows.
  3. Latency at fixed offered rates (--rates, default 5000 and 20000 rows/s): autocommit
     INSERTs on an absolute schedule, 50 transactions/s, each row with `at = NOW(6)` (UTC
     session); per row, consume time - `at`.
  4. Restart: SIGTERM, --backlog-rows inserts committed while it is down, spawn again:
     spawn -> streaming (the contender's log), spawn -> first backlog message consumed, and
     the backlog's catch-up rows/s (first -> last backlog message).

Peak RSS: the largest sum of VmHWM over the process tree seen during the run. /proc/loadavg
is recorded before and after every phase: the machine (2 cores here) may be shared, which
makes every figure noisy. Message identity is the key's `id` and the `op`, so at-least-once
duplicates after a restart count once.

Run it as a script (bench/peers/ is a package of the same name):

    .venv/bin/python bench/peers.py --json /tmp/peers.json
    .venv/bin/python bench/peers.py --quick        # small sizes, to check the harness
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from bench.harness import children, kafka_broker, paths
from bench.harness.machine import loadavg
from bench.measure.peer_phases import run_contender
from bench.peers.contenders import how_tuned
from bench.reports.peers_report import table
from bench.workloads.peer_rows import child_writer, drop_database, prepare_database


def code_state() -> dict[str, Any]:
    def git(*cmd: str) -> str:
        return subprocess.run(
            ["git", *cmd], cwd=paths.ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": git("status", "--short", "--untracked-files=no", "replicad").splitlines(),
    }


def run(args: argparse.Namespace) -> int:
    kafka_broker.ensure_kafka(args.bootstrap)
    database = f"bench_peers_{uuid.uuid4().hex[:6]}"
    order = [(kind, tuned) for tuned in (False, True) for kind in ("replicad", "debezium")]
    order = [(k, t) for k, t in order if f"{k}-{'tuned' if t else 'default'}" in args.only]
    workdir = Path(tempfile.mkdtemp(prefix="peers-"))
    results: dict[str, Any] = {
        "started": datetime.now().astimezone().isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "code": code_state(),
        "settings": vars(args) | {},
        "tuned": how_tuned(),
        "database": database,
        "runs": {},
        "format": "Debezium JSON, schemas.enable=false (JsonConverter / envelope.values: "
        "debezium), one partition per topic",
    }
    print(f"load average at start: {loadavg()}; database {database}; work dir {workdir}")
    failed = False
    try:
        started = time.time()
        prepare_database(database, args.snapshot_rows, len(order))
        results["prepare"] = {"seconds": round(time.time() - started, 1), "load": loadavg()}
        for n, (kind, tuned) in enumerate(order):
            run_result = run_contender(kind, tuned, n, args, database, workdir)
            results["runs"][run_result["label"]] = run_result
            failed = failed or "error" in run_result
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
            try:
                drop_database(database)
            except Exception as exc:  # the server may be what failed: say so, keep the cause
                print(f"!!! could not drop {database}: {exc}", flush=True)
    results["load_at_end"] = loadavg()
    text, records = table(results["runs"], args.rates)
    results["table"] = records
    print()
    print(text)
    print(f"\nload average at end: {results['load_at_end']} (1, 5, 15 min)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 1 if failed else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--snapshot-rows", type=int, default=1_000_000)
    p.add_argument("--rows", type=int, default=200_000, help="live row changes (half updates)")
    p.add_argument("--batch", type=int, default=500, help="rows per multi-row INSERT")
    p.add_argument("--backlog-rows", type=int, default=100_000)
    p.add_argument("--rates", default="5000,20000")
    p.add_argument("--latency-seconds", type=float, default=20.0)
    p.add_argument(
        "--only",
        default="replicad-default,debezium-default,replicad-tuned,debezium-tuned",
        help="which of the four runs",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="20k snapshot rows, 20k changes, 10k backlog, 5 s latency phases",
    )
    p.add_argument("--json", help="write the results here")
    p.add_argument("--keep", action="store_true", help="keep the database and the work dir")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.rates = [int(r) for r in str(args.rates).split(",") if r]
    args.only = [s for s in str(args.only).split(",") if s]
    if args.quick:
        args.snapshot_rows, args.rows, args.backlog_rows = 20_000, 20_000, 10_000
        args.latency_seconds = 5.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        result = children.child_outcome(lambda: child_writer(spec))
        Path(spec["out"]).write_text(json.dumps(result))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
