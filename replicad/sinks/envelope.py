"""The message envelope (docs/architecture.md, "Message format") and the JSON mapping of
column values.

Value mapping: DECIMAL as string; DATE/DATETIME as ISO-8601 (TIMESTAMP in UTC with 'Z');
TIME as `[-]HH:MM:SS[.ffffff]` (hours may exceed 24, so it is not a time of day);
binary as base64; JSON columns as JSON (numbers exactly as stored); ENUM/SET as strings;
BIT as integer; GEOMETRY as {"srid", "wkb" (base64)}; a zero or invalid date stays the
string MySQL prints.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson

from replicad import __version__
from replicad.binlog import jsonb
from replicad.binlog.changes import RowChange, TableChange
from replicad.binlog.column_types import TableDescription
from replicad.binlog.values import Geometry, decimal_text, format_time

if TYPE_CHECKING:
    from replicad.sinks.value_modes import ConnectSchemas


def _base64(value: bytes | bytearray | memoryview) -> str:
    return binascii.b2a_base64(value, newline=False).decode("ascii")


# The common column types by exact type: one dict lookup instead of a chain of isinstance
# (orjson calls `_default` for every value it cannot write itself).
_BY_TYPE: dict[type, Any] = {
    Decimal: decimal_text,
    bytes: _base64,
    bytearray: _base64,
    memoryview: _base64,
    dt.timedelta: format_time,
}


def _default(value: Any) -> Any:
    convert = _BY_TYPE.get(type(value))
    if convert is not None:
        return convert(value)
    if isinstance(value, Decimal):
        return decimal_text(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat() + "Z"
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return format_time(value)
    if isinstance(value, Geometry):
        return {"srid": value.srid, "wkb": base64.b64encode(value.wkb).decode("ascii")}
    if isinstance(value, (dict, list)) or value is None or isinstance(value, (int, float, str)):
        return value
    if isinstance(value, jsonb.JsonOpaque):
        return str(value)
    if value is jsonb.JSON_NULL:
        return None
    raise TypeError(f"no JSON mapping for {type(value).__name__}")


Row = dict[str, Any] | None


def json_column(value: Any) -> Any:
    """A decoded MySQL JSON document, emitted as JSON text exactly as MySQL prints it."""
    return orjson.Fragment(jsonb.to_mysql_json_text(value))


def row_messages(change: RowChange) -> tuple[tuple[str, Row, Row], ...]:
    """The messages one row change becomes, as (op, before, after): one, except an update of
    a primary-key column, which is a delete of the old key and a create of the new one
    (Debezium's split, so that a keyed consumer drops the old row). Every output (Kafka,
    the JSON-lines sink, `replicad dump`) writes these same messages."""
    if change.op == "u" and change.primary_key:
        before, after = change.before or {}, change.after or {}
        # A key column one image does not carry (binlog_row_image MINIMAL, a `key_columns`
        # column) is not known to have changed: only columns in both images are compared.
        if any(k in before and k in after and before[k] != after[k] for k in change.primary_key):
            return (("d", change.before, None), ("c", None, change.after))
    return ((change.op, change.before, change.after),)


def source_ts_us(change: RowChange | TableChange) -> int:
    """source.ts_us: the commit time in microseconds where the value mode set it (`debezium`
    on MySQL: the GTID event's), else ts_ms's milliseconds as microseconds."""
    ts_us = change.ts_us if isinstance(change, RowChange) else None
    return change.ts_ms * 1000 if ts_us is None else ts_us


def _source(change: RowChange | TableChange, name: str, row: int) -> dict[str, Any]:
    schema = change.schema if isinstance(change, RowChange) else None
    ts_us = source_ts_us(change)
    # Debezium 3's fields are all here, in its order: ts_us and ts_ns (the commit time
    # finer than ts_ms) and sequence (always null in its binlog connectors).
    return {
        "version": __version__,
        "connector": "replicad",
        "name": name,
        "ts_ms": change.ts_ms,
        "ts_us": ts_us,
        "ts_ns": ts_us * 1000,
        "snapshot": change.snapshot if isinstance(change, RowChange) else "false",
        "db": change.db,
        "sequence": None,
        "table": change.table,
        "server_id": change.server_id,
        "gtid": change.gtid,
        "file": change.file,
        "pos": change.pos,
        "row": row,
        "thread": change.thread,
        "query": change.query if isinstance(change, RowChange) else change.ddl,
        "schema_version": None if schema is None else schema.version,
    }


def change_envelope(
    change: RowChange,
    op: str,
    before: Row,
    after: Row,
    name: str,
    ts_ms: int,
    transaction: dict[str, Any] | None = None,
) -> dict:
    """A change message's value, as a dict: Debezium's MySQL envelope (docs/architecture.md,
    "Message format") with replicad's fields in `source` (file, pos, row, gtid,
    schema_version). `op`, `before` and `after` come from `row_messages`. `EnvelopeWriter`
    renders the same bytes faster; this is its reference."""
    json_columns = change.json_columns
    return {
        "before": _row(before, json_columns),
        "after": _row(after, json_columns),
        "source": _source(change, name, change.row),
        "op": op,
        "ts_ms": ts_ms,
        "ts_us": ts_ms * 1000,
        "ts_ns": ts_ms * 1_000_000,
        "transaction": transaction,
        **image_notes(change, before, after),
    }


def image_notes(change: RowChange, before: Row, after: Row) -> dict[str, Any]:
    """What a message's images cannot say themselves (docs/consumers.md, "Partial row
    images", "JSON null"), for each image the message has: `absent`, the columns the binlog
    image did not carry; `json_null`, the JSON columns whose document is `null` (not SQL
    NULL; in `exact` mode, where both are written null); `json_diffs`, a JSON column's
    changes without its base document. Empty for a full image without JSON nulls: those
    messages are as they always were."""
    images = [
        (k, row, absent)
        for k, row, absent in zip(_IMAGES, (before, after), change.absent, strict=True)
        if row is not None
    ]
    notes: dict[str, Any] = {}
    if any(absent for _, _, absent in images):
        notes["absent"] = {k: list(absent) for k, _, absent in images}
    if change.json_columns:
        nulls = {k: [n for n, v in row.items() if v is jsonb.JSON_NULL] for k, row, _ in images}
        if any(nulls.values()):
            notes["json_null"] = nulls
    if change.json_diffs and after is not None:
        notes["json_diffs"] = {n: [_diff(d) for d in ds] for n, ds in change.json_diffs.items()}
    return notes


_IMAGES = ("before", "after")


def _diff(diff: jsonb.JsonDiff) -> dict[str, Any]:
    """One JSON diff: MySQL's operation in lower case, its path, and (not for a remove) the
    new value as JSON, whatever the value mode (it is replicad's own field)."""
    out: dict[str, Any] = {"op": diff.operation.name.lower(), "path": diff.path}
    if diff.operation != jsonb.JsonDiffOp.REMOVE:
        out["value"] = orjson.Fragment(jsonb.to_mysql_json_text(diff.value))
    return out


def truncate_envelope(change: TableChange, name: str, ts_ms: int) -> dict:
    """TRUNCATE: Debezium's op "t", no row images; `source.query` holds the statement."""
    return {
        "before": None,
        "after": None,
        "source": _source(change, name, 0),
        "op": "t",
        "ts_ms": ts_ms,
        "ts_us": ts_ms * 1000,
        "ts_ns": ts_ms * 1_000_000,
        "transaction": None,
    }


def schema_change_value(change: TableChange, name: str, ts_ms: int) -> dict:
    """A schema-change event of the schema topic: the DDL and the table's columns before and
    after it as the schema history knows them (names, types, signedness, members, key)."""
    return {
        "type": "ddl",
        "kind": change.kind,
        "db": change.db,
        "table": change.table,
        "ddl": change.ddl,
        "before": change.before,
        "after": change.after,
        "source": _source(change, name, 0),
        "ts_ms": ts_ms,
    }


def table_schema_value(schema: TableDescription, change: RowChange, name: str) -> dict:
    """A table schema record of the schema topic: the row image's columns with their SQL
    types, the primary key and the version that change messages name; `source` is the first
    change that needed it."""
    return {"type": "table", **schema.to_json(), "source": _source(change, name, change.row)}


def _row(row: dict[str, Any] | None, json_columns: frozenset[str]) -> dict[str, Any] | None:
    if row is None or not json_columns:
        return row
    return {k: _json_document(v) if k in json_columns else v for k, v in row.items()}


def _json_document(value: Any) -> Any:
    """A MySQL JSON column's value as a row's JSON holds it: the document as MySQL prints it
    (SQL NULL stays None)."""
    if value is None:
        return value
    return json_column(value)


_NO_ABSENT: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


def _notes_json(notes: dict[str, Any]) -> bytes:
    """The notes as the envelope's last fields (`,"absent":...`), b"" without any."""
    return b"".join(b',"%b":%b' % (k.encode(), dumps(v)) for k, v in notes.items())


def _dumps_row(row: dict[str, Any] | None) -> bytes:
    """A row image: column names are always strings, so orjson's slower non-string-key
    mode is not needed."""
    return orjson.dumps(row, default=_default, option=orjson.OPT_UTC_Z)


def value_json(value: Any, json_document: bool) -> bytes:
    """One column value as `_dumps_row` writes it inside a row (`json_document`: the column
    is a MySQL JSON column, written as the text MySQL prints): the compiled path's fallback
    for the types it does not write itself."""
    return orjson.dumps(
        _json_document(value) if json_document else value,
        default=_default,
        option=orjson.OPT_UTC_Z,
    )


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, default=_default, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_UTC_Z)


