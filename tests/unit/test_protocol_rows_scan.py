"""The compiled scan of row packets (replicad/protocol/_rows.pyx) takes exactly the packets
the Python scan takes and stops where it stops, on buffers of rows mixed with what must end
a bulk take: an EOF/OK (0xFE) or ERR (0xFF) payload, a wrong sequence id, an empty payload,
a 16 MiB chunk header, a packet cut by the end of the buffer."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicad.protocol import packets
from replicad.protocol.packets import scan_rows_py

pytestmark = pytest.mark.unit

COMPILED = packets.scan_rows is not scan_rows_py
REQUIRED = os.environ.get("REPLICAD_REQUIRE_SPEEDUPS") == "1"
needs_compiled = pytest.mark.skipif(
    not COMPILED and not REQUIRED, reason="replicad.protocol._rows is not built here"
)


def _packet(payload: bytes, sequence: int, length: int | None = None) -> bytes:
    size = len(payload) if length is None else length
    return size.to_bytes(3, "little") + bytes([sequence & 0xFF]) + payload


# One packet of a buffer, as (kind, payload): rows mostly, now and then what stops a take.
_rows = st.binary(min_size=1, max_size=40).filter(lambda b: b[0] < 0xFE)
_packets = st.lists(
    st.one_of(
        st.tuples(st.just("row"), _rows),
        st.tuples(st.just("row"), _rows),
        st.tuples(st.just("row"), _rows),
        st.tuples(st.just("eof"), st.binary(max_size=6).map(lambda b: b"\xfe" + b)),
        st.tuples(st.just("err"), st.binary(max_size=6).map(lambda b: b"\xff" + b)),
        st.tuples(st.just("empty"), st.just(b"")),
        st.tuples(st.just("wrong_sequence"), _rows),
        st.tuples(st.just("max_chunk"), _rows),
    ),
    max_size=30,
)


def _buffer(items: list[tuple[str, bytes]], first_sequence: int, cut: int) -> bytearray:
    out = bytearray()
    sequence = first_sequence
    for kind, payload in items:
        if kind == "wrong_sequence":
            out += _packet(payload, sequence + 7)
        elif kind == "max_chunk":
            out += _packet(payload, sequence, length=0xFFFFFF)
        else:
            out += _packet(payload, sequence)
        sequence += 1
    return out[: max(len(out) - cut, 0)]


def test_the_scan_is_compiled_where_required() -> None:
    """CI (REPLICAD_REQUIRE_SPEEDUPS=1) must not compare the Python scan with itself."""
    assert COMPILED or not REQUIRED


@needs_compiled
@settings(max_examples=500, deadline=None)
@given(
    items=_packets,
    first_sequence=st.integers(0, 255),
    cut=st.integers(0, 8),
    skip=st.integers(0, 3),
)
def test_compiled_and_python_scans_agree(
    items: list[tuple[str, bytes]], first_sequence: int, cut: int, skip: int
) -> None:
    # `skip` bytes before the start offset: the reader's consumed prefix
    buffer = bytearray(b"\x00" * skip) + _buffer(items, first_sequence, cut)
    taken_py: list[bytes] = []
    taken_c: list[bytes] = []
    assert packets.scan_rows(buffer, skip, first_sequence, taken_c) == scan_rows_py(
        buffer, skip, first_sequence, taken_py
    )
    assert taken_c == taken_py


def test_the_scan_takes_rows_up_to_what_ends_them() -> None:
    """Both scans, on a hand-made buffer: three rows (sequence ids wrapping past 255), then
    an EOF; the EOF and the row after it are left for the packet reader."""
    rows = [b"\x01a", b"\x02bc", b"\x03def"]
    buffer = bytearray()
    for i, row in enumerate(rows):
        buffer += _packet(row, 254 + i)
    eof_at = len(buffer)
    buffer += _packet(b"\xfe\x00\x00\x02\x00", 1) + _packet(b"\x01z", 2)
    for scan in {packets.scan_rows, scan_rows_py}:
        taken: list[bytes] = []
        assert scan(buffer, 0, 254, taken) == (eof_at, 1)
        assert taken == rows
