"""Transaction assembly over binlogs written by the real MariaDB: every commit position is
the offset of the event that follows the commit, GTID positions accumulate to the server's
@@gtid_binlog_pos, and rows land in the transaction that wrote them."""

from __future__ import annotations

import pytest

from replicad.binlog.files import iter_file_events
from replicad.binlog.gtid import MariaGtidPosition
from replicad.binlog.position import Position
from replicad.source.transactions import Begin, Commit, Rows, TransactionAssembler
from tests.helpers.binlog_helpers import binlog_files_since, binlog_position

pytestmark = [pytest.mark.integration, pytest.mark.serial]  # compares the server-wide GTID position


def test_real_workload_positions_and_gtids(db, mariadb) -> None:
    conn, name = db
    binlog_dir = mariadb["binlog_dir"]
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        file, pos = binlog_position(conn)
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO t VALUES (1, 'auto')")
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t VALUES (2, 'a'), (3, 'b')")
        cur.execute("UPDATE t SET v = 'c' WHERE id = 1")
        cur.execute("SAVEPOINT s1")
        cur.execute("DELETE FROM t WHERE id = 3")
        cur.execute("COMMIT")
        cur.execute("CREATE TABLE m (id INT PRIMARY KEY) ENGINE=MyISAM")
        cur.execute("INSERT INTO m VALUES (7)")
        cur.execute("XA START 'x1'")
        cur.execute("INSERT INTO t VALUES (4, 'xa')")
        cur.execute("XA END 'x1'")
        cur.execute("XA PREPARE 'x1'")
        cur.execute("XA COMMIT 'x1'")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("INSERT INTO t VALUES (5, 'after rotate')")
        cur.execute("SELECT @@gtid_binlog_pos")
        (server_pos,) = cur.fetchone()

    with conn.cursor() as cur:
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
        (start_gtids,) = cur.fetchone()
    assembler = TransactionAssembler(
        Position(file, pos, None, MariaGtidPosition.parse(start_gtids))
    )
    transactions: list[list[tuple[str, int]]] = []
    commits: list[Commit] = []
    boundaries: dict[str, dict[int, str]] = {}
    for name_ in binlog_files_since(conn, file):
        events = list(iter_file_events(binlog_dir / name_, start=pos if name_ == file else None))
        boundaries[name_] = {e.header.pos: e.header.type_name for e in events}
        boundaries[name_][events[-1].header.next_pos] = "END"
        for event in events:
            for item in assembler.feed(event):
                if isinstance(item, Begin):
                    transactions.append([])
                elif isinstance(item, Rows) and item.event.table_map.schema == name:
                    for before, after in item.event.rows():
                        transactions[-1].append((item.event.op, (after or before)["id"]))
                elif isinstance(item, Commit):
                    commits.append(item)

    assert not assembler.in_transaction
    assert str(assembler.position.mariadb_gtids) == server_pos
    for commit in commits:
        follower = boundaries[commit.position.file].get(commit.position.pos)
        assert follower in ("MARIADB_GTID", "ROTATE", "STOP", "END"), commit
    mine = [t for t in transactions if t]
    assert mine == [
        [("c", 1)],
        [("c", 2), ("c", 3), ("u", 1), ("d", 3)],  # SAVEPOINT did not split it
        [("c", 7)],
        [("c", 4)],  # XA prepare part
        [("c", 5)],
    ]
    ddl = [c.statement.query for c in commits if c.statement is not None]
    assert any(q.startswith("CREATE TABLE t ") for q in ddl)
    assert any(q.startswith("XA COMMIT") for q in ddl)
    assert [c.xa_prepare for c in commits].count(True) == 1
