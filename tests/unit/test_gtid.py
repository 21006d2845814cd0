"""Tests for replicad.binlog.gtid: MySQL GTIDs and GTID sets, GTID_TAGGED events,
MariaDB GTIDs, positions and GTID_LIST events."""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import timedelta
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicad.binlog.gtid import (
    GNO_END,
    GNO_MAX,
    GTID_LIST_FLAG_UNTIL_REACHED,
    Gtid,
    GtidListInfo,
    GtidSet,
    MariaGtid,
    MariaGtidPosition,
    TaggedGtidInfo,
    _encode_varint,
    _encode_varuint,
    _read_varuint,
    decode_gtid_list,
    decode_gtid_tagged,
    encode_gtid_tagged,
)
from replicad.errors import GtidError

pytestmark = pytest.mark.unit

FUZZ = settings(
    deadline=timedelta(milliseconds=500),
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow],
)

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "4f22fa47-71ca-11e1-9e33-c80aa9429562"
UUID1 = UUID(U1)
UUID1_BYTES = bytes.fromhex("3e11fa4771ca11e19e33c80aa9429562")


def le64(value: int) -> bytes:
    return struct.pack("<Q", value)


# --------------------------------------------------------------------------
# Gtid
# --------------------------------------------------------------------------


class TestGtid:
    def test_untagged_round_trip(self) -> None:
        gtid = Gtid.parse(f"{U1}:23")
        assert gtid == Gtid(UUID1, "", 23)
        assert str(gtid) == f"{U1}:23"

    def test_tagged_is_normalised_to_lower_case(self) -> None:
        gtid = Gtid.parse(f" {U1.upper()} : Tag_1 : 23 ")
        assert gtid.tag == "tag_1"
        assert str(gtid) == f"{U1}:tag_1:23"
        assert gtid == Gtid(UUID1, "TAG_1", 23)

    def test_uuid_without_hyphens(self) -> None:
        assert Gtid.parse("3e11fa4771ca11e19e33c80aa9429562:1").uuid == UUID1

    @pytest.mark.parametrize(
        ("text", "reason"),
        [
            (f"{U1}:0", "out of range"),
            (f"{U1}:{2**63 - 1}", "out of range"),
            (f"{U1}:x", "malformed GTID transaction number"),
            (f"{U1}::5", "empty tag"),
            (f"{U1}:1tag:5", "malformed GTID tag"),
            (f"{U1}:{'a' * 33}:5", "malformed GTID tag"),
            ("{3e11fa47-71ca-11e1-9e33-c80aa9429562}:5", "malformed UUID"),
            ("3e11fa47-71ca-11e1-9e33:5", "malformed UUID"),
            (U1, "expected uuid:gno"),
        ],
    )
    def test_rejects(self, text: str, reason: str) -> None:
        with pytest.raises(GtidError, match=reason):
            Gtid.parse(text)

    def test_constructor_validates(self) -> None:
        with pytest.raises(GtidError, match="out of range"):
            Gtid(UUID1, "", 0)
        with pytest.raises(GtidError, match="malformed GTID tag"):
            Gtid(UUID1, "a-b", 1)
        assert Gtid(UUID1, "", GNO_MAX).gno == 2**63 - 2


# --------------------------------------------------------------------------
# GtidSet text form
# --------------------------------------------------------------------------


