"""The snapshot driver (replicad/snapshot/driver.py) through its interface: operator requests
in, watermark rows in, reads out through `publish`, progress JSON for the marks; the chunk
reader replaced by a fake that records the windows it was asked to read."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from replicad.binlog.changes import ReadRows, RowChange
from replicad.config import load_config
from replicad.snapshot import driver as driver_module
from replicad.snapshot.columns import SnapshotColumn, description_of
from replicad.snapshot.driver import SnapshotDriver
from replicad.snapshot.incremental import IncrementalSnapshots, SnapshotRequest, Window
from replicad.snapshot.reader import TablePlan

pytestmark = pytest.mark.unit

SIGNAL = ("replicad", "replicad_signal")


class Inbox:
    def __init__(self, *requests: tuple[str, str, dict[str, Any]]) -> None:
        self.requests = [Request(*r) for r in requests]
        self.completed: dict[str, tuple[str, dict[str, Any]]] = {}

    def pending(self) -> list[Request]:
        return [r for r in self.requests if r.id not in self.completed]

    def complete(self, request_id: str, state: str, result: dict[str, Any]) -> None:
        self.completed[request_id] = (state, result)


class Request:
    def __init__(self, id: str, op: str, args: dict[str, Any]) -> None:
        self.id, self.op, self.args = id, op, args


class Conn:
    closed = False

    async def close(self) -> None:
        self.closed = True


class FakeReader:
    """Reads `table` in chunks of the request's size; records each window it read."""

    def __init__(self, table: list[dict[str, Any]]) -> None:
        self.table = table
        self.conn = Conn()
        self.windows: list[Window] = []

    async def plan(self, request: SnapshotRequest) -> TablePlan:
        db, table = request.db_table
        columns = (
            SnapshotColumn("id", "int", "int", False),
            SnapshotColumn("v", "int", "int", True),
        )
        return TablePlan(
            db, table, columns, ("id",), ("id",), description_of(db, table, columns, ("id",))
        )

    async def read_window(self, plan, window, after, where, chunk_rows) -> None:
        start = 0 if after is None else int(after[0])
        rows = [r for r in self.table if r["id"] > start][:chunk_rows]
        # As the server sends them: text-protocol row packets (id, v).
        window.rows = [
            b"".join(b"%c%d" % (len(str(r[k])), r[k]) for k in ("id", "v")) for r in rows
        ]
        window.keys = [(r["id"],) for r in rows]
        window.after = [str(rows[-1]["id"])] if rows else after
        window.full = len(rows) == chunk_rows
        self.windows.append(window)


def watermark(kind: str, window_id: str, pos: int) -> RowChange:
    after = {"id": f"p:{kind}", "kind": kind, "window_id": window_id}
    return RowChange("u", *SIGNAL, None, after, "bin.000001", pos, 0, None, 7, 0, ("id",))


def update(id: int, value: int) -> RowChange:
    before, after = {"id": id, "v": 0}, {"id": id, "v": value}
    return RowChange("u", "d", "t", before, after, "bin.000001", 50, 0, None, 7, 0, ("id",))


def make(
    inbox: Inbox | None = None,
    reader: FakeReader | None = None,
    leading: bool = True,
    includes: Any = lambda db, table: True,
) -> tuple[SnapshotDriver, list[RowChange]]:
    published: list[RowChange] = []

    async def publish(reads: ReadRows) -> None:
        published.extend(reads.changes())

    async def open_reader() -> Any:
        assert reader is not None
        return reader

    driver = SnapshotDriver(
        load_config(None, {}),
        "pw",
        includes=includes,
        publish=publish,
        leading=lambda: leading,
        requests=inbox,
        open_reader=open_reader,
    )
    return driver, published


@pytest.fixture(autouse=True)
def _every_tick_reads_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_module, "REQUESTS_EVERY_S", 0.0)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def emit_chunk(driver: SnapshotDriver, window: Window, pos: int) -> list[bool]:
    """The stream meets the window's two watermarks."""
    low = await driver.seen(*SIGNAL, [watermark("low", window.id, pos)])
    high = await driver.seen(*SIGNAL, [watermark("high", window.id, pos + 10)])
    await settle()
    return [low, high]


