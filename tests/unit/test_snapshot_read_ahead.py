"""snapshot.reader.read_ahead: the next chunk is read while the caller handles the last one,
chunks come out whole and in order, a failed read is raised where the caller takes the next
chunk, and a caller that stops early leaves no read running."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from replicad.errors import ReplicadError
from replicad.snapshot.reader import read_ahead

pytestmark = pytest.mark.unit


class Source:
    def __init__(self, count: int, fail_at: int | None = None) -> None:
        self.count, self.fail_at = count, fail_at
        self.started: list[int] = []
        self.cancelled = False

    async def chunks(self) -> AsyncIterator[list[bytes]]:
        try:
            for i in range(self.count):
                self.started.append(i)
                await asyncio.sleep(0.01)  # the server's query
                if i == self.fail_at:
                    raise ReplicadError("reading the table failed", chunk=i)
                yield [b"%d" % i]
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def test_the_next_chunk_is_read_while_the_last_is_handled() -> None:
    source = Source(5)

    async def run() -> list[tuple[list[bytes], list[int]]]:
        seen = []
        async for chunk in read_ahead(source.chunks()):
            time.sleep(0.03)  # the caller writes the chunk's messages, not yielding
            seen.append((chunk, list(source.started)))
        return seen

    seen = asyncio.run(run())
    assert [chunk for chunk, _ in seen] == [[b"0"], [b"1"], [b"2"], [b"3"], [b"4"]]
    # While chunk i was handled, chunk i + 1 had been started (a read ahead), no further.
    assert [started[-1] for _, started in seen[:-1]] == [1, 2, 3, 4]
    assert all(len(started) <= i + 3 for i, (_, started) in enumerate(seen))


def test_a_failed_read_is_raised_to_the_caller_after_the_chunks_before_it() -> None:
    source = Source(5, fail_at=2)

    async def run() -> list[list[bytes]]:
        seen = []
        async for chunk in read_ahead(source.chunks()):
            seen.append(chunk)
        return seen

    with pytest.raises(ReplicadError, match="reading the table failed"):
        asyncio.run(run())
    assert source.started == [0, 1, 2]


def test_a_caller_that_stops_early_cancels_the_read_in_flight() -> None:
    source = Source(100)

    async def run() -> None:
        async for chunk in read_ahead(source.chunks()):
            if chunk == [b"1"]:
                break
        await asyncio.sleep(0.05)

    asyncio.run(run())
    assert source.cancelled and len(source.started) <= 4