class TestGtidSetText:
    def test_empty(self) -> None:
        for text in ("", "  \n", ",", " , ,"):
            gs = GtidSet.parse(text)
            assert gs.is_empty()
            assert not gs
            assert str(gs) == ""
            assert gs == GtidSet()

    def test_gtid_executed_output(self) -> None:
        # As @@gtid_executed prints it: ",\n" between UUIDs, any UUID order.
        text = f"{U2}:1-3:5,\n{U1}:1-10:20"
        gs = GtidSet.parse(text)
        assert str(gs) == f"{U1}:1-10:20,{U2}:1-3:5"
        assert gs.format(",\n") == f"{U1}:1-10:20,\n{U2}:1-3:5"
        assert gs.intervals(UUID1) == ((1, 11), (20, 21))
        assert gs.intervals(U2) == ((1, 4), (5, 6))

    def test_tags_apply_to_following_intervals(self) -> None:
        gs = GtidSet.parse(f"{U1}:1-5:Tag1:1-3:7:_b:9")
        assert gs.intervals(UUID1) == ((1, 6),)
        assert gs.intervals(UUID1, "tag1") == ((1, 4), (7, 8))
        assert gs.intervals(UUID1, "_b") == ((9, 10),)
        assert str(gs) == f"{U1}:1-5:_b:9:tag1:1-3:7"

    def test_untagged_after_tagged_in_text_still_prints_first(self) -> None:
        gs = GtidSet.parse(f"{U1}:t:4,{U1}:1")
        assert str(gs) == f"{U1}:1:t:4"

    def test_whitespace_around_separators(self) -> None:
        gs = GtidSet.parse(f"  {U1} : 1 - 3 : x : 4 ,\n\t{U2}:7  ")
        assert str(gs) == f"{U1}:1-3:x:4,{U2}:7"

    def test_merging(self) -> None:
        assert str(GtidSet.parse(f"{U1}:1-3:4-5")) == f"{U1}:1-5"
        assert str(GtidSet.parse(f"{U1}:4-5,{U1}:1-3")) == f"{U1}:1-5"
        assert str(GtidSet.parse(f"{U1}:1-10:3-4:10-12:14")) == f"{U1}:1-12:14"

    def test_uuid_without_hyphens_and_upper_case(self) -> None:
        gs = GtidSet.parse("3E11FA4771CA11E19E33C80AA9429562:1")
        assert str(gs) == f"{U1}:1"

    def test_uuid_with_only_a_tag_or_nothing_adds_nothing(self) -> None:
        assert GtidSet.parse(f"{U1}").is_empty()
        assert GtidSet.parse(f"{U1}:tag").is_empty()

    def test_largest_gno(self) -> None:
        gs = GtidSet.parse(f"{U1}:{GNO_MAX}")
        assert gs.intervals(UUID1) == ((GNO_MAX, GNO_END),)

    @pytest.mark.parametrize(
        ("text", "reason", "value", "offset"),
        [
            (f"{U1}:0", "GTID transaction number 0 is not valid", "0", 37),
            (f"{U1}:5-3", "GTID interval ends before it starts", "5-3", 37),
            (f"{U1}:1-{2**63 - 1}", "out of range", str(2**63 - 1), 39),
            (f"{U1}:1-{'9' * 40}", "out of range", "9" * 40, 39),
            (f"{U1}:07", "leading zeros", "07", 37),
            (f"{U1}:1tag:2", "unexpected character", "tag:2", 38),
            (f"{U1}:{'t' * 33}:2", "malformed GTID tag", "t" * 33, 37),
            (f"{U1}:ta-g:2", "unexpected character", "-g:2", 39),
            (f"{U1}::2", "expected a GTID interval or tag", ":2", 37),
            (f"{U1}:", "expected a GTID interval or tag", "<end of text>", 37),
            ("3e11fa47-71ca-11e1-9e33-c80aa942956:1", "malformed UUID", None, 0),
            ("xyz", "malformed UUID", "xyz", 0),
            (f"{U1}:1,zz", "malformed UUID", "zz", 39),
            (f"{U1}:1 2", "unexpected character", "2", 39),
        ],
    )
    def test_rejects_with_location(
        self, text: str, reason: str, value: str | None, offset: int
    ) -> None:
        with pytest.raises(GtidError, match=reason) as caught:
            GtidSet.parse(text)
        if value is not None:
            assert caught.value.context["value"] == value
        assert caught.value.context["offset"] == offset

    def test_error_message_renders_context(self) -> None:
        with pytest.raises(GtidError) as caught:
            GtidSet.parse(f"{U1}:0")
        assert str(caught.value) == ("GTID transaction number 0 is not valid (value=0, offset=37)")
        assert isinstance(caught.value, ValueError)


# --------------------------------------------------------------------------
# GtidSet binary form
# --------------------------------------------------------------------------


# PREVIOUS_GTIDS body for U1:1-5, written out from the layout in
# Gtid_set::encode: n_sids, then uuid | n_intervals | start | end (exclusive).
UNTAGGED_1_5 = (
    bytes.fromhex("0100000000000000")  # one TSID; top byte 0 = untagged format
    + UUID1_BYTES
    + bytes.fromhex("0100000000000000")  # one interval
    + bytes.fromhex("0100000000000000")  # start 1
    + bytes.fromhex("0600000000000000")  # end 6, exclusive: 1-5
)

# U1:1-5:tag1:1-3:7 in the tagged format (MySQL 8.3+).
TAGGED = (
    bytes.fromhex("01")  # byte 0: format 1 (tagged)
    + bytes.fromhex("020000000000")  # bytes 1-6: two TSIDs, 48-bit LE
    + bytes.fromhex("01")  # byte 7: format 1 again
    + UUID1_BYTES
    + bytes.fromhex("00")  # tag: varint length 0 (untagged entry)
    + le64(1)
    + le64(1)
    + le64(6)
    + UUID1_BYTES
    + bytes.fromhex("08")  # tag: varint length 4 is 4 << 1
    + b"tag1"
    + le64(2)
    + le64(1)
    + le64(4)  # 1-3
    + le64(7)
    + le64(8)  # 7
)


