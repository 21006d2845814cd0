"""Command payloads, byte for byte against the documented layouts, and the text result-set
reader with both terminators (EOF packets, and OK packets under CLIENT_DEPRECATE_EOF)."""

from __future__ import annotations

import struct
from uuid import UUID

import pytest

from replicad.binlog.gtid import GtidSet
from replicad.errors import ProtocolError, ServerError
from replicad.protocol.auth import Secret
from replicad.protocol.commands import (
    BinlogDump,
    BinlogDumpGtid,
    Ping,
    Query,
    Quit,
    RegisterSlave,
    ResultSet,
    ResultSetReader,
    parse_column_definition,
)
from replicad.protocol.packets import write_lenenc_bytes

pytestmark = pytest.mark.unit

T_LONGLONG, T_VAR_STRING, T_BLOB, T_DATETIME = 0x08, 0xFD, 0xFC, 0x0C


def test_simple_commands() -> None:
    assert Query("SELECT 'é'").encode() == b"\x03SELECT '\xc3\xa9'"
    assert Ping().encode() == b"\x0e"
    assert Quit().encode() == b"\x01"


def test_register_slave_layout() -> None:
    raw = RegisterSlave(4242, host="replica-1", user="u", password=Secret("pw"), port=3307).encode()
    assert raw == (
        b"\x15"
        + (4242).to_bytes(4, "little")
        + b"\x09replica-1"
        + b"\x01u"
        + b"\x02pw"
        + (3307).to_bytes(2, "little")
        + bytes(4)  # rank
        + bytes(4)  # master id
    )
    assert "pw" not in repr(RegisterSlave(1, password=Secret("pw")))


def test_register_slave_defaults_are_empty() -> None:
    assert RegisterSlave(7).encode() == b"\x15\x07\x00\x00\x00\x00\x00\x00" + bytes(10)


def test_binlog_dump_layout() -> None:
    raw = BinlogDump(0x01020304, "mariadb-bin.000012", 0x0A0B0C0D, flags=0x03).encode()
    assert raw == (
        b"\x12" + b"\x0d\x0c\x0b\x0a" + b"\x03\x00" + b"\x04\x03\x02\x01" + b"mariadb-bin.000012"
    )


def test_binlog_dump_refuses_positions_past_4_gib() -> None:
    with pytest.raises(ProtocolError, match="32 bits"):
        BinlogDump(1, "f", 2**32).encode()
    with pytest.raises(ProtocolError):
        BinlogDump(-1, "f").encode()


def test_binlog_dump_gtid_layout() -> None:
    sid = UUID("3e11fa47-71ca-11e1-9e33-c80aa9429562")
    gtids = GtidSet.parse(f"{sid}:1-5:11")
    raw = BinlogDumpGtid(99, gtids, "bin.000001", 4, flags=0x01).encode()
    set_bytes = (
        (1).to_bytes(8, "little")
        + sid.bytes
        + (2).to_bytes(8, "little")
        + struct.pack("<QQ", 1, 6)
        + struct.pack("<QQ", 11, 12)
    )
    assert raw == (
        b"\x1e"
        + b"\x01\x00"
        + (99).to_bytes(4, "little")
        + (10).to_bytes(4, "little")
        + b"bin.000001"
        + (4).to_bytes(8, "little")
        + len(set_bytes).to_bytes(4, "little")
        + set_bytes
    )


# ---------------------------------------------------------------------- result sets


def column_def(name: str, col_type: int, charset: int = 45, table: str = "t") -> bytes:
    return (
        write_lenenc_bytes(b"def")
        + write_lenenc_bytes(b"db")
        + write_lenenc_bytes(table.encode())
        + write_lenenc_bytes(table.encode())
        + write_lenenc_bytes(name.encode())
        + write_lenenc_bytes(name.encode())
        + b"\x0c"
        + struct.pack("<HIBHB", charset, 255, col_type, 0, 0)
        + b"\x00\x00"
    )


def row(*values: bytes | None) -> bytes:
    return b"".join(b"\xfb" if v is None else write_lenenc_bytes(v) for v in values)


EOF = b"\xfe\x00\x00\x02\x00"
OK_EOF = b"\xfe\x00\x00\x02\x00\x00\x00"


def _run(reader: ResultSetReader, packets: list[bytes]) -> ResultSet | None:
    result = None
    for i, packet in enumerate(packets):
        result = reader.feed(packet)
        if i < len(packets) - 1:
            assert result is None, i
    return result


