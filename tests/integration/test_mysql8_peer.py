"""replicad against a scripted MySQL 8.0.36 primary, no MariaDB (tests/helpers/mysql8_peer.py).

What only MySQL 8 does is exercised here: caching_sha2_password full authentication over RSA
(and TLS), COM_BINLOG_DUMP_GTID with the executed set, GTID-skipped transactions announced by a
heartbeat, HEARTBEAT_V2, PREVIOUS_GTIDS, zstd TRANSACTION_PAYLOAD, ERR 1236 for purged GTIDs.

Oracle: the peer places every event itself, so it knows each row change's values, GTID and
source coordinates; what replicad publishes must be exactly that list, in commit order, once.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from replicad.binlog.events import (
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RotateEvent,
    TransactionPayloadEvent,
    XidEvent,
)
from replicad.binlog.gtid import GtidSet
from replicad.binlog.position import Position
from replicad.binlog.rows import RowsEvent
from replicad.config import SourceConfig
from replicad.source.start import initial_position
from replicad.source.stream import Reconnected, ReplicaStream, open_connection, server_info
from replicad.source.transactions import Commit, TransactionAssembler, TransactionUnit
from tests.helpers.daemon_process import DaemonProcess, wait_for, worker_server_id
from tests.helpers.mysql8_peer import (
    OTHER_UUID,
    SERVER_UUID,
    Binlog,
    ColumnDef,
    Cut,
    Ddl,
    Delete,
    Dml,
    ExpectedChange,
    Insert,
    MySQL8Peer,
    Table,
    Update,
)

pytestmark = pytest.mark.integration


async def events_of(stream: ReplicaStream, start: Position) -> AsyncIterator[Any]:
    """What the stream yields, with each unit's events in order: heartbeats, Reconnected
    markers and the decoded events, as a replica reads them."""
    async for item in stream.units(start):
        if isinstance(item, TransactionUnit):
            for event in item.events:
                yield event
        else:
            yield item


ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "repl-Pässwörd"

ITEMS = Table(
    101,
    "shop",
    "items",
    (
        ColumnDef("id", "int", nullable=False),
        ColumnDef("name", "varchar"),
        ColumnDef("qty", "bigint"),
        ColumnDef("price", "decimal"),
    ),
)
ORDERS = Table(
    102,
    "shop",
    "orders",
    (
        ColumnDef("id", "int", nullable=False),
        ColumnDef("item_id", "int"),
        ColumnDef("note", "varchar"),
    ),
)


def item(id_: int, name: str | None = "n", qty: int = 1, price: str = "1.00") -> dict[str, Any]:
    return {"id": id_, "name": name, "qty": qty, "price": price}


def order(id_: int, item_id: int, note: str | None = None) -> dict[str, Any]:
    return {"id": id_, "item_id": item_id, "note": note}


def gtids(*parts: str) -> GtidSet:
    return GtidSet.parse(",".join(parts))


def a(interval: str) -> str:
    return f"{SERVER_UUID}:{interval}"


def b(interval: str) -> str:
    return f"{OTHER_UUID}:{interval}"


def plain(value: Any) -> Any:
    """Decoded values as the peer states them (DECIMAL as its text)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


# ------------------------------------------------------------------------------ the daemon


class Daemon(DaemonProcess):
    """`replicad run` against the scripted MySQL 8 peer, started at a GTID set."""

    def __init__(
        self,
        tmp: Path,
        port: int,
        start_gtid: str,
        *,
        password: str = PASSWORD,
        server_id: int = 4242,
    ) -> None:
        super().__init__(
            tmp,
            pipeline="mysql8",
            source_yaml=(
                f"  host: 127.0.0.1\n  port: {port}\n  user: repl\n"
                f"  server_id: {server_id}\n"
                f"  start: {{gtid: {json.dumps(start_gtid)}}}\n"
                "  heartbeat_s: 0.5\n  connect_timeout_s: 5\n"
                "  reconnect: {initial_s: 0.05, max_s: 0.5}\n"
                "  tls: {mode: preferred}\n"
                # every event of a transaction handed on by itself: resumes inside one
                "  unit_part_bytes: 1\n"
            ),
            password=password,
        )


