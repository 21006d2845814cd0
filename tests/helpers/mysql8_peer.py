"""A scripted MySQL 8.0.36 primary on 127.0.0.1, for what no server on this machine can play.

Debian 12 ships MariaDB only, so the MySQL-8-only parts of being a replica (caching_sha2
full authentication, COM_BINLOG_DUMP_GTID, PREVIOUS_GTIDS, TRANSACTION_PAYLOAD, heartbeats
v1/v2, ERR 1236 for purged GTIDs) are exercised against this peer. It speaks the protocol
from the documented layouts, not from replicad's code: packets are framed here, event bytes
come from `tests/helpers/events.py` (which imports nothing from replicad); only the GTID set
of a dump request is decoded with `replicad.binlog.gtid.GtidSet.decode`, whose own unit tests
pin it to MySQL's encoding.

What it does, and the MySQL source it follows (mysql/mysql-server 8.0):
- Handshake v10 with `caching_sha2_password` (sql/auth/sha2_password.cc). The cache starts
  empty, so the first login of an account is a full authentication: `01 04`, then either the
  clear password inside TLS, or `02` (public key request) -> `01` + PEM -> RSA-OAEP(SHA1) of
  `(password + NUL) XOR scramble`. A wrong password is ERR 1045 28000 after that exchange.
  `fast_auth=True` lets an account that once logged in take the `01 03` path.
- COM_QUERY answers for what a replica asks: `SELECT @@var`, `SHOW [GLOBAL] VARIABLES LIKE`,
  `SHOW MASTER STATUS` / `SHOW BINARY LOG STATUS` (with Executed_Gtid_Set),
  `SHOW BINARY LOGS`, `SHOW SLAVE HOSTS` / `SHOW REPLICAS` (replicas registered by live
  connections), `SELECT ... FROM information_schema.COLUMNS/TABLES/STATISTICS` (the tables
  the binlog has rows for), `SET @user_var = ...` (recorded: checksum, heartbeat period,
  replica UUID). Anything else is ERR 1064. Text result sets honour CLIENT_DEPRECATE_EOF.
- COM_REGISTER_SLAVE -> OK; COM_PING -> OK; COM_QUIT closes.
- COM_BINLOG_DUMP_GTID / COM_BINLOG_DUMP (sql/rpl_source.cc, sql/rpl_binlog_sender.cc):
  checks as the server does (checksum-unaware replica, purged GTIDs, replica ahead of the
  source, unknown file, position past the end) and answers ERR 1236; otherwise per file a
  fake ROTATE (timestamp 0, log_pos 0, LOG_EVENT_ARTIFICIAL_F), the FDE (in-use flag cleared;
  log_pos and `created` zeroed, CRC recomputed, when a GTID dump skips the file's first
  transaction or a file dump starts past the FDE), then the file's events. Transactions
  whose GTID the replica has are skipped group-wise (`skip_event`), and a heartbeat carrying
  the position after the skipped group precedes the next event sent. When the binlog is
  exhausted it waits for new transactions, sending a heartbeat every
  `@source_heartbeat_period` ns: HEARTBEAT_LOG_EVENT_V2 when the dump flags carry 0x02
  (USE_HEARTBEAT_EVENT_V2), else the v1 HEARTBEAT_LOG_EVENT (`send_heartbeat_event`). A new
  dump with the same replica UUID (or server_id) kills the older one (zombie dump threads).
- Faults, per dump connection in order (`peer.cuts`): cut after N transactions, or at a given
  event of a given transaction, optionally after a share of that event's packet bytes; the
  cut is a reset, a clean close, or a stall (the connection stays open and silent).

The peer runs its own asyncio loop in a daemon thread, so synchronous tests (a daemon in a
subprocess) and asynchronous ones (ReplicaStream in the test's loop) can both use it. Every
connection, query, dump request, heartbeat and cut is recorded for the tests to assert on.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import hashlib
import os
import re
import socket
import ssl
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID

from replicad.binlog.gtid import Gtid, GtidSet
from tests.helpers import events as ev

MYSQL_VERSION = "8.0.36"
SERVER_ID = 1
SERVER_UUID = "5c3f7a10-0c2e-11ef-9a41-0242ac120002"
OTHER_UUID = "0e5a1a3c-0c2f-11ef-8b6e-0242ac120003"  # an earlier primary's transactions

# Capability flags (include/mysql_com.h)
CLIENT_CONNECT_WITH_DB = 1 << 3
CLIENT_PROTOCOL_41 = 1 << 9
CLIENT_SSL = 1 << 11
CLIENT_SECURE_CONNECTION = 1 << 15
CLIENT_PLUGIN_AUTH = 1 << 19
CLIENT_CONNECT_ATTRS = 1 << 20
CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA = 1 << 21
CLIENT_DEPRECATE_EOF = 1 << 24
# What an 8.0 server announces (CLIENT_SSL is removed when the peer has no certificate).
MYSQL8_CAPABILITIES = 0xDFFFFFFF

COM_QUIT = 0x01
COM_QUERY = 0x03
COM_PING = 0x0E
COM_BINLOG_DUMP = 0x12
COM_REGISTER_SLAVE = 0x15
COM_BINLOG_DUMP_GTID = 0x1E

DUMP_NON_BLOCK = 0x01
USE_HEARTBEAT_EVENT_V2 = 0x02  # include/mysql.h; checked by Binlog_sender::send_heartbeat_event

LOG_EVENT_BINLOG_IN_USE_F = 0x0001
LOG_EVENT_ARTIFICIAL_F = 0x0020

ER_ACCESS_DENIED_ERROR = 1045
ER_PARSE_ERROR = 1064
ER_UNKNOWN_COM_ERROR = 1047
ER_UNKNOWN_SYSTEM_VARIABLE = 1193
ER_SOURCE_FATAL_ERROR_READING_BINLOG = 1236
ER_MALFORMED_PACKET = 1835

MAX_CHUNK = 0xFFFFFF
UTF8MB4_0900_AI_CI = 255
BASE_TIMESTAMP = 1_714_000_000


# ------------------------------------------------------------------------------ packets


def frame(payload: bytes, seq: int) -> tuple[bytes, int]:
    """`length u24 | sequence u8 | payload`, split into 0xFFFFFF-byte chunks (a full chunk
    is followed by another, possibly empty). Returns the bytes and the next sequence id."""
    out = bytearray()
    start = 0
    while True:
        chunk = payload[start : start + MAX_CHUNK]
        out += len(chunk).to_bytes(3, "little") + bytes([seq & 0xFF]) + chunk
        seq = (seq + 1) & 0xFF
        start += len(chunk)
        if len(chunk) < MAX_CHUNK:
            return bytes(out), seq


def read_lenenc(buf: bytes, pos: int) -> tuple[int, int]:
    first = buf[pos]
    if first < 0xFB:
        return first, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}[first]
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


def ok_payload(*, header: int = 0x00, status: int = 0x0002, warnings: int = 0) -> bytes:
    """OK packet (CLIENT_PROTOCOL_41): header | affected lenenc | last id lenenc | status u16 |
    warnings u16. With header 0xFE it is the result-set terminator under DEPRECATE_EOF."""
    return bytes([header]) + ev.lenenc(0) + ev.lenenc(0) + ev.u16(status) + ev.u16(warnings)


def eof_payload(status: int = 0x0002, warnings: int = 0) -> bytes:
    return b"\xfe" + ev.u16(warnings) + ev.u16(status)


def err_payload(code: int, sqlstate: str, message: str) -> bytes:
    return b"\xff" + ev.u16(code) + b"#" + sqlstate.encode("ascii") + message.encode("utf-8")


def column_definition(
    name: str, *, type_code: int = 0xFD, charset: int = UTF8MB4_0900_AI_CI, length: int = 1024
) -> bytes:
    """ColumnDefinition41: catalog, schema, table, org_table, name, org_name (lenenc strings),
    0x0c, charset u16, length u32, type u8, flags u16, decimals u8, 2 filler bytes."""
    texts = ("def", "", "", "", name, "")
    return (
        b"".join(ev.lenenc_str(t) for t in texts)
        + b"\x0c"
        + struct.pack("<HIBHB", charset, length, type_code, 0, 0)
        + b"\x00\x00"
    )


def result_set(
    columns: Sequence[str], rows: Sequence[Sequence[object]], deprecate_eof: bool
) -> list[bytes]:
    """The payloads of a text-protocol result set."""
    out = [ev.lenenc(len(columns))] + [column_definition(c) for c in columns]
    if not deprecate_eof:
        out.append(eof_payload())
    for row in rows:
        out.append(b"".join(b"\xfb" if v is None else ev.lenenc_str(str(v)) for v in row))
    out.append(ok_payload(header=0xFE) if deprecate_eof else eof_payload())
    return out


# ------------------------------------------------------------------------------ auth


def caching_sha2_scramble(password: bytes, scramble: bytes) -> bytes:
    """What the client must send for `scramble`: SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) +
    scramble) (sql/auth/sha2_password_common.cc, Generate_scramble)."""
    if not password:
        return b""
    stage1 = hashlib.sha256(password).digest()
    stage2 = hashlib.sha256(stage1).digest()
    mask = hashlib.sha256(stage2 + scramble).digest()
    return bytes(a ^ b for a, b in zip(stage1, mask, strict=True))


@functools.cache
def server_rsa_key() -> rsa.RSAPrivateKey:
    """The server's caching_sha2_password_private_key (2048-bit, as MySQL generates)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def rsa_decrypt_password(key: rsa.RSAPrivateKey, blob: bytes, scramble: bytes) -> bytes | None:
    """The server side of the RSA exchange: OAEP(SHA1) decrypt, XOR with the scramble
    repeated, strip the terminating NUL. None when it does not decrypt or lacks the NUL."""
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    try:
        plain = key.decrypt(blob, oaep)
    except ValueError:
        return None
    plain = bytes(b ^ scramble[i % len(scramble)] for i, b in enumerate(plain))
    if not plain.endswith(b"\0"):
        return None
    return plain[:-1]