class TestGtidSetBinary:
    def test_untagged_literal(self) -> None:
        gs = GtidSet.parse(f"{U1}:1-5")
        assert gs.encode() == UNTAGGED_1_5
        assert GtidSet.decode(UNTAGGED_1_5) == gs
        assert GtidSet.decode(memoryview(UNTAGGED_1_5)) == gs

    def test_tagged_literal(self) -> None:
        gs = GtidSet.parse(f"{U1}:1-5:tag1:1-3:7")
        assert gs.encode() == TAGGED
        assert GtidSet.decode(TAGGED) == gs

    def test_empty_set(self) -> None:
        assert GtidSet().encode() == bytes(8)
        assert GtidSet.decode(bytes(8)).is_empty()
        # An empty tagged header is valid too.
        assert GtidSet.decode(bytes.fromhex("0100000000000001")).is_empty()

    def test_duplicate_entries_are_merged(self) -> None:
        # MySQL maps a repeated TSID to the same sidno and merges.
        body = (
            le64(2)
            + UUID1_BYTES
            + le64(1)
            + le64(1)
            + le64(3)
            + UUID1_BYTES
            + le64(1)
            + le64(3)
            + le64(5)
        )
        assert str(GtidSet.decode(body)) == f"{U1}:1-4"

    @pytest.mark.parametrize(
        ("body", "reason", "offset"),
        [
            (bytes(7), "shorter than its 8-byte header", 0),
            (bytes.fromhex("0000000000000002"), "unknown GTID set encoding format", 7),
            (le64(1) + UUID1_BYTES[:10], "more entries than its bytes can hold", 0),
            (
                le64(1) + UUID1_BYTES + le64(2) + le64(1) + le64(6),
                "more intervals than the remaining bytes hold",
                24,
            ),
            (
                le64(1) + UUID1_BYTES + le64(1) + le64(5) + le64(5),
                "empty, overlapping or unordered",
                32,
            ),
            (
                le64(1) + UUID1_BYTES + le64(1) + le64(0) + le64(5),
                "empty, overlapping or unordered",
                32,
            ),
            (
                le64(1) + UUID1_BYTES + le64(2) + le64(1) + le64(5) + le64(5) + le64(6),
                "empty, overlapping or unordered",
                48,
            ),
            (
                le64(1) + UUID1_BYTES + le64(1) + le64(1) + le64(2**63),
                "empty, overlapping or unordered",
                32,
            ),
            (UNTAGGED_1_5 + b"\x00", "trailing bytes", 48),
            (
                bytes.fromhex("0101000000000001") + UUID1_BYTES + b"\x42" + le64(0),
                "longer than 32 characters",
                24,
            ),
            (
                bytes.fromhex("0101000000000001") + UUID1_BYTES + b"\x06a-b" + le64(0),
                "malformed GTID tag",
                25,
            ),
        ],
    )
    def test_decode_rejects(self, body: bytes, reason: str, offset: int) -> None:
        with pytest.raises(GtidError, match=reason) as caught:
            GtidSet.decode(body)
        assert caught.value.context["offset"] == offset


# --------------------------------------------------------------------------
# GtidSet algebra
# --------------------------------------------------------------------------


class TestGtidSetAlgebra:
    def test_contains_and_with_gtid(self) -> None:
        gs = GtidSet.parse(f"{U1}:1-3:7:t:5")
        assert Gtid(UUID1, "", 3) in gs
        assert Gtid(UUID1, "", 4) not in gs
        assert Gtid(UUID1, "t", 5) in gs
        assert Gtid(UUID1, "t", 1) not in gs
        assert Gtid(UUID(U2), "", 1) not in gs
        assert "not a gtid" not in gs
        grown = gs.with_gtid(Gtid(UUID1, "", 4))
        assert str(grown) == f"{U1}:1-4:7:t:5"
        assert str(gs) == f"{U1}:1-3:7:t:5"  # the original is untouched
        assert grown.with_gtid(Gtid(UUID1, "", 5)).with_gtid(Gtid(UUID1, "", 6)) == GtidSet.parse(
            f"{U1}:1-7:t:5"
        )

    def test_union_and_superset(self) -> None:
        a = GtidSet.parse(f"{U1}:1-3")
        b = GtidSet.parse(f"{U1}:4-5,{U2}:1")
        assert str(a | b) == f"{U1}:1-5,{U2}:1"
        assert a | b == b.union(a)
        assert (a | b) >= a
        assert a <= (a | b)
        assert not a >= b
        assert GtidSet.parse(f"{U1}:1-10").issuperset(GtidSet.parse(f"{U1}:2-3:5"))
        assert not GtidSet.parse(f"{U1}:1-3:5-9").issuperset(GtidSet.parse(f"{U1}:3-5"))
        assert GtidSet() <= a

    def test_iteration_and_hash(self) -> None:
        gs = GtidSet.parse(f"{U2}:1,{U1}:x:1-2:4,{U1}:9")
        assert list(gs) == [
            (UUID1, "", 9, 10),
            (UUID1, "x", 1, 3),
            (UUID1, "x", 4, 5),
            (UUID(U2), "", 1, 2),
        ]
        same = GtidSet(
            {
                (UUID1, "X"): [(4, 5), (1, 3)],
                (UUID1, ""): [(9, 10)],
                (UUID(U2), ""): [(1, 2)],
            }
        )
        assert same == gs
        assert hash(same) == hash(gs)
        assert len({gs, same}) == 1

    def test_constructor_validates_intervals(self) -> None:
        with pytest.raises(GtidError, match="1 <= start < end"):
            GtidSet({(UUID1, ""): [(3, 3)]})
        with pytest.raises(GtidError, match="1 <= start < end"):
            GtidSet({(UUID1, ""): [(1, GNO_END + 1)]})
        with pytest.raises(GtidError, match="malformed GTID tag"):
            GtidSet({(UUID1, "9x"): [(1, 2)]})


