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
from decimal import Decimal
from typing import Any

import orjson

from replicad import __version__
from replicad.binlog import jsonb
from replicad.binlog.changes import RowChange
from replicad.binlog.values import Geometry


def format_time(value: dt.timedelta) -> str:
    negative = value < dt.timedelta(0)
    total = -value if negative else value
    micros = total.days * 86_400_000_000 + total.seconds * 1_000_000 + total.microseconds
    seconds, us = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{'-' if negative else ''}{hours:02d}:{minutes:02d}:{secs:02d}"
    return text + (f".{us:06d}" if us else "")


def _base64(value: bytes | bytearray | memoryview) -> str:
    return binascii.b2a_base64(value, newline=False).decode("ascii")


# The common column types by exact type: one dict lookup instead of a chain of isinstance
# (orjson calls `_default` for every value it cannot write itself).
_BY_TYPE: dict[type, Any] = {
    Decimal: str,
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
        return str(value)
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
    if hasattr(value, "diffs"):  # a partial JSON update without its base document
        return {
            "json_diffs": [
                {"op": d.operation.name.lower(), "path": d.path, "value": _json_fragment(d)}
                for d in value.diffs
            ]
        }
    raise TypeError(f"no JSON mapping for {type(value).__name__}")


def _json_fragment(diff: Any) -> Any:
    if diff.operation == jsonb.JsonDiffOp.REMOVE:
        return None
    return orjson.Fragment(jsonb.to_mysql_json_text(diff.value))


def json_column(value: Any) -> Any:
    """A decoded MySQL JSON document, emitted as JSON text exactly as MySQL prints it."""
    return orjson.Fragment(jsonb.to_mysql_json_text(value))


def change_to_dict(change: RowChange) -> dict:
    """One JSON line of `replicad dump` and the stdout sink: the envelope, plus `db` and
    `table` at the top (a line has no topic to name them)."""
    json_columns = change.json_columns
    return {
        "op": change.op,
        "db": change.db,
        "table": change.table,
        "before": _row(change.before, json_columns),
        "after": _row(change.after, json_columns),
        "source": {
            "file": change.file,
            "pos": change.pos,
            "gtid": change.gtid,
            "row": change.row,
            "server_id": change.server_id,
            "ts_ms": change.ts_ms,
            "db": change.db,
            "table": change.table,
        },
    }


def change_envelope(
    change: RowChange,
    op: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    server: str,
    ts_ms: int,
    transaction: dict[str, Any] | None = None,
) -> dict:
    """The Kafka message value, shaped like Debezium's MySQL envelope (docs/architecture.md,
    "Message format") so that Debezium-JSON consumers read it unchanged. `op`, `before` and
    `after` are passed in because a primary-key change is split into a delete and a create."""
    json_columns = change.json_columns
    return {
        "before": _row(before, json_columns),
        "after": _row(after, json_columns),
        "source": {
            "version": __version__,
            "connector": "replicad",
            "server": server,
            "server_id": change.server_id,
            "ts_ms": change.ts_ms,
            "db": change.db,
            "table": change.table,
            "gtid": change.gtid,
            "file": change.file,
            "pos": change.pos,
            "row": change.row,
        },
        "op": op,
        "ts_ms": ts_ms,
        "transaction": transaction,
    }


def _row(row: dict[str, Any] | None, json_columns: frozenset[str]) -> dict[str, Any] | None:
    if row is None or not json_columns:
        return row
    return {
        k: (
            json_column(v) if k in json_columns and v is not None and not hasattr(v, "diffs") else v
        )
        for k, v in row.items()
    }


def _dumps_row(row: dict[str, Any] | None) -> bytes:
    """A row image: column names are always strings, so orjson's slower non-string-key
    mode is not needed."""
    return orjson.dumps(row, default=_default, option=orjson.OPT_UTC_Z)


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, default=_default, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_UTC_Z)


class EnvelopeWriter:
    """Renders the Kafka value of `change_envelope` straight to bytes. The parts that are the
    same for every row of a table (and the file and GTID of a transaction) are rendered once,
    so a row costs the JSON of its images and one bytes formatting, not a nested dict.
    `change_envelope` stays the reference: a test holds the two byte-for-byte equal."""

    __slots__ = ("_gtid", "_server", "_tables", "_text")

    def __init__(self, server: str) -> None:
        self._server = orjson.dumps(server)
        self._tables: dict[tuple[str, str, int], tuple[bytes, bytes]] = {}
        # The last file/GTID seen, by identity: every row of a transaction shares them.
        self._text: tuple[str | None, bytes] = (None, b"null")
        self._gtid: tuple[str | None, bytes] = (None, b"null")

    def value(
        self,
        change: RowChange,
        op: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        ts_ms: int,
        transaction: dict[str, Any] | None = None,
    ) -> bytes:
        parts = self._tables.get((change.db, change.table, change.server_id))
        if parts is None:
            parts = self._table_parts(change)
        file = change.file
        if file is not self._text[0]:
            self._text = (file, orjson.dumps(file))
        gtid = change.gtid
        if gtid is not self._gtid[0]:
            self._gtid = (gtid, orjson.dumps(gtid))
        json_columns = change.json_columns
        if json_columns:
            before, after = _row(before, json_columns), _row(after, json_columns)
        return b'{"before":%b,"after":%b%b%d%b%b,"file":%b,"pos":%b,"row":%d},"op":"%b",' \
            b'"ts_ms":%d,"transaction":%b}' % (
            _dumps_row(before),
            _dumps_row(after),
            parts[0],
            change.ts_ms,
            parts[1],
            self._gtid[1],
            self._text[1],
            b"null" if change.pos is None else b"%d" % change.pos,
            change.row,
            op.encode(),
            ts_ms,
            b"null" if transaction is None else dumps(transaction),
        )  # fmt: skip

    def _table_parts(self, change: RowChange) -> tuple[bytes, bytes]:
        head = (
            b',"source":{"version":%b,"connector":"replicad","server":%b,"server_id":%d,"ts_ms":'
            % (orjson.dumps(__version__), self._server, change.server_id)
        )
        middle = b',"db":%b,"table":%b,"gtid":' % (
            orjson.dumps(change.db),
            orjson.dumps(change.table),
        )
        parts = self._tables[(change.db, change.table, change.server_id)] = (head, middle)
        return parts
