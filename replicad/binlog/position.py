"""Position: the point *after* a committed transaction (docs/architecture.md).

A position always has `file:pos` (the offset of the first event after the commit) and, when
the primary has GTIDs, the executed GTID set (MySQL) or the per-domain GTID position (MariaDB).
`row` counts the rows of the transaction starting at this position that were already
delivered, so that a restart inside a huge transaction skips them instead of re-sending.
What a pipeline stores to resume wraps it with snapshot progress (`checkpoint_record.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from replicad.binlog.gtid import Gtid, GtidSet, MariaGtid, MariaGtidPosition
from replicad.errors import GtidError, InvalidPositionError


@dataclass(frozen=True, slots=True)
class Position:
    file: str
    pos: int
    mysql_gtids: GtidSet | None = None
    mariadb_gtids: MariaGtidPosition | None = None
    row: int = 0

    def __post_init__(self) -> None:
        if self.pos < 4:
            raise InvalidPositionError(f"binlog position {self.pos} is before the first event (4)")
        if self.row < 0:
            raise InvalidPositionError(f"row index {self.row} is negative")

    @property
    def gtid_text(self) -> str | None:
        if self.mysql_gtids is not None:
            return str(self.mysql_gtids)
        if self.mariadb_gtids is not None:
            return str(self.mariadb_gtids)
        return None

    def after_commit(self, file: str, pos: int, gtid: Gtid | MariaGtid | None) -> Position:
        """The position after a transaction that carried `gtid` and ended at file:pos.

        GTIDs are only accumulated onto a known starting state: a set built from the GTIDs
        seen since an arbitrary file:pos would claim less than the server executed, and
        resuming from it would replay (or, once purged, fail on) everything before."""
        mysql, maria = self.mysql_gtids, self.mariadb_gtids
        if isinstance(gtid, Gtid) and mysql is not None:
            mysql = mysql.with_gtid(gtid)
        elif isinstance(gtid, MariaGtid) and maria is not None:
            maria = maria.advance(gtid)
        return Position(file, pos, mysql, maria, 0)

    def with_row(self, row: int) -> Position:
        return replace(self, row=row)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "pos": self.pos}
        if self.mysql_gtids is not None:
            out["gtid_set"] = str(self.mysql_gtids)
        if self.mariadb_gtids is not None:
            out["mariadb_gtid"] = str(self.mariadb_gtids)
        if self.row:
            out["row"] = self.row
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Position:
        try:
            file, pos = data["file"], data["pos"]
        except (KeyError, TypeError) as exc:
            raise InvalidPositionError(f"position record lacks {exc}", value=data) from None
        has_gtids = "gtid_set" in data or "mariadb_gtid" in data
        if not isinstance(file, str) or not (file or has_gtids) or not isinstance(pos, int):
            # An empty file name is valid only for a GTID position (a start "at GTID ...").
            raise InvalidPositionError(
                "position record needs a file name and an integer pos", value=data
            )
        try:
            mysql = GtidSet.parse(data["gtid_set"]) if "gtid_set" in data else None
            maria = (
                MariaGtidPosition.parse(data["mariadb_gtid"]) if "mariadb_gtid" in data else None
            )
        except GtidError as exc:
            raise InvalidPositionError(
                f"position record has a bad GTID: {exc}", value=data
            ) from None
        row = data.get("row", 0)
        if not isinstance(row, int):
            raise InvalidPositionError("position record row must be an integer", value=data)
        return cls(file, pos, mysql, maria, row)

    def __str__(self) -> str:
        gtids = self.gtid_text
        if not self.file:  # a start "at GTID ...": the set is the whole position
            text = f"gtid:{gtids or '(empty)'}"
        else:
            text = f"{self.file}:{self.pos}"
            if gtids is not None:  # an empty set is still a set: the position is by GTID
                text += f" gtid={gtids or '(empty)'}"
        if self.row:
            text += f" row={self.row}"
        return text