def published(change: dict[str, Any]) -> tuple[Any, ...]:
    s = change["source"]
    return (
        change["op"],
        change["source"]["db"],
        change["source"]["table"],
        change["before"],
        change["after"],
        s["gtid"],
        s["file"],
        s["pos"],
        s["row"],
    )


def expected(change: ExpectedChange) -> tuple[Any, ...]:
    return (
        change.op,
        change.db,
        change.table,
        change.before,
        change.after,
        change.gtid,
        change.file,
        change.event_pos,
        change.row,
    )


def coordinates(changes: list[dict[str, Any]]) -> Counter[tuple[str, int, int]]:
    return Counter((c["source"]["file"], c["source"]["pos"], c["source"]["row"]) for c in changes)


def source_config(port: int, **overrides: Any) -> SourceConfig:
    settings: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": port,
        "user": "repl",
        "server_id": 77,
        "heartbeat_s": 0.2,
        "connect_timeout_s": 5,
        "reconnect": {"initial_s": 0.05, "max_s": 0.2},
    }
    settings.update(overrides)
    return SourceConfig.model_validate(settings)


# ------------------------------------------------------------------------------ the peer itself


def test_peer_binlog_files_decode_as_written(tmp_path: Path) -> None:
    """The peer's placed events are a valid binlog (magic, offsets, log_pos, CRCs), so a
    disagreement in the live tests is about the protocol, not about the peer's bytes."""
    from replicad.binlog.files import iter_file_events

    binlog = Binlog()
    binlog.add(Dml([Insert(ITEMS, [item(1), item(2, None, -(2**63), "-99999999.99")])]))
    binlog.add(Dml([Update(ITEMS, [(item(1), item(1, "Grüße €", 7))])], compressed=True))
    binlog.rotate()
    binlog.add(Dml([Delete(ITEMS, [item(1, "Grüße €", 7)])], rows_per_event=1))
    for f in binlog.files:
        path = tmp_path / f.name
        path.write_bytes(f.bytes())
        decoded = list(iter_file_events(path))
        assert [e.header.log_pos for e in decoded if e.header.log_pos] == [e.end for e in f.events]
    assert binlog.executed_text(",") == f"{b('1-5')},{a('1-3')}"


# ------------------------------------------------------------------------------ 1. ReplicaStream


