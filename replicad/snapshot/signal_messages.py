"""Debezium's signal messages (the Kafka signal channel: key = the topic prefix, value
`{"type", "data"}`) as the requests the snapshot driver takes (docs/snapshots.md, "Signals").
Sans-IO: a message's key, value and offset in, requests out.

- `execute-snapshot` (`"type": "incremental"`): one `snapshot` request per data collection,
  its `additional-conditions` filter as the WHERE;
- `stop-snapshot`: `snapshot-cancel` of the named data collections (all without);
- `pause-snapshot`, `resume-snapshot`: `snapshot-pause`, `snapshot-resume`;
- `log`: `log` (the message goes to replicad's log).

Data collections are `db.table` names (Debezium also takes regular expressions: not here, a
name must be exact).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from replicad.errors import ReplicadError


class SignalError(ReplicadError):
    """A signal that cannot be applied (not JSON, an unknown type, a bad field)."""


@dataclass(frozen=True, slots=True)
class SignalRequest:
    """A request from a signal, shaped as the driver's OperatorRequest."""

    id: str
    op: str
    args: dict[str, Any]


def signal_requests(value: bytes | None, offset: int, chunk_rows: int) -> list[SignalRequest]:
    """The requests one signal message asks for (its key already matched). Raises
    SignalError naming the offset when the message is not a signal replicad can apply."""
    try:
        signal = orjson.loads(value or b"")
    except orjson.JSONDecodeError as exc:
        raise SignalError(f"signal is not JSON: {exc}", offset=offset) from None
    if not isinstance(signal, dict) or not isinstance(signal.get("type"), str):
        raise SignalError('a signal is an object with a "type"', offset=offset)
    data = signal.get("data") or {}
    if not isinstance(data, dict):
        raise SignalError('a signal\'s "data" is an object', offset=offset)
    given = signal.get("id")
    signal_id = given if isinstance(given, str) and given else f"kafka-{offset}"
    kind = signal["type"]
    if kind == "execute-snapshot":
        return _execute(signal_id, data, offset, chunk_rows)
    if kind == "stop-snapshot":
        tables = _collections(data, offset, required=False)
        args = {"id": None} if tables is None else {"tables": tables}
        return [SignalRequest(signal_id, "snapshot-cancel", args)]
    if kind in ("pause-snapshot", "resume-snapshot"):
        return [SignalRequest(signal_id, "snapshot-" + kind.split("-")[0], {})]
    if kind == "log":
        return [SignalRequest(signal_id, "log", {"message": str(data.get("message", ""))})]
    raise SignalError(f"unknown signal type {kind!r}", offset=offset)


def _execute(
    signal_id: str, data: dict[str, Any], offset: int, chunk_rows: int
) -> list[SignalRequest]:
    kind = str(data.get("type", "incremental")).lower()
    if kind != "incremental":
        raise SignalError(
            f"execute-snapshot of type {kind!r}: only incremental snapshots run beside the stream",
            offset=offset,
        )
    tables = _collections(data, offset, required=True)
    assert tables is not None
    filters = _conditions(data, offset)
    return [
        SignalRequest(
            f"{signal_id}:{table}",
            "snapshot",
            {"table": table, "where": filters.get(table), "chunk_rows": chunk_rows},
        )
        for table in tables
    ]


def _collections(data: dict[str, Any], offset: int, *, required: bool) -> list[str] | None:
    tables = data.get("data-collections")
    if tables is None and not required:
        return None
    if not isinstance(tables, list) or not tables or not all(isinstance(t, str) for t in tables):
        raise SignalError('"data-collections" is a list of db.table names', offset=offset)
    for table in tables:
        db, dot, name = table.partition(".")
        if not (db and dot and name):
            raise SignalError(f"data collection {table!r} is not db.table", offset=offset)
    return list(dict.fromkeys(tables))


def _conditions(data: dict[str, Any], offset: int) -> dict[str, str]:
    """`additional-conditions`: [{"data-collection", "filter"}] -> table -> WHERE."""
    out: dict[str, str] = {}
    for condition in data.get("additional-conditions") or []:
        table = condition.get("data-collection") if isinstance(condition, dict) else None
        where = condition.get("filter") if isinstance(condition, dict) else None
        if not isinstance(table, str) or not isinstance(where, str):
            raise SignalError(
                'an additional condition is {"data-collection": "db.table", "filter": "..."}',
                offset=offset,
            )
        out[table] = where
    return out
