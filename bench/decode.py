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
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from itertools import islice
from pathlib import Path
from typing import Any

if __package__:  # imported as bench.decode
    from bench import common
else:  # python bench/decode.py: bench/ is sys.path[0]
    import common

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "bench" / "data"
MARKER = DATA_DIR / "binlog.json"
SERVICES_SCRIPT = ROOT / "scripts" / "services.sh"

DATABASE = "replicad_bench"
TABLE = "bench_rows"
WORKLOAD_VERSION = 1  # bump when the table or the workload changes: forces a rebuild
DEFAULT_ROWS = 300_000
ROWS_PER_STATEMENT = 1_000  # rows per multi-row INSERT, per UPDATE / DELETE range
STATEMENTS_PER_TRANSACTION = 10
SEED = 20240601
OPS = ("c", "u", "d")
PEER_HEARTBEAT_SECONDS = 2  # the peer leaves the stream at a heartbeat (nothing left)

CREATE_TABLE = f"""
CREATE TABLE {DATABASE}.{TABLE} (
    id INT NOT NULL PRIMARY KEY,
    big BIGINT UNSIGNED NOT NULL,
    price DECIMAL(12,2) NOT NULL,
    name VARCHAR(64) CHARACTER SET utf8mb4 NOT NULL,
    created DATETIME(3) NOT NULL,
    seen TIMESTAMP NULL DEFAULT NULL,
    ratio DOUBLE NOT NULL,
    status ENUM('new','paid','shipped','cancelled') NOT NULL,
    note TEXT CHARACTER SET utf8mb4 NULL,
    doc JSON NULL,
    payload BLOB NULL,
    qty INT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""
COLUMNS = (
    "id",
    "big",
    "price",
    "name",
    "created",
    "seen",
    "ratio",
    "status",
    "note",
    "doc",
    "payload",
    "qty",
)
WORDS = ("alpha", "Bravo", "café", "naïve", "Zürich", "東京", "데이터", "emoji🙂", "Ω", "x")
STATUSES = ("new", "paid", "shipped", "cancelled")
CREATED_EPOCH = datetime(2020, 1, 1)
SEEN_EPOCH = datetime(1971, 1, 1)

# Every matched row changes (qty), so each one is logged as one row change.
UPDATE_SQL = f"""
UPDATE {DATABASE}.{TABLE}
SET qty = qty + 1,
    price = price + 0.25,
    ratio = ratio * 1.5,
    status = ELT(1 + id %% 4, 'paid', 'shipped', 'cancelled', 'new'),
    name = CONCAT(LEFT(name, 60), ' ü'),
    doc = JSON_SET(COALESCE(doc, '{{}}'), '$.rev', id)