@pytest.mark.asyncio
async def test_a_requested_table_is_read_in_chunks_and_its_reads_go_out_at_high_watermarks() -> (
    None
):
    table = [{"id": i, "v": i * 10} for i in range(1, 6)]
    reader = FakeReader(table)
    inbox = Inbox(("op1", "snapshot", {"table": "d.t", "chunk_rows": 3}))
    driver, published = make(inbox, reader)
    assert driver.progress is None
    driver.tick(None)
    await settle()
    assert len(reader.windows) == 1
    assert driver.watches("d", "t") and driver.watches(*SIGNAL)
    assert not driver.watches("d", "other")
    first = reader.windows[0]

    assert await emit_chunk(driver, first, 100) == [False, False]  # watermarks: never published
    assert [(r.op, r.after, r.pos, r.row, r.snapshot) for r in published] == [
        ("r", table[0], 110, 0, "incremental"),
        ("r", table[1], 110, 1, "incremental"),
        ("r", table[2], 110, 2, "incremental"),
    ]
    progress = orjson.loads(driver.progress or "")
    assert progress["active"]["after"] == ["3"] and progress["active"]["rows"] == 3

    # The next window opened by itself; a row changed inside it is not read.
    assert len(reader.windows) == 2
    second = reader.windows[1]
    await driver.seen(*SIGNAL, [watermark("low", second.id, 200)])
    assert await driver.seen("d", "t", [update(4, 41)])  # published by the stream itself
    await driver.seen(*SIGNAL, [watermark("high", second.id, 210)])
    await settle()
    assert [r.after for r in published[3:]] == [table[4]]
    assert [r.row for r in published[3:]] == [3]
    assert len(reader.windows) == 2  # the short chunk was the last
    _, incremental = driver.status()
    assert incremental is not None and incremental["active"] is None
    assert incremental["finished"][0]["state"] == "done"
    assert incremental["finished"][0]["rows"] == 4


@pytest.mark.asyncio
async def test_watermarks_of_another_window_emit_nothing() -> None:
    reader = FakeReader([{"id": 1, "v": 0}])
    driver, published = make(Inbox(("op1", "snapshot", {"table": "d.t"})), reader)
    driver.tick(None)
    await settle()
    stranger = Window("someone-else", "d", "t", ("id",))
    assert await emit_chunk(driver, stranger, 100) == [False, False]
    assert published == []


@pytest.mark.asyncio
async def test_requests_for_excluded_tables_the_signal_table_or_malformed_are_rejected() -> None:
    inbox = Inbox(
        ("a", "snapshot", {"table": "x.t"}),
        ("b", "snapshot", {"table": f"{SIGNAL[0]}.{SIGNAL[1]}"}),
        ("c", "snapshot", {"chunk_rows": 5}),
        ("d", "position-set", {}),
    )
    driver, _ = make(inbox, FakeReader([]), includes=lambda db, table: db != "x")
    driver.tick(None)
    await settle()
    assert inbox.completed["a"] == ("rejected", {"error": "the filters exclude this table"})
    assert inbox.completed["b"] == ("rejected", {"error": "the signal table is not snapshotted"})
    assert inbox.completed["c"][0] == "rejected"
    assert "d" not in inbox.completed  # not the driver's
    assert driver.progress is None


@pytest.mark.asyncio
async def test_a_request_is_applied_once_the_stored_progress_holds_it() -> None:
    reader = FakeReader([{"id": 1, "v": 0}])
    inbox = Inbox(("op1", "snapshot", {"table": "d.t"}))
    driver, _ = make(inbox, reader)
    driver.tick(None)
    await settle()
    assert inbox.completed == {}
    durable = driver.progress
    assert durable is not None and '"op1"' in durable
    driver.tick('{"queue":[]}')  # a stored position from before the request
    assert inbox.completed == {}
    driver.tick(durable)
    assert inbox.completed == {"op1": ("applied", {"snapshot": "op1"})}


@pytest.mark.asyncio
async def test_a_cancelled_request_stops_and_is_applied_at_once() -> None:
    reader = FakeReader([{"id": i, "v": 0} for i in range(10)])
    inbox = Inbox(("op1", "snapshot", {"table": "d.t", "chunk_rows": 2}))
    driver, published = make(inbox, reader)
    driver.tick(None)
    await settle()
    inbox.requests.append(Request("op2", "snapshot-cancel", {"id": "op1"}))
    driver.tick(None)
    driver.tick(None)
    assert inbox.completed["op2"] == ("applied", {"snapshot": "cancel"})
    assert not driver.watches("d", "t")
    await emit_chunk(driver, reader.windows[0], 100)
    assert published == []
    _, incremental = driver.status()
    assert incremental is not None and incremental["finished"][0]["state"] == "cancelled"


@pytest.mark.asyncio
async def test_no_chunk_is_read_without_the_lease_or_after_a_stop() -> None:
    for leading, stop in ((False, False), (True, True)):
        reader = FakeReader([{"id": 1, "v": 0}])
        driver, _ = make(Inbox(("op1", "snapshot", {"table": "d.t"})), reader, leading=leading)
        if stop:
            driver.request_stop()
        driver.tick(None)
        await settle()
        assert reader.windows == []


