"""The `replicad run` pipeline: primary -> transactions -> sinks -> checkpoint, with the
snapshots beside the stream.

One path per transaction unit: its rows are published as they are decoded (a huge
transaction streams) and a mark follows it (and every `checkpoint.rows` rows inside a huge
one, with a row index, so a restart skips rows already delivered). A single sink that takes
whole ROWS events gets them through its compiled route, a faster way to the same messages;
the counting, marking and lease checks are the same either way. The position is stored only
up to the last mark every sink acknowledged (service/checkpoint.py), so a crash re-sends at
most the unacknowledged window. A sink that cannot keep up makes `publish` wait
(`wait_for_room`), which stops reading: memory stays bounded.

Snapshots (snapshot/driver.py) are driven beside the stream: the pipeline hands the driver
the rows of the signal table (watermarks) and of the table being read, and publishes the
reads the driver produces through the same filters and sinks, between the stream's rows.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import structlog

from replicad.binlog.changes import (
    EventRows,
    ReadRows,
    RowChange,
    RowNumbering,
    StatementContext,
    TableChange,
)
from replicad.binlog.events import HeartbeatEvent, QueryEvent
from replicad.binlog.position import Position
from replicad.binlog.rows import RowsEvent, TableMapEvent
from replicad.checkpoint_record import Checkpoint
from replicad.config import Config
from replicad.coordination.local import LocalPipelineStore
from replicad.coordination.requests import LocalRequests, RequestInbox
from replicad.coordination.store import CommandInbox, Lease, PipelineStore
from replicad.errors import (
    CoordinationUnavailableError,
    LeadershipLostError,
    ReplicadError,
)
from replicad.protocol.commands import cell_text
from replicad.protocol.transport import AsyncConnection
from replicad.relay.stream import RelayedStream
from replicad.service import producer_process
from replicad.service.checkpoint import Checkpointer
from replicad.service.heartbeat import FileClock, heartbeat_writes, retention_checks
from replicad.service.kafka_signals import KafkaSignals, RequestSources
from replicad.service.telemetry import Telemetry
from replicad.sinks.base import EventSink, Sink
from replicad.sinks.kafka import KafkaSink
from replicad.sinks.routing import ChangeFilter
from replicad.sinks.stdout import JsonLinesSink
from replicad.sinks.value_modes import ValueMode
from replicad.snapshot.driver import SnapshotDriver
from replicad.snapshot.reader import TableProgress
from replicad.source.schema import (
    SchemaHistory,
    SchemaHistoryAheadError,
    SchemaHistoryError,
    default_history_path,
    snapshot,
    table_changes,
)
from replicad.source.start import initial_position
from replicad.source.stream import (
    Reconnected,
    ReplicaStream,
    server_info,
    with_primary,
)
from replicad.source.transactions import TransactionUnit

log = structlog.get_logger("replicad.daemon")

FAILED_DRAIN_S = 5.0  # after a failure: acknowledgements of what Kafka already has
CLOSE_RESERVE_S = 5.0  # of shutdown.timeout_s, kept for closing connections after the drain
STATUS_INTERVAL_S = 2.0  # how often the status for `replicad status` is refreshed
# The snapshot modes that read the tables when nothing is stored (docs/snapshots.md); the
# others stream from the schema at the start position (`no_data`) or from `source.start`.
SNAPSHOT_READING_MODES = ("initial", "initial_only", "when_needed", "always")


class SchemaHistoryMissingError(SchemaHistoryError):
    """A stored position without a schema history that reaches back to it (deleted, or the
    position moved back by hand), and `snapshot.mode` is not `recovery`: names the store."""


@dataclass(slots=True)
class _Cursor:
    """Where the stream is inside the transaction being read, and what decodes its rows."""

    statement: StatementContext  # thread id and statement text of the rows
    skip: int = 0  # rows of the transaction delivered before (a restart or reconnect inside)
    delivered: int = 0  # rows of it counted so far (excluded tables' too)
    gtid: str | None = None
    numbering: RowNumbering = field(default_factory=RowNumbering)
    # TABLE_MAPs as the rows are decoded with (named from the schema history if needed).
    tables: dict[int, TableMapEvent] = field(default_factory=dict)


class Pipeline:
    def __init__(
        self,
        config: Config,
        password: str,
        store: PipelineStore | None = None,
        lease: Lease | None = None,
        inbox: CommandInbox | None = None,
        requests: RequestInbox | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.config = config
        self.password = password
        self.telemetry = telemetry or Telemetry()
        self.store: PipelineStore = store or LocalPipelineStore(
            config.coordination.local.path,
            config.schema_.history_path or default_history_path(config.coordination.local.path),
            config.pipeline,
        )
        # Without ZooKeeper nobody else may publish for this pipeline: no lease to check.
        self.lease = lease
        # Operator commands (ZooKeeper): one that is due ends the pipeline at the next
        # transaction boundary, cleanly; the caller applies it and starts a new pipeline.
        self.inbox = inbox
        self.command: Any = None
        self.filter = ChangeFilter(config.filters)
        self.sinks: list[Sink] = []
        self.kafka: KafkaSink | None = None
        values = ValueMode(config.envelope)  # a bad Debezium option is a ConfigError here
        if config.sinks.kafka is not None:
            self.kafka = KafkaSink(
                config.sinks.kafka,
                config.pipeline,
                self.filter,
                values,
                producer_command=producer_process.command(config),
            )
            self.sinks.append(self.kafka)
        if config.sinks.mqtt is not None:
            from replicad.sinks.mqtt import MqttSink  # aiomqtt only when MQTT is configured

            self.sinks.append(MqttSink(config.sinks.mqtt, config.pipeline, self.filter, values))
        stdout = config.sinks.stdout
        if stdout is not None or not self.sinks:  # stdout is the default without a sink
            self.sinks.append(
                JsonLinesSink(stdout.path if stdout else None, self.filter, config.pipeline, values)
            )
        # When the primary last wrote each binlog file, as far as this process has read it.
        self.file_clock = FileClock()
        self.stream: ReplicaStream | RelayedStream
        statements = config.envelope.include_query
        if config.relay.enabled:
            self.stream = RelayedStream(
                config.source,
                password,
                pipeline=config.pipeline,
                relay=config.relay,
                statements=statements,
            )
        else:
            self.stream = ReplicaStream(
                config.source, password, pipeline=config.pipeline, statements=statements
            )
        # A single sink that takes whole ROWS events (Kafka, JSON lines) is offered them.
        only = self.sinks[0] if len(self.sinks) == 1 else None
        self._event_sink = only if isinstance(only, EventSink) else None
        self._cursor = _Cursor(StatementContext(keep_query=config.envelope.include_query))
        self._rows_per_mark = config.checkpoint.rows
        # After the last transaction read, with the snapshot progress its mark carried.
        self.committed: Checkpoint | None = None
        self.transactions = 0
        self.rows = 0
        self._in_transaction = False
        self._stop_requested = False
        # Held while an event is processed or sinks are maintained: a sink is never entered
        # from two tasks at once (an exactly-once commit must not interleave with publishing).
        self._gate = asyncio.Lock()
        self._tick_failure: Exception | None = None
        # Schema history (replicad.source.schema): column names for TABLE_MAPs without them.
        self.history = SchemaHistory()
        self.checkpointer: Checkpointer | None = None
        self.last_commit_read: float | None = None  # wall clock
        self._status_at = 0.0
        self._heartbeat_at = 0.0  # monotonic time of the next heartbeat message
        # The initial and incremental snapshots (snapshot/driver.py), with their progress.
        if requests is None and config.coordination.zookeeper is None:
            requests = LocalRequests(config.coordination.local.path)
        self.signals = None if config.signals.kafka is None else KafkaSignals(config)
        sources = requests if self.signals is None else RequestSources(requests, self.signals)
        self.snapshots = SnapshotDriver(
            config,
            password,
            includes=self.filter.includes,
            publish=self._publish_reads,
            leading=lambda: self.lease is None or self.lease.valid,
            requests=sources,
        )
        # Counters, lag and acknowledgements for the metrics and /readyz (service/progress.py):
        # plain integers, so that no prometheus-client call sits on the per-row path.
        self.progress = self.telemetry.progress(config)
        self.progress.restart()
        self._reading = False  # iterating the binlog stream
        self._snapshotting = False  # reading the initial snapshot

    def request_stop(self) -> None:
        self._stop_requested = True
        self.snapshots.request_stop()

    @property
    def idle(self) -> bool:
        return not self._in_transaction

    @property
    def stored(self) -> Checkpoint | None:
        return None if self.checkpointer is None else self.checkpointer.stored

    @property
    def stored_position(self) -> Position | None:
        return None if self.checkpointer is None else self.checkpointer.stored_position

    async def resolve_start(self) -> Checkpoint:
        stored = self.store.load_checkpoint()
        from_kafka = False
        if self.kafka is not None:
            in_kafka = await self.kafka.start()
            from_kafka = in_kafka is not None
            if in_kafka is not None:  # exactly-once: Kafka's record is the truth
                if stored is not None and stored != in_kafka:
                    log.info("position_from_kafka", kafka=str(in_kafka), local=str(stored))
                stored = in_kafka
        if stored is not None and self.config.snapshot.mode == "when_needed":
            held = stored.position
            if await with_primary(
                self.config.source,
                self.password,
                lambda conn: _purged(conn, held),
                what="binary log list",
            ):
                log.warning(
                    "position_purged",
                    position=str(stored),
                    note="snapshot.mode when_needed: a new snapshot replaces the stored position",
                )
                stored = None
        if stored is not None and self.config.snapshot.mode == "always":
            log.warning(
                "position_replaced",
                position=str(stored),
                incremental_snapshots=stored.snapshot is not None,
                note="snapshot.mode always: a new snapshot replaces the stored position",
            )
            stored = None
        if stored is None and self.config.snapshot.mode in SNAPSHOT_READING_MODES:
            position, self.history = await self.snapshots.open_initial()
            return self._checkpoint(position)
        if stored is not None:
            log.info("position_loaded", position=str(stored))
            if self.config.snapshot.mode == "initial_only":
                return stored  # its snapshot is done: nothing is streamed (_stream)
            self.snapshots.resume(stored.snapshot)  # incremental snapshots in progress
            self.history = await self._stored_history(stored.position, from_kafka)
            return stored

        async def start_here(conn: AsyncConnection) -> tuple[Position, SchemaHistory]:
            info = await server_info(conn)
            position = await initial_position(conn, info, self.config.source.start)
            # Right after the start position was read, before the dump starts.
            return position, await snapshot(conn, position)

        position, self.history = await with_primary(
            self.config.source, self.password, start_here, what="start position"
        )
        if self.config.source.start != "latest":
            log.warning(
                "schema_snapshot_not_at_start",
                start=str(self.config.source.start),
                note="events before later DDL may decode with today's columns",
            )
        log.info("position_initial", position=str(position), start=str(self.config.source.start))
        return self._checkpoint(position)

    def _checkpoint(self, position: Position) -> Checkpoint:
        """The checkpoint record of a mark at `position`, with the snapshot progress and the
        signal topic's offset as they are now."""
        signal_offset = None if self.signals is None else self.signals.next_offset
        return Checkpoint(position, self.snapshots.progress, signal_offset)

    async def _stored_history(self, position: Position, from_kafka: bool) -> SchemaHistory:
        """The persisted history, trimmed to the stored position. Never a new snapshot
        (today's schema, not the one at the position: events before a later DDL would
        decode with today's columns) unless `snapshot.mode: recovery` says so, or the
        position is exactly-once's record in Kafka (`from_kafka`): the history lives in the
        pipeline's store, which a new worker directory lacks and which may be ahead of the
        Kafka record, so there the snapshot of today's schema stays, with its warning."""
        try:
            history = self.store.load_history(position)
        except SchemaHistoryAheadError as exc:
            log.warning("schema_history_unusable", error=str(exc))
            history = None
        if history is not None:
            return history
        if self.config.snapshot.mode != "recovery" and not from_kafka:
            raise SchemaHistoryMissingError(
                "no usable schema history for the stored position; set snapshot.mode: "
                "recovery to rebuild it from the primary's current DDL (right only if no DDL "
                "ran since that position), or re-snapshot",
                store=self.store.describe(),
                position=str(position),
            )
        log.warning(
            "schema_history_missing",
            store=self.store.describe(),
            note="a snapshot of today's schema stands for the stored position",
        )
        return await with_primary(
            self.config.source,
            self.password,
            lambda conn: snapshot(conn, position),
            what="schema snapshot",
        )

    @property
    def snapshot_progress(self) -> list[TableProgress]:
        """The initial snapshot's tables, for the metrics."""
        return self.snapshots.tables

    async def _emit_reads(self, reads: Sequence[ReadRows], mark: Checkpoint | None) -> None:
        """Reads of the initial snapshot, then a mark at `mark` (if any), as one step."""
        checkpointer = self.checkpointer
        assert checkpointer is not None
        async with self._gate:
            for run in reads:
                await self._publish_reads(run)
            if mark is not None:
                checkpointer.mark(mark, True)
                await self._after_mark(checkpointer)

    async def _publish_reads(self, reads: ReadRows) -> None:
        """A snapshot's reads (op "r"), published and counted beside the stream's rows. A
        single sink that takes whole chunks (`EventSink`) is offered them first, the faster
        route to the same messages; where it declines, they go one by one."""
        sink = self._event_sink
        count = None
        if sink is not None:
            if self._tick_failure is not None:
                raise self._tick_failure
            await self._hold_lease()
            count = sink.publish_reads(reads)
        if count is None:
            for read in reads.changes():
                await self._publish_read(read)
            return
        self._count_reads(reads.schema.db, reads.schema.table, count)
        if sink is not None and sink.backlogged:
            await sink.wait_for_room()

    async def _publish_read(self, change: RowChange) -> None:
        """A snapshot's read (op "r"): published and counted beside the stream's rows."""
        if self._tick_failure is not None:
            raise self._tick_failure
        await self._send((change,))
        self._count_reads(change.db, change.table, 1)

    def _count_reads(self, db: str, table: str, count: int) -> None:
        self.rows += count
        key = (db, table, "r")
        table_rows = self.progress.table_rows
        table_rows[key] = table_rows.get(key, 0) + count

    async def run(self) -> None:
        self.committed = await self.resolve_start()
        if self.signals is not None:  # signals before the stored offset were applied
            self.signals.start_at(self.committed.signal_offset)
        checkpointer = self.checkpointer = Checkpointer(
            self.sinks,
            self.store,
            self.history,
            self.config.checkpoint.interval_s,
            stored=self.store.load_checkpoint(),
            on_acked=self.progress.acknowledged,
        )
        # Both tasks take the gate; whichever fails first ends the pipeline with its error.
        streaming = asyncio.create_task(self._stream(checkpointer))
        ticker = asyncio.create_task(self._tick())
        # Heartbeat writes and the binlog retention check: beside the pipeline, never fatal.
        helpers = [
            asyncio.create_task(
                retention_checks(
                    self.config,
                    self.password,
                    lambda: self.stored_position,
                    self.telemetry,
                    self.file_clock,
                )
            )
        ]
        if self.config.heartbeat.query is not None:
            helpers.append(
                asyncio.create_task(
                    heartbeat_writes(self.config, self.password, self.telemetry, self.lease)
                )
            )
        try:
            await asyncio.wait({streaming, ticker}, return_when=asyncio.FIRST_COMPLETED)
            if ticker.done() and not streaming.done():
                streaming.cancel()
                ticker.result()  # raises the sink's error
            await streaming
        finally:
            streaming.cancel()
            ticker.cancel()
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)

    async def _stream(self, checkpointer: Checkpointer) -> None:
        assert self.committed is not None
        snapshot_read = self.snapshots.initial_open
        if snapshot_read:
            self._snapshotting = True
            try:
                if not await self.snapshots.read_initial(self._emit_reads):
                    return
            finally:
                self._snapshotting = False
        if self.config.snapshot.mode == "initial_only":
            await self._snapshot_stored(checkpointer, snapshot_read)
            return
        self._cursor.skip = self.committed.position.row  # rows of the next transaction delivered
        progress = self.progress
        self._reading = True
        async for unit in self.stream.units(self.committed.position):
            if isinstance(unit, HeartbeatEvent):
                progress.heartbeat(self._in_transaction)
                # While the primary is quiet its heartbeats are the boundaries at which a
                # due command (or a stop) ends the pipeline: no transaction is in flight.
                if (self._stop_requested or self.command is not None) and not self._in_transaction:
                    return
                continue
            await self._gate.acquire()  # uncontended: no suspension
            try:
                if self._tick_failure is not None:  # a sink failed while the source was quiet
                    raise self._tick_failure
                if isinstance(unit, Reconnected):
                    self._resumed(unit)
                    continue
                await self._transaction(unit, checkpointer)
                if unit.end is not None and (self._stop_requested or self.command is not None):
                    return
            finally:
                self._gate.release()

    async def _snapshot_stored(self, checkpointer: Checkpointer, read_now: bool) -> None:
        """`snapshot.mode: initial_only`: once the snapshot's position is stored (every read
        acknowledged; the ticker collects the acknowledgements), the run ends, exit 0,
        without streaming; at once if an earlier run stored it."""
        assert self.committed is not None
        snapshot_at = self.committed.position
        while read_now and checkpointer.stored_position != snapshot_at:
            if self._stop_requested:
                return
            await asyncio.sleep(0.05)
        log.info(
            "snapshot_only_done",
            position=str(snapshot_at),
            note="snapshot.mode initial_only: the snapshot is stored; nothing is streamed",
        )

    def _resumed(self, unit: Reconnected) -> None:
        """The source reconnected: the transaction in flight (if any) comes again from its
        start, and the rows of it already handed to the sinks are skipped."""
        self.telemetry.reconnects.labels(self.config.pipeline).inc()
        cursor = self._cursor
        if self._in_transaction:
            cursor.skip = max(cursor.skip, cursor.delivered)
            if self.kafka is not None:
                self.kafka.transaction_restarts()  # its delivered rows are counted again
        log.info(
            "source_resumed",
            position=str(unit.position),
            in_transaction=self._in_transaction,
            skip_rows=cursor.skip,
        )
        self._in_transaction = False
        cursor.delivered = 0
        self.history.rollback()  # the DDL of the transaction in flight comes again

    async def _transaction(self, unit: TransactionUnit, checkpointer: Checkpointer) -> None:
        """One transaction (or a part of a large one) in, its messages out, its mark placed.
        Schema history: DDL is applied as it is read (rows later in its transaction need
        it) and stamped with its position at the commit; each TABLE_MAP is resolved against
        it before its rows."""
        cursor = self._cursor
        if unit.first:
            self.progress.transaction_started()
            self.file_clock.seen(unit.file, unit.timestamp)  # for the retention check
            self._in_transaction = True
            cursor.delivered = 0
            cursor.gtid = None if unit.gtid is None else str(unit.gtid)
        for event in unit.events:
            if isinstance(event, RowsEvent):
                await self._rows(event, unit.file, checkpointer)
            elif isinstance(event, TableMapEvent):
                cursor.tables[event.table_id] = self.history.resolve(event)
            elif isinstance(event, QueryEvent):
                await self._query(event, unit.file)
            else:
                cursor.statement.see(event)
        if unit.end is not None:  # else a part of a large transaction: the rest follows
            await self._commit(unit.end, unit.commit_ts, checkpointer)

    async def _query(self, event: QueryEvent, file: str | None) -> None:
        cursor = self._cursor
        cursor.statement.see(event)
        outcome = self.history.follow(event)
        # Table-level changes go out in order with the rows; when resuming inside a
        # transaction, those before the resume point went out already.
        if outcome.verb and cursor.delivered >= cursor.skip:
            await self._publish_table_changes(table_changes(outcome, event, file, cursor.gtid))

    async def _rows(self, event: RowsEvent, file: str | None, checkpointer: Checkpointer) -> None:
        """One ROWS event: its rows out and counted, a mark every `checkpoint.rows` rows. A
        single sink that takes whole events (`EventSink`: Kafka, JSON lines) is offered the
        event first, the faster route to the same messages; it declines (None) when its
        filters or value mode rewrite the changes, and the rows go one by one."""
        cursor = self._cursor
        table = cursor.tables.get(event.table_id) or event.table_map
        wanted = table is None or self.filter.includes(table.schema, table.table)
        # The signal table's and the open window's rows go to the snapshots first.
        watched = table is not None and self.snapshots.watches(table.schema, table.table)
        statement = cursor.statement
        rows = EventRows(
            event,
            file,
            cursor.gtid,
            cursor.numbering,
            table,
            statement.thread,
            statement.query,
            statement.commit_us,
        )
        sink = self._event_sink
        count = None
        if sink is not None and table is not None and wanted and not watched:
            if cursor.delivered >= cursor.skip:  # (else rows of it are being skipped)
                await self._hold_lease()
                count = sink.publish_event(rows)
        path = "compiled"
        if count is not None:
            if self._advance(count, count):
                await self._mark_inside(checkpointer)
            if sink is not None and sink.backlogged:
                await sink.wait_for_room()
        else:  # declined, or not offered: row by row
            path = "row_by_row"
            changes: Iterable[RowChange] = rows.changes()
            if watched:
                assert table is not None
                changes = list(changes)
                if not await self.snapshots.seen(table.schema, table.table, changes):
                    wanted = False  # watermarks are never published
            count = await self._row_by_row(changes, wanted, checkpointer)
            if not count:
                return
        key = ("", "", event.op) if table is None else (table.schema, table.table, event.op)
        progress = self.progress
        progress.events_by_path[path] += 1
        progress.table_rows[key] = progress.table_rows.get(key, 0) + count
        progress.table_bytes[key] = progress.table_bytes.get(key, 0) + event.header.event_size

    async def _row_by_row(
        self, changes: Iterable[RowChange], wanted: bool, checkpointer: Checkpointer
    ) -> int:
        """The rows one by one, in runs that end where a mark is due; those of excluded
        tables (not `wanted`) are counted too, so that the row index of a restart does not
        depend on the filters. Returns how many were published."""
        cursor = self._cursor
        rows = iter(changes)
        kafka = self.kafka if wanted else None
        while cursor.delivered < cursor.skip:  # handed over before the restart or reconnect
            change = next(rows, None)
            if change is None:
                return 0
            if kafka is not None:
                kafka.skipped(change)  # still counted in the transaction's metadata
            cursor.delivered += 1
        per_mark = self._rows_per_mark
        published = 0
        while True:
            run = islice(rows, per_mark - cursor.delivered % per_mark)
            count = await self._send(run) if wanted else sum(1 for _ in run)
            if not count:
                return published
            if wanted:
                published += count
            if self._advance(count, count if wanted else 0):
                await self._mark_inside(checkpointer)

    def _advance(self, rows: int, published: int) -> bool:
        """`rows` more rows of the transaction delivered, `published` of them handed to the
        sinks. True: a mark is due (one every `checkpoint.rows` rows)."""
        if published:
            if not self.rows:
                log.info("first_row_published", position=str(self.committed))
            self.rows += published
        cursor = self._cursor
        before = cursor.delivered // self._rows_per_mark
        cursor.delivered += rows
        return cursor.delivered // self._rows_per_mark != before

    async def _mark_inside(self, checkpointer: Checkpointer) -> None:
        """A mark inside a large transaction, with its row index: a restart there skips the
        rows before it."""
        assert self.committed is not None
        checkpointer.mark(self.committed.with_row(self._cursor.delivered), False)
        await self._after_mark(checkpointer)

    async def _commit(self, end: Position, commit_ts: int, checkpointer: Checkpointer) -> None:
        """The transaction's mark. Snapshot progress rides with the position in its
        checkpoint record: durable exactly when the reads before it are acknowledged."""
        self.last_commit_read = time.time()
        self.history.commit(end)
        committed = self._checkpoint(end)
        self.progress.transaction_read(checkpointer.mark(committed, True), commit_ts)
        self.committed = committed
        self._in_transaction = False
        self.transactions += 1
        self._cursor.skip = self._cursor.delivered = 0
        await self._after_mark(checkpointer)

    async def _send(self, changes: Iterable[RowChange]) -> int:
        """Changes to every sink, as the filters prepare them, each under a valid lease;
        returns how many."""
        sinks, prepared = self.sinks, self.filter.prepared
        count = 0
        for change in changes:
            await self._hold_lease()
            change = prepared(change)
            for sink in sinks:
                sink.publish(change)
                if sink.backlogged:
                    await sink.wait_for_room()
            count += 1
        return count

    async def _publish_table_changes(self, changes: list[TableChange]) -> None:
        for change in changes:
            if not self.filter.includes(change.db, change.table):
                continue
            await self._hold_lease()
            for sink in self.sinks:
                await sink.publish_table(change)
                if sink.backlogged:
                    await sink.wait_for_room()
            log.info(
                "table_change_published",
                kind=change.kind,
                table=f"{change.db}.{change.table}",
                file=change.file,
                pos=change.pos,
            )

    async def _hold_lease(self) -> None:
        """Before anything is published (or a batch committed): the lease, if there is one,
        is valid, or publishing waits (`_wait_for_lease`)."""
        lease = self.lease
        if lease is not None and not lease.valid:
            await self._wait_for_lease(lease)

    async def _wait_for_lease(self, lease: Lease) -> None:
        """Publishing stops the moment the lease is in doubt (ZooKeeper suspended, or not
        heard from in time); it goes on only once the epoch is re-validated. A lost lease, or
        one not confirmed within the session timeout (after which the session is presumed
        expired: a partitioned leader hears nothing until the partition heals), raises
        LeadershipLostError: the pipeline ends without writing anything more."""
        log.warning("publishing_paused", reason="leadership lease not valid", rows=self.rows)
        started = time.monotonic()
        zookeeper = self.config.coordination.zookeeper
        give_up = None if zookeeper is None else zookeeper.session_timeout_s
        try:
            await lease.wait_valid(give_up)
        except CoordinationUnavailableError as exc:
            raise LeadershipLostError(
                f"the leadership lease was not confirmed within {give_up:g} s; the ZooKeeper "
                "session is presumed expired",
                error=str(exc),
            ) from None
        log.info("publishing_resumed", paused_s=round(time.monotonic() - started, 3))

    @property
    def streaming(self) -> bool:
        """Connected to the primary and reading its binlog, or reading the initial snapshot:
        what READY=1 and /readyz wait for."""
        return self._snapshotting or (self._reading and self.stream.connected)

    @property
    def source_connected(self) -> bool:
        """The binlog connection to the primary is up (through the relay's reader too)."""
        return self.stream.connected

    def lag_seconds(self, now_wall: float, now_mono: float) -> float:
        """Called from the metrics thread: reads only."""
        return self.progress.lag_seconds(now_wall, now_mono, self.stream.last_heard)

    def publishing_problem(self, now_mono: float, ack_stall_s: float) -> str | None:
        """Why this leading pipeline is not publishing (None: it is), for /readyz."""
        if self._tick_failure is not None:
            return f"a sink failed: {self._tick_failure}"
        if not self._snapshotting and not self.stream.connected:
            return "not connected to the primary"
        return self.progress.ack_stall(now_mono, ack_stall_s)

    def relay_usage(self) -> tuple[int, int] | None:
        """(bytes, segments) of the relay log, if there is one."""
        return self.stream.usage() if isinstance(self.stream, RelayedStream) else None

    def status(self) -> dict[str, Any]:
        """What `replicad status` shows for this pipeline."""
        initial, incremental = self.snapshots.status()
        return {
            "state": "running",
            "position": None if self.stored is None else self.stored.to_json(),
            "read_position": None if self.committed is None else self.committed.to_json(),
            "lag_s": round(self.lag_seconds(time.time(), time.monotonic()), 3),
            "last_commit_read_ms": (
                None if self.last_commit_read is None else int(self.last_commit_read * 1000)
            ),
            "transactions": self.transactions,
            "rows": self.rows,
            "snapshot": initial,
            "incremental": incremental,
            "signals": None if self.signals is None else list(self.signals.recent),
            "updated_ms": int(time.time() * 1000),
        }

    async def _after_mark(self, checkpointer: Checkpointer) -> None:
        await self._hold_lease()  # a due batch would commit (publish) here
        for sink in self.sinks:
            if sink.backlogged:  # e.g. an exactly-once batch is due
                await sink.wait_for_room()
        if checkpointer.due():
            checkpointer.checkpoint()
        while checkpointer.backlogged:  # acknowledgements lag far behind: let them catch up
            for sink in self.sinks:
                await sink.maintain()
            checkpointer.checkpoint()
            await asyncio.sleep(0.05)

    async def _tick(self) -> None:
        """While the source is quiet: serve sink callbacks, close due batches, checkpoint."""
        interval = self.config.checkpoint.interval_s
        kafka = self.config.sinks.kafka
        if kafka is not None and kafka.exactly_once:
            interval = min(interval, kafka.batch_ms / 1000)
        relay = self.config.relay
        if relay.enabled and relay.fsync == "interval":
            interval = min(interval, relay.fsync_interval_ms / 1000)
        interval = min(interval, 0.5)
        assert self.checkpointer is not None
        while True:
            await asyncio.sleep(interval)
            async with self._gate:
                try:
                    # The lease first: maintain() may commit a batch (publish it), and a
                    # process that slept past its session must not.
                    await self._hold_lease()  # a lost lease ends the pipeline
                    for sink in self.sinks:
                        await sink.maintain()
                    await self._heartbeat_message(self.checkpointer)
                    if self.checkpointer.due():
                        self.checkpointer.checkpoint()
                    elif self.telemetry.serving:  # latencies and readiness between checkpoints
                        self.checkpointer.observe()
                    stored = self.checkpointer.stored
                    self.snapshots.tick(None if stored is None else stored.snapshot)
                    self._mark_quiet_change(self.checkpointer)
                    if isinstance(self.stream, RelayedStream):
                        self.stream.maintain(self.stored_position)  # fsync, retention
                    if self.inbox is not None and self.command is None:
                        self.command = self.inbox.next_command()
                        if self.command is not None:
                            log.info("command_due", command=self.command.id, op=self.command.op)
                    if time.monotonic() - self._status_at >= STATUS_INTERVAL_S:
                        self._status_at = time.monotonic()
                        self.store.publish_status(self.status())
                except Exception as exc:
                    self._tick_failure = exc  # seen before the gate lets the stream go on
                    raise

    def _mark_quiet_change(self, checkpointer: Checkpointer) -> None:
        """Requests and signals taken between transactions change the snapshot progress or
        the signal offset with no transaction to carry them: a mark at the position read
        does, so that they are stored (a signal applied once) on a quiet source too."""
        committed = self.committed
        if committed is None or not self._reading or self._in_transaction:
            return
        now = self._checkpoint(committed.position)
        if now != committed:
            checkpointer.mark(now, True)
            self.committed = now

    async def _heartbeat_message(self, checkpointer: Checkpointer) -> None:
        """`heartbeat.publish`: every interval, between transactions of the stream, a
        heartbeat message at the position read so far and a mark after it (exactly-once:
        committed with the position record). Never during the initial snapshot, whose
        position must not be stored before its reads are."""
        kafka, committed = self.kafka, self.committed
        if kafka is None or committed is None or not self.config.heartbeat.publish:
            return
        if not self._reading or self._in_transaction or time.monotonic() < self._heartbeat_at:
            return
        self._heartbeat_at = time.monotonic() + self.config.heartbeat.interval_s
        await kafka.publish_heartbeat(committed.position)
        checkpointer.mark(self._checkpoint(committed.position), True)
        if kafka.backlogged:
            await kafka.wait_for_room()

    async def abandon(self) -> None:
        """Leadership is gone: drop what the sinks still hold (no delivery, no checkpoint).
        The new leader re-sends everything after the last stored position."""
        log.warning(
            "pipeline_abandoned",
            position=str(self.stored),
            read=str(self.committed),
            rows=self.rows,
        )
        for sink in self.sinks:  # first: closing the source connection may take a while
            sink.abandon()
        await self.snapshots.close()
        if self.signals is not None:
            self.signals.close()
        await self.stream.close()

    async def close(self, failed: bool = False, drain_s: float | None = None) -> None:
        """Stop reading, let the sinks deliver what was published (for at most `drain_s`,
        by default what shutdown.timeout_s leaves after the grace) and store the final
        acknowledged position. After a failure only what was already handed over settles;
        nothing new is sent."""
        await self.snapshots.close()
        if self.signals is not None:
            self.signals.close()
        await self.stream.close()
        try:
            if drain_s is None:
                drain_s = stop_budget(self.config.shutdown.timeout_s)[1]
            timeout = min(FAILED_DRAIN_S, drain_s) if failed else drain_s
            for sink in self.sinks:
                try:
                    # a hard bound: the sink's own deadline may sit behind a wait for room
                    await asyncio.wait_for(sink.drain(timeout, failed), timeout)
                except TimeoutError:
                    log.warning("sink_drain_timeout", timeout_s=timeout)
                except ReplicadError as exc:
                    if not failed:
                        raise
                    log.warning("sink_drain_failed", error=str(exc))
            if self.checkpointer is not None:
                try:
                    self.checkpointer.checkpoint()
                except ReplicadError as exc:  # a failed sink: its last good checkpoint stays
                    if not failed:
                        raise
                    log.warning("final_checkpoint_skipped", error=str(exc))
        finally:
            for sink in self.sinks:
                sink.close()