@pytest.mark.asyncio
async def test_replica_stream_gtid_start_payload_heartbeats_rsa_auth() -> None:
    binlog = Binlog()
    t1 = binlog.add(Dml([Insert(ITEMS, [item(1), item(2)])]))
    t2 = binlog.add(Dml([Insert(ORDERS, [order(1, 1)])]))
    t3 = binlog.add(Ddl("CREATE TABLE audit (id INT PRIMARY KEY)", "shop"))
    t4 = binlog.add(
        Dml(
            [
                Insert(ITEMS, [item(3, "Grüße €", -(2**63), "-0.01"), item(4, None, 2**63 - 1)]),
                Update(ITEMS, [(item(1), item(1, "one", 10, "99999999.99"))]),
            ],
            compressed=True,
        )
    )
    t5 = binlog.add(Dml([Insert(ORDERS, [order(2, 3, "x")]), Delete(ITEMS, [item(2)])]))
    start = gtids(b("1-5"), a("1-2"))
    with MySQL8Peer(binlog, password=PASSWORD, heartbeat_version=2) as peer:
        stream = ReplicaStream(source_config(peer.port), PASSWORD, pipeline="mysql8")
        position = Position("", 4, start)
        events: list[Any] = []
        t6 = None
        idle_heartbeats = 0
        generator = events_of(stream, position)
        try:
            async with asyncio.timeout(30):
                async for event in generator:
                    events.append(event)
                    if isinstance(event, HeartbeatEvent) and event.position == t5.end:
                        idle_heartbeats += 1
                        if idle_heartbeats == 2:
                            # Heartbeats while idle, then a new commit: it must stream on.
                            t6 = await asyncio.to_thread(
                                peer.append,
                                Dml([Update(ORDERS, [(order(2, 3, "x"), order(2, 4))])]),
                            )
                    if t6 is not None and isinstance(event, XidEvent):
                        break
        finally:
            await generator.aclose()
            await stream.close()
        assert t6 is not None
        connections = list(peer.connections)
        dumps = list(peer.dumps)

    assert not any(isinstance(e, Reconnected) for e in events)
    heartbeats = [e for e in events if isinstance(e, HeartbeatEvent)]
    others = [e for e in events if not isinstance(e, HeartbeatEvent)]
    rotate, fde, previous = others[:3]
    assert isinstance(rotate, RotateEvent) and rotate.artificial
    assert (rotate.next_file, rotate.position) == ("binlog.000001", 4)
    assert isinstance(fde, FormatDescriptionEvent)
    assert (fde.server_version, fde.checksum_alg) == ("8.0.36", 1)
    assert isinstance(previous, PreviousGtidsEvent) and previous.gtid_set == gtids(b("1-5"))

    # GTID-skipped transactions: only the ones the client lacks, and a heartbeat carrying the
    # position after the skipped ones comes first.
    assert [e.gtid for e in others if isinstance(e, GtidEvent)] == [
        t.gtid for t in (t3, t4, t5, t6)
    ]
    assert not {t1.gtid, t2.gtid} & {e.gtid for e in others if isinstance(e, GtidEvent)}
    first_gtid = next(i for i, e in enumerate(events) if isinstance(e, GtidEvent))
    # Units hold the events before a transaction (ROTATE, FDE, PREVIOUS_GTIDS) until it
    # starts, while heartbeats are handed on as they come: the last heartbeat before the
    # first GTID is the one the primary sent after the skipped transactions.
    skip_heartbeat = [e for e in events[:first_gtid] if isinstance(e, HeartbeatEvent)][-1]
    assert isinstance(skip_heartbeat, HeartbeatEvent)
    assert (skip_heartbeat.version, skip_heartbeat.log_file, skip_heartbeat.position) == (
        2,
        "binlog.000001",
        t2.end,
    )
    # Idle heartbeats: HEARTBEAT_V2 with the file and the end of the binlog.
    idle = [h for h in heartbeats if h is not skip_heartbeat]
    assert len(idle) >= 2
    assert {(h.version, h.log_file, h.position) for h in idle} == {(2, "binlog.000001", t5.end)}

    # The payload is followed by its decoded inner events (log_pos 0), rows included.
    payload_at = next(i for i, e in enumerate(events) if isinstance(e, TransactionPayloadEvent))
    payload = events[payload_at]
    assert payload.compression_name == "ZSTD" and payload.header.log_pos == t4.end
    inner = events[payload_at + 1 : payload_at + 7]
    assert [e.header.type_name for e in inner] == [
        "QUERY",
        "TABLE_MAP",
        "WRITE_ROWS",
        "TABLE_MAP",
        "UPDATE_ROWS",
        "XID",
    ]
    assert all(e.header.log_pos == 0 for e in inner)

    rows = [
        (e.op, e.table_map.schema, e.table_map.table, plain(before), plain(after))
        for e in events
        if isinstance(e, RowsEvent)
        for before, after in e.rows()
    ]
    want = [(c.op, c.db, c.table, c.before, c.after) for t in (t4, t5, t6) for c in t.changes]
    assert rows == want
    assert [e.query for e in others if isinstance(e, QueryEvent) and e.query != "BEGIN"] == [
        "CREATE TABLE audit (id INT PRIMARY KEY)"
    ]

    # Heartbeats do not disturb the transaction boundaries and positions.
    assembler = TransactionAssembler(position)
    commits = [i for e in events for i in assembler.feed(e) if isinstance(i, Commit)]
    assert [(c.position.file, c.position.pos) for c in commits] == [
        ("binlog.000001", t.end) for t in (t3, t4, t5, t6)
    ]
    assert commits[-1].position.mysql_gtids == gtids(b("1-5"), a("1-6"))

    # One connection: caching_sha2 full authentication over RSA, key fetched from the server.
    (dump,) = dumps
    (conn,) = [c for c in connections if c.id == dump.connection]
    assert conn.auth_path == "rsa" and conn.public_key_requested and conn.authenticated
    assert conn.scramble_ok, "the first response is the caching_sha2 scramble"
    assert conn.password_received == PASSWORD.encode()
    assert PASSWORD.encode() not in conn.raw_in, "the password crossed the wire in clear"
    assert conn.registered is not None and conn.registered["server_id"] == 77
    assert conn.user_vars["source_binlog_checksum"] == "CRC32"
    assert conn.user_vars["source_heartbeat_period"] == "200000000"
    assert dump.command == "COM_BINLOG_DUMP_GTID"
    assert (dump.server_id, dump.file, dump.pos, dump.gtid_set) == (77, "", 4, start)


