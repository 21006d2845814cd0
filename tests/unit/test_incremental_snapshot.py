"""The watermark algorithm's state (replicad/snapshot/incremental.py): which chunk rows are
emitted at the high watermark, how progress moves and survives as JSON."""

from __future__ import annotations

import pytest

from replicad.binlog.changes import RowChange
from replicad.snapshot.incremental import (
    IncrementalSnapshots,
    SnapshotRequest,
    SnapshotRequestError,
    Window,
    new_request,
)

pytestmark = pytest.mark.unit


def change(op: str, before: dict | None, after: dict | None, table: str = "t") -> RowChange:
    return RowChange(op, "d", table, before, after, "f", 4, 0, None, 1, 0, ("id",))


def rows(*ids: int) -> list[dict]:
    return [{"id": i, "v": i * 10} for i in ids]


def fill(window: Window, chunk: list[dict], after: list[str], full: bool) -> None:
    """The chunk as the reader leaves it in the window: its rows (here the dicts stand for
    the packets) and their key values."""
    window.rows, window.keys = chunk, [(row["id"],) for row in chunk]
    window.after, window.full = after, full


def started(chunk_rows: int = 3) -> IncrementalSnapshots:
    snapshots = IncrementalSnapshots()
    snapshots.add(SnapshotRequest("r1", "d.t", None, chunk_rows))
    assert snapshots.next_table() is not None
    return snapshots


def test_rows_changed_inside_the_window_are_dropped_from_the_chunk() -> None:
    snapshots = started()
    window = snapshots.open_window(["id"])
    snapshots.touches(change("u", {"id": 1, "v": 0}, {"id": 1, "v": 1}))  # before low: kept
    assert snapshots.watermark("low", window.id) is None
    fill(window, rows(1, 2, 3), ["3"], True)
    snapshots.touches(change("u", {"id": 2, "v": 20}, {"id": 2, "v": 21}))
    snapshots.touches(change("c", None, {"id": 9, "v": 0}))  # not in the chunk: no effect
    snapshots.touches(change("d", {"id": 3, "v": 30}, None, table="other"))  # other table
    emitted = snapshots.watermark("high", window.id)
    assert emitted == rows(1, 3)
    assert snapshots.active is not None and snapshots.active.after == ["3"]
    assert (snapshots.active.chunks, snapshots.active.rows) == (1, 2)
    assert snapshots.window is None


def test_a_primary_key_change_touches_the_old_and_the_new_key() -> None:
    snapshots = started()
    window = snapshots.open_window(["id"])
    snapshots.watermark("low", window.id)
    fill(window, rows(1, 2, 3), ["3"], True)
    snapshots.touches(change("u", {"id": 1, "v": 10}, {"id": 3, "v": 10}))
    assert snapshots.watermark("high", window.id) == rows(2)


def test_watermarks_of_another_window_or_out_of_order_are_ignored() -> None:
    snapshots = started()
    window = snapshots.open_window(["id"])
    fill(window, rows(1), ["1"], False)
    assert snapshots.watermark("high", window.id) is None  # high before low: not a window
    assert snapshots.watermark("low", "someone-else") is None
    assert not window.low_seen
    snapshots.watermark("low", window.id)
    assert snapshots.watermark("high", "someone-else") is None
    assert snapshots.watermark("high", window.id) == rows(1)


def test_a_short_chunk_finishes_the_table_and_the_next_request_starts() -> None:
    snapshots = started()
    snapshots.add(SnapshotRequest("r2", "d.u", None, 3))
    window = snapshots.open_window(["id"])
    snapshots.watermark("low", window.id)
    fill(window, rows(1), ["1"], False)
    snapshots.watermark("high", window.id)
    assert snapshots.active is None
    assert [(f.id, f.state, f.rows) for f in snapshots.finished] == [("r1", "done", 1)]
    request = snapshots.next_table()
    assert request is not None and request.id == "r2"


def test_progress_survives_as_json_and_resumes_after_the_last_key() -> None:
    snapshots = started()
    snapshots.add(SnapshotRequest("r2", "d.u", "v > 1", 5))
    window = snapshots.open_window(["id"])
    snapshots.watermark("low", window.id)
    fill(window, rows(1, 2, 3), ["3"], True)
    snapshots.watermark("high", window.id)
    progress = snapshots.progress()
    assert progress is not None
    again = IncrementalSnapshots(progress)
    assert again.active is not None and again.active.after == ["3"]
    assert again.active.chunks == 1 and again.window is None
    assert [r.to_json() for r in again.queue] == [r.to_json() for r in snapshots.queue]
    assert again.progress() == progress


def test_cancel_and_fail_are_recorded_and_the_requests_are_known() -> None:
    snapshots = started()
    snapshots.add(SnapshotRequest("r2", "d.u"))
    assert snapshots.cancel("r2") == ["r2"]
    assert not snapshots.add(SnapshotRequest("r2", "d.u"))  # known: not queued twice
    failed = snapshots.fail("boom")
    assert failed is not None and failed.id == "r1"
    assert [(f.id, f.state, f.error) for f in snapshots.finished] == [
        ("r2", "cancelled", None),
        ("r1", "failed", "boom"),
    ]
    assert snapshots.active is None and snapshots.cancel(None) == []


def test_requests_name_a_table_as_db_dot_table() -> None:
    assert new_request("shop.orders", None, 10).db_table == ("shop", "orders")
    for bad in ("orders", ".orders", "shop."):
        with pytest.raises(SnapshotRequestError):
            new_request(bad, None, 10)
    with pytest.raises(SnapshotRequestError):
        new_request("a.b", None, 0)
    with pytest.raises(SnapshotRequestError):
        SnapshotRequest.from_json({"table": "a.b"})  # no id


def test_an_interrupted_initial_snapshot_resumes_as_incremental_snapshots() -> None:
    """The marks of a consistent initial snapshot carry the rest of it: the table being read
    continues after its last published key, with its row numbering; the unread tables follow
    from their start; nothing already finished is read again."""
    state = IncrementalSnapshots.resuming(["d.b", "d.c"], 500, ["41"], chunks=3, rows=41)
    resumed = IncrementalSnapshots(state.progress())
    request = resumed.next_table()
    assert request is not None and request.table == "d.b" and request.chunk_rows == 500
    assert resumed.active is not None
    assert (resumed.active.after, resumed.active.rows, resumed.active.chunks) == (["41"], 41, 3)
    assert [r.table for r in resumed.queue] == ["d.c"]
    # At a table boundary: the remaining tables from their start, none active.
    between = IncrementalSnapshots(IncrementalSnapshots.resuming(["d.c"], 500).progress())
    assert between.active is None and [r.table for r in between.queue] == ["d.c"]
    first = between.next_table()
    assert first is not None and between.active is not None and between.active.after is None
    assert IncrementalSnapshots.resuming([], 500).progress() is None


def test_status_shows_the_rate_of_the_active_request(monkeypatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("replicad.snapshot.incremental.time.monotonic", lambda: clock[0])
    snapshots = IncrementalSnapshots(
        IncrementalSnapshots.resuming(["d.t"], 3, ["9"], chunks=3, rows=9).progress()
    )
    snapshots.next_table()
    window = snapshots.open_window(["id"])
    snapshots.watermark("low", window.id)
    fill(window, rows(10, 11, 12), ["12"], True)
    clock[0] = 102.0
    assert snapshots.watermark("high", window.id) == rows(10, 11, 12)
    active = snapshots.status()["active"]
    assert active["rows"] == 12 and active["rows_per_s"] == 1.5  # 3 rows in 2 s, not 12
