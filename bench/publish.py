#!/usr/bin/env python3
"""Publishing cost against decoding cost, broker-independent, on one binlog in one run.

  1. The binlog: database `bench_publish`, bench/snapshot.py's 10-column table `t`; --rows row
     changes (2/3 inserts, 7/30 updates, 1/10 deletes) as 1000-row autocommit statements,
     `binlog_annotate_row_events=OFF`, between two `FLUSH BINARY LOGS`; the file(s) copied
     out of the server's data directory into a temp dir.
  2. Decoding, each in a child process (wall, user+sys CPU from wait4, peak RSS from VmHWM):
     `mariadb-binlog -v --base64-output=decode-rows`, `replicad dump` with the compiled
     decoder and with REPLICAD_PURE_PYTHON=1, replicad's decoder alone
     (`iter_row_changes(iter_file_events())`, decode.py's child) and python-mysql-replication
     streaming the same range from the server (decode.py's peer child).
  3. Publishing: `replicad run` from the position before the workload into a private
     single-node Apache Kafka (bench/harness/kafka_broker.py's PrivateKafka), at-least-once
     (the sink's defaults) and
     exactly-once, each into its own pipeline/topic prefix, relay log off; then at-least-once
     again with the relay log on. replicad's own CPU (utime+stime from /proc, the broker
     excluded) from spawn to the last message consumed, and from the first message consumed
     to the last (streaming only); per-operation counts (tombstones extra) checked.
  4. Latency commit -> consumed at 5,000 and 50,000 rows/s offered, with the at-least-once
     replicad caught up (bench/e2e.py's latency phase and writer child, in its database
     `replicad_e2e`).
  5. The librdkafka floor: a child process producing the at-least-once run's message count,
     cycling a sample of its consumed messages, with the sink's producer settings, the same 4
     headers and a per-message delivery callback (and once without both); its wait4 CPU.
  6. --big-transaction ROWS: one INSERT ... SELECT of ROWS rows into `t2` (t's shape) in its
     own binlog file(s); `replicad dump` of it and `replicad run` at-least-once until all ROWS
     messages are consumed: wall, CPU and peak RSS next to the normal workload's.

Usage: .venv/bin/python bench/publish.py [--rows 300000] [--json OUT] [--latency-seconds 10]
                                         [--skip-latency] [--skip-relay] [--keep]
                                         [--big-transaction ROWS]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import children, kafka_broker, mariadb, paths, procstat
from bench.measure import decode_children
from bench.measure.publish_decoders import measure_decoders
from bench.measure.publish_floor import child_floor, measure_floor
from bench.measure.publish_runs import big_transaction, publish
from bench.reports.publish_report import FLOOR, FLOOR_BARE, PROCESSES_LABEL, report
from bench.workloads import decode_rows, e2e_load
from bench.workloads.publish_binlog import DATABASE, TABLE, make_binlog

DEFAULT_ROWS = 300_000
REPLICAD_SERVER_ID = 91243  # e2e.py's replicad uses 91235, decode.py's peer 91234


def code_state() -> dict[str, Any]:
    """The commit measured, the uncommitted files under replicad/ (the working tree is what
    runs), and when the compiled modules (the decoder, the message writer) were built: the
    older of the two, so a stale one shows."""

    def git(*cmd: str) -> str:
        done = subprocess.run(["git", *cmd], cwd=paths.ROOT, capture_output=True, text=True)
        return done.stdout.rstrip("\n")

    built = sorted(
        [
            *paths.ROOT.glob("replicad/binlog/_speedups*.so"),
            *paths.ROOT.glob("replicad/sinks/_writer*.so"),
        ],
        key=lambda path: path.stat().st_mtime,
    )
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted": git("status", "--porcelain", "--", "replicad").splitlines(),
        "speedups_built": (
            datetime.fromtimestamp(built[0].stat().st_mtime, UTC).isoformat(timespec="seconds")
            if built
            else None
        ),
    }


def drop_databases(server: mariadb.Server, names: list[str]) -> None:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            for name in names:
                cur.execute(f"DROP DATABASE IF EXISTS {name}")
    finally:
        conn.close()


def run_header(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """What the results start with: the options, the machine's load, the code measured."""
    from replicad.binlog import decoder_choice

    return {
        "args": {k: v for k, v in vars(args).items() if k not in ("child", "spec")},
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "loadavg_start": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "compiled": decoder_choice.available(),
        "bytecode": children.compile_bytecode(),
        "code": code_state(),
        "workdir": str(workdir),
        "publish": [],
        "problems": [],
    }


def binlog_and_decoders(
    server: mariadb.Server, plan: decode_rows.Plan, workdir: Path, results: dict[str, Any]
) -> dict[str, Any]:
    """The workload's binlog, then every decoder on it (counts checked); the binlog."""
    print(f"workload: {plan.total:,} row changes into {DATABASE}.{TABLE} ...", file=sys.stderr)
    binlog = make_binlog(server, plan, workdir / "binlog")
    results["binlog"] = binlog
    if binlog["counts"] != plan.counts():
        results["problems"].append(f"the workload made {binlog['counts']}, planned {plan.counts()}")
    print("decoders, each in a child process ...", file=sys.stderr)
    results["decoders"] = measure_decoders(server, binlog, plan)
    for d in results["decoders"]:
        if d.get("rows_counted") and not d.get("error") and d["counts"] != plan.counts():
            results["problems"].append(
                f"{d['name']} counted {d['counts']}, the workload made {plan.counts()}"
            )
    return binlog


