"""peers.py's database and writers: snapshot.py's 10-column rows, the table per contender,
and the paced writer child (`bench/peers.py --child SPEC`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.harness import children, mariadb
from bench.harness.paths import BENCH_DIR
from bench.workloads.ten_columns import create_table, insert_rows, recreate_database

HOST, PORT = "127.0.0.1", mariadb.MARIADB_PORT


COLUMNS = ("id", "n", "s", "d", "at", "f", "tx", "u", "day", "j")


LIVE_BASE = 10_000_000  # ids of the live phase; latency and backlog rows above it


LATENCY_BASE = 20_000_000


BACKLOG_BASE = 40_000_000


TXN_PER_S = 50  # paced writers: rows per transaction = rate / 50


def row_values(i: int) -> tuple[Any, ...]:
    """Row `i` of the 10-column table, the values ten_columns.insert_rows gives it."""
    return (
        i,
        i % 1000,
        f"name-{i}",
        (Decimal(i) / 7).quantize(Decimal("0.01")),
        datetime(2024, 1, 2, 3, 4, 5, 123456) + timedelta(seconds=i),
        i / 3,
        "x" * 40,
        i % 256,
        date(2024, 1, 1) + timedelta(days=i % 1000),
        f'{{"k": {i}}}',
    )


def connect_db(database: str | None = None) -> Any:
    import pymysql

    return pymysql.connect(
        host=HOST,
        port=PORT,
        user="root",
        password="root",
        database=database,
        autocommit=True,
        charset="utf8mb4",
    )


def prepare_database(database: str, snapshot_rows: int, contenders: int) -> None:
    """The database afresh: `snap` with its rows (100k-row statements, not one huge
    transaction on a shared server) and one empty `live_<n>` per contender."""
    conn = connect_db()
    with conn.cursor() as cur:
        recreate_database(cur, database)
        cur.execute(create_table("snap"))
        for first in range(1, snapshot_rows + 1, 100_000):
            last = min(snapshot_rows, first + 99_999)
            cur.execute(insert_rows(first, last, "snap"))
        for n in range(contenders):
            cur.execute(create_table(f"live_{n}"))
    conn.close()


def drop_database(database: str) -> None:
    conn = connect_db()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {database}")
    conn.close()


def child_writer(spec: dict[str, Any]) -> dict[str, Any]:
    """`bulk`: spec["rows"] inserts as multi-row INSERTs of spec["batch"] rows (autocommit:
    one transaction each), each followed by an UPDATE of those rows when spec["updates"];
    statements rendered before the clock starts. `paced`: spec["rate"] rows/s for
    spec["seconds"], rate/50 rows per INSERT on an absolute schedule, `at = NOW(6)`."""
    conn = connect_db(spec["database"])
    table, first, batch = spec["table"], spec["first_id"], spec["batch"]
    head = f"INSERT INTO {table} ({','.join(COLUMNS)}) VALUES "
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        if spec["mode"] == "bulk":
            statements = []
            for lo in range(first, first + spec["rows"], batch):
                hi = min(first + spec["rows"], lo + batch) - 1
                values = ",".join(
                    cur.mogrify(f"({','.join(['%s'] * 10)})", row_values(i))
                    for i in range(lo, hi + 1)
                )
                statements.append(head + values)
                if spec["updates"]:
                    statements.append(
                        f"UPDATE {table} SET n = n + 1, s = CONCAT(s, 'u') "
                        f"WHERE id BETWEEN {lo} AND {hi}"
                    )
            began = time.time()
            for sql in statements:
                cur.execute(sql)
            ended = time.time()
            conn.close()
            return {"began": began, "ended": ended, "statements": len(statements)}
        # paced: the row without `at` rendered once per pool entry, NOW(6) put in per row
        pool = []
        for i in range(1000):
            parts = [conn.escape(v) for v in row_values(i)]
            pool.append((",".join(parts[1:4]), ",".join(parts[5:])))
        count = max(1, round(spec["rate"] * spec["seconds"] / batch))
        interval = batch / spec["rate"]
        next_id = first
        late = 0.0
        t0 = time.time() + 0.1
        for txn in range(count):
            due = t0 + txn * interval
            if (pause := due - time.time()) > 0:
                time.sleep(pause)
            late = max(late, time.time() - due)
            values = ",".join(
                f"({i},{pool[i % 1000][0]},NOW(6),{pool[i % 1000][1]})"
                for i in range(next_id, next_id + batch)
            )
            cur.execute(head + values)
            next_id += batch
        ended = time.time()
    conn.close()
    return {"began": t0, "ended": ended, "rows": next_id - first, "max_late_s": late}


def run_writer(spec: dict[str, Any], workdir: Path) -> subprocess.Popen[bytes]:
    out = workdir / f"writer-{uuid.uuid4().hex[:8]}.json"
    spec = {**spec, "out": str(out)}
    cmd = [sys.executable, str(BENCH_DIR / "peers.py"), "--child", json.dumps(spec)]
    return subprocess.Popen(cmd, env=children.python_env())


def writer_result(proc: subprocess.Popen[bytes], spec_out: str | None = None) -> dict[str, Any]:
    assert isinstance(proc.args, list)
    out = Path(json.loads(proc.args[-1])["out"]) if spec_out is None else Path(spec_out)
    proc.wait()
    result: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    if proc.returncode != 0 or "error" in result or not result:
        raise RuntimeError(f"writer failed (exit {proc.returncode}): {result.get('error', '')}")
    return result
