"""decode.py's workload: the 12-column table `replicad_bench.bench_rows`, its deterministic
rows, the insert/update/delete mix, and the binlog built from it (reused while it matches)."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from itertools import islice
from typing import Any

from bench.harness.mariadb import Server, binlog_index, scalar
from bench.harness.paths import DATA_DIR

MARKER = DATA_DIR / "binlog.json"


DATABASE = "replicad_bench"


TABLE = "bench_rows"


WORKLOAD_VERSION = 1  # bump when the table or the workload changes: forces a rebuild


ROWS_PER_STATEMENT = 1_000  # rows per multi-row INSERT, per UPDATE / DELETE range


STATEMENTS_PER_TRANSACTION = 10


SEED = 20240601


OPS = ("c", "u", "d")


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


def id_ranges(first: int, last: int, size: int) -> list[tuple[int, int]]:
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
    for lo, hi in id_ranges(1, plan.inserts, ROWS_PER_STATEMENT):
        rows = [make_row(row_id, rng) for row_id in range(lo, hi + 1)]
        yield head + ",".join([row_sql] * len(rows)), [value for row in rows for value in row]


def run_workload(conn: Any, plan: Plan) -> dict[str, int]:
    done = {"c": _in_transactions(conn, _inserts(plan))}
    # Updates hit the lowest ids, deletes the highest: disjoint, and every row exists.
    updates = ((UPDATE_SQL, [lo, hi]) for lo, hi in id_ranges(1, plan.updates, ROWS_PER_STATEMENT))
    done["u"] = _in_transactions(conn, updates)
    first_deleted = plan.inserts - plan.deletes + 1
    deletes = (
        (DELETE_SQL, [lo, hi])
        for lo, hi in id_ranges(first_deleted, plan.inserts, ROWS_PER_STATEMENT)
    )
    done["d"] = _in_transactions(conn, deletes)
    return done


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
            binlog_dir = os.path.dirname(scalar(cur, "SELECT @@log_bin_basename"))
            first_file = scalar(cur, "SHOW MASTER STATUS")
            gtid_before = scalar(cur, "SELECT @@gtid_binlog_pos")
            workload_started = time.perf_counter()
            done = run_workload(conn, plan)
            workload_seconds = time.perf_counter() - workload_started
            gtid_after = scalar(cur, "SELECT @@gtid_binlog_pos")
            cur.execute("FLUSH BINARY LOGS")
            next_file = scalar(cur, "SHOW MASTER STATUS")
            cur.execute("SHOW BINARY LOGS")
            names = [row[0] for row in cur.fetchall()]
    finally:
        conn.close()
    if done != plan.counts():
        raise SystemExit(f"workload affected {done} rows, planned {plan.counts()}")
    lo, hi = binlog_index(first_file), binlog_index(next_file)
    files = sorted((n for n in names if lo <= binlog_index(n) < hi), key=binlog_index)
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
