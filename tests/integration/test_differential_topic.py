"""The differential all-types test of test_differential_mariadb.py, through the running daemon
into Kafka, on MariaDB 10.11 (3306) and MySQL 9.7 (3307).

The wide table with every column type gets the edge rows (plus one row holding the JSON
document `null`), their updates and a delete of every row. `_roundtrip` proves that the row
images decoded in-process from the binlog files equal what `SELECT` returned at each step;
then `replicad run` (compiled decoder, or REPLICAD_PURE_PYTHON=1, as the in-process decoder
of the test) publishes that binlog range into the real Kafka, once in each value mode, and
the table's topic is read back message by message, in binlog order:

- `exact` (the default): every cell of every image equals what SELECT returned, put in the
  envelope's documented text forms (docs/consumers.md, "Column values") by this test's own
  `_exact`, which never calls replicad; the JSON-null note where the document is `null`;
- both modes: each message (key, op, images, notes, `source`) equals the envelope that the
  reference row path (`EnvelopeLines`, after `ValueMode.convert` in `debezium` mode) renders
  for the decoded change, except the top-level `ts_ms`/`ts_us`/`ts_ns` (the time of
  publishing); each delete is followed by its tombstone. With the compiled decoder the
  `exact` daemon takes the compiled publishing path (`sinks/event_envelope.py`, checked on
  /metrics), so this also holds it to the reference;
- `debezium`: a handful of columns straight against SELECT in Debezium's documented
  encodings (DATE days, DATETIME(6) and TIME microseconds, BIT(1) boolean, BIT(n)
  little-endian bytes, DECIMAL unscaled two's-complement bytes, BIGINT UNSIGNED wrapped to a
  long, binary as base64, JSON as its text).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import struct
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

import tests.integration.test_differential_mariadb as differential
from replicad.binlog.changes import RowChange
from replicad.config import EnvelopeConfig
from replicad.sinks.envelope import EnvelopeLines, row_messages
from replicad.sinks.value_modes import ValueMode
from tests.helpers import binlog_helpers, mysql
from tests.helpers.daemon_process import wait_for
from tests.helpers.databases import fresh_database
from tests.helpers.http import http_get, sample
from tests.helpers.kafka_helpers import Record, consume_all
from tests.helpers.kafka_run import KafkaReplicad
from tests.helpers.ports import free_port_block
from tests.integration.test_differential_mariadb import (
    BIT_COLUMNS,
    EDGE_ROWS,
    EDGE_UPDATES,
    FLOAT_COLUMNS,
    GEOMETRY_COLUMNS,
    NAMES,
    TIMESTAMP_COLUMNS,
    _create,
    _roundtrip,
    row_decoder,
)

pytestmark = pytest.mark.integration
__all__ = ["row_decoder"]  # an autouse fixture: compiled and pure-Python decoders

Conn = pymysql.connections.Connection
Rows = dict[int, dict[str, Any]]
PIPELINE = "kt"  # KafkaReplicad's pipeline name: `source.name` of every message
NOTES = ("absent", "json_null", "json_diffs")
# A sixth row: the JSON document `null` (MySQL: written null, named in `json_null`; the
# compiled path leaves its event to the row path). Not updated: EDGE_UPDATES has five rows.
ROWS = [*EDGE_ROWS, {**{n: None for n in NAMES}, "js": "null"}]
DEBEZIUM = EnvelopeConfig(values="debezium")


@dataclasses.dataclass(frozen=True)
class Server:
    flavour: str
    conn: Conn
    db: str
    port: int
    binlog_dir: Path
    position: Callable[[Conn], tuple[str, int]]


@pytest.fixture(params=["mariadb", "mysql"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A fresh database on the shared MariaDB or MySQL (each fails, never skips, if down)."""
    if request.param == "mysql":
        described = mysql.ensure_mysql()
        with fresh_database(mysql.connect_root) as (conn, db):
            yield Server(
                "mysql", conn, db, described.port, described.binlog_dir, mysql.binlog_position
            )
        return
    described = request.getfixturevalue("mariadb")
    conn, db = request.getfixturevalue("db")
    yield Server(
        "mariadb",
        conn,
        db,
        int(described["port"]),
        Path(described["binlog_dir"]),
        binlog_helpers.binlog_position,
    )


