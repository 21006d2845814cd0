"""The protocol client against the real MariaDB 10.11 (tests/conftest.py `mariadb`).

Setup and cross-checks go through PyMySQL (an independent client); the code under test is
`replicad.protocol`. Users are created per test with unique names and dropped afterwards.
Other test sessions may write to the same server concurrently, so binlog assertions look for
this test's own table and GTIDs instead of assuming the stream holds nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import random
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pymysql
import pytest

from replicad.binlog.events import FormatDescriptionEvent, MariaGtidEvent, RotateEvent
from replicad.binlog.gtid import MariaGtidPosition
from replicad.binlog.parser import BinlogParser
from replicad.binlog.rows import RowsEvent
from replicad.errors import AuthError, ConnectError, ServerError, TlsError
from replicad.protocol.auth import ed25519_public_key
from replicad.protocol.handshake import TlsMode, TlsSettings
from replicad.protocol.transport import AsyncConnection, connect
from tests.helpers.mariadb import MARIADB_PORT

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[2]

MakeUser = Callable[..., str]
Db = tuple[pymysql.connections.Connection, str]


def _root() -> pymysql.connections.Connection:
    return pymysql.connect(
        host=HOST, port=MARIADB_PORT, user="root", password="root", autocommit=True
    )


@pytest.fixture
def make_user(mariadb: dict[str, object]) -> Iterator[MakeUser]:
    """make_user(auth_clause) -> user name; `auth_clause` follows IDENTIFIED."""
    created: list[str] = []
    root = _root()

    def make(auth_clause: str, grants: str = "SELECT") -> str:
        name = f"rp_{uuid.uuid4().hex[:10]}"
        with root.cursor() as cur:
            cur.execute(f"CREATE USER '{name}'@'{HOST}' IDENTIFIED {auth_clause}")
            cur.execute(f"GRANT {grants} ON *.* TO '{name}'@'{HOST}'")
        created.append(name)
        return name

    yield make
    with root.cursor() as cur:
        for name in created:
            cur.execute(f"DROP USER IF EXISTS '{name}'@'{HOST}'")
    root.close()


def _server_version() -> str:
    root = _root()
    with root.cursor() as cur:
        cur.execute("SELECT @@version")
        (version,) = cur.fetchone()
    root.close()
    return version


# ---------------------------------------------------------------------- login


@pytest.mark.asyncio
async def test_native_password_login(make_user: MakeUser) -> None:
    user = make_user("VIA mysql_native_password USING PASSWORD('n4tive-pw')")
    conn = await connect(HOST, MARIADB_PORT, user, "n4tive-pw", connect_timeout=10)
    try:
        assert conn.server.auth_plugin == "mysql_native_password"
        assert conn.server.mariadb
        assert (await conn.query("SELECT 1")).rows == [("1",)]
        (version,) = (await conn.query("SELECT @@version")).rows[0]
        assert version == _server_version() == conn.server.server_version
        assert (await conn.query("SELECT CURRENT_USER()")).rows == [(f"{user}@{HOST}",)]
    finally:
        await conn.close()


ED25519_PASSWORDS = [
    "x",
    "exactly-thirty-two-bytes-long!!!",
    "a longer pässwörd, past 32 bytes and not ASCII: 日本語",
]


@pytest.mark.asyncio
@pytest.mark.parametrize("password", ED25519_PASSWORDS)
async def test_ed25519_login(make_user: MakeUser, password: str) -> None:
    escaped = password.replace("'", "''")
    user = make_user(f"VIA ed25519 USING PASSWORD('{escaped}')")
    root = _root()
    with root.cursor() as cur:
        cur.execute(
            "SELECT JSON_VALUE(priv, '$.authentication_string') FROM mysql.global_priv "
            "WHERE user = %s AND host = %s",
            (user, HOST),
        )
        (stored,) = cur.fetchone()
    root.close()
    # The server's own derivation of the public key from the password agrees with ours.
    assert stored == base64.b64encode(ed25519_public_key(password.encode())).decode().rstrip("=")
    conn = await connect(HOST, MARIADB_PORT, user, password, connect_timeout=10)
    try:
        # The server default is mysql_native_password, so this went through an auth switch.
        assert conn.server.auth_plugin == "client_ed25519"
        assert (await conn.query("SELECT 1")).rows == [("1",)]
        assert (await conn.query("SELECT @@version")).rows == [(_server_version(),)]
    finally:
        await conn.close()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "clause",
    [
        "VIA mysql_native_password USING PASSWORD('right-pw')",
        "VIA ed25519 USING PASSWORD('right-pw')",
    ],
)
async def test_wrong_password(make_user: MakeUser, clause: str) -> None:
    user = make_user(clause)
    wrong = "Wr0ng-pw-that-must-not-leak"
    with pytest.raises(AuthError) as info:
        await connect(HOST, MARIADB_PORT, user, wrong, connect_timeout=10)
    err = info.value
    assert err.code == 1045
    assert err.context["account"] == f"{user}@{HOST}"
    assert user in str(err)
    for text in (str(err), repr(err), repr(err.context), repr(err.args)):
        assert wrong not in text and "right-pw" not in text


@pytest.mark.asyncio
async def test_unreachable_port(mariadb: dict[str, object]) -> None:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectError, match=f"{HOST}:{port}"):
        await connect(HOST, port, "root", "root", connect_timeout=5)


@pytest.mark.asyncio
async def test_tls_required(mariadb: dict[str, object]) -> None:
    # scripts/services.sh gives the server a private CA and certificate.
    root = _root()
    with root.cursor() as cur:
        cur.execute("SELECT @@have_ssl")
        (have_ssl,) = cur.fetchone()
    root.close()
    assert have_ssl == "YES"
    ca = ROOT / ".services" / "mariadb" / "ssl" / "ca.pem"
    for tls in ("required", "preferred", TlsSettings(TlsMode.VERIFY_IDENTITY, ca=ca)):
        conn = await connect(HOST, MARIADB_PORT, "root", "root", tls=tls)
        assert conn.server.tls
        (cipher,) = (await conn.query("SHOW SESSION STATUS LIKE 'Ssl_cipher'")).rows[0][1:]
        assert cipher
        await conn.close()
    with pytest.raises(TlsError, match="certificate rejected"):
        await connect(HOST, MARIADB_PORT, "root", "root", tls=TlsSettings(TlsMode.VERIFY_CA))


@pytest.mark.asyncio
async def test_unknown_database_refused(mariadb: dict[str, object]) -> None:
    with pytest.raises(AuthError) as info:
        await connect(HOST, MARIADB_PORT, "root", "root", database="no_such_db_rp")
    assert info.value.code == 1049


# ---------------------------------------------------------------------- queries


@pytest.mark.asyncio
@pytest.mark.parametrize("deprecate_eof", [True, False])
async def test_text_result_sets(db: Db, deprecate_eof: bool) -> None:
    pm, name = db
    with pm.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(20), b VARBINARY(8), d DATE)")
        cur.execute(
            "INSERT INTO t VALUES (1, 'Zoë 日本', X'00FF', '2024-02-29'), (2, NULL, '', NULL)"
        )
    conn = await connect(
        HOST, MARIADB_PORT, "root", "root", database=name, deprecate_eof=deprecate_eof
    )
    try:
        assert conn.server.capabilities & (1 << 24) == (1 << 24 if deprecate_eof else 0)
        result = await conn.query("SELECT id, s, b, d FROM t ORDER BY id")
        assert result.column_names == ["id", "s", "b", "d"]
        assert result.rows == [("1", "Zoë 日本", b"\x00\xff", "2024-02-29"), ("2", None, b"", None)]
        assert (await conn.query("SELECT * FROM t WHERE id > 5")).rows == []
        assert (await conn.query("SELECT DATABASE()")).rows == [(name,)]
        ok = await conn.execute("UPDATE t SET s = 'x' WHERE id IN (1, 2)")
        assert ok.affected_rows == 2
        with pytest.raises(ServerError) as info:
            await conn.query("SELEC 1")
        assert info.value.code == 1064 and info.value.sqlstate == "42000"
        assert (await conn.query("SELECT 2")).rows == [("2",)]  # still usable
        await conn.ping()
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_payloads_over_16_mib_both_ways(db: Db) -> None:
    pm, name = db
    with pm.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, v LONGBLOB)")
    value = random.Random(7).randbytes(17 * 1024 * 1024).hex()[: 17 * 1024 * 1024]
    conn = await connect(HOST, MARIADB_PORT, "root", "root", database=name)
    try:
        # The statement itself is > 16 MiB: sent as a full chunk plus a remainder.
        await conn.execute(f"INSERT INTO big VALUES (1, '{value}')")
        result = await conn.query("SELECT v, LENGTH(v) FROM big")
        assert result.rows == [(value.encode(), str(len(value)))]
    finally:
        await conn.close()


# ---------------------------------------------------------------------- binlog dump


async def _replica_session(conn: AsyncConnection, server_id: int) -> None:
    await conn.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
    await conn.execute("SET @mariadb_slave_capability = 4")
    await conn.register_replica(server_id)


async def _collect(conn: AsyncConnection) -> list[bytes]:
    return [raw async for raw in conn]


def _server_id() -> int:
    # Unique per dump: a second dump with the same server_id would kill the first.
    return random.randint(1_000_000, 2**31)


def _table_rows(events: Sequence[object], db: str, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, RowsEvent) and event.table_map is not None:
            if (event.table_map.schema, event.table_map.table) == (db, table):
                rows.extend(after for _before, after in event.rows() if after is not None)
    return rows


@pytest.mark.asyncio
async def test_binlog_dump_from_file_position(db: Db, mariadb) -> None:
    pm, name = db
    conn = await connect(HOST, MARIADB_PORT, "root", "root")
    try:
        log_file, _pos = (await conn.query("SHOW MASTER STATUS")).rows[0][:2]
        assert isinstance(log_file, str)
        with pm.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(20), big LONGBLOB)")
            cur.execute("INSERT INTO t VALUES (1, 'dumped ✓', NULL)")
            # One row event of ~17 MiB: the dump sends it as two packets, reassembled here.
            cur.execute("INSERT INTO t VALUES (2, 'big', REPEAT('z', 17 * 1024 * 1024))")
        server_id = _server_id()
        await _replica_session(conn, server_id)
        await conn.start_dump(server_id, log_file, 4, non_blocking=True)
        raw_events = await _collect(conn)
    finally:
        await conn.close()

    parser = BinlogParser(checksums=True)
    events = [parser.parse(raw) for raw in raw_events]
    assert isinstance(events[0], RotateEvent) and events[0].artificial
    assert events[0].header.timestamp == 0 and events[0].next_file == log_file
    assert isinstance(events[1], FormatDescriptionEvent)
    assert events[1].checksum_alg == 1
    rows = _table_rows(events, name, "t")
    assert rows[0] == {"id": 1, "s": "dumped ✓", "big": None}
    assert rows[1]["id"] == 2 and rows[1]["big"] == b"z" * (17 * 1024 * 1024)
    assert max(len(raw) for raw in raw_events) > 0xFFFFFF

    # Every real event arrives byte for byte as it is in the file on disk.
    on_disk = (Path(str(mariadb["binlog_dir"])) / log_file).read_bytes()
    compared = 0
    for raw, event in zip(raw_events, events, strict=True):
        header = event.header
        if header.log_pos == 0 or isinstance(event, FormatDescriptionEvent):
            continue  # artificial events, and the FDE whose in-use flag the dump clears
        if header.log_pos > len(on_disk):
            break  # the dump went on into a later file
        assert on_disk[header.log_pos - len(raw) : header.log_pos] == raw
        compared += 1
    assert compared >= 4


@pytest.mark.asyncio
async def test_closing_a_connection_mid_dump_frees_the_primarys_dump_thread(db: Db) -> None:
    """A reconnecting replica closes the old connection while the primary still streams.
    Over TLS a graceful close waited for a close_notify answer that never came (up to
    asyncio's 30 s), and the half-open socket kept the primary's dump thread for that
    server_id alive: the next dump with the same server_id got nothing meanwhile."""
    pm, _name = db
    with pm.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, big LONGBLOB)")
        for i in range(24):  # more than the socket buffers hold: the server is mid-stream
            cur.execute("INSERT INTO t VALUES (%s, REPEAT('x', 1024 * 1024))", (i,))
    conn = await connect(HOST, MARIADB_PORT, "root", "root", tls=TlsMode.REQUIRED)
    try:
        ((thread_id, *_),) = (await conn.query("SELECT CONNECTION_ID()")).rows
        ((log_file, *_),) = (await conn.query("SHOW BINARY LOGS")).rows[-1:]
        server_id = _server_id()
        # Heartbeats every 0.2 s: a dump thread with nothing left to send also writes, and
        # learns at once that its connection is gone (as the daemon's own dumps do).
        await conn.execute("SET @master_heartbeat_period = 200000000")
        await _replica_session(conn, server_id)
        await conn.start_dump(server_id, str(log_file), 4)  # blocking: the thread stays
        await conn.__anext__()  # the stream has begun; the rest is left unread:
        await asyncio.sleep(1.5)  # the buffers fill, reading pauses, the server blocks
    except BaseException:
        await conn.close()
        raise
    started = time.monotonic()
    await conn.close()
    closed_s = time.monotonic() - started
    assert closed_s < 1.0, f"close() took {closed_s:.2f} s"

    def dump_thread_alive() -> bool:
        with pm.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s",
                (int(thread_id),),
            )
            return bool(cur.fetchone()[0])

    deadline = time.monotonic() + 3.0
    while dump_thread_alive() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # the event loop completes the abort
    assert not dump_thread_alive(), "the primary kept the closed connection's dump thread"


@pytest.mark.asyncio
async def test_binlog_dump_without_checksum_agreement_is_refused(
    mariadb: dict[str, object],
) -> None:
    conn = await connect(HOST, MARIADB_PORT, "root", "root")
    try:
        log_file = (await conn.query("SHOW MASTER STATUS")).rows[0][0]
        assert isinstance(log_file, str)
        server_id = _server_id()
        await conn.register_replica(server_id)
        await conn.start_dump(server_id, log_file, 4, non_blocking=True)
        with pytest.raises(ServerError) as info:
            await _collect(conn)
        assert info.value.code == 1236
        assert "checksum" in info.value.message.lower()
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_binlog_dump_purged_file(mariadb: dict[str, object]) -> None:
    conn = await connect(HOST, MARIADB_PORT, "root", "root")
    try:
        server_id = _server_id()
        await _replica_session(conn, server_id)
        await conn.start_dump(server_id, "mariadb-bin.999999", 4, non_blocking=True)
        with pytest.raises(ServerError) as info:
            await _collect(conn)
        assert info.value.code == 1236
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_mariadb_gtid_start(db: Db) -> None:
    pm, name = db
    with pm.cursor() as cur:
        cur.execute("CREATE TABLE g (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO g VALUES (1)")
        cur.execute("SELECT @@gtid_binlog_pos")
        (start,) = cur.fetchone()
        cur.execute("INSERT INTO g VALUES (2)")
    start_pos = MariaGtidPosition.parse(start)
    conn = await connect(HOST, MARIADB_PORT, "root", "root")
    try:
        server_id = _server_id()
        await _replica_session(conn, server_id)
        await conn.execute(f"SET @slave_connect_state = '{start}'")
        await conn.execute("SET @slave_gtid_strict_mode = 1")
        await conn.start_dump(server_id, "", 4, non_blocking=True)
        raw_events = await _collect(conn)
    finally:
        await conn.close()
    parser = BinlogParser(checksums=True)
    events = [parser.parse(raw) for raw in raw_events]
    assert isinstance(events[0], RotateEvent) and events[0].artificial
    assert isinstance(events[1], FormatDescriptionEvent)
    gtids = [e for e in events if isinstance(e, MariaGtidEvent)]
    assert gtids
    for gtid in gtids:
        # Nothing at or before the start position is sent again.
        mine = start_pos.get(gtid.domain_id)
        assert mine is None or gtid.seq_no > mine.seq_no
    assert _table_rows(events, name, "g") == [{"id": 2}]