def _make_scramble() -> bytes:
    # generate_user_salt: printable 7-bit characters, never NUL.
    return bytes(33 + b % 94 for b in os.urandom(20))


def self_signed_tls(directory: Path) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mysql8-peer")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=7))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server-cert.pem", directory / "server-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_path, key_path)
    return ctx


# ------------------------------------------------------------------------------ GTID text


def gtid_text(executed: dict[str, set[int]], separator: str = ",\n") -> str:
    """A GTID set as MySQL prints it: UUIDs in ascending order, `uuid:a-b:c`, entries
    separated by ",\\n" (Gtid_set::to_string with the default string format)."""
    entries = []
    for uuid in sorted(executed, key=lambda u: UUID(u).bytes):
        gnos = sorted(executed[uuid])
        if not gnos:
            continue
        ranges: list[str] = []
        start = prev = gnos[0]
        for gno in [*gnos[1:], None]:
            if gno is not None and gno == prev + 1:
                prev = gno
                continue
            ranges.append(f"{start}-{prev}" if prev > start else str(start))
            if gno is not None:
                start = prev = gno
        entries.append(f"{uuid}:{':'.join(ranges)}")
    return separator.join(entries)


def parse_gtid_text(text: str) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for entry in filter(None, (e.strip() for e in text.replace("\n", "").split(","))):
        uuid, *ranges = entry.split(":")
        bucket = out.setdefault(str(UUID(uuid)), set())
        for r in ranges:
            lo, _, hi = r.partition("-")
            bucket.update(range(int(lo), int(hi or lo) + 1))
    return out


# ------------------------------------------------------------------------------ tables


NUMERIC_KINDS = frozenset({"int", "bigint", "decimal"})


@dataclass(frozen=True)
class ColumnDef:
    """A column of a scripted table. Kinds: int (INT), bigint (BIGINT), varchar
    (VARCHAR(40) utf8mb4: 160 bytes, 1-byte length), decimal (DECIMAL(10,2))."""

    name: str
    kind: Literal["int", "bigint", "varchar", "decimal"]
    nullable: bool = True

    @property
    def table_map_column(self) -> ev.Col:
        if self.kind == "int":
            return ev.Col(ev.T_LONG, b"", self.nullable)
        if self.kind == "bigint":
            return ev.Col(ev.T_LONGLONG, b"", self.nullable)
        if self.kind == "varchar":
            return ev.Col(ev.T_VARCHAR, ev.u16(160), self.nullable)  # max bytes, LE
        return ev.Col(ev.T_NEWDECIMAL, bytes([10, 2]), self.nullable)  # precision, scale

    @property
    def sql_types(self) -> tuple[str, str]:
        """(DATA_TYPE, COLUMN_TYPE) as information_schema.COLUMNS shows them."""
        return {
            "int": ("int", "int"),
            "bigint": ("bigint", "bigint"),
            "varchar": ("varchar", "varchar(40)"),
            "decimal": ("decimal", "decimal(10,2)"),
        }[self.kind]

    def encode(self, value: object) -> bytes | None:
        if value is None:
            assert self.nullable, f"{self.name} is NOT NULL"
            return None
        if self.kind == "int":
            return ev.int_le(int(value), 4)  # type: ignore[call-overload]
        if self.kind == "bigint":
            return ev.int_le(int(value), 8)  # type: ignore[call-overload]
        if self.kind == "varchar":
            return ev.varchar(str(value), 160)
        return ev.decimal_bin(str(value), 10, 2)


@dataclass(frozen=True)
class Table:
    table_id: int
    schema: str
    name: str
    columns: tuple[ColumnDef, ...]
    primary_key: tuple[int, ...] = (0,)

    def table_map_body(self) -> bytes:
        """TABLE_MAP with binlog_row_metadata=FULL: SIGNEDNESS (numeric columns, all signed
        here), DEFAULT_CHARSET (if any character column), COLUMN_NAME, SIMPLE_PRIMARY_KEY, in
        the order Table_map_log_event::init_metadata_fields writes them."""
        numeric = [c for c in self.columns if c.kind in NUMERIC_KINDS]
        optional = ev.opt_signedness([False] * len(numeric)) if numeric else b""
        if any(c.kind == "varchar" for c in self.columns):
            optional += ev.opt_default_charset(UTF8MB4_0900_AI_CI)
        optional += ev.opt_column_names([c.name for c in self.columns])
        optional += ev.opt_simple_primary_key(self.primary_key)
        return ev.table_map(
            self.table_id,
            self.schema,
            self.name,
            [c.table_map_column for c in self.columns],
            optional=optional,
        )

    def image(self, row: dict[str, object]) -> bytes:
        assert set(row) == {c.name for c in self.columns}, (row, self.name)
        return ev.row_image([c.encode(row[c.name]) for c in self.columns])