def _write(server: Server, monkeypatch: pytest.MonkeyPatch):
    """The rows, updates and delete of the in-process differential (which compares every
    decoded image with SELECT); returns its decoded changes, the binlog range they span and
    what SELECT returned after the inserts and after the updates."""
    selected: list[Rows] = []
    select = differential._select

    def recording(conn: Conn) -> Rows:
        selected.append(select(conn))
        return selected[-1]

    monkeypatch.setattr(differential, "_select", recording)
    _create(server.conn)
    cells, start, changes = _roundtrip(
        server.conn, server.db, server.binlog_dir, ROWS, EDGE_UPDATES, server.position
    )
    assert cells == len(NAMES) * (len(ROWS) + 2 * len(EDGE_UPDATES) + len(ROWS))
    inserted, updated = selected
    return changes, start, server.position(server.conn), inserted, updated


def _daemon(
    tmp: Path, server: Server, server_id: int, start: tuple[str, int], kafka: str, **yaml: str
) -> tuple[KafkaReplicad, str]:
    prefix = f"d{uuid.uuid4().hex[:8]}"  # this test's own topics, whoever runs beside it
    replicad = KafkaReplicad(
        tmp,
        server_id=server_id,
        prefix=prefix,
        kafka=kafka,
        db=server.db,
        port=server.port,
        start=f"{{file: {start[0]}, pos: {start[1]}}}",
        **yaml,
    )
    return replicad, prefix


def _reached(replicad: KafkaReplicad, end: tuple[str, int]) -> bool:
    """Whether the stored (acknowledged) position is at or past `end`: a file/pos of this
    server, so other tests' later writes can only move it further."""
    position = replicad.position()
    return position is not None and (position["file"], position["pos"]) >= end


def test_the_topic_carries_what_select_returned(
    server: Server, row_decoder: str, kafka: str, tmp_path: Path, monkeypatch
) -> None:
    changes, start, end, inserted, updated = _write(server, monkeypatch)
    if row_decoder == "python":
        monkeypatch.setenv("REPLICAD_PURE_PYTHON", "1")
    else:
        monkeypatch.delenv("REPLICAD_PURE_PYTHON", raising=False)
    base = 7830 + 4 * (server.flavour == "mysql") + 2 * (row_decoder == "python")
    metrics_port = free_port_block(1)
    exact, exact_prefix = _daemon(
        tmp_path / "exact",
        server,
        base,
        start,
        kafka,
        extra_yaml=f"metrics: {{listen: '127.0.0.1:{metrics_port}'}}\n",
    )
    debezium, debezium_prefix = _daemon(
        tmp_path / "debezium",
        server,
        base + 1,
        start,
        kafka,
        extra_yaml="envelope: {values: debezium}\n",
    )
    for daemon in (exact, debezium):
        daemon.start()
    for daemon in (exact, debezium):
        wait_for(lambda d=daemon: _reached(d, end), 60, f"the stored position to pass {end}")
    status, metrics = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
    for daemon in (exact, debezium):
        assert daemon.stop() == 0
    assert status == 200
    paths = {
        p: sample(metrics, "replicad_rows_events_total", path=p) for p in ("compiled", "row_by_row")
    }
    if row_decoder == "compiled":  # every event but, on MySQL, those with the `null` document
        assert (paths["compiled"] or 0) >= len(EDGE_ROWS) + len(EDGE_UPDATES), paths
    else:
        assert not paths["compiled"] and paths["row_by_row"], paths

    topic = f"{{}}.{server.db}.wide"
    records = consume_all(kafka, [topic.format(exact_prefix)], idle_s=1.0)
    messages = _assert_as_rendered(records, changes, ValueMode())
    _assert_exact(messages, inserted, updated, server.flavour)
    if server.flavour == "mysql":  # JSON exactly as MySQL prints it, spaces and all
        texts = [v for rows in (inserted, updated) for r in rows.values() if (v := r["js"])]
        published = b"".join(r.value for r in records if r.value is not None)
        assert all(b'"js":' + t.encode() in published for t in texts), texts

    records = consume_all(kafka, [topic.format(debezium_prefix)], idle_s=1.0)
    messages = _assert_as_rendered(records, changes, ValueMode(DEBEZIUM))
    _assert_debezium(messages, inserted, updated, server.flavour)


