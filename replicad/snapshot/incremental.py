"""On-demand incremental snapshots: the DBLog watermark algorithm, as state (sans-IO).

The leader reads a requested table in key-ordered chunks while it streams. For each chunk:
1. it writes a *low* watermark row to the signal table (a row with a fresh window id);
2. it SELECTs the next chunk (`chunk_rows` rows after the last key read);
3. it writes a *high* watermark row.
The stream sees both watermark rows in binlog order. Every row change of the table between
the two touches a key; at the high watermark the chunk's rows minus the touched keys are
emitted as reads, in the stream, right there. A touched row's newer state is in the stream
already (it was changed inside the window) or follows it, so no read can overwrite a newer
change: reads and changes fold to the table. The stream never waits for more than one chunk's
emission; the SELECT runs beside it.

Progress - the queue of requests, the active table and the key literals of the last row read
- is kept as JSON in the stored checkpoint (`Checkpoint.snapshot`, checkpoint_record.py), so it
becomes durable exactly when the marks after the reads are acknowledged, and a restart or a new
leader resumes at the next chunk, not at zero.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from replicad.binlog.changes import RowChange
from replicad.errors import ReplicadError
from replicad.exit_codes import EXIT_USAGE


class SnapshotRequestError(ReplicadError):
    """A snapshot request that cannot run: an unknown table, a broken condition, a missing
    signal table or grant. Nothing of it is emitted."""

    exit_code = EXIT_USAGE


INITIAL_PREFIX = "initial-"


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    id: str
    table: str  # "db.table"
    where: str | None = None
    chunk_rows: int = 10_000
    requested_ms: int = 0

    @property
    def db_table(self) -> tuple[str, str]:
        db, _, table = self.table.partition(".")
        return db, table

    @property
    def initial(self) -> bool:
        """A table of the initial snapshot (read with watermarks, or resumed after a
        restart), not a request made while streaming."""
        return self.id.startswith(INITIAL_PREFIX)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "table": self.table,
            "chunk_rows": self.chunk_rows,
            "requested_ms": self.requested_ms,
        }
        if self.where:
            out["where"] = self.where
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotRequest:
        try:
            return cls(
                str(data["id"]),
                str(data["table"]),
                data.get("where") or None,
                int(data.get("chunk_rows", 10_000)),
                int(data.get("requested_ms", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotRequestError(f"bad snapshot request: {exc}", value=data) from None


def initial_request(table: str, chunk_rows: int) -> SnapshotRequest:
    return SnapshotRequest(f"{INITIAL_PREFIX}{table}", table, None, chunk_rows)


def new_request(table: str, where: str | None, chunk_rows: int) -> SnapshotRequest:
    db, dot, name = table.partition(".")
    if not dot or not db or not name:
        raise SnapshotRequestError("a snapshot request names its table as db.table", table=table)
    if chunk_rows < 1:
        raise SnapshotRequestError("--chunk-rows must be at least 1", chunk_rows=chunk_rows)
    return SnapshotRequest(
        f"snap-{uuid.uuid4().hex[:12]}", table, where, chunk_rows, int(time.time() * 1000)
    )


@dataclass(slots=True)
class Active:
    request: SnapshotRequest
    after: list[str] | None = None  # key literals of the last row read (None: from the start)
    chunks: int = 0
    rows: int = 0  # reads emitted
    # Not stored: when this process took the request over, and its rows then (for the rate).
    since: float = -1.0
    rows_then: int = -1

    def __post_init__(self) -> None:
        if self.since < 0:
            self.since = time.monotonic()
        if self.rows_then < 0:
            self.rows_then = self.rows

    def to_json(self) -> dict[str, Any]:
        return {
            "request": self.request.to_json(),
            "after": self.after,
            "chunks": self.chunks,
            "rows": self.rows,
        }

    def rate(self) -> float:
        """Reads per second emitted by this process since it took the request over."""
        elapsed = time.monotonic() - self.since
        return round((self.rows - self.rows_then) / elapsed, 1) if elapsed > 0 else 0.0


@dataclass(slots=True)
class Window:
    """One chunk between its watermarks."""

    id: str
    db: str
    table: str
    key: tuple[str, ...]
    low_seen: bool = False
    touched: set[tuple[Any, ...]] = field(default_factory=set)
    rows: list[bytes] | None = None  # the chunk's row packets, once the SELECT returned
    keys: list[tuple[Any, ...]] | None = None  # their values of `key`, in the same order
    after: list[str] | None = None  # key literals of the chunk's last row
    full: bool = False  # as many rows as asked: the table may have more


@dataclass(slots=True)
class Finished:
    id: str
    table: str
    state: str  # "done" | "failed" | "cancelled"
    rows: int
    chunks: int
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "table": self.table,
            "state": self.state,
            "rows": self.rows,
            "chunks": self.chunks,
        }
        if self.error:
            out["error"] = self.error
        return out


MAX_FINISHED = 20  # finished requests kept for `replicad snapshot status`


class IncrementalSnapshots:
    """The queue, the active table and its open window."""

    def __init__(self, progress: str | None = None) -> None:
        self.queue: list[SnapshotRequest] = []
        self.active: Active | None = None
        self.finished: list[Finished] = []
        self.window: Window | None = None
        # pause-snapshot: no new window opens until resume-snapshot (stored with the rest)
        self.paused = False
        if progress:
            data = orjson.loads(progress)
            self.paused = bool(data.get("paused", False))
            self.queue = [SnapshotRequest.from_json(r) for r in data.get("queue", [])]
            if data.get("active"):
                active = data["active"]
                self.active = Active(
                    SnapshotRequest.from_json(active["request"]),
                    active.get("after"),
                    int(active.get("chunks", 0)),
                    int(active.get("rows", 0)),
                )
            self.finished = [Finished(**f) for f in data.get("finished", [])]

    @classmethod
    def resuming(
        cls,
        tables: Sequence[str],
        chunk_rows: int,
        after: list[str] | None = None,
        chunks: int = 0,
        rows: int = 0,
    ) -> IncrementalSnapshots:
        """The rest of an initial consistent snapshot as incremental snapshots: `tables` are
        those not finished, the first of them read up to the key literals `after` (None: not
        started). A restart resumes there with watermarked chunks (the read view is gone)."""
        state = cls()
        requests = [initial_request(t, chunk_rows) for t in tables]
        if requests and after is not None:
            state.active = Active(requests.pop(0), after, chunks, rows)
        state.queue = requests
        return state

    # ------------------------------------------------------------------ queue

    def known(self, request_id: str) -> bool:
        return (
            any(r.id == request_id for r in self.queue)
            or (self.active is not None and self.active.request.id == request_id)
            or any(f.id == request_id for f in self.finished)
        )

    def add(self, request: SnapshotRequest) -> bool:
        if self.known(request.id):
            return False
        self.queue.append(request)
        return True

    def next_table(self) -> SnapshotRequest | None:
        """Start the next queued request if none is active."""
        if self.active is None and self.queue:
            self.active = Active(self.queue.pop(0))
        return None if self.active is None else self.active.request

    def cancel(self, request_id: str | None, tables: Sequence[str] | None = None) -> list[str]:
        """Cancel one request, or those of `tables` ("db.table"), or all (both None);
        returns the ids cancelled."""

        def chosen(request: SnapshotRequest) -> bool:
            if tables is not None:
                return request.table in tables
            return request_id is None or request.id == request_id

        cancelled = []
        for request in list(self.queue):
            if chosen(request):
                self.queue.remove(request)
                self._finish(request, "cancelled", 0, 0)
                cancelled.append(request.id)
        active = self.active
        if active is not None and chosen(active.request):
            self._finish(active.request, "cancelled", active.rows, active.chunks)
            cancelled.append(active.request.id)
            self.active = None
            self.window = None
        return cancelled

    def fail(self, error: str) -> SnapshotRequest | None:
        active = self.active
        if active is None:
            return None
        self._finish(active.request, "failed", active.rows, active.chunks, error)
        self.active = None
        self.window = None
        return active.request

    def _finish(
        self, request: SnapshotRequest, state: str, rows: int, chunks: int, error: str | None = None
    ) -> None:
        self.finished.append(Finished(request.id, request.table, state, rows, chunks, error))
        del self.finished[:-MAX_FINISHED]

    def progress(self) -> str | None:
        """What the stored position keeps (None: nothing queued, active, finished or paused)."""
        if self.active is None and not self.queue and not self.finished and not self.paused:
            return None
        data: dict[str, Any] = {
            "queue": [r.to_json() for r in self.queue],
            "active": None if self.active is None else self.active.to_json(),
            "finished": [f.to_json() for f in self.finished],
        }
        if self.paused:
            data["paused"] = True
        return orjson.dumps(data).decode()

    def status(self) -> dict[str, Any]:
        active = None
        if self.active is not None:
            active = {**self.active.to_json(), "rows_per_s": self.active.rate()}
        return {
            "active": active,
            "paused": self.paused,
            "queued": [r.to_json() for r in self.queue],
            "finished": [f.to_json() for f in self.finished],
        }

    # ------------------------------------------------------------------ windows

    def open_window(self, key: Sequence[str]) -> Window:
        assert self.active is not None and self.window is None
        db, table = self.active.request.db_table
        self.window = Window(uuid.uuid4().hex, db, table, tuple(key))
        return self.window

    def watermark(self, kind: str, window_id: str) -> list[bytes] | None:
        """A watermark row seen in the stream. At the high watermark of the open window:
        the chunk's rows that no change inside the window touched (to emit as reads), and the
        progress moves past the chunk. Else None."""
        window = self.window
        if window is None or window.id != window_id:
            return None  # another process's window, or one from before a restart
        if kind == "low":
            window.low_seen = True
            return None
        if kind != "high" or not window.low_seen or window.rows is None or window.keys is None:
            return None
        touched = window.touched
        rows = [r for r, k in zip(window.rows, window.keys, strict=True) if k not in touched]
        active = self.active
        assert active is not None
        active.chunks += 1
        active.rows += len(rows)
        if window.after is not None:
            active.after = window.after
        self.window = None
        if not window.full:
            self._finish(active.request, "done", active.rows, active.chunks)
            self.active = None
        return rows

    def touches(self, change: RowChange) -> None:
        """A row change in the stream: inside an open window, its keys are dropped from the
        chunk (the stream has, or will have, the newer state)."""
        window = self.window
        if window is None or not window.low_seen:
            return
        if change.db != window.db or change.table != window.table:
            return
        for image in (change.before, change.after):
            if image is not None:
                window.touched.add(tuple(image.get(k) for k in window.key))
