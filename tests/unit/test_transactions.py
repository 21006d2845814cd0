"""Transaction assembly over a MySQL 8 binlog built from byte fixtures: GTID + BEGIN ... XID,
DDL, a compressed TRANSACTION_PAYLOAD (inner events have log_pos 0), an anonymous
transaction, an XA prepare + commit, and a rotation. Positions must be the offset right after
each commit (for the payload: after the payload event), GTID sets must accumulate."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicad.binlog.files import iter_file_events, iter_raw_events
from replicad.binlog.gtid import GtidSet
from replicad.binlog.position import Position
from replicad.source.transactions import Begin, Commit, Rows, TransactionAssembler
from tests.helpers import events as ev

pytestmark = pytest.mark.unit

UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
COLUMNS = [ev.Col(ev.T_LONG, nullable=False)]


def _tm(checksum: bool = True) -> bytes:
    return ev.event(ev.TABLE_MAP, ev.table_map(5, "db", "t", COLUMNS), checksum=checksum)


def _rows(*values: int, checksum: bool = True) -> bytes:
    images = b"".join(ev.row_image([ev.int_le(v, 4)]) for v in values)
    return ev.event(ev.WRITE_ROWS, ev.rows_v2(ev.WRITE_ROWS, 5, 1, images), checksum=checksum)


def _query(text: str, checksum: bool = True) -> bytes:
    return ev.event(ev.QUERY, ev.query_body(text, schema="db"), checksum=checksum)


def _gtid(gno: int) -> bytes:
    return ev.event(ev.GTID, ev.gtid_body(UUID_A, gno, last_committed=0, sequence_number=gno))


def _binlog(tmp_path: Path) -> Path:
    inner = _query("BEGIN", False) + _tm(False) + _rows(30, 31, checksum=False)
    inner += ev.event(ev.XID, ev.xid_body(3), checksum=False)
    events = [
        ev.fde_mysql8(),
        ev.event(ev.PREVIOUS_GTIDS, ev.previous_gtids_body([])),
        _gtid(1), _query("BEGIN"), _tm(), _rows(10, 11), ev.event(ev.XID, ev.xid_body(1)),
        _gtid(2), _query("CREATE TABLE t2 (x INT)"),
        _gtid(3), ev.event(ev.TRANSACTION_PAYLOAD, ev.transaction_payload_body(inner)),
        ev.event(ev.ANONYMOUS_GTID, ev.gtid_body("00000000-0000-0000-0000-000000000000", 0)),
        _query("BEGIN"), _tm(), _rows(40), ev.event(ev.XID, ev.xid_body(4)),
        _gtid(4), _query("XA START X'78',X'',1"), _tm(), _rows(50),
        _query("XA END X'78',X'',1"),
        ev.event(ev.XA_PREPARE, ev.xa_prepare_body(False, 1, b"x", b"")),
        _gtid(5), _query("XA COMMIT X'78',X'',1"),
        ev.event(ev.ROTATE, ev.u64(4) + b"binlog.000008"),
    ]  # fmt: skip
    path = tmp_path / "binlog.000007"
    path.write_bytes(ev.binlog_file(events))
    return path


def test_transactions_and_positions(tmp_path: Path) -> None:
    path = _binlog(tmp_path)
    with path.open("rb") as f:
        raw = [(r.pos, r.data[4]) for r in iter_raw_events(f, source=str(path))]
    offsets = [pos for pos, _ in raw]
    type_at = dict(raw)

    start = Position("binlog.000007", 4, GtidSet())  # nothing executed before this file
    assembler = TransactionAssembler(start)
    items = []
    for event in iter_file_events(path):
        items.extend(assembler.feed(event))

    commits = [i for i in items if isinstance(i, Commit)]
    begins = [i for i in items if isinstance(i, Begin)]
    assert len(begins) == len(commits) == 6

    # Every commit position is the start of the next GTID/ANONYMOUS_GTID or the ROTATE.
    for commit in commits:
        assert commit.position.file == "binlog.000007"
        assert commit.position.pos in offsets
        assert type_at[commit.position.pos] in (ev.GTID, ev.ANONYMOUS_GTID, ev.ROTATE)
    # The payload transaction ends at the end of the payload event, not at a log_pos of 0.
    payload_pos = next(p for p, t in raw if t == ev.TRANSACTION_PAYLOAD)
    payload_end = offsets[offsets.index(payload_pos) + 1]
    assert commits[2].position.pos == payload_end and commits[2].xid == 3

    assert [c.statement.query if c.statement else None for c in commits] == [
        None,
        "CREATE TABLE t2 (x INT)",
        None,
        None,
        None,
        "XA COMMIT X'78',X'',1",
    ]
    assert [c.xa_prepare for c in commits] == [False] * 4 + [True, False]

    gtid_texts = [str(c.position.mysql_gtids) for c in commits]
    assert gtid_texts[0] == f"{UUID_A}:1"
    assert gtid_texts[2] == f"{UUID_A}:1-3"
    assert gtid_texts[3] == f"{UUID_A}:1-3", "an anonymous transaction adds no GTID"
    assert gtid_texts[-1] == f"{UUID_A}:1-5"

    # Rows belong to the transaction they were written in.
    per_transaction: list[list[int]] = []
    for item in items:
        if isinstance(item, Begin):
            per_transaction.append([])
        elif isinstance(item, Rows):
            per_transaction[-1].extend(after["@1"] for _, after in item.event.rows())
    assert per_transaction == [[10, 11], [], [30, 31], [40], [50], []]

    # Without a known starting GTID state no GTIDs are accumulated (file:pos only).
    plain = TransactionAssembler(Position("binlog.000007", 4))
    for event in iter_file_events(path):
        plain.feed(event)
    assert plain.position.mysql_gtids is None and plain.position.file == "binlog.000008"

    # After the ROTATE the next transaction starts in the new file at 4.
    assert assembler.position == Position("binlog.000008", 4, GtidSet.parse(f"{UUID_A}:1-5"), None)
    assert not assembler.in_transaction


def test_begin_carries_the_previous_commit_position(tmp_path: Path) -> None:
    path = _binlog(tmp_path)
    assembler = TransactionAssembler(Position("binlog.000007", 4))
    previous = assembler.position
    for event in iter_file_events(path):
        for item in assembler.feed(event):
            if isinstance(item, Begin):
                assert item.position == previous
            elif isinstance(item, Commit):
                previous = item.position


def test_position_json_round_trip_and_validation() -> None:
    position = Position("bin.000001", 1234, GtidSet.parse(f"{UUID_A}:1-9"), None, 17)
    assert Position.from_json(position.to_json()) == position
    from replicad.errors import InvalidPositionError

    for bad in (
        {"pos": 4},
        {"file": "", "pos": 4},
        {"file": "b", "pos": 2},
        {"file": "b", "pos": 4, "gtid_set": "nonsense"},
    ):
        with pytest.raises(InvalidPositionError):
            Position.from_json(bad)


def test_create_table_select_of_mysql_8_0_21_is_one_transaction(tmp_path: Path) -> None:
    """MySQL 8.0.21+ logs CREATE TABLE ... SELECT atomically: `CREATE TABLE ... START
    TRANSACTION`, the rows, then an XID (WL#13355). The CREATE must not end the transaction."""
    events = [
        ev.fde_mysql8(),
        _gtid(1),
        _query("CREATE TABLE t2 (x INT) START TRANSACTION"),
        _tm(),
        _rows(1, 2, 3),
        ev.event(ev.XID, ev.xid_body(9)),
    ]
    path = tmp_path / "binlog.000001"
    path.write_bytes(ev.binlog_file(events))
    assembler = TransactionAssembler(Position("binlog.000001", 4, GtidSet()))
    items = [i for e in iter_file_events(path) for i in assembler.feed(e)]
    kinds = [type(i).__name__ for i in items]
    assert kinds == ["Begin", "Rows", "Commit"]
    assert items[-1].xid == 9 and str(items[-1].position.mysql_gtids) == f"{UUID_A}:1"
