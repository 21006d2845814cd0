"""Snapshot driving for one pipeline: the initial snapshot and the incremental snapshots
(docs/snapshots.md), beside the stream.

The pipeline (service/daemon.py) owns the stream, the sinks and the marks; this driver owns
everything snapshot: the read view of an initial consistent snapshot and its per-table
progress, the queue of incremental snapshot requests with the open watermark window, the
connection that reads chunks, and the progress JSON the marks carry. The pipeline
- opens the initial snapshot through it (`open_initial`) and has it read (`read_initial`);
- hands it the rows of the signal table and of the table in the open window as the stream
  meets them (`watches`, `seen`), and gets the chunk's reads back through `publish`;
- calls `tick` while the source is quiet (take operator requests, read the next chunk);
- puts `progress` in every transaction-end mark's checkpoint record (checkpoint_record.py),
  so it is durable exactly when the reads before it are acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import structlog

from replicad.binlog.changes import ReadRows, RowChange
from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.config import Config
from replicad.errors import ReplicadError
from replicad.protocol.transport import AsyncConnection
from replicad.snapshot import reader as snapshot_reader
from replicad.snapshot.columns import SnapshotError
from replicad.snapshot.incremental import (
    IncrementalSnapshots,
    SnapshotRequest,
    SnapshotRequestError,
    initial_request,
)
from replicad.snapshot.reader import ReadView, TablePlan, TableProgress
from replicad.snapshot.watermarks import ChunkReader
from replicad.source.schema import SchemaHistory, snapshot
from replicad.source.start import initial_position
from replicad.source.stream import ServerInfo, connect_retrying, server_info

log = structlog.get_logger("replicad.snapshot")

REQUESTS_EVERY_S = 1.0  # how often the operator's request queue is read
# Requests applied at once (by op), completed at the next pass with {"snapshot": <word>}; no
# snapshot request id is one of these words.
APPLIED_AT_ONCE = {
    "snapshot-cancel": "cancel",
    "snapshot-pause": "pause",
    "snapshot-resume": "resume",
    "log": "log",
}


class OperatorRequest(Protocol):
    """One queued operator request (coordination/requests.py has the queues)."""

    @property
    def id(self) -> str: ...
    @property
    def op(self) -> str: ...
    @property
    def args(self) -> dict[str, Any]: ...


class Requests(Protocol):
    """The operator's request queue as the driver uses it (coordination.requests.RequestInbox,
    typed here by shape: snapshot/ sits above coordination/ in the layers)."""

    def pending(self) -> Sequence[OperatorRequest]: ...
    def complete(self, request_id: str, state: str, result: dict[str, Any]) -> None: ...


# Publishes reads through the pipeline's filters and sinks (lease checked, rows counted).
Publish = Callable[[ReadRows], Awaitable[None]]
# Publishes the reads of an initial snapshot, then places a mark at the checkpoint (if any).
Emit = Callable[[Sequence[ReadRows], Checkpoint | None], Awaitable[None]]
OpenReader = Callable[[], Awaitable[ChunkReader]]


class SnapshotDriver:
    def __init__(
        self,
        config: Config,
        password: str,
        *,
        includes: Callable[[str, str], bool],
        publish: Publish,
        leading: Callable[[], bool],
        requests: Requests | None = None,
        open_reader: OpenReader | None = None,
    ) -> None:
        self.config = config
        self.password = password
        self._includes = includes
        self._publish = publish
        # Under ZooKeeper: the lease is valid (no chunk is started without it).
        self._leading = leading
        self._requests = requests
        self._open_reader = open_reader or self._connect_reader
        signal = config.snapshot.signal
        self.signal = (signal.database, signal.table)
        # The initial consistent snapshot: its read view until it is read, and the per-table
        # progress `replicad status` and the metrics show.
        self._view: ReadView | None = None
        self.tables: list[TableProgress] = []
        # Incremental snapshots: their state and its JSON as the marks carry it (None:
        # nothing requested).
        self._state = IncrementalSnapshots()
        self.progress: str | None = None
        self._taken: dict[str, str] = {}  # operator request id -> snapshot request id
        self._requests_at = 0.0
        self._reader: ChunkReader | None = None
        self._chunk_task: asyncio.Task[None] | None = None
        self._plans: dict[str, TablePlan] = {}
        # The initial snapshot's first table when read with watermarks (its first read is
        # "first"); not kept across a restart, which resumes after that read went out.
        self._first_initial: str | None = None
        self._stopping = False

    # ------------------------------------------------------------------ start

    def resume(self, progress: str | None) -> None:
        """Continue the incremental snapshots a stored checkpoint carries (None: none)."""
        if progress is not None:
            self._state = IncrementalSnapshots(progress)
            self.progress = progress

    def snapshotted(self, db: str, table: str) -> bool:
        return self._includes(db, table) and (db, table) != self.signal

    async def open_initial(self) -> tuple[Position, SchemaHistory]:
        """Open the initial snapshot: the position the stream starts at and the schema
        history there. A consistent read view (snapshot/reader.py) is kept open for
        `read_initial`; with `initial_method: watermarks` (the default on MySQL, where a read
        view's position needs a global read lock: `snapshot.locking`) the stream starts now
        and every included table is queued as an incremental snapshot instead."""
        conn = await connect_retrying(self.config.source, self.password, what="snapshot")
        try:
            info = await server_info(conn)
            method = self.config.snapshot.initial_method
            if method == "watermarks" or (method == "auto" and not info.mariadb):
                if self.config.snapshot.mode == "initial_only":
                    raise SnapshotError(
                        "snapshot.mode initial_only needs one consistent snapshot; on MySQL "
                        "set snapshot.initial_method: consistent with locking: minimal"
                    )
                started = await self._queue_initial(conn, info)
                await conn.close()  # the chunks are read on a connection of their own
                return started
            # initial_only: a stored position means "done, exit": nothing is stored until the
            # whole snapshot is, so an interrupted one starts again rather than stream the rest.
            only = self.config.snapshot.mode == "initial_only"
            resumable = not only and await self._signal_usable(conn, info)
            position = await snapshot_reader.begin(conn, info, self.config.snapshot)
            history = await snapshot(conn, position)
            plans = await snapshot_reader.plan_tables(conn, info, self.snapshotted)
        except BaseException:
            await conn.close()
            raise
        self._view = ReadView(conn, position, info, plans, resumable)
        self.tables = [TableProgress(plan.name) for plan in plans]
        log.info(
            "snapshot_started",
            position=str(position),
            tables=[plan.name for plan in plans],
            chunk_rows=self.config.snapshot.chunk_rows,
            resumable=resumable,
        )
        return position, history

    async def _signal_usable(self, conn: AsyncConnection, info: ServerInfo) -> bool:
        """Whether an interrupted consistent snapshot can resume: the rest is then read with
        watermarks, which need the signal table (checked before the read view opens: the
        check's rollback would end it)."""
        reader = ChunkReader(conn, info, self.config.snapshot.signal, self.config.pipeline)
        try:
            await reader.check_signal()
        except SnapshotRequestError as exc:
            log.warning(
                "snapshot_not_resumable",
                reason=str(exc),
                note="an interrupted initial snapshot starts again from the beginning",
            )
            return False
        return True

    async def _queue_initial(
        self, conn: AsyncConnection, info: ServerInfo
    ) -> tuple[Position, SchemaHistory]:
        """The initial snapshot as incremental snapshots: start streaming at the primary's
        current position and queue every included table; each is read in watermarked chunks
        while the stream runs (docs/snapshots.md). The signal table is checked first: an
        initial snapshot that cannot run stops the start with a clear error."""
        try:
            position = await initial_position(conn, info, "latest")
            history = await snapshot(conn, position)
            reader = ChunkReader(conn, info, self.config.snapshot.signal, self.config.pipeline)
            await reader.prepare()
            plans = await snapshot_reader.plan_tables(conn, info, self.snapshotted)
            chunk_rows = self.config.snapshot.chunk_rows
            for plan in plans:
                request = initial_request(plan.name, chunk_rows)
                if plan is plans[0]:
                    await reader.check(request)
                    self._first_initial = request.id
                self._state.add(request)
        except SnapshotRequestError as exc:
            raise SnapshotError(f"the initial snapshot cannot run: {exc}") from None
        self.progress = self._state.progress()
        log.info(
            "snapshot_started",
            method="watermarks",
            position=str(position),
            tables=[plan.name for plan in plans],
            chunk_rows=chunk_rows,
        )
        return position, history

    # ------------------------------------------------------------------ initial snapshot

    @property
    def initial_open(self) -> bool:
        """A consistent read view waits to be read (`read_initial`) before the stream."""
        return self._view is not None

    async def read_initial(self, emit: Emit) -> bool:
        """Publish every row of the read view's tables as op "r", then mark its position, so
        the position is stored once every read is acknowledged. A resumable snapshot also
        marks the position after every chunk (and table) with the rest of it as incremental
        snapshots: a restart streams from the snapshot's position and reads the rest with
        watermarks. False: stopped before the end."""
        view = self._view
        assert view is not None
        started = time.monotonic()
        try:
            for index, (plan, progress) in enumerate(zip(view.plans, self.tables, strict=True)):
                if not await self._read_table(view, index, plan, progress, emit):
                    return False
        finally:
            self._view = None
            with contextlib.suppress(ReplicadError):  # e.g. cancelled inside a query
                await snapshot_reader.end(view.conn)
            await view.conn.close()
        await emit((), Checkpoint(view.position))
        log.info(
            "snapshot_done",
            position=str(view.position),
            rows=sum(p.rows for p in self.tables),
            seconds=round(time.monotonic() - started, 3),
        )
        return True

    async def _read_table(
        self, view: ReadView, index: int, plan: TablePlan, progress: TableProgress, emit: Emit
    ) -> bool:
        """One table of the read view, chunk by chunk (False: stopped before its end)."""
        position, chunk_rows = view.position, self.config.snapshot.chunk_rows
        progress.started = time.monotonic()
        log.info("snapshot_table_started", table=plan.name, key=list(plan.chunk_key))
        reads = _TableReads(view, index, plan, int(time.time() * 1000))
        # The last row read is held back: marked the table's last if no more follow.
        held: bytes | None = None
        sent = 0
        rest = [p.name for p in view.plans[index:]]
        chunk_bytes = self.config.snapshot.chunk_bytes
        chunks = snapshot_reader.read_chunks(view.conn, plan, chunk_rows, chunk_bytes)
        # Closed on an early return too: no read of the next chunk goes on beside `end`.
        async with contextlib.aclosing(snapshot_reader.read_ahead(chunks)) as ahead:
            async for packets in ahead:
                progress.rows += len(packets)
                progress.chunks += 1
                batch = ([] if held is None else [held]) + packets[:-1]
                mark = None
                if view.resumable and plan.chunk_key and batch:
                    resume = IncrementalSnapshots.resuming(
                        rest,
                        chunk_rows,
                        reads.key_of(batch[-1]),
                        progress.chunks,
                        progress.rows - 1,
                    )
                    mark = Checkpoint(position, resume.progress())
                await emit(reads.of(batch, sent, False), mark)
                sent += len(batch)
                held = packets[-1]
                if self._stopping:
                    log.warning("snapshot_interrupted", table=plan.name, rows=progress.rows)
                    return False
        rest = rest[1:]
        after_table = None
        if view.resumable and rest:
            after_table = Checkpoint(
                position, IncrementalSnapshots.resuming(rest, chunk_rows).progress()
            )
        await emit([] if held is None else reads.of([held], sent, True), after_table)
        progress.done = True
        log.info(
            "snapshot_table_done",
            table=plan.name,
            rows=progress.rows,
            chunks=progress.chunks,
            seconds=round(time.monotonic() - progress.started, 3),
        )
        return True

    # ------------------------------------------------------------------ the stream's rows

    def watches(self, db: str, table: str) -> bool:
        """Rows of this table go to `seen` before (or instead of) being published: the signal
        table, and the table of the open window (its changes take their keys out of the
        chunk). Such rows never take the compiled path."""
        window = self._state.window
        return (db, table) == self.signal or (window is not None and table == window.table)

    async def seen(self, db: str, table: str, changes: Sequence[RowChange]) -> bool:
        """Rows of a watched table, in stream order; False: they are watermarks, never
        published. At the high watermark of the open window the chunk's untouched rows go
        out as reads, here, in stream order."""
        if (db, table) != self.signal:
            for change in changes:
                self._state.touches(change)
            return True
        for change in changes:
            after = change.after or {}
            await self._watermark(change, str(after.get("kind")), str(after.get("window_id")))
        return False

    async def _watermark(self, change: RowChange, kind: str, window_id: str) -> None:
        state = self._state
        active = state.active
        plan = None if active is None else self._plans.get(active.request.id)
        first_row = 0 if active is None else active.rows
        window = state.window
        chunk_size = 0 if window is None or window.rows is None else len(window.rows)
        rows = state.watermark(kind, window_id)
        if rows is None or plan is None or active is None:
            return
        request = active.request
        finished = state.active is None
        at, ts_ms = (change.file, change.pos), int(time.time() * 1000)
        if request.initial:  # the initial snapshot's tables keep its marks
            reads = snapshot_reader.initial_reads(
                plan,
                rows,
                at,
                change.server_id,
                ts_ms,
                first_row,
                first_table=request.id == self._first_initial,
                last_table=finished and not any(r.initial for r in state.queue),
                starts_table=first_row == 0,
                ends_table=finished,
            )
        else:
            reads = [snapshot_reader.read_rows(plan, rows, at, change.server_id, ts_ms, first_row)]
        for run in reads:
            await self._publish(run)
        self.progress = state.progress()
        log.info(
            "snapshot_chunk_emitted",
            table=plan.name,
            rows=len(rows),
            dropped=chunk_size - len(rows),
            finished=finished,
        )
        if finished:
            done = state.finished[-1].id if state.finished else None
            log.info("snapshot_request_done", table=plan.name, request=done)
        self._start_chunk()

    # ------------------------------------------------------------------ beside the stream

    def tick(self, durable: str | None) -> None:
        """While the source is quiet (never during the initial read view): take operator
        requests, complete those whose effect the stored progress `durable` holds, and start
        the next chunk."""
        if self._view is not None:
            return
        self._serve_requests(durable or "")
        self._start_chunk()

    def request_stop(self) -> None:
        """No new chunk starts; the initial snapshot ends after the chunk in flight."""
        self._stopping = True

    async def close(self) -> None:
        """Stop reading chunks and close their connection."""
        task = self._chunk_task
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        await self._close_reader()

    def _start_chunk(self) -> None:
        """Open the next window of the active (or next queued) request, if none is open."""
        if self._chunk_task is not None and not self._chunk_task.done():
            return
        if self._state.window is not None or self._stopping or not self._leading():
            return
        if self._state.paused:
            return
        request = self._state.next_table()
        if request is None:
            return
        self.progress = self._state.progress()
        self._chunk_task = asyncio.create_task(self._read_window(request))

    async def _connect_reader(self) -> ChunkReader:
        conn = await connect_retrying(self.config.source, self.password, what="snapshot")
        reader = ChunkReader(
            conn, await server_info(conn), self.config.snapshot.signal, self.config.pipeline
        )
        await reader.prepare()
        return reader

    async def _read_window(self, request: SnapshotRequest) -> None:
        try:
            reader = self._reader
            if reader is None:
                reader = self._reader = await self._open_reader()
            plan = self._plans.get(request.id)
            if plan is None:
                plan = self._plans[request.id] = await self._plan(reader, request)
            active = self._state.active
            if active is None or active.request.id != request.id:
                return  # cancelled meanwhile
            window = self._state.open_window(plan.chunk_key or plan.column_names)
            await reader.read_window(
                plan,
                window,
                active.after,
                request.where,
                request.chunk_rows if plan.chunk_key else None,
            )
            if self._state.window is not window:
                # The stream met the high watermark before this task ended, when it could not
                # start the next chunk (this one was still running): start it now, not at the
                # next tick (up to half a second per chunk).
                self._chunk_task = None
                self._start_chunk()
        except SnapshotRequestError as exc:
            failed = self._state.fail(str(exc))
            self.progress = self._state.progress()
            log.error(
                "snapshot_request_failed",
                request=None if failed is None else failed.id,
                table=request.table,
                error=str(exc),
            )
        except (ReplicadError, OSError) as exc:
            # The primary went away: the window is dropped and read again later.
            self._state.window = None
            await self._close_reader()
            log.warning("snapshot_chunk_retry", table=request.table, error=str(exc))

    async def _plan(self, reader: ChunkReader, request: SnapshotRequest) -> TablePlan:
        plan = await reader.plan(request)
        log.info(
            "snapshot_request_started",
            request=request.id,
            table=request.table,
            key=list(plan.chunk_key),
            where=request.where,
        )
        if not plan.chunk_key:
            log.warning(
                "snapshot_table_without_key",
                table=plan.name,
                note="read whole, in one window: memory holds the table",
            )
        return plan

    async def _close_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.conn.close()

    # ------------------------------------------------------------------ operator requests

    def _serve_requests(self, durable: str) -> None:
        """Take queued snapshot requests and cancellations (at most every second) and complete
        those whose effect the stored progress holds."""
        if self._requests is None or time.monotonic() - self._requests_at < REQUESTS_EVERY_S:
            return
        self._requests_at = time.monotonic()
        for request in self._requests.pending():
            taken = self._taken.get(request.id)
            if taken is not None:
                if taken in APPLIED_AT_ONCE.values() or f'"{taken}"' in durable:
                    self._requests.complete(request.id, "applied", {"snapshot": taken})
                    del self._taken[request.id]
                continue
            if request.op == "snapshot":
                if not self._take(request):
                    continue
            elif not self._apply_control(request):
                continue  # not ours (position set is the inbox's other use)
            self.progress = self._state.progress()

    def _apply_control(self, request: OperatorRequest) -> bool:
        """Cancel, pause, resume or log (CLI or signal): applied at once, completed at the
        next pass. False: not a snapshot control request."""
        op, args = request.op, request.args
        if op == "snapshot-cancel":
            cancelled = self._state.cancel(args.get("id"), args.get("tables"))
            log.info("snapshot_cancelled", request=request.id, requests=cancelled)
        elif op in ("snapshot-pause", "snapshot-resume"):
            self._state.paused = op == "snapshot-pause"
            event = "snapshot_paused" if self._state.paused else "snapshot_resumed"
            log.info(event, request=request.id)
        elif op == "log":
            log.info("signal_log", request=request.id, message=args.get("message"))
        else:
            return False
        self._taken[request.id] = APPLIED_AT_ONCE[op]
        return True

    def _take(self, request: OperatorRequest) -> bool:
        """Queue a snapshot request, or reject it (False)."""
        assert self._requests is not None
        try:
            wanted = SnapshotRequest.from_json({"id": request.id, **request.args})
        except SnapshotRequestError as exc:
            self._requests.complete(request.id, "rejected", {"error": str(exc)})
            return False
        refusal = None
        if not self._includes(*wanted.db_table):
            refusal = "the filters exclude this table"
        elif wanted.db_table == self.signal:
            refusal = "the signal table is not snapshotted"
        if refusal is not None:
            self._requests.complete(request.id, "rejected", {"error": refusal})
            return False
        if self._state.add(wanted):
            log.info(
                "snapshot_requested",
                request=wanted.id,
                table=wanted.table,
                where=wanted.where,
                chunk_rows=wanted.chunk_rows,
            )
        self._taken[request.id] = wanted.id
        return True

    # ------------------------------------------------------------------ status

    def status(self) -> tuple[list[dict[str, Any]] | None, dict[str, Any] | None]:
        """(the initial snapshot's tables, the incremental snapshots) as `replicad status`
        shows them; None where there is nothing to show."""
        initial = [p.to_json() for p in self.tables] or None
        return initial, None if self.progress is None else self._state.status()


class _TableReads:
    """The reads of one table of the initial read view: at the view's position, with the
    initial snapshot's marks (`initial_reads`), and the chunk key of a read row."""

    def __init__(self, view: ReadView, index: int, plan: TablePlan, ts_ms: int) -> None:
        self.view, self.index, self.plan, self.ts_ms = view, index, plan, ts_ms
        self._parse = snapshot_reader.row_parser(plan)

    def of(self, packets: list[bytes], first_row: int, ends_table: bool) -> list[ReadRows]:
        view = self.view
        return snapshot_reader.initial_reads(
            self.plan,
            packets,
            (view.position.file, view.position.pos),
            view.info.server_id,
            self.ts_ms,
            first_row,
            first_table=self.index == 0,
            last_table=self.index == len(view.plans) - 1,
            starts_table=first_row == 0,
            ends_table=ends_table,
        )

    def key_of(self, packet: bytes) -> list[str]:
        """The chunk key of the row in `packet` as SQL literals (what progress stores)."""
        return snapshot_reader.row_key(self.plan, self._parse(packet))
