"""e2e.py's database and load: decode.py's table and operation mix in `replicad_e2e`, the
latency table, and the load whose binlog range the other phases replay."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from typing import Any

from bench.harness import mariadb
from bench.harness.mariadb import master_status
from bench.workloads import decode_rows

DATABASE = "replicad_e2e"


TABLE = decode_rows.TABLE  # decode.py's table, in our database


LATENCY_TABLE = "latency_rows"


SNAPSHOT_TABLE = "snap_rows"  # --snapshot-rows: read by an incremental snapshot


ROWS_PER_TRANSACTION = 1_000  # load: one multi-row statement per transaction


OPS = decode_rows.OPS


def _in_database(sql: str) -> str:
    """decode.py's statements name its database; the same statements on ours."""
    out = sql.replace(f"{decode_rows.DATABASE}.", f"{DATABASE}.")
    assert out != sql, "decode.py's SQL no longer names its database as expected"
    return out


CREATE_ROWS = _in_database(decode_rows.CREATE_TABLE)


UPDATE_SQL = _in_database(decode_rows.UPDATE_SQL)


DELETE_SQL = _in_database(decode_rows.DELETE_SQL)


CREATE_LATENCY = CREATE_ROWS.replace(f".{TABLE} (", f".{LATENCY_TABLE} (").replace(
    "qty INT NOT NULL\n", "qty INT NOT NULL,\n    txn INT NOT NULL,\n    ts DATETIME(6) NOT NULL\n"
)


assert "ts DATETIME(6)" in CREATE_LATENCY and LATENCY_TABLE in CREATE_LATENCY


def _ranges(first: int, last: int) -> list[tuple[int, int]]:
    return [
        (lo, min(lo + ROWS_PER_TRANSACTION - 1, last))
        for lo in range(first, last + 1, ROWS_PER_TRANSACTION)
    ]


def _statements(plan: decode_rows.Plan) -> Iterator[tuple[str, str, list[Any]]]:
    """(op, sql, params) of the load: multi-row INSERTs of decode.py's generated rows, then
    UPDATEs of the lowest ids and DELETEs of the highest (disjoint; every row exists)."""
    rng = random.Random(decode_rows.SEED)
    row_sql = "(" + ",".join(["%s"] * len(decode_rows.COLUMNS)) + ")"
    head = f"INSERT INTO {DATABASE}.{TABLE} ({','.join(decode_rows.COLUMNS)}) VALUES "
    for lo, hi in _ranges(1, plan.inserts):
        rows = [decode_rows.make_row(row_id, rng) for row_id in range(lo, hi + 1)]
        yield "c", head + ",".join([row_sql] * len(rows)), [v for row in rows for v in row]
    for lo, hi in _ranges(1, plan.updates):
        yield "u", UPDATE_SQL, [lo, hi]
    for lo, hi in _ranges(plan.inserts - plan.deletes + 1, plan.inserts):
        yield "d", DELETE_SQL, [lo, hi]


def setup_database(server: mariadb.Server, snapshot_rows: int = 0) -> None:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
            cur.execute(f"CREATE DATABASE {DATABASE}")
            cur.execute(CREATE_ROWS)
            cur.execute(CREATE_LATENCY)
            if snapshot_rows:
                # The table an incremental snapshot reads during the second latency phase
                # (written before replicad's start position: only the snapshot reads it), and
                # the signal table with the grant docs/snapshots.md asks for.
                cur.execute(
                    f"CREATE TABLE {DATABASE}.{SNAPSHOT_TABLE} (id BIGINT PRIMARY KEY, n INT, "
                    "s VARCHAR(64), d DECIMAL(12,2), at DATETIME(6))"
                )
                cur.execute(
                    f"INSERT INTO {DATABASE}.{SNAPSHOT_TABLE} SELECT seq, seq % 1000, "
                    "CONCAT('name-', seq), seq / 7, '2024-01-02' + INTERVAL seq SECOND "
                    f"FROM {DATABASE}.seq_1_to_{int(snapshot_rows)}"
                )
                cur.execute(
                    f"CREATE TABLE {DATABASE}.replicad_signal (id VARCHAR(128) PRIMARY KEY, "
                    "kind VARCHAR(16) NOT NULL, window_id VARCHAR(64) NOT NULL, "
                    "at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))"
                )
                cur.execute(
                    f"GRANT INSERT, UPDATE, DELETE ON {DATABASE}.replicad_signal "
                    f"TO '{server.repl_user}'@'127.0.0.1'"
                )
    finally:
        conn.close()


def load(server: mariadb.Server, plan: decode_rows.Plan) -> dict[str, Any]:
    """Run the load (replicad is not running); the binlog range it occupies."""
    conn = server.connect()
    done = dict.fromkeys(OPS, 0)
    try:
        with conn.cursor() as cur:
            # As decode.py: UTC, and no ANNOTATE_ROWS events (the statement text of a 1000-row
            # INSERT is ~300 kB), so the binlog holds row events only.
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION binlog_annotate_row_events = OFF")
            start = master_status(cur)
            started = time.perf_counter()
            for op, sql, params in _statements(plan):
                done[op] += cur.execute(sql, params)  # autocommit: one transaction each
            seconds = time.perf_counter() - started
            end = master_status(cur)
            cur.execute("SELECT @@log_bin_basename, @@version")
            basename, version = cur.fetchone()
            cur.execute("SHOW BINARY LOGS")
            logs = [(str(r[0]), int(r[1])) for r in cur.fetchall()]
    finally:
        conn.close()
    if done != plan.counts():
        raise SystemExit(f"the load affected {done} rows, planned {plan.counts()}")
    binlog_dir = os.path.dirname(basename)
    index = {name: i for i, (name, _) in enumerate(logs)}
    names = [name for name, _ in logs[index[start[0]] : index[end[0]] + 1]]
    segments = []
    for name in names:
        first = start[1] if name == start[0] else None
        stop = end[1] if name == end[0] else None
        segments.append((os.path.join(binlog_dir, name), first, stop))
    size = sum((stop or os.path.getsize(path)) - (first or 4) for path, first, stop in segments)
    return {
        "counts": done,
        "seconds": round(seconds, 2),
        "start": {"file": start[0], "pos": start[1]},
        "end": {"file": end[0], "pos": end[1]},
        "segments": segments,
        "bytes": size,
        "server_version": version,
    }
