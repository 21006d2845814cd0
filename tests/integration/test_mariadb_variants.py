"""MariaDB binlog variants written by the real server: row images (FULL, MINIMAL, NOBLOB),
MINIMAL row metadata (no column names), compressed events (log_bin_compress), rotation,
MariaDB GTIDs, and the `replicad dump` command on those files."""

from __future__ import annotations

import itertools
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from replicad.binlog.events import (
    AnnotateRowsEvent,
    BinlogCheckpointEvent,
    EventType,
    MariaGtidEvent,
    MariaGtidListEvent,
    QueryEvent,
    XaPrepareEvent,
)
from replicad.binlog.files import iter_file_events
from replicad.binlog.rows import RowsEvent
from tests.helpers.binlog_helpers import binlog_files_since, binlog_position, changes_since

pytestmark = [pytest.mark.integration, pytest.mark.serial]
ROOT = Path(__file__).resolve().parents[2]


def _exec(conn, *statements: str) -> None:
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def _events_since(conn, binlog_dir: Path, start: tuple[str, int]):
    for name in binlog_files_since(conn, start[0]):
        yield from iter_file_events(binlog_dir / name, start=start[1] if name == start[0] else None)


@pytest.fixture
def table(db):
    conn, name = db
    _exec(
        conn,
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10), b INT, big BLOB, note TEXT)",
    )
    return conn, name


def test_minimal_row_image_carries_only_key_and_changed_columns(table, mariadb) -> None:
    conn, name = table
    start = binlog_position(conn)
    _exec(
        conn,
        "SET SESSION binlog_row_image = 'MINIMAL'",
        "INSERT INTO t VALUES (1, 'x', 10, 'blob', 'n')",
        "UPDATE t SET b = 11 WHERE id = 1",
        "DELETE FROM t WHERE id = 1",
    )
    changes = changes_since(conn, mariadb["binlog_dir"], start, name)
    assert [c.op for c in changes] == ["c", "u", "d"]
    # MINIMAL: inserts still log every column that has a value (MariaDB logs all of them).
    assert changes[0].after == {"id": 1, "a": "x", "b": 10, "big": b"blob", "note": "n"}
    assert changes[1].before == {"id": 1}
    # The update stays an update: the key comes from the before image; the columns neither
    # image carried are named absent, never published as null (docs/consumers.md).
    assert changes[1].after == {"id": 1, "b": 11}
    assert changes[1].absent == (("a", "b", "big", "note"), ("a", "big", "note"))
    assert changes[2].before == {"id": 1}


def test_noblob_row_image_leaves_out_unchanged_blobs(table, mariadb) -> None:
    conn, name = table
    start = binlog_position(conn)
    _exec(
        conn,
        "SET SESSION binlog_row_image = 'NOBLOB'",
        "INSERT INTO t VALUES (1, 'x', 10, 'blob', 'n')",
        "UPDATE t SET b = 11 WHERE id = 1",
    )
    changes = changes_since(conn, mariadb["binlog_dir"], start, name)
    update = changes[1]
    assert update.before == {"id": 1, "a": "x", "b": 10}
    assert update.after == {"id": 1, "a": "x", "b": 11}


def test_minimal_metadata_names_columns_by_position(table, mariadb) -> None:
    conn, name = table
    start = binlog_position(conn)
    _exec(conn, "SET GLOBAL binlog_row_metadata = 'MINIMAL'")  # global-only variable
    try:
        _exec(conn, "INSERT INTO t VALUES (7, 'héllo', -3, x'00ff', 'text')")
    finally:
        _exec(conn, "SET GLOBAL binlog_row_metadata = 'FULL'")
    (change,) = changes_since(conn, mariadb["binlog_dir"], start, name)
    # Without COLUMN_NAME metadata the columns are @1..@n; MINIMAL still carries charsets
    # and signedness, so values keep their types.
    assert change.after == {"@1": 7, "@2": "héllo", "@3": -3, "@4": b"\x00\xff", "@5": "text"}