# --------------------------------------------------------------------------
# Property-based tests for GtidSet
# --------------------------------------------------------------------------

FIXED_UUIDS = [UUID1, UUID(U2), UUID("00000000-0000-0000-0000-000000000001")]
uuids = st.one_of(st.sampled_from(FIXED_UUIDS), st.uuids())
tags = st.sampled_from(["", "", "a", "tag1", "_x", "z" * 32])
gnos = st.one_of(st.integers(1, 60), st.integers(GNO_MAX - 60, GNO_MAX), st.integers(1, GNO_MAX))


@st.composite
def gno_intervals(draw: st.DrawFn) -> tuple[int, int]:
    start = draw(gnos)
    length = draw(st.integers(1, 20))
    return (start, min(start + length, GNO_END))


def gtid_sets(
    tag_strategy: st.SearchStrategy[str] = tags,
) -> st.SearchStrategy[GtidSet]:
    return st.dictionaries(
        st.tuples(uuids, tag_strategy),
        st.lists(gno_intervals(), min_size=1, max_size=5),
        max_size=5,
    ).map(GtidSet)


# A small universe where a Python set of (key, gno) is a usable model.
small_keys = st.tuples(st.sampled_from(FIXED_UUIDS[:2]), st.sampled_from(["", "t"]))
small_models = st.sets(st.tuples(small_keys, st.integers(1, 40)), max_size=60)


def from_model(model: set[tuple[tuple[UUID, str], int]]) -> GtidSet:
    return GtidSet.from_gtids(Gtid(sid, tag, gno) for (sid, tag), gno in model)


def to_model(gs: GtidSet) -> set[tuple[tuple[UUID, str], int]]:
    return {((sid, tag), gno) for sid, tag, s, e in gs for gno in range(s, e)}


class TestGtidSetProperties:
    @given(gtid_sets())
    def test_text_round_trip(self, gs: GtidSet) -> None:
        assert GtidSet.parse(str(gs)) == gs
        assert GtidSet.parse(gs.format(",\n")) == gs

    @given(gtid_sets())
    def test_binary_round_trip(self, gs: GtidSet) -> None:
        encoded = gs.encode()
        assert GtidSet.decode(encoded) == gs
        tagged = any(tag for _, tag, _, _ in gs)
        assert encoded[7] == (1 if tagged else 0)

    @given(gtid_sets(st.just("")))
    def test_untagged_binary_round_trip(self, gs: GtidSet) -> None:
        encoded = gs.encode()
        assert int.from_bytes(encoded[:8], "little") == len({sid for sid, *_ in gs})
        assert GtidSet.decode(encoded) == gs

    @given(gtid_sets(), gtid_sets())
    def test_union_commutes_and_contains_both(self, a: GtidSet, b: GtidSet) -> None:
        union = a | b
        assert union == b | a
        assert union >= a
        assert union >= b
        for sid, tag, start, end in [*a, *b]:
            assert Gtid(sid, tag, start) in union
            assert Gtid(sid, tag, end - 1) in union

    @given(small_models)
    def test_representation_is_canonical(self, model: set[tuple[tuple[UUID, str], int]]) -> None:
        gs = from_model(model)
        assert to_model(gs) == model
        previous: dict[tuple[UUID, str], int] = {}
        for sid, tag, start, end in gs:
            assert start < end
            # Sorted, and never touching: touching intervals must be merged.
            assert start > previous.get((sid, tag), 0)
            previous[(sid, tag)] = end

    @given(small_models, small_models, small_keys, st.integers(1, 41))
    def test_algebra_matches_model(
        self,
        a: set[tuple[tuple[UUID, str], int]],
        b: set[tuple[tuple[UUID, str], int]],
        key: tuple[UUID, str],
        gno: int,
    ) -> None:
        sa, sb = from_model(a), from_model(b)
        assert to_model(sa | sb) == a | b
        assert sa.issuperset(sb) == (a >= b)
        assert (Gtid(key[0], key[1], gno) in sa) == ((key, gno) in a)
        assert to_model(sa.with_gtid(Gtid(key[0], key[1], gno))) == a | {(key, gno)}
        assert (sa == sb) == (a == b)