WHERE id BETWEEN %s AND %s
"""
DELETE_SQL = f"DELETE FROM {DATABASE}.{TABLE} WHERE id BETWEEN %s AND %s"


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True)
class Server:
    host: str
    port: int
    user: str
    password: str
    repl_user: str
    repl_password: str
    server_id: int

    def connect(self, *, repl: bool = False) -> Any:
        import pymysql

        return pymysql.connect(
            host=self.host,
            port=self.port,
            user=self.repl_user if repl else self.user,
            password=self.repl_password if repl else self.password,
            charset="utf8mb4",
            autocommit=True,
        )


@dataclass(frozen=True, slots=True)
class Plan:
    """How many row changes of each kind the workload makes: about 2/3 inserts, 7/30
    updates and 1/10 deletes (200k / 70k / 30k for 300k)."""

    inserts: int
    updates: int
    deletes: int

    @classmethod
    def for_rows(cls, rows: int) -> Plan:
        updates = rows * 7 // 30
        deletes = rows // 10
        return cls(rows - updates - deletes, updates, deletes)

    @property
    def total(self) -> int:
        return self.inserts + self.updates + self.deletes

    def counts(self) -> dict[str, int]:
        return {"c": self.inserts, "u": self.updates, "d": self.deletes}


def workload_params(plan: Plan) -> dict[str, Any]:
    return {
        "version": WORKLOAD_VERSION,
        "seed": SEED,
        "rows_per_statement": ROWS_PER_STATEMENT,
        "statements_per_transaction": STATEMENTS_PER_TRANSACTION,
        **asdict(plan),
    }


# --------------------------------------------------------------------------- building


def make_row(row_id: int, rng: random.Random) -> tuple[Any, ...]:
    name = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))[:64]
    created = CREATED_EPOCH + timedelta(
        seconds=rng.randrange(200_000_000), milliseconds=rng.randrange(1000)
    )
    seen = None
    if rng.random() >= 0.05:
        seen = SEEN_EPOCH + timedelta(seconds=rng.randrange(2_000_000_000))
    note = None
    if rng.random() >= 0.1:
        note = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 30)))
    doc = None
    if rng.random() >= 0.05:
        doc = json.dumps(
            {
                "id": row_id,
                "tags": rng.sample(WORDS, 3),
                "score": round(rng.random(), 6),
                "nested": {"ok": rng.random() < 0.5, "none": None, "n": rng.randrange(10**9)},
            },
            ensure_ascii=False,
        )
    payload = rng.randbytes(rng.randrange(48)) if rng.random() >= 0.05 else None
    return (
        row_id,
        rng.getrandbits(64),
        Decimal(rng.randrange(-(10**9), 10**9)).scaleb(-2),
        name,
        created,
        seen,
        rng.uniform(-1e6, 1e6),
        rng.choice(STATUSES),
        note,
        doc,
        payload,
        rng.randrange(-(2**31), 2**31 - 1),
    )


def _ranges(first: int, last: int, size: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + size - 1, last)) for lo in range(first, last + 1, size)]


def _in_transactions(conn: Any, statements: Iterator[tuple[str, list[Any]]]) -> int:
    """Run the statements, STATEMENTS_PER_TRANSACTION per transaction; rows affected."""
    affected = 0
    with conn.cursor() as cur:
        while chunk := list(islice(statements, STATEMENTS_PER_TRANSACTION)):
            conn.begin()
            for sql, params in chunk:
                affected += cur.execute(sql, params)
            conn.commit()
    return affected


def _inserts(plan: Plan) -> Iterator[tuple[str, list[Any]]]:
    """Multi-row INSERTs of generated rows, made lazily (300k rows would be ~1 GB at once)."""
    rng = random.Random(SEED)
    row_sql = "(" + ",".join(["%s"] * len(COLUMNS)) + ")"
    head = f"INSERT INTO {DATABASE}.{TABLE} ({','.join(COLUMNS)}) VALUES "
    for lo, hi in _ranges(1, plan.inserts, ROWS_PER_STATEMENT):
        rows = [make_row(row_id, rng) for row_id in range(lo, hi + 1)]
        yield head + ",".join([row_sql] * len(rows)), [value for row in rows for value in row]


def run_workload(conn: Any, plan: Plan) -> dict[str, int]:
    done = {"c": _in_transactions(conn, _inserts(plan))}
    # Updates hit the lowest ids, deletes the highest: disjoint, and every row exists.
    updates = ((UPDATE_SQL, [lo, hi]) for lo, hi in _ranges(1, plan.updates, ROWS_PER_STATEMENT))
    done["u"] = _in_transactions(conn, updates)
    first_deleted = plan.inserts - plan.deletes + 1
    deletes = (
        (DELETE_SQL, [lo, hi])
        for lo, hi in _ranges(first_deleted, plan.inserts, ROWS_PER_STATEMENT)
    )
    done["d"] = _in_transactions(conn, deletes)
    return done


def _binlog_index(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


def _scalar(cur: Any, sql: str) -> Any:
    cur.execute(sql)
    return cur.fetchone()[0]


def build_binlog(server: Server, plan: Plan) -> dict[str, Any]:
    started = time.perf_counter()
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            # UTC so every generated TIMESTAMP exists; no ANNOTATE_ROWS events, so the files
            # hold row events only (the statement text of a 1000-row INSERT is ~300 kB).
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION binlog_annotate_row_events = OFF")
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
            cur.execute(f"DROP TABLE IF EXISTS {DATABASE}.{TABLE}")
            cur.execute(CREATE_TABLE)
            cur.execute("FLUSH BINARY LOGS")
            binlog_dir = os.path.dirname(_scalar(cur, "SELECT @@log_bin_basename"))
            first_file = _scalar(cur, "SHOW MASTER STATUS")
            gtid_before = _scalar(cur, "SELECT @@gtid_binlog_pos")
            workload_started = time.perf_counter()
            done = run_workload(conn, plan)
            workload_seconds = time.perf_counter() - workload_started
            gtid_after = _scalar(cur, "SELECT @@gtid_binlog_pos")
            cur.execute("FLUSH BINARY LOGS")
            next_file = _scalar(cur, "SHOW MASTER STATUS")
            cur.execute("SHOW BINARY LOGS")
            names = [row[0] for row in cur.fetchall()]
    finally:
        conn.close()
    if done != plan.counts():
        raise SystemExit(f"workload affected {done} rows, planned {plan.counts()}")
    lo, hi = _binlog_index(first_file), _binlog_index(next_file)
    files = sorted((n for n in names if lo <= _binlog_index(n) < hi), key=_binlog_index)
    return {
        "params": workload_params(plan),
        "binlog_dir": binlog_dir,
        "files": files,
        "sizes": {name: os.path.getsize(os.path.join(binlog_dir, name)) for name in files},
        "gtid_before": gtid_before,
        "gtid_after": gtid_after,
        "counts": done,
        "build_seconds": round(time.perf_counter() - started, 2),
        "workload_seconds": round(workload_seconds, 2),
        "built_at": datetime.now().isoformat(timespec="seconds"),
    }


def marker_is_usable(marker: dict[str, Any], plan: Plan, server: Server) -> bool:
    if marker.get("params") != workload_params(plan):
        return False
    for name, size in marker["sizes"].items():
        path = os.path.join(marker["binlog_dir"], name)
        if not os.path.exists(path) or os.path.getsize(path) != size:
            return False
    # The peer streams from the server: the files must still be in its binlog index.
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            on_server = {row[0] for row in cur.fetchall()}
    finally:
        conn.close()
    return set(marker["files"]) <= on_server


def ensure_binlog(server: Server, plan: Plan, rebuild: bool) -> tuple[dict[str, Any], bool]:
    """The marker of a binlog built with these parameters, and whether it was built now."""
    if not rebuild and MARKER.exists():
        marker = json.loads(MARKER.read_text())
        if marker_is_usable(marker, plan, server):
            return marker, False
    print(f"building a {plan.total}-row-change binlog in {DATABASE} ...", file=sys.stderr)
    marker = build_binlog(server, plan)
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    MARKER.write_text(json.dumps(marker, indent=2) + "\n")
    print(
        f"built {', '.join(marker['files'])} in {marker['build_seconds']} s "
        f"(workload {marker['workload_seconds']} s)",
        file=sys.stderr,
    )
    return marker, True


def ensure_server(server: Server) -> None:
    try:
        server.connect().close()
    except Exception:  # any failure: start it, then retry once
        subprocess.run(["bash", str(SERVICES_SCRIPT), "up", "mariadb"], check=True)
        server.connect().close()


# --------------------------------------------------------------------------- children


def child_replicad(paths: list[str], stop: int | None) -> dict[str, Any]:
    """Full decode through the public API: every row image becomes before/after dicts.
    Rows of other tables (concurrent writers on a shared server) are counted apart."""
    from replicad.binlog.changes import iter_row_changes
    from replicad.binlog.files import iter_file_events

    counts = dict.fromkeys(OPS, 0)
    other = 0
    base = common.vm_kb("VmHWM")
    started = time.perf_counter()
    for path in paths:
        events = iter_file_events(path, stop=stop)
        for change in iter_row_changes(events, file=os.path.basename(path)):
            if change.table == TABLE and change.db == DATABASE:
                counts[change.op] += 1
            else:
                other += 1
    seconds = time.perf_counter() - started
    return {"counts": counts, "other_rows": other, "seconds": seconds, "base_rss_kb": base}


def child_replicad_events(paths: list[str], stop: int | None) -> dict[str, Any]:
    """Events only: framing, CRC32, headers, TABLE_MAPs and ROWS post-headers are parsed,
    but `RowsEvent.rows()` is never called, so no row image is decoded."""
    from replicad.binlog.files import iter_file_events
    from replicad.binlog.rows import RowsEvent

    events = rows_events = 0
    base = common.vm_kb("VmHWM")
    started = time.perf_counter()
    for path in paths:
        for event in iter_file_events(path, stop=stop):
            events += 1
            if isinstance(event, RowsEvent):
                rows_events += 1
    seconds = time.perf_counter() - started
    return {"events": events, "rows_events": rows_events, "seconds": seconds, "base_rss_kb": base}


class _ReconnectCounter(logging.Handler):
    """python-mysql-replication reconnects silently (from the start GTID again) after a
    dropped connection; count those so a reset is reported instead of double counting."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reconnects = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "Re-request the connection" in record.getMessage():
            self.reconnects += 1