def test_compressed_query_and_rows_events(table, mariadb) -> None:
    conn, name = table
    start = binlog_position(conn)
    big = "é" * 3000
    _exec(conn, "SET GLOBAL log_bin_compress = ON", "SET GLOBAL log_bin_compress_min_len = 10")
    try:
        # log_bin_compress is read at session start: use a new connection.
        from tests.helpers.mariadb import connect_root

        writer = connect_root(database=name)
        _exec(
            writer,
            "CREATE TABLE c (id INT PRIMARY KEY, payload TEXT, n DECIMAL(8,3))",
            "INSERT INTO c VALUES (1, %s, 12.5)" % ("'" + big + "'"),
            "UPDATE c SET n = -1.25 WHERE id = 1",
            "DELETE FROM c",
        )
        writer.close()
    finally:
        _exec(conn, "SET GLOBAL log_bin_compress = OFF")
    types = {e.header.type_code for e in _events_since(conn, mariadb["binlog_dir"], start)}
    assert EventType.QUERY_COMPRESSED in types
    assert types & {166, 167, 168, 169, 170, 171}, f"no compressed rows event among {types}"
    changes = [c for c in changes_since(conn, mariadb["binlog_dir"], start, name) if c.table == "c"]
    assert [c.op for c in changes] == ["c", "u", "d"]
    assert changes[0].after == {"id": 1, "payload": big, "n": Decimal("12.500")}
    assert changes[1].after["n"] == Decimal("-1.250")
    assert changes[2].before["payload"] == big
    ddl = [
        e
        for e in _events_since(conn, mariadb["binlog_dir"], start)
        if isinstance(e, QueryEvent) and e.compressed
    ]
    assert any("CREATE TABLE c" in e.query for e in ddl)


def test_rotation_and_gtids_across_files(table, mariadb) -> None:
    conn, name = table
    start = binlog_position(conn)
    for i in range(5):
        _exec(conn, f"INSERT INTO t (id, b) VALUES ({i}, {i})", "FLUSH BINARY LOGS")
    events = list(_events_since(conn, mariadb["binlog_dir"], start))
    gtids = [e.gtid for e in events if isinstance(e, MariaGtidEvent)]
    seqs = [int(g.rsplit("-", 1)[1]) for g in gtids]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    changes = changes_since(conn, mariadb["binlog_dir"], start, name)
    assert [c.after["id"] for c in changes] == list(range(5))
    assert len({c.file for c in changes}) == 5, "each insert was flushed into its own file"
    assert all(c.gtid and c.gtid.startswith("0-1-") for c in changes)
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        (pos,) = cur.fetchone()
    assert changes[-1].gtid is not None and int(pos.rsplit("-", 1)[1]) >= seqs[-1]


def test_big_transaction_spans_many_rows_events(table, mariadb) -> None:
    conn, name = table
    start = binlog_position(conn)
    _exec(conn, "BEGIN")
    values = ",".join(f"({i}, 'v{i}', {i}, REPEAT('x', 500), NULL)" for i in range(3000))
    _exec(conn, f"INSERT INTO t VALUES {values}", "COMMIT")
    rows_events = [
        e for e in _events_since(conn, mariadb["binlog_dir"], start) if isinstance(e, RowsEvent)
    ]
    assert len(rows_events) > 1, "3000 rows of 500 bytes must span several ROWS events"
    changes = changes_since(conn, mariadb["binlog_dir"], start, name)
    assert [c.after["id"] for c in changes] == list(range(3000))
    assert len({c.gtid for c in changes}) == 1
    assert changes[1234].after == {
        "id": 1234,
        "a": "v1234",
        "b": 1234,
        "big": b"x" * 500,
        "note": None,
    }


def _dump(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "replicad.cli", "dump", *args], capture_output=True, cwd=ROOT
    )