@dataclass(frozen=True)
class Insert:
    table: Table
    rows: Sequence[dict[str, object]]


@dataclass(frozen=True)
class Update:
    table: Table
    rows: Sequence[tuple[dict[str, object], dict[str, object]]]


@dataclass(frozen=True)
class Delete:
    table: Table
    rows: Sequence[dict[str, object]]


Statement = Insert | Update | Delete


@dataclass(frozen=True)
class Dml:
    """A row-based transaction: GTID, QUERY BEGIN, per statement TABLE_MAP + ROWS event(s)
    (split every `rows_per_event` rows, STMT_END_F on the last), XID. `compressed` wraps all
    but the GTID in one zstd TRANSACTION_PAYLOAD, as binlog_transaction_compression=ON does."""

    statements: Sequence[Statement]
    compressed: bool = False
    rows_per_event: int | None = None


@dataclass(frozen=True)
class Ddl:
    """A DDL transaction: GTID then one QUERY."""

    sql: str
    schema: str = ""


# ------------------------------------------------------------------------------ the binlog


@dataclass
class ExpectedChange:
    """A row change as replicad should publish it, with where it came from."""

    op: str
    db: str
    table: str
    before: dict[str, object] | None
    after: dict[str, object] | None
    gtid: str
    file: str
    event_pos: int  # offset of the ROWS event, or of the TRANSACTION_PAYLOAD holding it
    rows_event: int  # index of the ROWS event within its transaction
    row: int  # index of the row within its ROWS event


@dataclass
class LoggedEvent:
    file: str
    pos: int
    data: bytes
    gtid: Gtid | None = None  # GTID events only
    txn: LoggedTransaction | None = None
    index: int = 0  # within the transaction; 0 is its GTID event

    @property
    def end(self) -> int:
        return self.pos + len(self.data)

    @property
    def type_code(self) -> int:
        return self.data[4]


@dataclass
class LoggedTransaction:
    uuid: str
    gno: int
    file: str
    kind: str
    events: list[LoggedEvent] = field(default_factory=list)
    changes: list[ExpectedChange] = field(default_factory=list)

    @property
    def gtid(self) -> str:
        return f"{self.uuid}:{self.gno}"

    @property
    def start(self) -> int:
        return self.events[0].pos

    @property
    def end(self) -> int:
        return self.events[-1].end


@dataclass
class BinlogFile:
    name: str
    previous: dict[str, set[int]]
    events: list[LoggedEvent] = field(default_factory=list)  # FDE first
    closed: bool = False

    @property
    def size(self) -> int:
        return self.events[-1].end if self.events else 4

    @property
    def fde(self) -> LoggedEvent:
        return self.events[0]

    def first_gtid(self) -> Gtid | None:
        return next((e.gtid for e in self.events if e.gtid is not None), None)

    def bytes(self) -> bytes:
        return ev.BINLOG_MAGIC + b"".join(e.data for e in self.events)


_BEGIN_STATUS = (
    ev.q_flags2(0)
    + ev.q_sql_mode(0x4800_0000)
    + ev.q_catalog_nz("std")
    + ev.q_auto_increment(1, 1)
    + ev.q_charset(UTF8MB4_0900_AI_CI, UTF8MB4_0900_AI_CI, UTF8MB4_0900_AI_CI)
)


def _ddl_status(schema: str, xid: int) -> bytes:
    return (
        _BEGIN_STATUS
        + ev.q_updated_db_names([schema] if schema else [])
        + ev.q_ddl_logged_with_xid(xid)
        + ev.q_default_collation_for_utf8mb4(UTF8MB4_0900_AI_CI)
        + ev.q_sql_require_primary_key(0)
        + ev.q_default_table_encryption(0)
    )


