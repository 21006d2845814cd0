"""What `replicad status` and `replicad position` do: read a pipeline's state, and turn an
operator's position value into a Position the primary can serve.

A value is one of `earliest`, `latest`, `FILE:POS`, a MySQL GTID set (`uuid:1-100,...`) or a
MariaDB GTID position (`0-1-100,1-2-7`). It is checked against the primary before anything is
written: an unknown file, an offset that is not an event boundary or a malformed GTID is an
error that changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

import structlog

from replicad.binlog.gtid import GtidSet, MariaGtidPosition
from replicad.binlog.position import Position
from replicad.config import Config, StartConfig
from replicad.errors import ConfigError, GtidError, InvalidPositionError, ServerError
from replicad.protocol.commands import cell_text
from replicad.protocol.transport import AsyncConnection
from replicad.source.event_list import event_at, nearest_boundaries
from replicad.source.schema import SchemaHistory, snapshot
from replicad.source.start import initial_position
from replicad.source.stream import open_connection, server_info

log = structlog.get_logger("replicad.operator")

_MYSQL_GTID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-")
_FILE_POS = re.compile(r"^(?P<file>[^:\s]+):(?P<pos>\d+)$")


class PositionValueError(ConfigError):
    """An operator's position value is malformed or names something the primary lacks."""


def parse_position_value(value: str) -> str | StartConfig:
    """`earliest`/`latest` stay words; the rest becomes a StartConfig (file+pos or gtid).
    Only the shape is checked here; `resolve_position` checks it against the primary."""
    text = value.strip()
    if text in ("earliest", "latest"):
        return text
    if not text:
        raise PositionValueError("empty position value", value=value)
    if not _MYSQL_GTID.match(text):
        match = _FILE_POS.match(text)
        if match:
            pos = int(match["pos"])
            if pos < 4:
                raise PositionValueError(
                    "a binlog offset is at least 4 (the first event)", value=value
                )
            return StartConfig(file=match["file"], pos=pos)
    # The syntax is checked here, offline: a typo is a usage error (64) even when the primary
    # or ZooKeeper cannot be reached. Which flavour the primary speaks is checked after.
    try:
        (GtidSet if _MYSQL_GTID.match(text) else MariaGtidPosition).parse(text)
    except GtidError as exc:
        hint = (
            " (FILE:POS takes a decimal offset)"
            if ":" in text and not _MYSQL_GTID.match(text)
            else ""
        )
        raise PositionValueError(
            f"not earliest, latest, FILE:POS or a GTID: {exc.reason}{hint}", value=value
        ) from None
    return StartConfig(gtid=text)


async def resolve_position(
    config: Config, password: str, value: str
) -> tuple[Position, SchemaHistory]:
    """The Position for `value` on the configured primary, and a schema snapshot to go with
    it (today's schema: exact for `latest`, an approximation for a position in the past)."""
    start = parse_position_value(value)
    conn = await open_connection(config.source, password)
    try:
        info = await server_info(conn)
        if isinstance(start, StartConfig) and start.file is not None:
            await _check_file_position(conn, start.file, start.pos)
        try:
            position = await initial_position(conn, info, start)
        except (ConfigError, InvalidPositionError) as exc:  # names `source.start`, not this
            context = {k: v for k, v in exc.context.items() if k != "key"}
            raise PositionValueError(exc.reason, **context) from None
        history = await snapshot(conn, position)
    finally:
        await conn.close()
    return position, history


async def _check_file_position(conn: AsyncConnection, file: str, pos: int) -> None:
    logs = await conn.query("SHOW BINARY LOGS")
    sizes = {cell_text(row[0]): int(cell_text(row[1])) for row in logs.rows}
    if file not in sizes:
        known = sorted(sizes)
        raise PositionValueError(
            "the primary has no such binlog file",
            file=file,
            available=f"{known[0]} .. {known[-1]}" if known else "none",
        )
    if pos > sizes[file]:
        raise PositionValueError(
            "the offset is past the end of the binlog file", file=file, pos=pos, size=sizes[file]
        )
    if pos == sizes[file] or pos == 4:
        return  # the first event and the end of a file are always valid places to continue
    server: str | None = None
    try:
        listed = await event_at(conn, file, pos)
    except ServerError as exc:  # MariaDB, and MySQL for most offsets inside an event
        listed, server = None, exc.message
    if listed == pos:
        return
    # MySQL lists the next event for some offsets inside one instead of failing, and the
    # dump from there later fails with "bogus data in log event": compare, never trust.
    before, after = await nearest_boundaries(conn, file, pos, sizes[file])
    raise PositionValueError(
        f"the offset is not the start of an event; the nearest event boundaries are "
        f"{file}:{before} and {file}:{after}",
        file=file,
        pos=pos,
        server=server,
    )


def describe_position(position: dict[str, Any] | None) -> str:
    """A stored position record (Position.to_json) in one line."""
    if not position:
        return "none"
    try:
        return str(Position.from_json(position))
    except InvalidPositionError:
        return repr(position)
