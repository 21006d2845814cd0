"""Where the primary's binary log ends now, the one place that asks: SHOW MASTER STATUS
(MariaDB, MySQL before 8.4), else SHOW BINARY LOG STATUS (MySQL 8.2+; 8.4 removed the
other)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from replicad.errors import ServerError


@dataclass(frozen=True)
class BinlogStatus:
    file: str
    pos: int
    # MySQL's Executed_Gtid_Set (the GTIDs exactly at file:pos), newlines removed; None where
    # the server prints no such column (MariaDB)
    executed_gtids: str | None


def _text(value: object) -> str:
    # (not protocol.commands.cell_text: `dump` imports this module and must start light)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


async def binlog_status(conn: Any) -> BinlogStatus | None:
    """None: binary logging is off (the status is empty)."""
    try:
        result = await conn.query("SHOW MASTER STATUS")
    except ServerError:
        result = await conn.query("SHOW BINARY LOG STATUS")
    if not result.rows:
        return None
    row = result.rows[0]
    executed = _text(row[4]).replace("\n", "") if len(row) > 4 and row[4] is not None else None
    return BinlogStatus(_text(row[0]), int(_text(row[1])), executed)
