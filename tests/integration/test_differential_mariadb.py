"""Differential test: values written with SQL must come back identical through the binlog.

The server is the oracle. Rows are inserted, updated and deleted with SQL; the row images
decoded from the binlog files are compared with what `SELECT` returned at the same moment.

Normalisation applied to *both* sides before comparing (and nothing else):
- FLOAT: compared as the float32 bit pattern. The SELECT side reads `CAST(col AS DOUBLE)`,
  because the server prints FLOAT with 6 significant digits, which loses bits.
- TIMESTAMP: the session runs with time_zone '+00:00'; our aware UTC datetimes lose their tzinfo.
- BIT: the client receives big-endian bytes; both sides become int.
- GEOMETRY: the client receives the internal form (SRID u32 LE + WKB); ours is Geometry(srid, wkb).
- MySQL JSON: the client receives the text MySQL prints; ours is the decoded binary document,
  printed with `to_mysql_json_text` (MariaDB's JSON is text on both sides).
- a zero/invalid date is the string the server prints on both sides.
Every other value (ints, Decimal, str in every charset, bytes, date, datetime, timedelta,
ENUM/SET names, JSON text) is compared with ==.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from replicad.binlog import decoder_choice, rows
from replicad.binlog.changes import RowChange
from replicad.binlog.jsonb import to_mysql_json_text
from replicad.binlog.values import Geometry
from tests.helpers.binlog_helpers import binlog_position, changes_since

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True, params=["compiled", "python"])
def row_decoder(request: pytest.FixtureRequest) -> Any:
    """Run every test with the compiled row decoder (replicad.binlog._speedups) and with the
    generated pure-Python one; decoders are cached per implementation, never shared."""
    compiled = request.param == "compiled"
    if compiled and not decoder_choice.available():
        pytest.skip("replicad.binlog._speedups is not built")
    previous = decoder_choice.enabled()
    decoder_choice.set_enabled(compiled)
    try:
        yield request.param
    finally:
        decoder_choice.set_enabled(previous)
    for key, decoder in rows._SHARED_DECODERS.items():
        kind = decoder_choice.is_compiled(decoder.decode)
        assert kind == key[-1], f"decoder cached as compiled={key[-1]} is compiled={kind}"


ENUM_MEMBERS = ["small", "ÿé", "große", "日本", "😀x"]
SET_MEMBERS = ["a", "ß", "dé", "e", "日"]

# (name, SQL type, value strategy, insert placeholder)
TEMPORAL_FSP = range(7)


def _time_text(delta_us: int) -> str:
    sign = "-" if delta_us < 0 else ""
    us = abs(delta_us)
    seconds, micros = divmod(us, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    return f"{sign}{hours}:{rest // 60:02d}:{rest % 60:02d}.{micros:06d}"


def _text(alphabet: st.SearchStrategy[str] | None = None, max_size: int = 20):
    if alphabet is None:
        alphabet = st.characters(blacklist_categories=("Cs",))
    return st.text(alphabet=alphabet, max_size=max_size)


BMP = st.characters(blacklist_categories=("Cs",), max_codepoint=0xFFFF)
LATIN1 = st.characters(codec="cp1252")
CP1251 = st.characters(codec="cp1251")
_MAX_TIME_US = (838 * 3600 + 59 * 60 + 59) * 1_000_000 + 999_999

DATES = st.one_of(
    st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)),
    st.sampled_from(["0000-00-00", "2020-00-15", "2020-02-00", "0000-01-01"]),
)
DATETIMES = st.one_of(
    st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59)),
    st.sampled_from(["0000-00-00 00:00:00", "2020-00-00 10:11:12"]),
)
TIMESTAMPS = st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18))
TIMES = st.integers(-_MAX_TIME_US, _MAX_TIME_US).map(_time_text)


def _decimal(precision: int, scale: int) -> st.SearchStrategy[str]:
    limit = Decimal(10) ** (precision - scale) - Decimal(1).scaleb(-scale)
    return st.decimals(
        min_value=-limit, max_value=limit, places=scale, allow_nan=False, allow_infinity=False
    ).map(str)


def _json_docs() -> st.SearchStrategy[str]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        _text(max_size=10),
    )
    docs = st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(_text(max_size=6), inner, max_size=4)
        ),
        max_leaves=12,
    )
    return docs.map(lambda d: json.dumps(d, ensure_ascii=False))


def _shape(x_limit: float, y_limit: float) -> st.SearchStrategy[str]:
    def coord(limit: float) -> st.SearchStrategy[float]:
        return st.floats(-limit, limit, allow_nan=False).map(lambda v: round(v, 6))

    xy = st.tuples(coord(x_limit), coord(y_limit))
    point = xy.map(lambda p: f"POINT({p[0]} {p[1]})")
    line = st.lists(xy, min_size=2, max_size=5).map(
        lambda ps: "LINESTRING(" + ",".join(f"{x} {y}" for x, y in ps) + ")"
    )
    return st.one_of(point, line)


def _geometry() -> st.SearchStrategy[tuple[str, int]]:
    # MySQL reads SRID 4326 as latitude-longitude and refuses coordinates outside
    # [-90, 90] x [-180, 180]; MariaDB takes any. The same values serve both servers.
    planar = st.tuples(_shape(1e6, 1e6), st.sampled_from([0, 3857]))
    return st.one_of(planar, st.tuples(_shape(90, 180), st.just(4326)))


COLUMNS: list[tuple[str, str, st.SearchStrategy[Any], str]] = [
    ("ti", "TINYINT", st.integers(-128, 127), "%s"),
    ("tiu", "TINYINT UNSIGNED", st.integers(0, 255), "%s"),
    ("si", "SMALLINT", st.integers(-(2**15), 2**15 - 1), "%s"),
    ("siu", "SMALLINT UNSIGNED", st.integers(0, 2**16 - 1), "%s"),
    ("mi", "MEDIUMINT", st.integers(-(2**23), 2**23 - 1), "%s"),
    ("miu", "MEDIUMINT UNSIGNED", st.integers(0, 2**24 - 1), "%s"),
    ("i", "INT", st.integers(-(2**31), 2**31 - 1), "%s"),
    ("iu", "INT UNSIGNED", st.integers(0, 2**32 - 1), "%s"),
    ("bi", "BIGINT", st.integers(-(2**63), 2**63 - 1), "%s"),
    ("biu", "BIGINT UNSIGNED", st.integers(0, 2**64 - 1), "%s"),
    ("yr", "YEAR", st.one_of(st.just(0), st.integers(1901, 2155)), "%s"),
    ("f", "FLOAT", st.floats(width=32, allow_nan=False, allow_infinity=False), "%s"),
    ("d", "DOUBLE", st.floats(allow_nan=False, allow_infinity=False), "%s"),
    ("dec0", "DECIMAL(10,0)", _decimal(10, 0), "%s"),
    ("dec4", "DECIMAL(14,4)", _decimal(14, 4), "%s"),
    ("dec65", "DECIMAL(65,30)", _decimal(65, 30), "%s"),
    ("decf", "DECIMAL(9,9)", _decimal(9, 9), "%s"),
    ("dt", "DATE", DATES, "%s"),
    *[(f"tm{p}", f"TIME({p})", TIMES, "%s") for p in TEMPORAL_FSP],
    *[(f"dtm{p}", f"DATETIME({p})", DATETIMES, "%s") for p in TEMPORAL_FSP],
    *[(f"ts{p}", f"TIMESTAMP({p}) NULL", TIMESTAMPS, "%s") for p in TEMPORAL_FSP],
    ("ch", "CHAR(10)", _text(max_size=10), "%s"),
    ("vc", "VARCHAR(40)", _text(max_size=40), "%s"),
    ("vcl", "VARCHAR(300)", _text(max_size=300), "%s"),
    ("vcb", "VARCHAR(20) COLLATE utf8mb4_bin", _text(max_size=20), "%s"),
    ("mb3", "VARCHAR(20) CHARACTER SET utf8mb3", _text(BMP, 20), "%s"),
    ("l1", "VARCHAR(30) CHARACTER SET latin1", _text(LATIN1, 30), "%s"),
    ("l1c", "CHAR(5) CHARACTER SET latin1", _text(LATIN1, 5), "%s"),
    ("cyr", "VARCHAR(20) CHARACTER SET cp1251", _text(CP1251, 20), "%s"),
    ("u16", "VARCHAR(10) CHARACTER SET utf16", _text(max_size=10), "%s"),
    ("ucs", "VARCHAR(10) CHARACTER SET ucs2", _text(BMP, 10), "%s"),
    ("bn", "BINARY(8)", st.binary(max_size=8), "%s"),
    ("vbn", "VARBINARY(300)", st.binary(max_size=300), "%s"),
    ("tt", "TINYTEXT", _text(max_size=60), "%s"),
    ("tx", "TEXT", _text(max_size=300), "%s"),
    ("mt", "MEDIUMTEXT", _text(max_size=100), "%s"),
    ("lt", "LONGTEXT", _text(max_size=100), "%s"),
    ("tb", "TINYBLOB", st.binary(max_size=200), "%s"),
    ("bl", "BLOB", st.binary(max_size=2000), "%s"),
    ("mb", "MEDIUMBLOB", st.binary(max_size=300), "%s"),
    ("lb", "LONGBLOB", st.binary(max_size=300), "%s"),
    (
        "en",
        "ENUM(" + ",".join(f"'{m}'" for m in ENUM_MEMBERS) + ")",
        st.sampled_from(ENUM_MEMBERS),
        "%s",
    ),
    (
        "st",
        "SET(" + ",".join(f"'{m}'" for m in SET_MEMBERS) + ")",
        st.sets(st.sampled_from(SET_MEMBERS)).map(lambda s: ",".join(sorted(s))),
        "%s",
    ),
    ("b1", "BIT(1)", st.integers(0, 1), "%s"),
    ("b8", "BIT(8)", st.integers(0, 255), "%s"),
    ("b10", "BIT(10)", st.integers(0, 1023), "%s"),
    ("b33", "BIT(33)", st.integers(0, 2**33 - 1), "%s"),
    ("b64", "BIT(64)", st.integers(0, 2**64 - 1), "%s"),
    ("js", "JSON", _json_docs(), "%s"),
    ("geo", "GEOMETRY", _geometry(), "ST_GeomFromText(%s, %s)"),
    (
        "pt",
        "POINT",
        st.tuples(st.just("POINT(1.5 -2.25)"), st.just(4326)),
        "ST_GeomFromText(%s, %s)",
    ),
]
NAMES = [c[0] for c in COLUMNS]
FLOAT_COLUMNS = {"f"}
BIT_COLUMNS = {n for n, t, _, _ in COLUMNS if t.startswith("BIT")}
GEOMETRY_COLUMNS = {"geo", "pt"}
TIMESTAMP_COLUMNS = {n for n in NAMES if n.startswith("ts")}


def _row_strategy() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {name: st.one_of(st.none(), strategy) for name, _, strategy, _ in COLUMNS}
    )


def _create(conn) -> None:
    cols = ",\n".join(f"`{n}` {t}" for n, t, _, _ in COLUMNS)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero dates and zero-in-date values allowed
        cur.execute(
            f"CREATE TABLE wide (id INT PRIMARY KEY,\n{cols}\n) DEFAULT CHARSET=utf8mb4"
            " ROW_FORMAT=DYNAMIC"
        )


def _params(row: dict[str, Any]) -> tuple[list[str], list[Any]]:
    placeholders, params = [], []
    for name, _, _, placeholder in COLUMNS:
        value = row[name]
        if value is None:
            placeholders.append("NULL")
        elif name in GEOMETRY_COLUMNS:
            placeholders.append(placeholder)
            params.extend(value)
        else:
            placeholders.append(placeholder)
            params.append(value)
    return placeholders, params


def _insert(conn, rid: int, row: dict[str, Any]) -> None:
    placeholders, params = _params(row)
    columns = ", ".join(f"`{n}`" for n in NAMES)
    sql = f"INSERT INTO wide (id, {columns}) VALUES (%s, {', '.join(placeholders)})"
    with conn.cursor() as cur:
        cur.execute(sql, [rid, *params])


def _update(conn, rid: int, row: dict[str, Any]) -> None:
    placeholders, params = _params(row)
    sets = ", ".join(f"`{n}` = {p}" for n, p in zip(NAMES, placeholders, strict=True))
    with conn.cursor() as cur:
        cur.execute(f"UPDATE wide SET {sets} WHERE id = %s", [*params, rid])


def _select(conn) -> dict[int, dict[str, Any]]:
    exprs = ["id"] + [
        f"CAST(`{n}` AS DOUBLE) AS `{n}`" if n in FLOAT_COLUMNS else f"`{n}`" for n in NAMES
    ]
    with conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(exprs)} FROM wide ORDER BY id")
        columns = [d[0] for d in cur.description]
        return {r[0]: dict(zip(columns, r, strict=True)) for r in cur.fetchall()}


def _norm_server(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in FLOAT_COLUMNS:
        return struct.pack("<f", value)
    if name in BIT_COLUMNS:
        return int.from_bytes(value, "big")
    if name in GEOMETRY_COLUMNS:
        return bytes(value)
    return value


def _norm_binlog(name: str, value: Any, json_columns: frozenset[str]) -> Any:
    if value is None:
        return None
    if name in FLOAT_COLUMNS:
        return struct.pack("<f", value)
    if name in GEOMETRY_COLUMNS:
        assert isinstance(value, Geometry)
        return struct.pack("<I", value.srid) + value.wkb
    if name in json_columns:  # MySQL's binary JSON, decoded (MariaDB's JSON is text)
        return to_mysql_json_text(value)
    if name in TIMESTAMP_COLUMNS and isinstance(value, dt.datetime):
        assert value.tzinfo is not None, "TIMESTAMP must be decoded as an aware UTC datetime"
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _compare(change: RowChange, image: str, selected: dict[str, Any], what: str) -> int:
    decoded = getattr(change, image)
    assert set(decoded) == {"id", *NAMES}, f"{what}: column names differ"
    mismatches = []
    for name in NAMES:
        ours = _norm_binlog(name, decoded[name], change.json_columns)
        theirs = _norm_server(name, selected[name])
        if ours != theirs or type(ours) is not type(theirs):
            mismatches.append(f"{name}: binlog={ours!r} select={theirs!r}")
    assert not mismatches, f"{what} id={selected['id']}:\n  " + "\n  ".join(mismatches)
    return len(NAMES)


Position = Callable[[Any], tuple[str, int]]


def _roundtrip(
    conn,
    database: str,
    binlog_dir: Path,
    rows: list[dict[str, Any]],
    updates,
    position: Position = binlog_position,
) -> tuple[int, tuple[str, int], list[RowChange]]:
    """Insert rows, update them, delete them; compare every image. Returns the cells compared,
    where the binlog range starts and its changes (`position` reads the server's binlog
    position: MySQL 8.4 removed SHOW MASTER STATUS)."""
    cells = 0
    start = position(conn)
    for rid, row in enumerate(rows, 1):
        _insert(conn, rid, row)
    inserted = _select(conn)
    for rid, row in enumerate(updates, 1):
        if rid <= len(rows):
            _update(conn, rid, row)
    updated = _select(conn)
    with conn.cursor() as cur:
        cur.execute("DELETE FROM wide")
    changes = changes_since(conn, binlog_dir, start, database)

    inserts = [c for c in changes if c.op == "c"]
    assert len(inserts) == len(rows)
    for change in inserts:
        assert change.before is None and change.table == "wide"
        cells += _compare(change, "after", inserted[change.after["id"]], "insert")
    for change in (c for c in changes if c.op == "u"):
        rid = change.after["id"]
        cells += _compare(change, "before", inserted[rid], "update before-image")
        cells += _compare(change, "after", updated[rid], "update after-image")
    deletes = [c for c in changes if c.op == "d"]
    assert len(deletes) == len(rows)
    for change in deletes:
        assert change.after is None
        cells += _compare(change, "before", updated[change.before["id"]], "delete")
    return cells, start, changes


EDGE_MIN: dict[str, Any] = {
    "ti": -128,
    "tiu": 0,
    "si": -(2**15),
    "siu": 0,
    "mi": -(2**23),
    "miu": 0,
    "i": -(2**31),
    "iu": 0,
    "bi": -(2**63),
    "biu": 0,
    "yr": 0,
    "f": -3.4028234663852886e38,
    "d": -1.7976931348623157e308,
    "dec0": "-9999999999",
    "dec4": "-9999999999.9999",
    "dec65": "-" + "9" * 35 + "." + "9" * 30,
    "decf": "-0.999999999",
    "dt": "0000-00-00",
    **{f"tm{p}": "-838:59:59" + ("." + "9" * p if p else "") for p in TEMPORAL_FSP},
    **{f"dtm{p}": "0000-00-00 00:00:00" for p in TEMPORAL_FSP},
    **{f"ts{p}": "1970-01-01 00:00:01" for p in TEMPORAL_FSP},
    "ch": "",
    "vc": "",
    "vcl": "",
    "vcb": "",
    "mb3": "",
    "l1": "",
    "l1c": "",
    "cyr": "",
    "u16": "",
    "ucs": "",
    "bn": b"",
    "vbn": b"",
    "tt": "",
    "tx": "",
    "mt": "",
    "lt": "",
    "tb": b"",
    "bl": b"",
    "mb": b"",
    "lb": b"",
    "en": ENUM_MEMBERS[0],
    "st": "",
    "b1": 0,
    "b8": 0,
    "b10": 0,
    "b33": 0,
    "b64": 0,
    "js": "[]",
    "geo": ("POINT(0 0)", 0),
    "pt": ("POINT(0 0)", 0),
}
EDGE_MAX: dict[str, Any] = {
    "ti": 127,
    "tiu": 255,
    "si": 2**15 - 1,
    "siu": 2**16 - 1,
    "mi": 2**23 - 1,
    "miu": 2**24 - 1,
    "i": 2**31 - 1,
    "iu": 2**32 - 1,
    "bi": 2**63 - 1,
    "biu": 2**64 - 1,
    "yr": 2155,
    "f": 3.4028234663852886e38,
    "d": 1.7976931348623157e308,
    "dec0": "9999999999",
    "dec4": "9999999999.9999",
    "dec65": "9" * 35 + "." + "9" * 30,
    "decf": "0.999999999",
    "dt": "9999-12-31",
    **{f"tm{p}": "838:59:59" + ("." + "9" * p if p else "") for p in TEMPORAL_FSP},
    **{f"dtm{p}": "9999-12-31 23:59:59" + ("." + "9" * p if p else "") for p in TEMPORAL_FSP},
    **{f"ts{p}": "2038-01-19 03:14:07" + ("." + "9" * p if p else "") for p in TEMPORAL_FSP},
    "ch": "ÿ" * 10,
    "vc": "😀" * 40,
    "vcl": "é" * 300,
    "vcb": "Z" * 20,
    "mb3": "\uffff" * 20,
    "l1": "€" * 30,
    "l1c": "\x81\x8d\x8f\x90\x9d",
    "cyr": "Ж" * 20,
    "u16": "😀" * 10,
    "ucs": "\u20ac" * 10,
    "bn": b"\xff" * 8,
    "vbn": b"\x00" * 300,
    "tt": "t" * 255,
    "tx": "x" * 300,
    "mt": "m",
    "lt": "l",
    "tb": b"\xff" * 255,
    "bl": bytes(range(256)) * 7,
    "mb": b"\x00",
    "lb": b"\x01",
    "en": ENUM_MEMBERS[-1],
    "st": ",".join(sorted(SET_MEMBERS)),
    "b1": 1,
    "b8": 255,
    "b10": 1023,
    "b33": 2**33 - 1,
    "b64": 2**64 - 1,
    "js": '{"k": [1, 2.5, "x", null, true, {"n": -9223372036854775808}]}',
    "geo": ("LINESTRING(0 0,1 1,2 3.5)", 4326),
    "pt": ("POINT(-90 180)", 4326),  # latitude, longitude on MySQL
}
NEGATIVE_FRACTIONS: dict[str, Any] = {
    **{name: None for name in NAMES},
    **{f"tm{p}": "-00:00:00." + "0" * (p - 1) + "1" if p else "-00:00:01" for p in TEMPORAL_FSP},
    "dt": "2020-02-00",
    **{f"dtm{p}": "2020-00-00 10:11:12" for p in TEMPORAL_FSP},
}
NEGATIVE_FRACTIONS_2: dict[str, Any] = {
    **{name: None for name in NAMES},
    **{f"tm{p}": "-12:34:56.5" for p in TEMPORAL_FSP},
    "dt": "0000-01-01",
}


def test_every_column_type_has_at_least_40_variants() -> None:
    assert len(COLUMNS) >= 40


EDGE_ROWS = [EDGE_MIN, EDGE_MAX, NEGATIVE_FRACTIONS, NEGATIVE_FRACTIONS_2, {n: None for n in NAMES}]
EDGE_UPDATES = [EDGE_MAX, NEGATIVE_FRACTIONS_2, EDGE_MIN, NEGATIVE_FRACTIONS, EDGE_MAX]
EDGE_CELLS = len(NAMES) * (5 + 10 + 5)  # 5 inserts, 5 updates (two images), 5 deletes


def test_edges_round_trip(db, mariadb) -> None:
    conn, name = db
    _create(conn)
    cells, _, _ = _roundtrip(conn, name, mariadb["binlog_dir"], EDGE_ROWS, EDGE_UPDATES)
    assert cells == EDGE_CELLS


ROUNDTRIP_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@ROUNDTRIP_SETTINGS
@given(
    rows=st.lists(_row_strategy(), min_size=1, max_size=6),
    updates=st.lists(_row_strategy(), min_size=1, max_size=6),
)
@example(rows=[EDGE_MAX], updates=[EDGE_MIN])
def test_random_values_round_trip(db, mariadb, rows, updates) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS wide")
    _create(conn)
    _roundtrip(conn, name, mariadb["binlog_dir"], rows, updates)