@pytest.mark.asyncio
async def test_resumed_progress_continues_after_the_stored_key() -> None:
    stored = IncrementalSnapshots.resuming(["d.t", "d.u"], 2, ["3"], 1, 3).progress()
    reader = FakeReader([{"id": i, "v": 0} for i in range(1, 7)])
    driver, published = make(None, reader)
    driver.resume(stored)
    assert driver.progress == stored
    driver.tick(stored)
    await settle()
    await emit_chunk(driver, reader.windows[0], 100)
    assert [(r.after["id"], r.row) for r in published if r.after] == [(4, 3), (5, 4)]
    # The initial snapshot's tables keep its marks: neither the first nor the last table.
    assert [r.snapshot for r in published] == ["true", "true"]
    await driver.close()
    assert reader.conn.closed


@pytest.mark.asyncio
async def test_nothing_to_show_without_snapshots() -> None:
    driver, _ = make()
    driver.resume(None)
    assert driver.status() == (None, None)
    assert not driver.initial_open
    assert await driver.seen("d", "t", [update(1, 2)])


@pytest.mark.asyncio
async def test_a_pause_holds_the_next_window_until_resumed_and_is_stored() -> None:
    reader = FakeReader([{"id": i, "v": 0} for i in range(1, 7)])
    inbox = Inbox(("op1", "snapshot", {"table": "d.t", "chunk_rows": 2}))
    driver, published = make(inbox, reader)
    driver.tick(None)
    await settle()
    inbox.requests.append(Request("p1", "snapshot-pause", {}))
    driver.tick(None)
    await emit_chunk(driver, reader.windows[0], 100)  # the window in flight ends
    driver.tick(None)
    await settle()
    assert len(reader.windows) == 1 and len(published) == 2
    assert inbox.completed["p1"] == ("applied", {"snapshot": "pause"})
    paused = driver.progress
    assert paused is not None and orjson.loads(paused)["paused"] is True
    # A new leader resuming this progress stays paused.
    other, _ = make(Inbox(), FakeReader([]))
    other.resume(paused)
    other.tick(None)
    await settle()
    _, status = other.status()
    assert status is not None and status["paused"] is True
    inbox.requests.append(Request("r1", "snapshot-resume", {}))
    driver.tick(None)
    await settle()
    assert len(reader.windows) == 2, "resumed: the next window opens"
    assert "paused" not in orjson.loads(driver.progress or "{}")


@pytest.mark.asyncio
async def test_a_stop_names_tables_and_leaves_the_others() -> None:
    reader = FakeReader([{"id": 1, "v": 0}])
    inbox = Inbox(
        ("a", "snapshot", {"table": "d.t"}),
        ("b", "snapshot", {"table": "d.u"}),
        ("c", "snapshot", {"table": "d.v"}),
    )
    driver, _ = make(inbox, reader)
    driver.tick(None)
    await settle()
    inbox.requests.append(Request("s", "snapshot-cancel", {"tables": ["d.t", "d.v"]}))
    driver.tick(None)
    _, status = driver.status()
    assert status is not None
    assert {f["id"]: f["state"] for f in status["finished"]} == {"a": "cancelled", "c": "cancelled"}
    assert status["active"]["request"]["id"] == "b"


class EagerStream(FakeReader):
    """A stream faster than the chunk reader's task: both watermarks are met before
    `read_window` returns (the high watermark's binlog event can arrive before the OK of
    the statement that wrote it)."""

    driver: SnapshotDriver

    async def read_window(self, plan, window, after, where, chunk_rows) -> None:
        await super().read_window(plan, window, after, where, chunk_rows)
        pos = 100 * len(self.windows)
        await self.driver.seen(*SIGNAL, [watermark("low", window.id, pos)])
        await self.driver.seen(*SIGNAL, [watermark("high", window.id, pos + 10)])


@pytest.mark.asyncio
async def test_the_next_chunk_starts_at_once_when_the_stream_met_the_high_watermark_first() -> None:
    table = [{"id": i, "v": i} for i in range(1, 11)]
    reader = EagerStream(table)
    inbox = Inbox(("op1", "snapshot", {"table": "d.t", "chunk_rows": 3}))
    driver, published = make(inbox, reader)
    reader.driver = driver
    driver.tick(None)  # the only tick: every later chunk must start without one
    for _ in range(10):
        await settle()
    assert len(reader.windows) == 4  # 3 + 3 + 3 + 1 rows
    assert [r.after["id"] for r in published] == list(range(1, 11))