# --------------------------------------------------------------------------
# mysql::serialization varints
# --------------------------------------------------------------------------


class TestVarints:
    # Vectors from libs/mysql/serialization/readme.md (written there
    # big-endian, most significant byte first; reversed here).
    @pytest.mark.parametrize(
        ("value", "encoded"),
        [
            (0, "00"),
            (1, "02"),
            (127, "fe"),
            (128, "0102"),
            (65535, "fbff07"),
            (2**56 - 1, "7fffffffffffffff"),
            (2**56, "ff" + "00000000000000" + "01"),
            (2**64 - 1, "ff" + "ff" * 8),
        ],
    )
    def test_unsigned(self, value: int, encoded: str) -> None:
        assert _encode_varuint(value).hex() == encoded
        data = bytes.fromhex(encoded)
        assert _read_varuint(data, 0, len(data), "test") == (value, len(data))

    @pytest.mark.parametrize(
        ("value", "encoded"),
        [
            (65535, "f3ff0f"),
            (-65535, "ebff0f"),
            (-65536, "fbff0f"),
            (-1, "02"),
            (1, "04"),
        ],
    )
    def test_signed(self, value: int, encoded: str) -> None:
        assert _encode_varint(value).hex() == encoded

    @given(st.integers(0, 2**64 - 1))
    def test_unsigned_round_trip(self, value: int) -> None:
        data = _encode_varuint(value)
        assert _read_varuint(data, 0, len(data), "test") == (value, len(data))

    def test_truncated(self) -> None:
        with pytest.raises(GtidError, match="input ends inside the test"):
            _read_varuint(b"\x03\x00", 0, 2, "test")
        with pytest.raises(GtidError, match="input ends before the test"):
            _read_varuint(b"", 0, 0, "test")


# --------------------------------------------------------------------------
# GTID_TAGGED_LOG_EVENT
# --------------------------------------------------------------------------

FIXTURE_UUID = UUID("01020304-0506-0708-090a-0b0c0d0e0f80")

# Built by hand from the field list of Gtid_event::define_fields()
# (control_events.h) and the mysql::serialization message format.  Every
# number is a varint: value << 1 when it fits 7 bits, and (value << 2) | 0b01
# when it fits 14 bits, (value << 3) | 0b011 for 21 bits.
FIXTURE_TAGGED_EVENT = bytes(
    [
        0x02,  # message id = serialization format version 1 -> 1 << 1
        0x5E,  # message size 47 (includes these three header bytes) -> 47 << 1
        0x00,  # last non-ignorable field id: none, every field is ignorable
        0x00, 0x02,  # field 0 gtid_flags = 1
        0x02,  # field 1 uuid: sixteen uint8 varints, one per byte
        0x02, 0x04, 0x06, 0x08, 0x0A, 0x0C, 0x0E, 0x10,  # 01 .. 08
        0x12, 0x14, 0x16, 0x18, 0x1A, 0x1C, 0x1E,  # 09 .. 0f
        0x01, 0x02,  # 0x80 needs two bytes: (128 << 2) | 1 = 0x0201
        0x04, 0x1C,  # field 2 gno = 7, signed: zig-zag 14, then 14 << 1
        0x06, 0x04, 0x61, 0x62,  # field 3 tag: length 2, "ab"
        0x08, 0x14,  # field 4 last_committed = 5: zig-zag 10
        0x0A, 0x18,  # field 5 sequence_number = 6: zig-zag 12
        0x0C, 0xA1, 0x0F,  # field 6 immediate_commit_timestamp 1000: (1000 << 2) | 1
        # field 7 original_commit_timestamp omitted: equal to the immediate one
        0x10, 0x21, 0x03,  # field 8 transaction_length 200: (200 << 2) | 1
        0x12, 0x83, 0xD0, 0x09,  # field 9 immediate_server_version 80400: (v << 3) | 3
        0x14, 0x03, 0xC4, 0x09,  # field 10 original_server_version 80000: (v << 3) | 3
        # field 11 commit_group_ticket omitted: unset
    ]
)  # fmt: skip

FIXTURE_INFO = TaggedGtidInfo(
    flags=1,
    uuid=FIXTURE_UUID,
    gno=7,
    tag="ab",
    last_committed=5,
    sequence_number=6,
    immediate_commit_ts_us=1000,
    original_commit_ts_us=1000,
    transaction_length=200,
    immediate_server_version=80400,
    original_server_version=80000,
    commit_group_ticket=None,
)


