"""Where a pipeline starts when nothing is stored: `source.start` (`latest`, `earliest`, a
file:pos or a GTID) resolved on the primary into a Position with the GTID state at that point.
Used by the pipeline and by `replicad position set`."""

from __future__ import annotations

import re

import structlog

from replicad.binlog.gtid import Gtid, GtidSet, MariaGtidPosition
from replicad.binlog.position import Position
from replicad.config import StartConfig
from replicad.errors import ConfigError, GtidError, ServerError
from replicad.protocol.transport import AsyncConnection
from replicad.source.binlog_status import binlog_status
from replicad.source.event_list import listed_events
from replicad.source.stream import ServerInfo

log = structlog.get_logger("replicad.source")

# How SHOW BINLOG EVENTS prints a MySQL GTID (or GTID_TAGGED) event.
_GTID_NEXT = re.compile(r"GTID_NEXT\s*=\s*'([^']+)'")


async def initial_position(conn: AsyncConnection, info: ServerInfo, start: object) -> Position:
    """Where to start when no position is stored, from `source.start`."""
    if start == "latest":
        status = await binlog_status(conn)
        if status is None:
            raise ConfigError("the primary has binary logging off (SHOW MASTER STATUS is empty)")
        if not info.mariadb and info.gtid_mode and status.executed_gtids is not None:
            # MySQL's Executed_Gtid_Set is exactly the set at this file:pos.
            return Position(status.file, status.pos, GtidSet.parse(status.executed_gtids), None)
        return await _with_gtids(conn, info, status.file, status.pos)
    if start == "earliest":
        logs = await conn.query("SHOW BINARY LOGS")
        if not logs.rows:
            raise ConfigError("the primary has no binary logs")
        return await _with_gtids(conn, info, str(logs.rows[0][0]), 4)
    assert isinstance(start, StartConfig)
    if start.gtid is not None:
        try:
            if info.mariadb:
                return Position("", 4, None, MariaGtidPosition.parse(start.gtid))
            return Position("", 4, GtidSet.parse(start.gtid), None)
        except GtidError as exc:
            raise ConfigError(str(exc), key="source.start.gtid", value=start.gtid) from None
    if start.file is None:
        raise ConfigError("source.start needs a gtid or a file", key="source.start")
    return await _with_gtids(conn, info, start.file, start.pos)


async def _with_gtids(conn: AsyncConnection, info: ServerInfo, file: str, pos: int) -> Position:
    if info.mariadb:
        result = await conn.query(f"SELECT BINLOG_GTID_POS('{file}', {int(pos)})")
        value = result.rows[0][0] if result.rows else None
        if value is not None:
            return Position(file, pos, None, MariaGtidPosition.parse(str(value)))
        return Position(file, pos)
    if info.gtid_mode:
        try:
            return Position(file, pos, await mysql_gtids_at(conn, file, pos), None)
        except ServerError as exc:
            # A proxy or server that cannot list binlog events: the position still works,
            # resumed by file offset until a restart can work the set out.
            log.warning(
                "start_gtid_set_unknown",
                file=file,
                pos=pos,
                error=str(exc),
                note="resumed by file offset, not by GTID",
            )
    return Position(file, pos)  # no GTIDs on the primary: file:pos is all there is


async def mysql_gtids_at(conn: AsyncConnection, file: str, pos: int) -> GtidSet | None:
    """The executed GTID set at `file:pos` on a MySQL primary, as a MySQL replica builds it:
    the file's PREVIOUS_GTIDS (every GTID of the files before it) plus the GTIDs of the
    transactions that start before `pos`. None if the file has no PREVIOUS_GTIDS (written
    before GTIDs existed): the position then stays file:pos only.

    Reads the file up to `pos` through SHOW BINLOG EVENTS, once per start or `position set`;
    the set is what lets every later start resume by GTID (COM_BINLOG_DUMP_GTID)."""
    executed: GtidSet | None = None
    # PREVIOUS_GTIDS is the second event, so the listing goes at least that far.
    async for event in listed_events(conn, file, until=max(pos, 5)):
        if event.kind == "Previous_gtids":
            executed = GtidSet.parse(event.info.replace("\n", ""))
        elif executed is not None and event.pos < pos and event.kind.startswith("Gtid"):
            match = _GTID_NEXT.search(event.info)
            if match:
                executed = executed.with_gtid(Gtid.parse(match[1]))
    return executed