@pytest.mark.asyncio
async def test_caching_sha2_full_auth_over_tls_sends_the_password_only_inside_tls() -> None:
    binlog = Binlog()
    binlog.add(Dml([Insert(ITEMS, [item(1)])]))
    with MySQL8Peer(binlog, password=PASSWORD, tls=True) as peer:
        stream = ReplicaStream(
            source_config(peer.port, tls={"mode": "required"}), PASSWORD, pipeline="mysql8"
        )
        generator = events_of(stream, Position("", 4, gtids(b("1-5"))))
        try:
            async with asyncio.timeout(20):
                async for event in generator:
                    if isinstance(event, XidEvent):
                        break
        finally:
            await generator.aclose()
            await stream.close()
        (conn,) = list(peer.connections)
    assert conn.tls and conn.auth_path == "tls" and conn.authenticated
    assert not conn.public_key_requested
    assert conn.password_received == PASSWORD.encode()
    assert PASSWORD.encode() not in conn.raw_in  # what crossed the wire before TLS


@pytest.mark.asyncio
async def test_heartbeats_of_the_version_the_dump_asked_for_are_parsed() -> None:
    """The peer behaves as MySQL: HEARTBEAT_LOG_EVENT_V2 only when COM_BINLOG_DUMP_GTID
    carries USE_HEARTBEAT_EVENT_V2 (0x02), else the v1 event with log_pos in its header."""
    binlog = Binlog()
    txn = binlog.add(Dml([Insert(ITEMS, [item(1)])]))
    with MySQL8Peer(binlog, password=PASSWORD) as peer:
        stream = ReplicaStream(source_config(peer.port), PASSWORD, pipeline="mysql8")
        heartbeats: list[HeartbeatEvent] = []
        generator = events_of(stream, Position("", 4, gtids(b("1-5"), a("1"))))
        try:
            async with asyncio.timeout(20):
                async for event in generator:
                    if isinstance(event, HeartbeatEvent):
                        heartbeats.append(event)
                        if len(heartbeats) == 3:
                            break
        finally:
            await generator.aclose()
            await stream.close()
        (dump,) = list(peer.dumps)
    # replicad asks an 8.0.26+ server for v2 heartbeats (USE_HEARTBEAT_EVENT_V2).
    assert dump.flags & 0x02
    version = 2 if dump.flags & 0x02 else 1
    assert [(h.version, h.log_file, h.position) for h in heartbeats] == [
        (version, "binlog.000001", txn.end)
    ] * 3
    assert [h[0] for h in dump.heartbeats[:3]] == [version] * 3


