"""Packet framing, >16 MiB reassembly, sequence ids, lenenc, OK/ERR/EOF packets.

Expected bytes are written out from the protocol documentation's layouts (3-byte LE length,
sequence id, payload; lenenc prefixes 0xFC/0xFD/0xFE), not produced by the code under test.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicad.errors import ProtocolError, ServerError
from replicad.protocol.packets import (
    MAX_CHUNK,
    PacketReader,
    frame,
    is_eof_packet,
    parse_eof,
    parse_err,
    parse_ok,
    read_lenenc_bytes,
    read_lenenc_int,
    write_lenenc_bytes,
    write_lenenc_int,
)

pytestmark = pytest.mark.unit


def _headers(data: bytes) -> list[tuple[int, int]]:
    """(length, seq) of every chunk, walking the headers independently of the reader."""
    out, pos = [], 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 3], "little")
        out.append((length, data[pos + 3]))
        pos += 4 + length
    assert pos == len(data)
    return out


def _read_all(reader: PacketReader) -> list[bytes]:
    out = []
    while (payload := reader.read_payload()) is not None:
        out.append(payload)
    return out


# ---------------------------------------------------------------------- framing


def test_small_payload_layout() -> None:
    data, nxt = frame(b"\x03SELECT 1", 0)
    assert data == b"\x09\x00\x00\x00\x03SELECT 1"
    assert nxt == 1


def test_empty_payload_is_a_bare_header() -> None:
    assert frame(b"", 7) == (b"\x00\x00\x00\x07", 8)


def test_sequence_wraps_at_256() -> None:
    data, nxt = frame(b"x", 255)
    assert data[3] == 255 and nxt == 0


def test_exact_chunk_size_needs_an_empty_trailer() -> None:
    payload = bytes(MAX_CHUNK)
    data, nxt = frame(payload, 3)
    assert _headers(data) == [(MAX_CHUNK, 3), (0, 4)]
    assert nxt == 5


def test_large_payload_reassembled_across_three_chunks() -> None:
    payload = random.Random(1).randbytes(2 * MAX_CHUNK + 10)
    data, _ = frame(payload, 0)
    assert _headers(data) == [(MAX_CHUNK, 0), (MAX_CHUNK, 1), (10, 2)]
    reader = PacketReader()
    reader.feed(data)
    assert _read_all(reader) == [payload]
    assert reader.expected_sequence == 3
    assert reader.buffered == 0


BOUNDARY_SIZES = st.sampled_from(
    [0, 1, MAX_CHUNK - 1, MAX_CHUNK, MAX_CHUNK + 1, 2 * MAX_CHUNK - 1, 2 * MAX_CHUNK]
)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(BOUNDARY_SIZES | st.integers(0, 300), min_size=1, max_size=3),
    seed=st.integers(0, 2**32),
    start_seq=st.integers(0, 255),
    cuts=st.lists(st.integers(1, 3 * MAX_CHUNK), max_size=6),
)
def test_round_trip_around_chunk_boundaries(
    sizes: list[int], seed: int, start_seq: int, cuts: list[int]
) -> None:
    rng = random.Random(seed)
    payloads = [rng.randbytes(n) for n in sizes]
    stream = bytearray()
    seq = start_seq
    for payload in payloads:
        data, seq = frame(payload, seq)
        stream += data
    reader = PacketReader()
    reader.expected_sequence = start_seq
    got: list[bytes] = []
    # Deliver the stream in arbitrary pieces: headers and chunks split anywhere.
    pos = 0
    for cut in [*sorted({min(c, len(stream)) for c in cuts}), len(stream)]:
        reader.feed(bytes(stream[pos:cut]))
        pos = max(pos, cut)
        got += _read_all(reader)
    assert got == payloads
    assert reader.expected_sequence == seq
    assert reader.buffered == 0


def test_incomplete_packet_waits_for_more_bytes() -> None:
    reader = PacketReader()
    data, _ = frame(b"hello", 0)
    reader.feed(data[:6])
    assert reader.read_payload() is None
    reader.feed(data[6:])
    assert reader.read_payload() == b"hello"


def test_wrong_sequence_id_is_a_protocol_error() -> None:
    reader = PacketReader()
    reader.feed(frame(b"a", 0)[0] + frame(b"b", 5)[0])
    assert reader.read_payload() == b"a"
    with pytest.raises(ProtocolError, match="sequence id 5, expected 1"):
        reader.read_payload()


def test_wrong_sequence_inside_a_split_payload() -> None:
    data, _ = frame(bytes(MAX_CHUNK + 1), 0)
    broken = bytearray(data)
    broken[4 + MAX_CHUNK + 3] = 9  # the second chunk's sequence id
    reader = PacketReader()
    reader.feed(bytes(broken))
    with pytest.raises(ProtocolError, match="sequence id 9, expected 1"):
        reader.read_payload()


def test_any_sequence_accepted_when_not_checking() -> None:
    reader = PacketReader()
    reader.expected_sequence = None
    reader.feed(frame(b"z", 42)[0])
    assert reader.read_payload() == b"z"
    assert reader.expected_sequence == 43


def test_oversized_payload_refused_from_its_header() -> None:
    reader = PacketReader(max_payload=MAX_CHUNK + 5)
    # Two full-chunk headers announce more than the limit before the data even arrives.
    reader.feed(b"\xff\xff\xff\x00" + bytes(MAX_CHUNK) + b"\x06\x00\x00\x01")
    with pytest.raises(ProtocolError, match="exceeds"):
        reader.read_payload()


# ---------------------------------------------------------------------- lenenc


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (250, b"\xfa"),
        (251, b"\xfc\xfb\x00"),
        (0xFFFF, b"\xfc\xff\xff"),
        (0x10000, b"\xfd\x00\x00\x01"),
        (0xFFFFFF, b"\xfd\xff\xff\xff"),
        (0x1000000, b"\xfe\x00\x00\x00\x01\x00\x00\x00\x00"),
        (2**64 - 1, b"\xfe" + b"\xff" * 8),
    ],
)
def test_lenenc_int_known_encodings(value: int, encoded: bytes) -> None:
    assert write_lenenc_int(value) == encoded
    assert read_lenenc_int(b"\x99" + encoded + b"tail", 1) == (value, 1 + len(encoded))


@given(st.integers(0, 2**64 - 1))
def test_lenenc_int_round_trip(value: int) -> None:
    raw = write_lenenc_int(value)
    assert read_lenenc_int(raw, 0) == (value, len(raw))


@given(st.binary(max_size=70_000))
def test_lenenc_bytes_round_trip(value: bytes) -> None:
    raw = write_lenenc_bytes(value)
    assert read_lenenc_bytes(raw, 0) == (value, len(raw))


@pytest.mark.parametrize("bad", [b"\xfb", b"\xff"])
def test_lenenc_null_and_err_prefixes_are_not_lengths(bad: bytes) -> None:
    with pytest.raises(ProtocolError, match="prefix"):
        read_lenenc_int(bad + b"\x00" * 8, 0)


@pytest.mark.parametrize("raw", [b"", b"\xfc\x01", b"\xfd\x01\x02", b"\xfe" + b"\x00" * 7])
def test_truncated_lenenc_int(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        read_lenenc_int(raw, 0)


def test_truncated_lenenc_string() -> None:
    with pytest.raises(ProtocolError, match="length-encoded string"):
        read_lenenc_bytes(b"\x05abc", 0)


def test_negative_lenenc_refused() -> None:
    with pytest.raises(ProtocolError):
        write_lenenc_int(-1)


# ---------------------------------------------------------------------- OK / ERR / EOF


def test_ok_packet() -> None:
    ok = parse_ok(b"\x00\xfc\x2c\x01\x05\x02\x00\x01\x00Rows matched: 300")
    assert (ok.affected_rows, ok.last_insert_id, ok.status_flags, ok.warnings) == (300, 5, 2, 1)
    assert ok.info == "Rows matched: 300"


def test_ok_packet_truncated() -> None:
    with pytest.raises(ProtocolError):
        parse_ok(b"\x00\x00\x00\x02")


def test_err_packet_with_sqlstate() -> None:
    err = parse_err(b"\xff\x15\x04#28000Access denied for user 'x'@'h'")
    assert isinstance(err, ServerError)
    assert (err.code, err.sqlstate) == (1045, "28000")
    assert err.message == "Access denied for user 'x'@'h'"
    assert "1045" in str(err) and "28000" in str(err)


def test_err_packet_without_sqlstate_marker() -> None:
    err = parse_err(b"\xff\x10\x04Too many connections")
    assert (err.code, err.sqlstate, err.message) == (1040, None, "Too many connections")


def test_eof_packet() -> None:
    eof = parse_eof(b"\xfe\x01\x00\x22\x00")
    assert (eof.warnings, eof.status_flags) == (1, 0x22)


def test_eof_detection_depends_on_deprecate_eof() -> None:
    eof = b"\xfe\x00\x00\x02\x00"
    ok_as_eof = b"\xfe\x00\x00\x02\x00\x00\x00"
    assert is_eof_packet(eof, deprecate_eof=False)
    assert is_eof_packet(ok_as_eof, deprecate_eof=True)
    # A row whose first value is >= 16 MiB starts with 0xFE too, but is never that short.
    row = b"\xfe" + (MAX_CHUNK + 1).to_bytes(8, "little") + bytes(MAX_CHUNK + 1)
    assert not is_eof_packet(row, deprecate_eof=True)
    assert not is_eof_packet(b"\xfe" + bytes(9), deprecate_eof=False)
    assert not is_eof_packet(b"\x01a", deprecate_eof=True)
