"""Whether a failover candidate can take over the stream (sans-IO).

A server replicad switches to must hold every transaction replicad already published: if it
lacks some, dumping from it by GTID would go on as if they never happened (downstream keeps
rows the new primary does not have, and their later changes never come). The check compares
the stored position with the candidate's executed GTIDs (MariaDB `@@gtid_binlog_pos`, MySQL
`@@gtid_executed`) and names what is missing.
"""

from __future__ import annotations

from uuid import UUID

from replicad.binlog.gtid import GtidSet, MariaGtid, MariaGtidPosition
from replicad.binlog.position import Position
from replicad.errors import ReplicadError
from replicad.exit_codes import EXIT_CONFIG


class CandidateRefusedError(ReplicadError):
    """A failover candidate lacks GTIDs replicad already published: streaming from it would
    silently skip them. An operator decides (wait for it to catch up, or re-snapshot)."""

    exit_code = EXIT_CONFIG


def missing_gtids(position: Position, executed: str, *, mariadb: bool) -> str:
    """The GTIDs of `position` that a server whose executed set is `executed` lacks, as text
    ("" when it has them all, or when the position carries no GTIDs of that flavour)."""
    if mariadb:
        if position.mariadb_gtids is None:
            return ""
        return _missing_mariadb(position.mariadb_gtids, MariaGtidPosition.parse(executed))
    if position.mysql_gtids is None:
        return ""
    return str(_missing_mysql(position.mysql_gtids, GtidSet.parse(executed)))


def _missing_mariadb(ours: MariaGtidPosition, theirs: MariaGtidPosition) -> str:
    """Per domain, the sequence numbers past the candidate's last one up to ours (sequence
    numbers order a domain; the server id of a GTID takes no part in it)."""
    gaps = []
    for gtid in ours:
        have = theirs.get(gtid.domain_id)
        first = 1 if have is None else have.seq_no + 1
        if first > gtid.seq_no:
            continue
        start = MariaGtid(gtid.domain_id, gtid.server_id, first)
        gaps.append(str(gtid) if first == gtid.seq_no else f"{start}..{gtid}")
    return ",".join(gaps)


def _missing_mysql(ours: GtidSet, theirs: GtidSet) -> GtidSet:
    """`ours` minus `theirs`, interval by interval (half-open [start, end))."""
    left: dict[tuple[UUID, str], list[tuple[int, int]]] = {}
    for sid, tag, start, end in ours:
        pieces = [(start, end)]
        for have_start, have_end in theirs.intervals(sid, tag):
            pieces = [
                piece
                for s, e in pieces
                for piece in ((s, min(e, have_start)), (max(s, have_end), e))
                if piece[0] < piece[1]
            ]
        if pieces:
            left.setdefault((sid, tag), []).extend(pieces)
    return GtidSet(left)