class EnvelopeWriter:
    """Renders the value of `change_envelope` straight to bytes. The parts that are the same
    for every row of a table (and the file and GTID of a transaction) are rendered once, so a
    row costs the JSON of its images and one bytes formatting, not a nested dict.
    `change_envelope` stays the reference: a test holds the two byte-for-byte equal."""

    __slots__ = (
        "_event_notes",
        "_gtid",
        "_name",
        "_query",
        "_tables",
        "_text",
        "_version",
        "connect",
        "name",
    )

    def __init__(self, name: str, connect: ConnectSchemas | None = None) -> None:
        self.name = name
        self.connect = connect  # schemas_enable: {"schema", "payload"} around each value
        self._name = orjson.dumps(name)
        self._tables: dict[tuple[str, str, int, str], tuple[bytes, bytes]] = {}
        # event_parts' notes per op ("c", "u", "d"), by the images' absent columns
        self._event_notes: dict[tuple[Any, ...], tuple[bytes, ...]] = {}
        # The last file/GTID/statement/schema seen, by identity: rows of a transaction, or of
        # a table, share them.
        self._text: tuple[str | None, bytes] = (None, b"null")
        self._gtid: tuple[str | None, bytes] = (None, b"null")
        self._query: tuple[str | None, bytes] = (None, b"null")
        self._version: tuple[TableDescription | None, bytes] = (None, b"null")

    def value(
        self,
        change: RowChange,
        op: str,
        before: Row,
        after: Row,
        ts_ms: int,
        transaction: dict[str, Any] | None = None,
    ) -> bytes:
        parts = self._tables.get((change.db, change.table, change.server_id, change.snapshot))
        if parts is None:
            parts = self._table_parts(change)
        file = change.file
        if file is not self._text[0]:
            self._text = (file, orjson.dumps(file))
        gtid = change.gtid
        if gtid is not self._gtid[0]:
            self._gtid = (gtid, orjson.dumps(gtid))
        query = change.query
        if query is not self._query[0]:
            self._query = (query, orjson.dumps(query))
        schema = change.schema
        if schema is not self._version[0]:
            self._version = (schema, orjson.dumps(None if schema is None else schema.version))
        json_columns = change.json_columns
        notes = b""
        if json_columns or change.absent != _NO_ABSENT or change.json_diffs:
            notes = _notes_json(image_notes(change, before, after))
        if json_columns:
            before, after = _row(before, json_columns), _row(after, json_columns)
        ts_us = change.ts_ms * 1000 if change.ts_us is None else change.ts_us
        body = (
            b'{"before":%b,"after":%b%b%d,"ts_us":%d,"ts_ns":%d%b%b,"file":%b,"pos":%b,'
            b'"row":%d,"thread":%b,"query":%b,"schema_version":%b},"op":"%b","ts_ms":%d,'
            b'"ts_us":%d,"ts_ns":%d,"transaction":%b%b}'
            % (
                _dumps_row(before),
                _dumps_row(after),
                parts[0],
                change.ts_ms,
                ts_us,
                ts_us * 1000,
                parts[1],
                self._gtid[1],
                self._text[1],
                b"null" if change.pos is None else b"%d" % change.pos,
                change.row,
                b"null" if change.thread is None else b"%d" % change.thread,
                self._query[1],
                self._version[1],
                op.encode(),
                ts_ms,
                ts_ms * 1000,
                ts_ms * 1_000_000,
                b"null" if transaction is None else dumps(transaction),
                notes,
            )
        )
        if self.connect is None:
            return body
        return self.connect.wrap_value(body, change.db, change.table, self.name, schema)

    def event_parts(self, change: RowChange, ts_ms: int) -> tuple[bytes, tuple[bytes, ...]]:
        """What `value` writes around the row images and the row number for the rows of
        one event (`change` stands for them) without transaction block or schemas: the
        text between the after image and the row number, and the text after it per op
        ("c", "u", "d"). The compiled path (`event_envelope`) fills in the rest."""
        head, tail, end = self._around_row(change, ts_ms)
        notes = self._notes_by_op(change)
        return head, tuple(
            tail + op + end + note + b"}"
            for op, note in zip((b"c", b"u", b"d"), notes, strict=True)
        )

    def read_parts(self, change: RowChange, ts_ms: int) -> tuple[bytes, bytes]:
        """`event_parts` of snapshot reads (op "r", which carry no notes): the text between
        the after image and the row number, and the text after it (`read_envelope`)."""
        head, tail, end = self._around_row(change, ts_ms)
        return head, tail + b"r" + end + b"}"

    def _around_row(self, change: RowChange, ts_ms: int) -> tuple[bytes, bytes, bytes]:
        """What `value` writes after the after image up to the row number, from the row
        number up to the op, and from the op up to the notes."""
        parts = self._tables.get((change.db, change.table, change.server_id, change.snapshot))
        if parts is None:
            parts = self._table_parts(change)
        schema = change.schema
        ts_us = change.ts_ms * 1000 if change.ts_us is None else change.ts_us
        head = b'%b%d,"ts_us":%d,"ts_ns":%d%b%b,"file":%b,"pos":%b,"row":' % (
            parts[0],
            change.ts_ms,
            ts_us,
            ts_us * 1000,
            parts[1],
            orjson.dumps(change.gtid),
            orjson.dumps(change.file),
            b"null" if change.pos is None else b"%d" % change.pos,
        )
        tail = b',"thread":%b,"query":%b,"schema_version":%b},"op":"' % (
            b"null" if change.thread is None else b"%d" % change.thread,
            orjson.dumps(change.query),
            orjson.dumps(None if schema is None else schema.version),
        )
        end = b'","ts_ms":%d,"ts_us":%d,"ts_ns":%d,"transaction":null' % (
            ts_ms,
            ts_ms * 1000,
            ts_ms * 1_000_000,
        )
        return head, tail, end

    def _notes_by_op(self, change: RowChange) -> tuple[bytes, ...]:
        """The images' notes are the event's (its bitmaps): the compiled path takes no event
        whose rows differ in them (JSON nulls, JSON diffs), so they follow from `absent`."""
        key = change.absent
        found = None if change.json_diffs else self._event_notes.get(key)
        if found is None:
            images: tuple[tuple[Row, Row], ...] = ((None, {}), ({}, {}), ({}, None))
            found = tuple(_notes_json(image_notes(change, *pair)) for pair in images)
            if not change.json_diffs:
                if len(self._event_notes) >= 256:
                    self._event_notes.clear()
                self._event_notes[key] = found
        return found

    def truncate(self, change: TableChange, ts_ms: int) -> bytes:
        """The op "t" message of a TRUNCATE (with schemas: the envelope's schema without the
        row's fields, which a TRUNCATE does not name)."""
        body = dumps(truncate_envelope(change, self.name, ts_ms))
        if self.connect is None:
            return body
        return self.connect.wrap_value(body, change.db, change.table, self.name, None)

    def _table_parts(self, change: RowChange) -> tuple[bytes, bytes]:
        head = b',"source":{"version":%b,"connector":"replicad","name":%b,"ts_ms":' % (
            orjson.dumps(__version__),
            self._name,
        )
        middle = b',"snapshot":%b,"db":%b,"sequence":null,"table":%b,"server_id":%d,"gtid":' % (
            orjson.dumps(change.snapshot),
            orjson.dumps(change.db),
            orjson.dumps(change.table),
            change.server_id,
        )
        key = (change.db, change.table, change.server_id, change.snapshot)
        parts = self._tables[key] = (head, middle)
        return parts


class EnvelopeLines:
    """JSON lines of `replicad dump` and the JSON-lines sink: for each message of a change,
    the value Kafka gets for it (a primary-key change is two lines), then a newline. A
    TRUNCATE is its op "t" message; another schema change its schema-topic event."""

    __slots__ = ("name", "replay", "writer")

    def __init__(
        self, name: str, connect: ConnectSchemas | None = None, *, replay: bool = False
    ) -> None:
        """`replay` (`replicad dump`): the top-level `ts_ms` is the commit time, not the time
        of writing, so that dumping the same binlog twice prints the same bytes."""
        self.name = name
        self.replay = replay
        self.writer = EnvelopeWriter(name, connect)

    def row(self, change: RowChange) -> bytes:
        now_ms = change.ts_ms if self.replay else int(time.time() * 1000)
        value = self.writer.value
        return b"".join(
            value(change, op, before, after, now_ms) + b"\n"
            for op, before, after in row_messages(change)
        )

    def table(self, change: TableChange) -> bytes:
        now_ms = change.ts_ms if self.replay else int(time.time() * 1000)
        if change.kind == "truncate":
            return self.writer.truncate(change, now_ms) + b"\n"
        return dumps(schema_change_value(change, self.name, now_ms)) + b"\n"