@pytest.mark.parametrize("deprecate_eof", [True, False])
def test_result_set(deprecate_eof: bool) -> None:
    columns = [
        column_def("id", T_LONGLONG, charset=63),
        column_def("name", T_VAR_STRING),
        column_def("blob", T_BLOB, charset=63),
        column_def("at", T_DATETIME, charset=63),
    ]
    rows = [
        row(b"1", "Zoë".encode(), b"\x00\xff", b"2024-01-02 03:04:05"),
        row(b"2", None, b"", None),
    ]
    packets = columns + ([] if deprecate_eof else [EOF]) + rows
    packets.append(OK_EOF if deprecate_eof else EOF)
    result = _run(ResultSetReader(4, deprecate_eof=deprecate_eof), packets)
    assert result is not None
    assert result.column_names == ["id", "name", "blob", "at"]
    assert result.rows == [
        ("1", "Zoë", b"\x00\xff", "2024-01-02 03:04:05"),
        ("2", None, b"", None),
    ]
    assert result.status_flags == 2
    assert result.as_dicts()[1] == {"id": "2", "name": None, "blob": b"", "at": None}


def test_empty_result_set() -> None:
    result = _run(ResultSetReader(1, deprecate_eof=True), [column_def("x", T_LONGLONG), OK_EOF])
    assert result is not None and result.rows == []


def test_row_whose_first_value_is_huge_is_not_a_terminator() -> None:
    big = bytes(0xFFFFFF + 3)
    result = _run(
        ResultSetReader(1, deprecate_eof=True),
        [column_def("b", T_BLOB, charset=63), row(big), OK_EOF],
    )
    assert result is not None and result.rows == [(big,)]


def test_err_instead_of_a_row() -> None:
    reader = ResultSetReader(1, deprecate_eof=True)
    reader.feed(column_def("x", T_LONGLONG))
    reader.feed(row(b"1"))
    with pytest.raises(ServerError) as info:
        reader.feed(b"\xff\x25\x05#70100Query execution was interrupted")
    assert info.value.code == 1317 and info.value.sqlstate == "70100"


def test_missing_eof_after_columns() -> None:
    reader = ResultSetReader(1, deprecate_eof=False)
    reader.feed(column_def("x", T_LONGLONG))
    with pytest.raises(ProtocolError, match="EOF"):
        reader.feed(row(b"1"))


@pytest.mark.parametrize(
    "bad_row",
    [row(b"1", b"2"), b"\x01", b"\x05ab", b"\xfc\x01", b""],
)
def test_malformed_rows(bad_row: bytes) -> None:
    reader = ResultSetReader(1, deprecate_eof=True)
    reader.feed(column_def("x", T_VAR_STRING))
    with pytest.raises(ProtocolError):
        reader.feed(bad_row)


def test_invalid_utf8_in_a_text_column() -> None:
    reader = ResultSetReader(1, deprecate_eof=True)
    reader.feed(column_def("x", T_VAR_STRING))
    with pytest.raises(ProtocolError, match="UTF-8"):
        reader.feed(row(b"\xff\xfe"))


def test_column_definition_fields() -> None:
    col = parse_column_definition(column_def("name", T_VAR_STRING, table="users"))
    assert (col.name, col.schema, col.table, col.org_name) == ("name", "db", "users", "name")
    assert (col.charset, col.length, col.type) == (45, 255, T_VAR_STRING)
    assert not col.binary
    with pytest.raises(ProtocolError):
        parse_column_definition(column_def("x", 1)[:-6])


def test_zero_column_result_refused() -> None:
    with pytest.raises(ProtocolError):
        ResultSetReader(0, deprecate_eof=True)


def test_a_packets_reader_leaves_every_row_as_the_servers_bytes() -> None:
    # Query.packets (the snapshot's chunks): no parsing and no UTF-8 decoding, so bytes a
    # text column's charset allows but UTF-8 refuses reach the column's own writer intact.
    rows = [row(b"7", b"caf\xe9", None), row(b"8", b"x" * 300, b"2024-01-02 03:04:05")]
    result = _run(
        ResultSetReader(3, deprecate_eof=True, packets=True),
        [
            column_def("id", T_LONGLONG),
            column_def("name", T_VAR_STRING),
            column_def("at", T_DATETIME),
            *rows,  # the second with a 0xFC-prefixed length
            OK_EOF,
        ],
    )
    assert result is not None
    assert result.packets == rows and result.rows == []