async def _purged(conn: AsyncConnection, position: Position) -> bool:
    """The position's binlog file is no longer on the primary (a GTID-only position: unknown,
    so not purged as far as this check goes)."""
    if not position.file:
        return False
    logs = await conn.query("SHOW BINARY LOGS")
    return all(cell_text(row[0]) != position.file for row in logs.rows)


def stop_budget(timeout_s: float) -> tuple[float, float]:
    """(grace, drain) of shutdown.timeout_s: up to 40 % finishes the transaction in flight,
    the drain gets what is left less a reserve for closing connections and the final
    checkpoint (the watchdog in the CLI ends the process at the full timeout)."""
    grace = timeout_s * 0.4
    reserve = min(CLOSE_RESERVE_S, timeout_s * 0.25)
    return grace, max(0.5, timeout_s - grace - reserve)


async def run_until_stopped(
    config: Config,
    password: str,
    stop: asyncio.Event,
    store: PipelineStore | None = None,
    lease: Lease | None = None,
    inbox: CommandInbox | None = None,
    requests: RequestInbox | None = None,
    telemetry: Telemetry | None = None,
) -> Pipeline:
    """Run the pipeline until `stop` is set; the transaction in flight is finished first
    (for at most 40 % of shutdown.timeout_s: a sink that cannot deliver must not block the
    stop), then the sinks get the rest of it to acknowledge (`stop_budget`).
    A pipeline that lost its lease (LeadershipLostError), or failed while its lease was not
    valid, ends without a final checkpoint and without sending what its sinks still queue
    (another leader owns the position now) and raises LeadershipLostError."""
    pipeline = Pipeline(config, password, store, lease, inbox, requests, telemetry)
    pipeline.telemetry.attach(pipeline)
    task = asyncio.create_task(pipeline.run())
    stopper = asyncio.create_task(stop.wait())
    failed = lost = False
    grace_s, drain_s = stop_budget(config.shutdown.timeout_s)
    try:
        done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if task not in done:
            pipeline.request_stop()
            log.info("stop_requested", in_transaction=not pipeline.idle)
            deadline = asyncio.get_running_loop().time() + grace_s
            while not task.done() and not pipeline.idle:
                if lease is not None and not lease.valid:
                    break  # it may not publish the rest of the transaction anyway
                if asyncio.get_running_loop().time() > deadline:
                    log.warning(
                        "stop_grace_exceeded",
                        note="the transaction in flight is "
                        "sent again from the stored position at the next start",
                    )
                    break
                await asyncio.wait({task}, timeout=0.05)
            if not task.done():
                task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            # Stopped while the lease is in doubt: what the sinks queue is not ours to send.
            lost = lease is not None and not lease.valid
        except LeadershipLostError:
            lost = True
            raise
        except BaseException as exc:
            failed = True
            # Failing without a valid lease (e.g. a process that slept past its session and
            # whose Kafka producer was fenced meanwhile), or because ZooKeeper stopped
            # answering (the lease may still look valid for a moment, the drain would outlast
            # it): leadership is in doubt, so nothing queued may be sent now; the error is for
            # the record, not for the position.
            lost = lease is not None and (
                not lease.valid or isinstance(exc, CoordinationUnavailableError)
            )
            if not lost:
                # (a loss is counted by the caller, as leadership_lost: not twice)
                pipeline.telemetry.errors.labels(config.pipeline, type(exc).__name__).inc()
                pipeline.store.record_error(str(exc), type(exc).__name__)
                raise
            log.warning(
                "pipeline_failed_without_lease",
                error=str(exc),
                kind=type(exc).__name__,
                rows=pipeline.rows,
            )
            raise LeadershipLostError(
                "the pipeline failed while its leadership lease was not valid",
                error=str(exc),
                kind=type(exc).__name__,
            ) from exc
    finally:
        stopper.cancel()
        try:
            if lost:
                await pipeline.abandon()
            else:
                await pipeline.close(failed, drain_s)
        finally:
            pipeline.telemetry.detach(pipeline)
    log.info(
        "stopped",
        position=str(pipeline.stored),
        read=str(pipeline.committed),
        transactions=pipeline.transactions,
        rows=pipeline.rows,
    )
    return pipeline
