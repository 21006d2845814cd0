"""publish.py's binlog: snapshot.py's 10-column table in `bench_publish`, the operation mix,
the files copied out of the server, and the one big transaction."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness import mariadb
from bench.workloads import decode_rows, ten_columns

DATABASE = "bench_publish"


TABLE = "t"


BIG_TABLE = "t2"  # --big-transaction's table, t's shape


ROWS_PER_TRANSACTION = 1_000


UPDATE_SQL = "UPDATE t SET n = n + 1, s = CONCAT(s, 'u') WHERE id BETWEEN {} AND {}"


DELETE_SQL = "DELETE FROM t WHERE id BETWEEN {} AND {}"


OPS = decode_rows.OPS


def workload(plan: decode_rows.Plan) -> Iterator[tuple[str, str]]:
    """(op, statement): inserts of snapshot.py's rows, updates of the lowest ids, deletes of
    the highest (disjoint; every row exists), ROWS_PER_TRANSACTION rows per statement."""
    for lo, hi in decode_rows.id_ranges(1, plan.inserts, ROWS_PER_TRANSACTION):
        yield "c", ten_columns.insert_rows(lo, hi)
    for lo, hi in decode_rows.id_ranges(1, plan.updates, ROWS_PER_TRANSACTION):
        yield "u", UPDATE_SQL.format(lo, hi)
    first_deleted = plan.inserts - plan.deletes + 1
    for lo, hi in decode_rows.id_ranges(first_deleted, plan.inserts, ROWS_PER_TRANSACTION):
        yield "d", DELETE_SQL.format(lo, hi)


def make_binlog(server: mariadb.Server, plan: decode_rows.Plan, into: Path) -> dict[str, Any]:
    """Run the workload in its own binlog file(s); copy them into `into`."""
    conn = server.connect()  # autocommit: one transaction per statement
    done = dict.fromkeys(OPS, 0)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION binlog_annotate_row_events = OFF")  # row events only
            ten_columns.recreate_database(cur, DATABASE)
            cur.execute(ten_columns.create_table(TABLE))
            cur.execute("FLUSH BINARY LOGS")
            start = mariadb.master_status(cur)
            gtid_before = mariadb.scalar(cur, "SELECT @@gtid_binlog_pos")
            started = time.perf_counter()
            for op, sql in workload(plan):
                done[op] += cur.execute(sql)
            seconds = time.perf_counter() - started
            end = mariadb.master_status(cur)
            gtid_after = mariadb.scalar(cur, "SELECT @@gtid_binlog_pos")
            cur.execute("FLUSH BINARY LOGS")
            binlog_dir = Path(mariadb.scalar(cur, "SELECT @@log_bin_basename")).parent
    finally:
        conn.close()
    return {
        "counts": done,
        "seconds": round(seconds, 2),
        "gtid_before": gtid_before,
        "gtid_after": gtid_after,
        **copy_binlogs(binlog_dir, start, end, into),
    }


def copy_binlogs(
    binlog_dir: Path, start: tuple[str, int], end: tuple[str, int], into: Path
) -> dict[str, Any]:
    """Copy the files from start's to end's out of the server's directory into `into`."""
    lo, hi = mariadb.binlog_index(start[0]), mariadb.binlog_index(end[0])
    names = [f"{start[0].rsplit('.', 1)[0]}.{i:06d}" for i in range(lo, hi + 1)]
    into.mkdir(parents=True, exist_ok=True)
    files = [str(shutil.copy(binlog_dir / name, into / name)) for name in names]
    return {
        "start": {"file": start[0], "pos": start[1]},
        "end": {"file": end[0], "pos": end[1]},
        "names": names,
        "files": files,
        "bytes": sum(os.path.getsize(f) for f in files),
    }


def make_big_binlog(server: mariadb.Server, rows: int, into: Path) -> dict[str, Any]:
    """ONE autocommit `INSERT INTO t2 SELECT ... FROM seq_1_to_<rows>` (snapshot.py's rows,
    MariaDB's sequence engine) into BIG_TABLE, t's shape, in its own binlog file(s)."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION binlog_annotate_row_events = OFF")
            cur.execute(f"USE {DATABASE}")
            cur.execute(f"DROP TABLE IF EXISTS {BIG_TABLE}")
            cur.execute(ten_columns.create_table(BIG_TABLE))
            cur.execute("FLUSH BINARY LOGS")
            start = mariadb.master_status(cur)
            gtid_before = mariadb.scalar(cur, "SELECT @@gtid_binlog_pos")
            started = time.perf_counter()
            inserted = cur.execute(ten_columns.insert_rows(1, rows, BIG_TABLE))
            seconds = time.perf_counter() - started
            end = mariadb.master_status(cur)
            gtid_after = mariadb.scalar(cur, "SELECT @@gtid_binlog_pos")
            cur.execute("FLUSH BINARY LOGS")
            binlog_dir = Path(mariadb.scalar(cur, "SELECT @@log_bin_basename")).parent
    finally:
        conn.close()
    return {
        "counts": {"c": inserted, "u": 0, "d": 0},
        "seconds": round(seconds, 2),
        "gtid_before": gtid_before,
        "gtid_after": gtid_after,
        **copy_binlogs(binlog_dir, start, end, into),
    }