def test_dump_cli_envelope_positions_and_events(table, mariadb) -> None:
    conn, name = table
    _exec(conn, "FLUSH BINARY LOGS")
    file, _ = binlog_position(conn)
    _exec(
        conn,
        "INSERT INTO t VALUES (1, 'a', 1, x'01', 'n1'), (2, 'b', 2, NULL, NULL)",
        "UPDATE t SET a = 'z' WHERE id = 2",
        "DELETE FROM t WHERE id = 1",
        "FLUSH BINARY LOGS",
    )
    path = str(mariadb["binlog_dir"] / file)
    result = _dump(path)
    assert result.returncode == 0, result.stderr
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    # The same messages Kafka gets: the row changes, and the DDL as schema-change events.
    mine = [m for m in lines if m["source"]["db"] == name and "op" in m]
    assert [m["op"] for m in mine] == ["c", "c", "u", "d"]
    first = mine[0]
    assert first["before"] is None
    assert first["after"] == {"id": 1, "a": "a", "b": 1, "big": "AQ==", "note": "n1"}
    assert set(first["source"]) == {
        "version",
        "connector",
        "name",
        "snapshot",
        "thread",
        "query",
        "schema_version",
        "file",
        "pos",
        "gtid",
        "row",
        "server_id",
        "ts_ms",
        "ts_us",
        "ts_ns",
        "sequence",
        "db",
        "table",
    }
    assert first["source"]["file"] == file and first["source"]["server_id"] == 1
    assert mine[1]["source"]["row"] == 1 and mine[1]["source"]["pos"] == first["source"]["pos"]
    assert mine[2]["before"]["a"] == "b" and mine[2]["after"]["a"] == "z"

    events = [orjson.loads(x) for x in _dump("--events", path).stdout.splitlines()]
    assert events[0]["type"] == "FORMAT_DESCRIPTION" and events[0]["pos"] == 4
    for prev, nxt in itertools.pairwise(events):
        assert prev["next_pos"] == nxt["pos"], "events must tile the file"
    assert events[-1]["type"] == "ROTATE"

    # --start-position / --stop-position select the update alone.
    update_pos = mine[2]["source"]["pos"]
    gtid_event = max(
        e["pos"] for e in events if e["type"] == "MARIADB_GTID" and e["pos"] < update_pos
    )
    delete_pos = mine[3]["source"]["pos"]
    ranged = _dump("--start-position", str(gtid_event), "--stop-position", str(delete_pos), path)
    assert ranged.returncode == 0, ranged.stderr
    only = [orjson.loads(x) for x in ranged.stdout.splitlines()]
    assert [m["op"] for m in only] == ["u"]
    assert only[0]["source"]["gtid"] == mine[2]["source"]["gtid"]


def test_dump_reports_corruption_after_printing_what_decoded(table, mariadb, tmp_path) -> None:
    conn, name = table
    _exec(conn, "FLUSH BINARY LOGS")
    file, _ = binlog_position(conn)
    for i in range(3):
        _exec(conn, f"INSERT INTO t (id, a) VALUES ({i}, 'row{i}')")
    _exec(conn, "FLUSH BINARY LOGS")
    data = bytearray((mariadb["binlog_dir"] / file).read_bytes())
    events = [
        orjson.loads(x)
        for x in _dump("--events", str(mariadb["binlog_dir"] / file)).stdout.splitlines()
    ]
    rows = [e for e in events if e["type"].endswith("_ROWS_V1")]
    target = rows[2]
    data[target["pos"] + 25] ^= 0x40
    broken = tmp_path / file
    broken.write_bytes(bytes(data))
    result = _dump(str(broken))
    assert result.returncode != 0
    printed = [orjson.loads(x) for x in result.stdout.splitlines()]
    assert [
        m["after"]["a"] for m in printed if m["source"]["db"] == name and m.get("op") == "c"
    ] == ["row0", "row1"]
    err = result.stderr.decode()
    assert str(broken) in err and f"offset={target['pos']}" in err and "CRC32" in err

    truncated = tmp_path / "truncated.bin"
    truncated.write_bytes(bytes((mariadb["binlog_dir"] / file).read_bytes()[: target["pos"] + 30]))
    result = _dump(str(truncated))
    assert result.returncode != 0
    assert f"offset={target['pos']}" in result.stderr.decode()
    assert "ends inside an event" in result.stderr.decode()


