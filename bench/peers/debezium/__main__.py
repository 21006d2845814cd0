"""`python -m bench.peers.debezium fetch|up|down`: Debezium in Kafka Connect standalone from a
shell, beside replicad on the same primary and broker (README.md beside this file).

    python -m bench.peers.debezium up --server mariadb --db shop --tables orders,items \\
        --prefix dbz --dir /tmp/dbz            # returns once the connector streams
    python -m bench.peers.debezium down --dir /tmp/dbz

`up` leaves the JVM running (its pid in <dir>/connect.pid) and prints what it started as JSON;
`down` stops that pid only, after checking it is still that Connect."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

from bench.peers.debezium.connect import (
    MAIN_CLASS,
    DebeziumConnect,
    DebeziumError,
    DebeziumOptions,
    fetch,
)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.debezium")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="fetch Kafka Connect and Debezium from Maven Central")
    up = sub.add_parser("up", help="start Connect with one Debezium connector")
    up.add_argument("--server", choices=["mariadb", "mysql"], required=True)
    up.add_argument("--db", required=True, help="the database to capture")
    up.add_argument("--tables", default="", help="comma-separated tables (default: all)")
    up.add_argument("--prefix", default="dbz", help="topic.prefix (topics <prefix>.<db>.<t>)")
    up.add_argument("--server-id", type=int, default=None, help="default: random 6000000+")
    up.add_argument("--kafka", default="127.0.0.1:9092")
    up.add_argument("--port", type=int, default=None, help="the server's port")
    up.add_argument("--user", default="root")
    up.add_argument("--password", default="root")
    up.add_argument("--schemas", action="store_true", help="JsonConverter schemas.enable=true")
    up.add_argument("--snapshot-mode", default="initial")
    up.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a further connector property (repeatable)",
    )
    up.add_argument("--dir", type=Path, default=Path(".services/debezium-run"))
    up.add_argument("--timeout", type=float, default=180)
    down = sub.add_parser("down", help="stop the Connect that `up` started in --dir")
    down.add_argument("--dir", type=Path, default=Path(".services/debezium-run"))
    return parser.parse_args(argv)


def _up(args: argparse.Namespace) -> int:
    if (args.dir / "connect.pid").exists() and _our_pid(args.dir) is not None:
        print(f"a Connect started in {args.dir} is still running: down first", file=sys.stderr)
        return 1
    extra = dict(kv.split("=", 1) for kv in args.set)
    options = DebeziumOptions(
        server=args.server,
        database=args.db,
        topic_prefix=args.prefix,
        server_id=args.server_id or random.randrange(6_000_000, 7_000_000),
        tables=tuple(t for t in args.tables.split(",") if t),
        kafka=args.kafka,
        port=args.port,
        user=args.user,
        password=args.password,
        schemas_enable=args.schemas,
        snapshot_mode=args.snapshot_mode,
        extra=extra,
    )
    connect = DebeziumConnect(options, args.dir.resolve())
    connect.start(args.timeout)  # stops the JVM again if it does not become ready
    assert connect.proc is not None
    report = {
        "pid": connect.proc.pid,
        "rest_port": connect.rest_port,
        "dir": str(connect.workdir),
        "connector": options.name,
        "server_id": options.server_id,
        "running_s": round(connect.timings["running_s"], 2),
        "streaming_s": round(connect.timings["streaming_s"], 2),
    }
    print(json.dumps(report))
    return 0


def _our_pid(workdir: Path) -> int | None:
    """The pid in <dir>/connect.pid if it is still the Connect started with that dir's
    worker.properties (a stale pid file may name an unrelated process by now)."""
    try:
        pid = int((workdir / "connect.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    worker = str((workdir / "worker.properties").resolve()).encode()
    return pid if MAIN_CLASS.encode() in cmdline and worker in cmdline else None


def _down(args: argparse.Namespace) -> int:
    workdir = args.dir.resolve()
    pid = _our_pid(workdir)
    if pid is None:
        print(f"no Connect of {workdir} is running", file=sys.stderr)
        (workdir / "connect.pid").unlink(missing_ok=True)
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if Path(f"/proc/{pid}").exists():
        print(f"Connect (pid {pid}) still running 30 s after SIGTERM: SIGKILL", file=sys.stderr)
        os.kill(pid, signal.SIGKILL)
    (workdir / "connect.pid").unlink(missing_ok=True)
    print(f"stopped Connect (pid {pid})")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "fetch":
            print(fetch())
            return 0
        return _up(args) if args.command == "up" else _down(args)
    except DebeziumError as exc:
        print(f"debezium: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
