"""Bad input: corrupt, truncated and random binlog bytes.

A real MariaDB binlog (many event types, compressed events, wide rows) is mutated. The
decoder must either decode or raise one of replicad's typed errors naming the offset —
never hang, never leak IndexError/struct.error/UnicodeDecodeError/ValueError/RecursionError.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicad.binlog.events import TransactionPayloadEvent
from replicad.binlog.files import iter_file_events, iter_raw_events
from replicad.binlog.parser import BinlogParser
from replicad.binlog.rows import RowsEvent
from replicad.errors import ChecksumError, ReplicadError, TruncatedError
from tests.helpers.binlog_helpers import binlog_position

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def sample(mariadb, tmp_path_factory) -> Path:
    """A binlog file holding a varied workload, copied out of the server."""
    from tests.helpers.mariadb import connect_root

    conn = connect_root()
    name = "fuzz_sample"
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name}")
        cur.execute(f"CREATE DATABASE {name}")
        cur.execute(f"USE {name}")
        cur.execute("FLUSH BINARY LOGS")
        file, _ = binlog_position(conn)
        cur.execute(
            "CREATE TABLE w (id INT PRIMARY KEY, a VARCHAR(300), b DECIMAL(20,6), c DATETIME(6),"
            " d TIME(3), e ENUM('x','y'), f SET('p','q'), g BIT(17), h BLOB, i JSON,"
            " j DOUBLE, k TIMESTAMP(2) NULL, l GEOMETRY, m YEAR, n CHAR(4) CHARACTER SET latin1)"
        )
        for i in range(40):
            cur.execute(
                "INSERT INTO w VALUES (%s, %s, %s, '2020-01-02 03:04:05.123456', '-01:02:03.5',"
                " 'y', 'p,q', 5, %s, '{\"k\": [1, 2]}', 1.5, '2021-01-01 00:00:00.25',"
                " ST_GeomFromText('POINT(1 1)'), 2001, 'café')",
                (i, "é" * (i * 7), f"{i}.5", bytes(range(i))),
            )
        cur.execute("UPDATE w SET a = 'changed', b = -b WHERE id % 3 = 0")
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute("UPDATE w SET g = 7 WHERE id % 5 = 0")
        cur.execute("DELETE FROM w WHERE id > 30")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute(f"DROP DATABASE {name}")
    conn.close()
    copy = tmp_path_factory.mktemp("binlog") / file
    copy.write_bytes((mariadb["binlog_dir"] / file).read_bytes())
    return copy


def _consume(path_or_bytes, verify: bool = True, schema: str | None = None) -> int:
    """Decode everything, rows included; returns the number of rows decoded (of `schema`'s
    tables only, if given: tests running beside this one write into the same file)."""
    if isinstance(path_or_bytes, Path):
        events = iter_file_events(path_or_bytes, verify_checksum=verify)
    else:
        events = _events_from_bytes(path_or_bytes, verify)
    rows = 0
    for event in events:
        if isinstance(event, RowsEvent):
            n = sum(1 for _ in event.rows())
            rows += n if schema in (None, event.table_map.schema) else 0
    return rows


def _events_from_bytes(data: bytes, verify: bool):
    parser = BinlogParser(verify_checksum=verify, source="memory")
    for raw in iter_raw_events(io.BytesIO(data), source="memory"):
        event = parser.parse(raw.data, raw.pos)
        yield event
        if isinstance(event, TransactionPayloadEvent):
            yield from parser.payload_events(event)


def _event_offsets(path: Path) -> list[tuple[int, int]]:
    with path.open("rb") as f:
        return [(raw.pos, len(raw.data)) for raw in iter_raw_events(f, source=str(path))]


def test_sample_decodes(sample: Path) -> None:
    assert _consume(sample, schema="fuzz_sample") == 40 + 14 + 8 + 9


def test_every_flipped_byte_is_a_checksum_error_at_its_event(sample: Path) -> None:
    data = sample.read_bytes()
    rng = random.Random(1)
    for pos, size in _event_offsets(sample):
        for _ in range(3):
            at = pos + rng.randrange(size)
            if 9 <= at - pos < 13 or (pos == 4 and at == pos + 17):
                # the size field changes framing (covered by the truncation tests); the FDE's
                # in-use flag is excluded from its checksum by design
                continue
            broken = bytearray(data)
            broken[at] ^= 1 << rng.randrange(8)
            with pytest.raises(ChecksumError) as info:
                _consume(bytes(broken))
            assert info.value.context["offset"] == pos
            assert str(sample) not in str(info.value)  # decoded from memory: no file name


def test_truncation_names_the_offset_of_the_cut_event(sample: Path) -> None:
    data = sample.read_bytes()
    for pos, size in _event_offsets(sample)[1:]:
        for cut in (pos + 1, pos + 18, pos + size - 1):
            with pytest.raises(TruncatedError) as info:
                _consume(data[:cut])
            assert info.value.context["offset"] == pos
            assert "ends inside an event" in str(info.value)


@settings(
    max_examples=300,
    deadline=2000,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    mutations=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=8
    ),
    verify=st.booleans(),
)
def test_mutated_binlog_raises_only_typed_errors(sample: Path, mutations, verify) -> None:
    data = bytearray(sample.read_bytes())
    for where, value in mutations:
        data[4 + int(where * (len(data) - 4))] = value
    try:
        _consume(bytes(data), verify=verify)
    except ReplicadError:
        pass


@settings(max_examples=200, deadline=2000)
@given(
    body=st.binary(min_size=0, max_size=400),
    type_code=st.integers(0, 255),
    flags=st.integers(0, 0xFFFF),
)
def test_random_events_raise_only_typed_errors(body: bytes, type_code: int, flags: int) -> None:
    parser = BinlogParser(verify_checksum=False)
    fde = _sample_fde()
    parser.parse(fde, 4)
    size = 19 + len(body)
    header = (0).to_bytes(4, "little") + bytes([type_code]) + (1).to_bytes(4, "little")
    header += size.to_bytes(4, "little") + (0).to_bytes(4, "little") + flags.to_bytes(2, "little")
    try:
        event = parser.parse(header + body, 100)
        if isinstance(event, RowsEvent):
            for _ in event.rows():
                pass
        if isinstance(event, TransactionPayloadEvent):
            for _ in parser.payload_events(event):
                pass
    except ReplicadError as exc:
        assert exc.context.get("offset") == 100


_FDE: bytes | None = None


def _sample_fde() -> bytes:
    """A MariaDB FDE with checksums off, built from the server's own post-header table."""
    global _FDE
    if _FDE is None:
        import zlib

        version = b"10.11.19-MariaDB".ljust(50, b"\0")
        post = bytes(
            [
                56,
                13,
                0,
                8,
                0,
                18,
                0,
                4,
                4,
                4,
                4,
                18,
                0,
                0,
                228,
                0,
                4,
                26,
                8,
                0,
                0,
                0,
                8,
                8,
                8,
                2,
                0,
                0,
                0,
                10,
                10,
                10,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
            ]
        )
        body = (4).to_bytes(2, "little") + version + (0).to_bytes(4, "little") + bytes([19])
        body += post + bytes([0])  # checksum algorithm: off
        size = 19 + len(body) + 4
        header = (0).to_bytes(4, "little") + bytes([15]) + (1).to_bytes(4, "little")
        header += (
            size.to_bytes(4, "little") + size.to_bytes(4, "little") + (0).to_bytes(2, "little")
        )
        _FDE = header + body + (zlib.crc32(header + body)).to_bytes(4, "little")
    return _FDE