def child_peer(server: Server, gtid_start: str, expected: int, last_file: str) -> dict[str, Any]:
    """Stream the range from the server and decode every row (`event.rows` decodes).

    blocking=True: with blocking=False, python-mysql-replication 1.x announces its MariaDB
    COM_BINLOG_DUMP as 14 bytes but sends 15; when the non-blocking dump ends the server
    closes the socket with that byte unread, the kernel answers with a RST, and the client
    loses the tail of the stream and silently restarts from the start GTID. Blocking, the
    server never closes: the stream is left once the expected rows are in, at the ROTATE past
    the last benchmark file, or at a heartbeat (nothing left to send)."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import HeartbeatLogEvent, RotateEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    reconnects = _ReconnectCounter()
    logging.getLogger("pymysqlreplication").addHandler(reconnects)
    op_of = {WriteRowsEvent: "c", UpdateRowsEvent: "u", DeleteRowsEvent: "d"}
    counts = dict.fromkeys(OPS, 0)
    total = 0
    last_index = _binlog_index(last_file)
    ended = "stream ended"
    base = common.vm_kb("VmHWM")
    started = time.perf_counter()
    stream = BinLogStreamReader(
        connection_settings={
            "host": server.host,
            "port": server.port,
            "user": server.repl_user,
            "passwd": server.repl_password,
        },
        server_id=server.server_id,
        is_mariadb=True,
        auto_position=gtid_start,  # MariaDB: sent as @slave_connect_state
        blocking=True,
        resume_stream=True,
        slave_heartbeat=PEER_HEARTBEAT_SECONDS,
        only_events=[
            WriteRowsEvent,
            UpdateRowsEvent,
            DeleteRowsEvent,
            RotateEvent,
            HeartbeatLogEvent,
        ],
        only_schemas=[DATABASE],
        only_tables=[TABLE],
    )
    try:
        for event in stream:
            kind = type(event)
            if kind is RotateEvent:
                if _binlog_index(event.next_binlog) > last_index:
                    ended = f"passed {last_file}"
                    break
                continue
            if kind is HeartbeatLogEvent:
                if total:
                    ended = "idle (heartbeat)"
                    break
                continue
            n = len(event.rows)  # `rows` decodes every row image into Python values
            counts[op_of[kind]] += n
            total += n
            if total >= expected:
                ended = "expected count reached"
                break
    finally:
        stream.close()
    seconds = time.perf_counter() - started
    return {
        "counts": counts,
        "seconds": seconds,
        "base_rss_kb": base,
        "ended": ended,
        "reconnects": reconnects.reconnects,
    }


def run_child(args: argparse.Namespace) -> int:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))

    def work() -> dict[str, Any]:
        if args.child == "replicad":
            return child_replicad(args.files, args.stop)
        if args.child == "replicad-events":
            return child_replicad_events(args.files, args.stop)
        return child_peer(server_of(args), args.gtid_start, args.expected, args.last_file)

    print(json.dumps(common.child_outcome(work), default=str))
    return 0


# --------------------------------------------------------------------------- measuring


@dataclass(slots=True)
class Measured:
    decoder: str
    rows: int
    seconds: float
    peak_rss_mb: float | None
    base_rss_mb: float | None = None
    rows_counted: bool = True  # False: the workload's count is used for rows/s
    counts: dict[str, int] | None = None
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "rows_per_s": round(self.rows_per_s, 1)}


def _mb(kb: int | None) -> float | None:
    return kb / 1024 if kb is not None else None


def measure_python(name: str, child_args: list[str]) -> tuple[Measured, dict[str, Any]]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", *child_args]
    code, wall, sampled_kb, out = common.run_process(cmd, capture=True)
    result = common.child_result(code, out)
    counts = result.get("counts")
    peak = common.peak_kb(result.get("peak_rss_kb"), sampled_kb)
    measured = Measured(
        decoder=name,
        rows=sum(counts.values()) if counts else 0,
        seconds=result.get("seconds", wall),  # the decode loop, not interpreter start-up
        peak_rss_mb=_mb(peak),
        base_rss_mb=_mb(result.get("base_rss_kb")),
        counts=counts,
        error=result.get("error"),
    )
    return measured, result


def measure_mariadb_binlog(paths: list[str], rows: int) -> Measured:
    exe = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")
    if exe is None:
        return Measured("mariadb-binlog", rows, 0.0, None, error="mariadb-binlog not found")
    cmd = [exe, "--no-defaults", "-v", "--base64-output=decode-rows", *paths]
    code, seconds, common.peak_kb, _ = common.run_process(cmd, capture=False)
    error = f"exited {code}" if code != 0 else None
    return Measured(
        "mariadb-binlog -v", rows, seconds, _mb(common.peak_kb), rows_counted=False, error=error
    )


def set_net_timeouts(server: Server, seconds: int | None) -> tuple[int, int]:
    """Set the global net write/read timeouts (None: leave); the previous values."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.net_write_timeout, @@GLOBAL.net_read_timeout")
            previous = cur.fetchone()
            if seconds is not None:
                cur.execute(
                    "SET GLOBAL net_write_timeout = %s, GLOBAL net_read_timeout = %s",
                    (seconds, seconds),
                )
    finally:
        conn.close()
    return int(previous[0]), int(previous[1])