def _assert_as_rendered(
    records: list[Record], changes: list[RowChange], mode: ValueMode
) -> list[dict[str, Any]]:
    """The topic holds, in binlog order, one message per message of each decoded change (its
    key the row's id) and a tombstone after each delete; each message is what the reference
    row path renders for the change in `mode`, but for the time of publishing. Returns the
    messages (without tombstones)."""
    lines = EnvelopeLines(PIPELINE)
    expected: list[tuple[bytes, dict[str, Any] | None]] = []
    for change in changes:
        # The daemon's default (envelope.include_query false): no statement in `source`.
        converted = mode.convert(dataclasses.replace(change, query=None))
        rendered = [orjson.loads(line) for line in lines.row(converted).splitlines()]
        for (op, before, after), value in zip(row_messages(change), rendered, strict=True):
            key = orjson.dumps({"id": (after if op == "c" else before)["id"]})
            expected.append((key, value))
            if op == "d":
                expected.append((key, None))
    assert {r.partition for r in records} == {0}
    assert len(records) == len(expected), [(r.key, r.value and r.json()["op"]) for r in records]
    for record, (key, value) in zip(records, expected, strict=True):
        where = f"{record.topic}@{record.offset}"
        assert record.key == key, where
        if value is None:
            assert record.value is None, f"{where}: a tombstone expected"
            continue
        message = record.json()
        for clock in ("ts_ms", "ts_us", "ts_ns"):
            value.pop(clock)  # the time of rendering; the topic's, the time of publishing:
        published_ms = message.pop("ts_ms")
        assert published_ms >= message["source"]["ts_ms"], where  # after the commit
        published_us = message.pop("ts_us")
        assert published_us // 1000 == published_ms, where  # one clock in three units
        assert message.pop("ts_ns") // 1000 == published_us, where
        assert message == value, f"{where}:\n{_differences(message, value)}"
        source = message["source"]
        headers = {k: record.headers[f"replicad.{k}"].decode() for k in ("file", "pos", "row")}
        assert headers == {k: str(source[k]) for k in ("file", "pos", "row")}, where
    return [r.json() for r in records if r.value is not None]


def _differences(ours: dict[str, Any], theirs: dict[str, Any]) -> str:
    lines = []
    for part in ("before", "after"):
        a, b = ours.get(part) or {}, theirs.get(part) or {}
        lines += [
            f"{part}.{k}: topic={a.get(k)!r} rendered={b.get(k)!r}"
            for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)
        ]
    lines += [
        f"{k}: topic={ours.get(k)!r} rendered={theirs.get(k)!r}"
        for k in (set(ours) | set(theirs)) - {"before", "after"}
        if ours.get(k) != theirs.get(k)
    ]
    return "\n".join(lines[:20])


def _images(messages: list[dict[str, Any]], inserted: Rows, updated: Rows):
    """(message, image name, its row, the row as SELECT returned it at that moment)."""
    ops = [m["op"] for m in messages]
    assert ops == ["c"] * len(ROWS) + ["u"] * len(EDGE_UPDATES) + ["d"] * len(ROWS), ops
    for message in messages:
        if message["op"] == "c":
            yield message, "after", message["after"], inserted[message["after"]["id"]]
        elif message["op"] == "u":
            yield message, "before", message["before"], inserted[message["before"]["id"]]
            yield message, "after", message["after"], updated[message["after"]["id"]]
        else:
            yield message, "before", message["before"], updated[message["before"]["id"]]


# ------------------------------------------------------------------ exact mode


def _time_text(value: dt.timedelta) -> str:
    """`[-]HH:MM:SS[.ffffff]` (docs/consumers.md): hours past 24, microseconds if any."""
    micros = abs(value) // dt.timedelta(microseconds=1)
    seconds, fraction = divmod(micros, 1_000_000)
    text = f"{'-' if value < dt.timedelta(0) else ''}{seconds // 3600:02d}:"
    text += f"{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{fraction:06d}" if fraction else "")


def _exact(name: str, value: Any, flavour: str) -> Any:
    """What SELECT returned (PyMySQL's types), in the documented `exact` form."""
    if value is None or name in FLOAT_COLUMNS:  # FLOAT: compared as float32 bits
        return value
    if name in BIT_COLUMNS:
        return int.from_bytes(value, "big")
    if name in GEOMETRY_COLUMNS:  # the server's internal form: SRID (u32 LE), then WKB
        return {
            "srid": struct.unpack("<I", value[:4])[0],
            "wkb": base64.b64encode(value[4:]).decode(),
        }
    if name == "js" and flavour == "mysql":  # a JSON value (MariaDB's JSON is text)
        return orjson.loads(value)
    if isinstance(value, Decimal):
        return format(value, "f")  # the digits the server printed, scale kept
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.datetime):  # TIMESTAMP: the session's zone is UTC
        return value.isoformat() + ("Z" if name in TIMESTAMP_COLUMNS else "")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return _time_text(value)
    return value  # ints, DOUBLE, text, ENUM/SET names, zero dates as the server printed them


