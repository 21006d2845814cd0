"""The relay's record framing (sans-IO): round trips across block boundaries, fed in any
chunks, and damage reported with its offset."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicad.errors import RelayCorruptError, RelayTornError
from replicad.relay.records import (
    BLOCK_SIZE,
    HEADER_SIZE,
    RecordReader,
    encode_record,
    encoded_size,
    mask_crc,
    unmask_crc,
)


def write_all(payloads: list[bytes], start: int = 0) -> bytes:
    out = bytearray()
    for payload in payloads:
        out += encode_record(payload, start + len(out))
    return bytes(out)


def read_all(data: bytes, cuts: list[int], start: int = 0) -> list[bytes]:
    reader = RecordReader(start, segment="t")
    got: list[bytes] = []
    previous = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        reader.feed(data[previous:cut])
        previous = max(previous, cut)
        got.extend(r.payload for r in reader.records())
    reader.finish()
    return got


sizes = st.one_of(
    st.integers(0, 40),
    st.integers(BLOCK_SIZE - 2 * HEADER_SIZE, BLOCK_SIZE + 2 * HEADER_SIZE),
    st.integers(0, 3 * BLOCK_SIZE),
)


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(sizes, min_size=1, max_size=12),
    cuts=st.lists(st.integers(0, 1 << 20), max_size=6),
    seed=st.integers(0, 255),
    start_pad=st.integers(0, BLOCK_SIZE - 1),
)
def test_records_round_trip_in_any_chunks(
    lengths: list[int], cuts: list[int], seed: int, start_pad: int
) -> None:
    payloads = [bytes((seed + i + j) % 256 for j in range(n)) for i, n in enumerate(lengths)]
    data = write_all(payloads, start_pad)
    assert len(data) == sum(
        encoded_size(len(p), start_pad + len(write_all(payloads[:i], start_pad)))
        for i, p in enumerate(payloads)
    )
    assert read_all(data, cuts, start_pad) == payloads
    # no fragment crosses a block boundary; padding only where a header does not fit
    at = start_pad
    while at < start_pad + len(data):
        room = BLOCK_SIZE - at % BLOCK_SIZE
        i = at - start_pad
        if room < HEADER_SIZE:
            assert data[i : i + room] == bytes(room)
            at += room
            continue
        length = int.from_bytes(data[i + 4 : i + 7], "little")
        assert HEADER_SIZE + length <= room
        at += HEADER_SIZE + length


def test_mask_is_invertible() -> None:
    for crc in (0, 1, 0xFFFFFFFF, 0xE3069283, 0x12345678):
        assert unmask_crc(mask_crc(crc)) == crc
        assert mask_crc(crc) != crc


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 2 * BLOCK_SIZE), min_size=1, max_size=5),
    where=st.integers(0, 1 << 30),
    bit=st.integers(0, 7),
)
def test_a_flipped_bit_is_reported_with_its_fragment_offset(
    lengths: list[int], where: int, bit: int
) -> None:
    payloads = [bytes([i + 1]) * n for i, n in enumerate(lengths)]
    data = bytearray(write_all(payloads))
    at = where % len(data)
    data[at] ^= 1 << bit
    reader = RecordReader(0, segment="relay-000001.log")
    reader.feed(bytes(data))
    with pytest.raises((RelayCorruptError, RelayTornError)) as info:
        got = [r.payload for r in reader.records()]
        reader.finish()
        # a flip in zero padding, or in a length that still frames: never silently equal
        assert got != payloads
        raise AssertionError("damage not detected")
    error = info.value
    assert error.context["segment"] == "relay-000001.log"
    offset = error.context["offset"]
    assert isinstance(offset, int) and offset <= at and at - offset < BLOCK_SIZE


def test_truncation_is_a_torn_tail_at_the_record_start() -> None:
    payloads = [b"a" * 10, b"b" * (BLOCK_SIZE + 100), b"c" * 5]
    data = write_all(payloads)
    second = len(encode_record(payloads[0], 0))
    for cut in (second + 3, second + HEADER_SIZE + 7, BLOCK_SIZE + 20, len(data) - 1):
        reader = RecordReader(0, segment="s")
        reader.feed(data[:cut])
        got = [r.payload for r in reader.records()]
        with pytest.raises(RelayTornError) as info:
            reader.finish()
        whole = [p for p in payloads if p in got]
        assert got == whole and len(got) < 3
        assert info.value.context["offset"] == len(write_all(got))