def restore_net_timeouts(server: Server, previous: tuple[int, int]) -> None:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL net_write_timeout = %s, GLOBAL net_read_timeout = %s", previous)
    finally:
        conn.close()


def run_benchmark(server: Server, marker: dict[str, Any]) -> tuple[list[Measured], list[str]]:
    paths = [os.path.join(marker["binlog_dir"], name) for name in marker["files"]]
    expected = marker["counts"]
    expected_total = sum(expected.values())
    problems: list[str] = []
    results: list[Measured] = []

    replicad, raw = measure_python("replicad", ["replicad", "--files", *paths])
    replicad.detail = {"other_rows": raw.get("other_rows", 0)}
    results.append(replicad)

    events, raw = measure_python("replicad events only", ["replicad-events", "--files", *paths])
    events.rows, events.rows_counted = expected_total, False
    events.detail = {k: raw[k] for k in ("events", "rows_events") if k in raw}
    results.append(events)

    # Memory flatness: the first 10% of the largest file vs. the whole file (with one file,
    # the whole file is the full run above).
    name = max(marker["files"], key=lambda n: marker["sizes"][n])
    path = os.path.join(marker["binlog_dir"], name)
    tenth = marker["sizes"][name] // 10
    partial, _ = measure_python(
        f"replicad first 10% of {name}", ["replicad", "--files", path, "--stop", str(tenth)]
    )
    partial.detail = {"file": name, "stop": tenth}
    results.append(partial)
    if len(paths) > 1:
        whole, _ = measure_python(f"replicad whole {name}", ["replicad", "--files", path])
        whole.detail = {"file": name}
        results.append(whole)

    previous = set_net_timeouts(server, 600)
    try:
        peer, raw = measure_python(
            "python-mysql-replication",
            [
                "peer",
                "--gtid-start",
                marker["gtid_before"],
                "--expected",
                str(expected_total),
                "--last-file",
                marker["files"][-1],
                *server_args(server),
            ],
        )
    finally:
        restore_net_timeouts(server, previous)
    peer.detail = {k: raw[k] for k in ("ended", "reconnects") if k in raw}
    results.append(peer)

    results.append(measure_mariadb_binlog(paths, expected_total))

    for m in results:
        if m.error:
            problems.append(f"{m.decoder} FAILED:\n{m.error}")
    if not replicad.error and replicad.counts != expected:
        problems.append(f"replicad counted {replicad.counts}, the workload made {expected}")
    if not peer.error:
        if peer.counts != expected:
            problems.append(
                f"python-mysql-replication counted {peer.counts} ({peer.detail.get('ended')}), "
                f"the workload made {expected}"
            )
        if peer.detail.get("reconnects"):
            problems.append(
                f"python-mysql-replication reconnected {peer.detail['reconnects']} time(s) "
                "(connection reset by the server); its figures are not comparable"
            )
    if not replicad.error and not peer.error and replicad.rows != peer.rows:
        problems.append(
            f"ROW COUNT MISMATCH: replicad {replicad.rows} vs python-mysql-replication {peer.rows}"
        )
    return results, problems