def publish_options(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    """The `replicad run`s, in order: at-least-once (with the latency phases), exactly-once,
    the relay on, and one per --producer-processes N."""
    latency_seconds = 0.0 if args.skip_latency else args.latency_seconds
    runs: list[tuple[str, dict[str, Any]]] = [
        ("at-least-once", {"latency_seconds": latency_seconds, "keep_samples": True}),
        ("exactly-once", {"eos": True}),
    ]
    if not args.skip_relay:
        runs.append(("at-least-once, relay on", {"relay": True}))
    for n in args.producer_processes:
        runs.append((f"{PROCESSES_LABEL} {n}", {"producers": n}))
    return runs


def publishing(
    args: argparse.Namespace,
    broker: kafka_broker.PrivateKafka,
    server: mariadb.Server,
    binlog: dict[str, Any],
    plan: decode_rows.Plan,
    workdir: Path,
    results: dict[str, Any],
) -> None:
    """The private broker started; the `replicad run`s, the librdkafka floor and (with
    --big-transaction) the big transaction, into it."""
    bootstrap = broker.start()
    pids = {"kafka (private)": broker.pid}
    results["broker"] = f"private Apache Kafka (KRaft, one node) on {bootstrap}"
    pids.update({k: v for k, v in procstat.service_pids().items() if k == "mariadbd"})
    for label, options in publish_options(args):
        results["publish"].append(
            publish(
                label, bootstrap, workdir, server, binlog, plan, pids, sink=args.sink, **options
            )
        )
    alo = results["publish"][0]
    if not alo.get("error"):
        results["floor"] = [
            measure_floor(name, bootstrap, alo, plan.total, pids, headers=on, callback=on)
            for name, on in ((FLOOR, True), (FLOOR_BARE, False))
        ]
    if args.big_transaction:
        results["big"] = big_transaction(
            args.big_transaction, server, workdir, bootstrap, pids, args.producer_processes
        )


def finish(args: argparse.Namespace, results: dict[str, Any], workdir: Path) -> int:
    """The report, the problems, the JSON file; the exit status."""
    lines, problems = report(results)
    print()
    for line in lines:
        print(line)
    results["summary"], results["problems"] = lines, problems
    print(f"\nwall time of the run: {results['wall_s']:.1f} s")
    for problem in problems:
        print(f"\n!!! {problem}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"results written to {args.json}")
    if args.keep or problems:
        print(f"binlog copies, configs and logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if problems else 0


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    server = mariadb.Server(
        "127.0.0.1", mariadb.MARIADB_PORT, "root", "root", "repl", "repl", REPLICAD_SERVER_ID
    )
    mariadb.ensure_server(server)
    plan = decode_rows.Plan.for_rows(args.rows)
    workdir = Path(tempfile.mkdtemp(prefix="replicad-publish-"))
    results = run_header(args, workdir)
    databases = [DATABASE]
    if not args.skip_latency:
        # The latency table, in e2e.py's database (its writer child writes there), created
        # before the workload: replicad's schema snapshot at start knows it.
        e2e_load.setup_database(server)
        databases.append(e2e_load.DATABASE)
    broker = kafka_broker.PrivateKafka(workdir / "kafka")
    try:
        binlog = binlog_and_decoders(server, plan, workdir, results)
        publishing(args, broker, server, binlog, plan, workdir, results)
    finally:
        broker.stop()
        if not args.keep:
            drop_databases(server, databases)
    results["wall_s"] = round(time.perf_counter() - started, 1)
    return finish(args, results, workdir)


def run_child(kind: str, spec: dict[str, Any]) -> int:
    """A measured child: the librdkafka floor, or one of decode.py's decoders on this
    benchmark's table."""
    if kind == "floor":
        print(json.dumps(children.child_outcome(lambda: child_floor(spec)), default=str))
        return 0
    if kind == "decode":  # the imports outside the timed CPU
        import replicad.binlog.changes
        import replicad.binlog.files  # noqa: F401
    else:
        import pymysqlreplication  # noqa: F401

    def work() -> dict[str, Any]:
        cpu = time.process_time()
        if kind == "decode":
            out = decode_children.child_replicad(spec["files"], None, (DATABASE, TABLE))
        else:
            server = mariadb.Server(**spec["server"])
            out = decode_children.child_peer(
                server, spec["gtid"], spec["expected"], spec["last_file"], (DATABASE, TABLE)
            )
        out["loop_cpu_s"] = time.process_time() - cpu
        return out

    print(json.dumps(children.child_outcome(work), default=str))
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="row changes to write")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    parser.add_argument(
        "--latency-seconds", type=float, default=10.0, help="length of each latency phase"
    )
    parser.add_argument("--skip-latency", action="store_true", help="no latency phases")
    parser.add_argument("--skip-relay", action="store_true", help="no run with the relay log")
    parser.add_argument(
        "--producer-processes",
        type=int,
        nargs="*",
        default=[2],
        metavar="N",
        help="also at-least-once runs with sinks.kafka.producer_processes N (default: 2; the "
        "at-least-once run is N = 1)",
    )
    parser.add_argument(
        "--sink",
        type=json.loads,
        default={},
        metavar="JSON",
        help='more sinks.kafka settings for every run, e.g. \'{"headers": "none", '
        '"compression": "zstd"}\' (default: the config defaults)',
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir and databases")
    parser.add_argument(
        "--big-transaction",
        type=int,
        default=0,
        metavar="ROWS",
        help="also one transaction of ROWS inserts: replicad dump and run, peak RSS (0: off)",
    )
    parser.add_argument("--child", choices=("decode", "peer", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--spec", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rows < 30:
        parser.error("--rows must be at least 30")
    if args.big_transaction < 0:
        parser.error("--big-transaction must be 0 (off) or a row count")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args.child, json.loads(args.spec))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