class Binlog:
    """The primary's binary log: files of placed events (offsets, log_pos and CRC as MySQL
    writes them), the executed and purged GTID sets, and the expected row changes."""

    def __init__(
        self,
        *,
        previous: str = f"{OTHER_UUID}:1-5",
        purged: str | None = None,
        uuid: str = SERVER_UUID,
        first_file: str = "binlog.000001",
    ) -> None:
        self.uuid = uuid
        self.executed = parse_gtid_text(previous)
        # A fresh primary provisioned from a backup: what came before its first binlog is
        # gtid_purged (SET GLOBAL gtid_purged), unless told otherwise.
        self.purged = parse_gtid_text(previous if purged is None else purged)
        self.files: list[BinlogFile] = []
        self.transactions: list[LoggedTransaction] = []
        self.tables: dict[tuple[str, str], Table] = {}  # what information_schema describes
        self._clock = BASE_TIMESTAMP
        self._xid = 100
        self._sequence = 0
        self._open_file(first_file)

    # -- structure

    @property
    def current(self) -> BinlogFile:
        return self.files[-1]

    def executed_text(self, separator: str = ",\n") -> str:
        return gtid_text(self.executed, separator)

    def purged_text(self, separator: str = ",\n") -> str:
        return gtid_text(self.purged, separator)

    def executed_set(self) -> GtidSet:
        return GtidSet.parse(self.executed_text(","))

    def file(self, name: str) -> BinlogFile | None:
        return next((f for f in self.files if f.name == name), None)

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _place(
        self,
        type_code: int,
        body: bytes,
        *,
        flags: int = 0,
        timestamp: int | None = None,
        gtid: Gtid | None = None,
    ) -> LoggedEvent:
        f = self.current
        pos = f.size
        size = ev.HEADER_LEN + len(body) + 4
        data = ev.event(
            type_code,
            body,
            timestamp=self._clock if timestamp is None else timestamp,
            server_id=SERVER_ID,
            log_pos=pos + size,
            flags=flags,
        )
        logged = LoggedEvent(f.name, pos, data, gtid)
        f.events.append(logged)
        return logged

    def _open_file(self, name: str) -> None:
        f = BinlogFile(name, {u: set(g) for u, g in self.executed.items()})
        self.files.append(f)
        fde = ev.fde_mysql8(True, MYSQL_VERSION, created=self._tick(), in_use=True)
        f.events.append(LoggedEvent(name, 4, fde))
        entries = [
            (u, _intervals(g))
            for u, g in sorted(f.previous.items(), key=lambda kv: UUID(kv[0]).bytes)
        ]
        self._place(ev.PREVIOUS_GTIDS, ev.previous_gtids_body(entries))

    def rotate(self) -> str:
        """ROTATE to the next file, as FLUSH BINARY LOGS does: the old file ends with a ROTATE
        and loses its in-use flag; the new one starts with FDE + PREVIOUS_GTIDS."""
        old = self.current
        stem, number = old.name.rsplit(".", 1)
        name = f"{stem}.{int(number) + 1:0{len(number)}d}"
        self._tick()
        self._place(ev.ROTATE, ev.u64(4) + name.encode())
        fde = bytearray(old.fde.data)
        fde[17] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF  # the CRC was computed with it clear
        old.fde.data = bytes(fde)
        old.closed = True
        self._open_file(name)
        return name

    # -- transactions

    def add(self, spec: Dml | Ddl, *, uuid: str | None = None) -> LoggedTransaction:
        uuid = uuid or self.uuid
        gno = max(self.executed.get(uuid) or {0}) + 1
        ts = self._tick()
        self._sequence += 1
        f = self.current
        txn = LoggedTransaction(uuid, gno, f.name, "ddl" if isinstance(spec, Ddl) else "dml")
        # Bodies first: sizes do not depend on offsets, and the GTID event needs the total.
        parts: list[tuple[int, bytes]] = []
        rows_plan: list[tuple[int, Statement, list[Any]]] = []  # (part index, stmt, rows)
        if isinstance(spec, Ddl):
            self._xid += 1
            parts.append(
                (
                    ev.QUERY,
                    ev.query_body(
                        spec.sql, schema=spec.schema, status=_ddl_status(spec.schema, self._xid)
                    ),
                )
            )
        else:
            inner: list[tuple[int, bytes]] = [
                (ev.QUERY, ev.query_body("BEGIN", status=_BEGIN_STATUS))
            ]
            for stmt in spec.statements:
                self.tables[(stmt.table.schema, stmt.table.name)] = stmt.table
                rows = list(stmt.rows)
                step = spec.rows_per_event or max(len(rows), 1)
                chunks = [rows[i : i + step] for i in range(0, len(rows), step)] or [[]]
                inner.append((ev.TABLE_MAP, stmt.table.table_map_body()))
                for n, chunk in enumerate(chunks):
                    flags = ev.STMT_END_F if n == len(chunks) - 1 else 0
                    rows_plan.append((len(inner), stmt, chunk))
                    inner.append(_rows_event(stmt, chunk, flags))
            self._xid += 1
            inner.append((ev.XID, ev.xid_body(self._xid)))
            if spec.compressed:
                raw = b"".join(
                    ev.event(t, b, checksum=False, timestamp=ts, server_id=SERVER_ID, log_pos=0)
                    for t, b in inner
                )
                parts.append((ev.TRANSACTION_PAYLOAD, ev.transaction_payload_body(raw)))
                rows_plan = [(0, stmt, chunk) for _, stmt, chunk in rows_plan]
            else:
                parts = inner
        rest = sum(ev.HEADER_LEN + len(b) + 4 for _, b in parts)
        gtid_body = self._gtid_body(uuid, gno, ts, rest, ddl=isinstance(spec, Ddl))
        gtid = Gtid(UUID(uuid), "", gno)
        first = self._place(ev.GTID, gtid_body, gtid=gtid, timestamp=ts)
        placed = [first] + [self._place(t, b, timestamp=ts) for t, b in parts]
        for index, logged in enumerate(placed):
            logged.txn, logged.index = txn, index
        txn.events = placed
        for rows_event, (part, stmt, chunk) in enumerate(rows_plan):
            holder = placed[1 + part]
            for row_index, row in enumerate(chunk):
                before, after = _images(stmt, row)
                txn.changes.append(
                    ExpectedChange(
                        _op(stmt),
                        stmt.table.schema,
                        stmt.table.name,
                        before,
                        after,
                        txn.gtid,
                        f.name,
                        holder.pos,
                        rows_event,
                        row_index,
                    )
                )
        self.executed.setdefault(uuid, set()).add(gno)
        self.transactions.append(txn)
        return txn

    def _gtid_body(self, uuid: str, gno: int, ts: int, rest: int, *, ddl: bool) -> bytes:
        def body(length: int) -> bytes:
            return ev.gtid_body(
                uuid,
                gno,
                flags=1 if ddl else 0,
                last_committed=self._sequence - 1,
                sequence_number=self._sequence,
                immediate_commit_ts=ts * 1_000_000,
                transaction_length=length,
                immediate_server_version=80036,
            )

        # transaction_length counts the GTID event itself, whose size depends on it.
        length = rest
        for _ in range(4):
            length = rest + ev.HEADER_LEN + len(body(length)) + 4
        return body(length)

    def expected_changes(self, after: GtidSet | None = None) -> list[ExpectedChange]:
        """Every row change in commit order, leaving out transactions in `after`."""
        out = []
        for txn in self.transactions:
            if after is not None and Gtid(UUID(txn.uuid), "", txn.gno) in after:
                continue
            out.extend(txn.changes)
        return out