class TestGtidTagged:
    def test_hand_built_fixture_decodes(self) -> None:
        assert len(FIXTURE_TAGGED_EVENT) == 47
        info = decode_gtid_tagged(FIXTURE_TAGGED_EVENT)
        assert info == FIXTURE_INFO
        assert str(info.gtid) == "01020304-0506-0708-090a-0b0c0d0e0f80:ab:7"

    def test_encoder_reproduces_fixture(self) -> None:
        assert encode_gtid_tagged(FIXTURE_INFO) == FIXTURE_TAGGED_EVENT

    def test_missing_optional_fields_take_server_defaults(self) -> None:
        # Only uuid (all-zero bytes) and gno = 1; size 22.
        body = bytes([0x02, 0x2C, 0x00, 0x02]) + bytes(16) + bytes([0x04, 0x04])
        info = decode_gtid_tagged(body)
        assert info == TaggedGtidInfo(flags=1, uuid=UUID(int=0), gno=1, tag="")

    def test_unknown_trailing_ignorable_fields_are_skipped(self) -> None:
        # Append field 12 (a future field) with two bytes of data nobody can
        # parse without knowing its type; the message size covers it.
        extra = bytes([0x18, 0x03, 0x07])
        body = bytearray(FIXTURE_TAGGED_EVENT + extra)
        body[1] = (47 + len(extra)) << 1
        assert decode_gtid_tagged(bytes(body)) == FIXTURE_INFO

    def test_unknown_non_ignorable_field_is_an_error(self) -> None:
        body = bytearray(FIXTURE_TAGGED_EVENT)
        body[2] = 13 << 1  # field 12 is non-ignorable: last id 12, plus one
        with pytest.raises(GtidError, match="may not ignore") as caught:
            decode_gtid_tagged(bytes(body))
        assert caught.value.context == {"value": 13, "offset": 2}
        body[2] = 12 << 1  # field 11 non-ignorable: known, fine
        assert decode_gtid_tagged(bytes(body)) == FIXTURE_INFO

    def test_size_one_short_is_tolerated_like_the_server(self) -> None:
        # The server's writer can count the size varint one byte short; its
        # reader only checks the end between fields, and so do we.
        body = bytearray(FIXTURE_TAGGED_EVENT)
        body[1] = 46 << 1
        assert decode_gtid_tagged(bytes(body)) == FIXTURE_INFO

    def test_bytes_after_the_message_are_ignored(self) -> None:
        assert decode_gtid_tagged(FIXTURE_TAGGED_EVENT + b"\xaa") == FIXTURE_INFO

    @pytest.mark.parametrize(
        ("mutate", "reason", "offset"),
        [
            (lambda b: b"\x04" + b[1:], "serialization format version", 0),
            (lambda b: b[:1] + b"\x60" + b[2:], "shorter than its declared size", 1),
            (lambda b: b[:1] + b"\x04" + b[2:], "smaller than its own header", 1),
            (lambda b: b[:30], "shorter than its declared size", 1),
            (lambda b: b[:2], "input ends before the last non-ignorable", 2),
            # Field 5's id changed to 4: field 4 appears twice.
            (lambda b: b[:31] + b"\x08" + b[32:], "not ascending", 31),
            # uuid byte 0 as a two-byte varint worth 256.
            (
                lambda b: b[:1] + b"\x60" + b[2:6] + b"\x01\x04" + b[7:],
                "uuid byte out of range",
                6,
            ),
            # gtid_flags 256 does not fit unsigned char.
            (
                lambda b: b[:1] + b"\x60" + b[2:4] + b"\x01\x04" + b[5:],
                "flags out of range",
                3,
            ),
            # Tag "a-": not a valid tag.
            (lambda b: b[:27] + b"\x61\x2d" + b[29:], "malformed GTID tag", 27),
            # gno 0.
            (lambda b: b[:24] + b"\x00" + b[25:], "out of range", None),
        ],
    )
    def test_rejects(
        self, mutate: Callable[[bytes], bytes], reason: str, offset: int | None
    ) -> None:
        body = mutate(FIXTURE_TAGGED_EVENT)
        with pytest.raises(GtidError, match=reason) as caught:
            decode_gtid_tagged(body)
        if offset is not None:
            assert caught.value.context["offset"] == offset

    def test_missing_uuid_or_gno(self) -> None:
        with pytest.raises(GtidError, match="no uuid field"):
            decode_gtid_tagged(bytes([0x02, 0x0A, 0x00, 0x04, 0x02]))
        with pytest.raises(GtidError, match="no gno field"):
            decode_gtid_tagged(bytes([0x02, 0x28, 0x00, 0x02]) + bytes(16))

    @given(
        st.builds(
            TaggedGtidInfo,
            flags=st.integers(0, 255),
            uuid=st.uuids(),
            gno=st.integers(1, GNO_MAX),
            tag=st.from_regex(r"[a-z_][a-z0-9_]{0,31}", fullmatch=True) | st.just(""),
            last_committed=st.integers(-(2**63), 2**63 - 1),
            sequence_number=st.integers(-(2**63), 2**63 - 1),
            immediate_commit_ts_us=st.integers(0, 2**64 - 1),
            original_commit_ts_us=st.integers(0, 2**64 - 1),
            transaction_length=st.integers(0, 2**64 - 1),
            immediate_server_version=st.integers(0, 2**32 - 1),
            original_server_version=st.integers(0, 2**32 - 1),
            commit_group_ticket=st.none() | st.integers(0, 2**64 - 1),
        )
    )
    def test_round_trip(self, info: TaggedGtidInfo) -> None:
        body = encode_gtid_tagged(info)
        assert decode_gtid_tagged(body) == info
        size, _ = _read_varuint(body, 1, len(body), "size")
        assert size == len(body)

    def test_encoder_validates(self) -> None:
        with pytest.raises(GtidError, match="flags out of range"):
            encode_gtid_tagged(TaggedGtidInfo(flags=256, uuid=UUID1, gno=1, tag=""))
        with pytest.raises(GtidError, match="immediate_server_version out of range"):
            encode_gtid_tagged(
                TaggedGtidInfo(flags=0, uuid=UUID1, gno=1, tag="", immediate_server_version=2**32)
            )