def test_annotate_rows_gtid_list_and_checkpoint(table, mariadb) -> None:
    conn, _name = table
    _exec(conn, "FLUSH BINARY LOGS")
    start = binlog_position(conn)
    _exec(conn, "INSERT INTO t (id, a) VALUES (1, 'annotated')")
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        (after_insert,) = cur.fetchone()
    _exec(conn, "FLUSH BINARY LOGS")
    events = list(_events_since(conn, mariadb["binlog_dir"], start))
    annotations = [e for e in events if isinstance(e, AnnotateRowsEvent)]
    assert [a.query for a in annotations] == ["INSERT INTO t (id, a) VALUES (1, 'annotated')"]
    # The next file starts with FDE, GTID_LIST (the state so far) and BINLOG_CHECKPOINT.
    next_file = [e for e in events if isinstance(e, MariaGtidListEvent)][-1]
    assert ",".join(str(g) for g in next_file.gtids) == after_insert
    checkpoints = [e for e in events if isinstance(e, BinlogCheckpointEvent)]
    assert checkpoints and all(c.log_file.startswith("mariadb-bin.") for c in checkpoints)


def test_xa_transaction_gtid_flags(table, mariadb) -> None:
    conn, name = table
    start = binlog_position(conn)
    _exec(
        conn,
        "XA START 'gtrid-1', 'bq', 7",
        "INSERT INTO t (id, a) VALUES (50, 'xa')",
        "XA END 'gtrid-1', 'bq', 7",
        "XA PREPARE 'gtrid-1', 'bq', 7",
        "XA COMMIT 'gtrid-1', 'bq', 7",
    )
    events = list(_events_since(conn, mariadb["binlog_dir"], start))
    prepared = [e for e in events if isinstance(e, MariaGtidEvent) and e.flags & e.PREPARED_XA]
    completed = [e for e in events if isinstance(e, MariaGtidEvent) and e.flags & e.COMPLETED_XA]
    assert len(prepared) == 1 and len(completed) == 1
    for gtid_event in (prepared[0], completed[0]):
        assert (gtid_event.xa_gtrid, gtid_event.xa_bqual, gtid_event.xa_format_id) == (
            b"gtrid-1",
            b"bq",
            7,
        )
    assert any(isinstance(e, XaPrepareEvent) for e in events)
    changes = changes_since(conn, mariadb["binlog_dir"], start, name)
    assert [(c.op, c.after["a"]) for c in changes] == [("c", "xa")]


def test_dump_events_of_a_table_wider_than_64_columns(db, mariadb) -> None:
    conn, _ = db
    columns = ", ".join(f"c{i} INT" for i in range(70))
    _exec(conn, "FLUSH BINARY LOGS")
    file, _ = binlog_position(conn)
    _exec(
        conn,
        f"CREATE TABLE w70 (id INT PRIMARY KEY, {columns})",
        "INSERT INTO w70 (id, c69) VALUES (1, 69)",
        "FLUSH BINARY LOGS",
    )
    result = _dump("--events", str(mariadb["binlog_dir"] / file))
    assert result.returncode == 0, result.stderr
    rows = [orjson.loads(x) for x in result.stdout.splitlines()]
    (write,) = [e for e in rows if e["type"] == "WRITE_ROWS_V1"]
    assert write["present_before"] == list(range(71))
    assert write["rows"][0]["after"]["c69"] == 69 and write["rows"][0]["after"]["c0"] is None
