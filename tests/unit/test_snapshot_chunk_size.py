"""The initial snapshot's chunk size (snapshot/reader.py: read_chunks, next_chunk_rows): a
table's first chunk measures its rows, later chunks hold about `chunk_bytes` of them and at
most `chunk_rows`; the table ends at the first short chunk; every row comes once, in order."""

from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace

import pytest

from replicad.snapshot.columns import SnapshotColumn, description_of
from replicad.snapshot.reader import FIRST_CHUNK_ROWS, TablePlan, next_chunk_rows, read_chunks

pytestmark = pytest.mark.unit

COLUMNS = (SnapshotColumn("id", "int", "int", False), SnapshotColumn("b", "blob", "blob", True))
PLAN = TablePlan("d", "t", COLUMNS, ("id",), ("id",), description_of("d", "t", COLUMNS, ("id",)))


def row(i: int, width: int) -> bytes:
    """A text-protocol row of (id, b) whose packet is about `width` bytes."""
    ident = str(i).encode()
    blob = b"x" * max(0, width - len(ident) - 4)
    return bytes([len(ident)]) + ident + b"\xfc" + len(blob).to_bytes(2, "little") + blob


class Table:
    """Answers the chunk SELECTs of a table of `count` rows of `width` bytes each."""

    def __init__(self, count: int, width: int) -> None:
        self.rows = [row(i, width) for i in range(1, count + 1)]
        self.limits: list[int] = []

    async def query(self, sql: str, *, packets: bool) -> SimpleNamespace:
        assert packets
        after = re.search(r"`id` > (\d+)", sql)
        start = int(after.group(1)) if after else 0
        limit = int(re.search(r"LIMIT (\d+)", sql).group(1))
        self.limits.append(limit)
        return SimpleNamespace(packets=self.rows[start : start + limit])


def read(table: Table, chunk_rows: int, chunk_bytes: int) -> list[list[bytes]]:
    async def run() -> list[list[bytes]]:
        return [c async for c in read_chunks(table, PLAN, chunk_rows, chunk_bytes)]  # type: ignore[arg-type]

    return asyncio.run(run())


def test_wide_rows_are_read_fewer_at_a_time() -> None:
    table = Table(5000, 10_000)  # 10 kB rows: 100 of them fill a megabyte
    chunks = read(table, 10_000, 1 << 20)
    assert [r for c in chunks for r in c] == table.rows
    assert table.limits[0] == FIRST_CHUNK_ROWS
    assert set(table.limits[1:]) == {104}  # 1 MiB // the rows' width, 10,000 bytes
    assert max(sum(map(len, c)) for c in chunks) <= (1 << 20) + 10_000


def test_narrow_rows_take_chunk_rows() -> None:
    table = Table(25_000, 30)
    chunks = read(table, 10_000, 8 << 20)
    assert [r for c in chunks for r in c] == table.rows
    assert table.limits == [FIRST_CHUNK_ROWS, 10_000, 10_000, 10_000]
    assert [len(c) for c in chunks] == [100, 10_000, 10_000, 4_900]


@pytest.mark.parametrize("count", [0, 1, 99, 100, 101])
def test_the_table_ends_at_the_first_short_chunk(count: int) -> None:
    table = Table(count, 50)
    chunks = read(table, 10_000, 8 << 20)
    assert [r for c in chunks for r in c] == table.rows
    assert all(chunks)


def test_a_row_wider_than_chunk_bytes_is_read_one_at_a_time() -> None:
    assert next_chunk_rows([b"x" * 5000] * 3, 10_000, 1024) == 1
    assert next_chunk_rows([b"x" * 10] * 3, 7, 1 << 20) == 7
