"""The relay between the replica and the publishers: `RelayedStream` has ReplicaStream's
interface (`units(start)`, `close()`, `info`), so the pipeline publishes from it unchanged,
but behind it a replica task writes every transaction unit to the relay log first and reads
on while the publishers wait (for Kafka, say), until `relay.max_bytes`.

Publishers take transactions from memory while they keep up (the most recent ones, up to
`relay.memory_bytes`), and from disk when they fall behind, switching back once caught up
(TiDB Pump's slowChaser). They are only ever given whole transactions that are in the relay.

What is stored of a unit is its raw bytes: everything the primary sent after the previous
commit up to and including the next one (ROTATE and FORMAT_DESCRIPTION included, heartbeats
not). Read back from disk they go through the same `UnitAssembler` as live, so publishers get
the units they would have got from the primary (docs/relay-format.md has the byte layout).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import structlog

from replicad.binlog.events import EventType, HeartbeatEvent
from replicad.binlog.parser import BinlogParser
from replicad.binlog.position import Position
from replicad.config import RelayConfig, SourceConfig
from replicad.errors import RelayCorruptError, RelayError
from replicad.relay.manifest import MANIFEST, segment_number
from replicad.relay.reader import (
    SegmentOpened,
    binlog_key,
    first_segment,
    read_segments,
)
from replicad.relay.segment import TxnChunk
from replicad.relay.writer import RelayOptions, RelayWriter
from replicad.source.stream import Reconnected, ReplicaStream, ServerInfo
from replicad.source.transactions import TransactionUnit, UnitAssembler

log = structlog.get_logger("replicad.relay")


@dataclass(slots=True)
class Relayed:
    """A transaction committed to the relay; `unit` is None once evicted from memory (or for
    one too large to keep, or handed on in parts): then it is read from disk."""

    previous: Position | None  # the position before it
    position: Position  # after it
    segment: str
    end: int  # where its last record ends in the segment
    unit: TransactionUnit | None
    size: int


class RelayedStream:
    def __init__(
        self,
        source: SourceConfig,
        password: str,
        *,
        pipeline: str,
        relay: RelayConfig,
        statements: bool = False,
    ) -> None:
        self.replica = ReplicaStream(source, password, pipeline=pipeline, statements=statements)
        self.config = relay
        self.part_bytes = source.unit_part_bytes
        self.writer = RelayWriter(
            relay.directory / pipeline,  # pipelines of one worker never share a relay
            RelayOptions(
                segment_bytes=relay.segment_bytes,
                fsync=relay.fsync,
                fsync_interval_ms=relay.fsync_interval_ms,
            ),
            source=f"{source.host}:{source.port}",
        )
        self._window: deque[Relayed] = deque()
        self._window_bytes = 0
        self._unsynced_bytes = 0  # `transaction` fsync: units waiting for their sync
        self._generation = 0  # bumped when the relay is dropped: late syncs are ignored
        self._changed = asyncio.Event()  # set on every new unit (and on failure)
        self._progress = asyncio.Event()  # set when the relay shrinks (back-pressure)
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._checkpoint: Position | None = None
        # The primary's latest heartbeat, handed to the reader once it has served everything
        # relayed: then (and only then) it means "caught up" downstream too.
        self._heartbeat: HeartbeatEvent | None = None

    @property
    def info(self) -> ServerInfo | None:
        return self.replica.info

    @property
    def connected(self) -> bool:
        return self.replica.connected

    @property
    def last_heard(self) -> float:
        return self.replica.last_heard

    # ------------------------------------------------------------------ publishers
    async def units(
        self, start: Position
    ) -> AsyncIterator[TransactionUnit | Reconnected | HeartbeatEvent]:
        """The transactions after `start`, from the relay, and the primary's heartbeats once
        everything relayed has been served (it is idle)."""
        if self._task is None:
            self._start(start)
        async for unit in self._read(start):
            yield unit

    async def close(self) -> None:
        await self._stop_replica()
        self.writer.close()

    def maintain(self, checkpoint: Position | None) -> None:
        """Called by the pipeline's ticker (at least every 0.5 s): the `interval` fsync
        happens even while the primary is quiet, and once every sink acknowledged up to
        `checkpoint`, older segments may go (retention)."""
        if self._task is None:
            return
        self.writer.sync_if_due()
        if checkpoint is not None:
            self._checkpoint = checkpoint
            self._collect_garbage()

    async def _read(
        self, after: Position
    ) -> AsyncIterator[TransactionUnit | Reconnected | HeartbeatEvent]:
        disk: Iterator[TransactionUnit] | None = None
        while True:
            if self._failure is not None:
                raise self._failure
            relayed = self._in_memory_after(after)
            if relayed is not None and relayed.unit is not None:
                disk = None
                yield relayed.unit
                after = relayed.position
                continue
            if self._ahead(after):
                if disk is None:
                    disk = self._from_disk(after)
                try:
                    for unit in disk:  # one transaction (in parts), then look at memory again
                        yield unit
                        if unit.end is not None:
                            after = unit.end
                            break
                    else:
                        disk = None
                except RelayCorruptError as exc:
                    disk = None
                    await self._stop_replica()
                    self._on_corruption(exc, after)  # raises unless refetching
                    self._start(after)
                    # The unit being read (if any) comes again whole: the pipeline restarts
                    # its transaction and skips the rows it already delivered.
                    yield Reconnected(after, 1)
                continue
            heartbeat = self._heartbeat
            if heartbeat is not None:  # everything relayed is served: the primary is idle
                self._heartbeat = None
                yield heartbeat
                continue
            self._changed.clear()
            if self._in_memory_after(after) is None and not self._ahead(after):
                await self._changed.wait()

    def _ahead(self, after: Position) -> bool:
        """The relay holds a unit after `after` that may be served."""
        end = self._servable()[1]
        return end is not None and binlog_key(end) > binlog_key(after)

    def _servable(self) -> tuple[int, Position | None]:
        """How far the current segment may be served, and the position there: under the
        `transaction` fsync what is on disk (published only once durable), otherwise the
        last commit."""
        writer = self.writer
        if writer.options.fsync == "transaction":
            return writer.durable
        return writer.committed_offset, writer.position

    def _in_memory_after(self, after: Position) -> Relayed | None:
        window = self._window
        if not window or window[0].previous is None:
            return None
        key = binlog_key(after)
        if binlog_key(window[0].previous) > key:
            return None  # evicted already: the disk has it
        for unit in window:
            if unit.previous is not None and binlog_key(unit.previous) == key:
                return unit
            if binlog_key(unit.position) > key:
                return None
        return None

    def _from_disk(self, after: Position) -> Iterator[TransactionUnit]:
        """The units after `after`, read from the segment files (a huge transaction in
        parts, never whole in memory); only what is committed to the relay."""
        segments = list(self.writer.manifest.segments)
        paths = [
            self.writer.directory / info.name for info in segments[first_segment(segments, after) :]
        ]
        parser: BinlogParser | None = None
        assembler = UnitAssembler(after, part_bytes=self.part_bytes)
        segment = ""
        for item in read_segments(paths, after=after, stop=self._committed_end):
            if isinstance(item, SegmentOpened):
                segment = item.name
                parser = BinlogParser(checksums=item.header.checksums, source=segment)
                parser.parse(item.header.format_description)
            elif isinstance(item, TxnChunk):
                assert parser is not None
                for raw in item.events:
                    unit = assembler.feed(raw, parser.decode(raw))
                    if unit is not None:
                        yield unit
                if item.commit is not None and assembler.position != item.commit.position:
                    raise RelayCorruptError(
                        "a commit record disagrees with the events before it",
                        segment=segment,
                        offset=item.start,
                        record=str(item.commit.position),
                        events=str(assembler.position),
                    )
            # TornTail: the writer is inside a transaction there; it is not served

    def _committed_end(self, segment: str) -> int | None:
        """Where readers of the segment being written stop (see _servable)."""
        return self._servable()[0] if segment == self.writer.segment else None

    # ------------------------------------------------------------------ the replica task
    def _start(self, after: Position) -> None:
        try:
            end = self.writer.open().position
        except RelayCorruptError as exc:
            self._on_corruption(exc, after)
            end = None
        start = self._first_start()
        covered = (
            end is not None
            and start is not None
            and binlog_key(start) <= binlog_key(after) <= binlog_key(end)
        )
        if not covered:
            if end is not None:
                log.warning(
                    "relay_reset",
                    relay_start=str(start),
                    relay_end=str(end),
                    position=str(after),
                    note="the relay does not hold the position: re-fetching from the primary",
                )
            self._reset()
            self.writer.start_at(after)
            end = after
        log.info("relay_opened", directory=str(self.writer.directory), position=str(end))
        assert end is not None
        self._task = asyncio.create_task(self._replicate(end))
        self._task.add_done_callback(self._replica_done)

    def _on_corruption(self, exc: RelayCorruptError, after: Position) -> None:
        """`relay.on_corruption`: fail with the error (segment, offset), or drop the relay so
        that it is read again from the primary after `after`. Events of a transaction the
        publisher was reading when the damage showed are sent again from its start."""
        if self.config.on_corruption != "refetch":
            raise exc
        log.error(
            "relay_corrupt_refetch",
            error=str(exc),
            position=str(after),
            note="the relay is dropped and read again from the primary",
        )
        self._reset()
        self._window.clear()
        self._window_bytes = 0

    async def _stop_replica(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        await self.replica.close()

    def _first_start(self) -> Position | None:
        segments = self.writer.manifest.segments
        return segments[0].start if segments else None

    def _reset(self) -> None:
        self.writer.close()
        directory = self.writer.directory
        for path in directory.glob("relay-*.log"):
            if segment_number(path.name) is not None:
                path.unlink()
        (directory / MANIFEST).unlink(missing_ok=True)
        self.writer = RelayWriter(directory, self.writer.options, source=self.writer.source)
        self.writer.open()
        self._generation += 1
        self._unsynced_bytes = 0

    def _replica_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._failure = task.exception()
            self._changed.set()

    async def _replicate(self, start: Position) -> None:
        writer = self.writer
        keep_limit = self.config.memory_bytes // 4
        multipart = False  # the transaction being written was handed on in parts
        async for unit in self.replica.units(writer.position or start):
            if isinstance(unit, HeartbeatEvent):
                if not multipart:  # not stored; said on to a reader that has caught up
                    self._heartbeat = unit
                    self._changed.set()
                continue
            if isinstance(unit, Reconnected):
                writer.abort()  # the transaction in flight comes again whole
                multipart = False
                continue
            for raw in unit.raw:
                if raw[4] == EventType.FORMAT_DESCRIPTION:
                    info = self.replica.info
                    writer.set_format(raw, bool(info and info.checksum))
                if writer.has_format:
                    writer.append(raw)
            if unit.end is None:
                multipart = True
                continue
            previous = writer.position
            synced = writer.commit(unit.end, unit.commit_ts, wait=False)
            kept = None if multipart or unit.size > keep_limit else unit
            relayed = Relayed(
                previous, unit.end, writer.segment or "", writer.committed_offset, kept, unit.size
            )
            multipart = False
            if synced is None:
                self._remember(relayed)
            else:
                await self._remember_when_synced(synced, relayed)
            await self._hold_back()

    async def _remember_when_synced(self, synced: Future[None], unit: Relayed) -> None:
        """`transaction` fsync: a unit is published only once on disk. The sync runs on the
        writer's thread and reading goes on meanwhile (the commits that arrive during one
        sync share the next); units become visible in commit order as their syncs complete.
        Reading waits only when a quarter of `memory_bytes` is waiting for the disk."""
        loop = asyncio.get_running_loop()
        generation = self._generation
        self._unsynced_bytes += unit.size
        synced.add_done_callback(
            lambda future: loop.call_soon_threadsafe(self._synced, future, unit, generation)
        )
        if self._unsynced_bytes > self.config.memory_bytes // 4:
            with contextlib.suppress(RelayError):  # reported by _synced
                await asyncio.wrap_future(synced)

    def _synced(self, future: Future[None], unit: Relayed, generation: int) -> None:
        if generation != self._generation:
            return  # of a relay dropped since (refetch): its units are gone with it
        self._unsynced_bytes -= unit.size
        failure = future.exception()
        if failure is not None:
            if self._failure is None:  # the publisher raises it; the replica at its next call
                self._failure = failure
                self._changed.set()
            return
        self._remember(unit)

    def _remember(self, unit: Relayed) -> None:
        window = self._window
        window.append(unit)
        if unit.unit is not None:
            self._window_bytes += unit.size
        while self._window_bytes > self.config.memory_bytes and window:
            old = window[0]
            if old.unit is not None:
                self._window_bytes -= old.size
                old.unit = None
            if len(window) > 1:
                window.popleft()
            else:
                break
        while len(window) > 100_000:
            old = window.popleft()
            if old.unit is not None:
                self._window_bytes -= old.size
        self._changed.set()

    async def _hold_back(self) -> None:
        """Back-pressure: beyond `max_bytes` on disk, reading waits for the publishers'
        checkpoint to let retention free segments."""
        logged = False
        while self._relay_bytes() > self.config.max_bytes:
            if not logged:
                log.warning(
                    "relay_full",
                    bytes=self._relay_bytes(),
                    max_bytes=self.config.max_bytes,
                    note="reading from the primary pauses until publishers catch up",
                )
                logged = True
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), 1.0)
        if logged:
            log.info("relay_resumed", bytes=self._relay_bytes())

    def usage(self) -> tuple[int, int]:
        """(bytes, segment files) of the relay, for metrics (read from another thread: only
        copies of the manifest's list are iterated)."""
        return self._relay_bytes(), len(self.writer.manifest.segments)

    def _relay_bytes(self) -> int:
        total = 0
        for info in self.writer.manifest.segments[:-1]:
            total += info.size
        return total + self.writer.offset

    # ------------------------------------------------------------------ retention
    def _collect_garbage(self) -> None:
        checkpoint = self._checkpoint
        segments = self.writer.manifest.segments
        if checkpoint is None or len(segments) < 2:
            return
        key = binlog_key(checkpoint)
        removed = []
        now_ms = time.time() * 1000
        over = self._relay_bytes() > self.config.max_bytes
        for info in list(segments[:-1]):
            end = info.last or info.start  # a segment without transactions ends at its start
            if end is None or binlog_key(end) > key:
                break  # the checkpoint still needs it (and everything after)
            sealed_ms = info.max_commit_ts * 1000
            if not over and now_ms - sealed_ms < self.config.retention.keep_s * 1000:
                break
            self.writer.drop_segment(info)
            removed.append(info.name)
        if removed:
            log.info("relay_segments_deleted", segments=removed, checkpoint=str(checkpoint))
            self._progress.set()