# --------------------------------------------------------------------------- reporting


def format_table(results: list[Measured]) -> str:
    head = ("decoder", "row changes", "seconds", "rows/s", "peak RSS MB", "base RSS MB")
    lines = []
    for m in results:
        if m.error:
            lines.append((m.decoder, "FAILED", "", "", "", ""))
            continue
        lines.append(
            (
                m.decoder,
                f"{m.rows:,}" + ("" if m.rows_counted else "*"),
                f"{m.seconds:.2f}",
                f"{m.rows_per_s:,.0f}",
                f"{m.peak_rss_mb:.1f}" if m.peak_rss_mb is not None else "-",
                f"{m.base_rss_mb:.1f}" if m.base_rss_mb is not None else "-",
            )
        )
    return common.grid(head, lines)


def speedup(results: list[Measured]) -> float | None:
    by_name = {m.decoder: m for m in results}
    ours, peer = by_name.get("replicad"), by_name.get("python-mysql-replication")
    if not ours or not peer or ours.error or peer.error or not peer.rows_per_s:
        return None
    return ours.rows_per_s / peer.rows_per_s


def report(
    marker: dict[str, Any], built: bool, results: list[Measured], problems: list[str], as_json: bool
) -> None:
    counts = marker["counts"]
    print(
        f"binlog: {', '.join(marker['files'])} in {marker['binlog_dir']} "
        f"({sum(marker['sizes'].values()) / 2**20:.1f} MiB), GTID {marker['gtid_before']} -> "
        f"{marker['gtid_after']}; {counts['c']:,} inserts, {counts['u']:,} updates, "
        f"{counts['d']:,} deletes"
    )
    state = "built now" if built else f"reused, built {marker['built_at']}"
    print(f"build: {marker['build_seconds']} s ({state})\n")
    print(format_table(results))
    ratio = speedup(results)
    print(
        "\n* not counted by this decoder (no row decoding, or output discarded): "
        "rows/s uses the workload's row count"
    )
    print("base RSS: the child's peak RSS after imports, before decoding")
    by_name = {m.decoder: m for m in results}
    peer = by_name.get("python-mysql-replication")
    if peer and peer.detail:
        print(
            f"python-mysql-replication: {peer.detail.get('ended')}, "
            f"{peer.detail.get('reconnects')} reconnect(s)"
        )
    other = by_name["replicad"].detail.get("other_rows") if "replicad" in by_name else 0
    if other:
        print(
            f"note: the files also hold {other:,} row changes of other tables (concurrent "
            "writers); replicad decoded them but they are not in its count"
        )
    if ratio is not None:
        print(f"replicad rows/s / python-mysql-replication rows/s = {ratio:.2f}")
    for problem in problems:
        print(f"\n!!! {problem}", file=sys.stderr)
    if as_json:
        print(
            json.dumps(
                {
                    "binlog": {k: v for k, v in marker.items() if k != "params"},
                    "params": marker["params"],
                    "built_now": built,
                    "results": [m.as_json() for m in results],
                    "replicad_over_peer": round(ratio, 3) if ratio is not None else None,
                    "problems": problems,
                },
                indent=2,
            )
        )


# --------------------------------------------------------------------------- command line


def server_of(args: argparse.Namespace) -> Server:
    return Server(
        args.host,
        args.port,
        args.user,
        args.password,
        args.repl_user,
        args.repl_password,
        args.server_id,
    )


def server_args(server: Server) -> list[str]:
    return [
        f"--host={server.host}",
        f"--port={server.port}",
        f"--repl-user={server.repl_user}",
        f"--repl-password={server.repl_password}",
        f"--server-id={server.server_id}",
    ]


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