def _assert_exact(messages: list[dict], inserted: Rows, updated: Rows, flavour: str) -> None:
    """Every cell against SELECT. FLOAT: the shortest decimal that reads back as the stored
    float32; a MySQL JSON `null` document: null, and named in `json_null`."""
    mismatches, cells = [], 0
    for message, image, row, selected in _images(messages, inserted, updated):
        assert set(row) == {"id", *NAMES}
        nulls = message.get("json_null", {}).get(image, [])
        for name in NAMES:
            cells += 1
            ours, theirs = row[name], _exact(name, selected[name], flavour)
            if name in FLOAT_COLUMNS and ours is not None and theirs is not None:
                ours, theirs = struct.pack("<f", ours), struct.pack("<f", theirs)
            if name == "js" and flavour == "mysql" and selected[name] == "null":
                ours = "null" if ours is None and nulls == ["js"] else (ours, nulls)
                theirs = "null"
            if ours != theirs or type(ours) is not type(theirs):
                mismatches.append(
                    f"{message['op']} {image} id={row['id']} {name}: "
                    f"topic={ours!r} select={theirs!r}"
                )
    assert not mismatches, f"{len(mismatches)} of {cells} cells:\n  " + "\n  ".join(mismatches)
    assert cells == len(NAMES) * (2 * len(ROWS) + 2 * len(EDGE_UPDATES))


# ------------------------------------------------------------------ debezium mode


def _unscaled(value: Decimal, scale: int) -> str:
    """Kafka Connect's Decimal: the unscaled value's minimal two's-complement bytes (Java's
    BigInteger.toByteArray), base64 in JSON."""
    unscaled = int(value.scaleb(scale))
    bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
    return base64.b64encode(unscaled.to_bytes(bits // 8 + 1, "big", signed=True)).decode()


def _micros(value: dt.timedelta) -> int:
    return value // dt.timedelta(microseconds=1)


_EPOCH = dt.datetime(1970, 1, 1)
# column -> Debezium's encoding of the value SELECT returned (None stays None); dates only
# where PyMySQL gives a date (a zero date, its string, is null in a nullable column)
DEBEZIUM_CHECKS: dict[str, Callable[[Any], Any]] = {
    "i": lambda v: v,
    "biu": lambda v: v - (1 << 64) if v >= 1 << 63 else v,  # bigint.unsigned.handling.mode long
    "dec4": lambda v: _unscaled(v, 4),  # decimal.handling.mode precise
    "dt": lambda v: (v - _EPOCH.date()).days if isinstance(v, dt.date) else None,
    "dtm6": lambda v: _micros(v - _EPOCH) if isinstance(v, dt.datetime) else None,
    "tm6": _micros,  # adaptive_time_microseconds
    "b1": lambda v: v == b"\x01",
    "b10": lambda v: base64.b64encode(int.from_bytes(v, "big").to_bytes(2, "little")).decode(),
    "vbn": lambda v: base64.b64encode(v).decode(),  # binary.handling.mode bytes
    "en": lambda v: v,
    "js": lambda v: v,  # io.debezium.data.Json: the text (MariaDB's JSON is text as stored)
}


def _compact_json(text: str) -> str:
    """MySQL's JSON as Debezium's binlog reader prints it (JsonBinary): SELECT's text
    without the space MySQL puts after each `,` and `:` between tokens."""
    out, in_string, escaped, previous = [], False, False, "["
    for char in text:
        if in_string:
            escaped, in_string = (
                char == "\\" and not escaped,
                in_string and (char != '"' or escaped),
            )
        elif char == '"':
            in_string = True
        elif char == " " and previous in ",:":
            continue
        out.append(char)
        previous = char
    return "".join(out)


def _assert_debezium(messages: list[dict], inserted: Rows, updated: Rows, flavour: str) -> None:
    checks = dict(DEBEZIUM_CHECKS)
    if flavour == "mysql":
        checks["js"] = _compact_json
    mismatches, cells = [], 0
    for message, image, row, selected in _images(messages, inserted, updated):
        for name, encode in checks.items():
            cells += 1
            value = selected[name]
            if name in ("dt", "dtm6") and isinstance(value, str) and value[:10] != "0000-00-00":
                continue  # a date with a zero month or day: Debezium's documentation is silent
            theirs = None if value is None else encode(value)
            if row[name] != theirs:
                where = f"{message['op']} {image} id={row['id']} {name}"
                mismatches.append(f"{where}: topic={row[name]!r} select={value!r} -> {theirs!r}")
    assert not mismatches, f"{len(mismatches)} of {cells} cells:\n  " + "\n  ".join(mismatches)
