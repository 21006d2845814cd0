"""`replicad run` to stdout against the shared MariaDB: the daemon under test, a random DML
workload over tables a and b (the `workdb` fixture), and the oracle: the change stream folded
by primary key equals the tables' state, with no duplicates by source coordinates."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pymysql

from tests.helpers.daemon_process import DaemonProcess, wait_for
from tests.helpers.mariadb import MARIADB_PORT


class Replicad(DaemonProcess):
    """`replicad run` against the shared MariaDB (or a proxy / private server on `port`)."""

    def __init__(
        self,
        tmp: Path,
        *,
        server_id: int,
        user: str = "repl",
        password: str = "repl",
        start: str = "latest",
        port: int = MARIADB_PORT,
        unit_part_bytes: int | None = None,
        tls: str | None = None,
    ) -> None:
        parts = "" if unit_part_bytes is None else f"  unit_part_bytes: {unit_part_bytes}\n"
        parts += "" if tls is None else f"  tls: {tls}\n"  # a flow mapping of source.tls
        super().__init__(
            tmp,
            pipeline="test",
            source_yaml=(
                f"  host: 127.0.0.1\n  port: {port}\n  user: {user}\n"
                f"  server_id: {server_id}\n  start: {start}\n  heartbeat_s: 1\n"
                "  reconnect: {initial_s: 0.05, max_s: 0.5}\n" + parts
            ),
            password=password,
        )


def fold(changes: list[dict[str, Any]], db: str) -> dict[str, dict[str, Any]]:
    tables: dict[str, dict[str, Any]] = {"a": {}, "b": {}}
    for change in changes:
        if change["source"]["db"] != db:
            continue
        rows = tables.setdefault(change["source"]["table"], {})
        key_column = "id" if change["source"]["table"] == "a" else "k"
        if change["before"] is not None:
            rows.pop(change["before"][key_column], None)
        if change["after"] is not None:
            rows[change["after"][key_column]] = change["after"]
    return tables


def table_state(conn, db: str) -> dict[str, dict[str, Any]]:
    state: dict[str, dict[str, Any]] = {}
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT id, v, n FROM `{db}`.a")
        state["a"] = {r["id"]: r for r in cur.fetchall()}
        cur.execute(f"SELECT k, d, t FROM `{db}`.b")
        state["b"] = {
            r["k"]: {"k": r["k"], "d": str(r["d"]), "t": r["t"].isoformat()} for r in cur.fetchall()
        }
    return state


def random_workload(conn, db: str, transactions: int, seed: int) -> None:
    rng = random.Random(seed)
    with conn.cursor() as cur:
        for _ in range(transactions):
            cur.execute("BEGIN")
            for _ in range(rng.randint(1, 12)):
                roll = rng.random()
                key = rng.randint(1, 60)
                if roll < 0.5:
                    cur.execute(
                        f"REPLACE INTO `{db}`.a VALUES (%s, %s, %s)",
                        (key, "v" * rng.randint(0, 40), rng.randint(-(2**63), 2**63 - 1)),
                    )
                elif roll < 0.7:
                    cur.execute(
                        f"INSERT INTO `{db}`.b VALUES (%s, %s, NOW(3)) "
                        "ON DUPLICATE KEY UPDATE d = VALUES(d)",
                        (f"k{key}", f"{rng.randint(-99999999, 99999999) / 100:.2f}"),
                    )
                elif roll < 0.85:
                    cur.execute(f"UPDATE `{db}`.a SET n = n DIV 2 WHERE id < %s", (key,))
                else:
                    cur.execute(f"DELETE FROM `{db}`.a WHERE id = %s", (key,))
            cur.execute("COMMIT")


def assert_converged(replicad: Replicad, conn, db: str, timeout: float = 30) -> None:
    expected = table_state(conn, db)

    def folded() -> bool:
        return fold(replicad.changes(), db) == expected

    try:
        wait_for(folded, timeout, "the change stream to fold into the tables' state")
    except AssertionError:
        got = fold(replicad.changes(), db)
        for table in expected:
            missing = set(expected[table]) - set(got.get(table, {}))
            extra = set(got.get(table, {})) - set(expected[table])
            wrong = [
                k
                for k in expected[table]
                if k in got.get(table, {}) and got[table][k] != expected[table][k]
            ]
            print(
                table,
                "missing",
                sorted(missing)[:10],
                "extra",
                sorted(extra)[:10],
                "wrong",
                wrong[:5],
            )
        raise


def duplicates(changes: list[dict[str, Any]], db: str) -> int:
    seen: set[tuple[str, int, int]] = set()
    dups = 0
    for change in changes:
        if change["source"]["db"] != db:
            continue
        s = change["source"]
        key = (s["file"], s["pos"], s["row"])
        dups += key in seen
        seen.add(key)
    return dups
