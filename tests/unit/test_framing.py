"""Framing details: 4- vs 6-byte table ids, ROTATE (real and artificial), ROWS v1 written by
MySQL 5.x, binlogs without checksums, and a file split across events of every size.

Fixtures come from tests/helpers/events.py (built from the MySQL source layouts). The 4-byte
table-id variant is what servers wrote before MySQL 5.1.4 changed TABLE_MAP's post-header from
6 to 8 bytes (Table_map_event: TABLE_MAP_HEADER_LEN); the parser must key on that length."""

from __future__ import annotations

import pytest

from replicad.binlog.events import RotateEvent
from replicad.binlog.files import iter_file_events
from replicad.binlog.parser import BinlogParser
from replicad.binlog.rows import RowsEvent, TableMapEvent
from tests.helpers import events as ev

pytestmark = pytest.mark.unit

WRITE_ROWS_V1 = 23


def _parser_with(post_header_lengths: bytes | None = None, checksum: bool = True) -> BinlogParser:
    parser = BinlogParser()
    parser.parse(ev.fde_mysql8(checksum, "5.7.44", post_header_lengths=post_header_lengths), 4)
    return parser


def _table_map_body(table_id_size: int) -> bytes:
    body = ev.table_map(77, "db", "t", [ev.Col(ev.T_LONG, nullable=False)])
    return body[:table_id_size] + body[6:]  # the fixture writes 6-byte ids


def test_six_byte_table_ids_by_default() -> None:
    parser = _parser_with()
    tm = parser.parse(ev.event(ev.TABLE_MAP, _table_map_body(6)), 100)
    assert isinstance(tm, TableMapEvent) and tm.table_id == 77
    assert parser.table_id_size == 6


def test_four_byte_table_ids_when_table_map_post_header_is_six() -> None:
    lengths = bytearray(ev.MYSQL_8_0_POST_HEADER_LENGTHS)
    lengths[ev.TABLE_MAP - 1] = 6
    lengths[WRITE_ROWS_V1 - 1] = 6
    parser = _parser_with(bytes(lengths))
    assert parser.table_id_size == 4
    tm = parser.parse(ev.event(ev.TABLE_MAP, _table_map_body(4)), 100)
    assert tm.table_id == 77 and tm.schema == "db" and tm.table == "t"
    # ROWS v1 with a 4-byte table id: id u32 | flags u16 | ncols | present | images
    body = (77).to_bytes(4, "little") + ev.u16(ev.STMT_END_F) + ev.lenenc(1) + b"\x01"
    body += ev.row_image([ev.int_le(-5, 4)]) + ev.row_image([ev.int_le(6, 4)])
    rows = parser.parse(ev.event(WRITE_ROWS_V1, body), 200)
    assert isinstance(rows, RowsEvent) and rows.table_map is tm
    assert list(rows.rows()) == [(None, {"@1": -5}), (None, {"@1": 6})]


def test_rows_v1_of_mysql_5_7_without_optional_metadata() -> None:
    parser = _parser_with()
    columns = [ev.Col(ev.T_LONG, nullable=False), ev.Col(ev.T_VARCHAR, ev.u16(30))]
    parser.parse(ev.event(ev.TABLE_MAP, ev.table_map(9, "db", "t", columns)), 100)
    body = (9).to_bytes(6, "little") + ev.u16(ev.STMT_END_F) + ev.lenenc(2) + b"\x03"
    body += ev.row_image([ev.int_le(-1, 4), ev.varchar("héllo", 30)])
    body += ev.row_image([ev.int_le(2, 4), b"\x02\xff\xfe"])
    rows = parser.parse(ev.event(WRITE_ROWS_V1, body), 150)
    # No SIGNEDNESS: integers are signed. No charset: valid UTF-8 is text, the rest bytes.
    assert list(rows.rows()) == [
        (None, {"@1": -1, "@2": "héllo"}),
        (None, {"@1": 2, "@2": b"\xff\xfe"}),
    ]


def test_rotate_real_and_artificial() -> None:
    parser = _parser_with()
    body = ev.u64(4) + b"mysql-bin.000124"
    real = parser.parse(ev.event(ev.ROTATE, body, log_pos=999), 999)
    assert isinstance(real, RotateEvent)
    assert (real.next_file, real.position, real.artificial) == ("mysql-bin.000124", 4, False)
    fake = parser.parse(ev.event(ev.ROTATE, body, log_pos=0, flags=0x20, timestamp=0), None)
    assert fake.artificial and fake.next_file == "mysql-bin.000124"


def test_binlog_without_checksums(tmp_path) -> None:
    columns = [ev.Col(ev.T_LONG, nullable=False)]
    rows_body = ev.rows_v2(ev.WRITE_ROWS, 9, 1, ev.row_image([ev.int_le(42, 4)]))
    data = ev.binlog_file(
        [
            ev.fde_mysql8(checksum=False),
            ev.event(ev.TABLE_MAP, ev.table_map(9, "db", "t", columns), checksum=False),
            ev.event(ev.WRITE_ROWS, rows_body, checksum=False),
        ],
        checksum=False,
    )
    path = tmp_path / "nocrc.000001"
    path.write_bytes(data)
    events = list(iter_file_events(path))
    assert [e.header.type_code for e in events] == [ev.FORMAT_DESCRIPTION, ev.TABLE_MAP, 30]
    assert list(events[2].rows()) == [(None, {"@1": 42})]
    assert events[1].header.pos + events[1].header.event_size == events[2].header.pos