def _intervals(gnos: Iterable[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for gno in sorted(gnos):
        if out and out[-1][1] == gno:
            out[-1] = (out[-1][0], gno + 1)
        else:
            out.append((gno, gno + 1))
    return out


def _op(stmt: Statement) -> str:
    return "c" if isinstance(stmt, Insert) else "u" if isinstance(stmt, Update) else "d"


def _images(stmt: Statement, row: Any) -> tuple[dict | None, dict | None]:
    if isinstance(stmt, Insert):
        return None, dict(row)
    if isinstance(stmt, Delete):
        return dict(row), None
    before, after = row
    return dict(before), dict(after)


def _rows_event(stmt: Statement, rows: list[Any], flags: int) -> tuple[int, bytes]:
    table = stmt.table
    ncols = len(table.columns)
    if isinstance(stmt, Update):
        images = b"".join(table.image(b) + table.image(a) for b, a in rows)
        return ev.UPDATE_ROWS, ev.rows_v2(
            ev.UPDATE_ROWS, table.table_id, ncols, images, flags=flags
        )
    images = b"".join(table.image(r) for r in rows)
    code = ev.WRITE_ROWS if isinstance(stmt, Insert) else ev.DELETE_ROWS
    return code, ev.rows_v2(code, table.table_id, ncols, images, flags=flags)


# ------------------------------------------------------------------------------ records


@dataclass
class ConnectionRecord:
    id: int
    raw_in: bytearray = field(default_factory=bytearray, repr=False)  # off the wire, pre-TLS
    tls: bool = False
    user: str | None = None
    client_capabilities: int = 0
    client_plugin: str = ""
    connect_attrs: dict[str, str] = field(default_factory=dict)
    scramble_ok: bool = False  # the handshake response matched caching_sha2's scramble
    auth_path: str | None = None  # "fast", "tls" or "rsa"
    public_key_requested: bool = False
    password_received: bytes | None = field(default=None, repr=False)
    authenticated: bool = False
    queries: list[str] = field(default_factory=list)
    user_vars: dict[str, str] = field(default_factory=dict)
    registered: dict[str, object] | None = None
    closed: bool = False


@dataclass
class Cut:
    """What to do to one dump connection. Either `after_transactions` (after that many
    transactions were sent completely), or `gno` + `event` (before that event of the
    transaction, 0 being its GTID event; with `fraction`, first send that share of the event's
    packet). `action`: "reset" (RST), "close" (FIN) or "stall" (stay open, send nothing)."""

    gno: int | None = None
    event: int = 0
    fraction: float | None = None
    after_transactions: int | None = None
    action: Literal["reset", "close", "stall"] = "reset"


@dataclass
class DumpRequest:
    connection: int
    command: str  # "COM_BINLOG_DUMP_GTID" | "COM_BINLOG_DUMP"
    flags: int
    server_id: int
    file: str
    pos: int
    gtid_set: GtidSet | None
    raw: bytes = field(repr=False)
    error: str | None = None  # the ERR 1236 message sent instead of events
    cut: Cut | None = None
    cut_at: tuple[str, int, int] | None = None  # (gtid, event index, bytes of it sent)
    heartbeats: list[tuple[int, str, int]] = field(default_factory=list)  # (version, file, pos)
    sent: list[tuple[str, int, int]] = field(default_factory=list)  # (file, pos, type) sent
    transactions_sent: list[str] = field(default_factory=list)  # GTIDs sent completely
    ended: str | None = None  # how the stream ended: "client", "cut", "killed", "error"


class PeerProtocolError(Exception):
    """The client broke the protocol (the peer records it and drops the connection)."""


class _PacketIO:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rec: ConnectionRecord
    ) -> None:
        self.reader, self.writer, self.rec = reader, writer, rec
        self.seq = 0

    async def _exact(self, n: int) -> bytes:
        data = await self.reader.readexactly(n)
        if not self.rec.tls:
            self.rec.raw_in += data
        return data

    async def read(self) -> bytes:
        payload = bytearray()
        while True:
            head = await self._exact(4)
            length, seq = int.from_bytes(head[:3], "little"), head[3]
            if seq != self.seq:
                raise PeerProtocolError(f"client packet sequence {seq}, expected {self.seq}")
            self.seq = (seq + 1) & 0xFF
            payload += await self._exact(length)
            if length < MAX_CHUNK:
                return bytes(payload)

    def packet(self, payload: bytes) -> bytes:
        data, self.seq = frame(payload, self.seq)
        return data

    async def write(self, payload: bytes) -> None:
        self.writer.write(self.packet(payload))
        await self.writer.drain()

    async def start_tls(self, context: ssl.SSLContext) -> None:
        """StreamWriter.start_tls, except that the client's first TLS bytes may already sit
        in the reader's buffer (a client sends SSLRequest and ClientHello back to back; a
        busy peer reads both at once). asyncio would drop them and the handshake would hang,
        so they are handed to the TLS protocol as if they had just arrived."""
        early = bytes(self.reader._buffer)  # private, but this is a test double
        self.reader._buffer.clear()
        transport = self.writer.transport
        upgrade = asyncio.ensure_future(self.writer.start_tls(context))
        if early:
            while not isinstance(transport.get_protocol(), asyncio.sslproto.SSLProtocol):
                await asyncio.sleep(0)
            # queued after the TLS protocol's connection_made, which start_tls scheduled
            asyncio.get_running_loop().call_soon(_feed_tls, transport.get_protocol(), early)
        await upgrade
        self.rec.tls = True


def _feed_tls(protocol: Any, data: bytes) -> None:
    view = memoryview(data)
    while view:
        buffer = protocol.get_buffer(len(view))
        n = min(len(buffer), len(view))
        buffer[:n] = view[:n]
        protocol.buffer_updated(n)
        view = view[n:]


# ------------------------------------------------------------------------------ the peer


class MySQL8Peer:
    """A MySQL 8.0.36 primary serving `binlog` on 127.0.0.1:`port` (see the module doc)."""

    def __init__(
        self,
        binlog: Binlog | None = None,
        *,
        user: str = "repl",
        password: str = "repl-Pässwörd",
        tls: bool = False,
        fast_auth: bool = False,
        heartbeat_version: int | None = None,
    ) -> None:
        self.binlog = binlog if binlog is not None else Binlog()
        self.user = user
        self.password = password
        self.fast_auth = fast_auth
        # None: as MySQL does, v2 only when the dump asked for it; 1 or 2: always that one.
        self.heartbeat_version = heartbeat_version
        self.cuts: list[Cut | None] = []
        # Answer every dump with ERR 1236 and this text (Binlog_sender::set_fatal_error).
        self.dump_error: str | None = None
        self.variables: dict[str, str] = {
            "version": MYSQL_VERSION,
            "version_comment": "MySQL Community Server - GPL",
            "server_id": str(SERVER_ID),
            "server_uuid": self.binlog.uuid,
            "log_bin": "ON",
            "binlog_format": "ROW",
            "binlog_row_image": "FULL",
            "binlog_row_metadata": "FULL",
            "binlog_row_value_options": "",
            "binlog_checksum": "CRC32",
            "binlog_transaction_compression": "ON",
            "gtid_mode": "ON",
            "enforce_gtid_consistency": "ON",
            "log_replica_updates": "ON",
            "binlog_expire_logs_seconds": "2592000",
            "max_allowed_packet": "67108864",
        }
        self.connections: list[ConnectionRecord] = []
        self.dumps: list[DumpRequest] = []
        self.rsa_key = server_rsa_key()
        self._tmp = tempfile.TemporaryDirectory(prefix="mysql8-peer-")
        self._ssl = self_signed_tls(Path(self._tmp.name)) if tls else None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="mysql8-peer", daemon=True)
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._dumpers: dict[str, asyncio.StreamWriter] = {}
        self._tick_event: asyncio.Event | None = None
        self._cache: set[str] = set()
        self.port = 0

    # -- lifecycle (test thread)

    def __enter__(self) -> MySQL8Peer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the MySQL 8 peer did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._tmp.cleanup()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._tick_event = asyncio.Event()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        # Let the connection tasks see their sockets go.
        for _ in range(50):
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if not tasks:
                break
            await asyncio.sleep(0.02)

    def call(self, fn: Callable[[], Any], timeout: float = 10) -> Any:
        """Run `fn` in the peer's loop thread (where the binlog lives) and return its result."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def append(self, spec: Dml | Ddl) -> LoggedTransaction:
        """Commit a transaction on the running primary; dump threads send it at once."""

        def add() -> LoggedTransaction:
            txn = self.binlog.add(spec)
            self._wake()
            return txn

        return self.call(add)

    def rotate(self) -> str:
        def rotate() -> str:
            name = self.binlog.rotate()
            self._wake()
            return name

        return self.call(rotate)

    def _wake(self) -> None:
        old, self._tick_event = self._tick_event, asyncio.Event()
        assert old is not None
        old.set()

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.02)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    # -- one connection

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        rec = ConnectionRecord(len(self.connections) + 1)
        self.connections.append(rec)
        self._writers.add(writer)
        io = _PacketIO(reader, writer, rec)
        try:
            if not await self._login(io, rec):
                return
            while True:
                io.seq = 0
                payload = await io.read()
                if not payload:
                    raise PeerProtocolError("empty command packet")
                command = payload[0]
                if command == COM_QUIT:
                    return
                if command == COM_QUERY:
                    await self._query(io, rec, payload[1:].decode("utf-8"))
                elif command == COM_PING:
                    await io.write(ok_payload())
                elif command == COM_REGISTER_SLAVE:
                    rec.registered = _parse_register(payload)
                    await io.write(ok_payload())
                elif command in (COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID):
                    await self._dump(io, rec, payload)
                    return  # a dump ends the session
                else:
                    await io.write(err_payload(ER_UNKNOWN_COM_ERROR, "08S01", "Unknown command"))
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, PeerProtocolError):
            pass
        finally:
            rec.closed = True
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _login(self, io: _PacketIO, rec: ConnectionRecord) -> bool:
        scramble = _make_scramble()
        caps = MYSQL8_CAPABILITIES if self._ssl is not None else MYSQL8_CAPABILITIES & ~CLIENT_SSL
        greeting = (
            b"\x0a"
            + MYSQL_VERSION.encode()
            + b"\0"
            + ev.u32(rec.id)
            + scramble[:8]
            + b"\0"
            + struct.pack("<HBHH", caps & 0xFFFF, UTF8MB4_0900_AI_CI, 0x0002, caps >> 16)
            + bytes([len(scramble) + 1])
            + bytes(10)
            + scramble[8:]
            + b"\0"
            + b"caching_sha2_password\0"
        )
        await io.write(greeting)
        payload = await io.read()
        if len(payload) == 32 and struct.unpack_from("<I", payload)[0] & CLIENT_SSL:
            if self._ssl is None:
                raise PeerProtocolError("SSLRequest to a server without CLIENT_SSL")
            await io.start_tls(self._ssl)
            payload = await io.read()
        response = _parse_handshake_response(payload)
        rec.user = response["user"]
        rec.client_capabilities = response["caps"]
        rec.client_plugin = response["plugin"]
        rec.connect_attrs = response["attrs"]
        auth = response["auth"]
        if rec.client_plugin != "caching_sha2_password":
            # Authentication method switch to the account's plugin, with a fresh scramble.
            scramble = _make_scramble()
            await io.write(b"\xfecaching_sha2_password\0" + scramble + b"\0")
            auth = await io.read()
        password = self.password.encode()
        rec.scramble_ok = auth == caching_sha2_scramble(password, scramble)
        if self.fast_auth and rec.scramble_ok and rec.user in self._cache:
            rec.auth_path = "fast"
            await io.write(b"\x01\x03")
            return await self._auth_result(io, rec, True)
        await io.write(b"\x01\x04")  # perform_full_authentication
        data = await io.read()
        if rec.tls:
            rec.auth_path = "tls"
            received = data[:-1] if data.endswith(b"\0") else None
        else:
            rec.auth_path = "rsa"
            if data == b"\x02":
                rec.public_key_requested = True
                await io.write(b"\x01" + public_key_pem(self.rsa_key))
                data = await io.read()
            received = rsa_decrypt_password(self.rsa_key, data, scramble)
        rec.password_received = received
        ok = rec.user == self.user and received == password
        return await self._auth_result(io, rec, ok)

    async def _auth_result(self, io: _PacketIO, rec: ConnectionRecord, ok: bool) -> bool:
        if ok:
            rec.authenticated = True
            self._cache.add(rec.user or "")
            await io.write(ok_payload())
            return True
        await io.write(
            err_payload(
                ER_ACCESS_DENIED_ERROR,
                "28000",
                f"Access denied for user '{rec.user}'@'localhost' (using password: YES)",
            )
        )
        return False

    # -- queries

    def _variable(self, name: str) -> str | None:
        name = name.lower()
        if name == "gtid_executed":
            return self.binlog.executed_text()
        if name == "gtid_purged":
            return self.binlog.purged_text()
        return self.variables.get(name)

    async def _query(self, io: _PacketIO, rec: ConnectionRecord, sql: str) -> None:
        rec.queries.append(sql)
        text = sql.strip().rstrip(";").strip()
        deprecate_eof = bool(rec.client_capabilities & CLIENT_DEPRECATE_EOF)

        async def rows(columns: Sequence[str], values: Sequence[Sequence[object]]) -> None:
            for payload in result_set(columns, values, deprecate_eof):
                await io.write(payload)

        if re.match(r"(?is)^SET\s", text):
            for name, quoted, bare in re.findall(r"@(\w+)\s*=\s*(?:'([^']*)'|([-\w.]+))", text):
                rec.user_vars[name.lower()] = quoted if quoted or not bare else bare
            await io.write(ok_payload())
            return
        if match := re.fullmatch(
            r"(?is)SELECT\s+(.+?)\s+FROM\s+information_schema\.(\w+)(.*)", text
        ):
            columns, values = self._information_schema(*match.groups())
            await rows(columns, values)
            return
        if match := re.fullmatch(r"(?is)SELECT\s+(.+)", text):
            names = [n.strip() for n in match.group(1).split(",")]
            values = []
            for expr in names:
                var = re.fullmatch(r"(?i)@@(?:global\.|session\.)?(\w+)", expr)
                value = self._variable(var.group(1)) if var else None
                if value is None:
                    await io.write(
                        err_payload(
                            ER_UNKNOWN_SYSTEM_VARIABLE, "HY000", f"Unknown system variable '{expr}'"
                        )
                    )
                    return
                values.append(value)
            await rows(names, [values])
            return
        if match := re.fullmatch(
            r"(?is)SHOW\s+(?:GLOBAL\s+|SESSION\s+)?VARIABLES\s+LIKE\s+'([^']*)'", text
        ):
            pattern = re.compile(
                "".join(
                    ".*" if c == "%" else "." if c == "_" else re.escape(c) for c in match.group(1)
                ),
                re.IGNORECASE,
            )
            names = sorted({*self.variables, "gtid_executed", "gtid_purged"})
            found = [(n, self._variable(n)) for n in names if pattern.fullmatch(n)]
            await rows(["Variable_name", "Value"], found)
            return
        if re.fullmatch(r"(?is)SHOW\s+(MASTER|BINARY\s+LOG)\s+STATUS", text):
            f = self.binlog.current
            await rows(
                ["File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB", "Executed_Gtid_Set"],
                [[f.name, f.size, "", "", self.binlog.executed_text()]],
            )
            return
        if re.fullmatch(r"(?is)SHOW\s+(SLAVE\s+HOSTS|REPLICAS)", text):
            # Replicas registered by a live connection (unregistered when it ends).
            replica = "Replica" if text.upper().endswith("REPLICAS") else "Slave"
            source = "Source" if replica == "Replica" else "Master"
            registered = [
                [
                    r.registered["server_id"],
                    r.registered["host"],
                    r.registered["port"],
                    r.registered["master_id"] or SERVER_ID,
                    r.user_vars.get("replica_uuid") or r.user_vars.get("slave_uuid") or "",
                ]
                for r in self.connections
                if r.registered is not None and not r.closed
            ]
            await rows(["Server_id", "Host", "Port", f"{source}_id", f"{replica}_UUID"], registered)
            return
        if re.fullmatch(r"(?is)SHOW\s+(BINARY|MASTER)\s+LOGS", text):
            await rows(
                ["Log_name", "File_size", "Encrypted"],
                [[f.name, f.size, "No"] for f in self.binlog.files],
            )
            return
        await io.write(
            err_payload(
                ER_PARSE_ERROR, "42000", "You have an error in your SQL syntax (mysql8-peer)"
            )
        )

    def _information_schema(
        self, select: str, table: str, rest: str
    ) -> tuple[list[str], list[list[object]]]:
        """COLUMNS (optionally joined with TABLES), TABLES and STATISTICS for the tables the
        binlog has rows for. The select list is taken by column name (an `alias.` prefix is
        dropped); WHERE clauses are not evaluated beyond `INDEX_NAME = 'PRIMARY'`, which is
        the only index these tables have."""
        names = [e.strip().split(".")[-1].split()[-1] for e in select.split(",")]
        records: list[dict[str, object]] = []
        for (schema, name), t in sorted(self.binlog.tables.items()):
            base = {
                "TABLE_CATALOG": "def",
                "TABLE_SCHEMA": schema,
                "TABLE_NAME": name,
                "TABLE_TYPE": "BASE TABLE",
                "ENGINE": "InnoDB",
            }
            if table.upper() == "TABLES":
                records.append(base)
            elif table.upper() == "COLUMNS":
                for ordinal, c in enumerate(t.columns, 1):
                    data_type, column_type = c.sql_types
                    records.append(
                        base
                        | {
                            "COLUMN_NAME": c.name,
                            "ORDINAL_POSITION": ordinal,
                            "DATA_TYPE": data_type,
                            "COLUMN_TYPE": column_type,
                            "IS_NULLABLE": "YES" if c.nullable else "NO",
                            "COLUMN_KEY": "PRI" if ordinal - 1 in t.primary_key else "",
                            "GENERATION_EXPRESSION": "",
                            "EXTRA": "",
                            "CHARACTER_SET_NAME": "utf8mb4" if c.kind == "varchar" else None,
                            "COLLATION_NAME": "utf8mb4_0900_ai_ci" if c.kind == "varchar" else None,
                        }
                    )
            elif table.upper() == "STATISTICS":
                for seq, index in enumerate(t.primary_key, 1):
                    records.append(
                        base
                        | {
                            "INDEX_NAME": "PRIMARY",
                            "NON_UNIQUE": 0,
                            "SEQ_IN_INDEX": seq,
                            "COLUMN_NAME": t.columns[index].name,
                        }
                    )
        return names, [[r.get(n.upper()) for n in names] for r in records]

    # -- the binlog dump

    async def _dump(self, io: _PacketIO, rec: ConnectionRecord, payload: bytes) -> None:
        req = _parse_dump(rec.id, payload)
        self.dumps.append(req)
        if req.error is not None:
            await io.write(err_payload(ER_MALFORMED_PACKET, "HY000", req.error))
            req.ended = "error"
            return
        key = rec.user_vars.get("replica_uuid") or rec.user_vars.get("slave_uuid")
        key = key or f"server_id:{req.server_id}"
        zombie = self._dumpers.get(key)
        if zombie is not None:
            zombie.transport.abort()  # kill_zombie_dump_threads
        self._dumpers[key] = io.writer
        req.cut = self.cuts.pop(0) if self.cuts else None
        eof = asyncio.ensure_future(io.reader.read(65536))
        try:
            start = self._dump_start(rec, req)
            if isinstance(start, str):
                req.error = start
                req.ended = "error"
                await io.write(err_payload(ER_SOURCE_FATAL_ERROR_READING_BINLOG, "HY000", start))
                return
            await self._stream(io, rec, req, eof, *start)
        except (ConnectionError, OSError):
            req.ended = req.ended or (
                "killed" if self._dumpers.get(key) is not io.writer else "client"
            )
        finally:
            eof.cancel()
            if self._dumpers.get(key) is io.writer:
                del self._dumpers[key]

    def _dump_start(self, rec: ConnectionRecord, req: DumpRequest) -> str | tuple[int, int]:
        """(file index, start offset), or the ERR 1236 message the server would send."""
        binlog = self.binlog
        if self.dump_error is not None:
            return self.dump_error
        checksum = rec.user_vars.get("source_binlog_checksum") or rec.user_vars.get(
            "master_binlog_checksum"
        )
        if checksum is None:
            return (
                "Replica can not handle replication events with the checksum that source "
                "is configured to log; the first event '' at 4, the last event read from "
                "'' at 4, the last byte read from '' at 4."
            )
        if req.gtid_set is not None and not req.file:
            replica = req.gtid_set
            purged = GtidSet.parse(binlog.purged_text(","))
            if not purged.issubset(replica):
                missing = gtid_text({u: g for u, g in binlog.purged.items()}, ",")
                return (
                    "Cannot replicate because the source purged required binary logs. Replicate "
                    "the missing transactions from elsewhere, or provision a new replica from "
                    "backup. Consider increasing the source's binary log expiration period. The "
                    f"GTID set sent by the replica is '{replica}', and the missing transactions "
                    f"are '{missing}'"
                )
            own = GtidSet({(UUID(binlog.uuid), ""): replica.intervals(binlog.uuid)})
            if not own.issubset(binlog.executed_set()):
                return (
                    "Slave has more GTIDs than the master has, using the master's SERVER_UUID. "
                    "This may indicate that the end of the binary log was truncated or that the "
                    "last binary log file was lost"
                )
            # find_first_log_not_in_gtid_set: the newest file whose PREVIOUS_GTIDS the replica
            # already has.
            for index in range(len(binlog.files) - 1, -1, -1):
                previous = GtidSet.parse(gtid_text(binlog.files[index].previous, ","))
                if previous.issubset(replica):
                    return index, 4
            return (
                "The replica is connecting using CHANGE REPLICATION SOURCE TO "
                "SOURCE_AUTO_POSITION = 1, but the source has purged binary logs containing "
                "GTIDs that the replica requires."
            )
        if not req.file:
            return 0, max(req.pos, 4)
        for index, f in enumerate(binlog.files):
            if f.name == req.file:
                if req.pos < 4:
                    return "Client requested source to start replication from position < 4"
                if req.pos > f.size:
                    return "Client requested source to start replication from position > file size"
                return index, req.pos
        return "Could not find first log file name in binary log index file"

    async def _stream(
        self,
        io: _PacketIO,
        rec: ConnectionRecord,
        req: DumpRequest,
        eof: asyncio.Future[bytes],
        index: int,
        start_pos: int,
    ) -> None:
        binlog = self.binlog
        gtids = req.gtid_set if req.command == "COM_BINLOG_DUMP_GTID" else None
        period_ns = int(
            rec.user_vars.get("source_heartbeat_period")
            or rec.user_vars.get("master_heartbeat_period")
            or 0
        )
        period = period_ns / 1e9 if period_ns > 0 else None
        version = self.heartbeat_version or (2 if req.flags & USE_HEARTBEAT_EVENT_V2 else 1)
        cut = req.cut

        async def send(data: bytes) -> None:
            io.writer.write(io.packet(b"\x00" + data))
            await io.writer.drain()
            req.sent.append((current.name, int.from_bytes(data[13:17], "little"), data[4]))

        async def heartbeat(pos: int) -> None:
            if version == 2:
                data = ev.event(
                    ev.HEARTBEAT_V2,
                    ev.heartbeat_v2_body(current.name, pos),
                    timestamp=0,
                    server_id=SERVER_ID,
                    log_pos=0,
                )
            else:
                data = ev.event(
                    ev.HEARTBEAT,
                    current.name.encode(),
                    timestamp=0,
                    server_id=SERVER_ID,
                    log_pos=pos & 0xFFFFFFFF,
                )
            await send(data)
            req.heartbeats.append((version, current.name, pos))

        async def do_cut(packet: bytes | None, where: tuple[str, int, int]) -> None:
            assert cut is not None
            req.cut_at = where
            if packet:
                io.writer.write(packet)
            await io.writer.drain()
            for _ in range(200):
                if io.writer.transport.get_write_buffer_size() == 0:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # let loopback deliver before the socket goes
            req.ended = "cut"
            if cut.action == "stall":
                await eof
            elif cut.action == "close":
                io.writer.close()
            else:
                sock = io.writer.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                io.writer.transport.abort()

        completed = 0
        while True:
            current = binlog.files[index]
            # Fake ROTATE: timestamp 0, log_pos 0, LOG_EVENT_ARTIFICIAL_F, CRC (the replica
            # said CRC32 before the FDE could).
            await send(
                ev.event(
                    ev.ROTATE,
                    ev.u64(start_pos) + current.name.encode(),
                    timestamp=0,
                    server_id=SERVER_ID,
                    log_pos=0,
                    flags=LOG_EVENT_ARTIFICIAL_F,
                )
            )
            first = current.first_gtid()
            clear = (gtids is not None and first is not None and first in gtids) or (
                gtids is None and start_pos > current.fde.end
            )
            await send(_fde_for_dump(current.fde.data, clear=clear))
            position = max(start_pos, current.fde.end)
            cursor = next(
                (i for i, e in enumerate(current.events) if e.pos >= position), len(current.events)
            )
            in_exclude = False
            exclude_end = 0
            while True:
                if cursor < len(current.events):
                    event = current.events[cursor]
                    cursor += 1
                    if gtids is not None:
                        if event.gtid is not None:
                            in_exclude = event.gtid in gtids
                        elif event.type_code == ev.ROTATE:
                            in_exclude = False
                        if in_exclude:
                            exclude_end = event.end
                            continue
                    if exclude_end:
                        await heartbeat(exclude_end)
                        exclude_end = 0
                    txn = event.txn
                    if cut and txn and cut.gno == txn.gno and cut.event == event.index:
                        packet = io.packet(b"\x00" + event.data)
                        share = int(len(packet) * cut.fraction) if cut.fraction else 0
                        await do_cut(packet[:share], (txn.gtid, event.index, share))
                        return
                    await send(event.data)
                    if txn and event is txn.events[-1]:
                        completed += 1
                        req.transactions_sent.append(txn.gtid)
                        if cut and cut.after_transactions == completed:
                            await do_cut(None, (txn.gtid, event.index, len(event.data)))
                            return
                    continue
                if exclude_end:
                    await heartbeat(exclude_end)
                    exclude_end = 0
                if current.closed and index + 1 < len(binlog.files):
                    index, start_pos = index + 1, 4
                    break
                if req.flags & DUMP_NON_BLOCK:
                    await io.write(eof_payload())
                    req.ended = "end"
                    return
                waiter = asyncio.ensure_future(self._tick_event.wait())  # type: ignore[union-attr]
                try:
                    done, _ = await asyncio.wait(
                        {eof, waiter}, timeout=period, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    waiter.cancel()
                if eof in done:
                    req.ended = "client"
                    return
                if not done:
                    await heartbeat(current.size)


def _fde_for_dump(data: bytes, *, clear: bool) -> bytes:
    """Binlog_sender::send_format_description_event: the in-use flag is cleared (the stored
    CRC was computed with it clear); when skipping, log_pos and `created` are zeroed and the
    CRC recomputed."""
    out = bytearray(data)
    out[17] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF
    if clear:
        out[13:17] = ev.u32(0)
        out[ev.HEADER_LEN + 52 : ev.HEADER_LEN + 56] = ev.u32(0)  # created, after version[50]
        out[-4:] = ev.crc32(bytes(out[:-4]))
    return bytes(out)


def _parse_handshake_response(payload: bytes) -> dict[str, Any]:
    """HandshakeResponse41."""
    caps, _max_packet, _charset = struct.unpack_from("<IIB", payload, 0)
    if not caps & CLIENT_PROTOCOL_41:
        raise PeerProtocolError("pre-4.1 handshake response")
    pos = 32
    end = payload.index(b"\0", pos)
    user = payload[pos:end].decode("utf-8")
    pos = end + 1
    if caps & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA:
        length, pos = read_lenenc(payload, pos)
    elif caps & CLIENT_SECURE_CONNECTION:
        length, pos = payload[pos], pos + 1
    else:
        length = payload.index(b"\0", pos) - pos
    auth = payload[pos : pos + length]
    pos += length
    database = None
    if caps & CLIENT_CONNECT_WITH_DB:
        end = payload.index(b"\0", pos)
        database, pos = payload[pos:end].decode("utf-8"), end + 1
    plugin = ""
    if caps & CLIENT_PLUGIN_AUTH:
        end = payload.find(b"\0", pos)
        end = len(payload) if end < 0 else end
        plugin, pos = payload[pos:end].decode("ascii"), end + 1
    attrs: dict[str, str] = {}
    if caps & CLIENT_CONNECT_ATTRS and pos < len(payload):
        total, pos = read_lenenc(payload, pos)
        stop = pos + total
        while pos < stop:
            klen, pos = read_lenenc(payload, pos)
            key = payload[pos : pos + klen].decode("utf-8")
            pos += klen
            vlen, pos = read_lenenc(payload, pos)
            attrs[key] = payload[pos : pos + vlen].decode("utf-8")
            pos += vlen
    return {
        "caps": caps,
        "user": user,
        "auth": bytes(auth),
        "database": database,
        "plugin": plugin,
        "attrs": attrs,
    }


def _parse_register(payload: bytes) -> dict[str, object]:
    """COM_REGISTER_SLAVE: server_id u32 | host, user, password (u8 length + bytes) |
    port u16 | rank u32 | master_id u32 (sql/rpl_source.cc register_replica)."""
    server_id = struct.unpack_from("<I", payload, 1)[0]
    pos = 5
    texts = []
    for _ in range(3):
        length = payload[pos]
        texts.append(payload[pos + 1 : pos + 1 + length])
        pos += 1 + length
    port, _rank, master_id = struct.unpack_from("<HII", payload, pos)
    if pos + 10 != len(payload):
        raise PeerProtocolError("COM_REGISTER_SLAVE has trailing bytes")
    return {
        "server_id": server_id,
        "host": texts[0].decode(),
        "user": texts[1].decode(),
        "password_length": len(texts[2]),
        "port": port,
        "master_id": master_id,
    }


def _parse_dump(connection: int, payload: bytes) -> DumpRequest:
    """COM_BINLOG_DUMP_GTID: flags u16 | server_id u32 | name_len u32 | name | pos u64 |
    data_len u32 | GTID set (com_binlog_dump_gtid); COM_BINLOG_DUMP: pos u32 | flags u16 |
    server_id u32 | name."""
    try:
        if payload[0] == COM_BINLOG_DUMP_GTID:
            flags, server_id, name_len = struct.unpack_from("<HII", payload, 1)
            pos = 11
            name = payload[pos : pos + name_len].decode("utf-8")
            pos += name_len
            log_pos, data_len = struct.unpack_from("<QI", payload, pos)
            pos += 12
            data = payload[pos : pos + data_len]
            if pos + data_len != len(payload):
                raise ValueError("length of the GTID set does not match the packet")
            return DumpRequest(
                connection,
                "COM_BINLOG_DUMP_GTID",
                flags,
                server_id,
                name,
                log_pos,
                GtidSet.decode(data),
                payload,
            )
        log_pos, flags, server_id = struct.unpack_from("<IHI", payload, 1)
        name = payload[11:].decode("utf-8")
        return DumpRequest(
            connection, "COM_BINLOG_DUMP", flags, server_id, name, log_pos, None, payload
        )
    except (ValueError, struct.error, IndexError) as exc:
        return DumpRequest(
            connection,
            "malformed",
            0,
            0,
            "",
            0,
            None,
            payload,
            error=f"Malformed communication packet: {exc}",
        )