# --------------------------------------------------------------------------
# MariaDB
# --------------------------------------------------------------------------


class TestMariaGtid:
    def test_parse_and_format(self) -> None:
        gtid = MariaGtid.parse(" 0-1-100 ")
        assert gtid == MariaGtid(0, 1, 100)
        assert str(gtid) == "0-1-100"
        top = f"{2**32 - 1}-{2**32 - 1}-{2**64 - 1}"
        assert str(MariaGtid.parse(top)) == top

    @pytest.mark.parametrize(
        "text",
        [
            "",
            "0-1",
            "0-1-2-3",
            "a-1-2",
            "-1-1-2",
            f"{2**32}-1-1",
            f"0-1-{2**64}",
            "0-1-" + "9" * 30,
        ],
    )
    def test_rejects(self, text: str) -> None:
        with pytest.raises(GtidError):
            MariaGtid.parse(text)


class TestMariaGtidPosition:
    def test_parse_format_canonical(self) -> None:
        pos = MariaGtidPosition.parse(" 1-2-5 ,\n0-1-100")
        assert str(pos) == "0-1-100,1-2-5"
        assert list(pos) == [MariaGtid(0, 1, 100), MariaGtid(1, 2, 5)]
        assert len(pos) == 2
        assert MariaGtidPosition.parse(str(pos)) == pos
        assert repr(pos) == "MariaGtidPosition.parse('0-1-100,1-2-5')"

    def test_empty(self) -> None:
        pos = MariaGtidPosition.parse("  ")
        assert not pos
        assert str(pos) == ""
        assert pos == MariaGtidPosition()

    def test_duplicate_domain(self) -> None:
        with pytest.raises(GtidError, match="two GTIDs for one domain") as caught:
            MariaGtidPosition.parse("0-1-100,0-2-5")
        assert caught.value.context == {"value": "0-1-100,0-2-5", "domain": 0}

    def test_empty_entry(self) -> None:
        with pytest.raises(GtidError, match="empty entry"):
            MariaGtidPosition.parse("0-1-100,,1-1-1")

    def test_advance_get_covers(self) -> None:
        pos = MariaGtidPosition.parse("0-1-100,1-2-5")
        moved = pos.advance(MariaGtid(0, 3, 101))
        assert str(moved) == "0-3-101,1-2-5"
        assert str(pos) == "0-1-100,1-2-5"
        assert str(moved.advance(MariaGtid(7, 1, 1))) == "0-3-101,1-2-5,7-1-1"
        assert moved.get(0) == MariaGtid(0, 3, 101)
        assert moved.get(9) is None
        # Server id takes no part: seq numbers order a domain on their own.
        assert moved.covers(MariaGtid(0, 99, 101))
        assert moved.covers(MariaGtid(0, 1, 50))
        assert not moved.covers(MariaGtid(0, 3, 102))
        assert not moved.covers(MariaGtid(2, 1, 1))
        assert hash(moved) == hash(MariaGtidPosition.parse("1-2-5,0-3-101"))

    @given(
        st.lists(
            st.builds(
                MariaGtid,
                st.integers(0, 5),
                st.integers(0, 2**32 - 1),
                st.integers(0, 2**64 - 1),
            )
        )
    )
    def test_advance_round_trip(self, gtids: list[MariaGtid]) -> None:
        pos = MariaGtidPosition()
        latest: dict[int, MariaGtid] = {}
        for gtid in gtids:
            pos = pos.advance(gtid)
            latest[gtid.domain_id] = gtid
        assert list(pos) == [latest[d] for d in sorted(latest)]
        assert MariaGtidPosition.parse(str(pos)) == pos
        for gtid in gtids:
            assert pos.covers(MariaGtid(gtid.domain_id, 0, 0))