@pytest.mark.asyncio
async def test_initial_position_latest_and_earliest_from_mysql8() -> None:
    binlog = Binlog()
    binlog.add(Dml([Insert(ITEMS, [item(1)])]))
    binlog.rotate()
    last = binlog.add(Dml([Insert(ITEMS, [item(2)])]))
    with MySQL8Peer(binlog, password=PASSWORD) as peer:
        conn = await open_connection(source_config(peer.port), PASSWORD)
        try:
            info = await server_info(conn)
            latest = await initial_position(conn, info, "latest")
            earliest = await initial_position(conn, info, "earliest")
        finally:
            await conn.close()
    assert not info.mariadb and info.gtid_mode and info.checksum
    assert (info.binlog_format, info.row_image, info.row_metadata) == ("ROW", "FULL", "FULL")
    assert GtidSet.parse(info.gtid_position) == gtids(b("1-5"), a("1-2"))
    assert latest == Position("binlog.000002", last.end, gtids(b("1-5"), a("1-2")))
    assert (earliest.file, earliest.pos) == ("binlog.000001", 4)


# ------------------------------------------------------------------------------ 2. the daemon


def test_daemon_delivers_every_change_once_across_cuts_and_resumes_by_gtid(tmp_path: Path) -> None:
    binlog = Binlog()
    binlog.add(Dml([Insert(ITEMS, [item(1), item(2), item(3)])]))  # A:1, already replicated
    t2 = binlog.add(Dml([Insert(ORDERS, [order(1, 1)])]))
    t3 = binlog.add(Ddl("CREATE TABLE audit (id INT PRIMARY KEY)", "shop"))
    # A:4: GTID, BEGIN, TABLE_MAP, WRITE_ROWS(2), TABLE_MAP, UPDATE_ROWS, TABLE_MAP,
    # WRITE_ROWS, XID - cut in the middle of the UPDATE_ROWS packet.
    t4 = binlog.add(
        Dml(
            [
                Insert(ITEMS, [item(4, "four", 4, "4.40"), item(5, None, -5)]),
                Update(ITEMS, [(item(1), item(1, "uno", 11, "11.11"))]),
                Insert(ORDERS, [order(2, 4, "Grüße")]),
            ]
        )
    )
    # A:5: GTID, TRANSACTION_PAYLOAD - cut 40 % into the payload.
    t5 = binlog.add(Dml([Insert(ITEMS, [item(6), item(7), item(8, "eight")])], compressed=True))
    binlog.rotate()
    t6 = binlog.add(Dml([Delete(ITEMS, [item(2)])]))
    t7 = binlog.add(
        Dml(
            [Update(ITEMS, [(item(4, "four", 4, "4.40"), item(4, "IV", 44, "0.04"))])],
            compressed=True,
        )
    )
    # A:8: one statement in three WRITE_ROWS events (20 + 20 + 10 rows) - cut after the first.
    t8 = binlog.add(
        Dml([Insert(ITEMS, [item(100 + i, f"bulk{i}", i) for i in range(50)])], rows_per_event=20)
    )
    start = f"{b('1-5')},{a('1')}"
    with MySQL8Peer(binlog, password=PASSWORD, heartbeat_version=2) as peer:
        peer.cuts = [
            Cut(gno=4, event=5, fraction=0.5),
            Cut(gno=5, event=1, fraction=0.4),
            Cut(after_transactions=2, action="close"),
            Cut(gno=8, event=4, action="reset"),
            None,
        ]
        daemon = Daemon(tmp_path, peer.port, start_gtid=start)
        daemon.start()
        want = [expected(c) for c in binlog.expected_changes(after=GtidSet.parse(start))]
        wait_for(lambda: len(daemon.changes()) >= len(want), 30, "the scripted changes")
        t9 = peer.append(Dml([Insert(ORDERS, [order(3, 5, "live")])]))
        want += [expected(c) for c in t9.changes]
        wait_for(lambda: len(daemon.changes()) >= len(want), 20, "the live transaction")
        wait_for(lambda: (daemon.position() or {}).get("pos") == t9.end, 10, "the checkpoint")
        rc = daemon.stop(signal.SIGTERM)
        dumps = list(peer.dumps)
        executed = binlog.executed_text(",")

    changes = daemon.changes()
    # Nothing lost, nothing twice, values and MySQL GTIDs exact, commit order kept.
    assert [published(c) for c in changes] == want
    assert all(n == 1 for n in coordinates(changes).values())
    assert {c["source"]["server_id"] for c in changes} == {1}
    assert all(c["source"]["gtid"].startswith(f"{SERVER_UUID}:") for c in changes)

    # Each reconnect asked for exactly the executed set after the last complete transaction.
    gtid_dumps = [d for d in dumps if d.command == "COM_BINLOG_DUMP_GTID"]
    assert [d.gtid_set for d in gtid_dumps] == [
        gtids(b("1-5"), a("1")),
        gtids(b("1-5"), a("1-3")),
        gtids(b("1-5"), a("1-4")),
        gtids(b("1-5"), a("1-6")),
        gtids(b("1-5"), a("1-7")),
    ]
    assert all((d.file, d.pos, d.server_id) == ("", 4, worker_server_id(4242)) for d in gtid_dumps)
    assert [d.cut_at[:2] if d.cut_at else None for d in gtid_dumps] == [
        (t4.gtid, 5),
        (t5.gtid, 1),
        (t6.gtid, len(t6.events) - 1),
        (t8.gtid, 4),
        None,
    ]
    assert gtid_dumps[1].transactions_sent[0] == t4.gtid  # the cut one, sent again
    resumed = [e for e in daemon.log_events() if e["event"] == "source_resumed"]
    assert [(e["in_transaction"], e["skip_rows"]) for e in resumed] == [
        (True, 2),
        (True, 0),
        (False, 0),
        (True, 20),
    ]

    # The saved position is the executed set after the last transaction.
    position = daemon.position()
    assert position is not None
    assert GtidSet.parse(position["gtid_set"]) == GtidSet.parse(executed)
    assert position["gtid_set"] == executed
    assert (position["file"], position["pos"]) == ("binlog.000002", t9.end)
    assert rc == 0
    assert any(e["event"] == "stopped" for e in daemon.log_events())
    assert t3.changes == [] and t2.changes and t7.changes  # a DDL, rows before and after it


