"""Command writers and the text-protocol result-set reader (sans-IO).

Each command is a small value whose `encode()` returns its payload (unframed); the
`Connection` frames it and knows which reply it expects. `ResultSetReader` consumes the
packets of a COM_QUERY reply one payload at a time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

from replicad.binlog.gtid import GtidSet
from replicad.errors import ProtocolError
from replicad.protocol.auth import Secret
from replicad.protocol.packets import (
    ERR_HEADER,
    NULL_COLUMN,
    is_eof_packet,
    need,
    parse_eof,
    parse_err,
    parse_ok,
    read_lenenc_bytes,
    read_lenenc_int,
    write_lenenc_bytes,
)

COM_QUIT = 0x01
COM_QUERY = 0x03
COM_PING = 0x0E
COM_BINLOG_DUMP = 0x12
COM_REGISTER_SLAVE = 0x15
COM_BINLOG_DUMP_GTID = 0x1E

# COM_BINLOG_DUMP / COM_BINLOG_DUMP_GTID flags.
DUMP_NON_BLOCK = 0x01  # end with an EOF packet at the end of the binlog instead of waiting
DUMP_SEND_ANNOTATE_ROWS = 0x02  # MariaDB COM_BINLOG_DUMP: send ANNOTATE_ROWS events
DUMP_HEARTBEAT_V2 = 0x02  # MySQL 8.0.24+ COM_BINLOG_DUMP_GTID: HEARTBEAT_V2 events

BINARY_CHARSET = 63
# Column types whose values are raw bytes when the collation is binary. Numbers and temporal
# values also carry charset 63 in column definitions but are always sent as ASCII text.
_BYTE_STRING_TYPES = frozenset(
    {
        0x0F,  # VARCHAR
        0x10,  # BIT
        0xF9,  # TINY_BLOB
        0xFA,  # MEDIUM_BLOB
        0xFB,  # LONG_BLOB
        0xFC,  # BLOB
        0xFD,  # VAR_STRING
        0xFE,  # STRING
        0xFF,  # GEOMETRY
    }
)

_U32_MAX = 0xFFFFFFFF


def _check_u32(name: str, value: int) -> None:
    if not 0 <= value <= _U32_MAX:
        raise ProtocolError(f"{name} must fit in 32 bits", value=value)


@dataclass(frozen=True, slots=True)
class Query:
    sql: str
    # Each row as its packet's payload, unparsed (ResultSet.packets): for a reader that
    # parses the rows itself, in C (the snapshot's compiled path).
    packets: bool = False
    kind: ClassVar[str] = "query"

    def encode(self) -> bytes:
        return bytes((COM_QUERY,)) + self.sql.encode("utf-8")


@dataclass(frozen=True, slots=True)
class Ping:
    kind: ClassVar[str] = "ok"

    def encode(self) -> bytes:
        return bytes((COM_PING,))


@dataclass(frozen=True, slots=True)
class Quit:
    kind: ClassVar[str] = "quit"

    def encode(self) -> bytes:
        return bytes((COM_QUIT,))


@dataclass(frozen=True, slots=True)
class RegisterSlave:
    """COM_REGISTER_SLAVE: makes the replica visible in SHOW SLAVE HOSTS.

    host/user/password/port are what the replica reports about itself (report_host etc.),
    not credentials for this connection; they are usually left empty.
    """

    server_id: int
    host: str = ""
    user: str = ""
    password: Secret | str = field(default_factory=lambda: Secret(b""), repr=False)
    port: int = 0
    rank: int = 0
    master_id: int = 0
    kind: ClassVar[str] = "ok"

    def encode(self) -> bytes:
        _check_u32("server_id", self.server_id)
        if not 0 <= self.port <= 0xFFFF:
            raise ProtocolError("report port must fit in 16 bits", value=self.port)
        return (
            struct.pack("<BI", COM_REGISTER_SLAVE, self.server_id)
            + write_lenenc_bytes(self.host.encode("utf-8"))
            + write_lenenc_bytes(self.user.encode("utf-8"))
            + write_lenenc_bytes(Secret(self.password).reveal())
            + struct.pack("<HII", self.port, self.rank, self.master_id)
        )


@dataclass(frozen=True, slots=True)
class BinlogDump:
    """COM_BINLOG_DUMP from file:position. MariaDB with GTID: an empty file name, position 4,
    after `SET @slave_connect_state=...`."""

    server_id: int
    log_file: str
    log_pos: int = 4
    flags: int = 0
    kind: ClassVar[str] = "dump"

    def encode(self) -> bytes:
        _check_u32("server_id", self.server_id)
        # The field is 32 bits wide: past 4 GiB only a GTID start can address a position.
        _check_u32("binlog position", self.log_pos)
        return struct.pack(
            "<BIHI", COM_BINLOG_DUMP, self.log_pos, self.flags, self.server_id
        ) + self.log_file.encode("utf-8")


@dataclass(frozen=True, slots=True)
class BinlogDumpGtid:
    """COM_BINLOG_DUMP_GTID (MySQL): stream everything not in `gtid_set`."""

    server_id: int
    gtid_set: GtidSet
    log_file: str = ""
    log_pos: int = 4
    flags: int = 0
    kind: ClassVar[str] = "dump"

    def encode(self) -> bytes:
        _check_u32("server_id", self.server_id)
        name = self.log_file.encode("utf-8")
        data = self.gtid_set.encode()
        return (
            struct.pack("<BHII", COM_BINLOG_DUMP_GTID, self.flags, self.server_id, len(name))
            + name
            + struct.pack("<QI", self.log_pos, len(data))
            + data
        )


Command = Query | Ping | Quit | RegisterSlave | BinlogDump | BinlogDumpGtid


# ---------------------------------------------------------------------- result sets


@dataclass(frozen=True, slots=True)
class ResultColumn:
    """A column definition of a text result set (not `binlog.rows.Column`, a table-map
    column of a row event)."""

    name: str
    schema: str
    table: str
    org_table: str
    org_name: str
    charset: int
    length: int
    type: int
    flags: int
    decimals: int

    @property
    def binary(self) -> bool:
        """Whether values are bytes rather than text (binary strings, BLOB, BIT, GEOMETRY)."""
        return self.charset == BINARY_CHARSET and self.type in _BYTE_STRING_TYPES


@dataclass(frozen=True, slots=True)
class ResultSet:
    """A text-protocol result set. Values are `str` (decoded as UTF-8, the session character
    set), `bytes` for binary strings (BINARY, VARBINARY, BLOB, BIT, GEOMETRY and string
    expressions with the binary collation), and None for NULL. Numbers, dates and times stay
    text, exactly as the server printed them."""

    columns: tuple[ResultColumn, ...]
    rows: list[tuple[str | bytes | None, ...]]
    warnings: int = 0
    status_flags: int = 0
    packets: list[bytes] = field(default_factory=list)  # Query.packets: rows as packets

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def as_dicts(self) -> list[dict[str, str | bytes | None]]:
        names = self.column_names
        return [dict(zip(names, row, strict=True)) for row in self.rows]


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{what} is not valid UTF-8", at=exc.start) from None


def parse_column_definition(payload: bytes) -> ResultColumn:
    """ColumnDefinition41."""
    pos = 0
    texts = []
    for what in ("catalog", "schema", "table", "org_table", "name", "org_name"):
        raw, pos = read_lenenc_bytes(payload, pos)
        texts.append(_text(raw, f"column definition {what}"))
    fixed_len, pos = read_lenenc_int(payload, pos)
    if fixed_len < 10:
        raise ProtocolError(f"column definition fixed part is {fixed_len} bytes, expected 12")
    need(payload, pos, 10, "column definition fixed part")
    charset, length, col_type, flags, decimals = struct.unpack_from("<HIBHB", payload, pos)
    _catalog, schema, table, org_table, name, org_name = texts
    return ResultColumn(
        name, schema, table, org_table, org_name, charset, length, col_type, flags, decimals
    )


def parse_text_row(
    payload: bytes, names: tuple[str, ...], decode: tuple[bool, ...]
) -> tuple[str | bytes | None, ...]:
    """One text-protocol row of the columns `names`: each value NULL or a length-encoded
    string, decoded as UTF-8 where `decode` says (ResultSetReader computes it once per result
    set). The common one-byte length is read inline: this runs once per cell of a result."""
    values: list[str | bytes | None] = []
    pos, end = 0, len(payload)
    for index, name in enumerate(names):
        if pos >= end:
            raise ProtocolError(f"text row ends before the value of column {name!r}")
        first = payload[pos]
        if first < NULL_COLUMN:
            start = pos + 1
            pos = start + first
        elif first == NULL_COLUMN:
            values.append(None)
            pos += 1
            continue
        else:
            length, start = read_lenenc_int(payload, pos)
            pos = start + length
        if pos > end:
            raise ProtocolError(
                f"value of column {name!r} needs {pos - start} bytes at payload "
                f"offset {start}, only {end - start} left"
            )
        raw = payload[start:pos]
        values.append(_text(raw, f"value of column {name!r}") if decode[index] else raw)
    if pos != end:
        raise ProtocolError(f"text row has {end - pos} bytes after its {len(names)} values")
    return tuple(values)


def cell_text(value: str | bytes | None) -> str:
    """A result-set value as text: binary strings decoded as UTF-8, anything else as str()."""
    return value.decode() if isinstance(value, bytes) else str(value)


class ResultSetReader:
    """Consumes a COM_QUERY reply after its first packet (the column count) was read.

    `feed(payload)` returns the finished ResultSet, or None while more packets are due.
    An ERR in place of a row (the query was killed, a row failed to convert) is raised.
    """

    def __init__(self, column_count: int, *, deprecate_eof: bool, packets: bool = False) -> None:
        if column_count == 0:
            raise ProtocolError("result set with zero columns")
        self._count = column_count
        self._deprecate_eof = deprecate_eof
        self._packets: list[bytes] | None = [] if packets else None  # Query.packets
        self._decode: tuple[bool, ...] = ()
        self._columns: list[ResultColumn] = []
        self._frozen: tuple[ResultColumn, ...] = ()
        self._names: tuple[str, ...] = ()
        self._rows: list[tuple[str | bytes | None, ...]] = []
        self._step = "columns"

    @property
    def row_packets(self) -> list[bytes] | None:
        """Where the rows' packets go while rows are due in packets mode (Query.packets),
        else None: the connection may append plain row packets here itself, in bulk."""
        return self._packets if self._step == "rows" else None

    def feed(self, payload: bytes) -> ResultSet | None:
        if payload[:1] == bytes((ERR_HEADER,)):
            raise parse_err(payload, step=self._step)
        if self._step == "columns":
            self._columns.append(parse_column_definition(payload))
            if len(self._columns) == self._count:
                self._frozen = tuple(self._columns)
                self._names = tuple(c.name for c in self._frozen)
                self._decode = tuple(not c.binary for c in self._frozen)
                self._step = "rows" if self._deprecate_eof else "columns-eof"
            return None
        if self._step == "columns-eof":
            if not is_eof_packet(payload, deprecate_eof=False):
                raise ProtocolError("expected EOF after the column definitions")
            self._step = "rows"
            return None
        if self._step == "rows":
            if is_eof_packet(payload, self._deprecate_eof):
                if self._deprecate_eof:
                    ok = parse_ok(payload)
                    warnings, status = ok.warnings, ok.status_flags
                else:
                    eof = parse_eof(payload)
                    warnings, status = eof.warnings, eof.status_flags
                self._step = "done"
                return ResultSet(self._frozen, self._rows, warnings, status, self._packets or [])
            if self._packets is not None:
                self._packets.append(payload)
            else:
                self._rows.append(parse_text_row(payload, self._names, self._decode))
            return None
        raise ProtocolError("result set already complete")