class TestGtidList:
    def test_mariadb_documentation_example(self) -> None:
        # GTID_LIST event body from the MariaDB protocol documentation
        # ("Gtid list [0-10124-3584]"), without its header and CRC.
        body = bytes.fromhex("01000000000000008c270000000e000000000000")
        assert decode_gtid_list(body) == GtidListInfo(flags=0, gtids=(MariaGtid(0, 10124, 3584),))

    def test_flags_and_repeated_domains(self) -> None:
        body = (
            struct.pack("<I", (GTID_LIST_FLAG_UNTIL_REACHED << 28) | 2)
            + struct.pack("<IIQ", 0, 1, 10)
            + struct.pack("<IIQ", 0, 2, 12)
        )
        info = decode_gtid_list(body)
        assert info.flags == GTID_LIST_FLAG_UNTIL_REACHED
        assert info.gtids == (MariaGtid(0, 1, 10), MariaGtid(0, 2, 12))

    def test_empty_list(self) -> None:
        assert decode_gtid_list(bytes(4)) == GtidListInfo(flags=0, gtids=())

    def test_truncated(self) -> None:
        with pytest.raises(GtidError, match="shorter than its 4-byte count"):
            decode_gtid_list(b"\x01\x00")
        with pytest.raises(GtidError, match="shorter than its GTID count needs") as caught:
            decode_gtid_list(struct.pack("<I", 2) + bytes(16))
        assert caught.value.context == {"value": 2, "offset": 20, "needed": 36}


# --------------------------------------------------------------------------
# Fuzzing: decoders and parsers raise GtidError and nothing else
# --------------------------------------------------------------------------

GTID_TEXT_ALPHABET = "0123456789abcdefABCDEF-:,_ \n\txyz"


def mutations(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Valid encodings with a few bytes overwritten, cut or inserted."""

    @st.composite
    def mutate(draw: st.DrawFn) -> bytes:
        data = bytearray(draw(valid))
        for _ in range(draw(st.integers(1, 4))):
            action = draw(st.sampled_from(["set", "cut", "insert"]))
            where = draw(st.integers(0, len(data)))
            if action == "set" and where < len(data):
                data[where] = draw(st.integers(0, 255))
            elif action == "cut":
                del data[where:]
            else:
                data[where:where] = draw(st.binary(min_size=1, max_size=4))
        return bytes(data)

    return mutate()


class TestFuzz:
    @FUZZ
    @given(st.binary(max_size=200) | mutations(gtid_sets().map(GtidSet.encode)))
    def test_gtid_set_decode(self, data: bytes) -> None:
        try:
            GtidSet.decode(data)
        except GtidError:
            pass

    @FUZZ
    @given(
        st.text(alphabet=GTID_TEXT_ALPHABET, max_size=120)
        | st.text(max_size=60)
        | gtid_sets()
        .map(str)
        .flatmap(
            lambda s: st.integers(0, len(s)).flatmap(
                lambda i: st.text(alphabet=GTID_TEXT_ALPHABET, max_size=3).map(
                    lambda junk: s[:i] + junk + s[i + 1 :]
                )
            )
        )
    )
    def test_gtid_set_parse(self, text: str) -> None:
        try:
            gs = GtidSet.parse(text)
        except GtidError:
            return
        # Whatever parses must format to something that parses back the same.
        assert GtidSet.parse(str(gs)) == gs

    @FUZZ
    @given(st.text(alphabet=GTID_TEXT_ALPHABET, max_size=60))
    def test_gtid_parse(self, text: str) -> None:
        try:
            Gtid.parse(text)
        except GtidError:
            pass

    @FUZZ
    @given(st.binary(max_size=120) | mutations(st.just(FIXTURE_TAGGED_EVENT)))
    def test_decode_gtid_tagged(self, data: bytes) -> None:
        try:
            decode_gtid_tagged(data)
        except GtidError:
            pass

    @FUZZ
    @given(st.binary(max_size=120))
    def test_decode_gtid_list(self, data: bytes) -> None:
        try:
            decode_gtid_list(data)
        except GtidError:
            pass

    @FUZZ
    @given(st.text(alphabet="0123456789-, \n", max_size=60) | st.text(max_size=30))
    def test_maria_position_parse(self, text: str) -> None:
        try:
            pos = MariaGtidPosition.parse(text)
        except GtidError:
            return
        assert MariaGtidPosition.parse(str(pos)) == pos


def test_gtid_set_decode_handles_huge_counts_quickly() -> None:
    # A header claiming 2**56 - 1 entries must fail fast, not loop.
    with pytest.raises(GtidError, match="more entries"):
        GtidSet.decode(bytes.fromhex("ffffffffffffff00"))
