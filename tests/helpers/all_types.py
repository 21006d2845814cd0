"""A table with every column type MariaDB has (ALL_TYPES), random SQL literals for it (edge
values included), and its oracle: the rows as SELECT returns them and the change messages,
typed by the schema topic alone, folded into the same form. Shared by the consumer-contract
and snapshot tests and the fault campaign (bench/chaos.py)."""

from __future__ import annotations

import random
import struct
from typing import Any

import pymysql

from replicad.consumers.typed import SchemaCatalog

ALL_TYPES = """CREATE TABLE t (
    id INT NOT NULL PRIMARY KEY,
    ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT UNSIGNED, bi BIGINT,
    bu BIGINT UNSIGNED, de DECIMAL(20,6), dz DECIMAL(5,0), fl FLOAT, dbl DOUBLE, bt BIT(12),
    d DATE, dt0 DATETIME, dt6 DATETIME(6), ts3 TIMESTAMP(3) NULL, tm TIME(6), y YEAR,
    c CHAR(5), vc VARCHAR(40), bn BINARY(4), vb VARBINARY(16), tx TEXT, bl BLOB,
    e ENUM('x','y','z'), st SET('a','b','c'), j JSON, g GEOMETRY
)"""

COLUMNS = [
    "ti",
    "tu",
    "si",
    "mi",
    "bi",
    "bu",
    "de",
    "dz",
    "fl",
    "dbl",
    "bt",
    "d",
    "dt0",
    "dt6",
    "ts3",
    "tm",
    "y",
    "c",
    "vc",
    "bn",
    "vb",
    "tx",
    "bl",
    "e",
    "st",
    "j",
    "g",
]


def random_literal(column: str, rng: random.Random) -> Any:
    """A random SQL literal (text) for one column, edge values included."""
    pick = rng.random()
    if pick < 0.08:
        return "NULL"
    if column in ("ti",):
        return str(rng.choice([-128, 127, 0, rng.randint(-128, 127)]))
    if column == "tu":
        return str(rng.choice([0, 255, rng.randint(0, 255)]))
    if column == "si":
        return str(rng.choice([-32768, 32767, rng.randint(-32768, 32767)]))
    if column == "mi":
        return str(rng.choice([0, 16777215, rng.randint(0, 16777215)]))
    if column == "bi":
        return str(rng.choice([-(2**63), 2**63 - 1, rng.randint(-(2**63), 2**63 - 1)]))
    if column == "bu":
        return str(rng.choice([0, 2**64 - 1, rng.randint(0, 2**64 - 1)]))
    if column == "de":
        return f"{rng.choice(['-', ''])}{rng.randint(0, 10**14 - 1)}.{rng.randint(0, 999999):06d}"
    if column == "dz":
        return str(rng.randint(-99999, 99999))
    if column == "fl":
        return rng.choice(["1.1", "-3.25", "0", "3.4e38", "1e-30"])
    if column == "dbl":
        return repr(rng.choice([0.1, -1e300, 2.5e-300, rng.uniform(-1e6, 1e6)]))
    if column == "bt":
        return f"b'{rng.randint(0, 4095):b}'"
    if column == "d":
        return rng.choice(["'1000-01-01'", "'9999-12-31'", "'1969-12-31'", "'2024-02-29'"])
    if column == "dt0":
        return rng.choice(
            ["'1000-01-01 00:00:00'", "'9999-12-31 23:59:59'", "'1960-05-06 07:08:09'"]
        )
    if column == "dt6":
        return f"'2021-03-04 05:06:07.{rng.randint(0, 999999):06d}'"
    if column == "ts3":
        return (
            f"'2038-01-19 03:14:07.{rng.randint(0, 999):03d}'"
            if pick < 0.5
            else "'1970-01-01 00:00:01.000'"
        )
    if column == "tm":
        some = f"'{rng.randint(0, 99)}:{rng.randint(0, 59)}:01.{rng.randint(0, 999999):06d}'"
        return rng.choice(["'-838:59:59.000000'", "'838:59:59.000000'", "'-00:00:00.5'", some])
    if column == "y":
        return rng.choice(["1901", "2155", "0", "2024"])
    if column == "c":
        return rng.choice(["'ab'", "''", "'ñü€x'"])
    if column == "vc":
        return rng.choice(["'plain'", "'quote '' and \\\\ backslash'", "'日本語テキスト'", "''"])
    if column == "bn":
        return rng.choice(["x'00'", "x'ffffffff'", "x'0102'"])
    if column == "vb":
        return rng.choice(["x''", "x'00ff00'", f"x'{rng.randbytes(16).hex()}'"])
    if column == "tx":
        return rng.choice(["'text'", "REPEAT('long ', 2000)"])
    if column == "bl":
        return f"x'{rng.randbytes(rng.randint(0, 300)).hex()}'"
    if column == "e":
        return rng.choice(["'x'", "'z'"])
    if column == "st":
        return rng.choice(["''", "'a,c'", "'a,b,c'"])
    if column == "j":
        return rng.choice(['\'{"a": [1, 2.5, null], "b": "x"}\'', "'[]'", "'\"s\"'"])
    if column == "added":
        return f"'n{rng.randint(0, 99)}'"
    if column == "g":
        return rng.choice(
            ["ST_GeomFromText('POINT(1 2)')", "ST_GeomFromText('LINESTRING(0 0,1 1)', 4326)"]
        )
    raise AssertionError(column)


def insert_random(cur: Any, rng: random.Random, ids: range, columns: list[str]) -> None:
    for i in ids:
        values = ", ".join(random_literal(c, rng) for c in columns)
        cur.execute(f"INSERT INTO t (id, {', '.join(columns)}) VALUES ({i}, {values})")


def selected_rows(conn: pymysql.connections.Connection, db: str) -> dict[int, dict[str, Any]]:
    """The rows of `db`.t by id, as PyMySQL returns them (its own Python types)."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM `{db}`.t")
        return {row["id"]: row for row in cur.fetchall()}


def comparable(column: str, value: Any) -> Any:
    """A typed message value in the form PyMySQL gives the same SQL value."""
    if value is None:
        return None
    if column == "bt":  # BIT: an int in the message, big-endian bytes from PyMySQL
        return value.to_bytes(2, "big")
    if column == "ts3":  # TIMESTAMP: UTC in the message; the session zone here is UTC
        return value.replace(tzinfo=None)
    if column == "g":  # (srid, WKB) in the message; SRID + WKB in MariaDB's own format
        srid, wkb = value
        return struct.pack("<I", srid) + wkb
    return value


def fold_typed(messages: list[dict[str, Any]], catalog: SchemaCatalog) -> dict[int, dict[str, Any]]:
    """The change messages of t, in the order given, typed by `catalog` and applied per id
    (a TRUNCATE, op "t", empties the table): comparable with `selected_rows`."""
    rows: dict[int, dict[str, Any]] = {}
    for message in messages:
        if message["op"] == "t":
            rows.clear()
            continue
        before, after = catalog.decode(message)
        if before is not None:
            rows.pop(before["id"], None)
        if after is not None:
            rows[after["id"]] = {k: comparable(k, v) for k, v in after.items()}
    return rows