# ------------------------------------------------------------------------------ 3. / 4. fatal


def test_purged_gtids_exit_78_saying_the_position_was_purged(tmp_path: Path) -> None:
    binlog = Binlog(previous=a("1-3"))  # A:1-3 were in binary logs purged since
    binlog.add(Dml([Insert(ITEMS, [item(1)])]))
    with MySQL8Peer(binlog, password=PASSWORD) as peer:
        daemon = Daemon(tmp_path, peer.port, start_gtid=a("1"))
        result = daemon.run_to_exit()
        dumps = list(peer.dumps)
    stderr = result.stderr.decode()
    assert result.returncode == 78, stderr
    assert "purged" in stderr
    assert a("1") in stderr, "the message names the position that was lost"
    (dump,) = dumps  # fatal at once: no reconnect loop against a purged position
    assert dump.gtid_set == gtids(a("1")) and dump.error is not None
    assert daemon.changes() == [] and daemon.position() is None


def test_wrong_password_exit_78_naming_the_account_not_the_password(tmp_path: Path) -> None:
    binlog = Binlog()
    with MySQL8Peer(binlog, password=PASSWORD) as peer:
        daemon = Daemon(tmp_path, peer.port, start_gtid=b("1-5"), password="not-the-passw0rd")
        result = daemon.run_to_exit()
        connections = list(peer.connections)
    stderr = result.stderr.decode()
    assert result.returncode == 78, stderr
    assert "repl@127.0.0.1" in stderr and "Access denied" in stderr
    assert "not-the-passw0rd" not in stderr and PASSWORD not in stderr
    (conn,) = connections  # no retry with credentials that cannot work
    assert conn.auth_path == "rsa" and not conn.authenticated
    assert conn.password_received == b"not-the-passw0rd"


# ------------------------------------------------------------------------------ found bugs


