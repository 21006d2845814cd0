"""MySQL 8.x / 9.x binlog events that no server on this machine can write.

Only MariaDB runs here, so every MySQL-only format is exercised with byte fixtures built by
tests/helpers/events.py from the documented MySQL layouts (each builder names its source);
a few are also written out as literal hex. Every test asserts concrete decoded values.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import ClassVar
from uuid import UUID

import pytest

from replicad.binlog.changes import iter_row_changes
from replicad.binlog.events import (
    Event,
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatEvent,
    IntvarEvent,
    OpaqueEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RandEvent,
    RowsQueryEvent,
    TransactionPayloadEvent,
    UserVarEvent,
    XaPrepareEvent,
    XidEvent,
)
from replicad.binlog.files import iter_file_events
from replicad.binlog.gtid import TaggedGtidInfo, encode_gtid_tagged
from replicad.binlog.jsonb import JsonDiffOp, JsonTemporal
from replicad.binlog.parser import BinlogParser
from replicad.binlog.rows import JsonPartialUpdate, RowsEvent, TableMapEvent
from replicad.errors import (
    ChecksumError,
    ReplicadError,
    UnknownEventError,
    UnsupportedError,
)
from tests.helpers import events as ev

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
FDE_POS = 4
FIRST_POS = FDE_POS + 122  # a MySQL 8.0 FDE with CRC32 is 122 bytes
UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
UUID_B = "b7c2a0d1-0000-4000-8000-00000000ab01"
UTC = dt.UTC


def mysql8_parser(
    *, checksum: bool = True, server_version: str = "8.0.36", **kwargs: object
) -> BinlogParser:
    parser = BinlogParser(**kwargs)  # type: ignore[arg-type]
    fde = parser.parse(ev.fde_mysql8(checksum=checksum, server_version=server_version), FDE_POS)
    assert isinstance(fde, FormatDescriptionEvent)
    return parser


def parse_all(parser: BinlogParser, events: list[bytes], start: int = FIRST_POS) -> list[Event]:
    out = []
    pos = start
    for data in events:
        out.append(parser.parse(data, pos))
        pos += len(data)
    return out


# ------------------------------------------------------------------------------------------
# The `shop.orders` table used by several tests:
#   CREATE TABLE orders (id INT PRIMARY KEY, name VARCHAR(20) CHARSET utf8mb4,
#                        amount DECIMAL(10,2), j JSON, y YEAR, u INT UNSIGNED)
# with binlog_row_metadata=FULL. Metadata bytes as Field::do_save_field_metadata writes them:
# VARCHAR max byte length u16 (20 chars * 4 = 80), NEWDECIMAL precision then scale, JSON the
# 4-byte length size; INT and YEAR carry none. SIGNEDNESS has one bit per column of
# has_signedess_information_type (sql/field_common_properties.h, MySQL 8.0.21+: id, amount,
# y, u - YEAR included; the FDE here says 8.0.36).
# ------------------------------------------------------------------------------------------

ORDERS_ID = 108
ORDERS_NAMES = ["id", "name", "amount", "j", "y", "u"]
ORDERS_COLUMNS = [
    ev.Col(ev.T_LONG, nullable=False),
    ev.Col(ev.T_VARCHAR, ev.u16(80)),
    ev.Col(ev.T_NEWDECIMAL, bytes([10, 2])),
    ev.Col(ev.T_JSON, b"\x04"),
    ev.Col(ev.T_YEAR),
    ev.Col(ev.T_LONG),
]
ORDERS_OPTIONAL = (
    ev.opt_signedness([False, False, False, True])
    + ev.opt_default_charset(ev.UTF8MB4_0900_AI_CI)
    + ev.opt_column_names(ORDERS_NAMES)
    + ev.opt_simple_primary_key([0])
    + ev.opt_column_visibility([True] * 6)
)


def orders_table_map(*, checksum: bool = True, log_pos: int = 0) -> bytes:
    body = ev.table_map(ORDERS_ID, "shop", "orders", ORDERS_COLUMNS, optional=ORDERS_OPTIONAL)
    return ev.event(ev.TABLE_MAP, body, checksum=checksum, log_pos=log_pos)


def orders_values(
    id_: int, name: str | None, amount: str | None, j: object, y: int | None, u: int | None
) -> list[bytes | None]:
    return [
        ev.int_le(id_, 4),
        None if name is None else ev.varchar(name, 80),
        None if amount is None else ev.decimal_bin(amount, 10, 2),
        None if j is None else ev.json_column(ev.jsonb(j)),
        None if y is None else ev.year(y),
        None if u is None else ev.int_le(u, 4),
    ]


ROW1 = (1, "Zoë ☕", "1234.56", {"k": [1, "two", None]}, 2024, 4294967295)
ROW2 = (-2, "", "-0.05", None, 0, 0)
ROW3 = (2147483647, "x" * 20, "99999999.99", [], 1901, 3000000000)


def expected(row: tuple) -> dict[str, object]:
    id_, name, amount, j, y, u = row
    return {
        "id": id_,
        "name": name,
        "amount": None if amount is None else Decimal(amount),
        "j": j,
        "y": y,
        "u": u,
    }


def orders_write_rows(rows: list[tuple], *, checksum: bool = True, log_pos: int = 0) -> bytes:
    images = b"".join(ev.row_image(orders_values(*row)) for row in rows)
    body = ev.rows_v2(
        ev.WRITE_ROWS, ORDERS_ID, 6, images, extra_info=ev.extra_part_info(partition_id=3)
    )
    return ev.event(ev.WRITE_ROWS, body, checksum=checksum, log_pos=log_pos)


# ======================================================================================
# 1. FORMAT_DESCRIPTION of MySQL 8.0 with CRC32
# ======================================================================================


class TestFormatDescription:
    def test_fields_of_a_mysql_8_0_fde(self) -> None:
        parser = BinlogParser()
        data = ev.fde_mysql8()
        assert len(data) == 122  # 19 + 2 + 50 + 4 + 1 + 41 + 1 + 4
        fde = parser.parse(data, FDE_POS)
        assert isinstance(fde, FormatDescriptionEvent)
        assert fde.binlog_version == 4
        assert fde.server_version == "8.0.36"
        assert fde.create_timestamp == 1_700_000_000
        assert fde.common_header_length == 19
        assert fde.checksum_alg == 1
        assert fde.post_header_lengths == ev.MYSQL_8_0_POST_HEADER_LENGTHS
        assert not fde.is_mariadb
        assert parser.checksum_alg == 1
        assert parser.checksums_on
        assert parser.table_id_size == 6  # post_header_len[TABLE_MAP - 1] == 8, not 6

    def test_fde_of_mysql_9_with_gtid_tagged_slot(self) -> None:
        parser = BinlogParser()
        data = ev.fde_mysql8(server_version="9.1.0")
        assert len(data) == 123  # one more post-header length: GTID_TAGGED (42)
        fde = parser.parse(data, FDE_POS)
        assert isinstance(fde, FormatDescriptionEvent)
        assert fde.server_version == "9.1.0"
        assert len(fde.post_header_lengths) == 42
        assert fde.post_header_lengths[ev.FORMAT_DESCRIPTION - 1] == 99
        assert fde.post_header_lengths[ev.TRANSACTION_PAYLOAD - 1] == 40
        assert (parser.checksum_alg, parser.table_id_size) == (1, 6)

    def test_flipped_byte_in_a_later_event_is_a_checksum_error_naming_its_offset(self) -> None:
        parser = mysql8_parser()
        good = ev.event(ev.XID, ev.xid_body(9001))
        assert parser.parse(good, FIRST_POS).xid == 9001  # type: ignore[attr-defined]
        bad = ev.flip_byte(good, 20)  # inside the XID body
        with pytest.raises(ChecksumError) as info:
            parser.parse(bad, FIRST_POS)
        assert info.value.context["offset"] == FIRST_POS
        assert info.value.context["event_type"] == "XID"
        assert f"offset={FIRST_POS}" in str(info.value)
        # A flipped bit in the stored CRC itself is caught too.
        with pytest.raises(ChecksumError):
            parser.parse(ev.flip_byte(good, len(good) - 1), FIRST_POS)

    def test_without_verification_the_flipped_event_still_decodes(self) -> None:
        parser = mysql8_parser(verify_checksum=False)
        bad = ev.flip_byte(ev.event(ev.XID, ev.xid_body(9001)), 19)
        assert parser.parse(bad, FIRST_POS).xid == 9000  # type: ignore[attr-defined]

    def test_in_use_flag_is_not_covered_by_the_fde_crc(self) -> None:
        data = ev.fde_mysql8(in_use=True)
        assert data[17] & 0x01  # the flag is set in the header ...
        parser = BinlogParser()
        fde = parser.parse(data, FDE_POS)  # ... and the CRC made without it verifies
        assert fde.header.flags & 0x01
        assert parser.checksum_alg == 1

    def test_corrupted_fde_is_a_checksum_error(self) -> None:
        data = ev.flip_byte(ev.fde_mysql8(), 19 + 2 + 3)  # inside the server version
        with pytest.raises(ChecksumError) as info:
            BinlogParser().parse(data, FDE_POS)
        assert info.value.context["offset"] == FDE_POS

    def test_fde_with_checksum_off_means_events_carry_no_crc(self) -> None:
        parser = mysql8_parser(checksum=False)
        assert parser.checksum_alg == 0
        assert not parser.checksums_on
        xid = parser.parse(ev.event(ev.XID, ev.xid_body(5), checksum=False), FIRST_POS)
        assert isinstance(xid, XidEvent)
        assert xid.xid == 5


# ======================================================================================
# 2. TABLE_MAP + WRITE/UPDATE/DELETE_ROWS v2 with FULL optional metadata
# ======================================================================================


class TestRowsV2:
    def test_table_map_full_metadata(self) -> None:
        parser = mysql8_parser()
        tm = parser.parse(orders_table_map(), FIRST_POS)
        assert isinstance(tm, TableMapEvent)
        assert (tm.table_id, tm.schema, tm.table) == (ORDERS_ID, "shop", "orders")
        assert tm.column_names == ORDERS_NAMES
        assert tm.primary_key_names == ["id"]
        assert [c.unsigned for c in tm.columns] == [False, False, False, False, False, True]
        assert [c.nullable for c in tm.columns] == [False, True, True, True, True, True]
        assert tm.columns[1].collation == ev.UTF8MB4_0900_AI_CI

    def test_write_rows_v2_decodes_every_value(self) -> None:
        parser = mysql8_parser()
        tm_data = orders_table_map()
        rows_data = orders_write_rows([ROW1, ROW2, ROW3])
        _, rows = parse_all(parser, [tm_data, rows_data])
        assert isinstance(rows, RowsEvent)
        assert rows.op == "c"
        assert rows.stmt_end
        assert rows.extra_data == ev.extra_part_info(partition_id=3)  # skipped, not decoded
        decoded = list(rows.rows())
        assert decoded == [
            (None, expected(ROW1)),
            (None, expected(ROW2)),
            (None, expected(ROW3)),
        ]
        # Decimal scale is kept exactly as stored.
        assert [str(after["amount"]) for _, after in decoded] == ["1234.56", "-0.05", "99999999.99"]

    def test_update_rows_v2_before_and_after(self) -> None:
        parser = mysql8_parser()
        after_row = (1, "Zoé", "0.00", {"k": []}, 2155, 1)
        images = ev.row_image(orders_values(*ROW1)) + ev.row_image(orders_values(*after_row))
        images += ev.row_image(orders_values(*ROW2)) + ev.row_image(
            orders_values(-2, None, None, {"n": -1}, None, None)
        )
        body = ev.rows_v2(
            ev.UPDATE_ROWS,
            ORDERS_ID,
            6,
            images,
            extra_info=ev.extra_part_info(partition_id=1, source_partition_id=2),
        )
        _, rows = parse_all(parser, [orders_table_map(), ev.event(ev.UPDATE_ROWS, body)])
        assert isinstance(rows, RowsEvent)
        assert rows.op == "u"
        assert list(rows.rows()) == [
            (expected(ROW1), expected(after_row)),
            (
                expected(ROW2),
                {"id": -2, "name": None, "amount": None, "j": {"n": -1}, "y": None, "u": None},
            ),
        ]

    def test_delete_rows_v2_full_and_minimal_images(self) -> None:
        parser = mysql8_parser()
        full = ev.rows_v2(
            ev.DELETE_ROWS,
            ORDERS_ID,
            6,
            ev.row_image(orders_values(*ROW3)),
            flags=0,
            extra_info=ev.extra_ndb_info(b"abc"),
        )
        # binlog_row_image=MINIMAL: only the primary key is in the before image.
        minimal = ev.rows_v2(
            ev.DELETE_ROWS,
            ORDERS_ID,
            6,
            ev.row_image([ev.int_le(1, 4)]) + ev.row_image([ev.int_le(-2, 4)]),
            present=[True, False, False, False, False, False],
        )
        _, first, second = parse_all(
            parser,
            [orders_table_map(), ev.event(ev.DELETE_ROWS, full), ev.event(ev.DELETE_ROWS, minimal)],
        )
        assert isinstance(first, RowsEvent) and isinstance(second, RowsEvent)
        assert first.op == second.op == "d"
        assert not first.stmt_end
        assert first.extra_data == ev.extra_ndb_info(b"abc")
        assert list(first.rows()) == [(expected(ROW3), None)]
        assert list(second.rows()) == [({"id": 1}, None), ({"id": -2}, None)]


# ======================================================================================
# 3. GTID (33) with every tail, 5.7-style GTID, ANONYMOUS_GTID (34)
# ======================================================================================


class TestGtid:
    def test_gtid_with_every_tail(self) -> None:
        parser = mysql8_parser()
        body = ev.gtid_body(
            UUID_A,
            4711,
            flags=0,
            last_committed=41,
            sequence_number=42,
            immediate_commit_ts=1_700_000_000_654_321,
            original_commit_ts=1_699_999_999_000_001,
            transaction_length=300,  # lenenc fc 2c 01
            immediate_server_version=80036,
            original_server_version=50744,
            commit_group_ticket=7,
        )
        assert len(body) == 42 + 14 + 3 + 8 + 8
        gtid = parser.parse(ev.event(ev.GTID, body), FIRST_POS)
        assert isinstance(gtid, GtidEvent)
        assert gtid.flags == 0
        assert gtid.uuid == UUID_A
        assert gtid.gno == 4711
        assert gtid.gtid == f"{UUID_A}:4711"
        assert gtid.logical_timestamps
        assert (gtid.last_committed, gtid.sequence_number) == (41, 42)
        assert gtid.immediate_commit_ts_us == 1_700_000_000_654_321
        assert gtid.original_commit_ts_us == 1_699_999_999_000_001
        assert gtid.transaction_length == 300
        assert gtid.immediate_server_version == 80036
        assert gtid.original_server_version == 50744
        assert gtid.commit_group_ticket == 7
        assert not gtid.anonymous

    def test_gtid_with_equal_timestamps_and_versions(self) -> None:
        parser = mysql8_parser()
        body = ev.gtid_body(
            UUID_A,
            5,
            last_committed=0,
            sequence_number=1,
            immediate_commit_ts=1_700_000_000_000_000,
            transaction_length=70_000,  # lenenc fd 70 11 01
            immediate_server_version=80036,
        )
        gtid = parser.parse(ev.event(ev.GTID, body), FIRST_POS)
        assert isinstance(gtid, GtidEvent)
        assert gtid.immediate_commit_ts_us == gtid.original_commit_ts_us == 1_700_000_000_000_000
        assert gtid.transaction_length == 70_000
        assert gtid.immediate_server_version == gtid.original_server_version == 80036
        assert gtid.commit_group_ticket is None

    def test_gtid_with_only_the_42_byte_post_header(self) -> None:
        parser = mysql8_parser()
        body = ev.gtid_body(UUID_B, 9, last_committed=3, sequence_number=4)
        assert len(body) == 42
        gtid = parser.parse(ev.event(ev.GTID, body), FIRST_POS)
        assert isinstance(gtid, GtidEvent)
        assert gtid.gtid == f"{UUID_B}:9"
        assert (gtid.last_committed, gtid.sequence_number) == (3, 4)
        assert gtid.immediate_commit_ts_us is None
        assert gtid.original_commit_ts_us is None
        assert gtid.transaction_length is None
        assert gtid.immediate_server_version is None
        assert gtid.original_server_version is None
        assert gtid.commit_group_ticket is None

    def test_anonymous_gtid(self) -> None:
        parser = mysql8_parser()
        body = ev.gtid_body(
            "00000000-0000-0000-0000-000000000000",
            0,
            last_committed=17,
            sequence_number=18,
            immediate_commit_ts=1_700_000_000_000_123,
            transaction_length=250,
            immediate_server_version=80036,
        )
        gtid = parser.parse(ev.event(ev.ANONYMOUS_GTID, body), FIRST_POS)
        assert isinstance(gtid, GtidEvent)
        assert gtid.anonymous
        assert gtid.gtid is None
        assert gtid.gno == 0
        assert (gtid.last_committed, gtid.sequence_number) == (17, 18)
        assert gtid.transaction_length == 250


# ======================================================================================
# 4. GTID_TAGGED (42)
# ======================================================================================

# Written out by hand from Gtid_event::define_fields() (control_events.h) and the
# mysql::serialization message format (libs/mysql/serialization/readme.md,
# variable_length_integers.h): every number is a varint whose first byte's trailing one bits
# (+1) give its byte count (value << 1 for 7 bits, (value << 2) | 0b01 for 14 bits, ...);
# signed fields are zig-zag encoded first; the UUID is a fixed array of 16 uint8 varints.
TAGGED_LITERAL = bytes.fromhex(
    "02"  # message id = serialization format version 1
    "8e"  # message size 71, counting these three header bytes
    "00"  # last non-ignorable field id: 0, all fields ignorable
    "00 00"  # field 0 gtid_flags = 0
    "02"  # field 1 uuid 3e11fa47-71ca-11e1-9e33-c80aa9429562, one varint per byte:
    "7c 22 e903 8e e2 2903 22 8503"  # 3e 11 fa 47 71 ca 11 e1
    "7902 66 2103 14 a502 84 5502 c4"  # 9e 33 c8 0a a9 42 95 62
    "04 9126"  # field 2 gno 1234: zig-zag 2468, (2468 << 2) | 1
    "06 0c 6f7264657273"  # field 3 tag: length 6, "orders"
    "08 28"  # field 4 last_committed 10: zig-zag 20
    "0a 2c"  # field 5 sequence_number 11: zig-zag 22
    "0c 7f40222018240a06"  # field 6 immediate_commit_ts 1700000000123456 (8-byte varint)
    "0e 7fc0fd0e18240a06"  # field 7 original_commit_ts 1699999999000000 (differs)
    "10 4913"  # field 8 transaction_length 1234
    "12 83d009"  # field 9 immediate_server_version 80400
    # field 10 original_server_version omitted: equal to the immediate one
    "16 0a"  # field 11 commit_group_ticket 5
)


class TestGtidTagged:
    def test_body_from_the_library_encoder(self) -> None:
        info = TaggedGtidInfo(
            flags=1,
            uuid=UUID(UUID_B),
            gno=42,
            tag="blue_team",
            last_committed=100,
            sequence_number=101,
            immediate_commit_ts_us=1_700_000_000_000_001,
            original_commit_ts_us=1_700_000_000_000_001,
            transaction_length=512,
            immediate_server_version=90100,
            original_server_version=80400,
            commit_group_ticket=None,
        )
        parser = mysql8_parser(checksum=True)
        gtid = parser.parse(ev.event(ev.GTID_TAGGED, encode_gtid_tagged(info)), FIRST_POS)
        assert isinstance(gtid, GtidEvent)
        assert gtid.tag == "blue_team"
        assert gtid.gtid == f"{UUID_B}:blue_team:42"
        assert (gtid.last_committed, gtid.sequence_number) == (100, 101)
        assert gtid.immediate_commit_ts_us == gtid.original_commit_ts_us == 1_700_000_000_000_001
        assert gtid.transaction_length == 512
        assert (gtid.immediate_server_version, gtid.original_server_version) == (90100, 80400)
        assert gtid.commit_group_ticket is None

    def test_literal_hex_body(self) -> None:
        assert len(TAGGED_LITERAL) == 71
        parser = mysql8_parser()
        gtid = parser.parse(ev.event(ev.GTID_TAGGED, TAGGED_LITERAL), FIRST_POS)
        assert isinstance(gtid, GtidEvent)
        assert gtid.flags == 0
        assert gtid.uuid == UUID_A
        assert gtid.gno == 1234
        assert gtid.tag == "orders"
        assert gtid.gtid == f"{UUID_A}:orders:1234"
        assert (gtid.last_committed, gtid.sequence_number) == (10, 11)
        assert gtid.immediate_commit_ts_us == 1_700_000_000_123_456
        assert gtid.original_commit_ts_us == 1_699_999_999_000_000
        assert gtid.transaction_length == 1234
        assert gtid.immediate_server_version == gtid.original_server_version == 80400
        assert gtid.commit_group_ticket == 5

    def test_literal_agrees_with_the_library_encoder(self) -> None:
        info = TaggedGtidInfo(
            flags=0,
            uuid=UUID(UUID_A),
            gno=1234,
            tag="orders",
            last_committed=10,
            sequence_number=11,
            immediate_commit_ts_us=1_700_000_000_123_456,
            original_commit_ts_us=1_699_999_999_000_000,
            transaction_length=1234,
            immediate_server_version=80400,
            original_server_version=80400,
            commit_group_ticket=5,
        )
        assert encode_gtid_tagged(info) == TAGGED_LITERAL


# ======================================================================================
# 5. PREVIOUS_GTIDS (35)
# ======================================================================================


def test_previous_gtids_with_two_uuids() -> None:
    parser = mysql8_parser()
    body = ev.previous_gtids_body(
        [
            (UUID_A, [(1, 6), (7, 8), (10, 21)]),  # half-open: 1-5, 7, 10-20
            (UUID_B, [(1, 101), (200, 202)]),
        ]
    )
    event = parser.parse(ev.event(ev.PREVIOUS_GTIDS, body), FIRST_POS)
    assert isinstance(event, PreviousGtidsEvent)
    assert str(event.gtid_set) == f"{UUID_A}:1-5:7:10-20,{UUID_B}:1-100:200-201"


# ======================================================================================
# 6. HEARTBEAT (27) and HEARTBEAT_V2 (41)
# ======================================================================================


class TestHeartbeat:
    def test_heartbeat_v1(self) -> None:
        parser = mysql8_parser()
        data = ev.event(ev.HEARTBEAT, b"binlog.000007", log_pos=123_456, timestamp=0)
        hb = parser.parse(data, 0)
        assert isinstance(hb, HeartbeatEvent)
        assert (hb.log_file, hb.position, hb.version) == ("binlog.000007", 123_456, 1)

    def test_heartbeat_v2(self) -> None:
        parser = mysql8_parser()
        position = 5_000_000_000  # past 4 GiB: a 9-byte lenenc inside the TLV value
        body = ev.heartbeat_v2_body("binlog.000123", position)
        assert body[-1] == 0  # end mark
        hb = parser.parse(ev.event(ev.HEARTBEAT_V2, body, timestamp=0), 0)
        assert isinstance(hb, HeartbeatEvent)
        assert (hb.log_file, hb.position, hb.version) == ("binlog.000123", position, 2)


# ======================================================================================
# 7. TRANSACTION_PAYLOAD (40)
# ======================================================================================

BEGIN_STATUS = ev.q_flags2(0) + ev.q_sql_mode(1168113696) + ev.q_catalog_nz("std")


def inner_transaction(rows: list[tuple]) -> bytes:
    """The inner events of a compressed transaction: full events, log_pos 0, no CRC."""
    return b"".join(
        [
            ev.event(ev.QUERY, ev.query_body("BEGIN", status=BEGIN_STATUS), checksum=False),
            orders_table_map(checksum=False),
            orders_write_rows(rows, checksum=False),
            ev.event(ev.XID, ev.xid_body(777), checksum=False),
        ]
    )


GTID_BODY = ev.gtid_body(
    UUID_A,
    88,
    last_committed=1,
    sequence_number=2,
    immediate_commit_ts=1_700_000_000_000_000,
    transaction_length=400,
    immediate_server_version=80036,
)


class TestTransactionPayload:
    def test_zstd_payload_row_changes(self) -> None:
        parser = mysql8_parser()
        inner = inner_transaction([ROW1, ROW2, ROW3])
        body = ev.transaction_payload_body(inner)
        gtid_pos = FIRST_POS
        gtid_data = ev.event(ev.GTID, GTID_BODY)
        payload_pos = gtid_pos + len(gtid_data)
        gtid = parser.parse(gtid_data, gtid_pos)
        outer = parser.parse(ev.event(ev.TRANSACTION_PAYLOAD, body), payload_pos)
        assert isinstance(outer, TransactionPayloadEvent)
        assert outer.compression == 0
        assert outer.compression_name == "ZSTD"
        assert outer.uncompressed_size == len(inner)
        assert outer.payload_size == len(outer.payload)
        inner_events = list(parser.payload_events(outer))
        assert [type(e).__name__ for e in inner_events] == [
            "QueryEvent",
            "TableMapEvent",
            "RowsEvent",
            "XidEvent",
        ]
        assert inner_events[0].query == "BEGIN"  # type: ignore[attr-defined]
        assert inner_events[0].status_vars["catalog"] == "std"  # type: ignore[attr-defined]
        assert inner_events[3].xid == 777  # type: ignore[attr-defined]
        changes = list(iter_row_changes([gtid, outer, *inner_events], file="binlog.000042"))
        assert [c.op for c in changes] == ["c", "c", "c"]
        assert [c.after for c in changes] == [expected(ROW1), expected(ROW2), expected(ROW3)]
        assert all(c.before is None for c in changes)
        assert {(c.db, c.table) for c in changes} == {("shop", "orders")}
        assert [c.row for c in changes] == [0, 1, 2]
        assert {c.gtid for c in changes} == {f"{UUID_A}:88"}
        assert {c.pos for c in changes} == {payload_pos}
        assert {c.file for c in changes} == {"binlog.000042"}
        assert changes[0].primary_key == ("id",)
        assert changes[0].json_columns == frozenset({"j"})

    def test_uncompressed_payload(self) -> None:
        parser = mysql8_parser()
        inner = inner_transaction([ROW2])
        body = ev.transaction_payload_body(inner, compression=ev.COMPRESSION_NONE)
        outer = parser.parse(ev.event(ev.TRANSACTION_PAYLOAD, body), FIRST_POS)
        assert isinstance(outer, TransactionPayloadEvent)
        assert outer.compression == 255
        assert outer.compression_name == "NONE"
        assert outer.payload == inner
        inner_events = list(parser.payload_events(outer))
        rows = [e for e in inner_events if isinstance(e, RowsEvent)]
        assert len(rows) == 1
        assert list(rows[0].rows()) == [(None, expected(ROW2))]

    def test_unknown_header_field_is_skipped_by_its_length(self) -> None:
        # Transaction_payload::decode ignores unrecognised field types: `reader.forward(length)`.
        parser = mysql8_parser()
        inner = inner_transaction([ROW3])
        frame = ev.zstd_frame(inner)
        header = ev.payload_header(ev.COMPRESSION_ZSTD, len(frame), len(inner))
        future_field = ev.lenenc(9) + ev.lenenc(3) + b"\x01\x02\x03"
        body = future_field + header + frame
        outer = parser.parse(ev.event(ev.TRANSACTION_PAYLOAD, body), FIRST_POS)
        assert isinstance(outer, TransactionPayloadEvent)
        assert (outer.compression, outer.payload_size) == (0, len(frame))
        rows = [e for e in parser.payload_events(outer) if isinstance(e, RowsEvent)]
        assert [after for r in rows for _, after in r.rows()] == [expected(ROW3)]

    def test_unknown_compression_type_is_unsupported(self) -> None:
        parser = mysql8_parser()
        inner = inner_transaction([ROW1])
        body = ev.payload_header(7, len(inner), len(inner)) + inner
        with pytest.raises(UnsupportedError) as info:
            outer = parser.parse(ev.event(ev.TRANSACTION_PAYLOAD, body), FIRST_POS)
            list(parser.payload_events(outer))  # type: ignore[arg-type]
        assert "7" in str(info.value)
        assert info.value.context["offset"] == FIRST_POS

    @pytest.mark.parametrize("damage", ["bad_magic", "garbage"])
    def test_corrupt_zstd_frame_is_a_replicad_error(self, damage: str) -> None:
        parser = mysql8_parser()
        inner = inner_transaction([ROW1, ROW2, ROW3])
        frame = ev.zstd_frame(inner)
        if damage == "bad_magic":
            frame = b"\x00\x00\x00\x00" + frame[4:]
        else:
            frame = frame[:6] + bytes(range(200, 256)) + frame[62:]
        body = ev.payload_header(ev.COMPRESSION_ZSTD, len(frame), len(inner)) + frame
        outer = parser.parse(ev.event(ev.TRANSACTION_PAYLOAD, body), FIRST_POS)
        assert isinstance(outer, TransactionPayloadEvent)
        # Only replicad's typed errors may escape - never zstandard.ZstdError.
        with pytest.raises(ReplicadError) as info:
            for inner_event in parser.payload_events(outer):
                if isinstance(inner_event, RowsEvent):
                    list(inner_event.rows())
        assert info.value.context.get("offset") == FIRST_POS

    @pytest.mark.parametrize(
        "keep", [-1, -4, 0.5, 12], ids=["last_byte", "last_4_bytes", "half", "first_12_bytes"]
    )
    def test_truncated_zstd_frame_is_an_error_not_an_empty_transaction(self, keep: float) -> None:
        # A zstd frame cut short (all but its last byte, all but its last 4 bytes, half of it,
        # only its first 12 bytes) ends inside its only block. Decoding it must fail: yielding
        # no inner event at all would silently drop every row change of the transaction.
        parser = mysql8_parser()
        inner = inner_transaction([ROW1, ROW2, ROW3])
        frame = ev.zstd_frame(inner)
        cut = int(len(frame) * keep) if isinstance(keep, float) else keep
        frame = frame[:cut]
        body = ev.payload_header(ev.COMPRESSION_ZSTD, len(frame), len(inner)) + frame
        outer = parser.parse(ev.event(ev.TRANSACTION_PAYLOAD, body), FIRST_POS)
        assert isinstance(outer, TransactionPayloadEvent)
        with pytest.raises(ReplicadError) as info:
            decoded = list(parser.payload_events(outer))
            pytest.fail(  # reached only when no error was raised
                f"truncated frame decoded to {[e.header.type_name for e in decoded]}"
            )
        assert info.value.context.get("offset") == FIRST_POS

    def _write_file(self, tmp_path: Path) -> tuple[Path, int]:
        events = [
            ev.fde_mysql8(in_use=True),
            ev.event(ev.PREVIOUS_GTIDS, ev.previous_gtids_body([(UUID_A, [(1, 88)])])),
            ev.event(ev.GTID, GTID_BODY),
            ev.event(
                ev.TRANSACTION_PAYLOAD,
                ev.transaction_payload_body(inner_transaction([ROW1, ROW2, ROW3])),
            ),
        ]
        path = tmp_path / "binlog.000042"
        path.write_bytes(ev.binlog_file(events))
        payload_pos = 4 + sum(len(e) for e in events[:3])
        return path, payload_pos

    def test_binlog_file_expands_payloads(self, tmp_path: Path) -> None:
        path, payload_pos = self._write_file(tmp_path)
        events = list(iter_file_events(path))
        assert [e.header.type_name for e in events] == [
            "FORMAT_DESCRIPTION",
            "PREVIOUS_GTIDS",
            "GTID",
            "TRANSACTION_PAYLOAD",
            "QUERY",
            "TABLE_MAP",
            "WRITE_ROWS",
            "XID",
        ]
        assert events[3].header.pos == payload_pos
        assert events[3].header.next_pos == path.stat().st_size
        changes = list(iter_row_changes(events, file=path.name))
        assert [c.after for c in changes] == [expected(ROW1), expected(ROW2), expected(ROW3)]
        assert {c.gtid for c in changes} == {f"{UUID_A}:88"}
        assert {c.pos for c in changes} == {payload_pos}

    def test_cli_dump(self, tmp_path: Path) -> None:
        path, payload_pos = self._write_file(tmp_path)
        proc = subprocess.run(
            [sys.executable, "-m", "replicad.cli", "dump", str(path)],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr.decode()
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        assert len(lines) == 3
        assert [line["op"] for line in lines] == ["c", "c", "c"]
        assert [line["before"] for line in lines] == [None, None, None]
        assert [line["after"] for line in lines] == [
            {
                "id": 1,
                "name": "Zoë ☕",
                "amount": "1234.56",
                "j": {"k": [1, "two", None]},
                "y": 2024,
                "u": 4294967295,
            },
            {"id": -2, "name": "", "amount": "-0.05", "j": None, "y": 0, "u": 0},
            {
                "id": 2147483647,
                "name": "x" * 20,
                "amount": "99999999.99",
                "j": [],
                "y": 1901,
                "u": 3000000000,
            },
        ]
        for index, line in enumerate(lines):
            assert (line["source"]["db"], line["source"]["table"]) == ("shop", "orders")
            assert line["source"]["file"] == "binlog.000042"
            assert line["source"]["pos"] == payload_pos
            assert line["source"]["row"] == index
            assert line["source"]["gtid"] == f"{UUID_A}:88"


# ======================================================================================
# 8. PARTIAL_UPDATE_ROWS (39), binlog_row_value_options=PARTIAL_JSON
# ======================================================================================
#
# Layout checked against sql/rpl_record.cc (8.0): pack_row() for UPDATE_AI with
# PARTIAL_JSON_UPDATES writes `net_store_length(value_options)` (0 when no column has a
# diff), then - only if a diff exists - one partial bit per JSON column of the table
# (Bit_writer, LSB first, counted over all JSON columns, present or not), then the NULL bits
# over the columns in the image, then the values; pack_field() stores a partial column with
# Field_json::pack_diff = Json_diff_vector::write_binary (u32 length + diffs) instead of the
# usual 4-byte length + binary JSON. unpack_row()/start_partial_bit_reader() read it back in
# the same order. The before image is an ordinary image.

DOCS_ID = 201
DOCS_COLUMNS = [ev.Col(ev.T_LONG, nullable=False), ev.Col(ev.T_JSON, b"\x04")]
DOCS_OPTIONAL = ev.opt_signedness([False]) + ev.opt_column_names(["id", "doc"])
DOC_BEFORE = {"a": 1, "b": [1, 2, 3], "c": "x"}
DOC_AFTER = {"a": 2, "b": [1, 2, 3], "d": True}
THREE_DIFFS = [
    ev.json_diff(ev.JSON_DIFF_REPLACE, "$.a", ev.jsonb(2)),
    ev.json_diff(ev.JSON_DIFF_INSERT, "$.d", ev.jsonb(True)),
    ev.json_diff(ev.JSON_DIFF_REMOVE, "$.c"),
]

# The after image of row (1, doc) with the three diffs, byte by byte.
AFTER_IMAGE_HEX = (
    "01"  # value_options = PARTIAL_JSON_UPDATES (lenenc)
    "01"  # partial bits: JSON column #0 (doc) carries a diff
    "00"  # NULL bits over the 2 columns in the image: none NULL
    "01000000"  # id = 1
    "16000000"  # Json_diff_vector length: 22 bytes follow
    "00 03 242e61 03 050200"  # REPLACE "$.a" with int16 2
    "01 03 242e64 02 0401"  # INSERT "$.d" true
    "02 03 242e63"  # REMOVE "$.c" (no value)
)


def docs_parser() -> BinlogParser:
    parser = mysql8_parser()
    body = ev.table_map(DOCS_ID, "shop", "docs", DOCS_COLUMNS, optional=DOCS_OPTIONAL)
    parser.parse(ev.event(ev.TABLE_MAP, body), FIRST_POS)
    return parser


def docs_before(doc: object, id_: int = 1) -> bytes:
    return ev.row_image([ev.int_le(id_, 4), ev.json_column(ev.jsonb(doc))])


def partial_rows(images: bytes, **kwargs: object) -> bytes:
    body = ev.rows_v2(ev.PARTIAL_UPDATE_ROWS, DOCS_ID, 2, images, **kwargs)  # type: ignore[arg-type]
    return ev.event(ev.PARTIAL_UPDATE_ROWS, body)


class TestPartialUpdateRows:
    def test_fixture_after_image_matches_the_documented_layout(self) -> None:
        built = ev.partial_after_image(
            [ev.int_le(1, 4), ev.json_diff_vector(THREE_DIFFS)],
            value_options=1,
            partial_bits=[True],
        )
        assert built == bytes.fromhex(AFTER_IMAGE_HEX)

    def test_all_three_diffs_are_applied(self) -> None:
        parser = docs_parser()
        images = docs_before(DOC_BEFORE) + bytes.fromhex(AFTER_IMAGE_HEX)
        rows = parser.parse(partial_rows(images), 300)
        assert isinstance(rows, RowsEvent)
        assert rows.op == "u"
        assert rows.partial
        [(before, after)] = list(rows.rows())
        assert before == {"id": 1, "doc": DOC_BEFORE}
        assert after == {"id": 1, "doc": DOC_AFTER}
        assert list(after["doc"]) == ["a", "b", "d"]  # MySQL key order after the INSERT

    def test_partial_bit_clear_means_a_full_value(self) -> None:
        parser = docs_parser()
        new_doc = {"z": [True, False], "a": -7}
        after = ev.partial_after_image(
            [ev.int_le(1, 4), ev.json_column(ev.jsonb(new_doc))],
            value_options=1,
            partial_bits=[False],
        )
        rows = parser.parse(partial_rows(docs_before(DOC_BEFORE) + after), 300)
        assert list(rows.rows()) == [  # type: ignore[attr-defined]
            ({"id": 1, "doc": DOC_BEFORE}, {"id": 1, "doc": new_doc})
        ]

    def test_value_options_zero_has_no_partial_bits(self) -> None:
        parser = docs_parser()
        after = ev.partial_after_image(
            [ev.int_le(1, 4), ev.json_column(ev.jsonb([1, 2]))], value_options=0
        )
        assert after[0] == 0 and after[1] == 0  # value_options 0, then the NULL bits
        rows = parser.parse(partial_rows(docs_before(DOC_BEFORE) + after), 300)
        assert list(rows.rows()) == [  # type: ignore[attr-defined]
            ({"id": 1, "doc": DOC_BEFORE}, {"id": 1, "doc": [1, 2]})
        ]

    def test_several_rows_mixing_partial_full_and_null(self) -> None:
        parser = docs_parser()
        images = (
            docs_before(DOC_BEFORE, 1)
            + bytes.fromhex(AFTER_IMAGE_HEX)
            + docs_before({"q": 1}, 2)
            + ev.partial_after_image(
                [ev.int_le(2, 4), ev.json_column(ev.jsonb("s"))],
                value_options=1,
                partial_bits=[False],
            )
            + docs_before([0], 3)
            + ev.partial_after_image([ev.int_le(3, 4), None], value_options=1, partial_bits=[False])
        )
        rows = parser.parse(partial_rows(images), 300)
        assert list(rows.rows()) == [  # type: ignore[attr-defined]
            ({"id": 1, "doc": DOC_BEFORE}, {"id": 1, "doc": DOC_AFTER}),
            ({"id": 2, "doc": {"q": 1}}, {"id": 2, "doc": "s"}),
            ({"id": 3, "doc": [0]}, {"id": 3, "doc": None}),
        ]

    def test_partial_bits_count_json_columns_only(self) -> None:
        # (id INT, j1 JSON, name VARCHAR(10), j2 JSON): partial bit 0 is j1, bit 1 is j2.
        parser = mysql8_parser()
        columns = [
            ev.Col(ev.T_LONG, nullable=False),
            ev.Col(ev.T_JSON, b"\x04"),
            ev.Col(ev.T_VARCHAR, ev.u16(40)),
            ev.Col(ev.T_JSON, b"\x04"),
        ]
        optional = (
            ev.opt_signedness([False])
            + ev.opt_default_charset(ev.UTF8MB4_0900_AI_CI)
            + ev.opt_column_names(["id", "j1", "name", "j2"])
        )
        table = ev.table_map(202, "shop", "two", columns, optional=optional)
        parser.parse(ev.event(ev.TABLE_MAP, table), 200)
        before_values = [
            ev.int_le(5, 4),
            ev.json_column(ev.jsonb([9])),
            ev.varchar("ab", 40),
            ev.json_column(ev.jsonb(DOC_BEFORE)),
        ]
        after_values = [
            ev.int_le(5, 4),
            ev.json_column(ev.jsonb([10])),  # j1: full value, partial bit 0
            ev.varchar("cd", 40),
            ev.json_diff_vector(THREE_DIFFS),  # j2: diff, partial bit 1
        ]
        before = ev.row_image(before_values)
        after = ev.partial_after_image(after_values, value_options=1, partial_bits=[False, True])
        body = ev.rows_v2(ev.PARTIAL_UPDATE_ROWS, 202, 4, before + after)
        rows = parser.parse(ev.event(ev.PARTIAL_UPDATE_ROWS, body), 300)
        assert list(rows.rows()) == [  # type: ignore[attr-defined]
            (
                {"id": 5, "j1": [9], "name": "ab", "j2": DOC_BEFORE},
                {"id": 5, "j1": [10], "name": "cd", "j2": DOC_AFTER},
            )
        ]

    def test_minimal_before_image_keeps_every_diff(self) -> None:
        # binlog_row_image=MINIMAL: the before image has only the key, so there is no base
        # document; the after value must still carry all three diffs.
        parser = docs_parser()
        images = ev.row_image([ev.int_le(1, 4)]) + bytes.fromhex(AFTER_IMAGE_HEX)
        rows = parser.parse(
            partial_rows(images, present=[True, False], present_after=[True, True]), 300
        )
        [(before, after)] = list(rows.rows())  # type: ignore[attr-defined]
        assert before == {"id": 1}
        assert after["id"] == 1
        update = after["doc"]
        assert isinstance(update, JsonPartialUpdate)
        assert [(d.operation, d.path, d.value) for d in update.diffs] == [
            (JsonDiffOp.REPLACE, "$.a", 2),
            (JsonDiffOp.INSERT, "$.d", True),
            (JsonDiffOp.REMOVE, "$.c", None),
        ]


# ======================================================================================
# 9. Large binary-JSON containers (> 64 KiB, u32 offsets) inside a row
# ======================================================================================


def test_large_json_containers_in_a_row() -> None:
    parser = docs_parser()
    big_object = {
        "big": "x" * 70_000,
        "n": 100_000,  # INT32: inlined in a large container
        "neg": -100_000,
        "small": -5,  # INT16: inlined
        "arr": [1, 2**40, "s", False, None],
        "nested": {"k": "v", "t": True},
        "pi": 3.25,
    }
    big_array = [1, -70_000, "z" * 66_000, None, {"deep": ["é" * 3]}]
    object_doc = ev.jsonb(big_object)
    array_doc = ev.jsonb(big_array)
    assert object_doc[0] == ev.JSONB_LARGE_OBJECT and len(object_doc) > 65_536
    assert array_doc[0] == ev.JSONB_LARGE_ARRAY and len(array_doc) > 65_536
    images = ev.row_image([ev.int_le(1, 4), ev.json_column(object_doc)]) + ev.row_image(
        [ev.int_le(2, 4), ev.json_column(array_doc)]
    )
    body = ev.rows_v2(ev.WRITE_ROWS, DOCS_ID, 2, images)
    rows = parser.parse(ev.event(ev.WRITE_ROWS, body), 300)
    assert list(rows.rows()) == [  # type: ignore[attr-defined]
        (None, {"id": 1, "doc": big_object}),
        (None, {"id": 2, "doc": big_array}),
    ]


# ======================================================================================
# 10. ROWS_QUERY, XA_PREPARE, INTVAR, RAND, USER_VAR, XID, QUERY status variables
# ======================================================================================


class TestStatementEvents:
    def test_rows_query_ignores_its_truncated_length_byte(self) -> None:
        parser = mysql8_parser()
        statement = "INSERT INTO shop.orders VALUES " + ", ".join(
            f"({i}, 'n{i}')" for i in range(40)
        )
        assert len(statement) > 255
        event = parser.parse(ev.event(ev.ROWS_QUERY, ev.rows_query_body(statement)), FIRST_POS)
        assert isinstance(event, RowsQueryEvent)
        assert event.query == statement

    def test_xa_prepare(self) -> None:
        parser = mysql8_parser()
        body = ev.xa_prepare_body(False, 1, b"gtrid-1", b"bq")
        event = parser.parse(ev.event(ev.XA_PREPARE, body), FIRST_POS)
        assert isinstance(event, XaPrepareEvent)
        assert (event.one_phase, event.format_id, event.gtrid, event.bqual) == (
            False,
            1,
            b"gtrid-1",
            b"bq",
        )

    def test_intvar_rand_xid(self) -> None:
        parser = mysql8_parser()
        intvar, rand, xid = parse_all(
            parser,
            [
                ev.event(ev.INTVAR, ev.intvar_body(2, 42)),
                ev.event(ev.RAND, ev.rand_body(2**63 + 5, 12345)),
                ev.event(ev.XID, ev.xid_body(2**64 - 2)),
            ],
        )
        assert isinstance(intvar, IntvarEvent)
        assert (intvar.kind, intvar.kind_name, intvar.value) == (2, "INSERT_ID", 42)
        assert isinstance(rand, RandEvent)
        assert (rand.seed1, rand.seed2) == (2**63 + 5, 12345)
        assert isinstance(xid, XidEvent)
        assert xid.xid == 2**64 - 2

    def test_user_var_values(self) -> None:
        parser = mysql8_parser()
        bodies = [
            ev.user_var_body("s", ev.USER_VAR_STRING, "héllo".encode(), flags=0),
            ev.user_var_body("i", ev.USER_VAR_INT, ev.int_le(-5, 8), charset=63, flags=0),
            ev.user_var_body("u", ev.USER_VAR_INT, ev.u64(2**64 - 1), charset=63, flags=1),
            ev.user_var_body("old", ev.USER_VAR_INT, ev.int_le(-9, 8), charset=63),  # no flags
            ev.user_var_body("r", ev.USER_VAR_REAL, struct.pack("<d", 2.5), charset=63),
            ev.user_var_body(
                "d",
                ev.USER_VAR_DECIMAL,
                bytes([5, 3]) + ev.decimal_bin("-12.345", 5, 3),
                charset=63,
                flags=0,
            ),
            ev.user_var_body("n"),
        ]
        events = parse_all(parser, [ev.event(ev.USER_VAR, b) for b in bodies])
        assert all(isinstance(e, UserVarEvent) for e in events)
        got = {e.name: e for e in events}  # type: ignore[attr-defined]
        assert (got["s"].value_type, got["s"].charset, got["s"].value) == (
            0,
            255,
            "héllo".encode(),
        )
        assert got["i"].value == -5
        assert got["u"].value == 2**64 - 1
        assert got["u"].flags == 1
        assert got["old"].value == -9
        assert got["r"].value == 2.5
        assert got["d"].value == Decimal("-12.345")
        assert str(got["d"].value) == "-12.345"
        assert got["n"].is_null and got["n"].value is None
        assert not got["s"].is_null

    ALL_STATUS = (
        ev.q_flags2(0x4000)
        + ev.q_sql_mode(1168113696)
        + ev.q_catalog_nz("std")
        + ev.q_auto_increment(2, 3)
        + ev.q_charset(33, 8, 255)
        + ev.q_time_zone("Europe/Paris")
        + ev.q_lc_time_names(1)
        + ev.q_charset_database(255)
        + ev.q_table_map_for_update(5)
        + ev.q_invoker("root", "localhost")
        + ev.q_updated_db_names(["shop", "crm"])
        + ev.q_microseconds(123456)
        + ev.q_explicit_defaults_for_timestamp(1)
        + ev.q_ddl_logged_with_xid(77)
        + ev.q_default_collation_for_utf8mb4(255)
        + ev.q_sql_require_primary_key(1)
        + ev.q_default_table_encryption(0)
    )
    ALL_DECODED: ClassVar[dict[str, object]] = {
        "flags2": 0x4000,
        "sql_mode": 1168113696,
        "catalog": "std",
        "auto_increment": [2, 3],
        "charset": [33, 8, 255],
        "time_zone": "Europe/Paris",
        "lc_time_names": 1,
        "charset_database": 255,
        "table_map_for_update": 5,
        "invoker": {"user": "root", "host": "localhost"},
        "updated_db_names": ["shop", "crm"],
        "microseconds": 123456,
        "explicit_defaults_for_timestamp": 1,
        "ddl_logged_with_xid": 77,
        "default_collation_for_utf8mb4": 255,
        "sql_require_primary_key": 1,
        "default_table_encryption": 0,
    }

    def test_query_with_every_mysql_status_variable(self) -> None:
        parser = mysql8_parser()
        query = "ALTER TABLE orders ADD COLUMN note TEXT /* é */"
        body = ev.query_body(query, schema="shop", status=self.ALL_STATUS, exec_time=3)
        event = parser.parse(ev.event(ev.QUERY, body), FIRST_POS)
        assert isinstance(event, QueryEvent)
        assert event.status_vars == self.ALL_DECODED
        assert (event.schema, event.query, event.exec_time, event.thread_id) == (
            "shop",
            query,
            3,
            77,
        )

    def test_unknown_status_code_in_the_middle_stops_decoding_there(self) -> None:
        parser = mysql8_parser()
        status = (
            ev.q_flags2(0x4000)
            + ev.q_sql_mode(1168113696)
            + ev.q_catalog_nz("std")
            + ev.q_auto_increment(2, 3)
            + bytes([99, 0xAA, 0xBB, 0xCC])  # a code this reader does not know
            + ev.q_charset(33, 8, 255)
            + ev.q_time_zone("UTC")
            + ev.q_sql_require_primary_key(1)
        )
        body = ev.query_body("COMMIT", schema="shop", status=status)
        event = parser.parse(ev.event(ev.QUERY, body), FIRST_POS)
        assert isinstance(event, QueryEvent)
        assert event.query == "COMMIT"
        assert event.schema == "shop"
        assert event.status_vars["flags2"] == 0x4000
        assert event.status_vars["sql_mode"] == 1168113696
        assert event.status_vars["catalog"] == "std"
        assert event.status_vars["auto_increment"] == [2, 3]
        for later in ("charset", "time_zone", "sql_require_primary_key"):
            assert later not in event.status_vars
        assert event.status_vars["unknown_status_code"] == 99


# ======================================================================================
# 11. Unknown event types
# ======================================================================================


class TestUnknownEvent:
    def test_unknown_type_without_ignorable_flag_is_refused(self) -> None:
        parser = mysql8_parser()
        with pytest.raises(UnknownEventError) as info:
            parser.parse(ev.event(99, b"\x01\x02\x03"), 4242)
        assert info.value.context["type_code"] == 99
        assert info.value.context["offset"] == 4242
        assert "99" in str(info.value) and "offset=4242" in str(info.value)

    def test_unknown_type_with_ignorable_flag_is_opaque(self) -> None:
        parser = mysql8_parser()
        event = parser.parse(ev.event(99, b"\x01\x02\x03", flags=ev.LOG_EVENT_IGNORABLE_F), 4242)
        assert isinstance(event, OpaqueEvent)
        assert event.body == b"\x01\x02\x03"
        assert event.header.type_code == 99
        assert event.header.next_pos == 4242 + 19 + 3 + 4


# ======================================================================================
# 12. Column values MySQL writes and MariaDB does not
# ======================================================================================


class TestMysqlOnlyValues:
    def test_json_vector_temporal_and_zero_values(self) -> None:
        # (id INT, j JSON, v VECTOR(3), ts TIMESTAMP(3), dt DATETIME(4), d DATE,
        #  zdt DATETIME, zdt4 DATETIME(4), zts TIMESTAMP(3), zd DATE)
        # Temporal metadata is the fsp (Field_*::do_save_field_metadata); VECTOR's is 4.
        names = ["id", "j", "v", "ts", "dt", "d", "zdt", "zdt4", "zts", "zd"]
        columns = [
            ev.Col(ev.T_LONG, nullable=False),
            ev.Col(ev.T_JSON, b"\x04"),
            ev.Col(ev.T_VECTOR, b"\x04"),
            ev.Col(ev.T_TIMESTAMP2, b"\x03"),
            ev.Col(ev.T_DATETIME2, b"\x04"),
            ev.Col(ev.T_DATE),
            ev.Col(ev.T_DATETIME2, b"\x00"),
            ev.Col(ev.T_DATETIME2, b"\x04"),
            ev.Col(ev.T_TIMESTAMP2, b"\x03"),
            ev.Col(ev.T_DATE),
        ]
        optional = (
            ev.opt_signedness([False])
            + ev.opt_column_names(names)
            + ev.opt_vector_dimensionality([3])
        )
        parser = mysql8_parser(server_version="9.1.0")
        tm = ev.table_map(300, "shop", "mysql_only", columns, optional=optional)
        parser.parse(ev.event(ev.TABLE_MAP, tm), FIRST_POS)
        doc = {
            "price": ev.json_decimal("3.14", 3, 2),
            "at": ev.json_datetime(2024, 5, 6, 7, 8, 9, 123456),
            "n": 1,
        }
        values = [
            ev.int_le(1, 4),
            ev.json_column(ev.jsonb(doc)),
            ev.vector_column([0.1, -2.5, 3.0]),
            ev.timestamp2(1_700_000_000, 123_000, 3),
            ev.datetime2(2024, 2, 29, 13, 45, 7, 123_400, 4),
            ev.date(2024, 2, 29),
            ev.datetime2(0, 0, 0),
            ev.datetime2(0, 0, 0, fsp=4),
            ev.timestamp2(0, 0, 3),
            ev.date(0, 0, 0),
        ]
        body = ev.rows_v2(ev.WRITE_ROWS, 300, len(columns), ev.row_image(values))
        rows = parser.parse(ev.event(ev.WRITE_ROWS, body), 400)
        [(_, row)] = list(rows.rows())  # type: ignore[attr-defined]
        assert row["id"] == 1
        assert row["j"] == {"price": Decimal("3.14"), "at": "2024-05-06 07:08:09.123456", "n": 1}
        assert isinstance(row["j"]["at"], JsonTemporal) and row["j"]["at"].mysql_type == 12
        assert str(row["j"]["price"]) == "3.14"
        assert row["v"] == [0.1, -2.5, 3.0]
        assert row["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123_000, tzinfo=UTC)
        assert row["dt"] == dt.datetime(2024, 2, 29, 13, 45, 7, 123_400)
        assert row["d"] == dt.date(2024, 2, 29)
        assert row["zdt"] == "0000-00-00 00:00:00"
        assert row["zdt4"] == "0000-00-00 00:00:00.0000"
        assert row["zts"] == "0000-00-00 00:00:00.000"
        assert row["zd"] == "0000-00-00"

    @pytest.mark.parametrize("charset_field", ["default", "per_column"])
    def test_vector_takes_a_charset_slot_before_later_string_columns(
        self, charset_field: str
    ) -> None:
        # CREATE TABLE vec (id INT, v VECTOR(2), name VARCHAR(20)) DEFAULT CHARSET utf8mb4
        # on MySQL 9. Table_map_log_event::init_charset_field gives a charset slot to every
        # column for which is_character_type(binlog_type()) holds, and MySQL 9.0 added
        # MYSQL_TYPE_VECTOR to that list (sql/log_event.cc: STRING, VAR_STRING, VARCHAR,
        # VECTOR, BLOB - as quoted from the 9.0.0 sources in a source walk-through; the 9.x
        # file itself is not in the searchable corpus). So the binary VECTOR is character
        # column #0 (collation 63) and `name` is #1 (255).
        if charset_field == "default":
            charsets = ev.opt_default_charset(ev.UTF8MB4_0900_AI_CI, {0: ev.BINARY})
        else:
            charsets = ev.opt_column_charset([ev.BINARY, ev.UTF8MB4_0900_AI_CI])
        columns = [
            ev.Col(ev.T_LONG, nullable=False),
            ev.Col(ev.T_VECTOR, b"\x04"),
            ev.Col(ev.T_VARCHAR, ev.u16(80)),
        ]
        optional = (
            ev.opt_signedness([False])
            + charsets
            + ev.opt_column_names(["id", "v", "name"])
            + ev.opt_vector_dimensionality([2])
        )
        parser = mysql8_parser(server_version="9.1.0")
        table = ev.table_map(302, "shop", "vec", columns, optional=optional)
        parser.parse(ev.event(ev.TABLE_MAP, table), FIRST_POS)
        values = [ev.int_le(1, 4), ev.vector_column([1.0, 2.0]), ev.varchar("héllo", 80)]
        body = ev.rows_v2(ev.WRITE_ROWS, 302, 3, ev.row_image(values))
        rows = parser.parse(ev.event(ev.WRITE_ROWS, body), 400)
        assert list(rows.rows()) == [  # type: ignore[attr-defined]
            (None, {"id": 1, "v": [1.0, 2.0], "name": "héllo"})
        ]

    # (fsp, negative, h, m, s, microseconds)
    TIME_CASES: ClassVar[list[list[tuple[int, bool, int, int, int, int]]]] = [
        [
            (1, True, 0, 0, 0, 100_000),  # -00:00:00.1
            (2, True, 0, 0, 1, 10_000),  # -00:00:01.01
            (3, True, 838, 59, 58, 999_000),  # -838:59:58.999
            (4, True, 0, 0, 0, 100),  # -00:00:00.0001
            (5, True, 1, 0, 0, 10),  # -01:00:00.00001
            (6, True, 12, 34, 56, 789_012),  # -12:34:56.789012
        ],
        [
            (1, True, 0, 0, 1, 0),  # -00:00:01.0: no borrow when the fraction is 0
            (2, True, 0, 0, 0, 990_000),  # -00:00:00.99
            (3, True, 0, 0, 5, 0),  # -00:00:05.000
            (4, True, 23, 59, 59, 999_900),  # -23:59:59.9999
            (5, True, 0, 0, 0, 10),  # -00:00:00.00001
            (6, False, 12, 34, 56, 789_012),  # 12:34:56.789012
        ],
    ]

    def test_negative_time2_with_every_fsp(self) -> None:
        parser = mysql8_parser()
        columns = [ev.Col(ev.T_TIME2, bytes([fsp])) for fsp in range(1, 7)]
        names = [f"t{fsp}" for fsp in range(1, 7)]
        tm = ev.table_map(301, "shop", "times", columns, optional=ev.opt_column_names(names))
        parser.parse(ev.event(ev.TABLE_MAP, tm), FIRST_POS)
        images = b"".join(
            ev.row_image(
                [ev.time2(h, m, s, us, fsp, negative=neg) for fsp, neg, h, m, s, us in case]
            )
            for case in self.TIME_CASES
        )
        rows = parser.parse(ev.event(ev.WRITE_ROWS, ev.rows_v2(ev.WRITE_ROWS, 301, 6, images)), 500)
        decoded = [after for _, after in rows.rows()]  # type: ignore[attr-defined]
        for case, row in zip(self.TIME_CASES, decoded, strict=True):
            for fsp, neg, h, m, s, us in case:
                delta = dt.timedelta(hours=h, minutes=m, seconds=s, microseconds=us)
                assert row[f"t{fsp}"] == (-delta if neg else delta), (fsp, neg, h, m, s, us)

    def test_time2_fixture_bytes_match_mysql_examples(self) -> None:
        # Disk values from the table in my_time_packed_from_binary (mysys/my_time.cc).
        assert ev.time2(0, 0, 0, 10_000, 2, negative=True).hex() == "7fffffff"
        assert ev.time2(0, 0, 0, 990_000, 2, negative=True).hex() == "7fffff9d"
        assert ev.time2(0, 0, 1, 0, 2, negative=True).hex() == "7fffff00"
        assert ev.time2(0, 0, 1, 10_000, 2, negative=True).hex() == "7ffffeff"
        assert ev.time2(0, 0, 1, 100_000, 2, negative=True).hex() == "7ffffef6"