def test_err_1236_that_is_not_a_purge_is_not_reported_as_one(tmp_path: Path) -> None:
    """MySQL's dump thread reports every fatal condition as ERR 1236
    (Binlog_sender::set_fatal_error), e.g. an event larger than the source's
    max_allowed_packet. Nothing was purged: telling the operator so, and advising a
    re-snapshot of the downstream data, is wrong and destructive advice."""
    binlog = Binlog()
    binlog.add(Dml([Insert(ITEMS, [item(1)])]))
    with MySQL8Peer(binlog, password=PASSWORD) as peer:
        peer.dump_error = (
            "log event entry exceeded max_allowed_packet; Increase max_allowed_packet on "
            "source; the first event 'binlog.000001' at 4, the last event read from "
            "'./binlog.000001' at 126, the last byte read from './binlog.000001' at 445."
        )
        daemon = Daemon(tmp_path, peer.port, start_gtid=b("1-5"))
        result = daemon.run_to_exit()
        (dump,) = list(peer.dumps)
    stderr = result.stderr.decode()
    assert dump.error is not None
    assert result.returncode in (75, 78), stderr
    assert "max_allowed_packet" in stderr, "the server's reason reaches the operator"
    assert "purged" not in stderr and "Re-snapshot" not in stderr, stderr


def test_row_changes_inside_one_payload_have_distinct_source_coordinates(tmp_path: Path) -> None:
    """A compressed transaction writing two tables holds two ROWS events in one
    TRANSACTION_PAYLOAD. Their four row changes are distinct, so their source coordinates
    (gtid/file/pos/row, what consumers drop duplicates by) must be distinct too."""
    binlog = Binlog()
    txn = binlog.add(
        Dml(
            [Insert(ITEMS, [item(1), item(2)]), Insert(ORDERS, [order(1, 1), order(2, 2)])],
            compressed=True,
        )
    )
    with MySQL8Peer(binlog, password=PASSWORD) as peer:
        daemon = Daemon(tmp_path, peer.port, start_gtid=b("1-5"))
        daemon.start()
        wait_for(lambda: len(daemon.changes()) >= 4, 20, "four changes")
        assert daemon.stop() == 0
    changes = daemon.changes()
    assert [(c["op"], c["source"]["table"], c["after"]) for c in changes] == [
        (c.op, c.table, c.after) for c in txn.changes
    ]
    keys = Counter(
        (c["source"]["gtid"], c["source"]["file"], c["source"]["pos"], c["source"]["row"])
        for c in changes
    )
    assert len(keys) == 4, f"distinct changes share source coordinates: {dict(keys)}"


def test_restart_inside_the_first_huge_transaction_after_a_gtid_start(tmp_path: Path) -> None:
    """The first transaction after `start: {gtid: ...}` has 12,000 rows: replicad saves a row
    checkpoint at 10,000 (before any commit), is killed, and must resume from it."""
    binlog = Binlog()
    rows = [item(i, "r", i, "0.50") for i in range(1, 12_001)]
    # GTID, BEGIN, TABLE_MAP, 12 x WRITE_ROWS (1000 rows each), XID
    txn = binlog.add(Dml([Insert(ITEMS, rows)], rows_per_event=1000))
    with MySQL8Peer(binlog, password=PASSWORD) as peer:
        peer.cuts = [Cut(gno=1, event=14, action="stall")]  # 11,000 rows out, then silence
        daemon = Daemon(tmp_path, peer.port, start_gtid=b("1-5"))
        daemon.start()
        wait_for(lambda: (daemon.position() or {}).get("row") == 10_000, 20, "a row checkpoint")
        assert len(peer.dumps) == 1, "killed while the first dump is still stalled"
        daemon.stop(signal.SIGKILL)
        daemon.start()  # must come up from the saved checkpoint
        wait_for(
            lambda: (daemon.position() or {}).get("gtid_set") == binlog.executed_text(","),
            30,
            "the transaction's commit",
        )
        assert daemon.stop() == 0
    changes = daemon.changes()
    ids = Counter(c["after"]["id"] for c in changes)
    assert set(ids) == {r["id"] for r in rows}
    # After a crash at most the un-checkpointed window (rows 10,000..10,999) is re-sent.
    assert {i for i, n in ids.items() if n > 1} <= set(range(10_001, 11_001))
    assert txn.changes[-1].after == changes[-1]["after"]
