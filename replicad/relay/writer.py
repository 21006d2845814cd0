"""Appending to the relay log: segments rotated at transaction boundaries, an fsync policy,
and recovery of the tail at open.

Durability by `fsync` policy (what survives a power loss or kernel crash; a crash of the
process alone never loses what `commit()` handed to the OS):
- `transaction`: every committed transaction survives once its sync completes: `commit()`
  waits for it, `commit(wait=False)` returns a future that the relayed stream awaits.
- `interval`: fdatasync at most every `fsync_interval_ms`: at most that much is lost.
- `os`: no fdatasync waited for but at rotation and close (a background one after every
  `writeback_bytes`, to keep the rotation's short): whatever the OS had not written back is
  lost.
What is lost is re-fetched from the primary: the relay resumes after the last transaction
found whole, and the stored checkpoint never passes what the sinks acknowledged.

The fdatasync of the current segment and the manifest refresh that follows it run on one
background thread (`_Syncer`), so that a slow disk does not stall the caller's event loop:
a sync covers everything written before it starts (concurrent commits are synced together),
and the manifest written after it names only what it synced. Rotation, retention and close
wait for that thread first: they close or delete files and rewrite the manifest themselves.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog

from replicad.atomic_file import fsync_directory
from replicad.binlog.position import Position
from replicad.errors import RelayCorruptError, RelayError, RelayLockedError
from replicad.process_lock import ProcessLock, holder_pid
from replicad.relay.files import SegmentScan, file_size
from replicad.relay.manifest import (
    Manifest,
    SegmentInfo,
    load_manifest,
    save_manifest,
    segment_name,
    segment_number,
)
from replicad.relay.records import encode_record
from replicad.relay.segment import (
    CommitRecord,
    Footer,
    SegmentHeader,
    encode_end,
    encode_footer,
    encode_header,
    encode_part,
)

log = structlog.get_logger("replicad.relay")

FsyncPolicy = Literal["transaction", "interval", "os"]


@dataclass(slots=True, frozen=True)
class RelayOptions:
    segment_bytes: int = 128 << 20  # rotate (at a transaction boundary) past this size
    part_bytes: int = 1 << 20  # a transaction's events are written in parts of about this
    fsync: FsyncPolicy = "interval"
    fsync_interval_ms: int = 200
    manifest_interval_s: float = 1.0  # the manifest's durable offset is refreshed this often
    writeback_bytes: int = 16 << 20  # `os`: a background sync after this much unsynced data


@dataclass(slots=True, frozen=True)
class Recovery:
    """What `open()` found: where the relay ends, and what it cut off its tail."""

    segment: str | None
    position: Position | None  # after the last whole transaction (None: empty relay)
    truncated_bytes: int = 0
    reason: str | None = None
    adopted: str | None = None  # a segment created but not yet in the manifest


LOCK_NAME = "LOCK"


def _format_identity(fde: bytes, checksums: bool) -> bytes:
    """A FORMAT_DESCRIPTION event without what changes between files of the same format:
    its header (timestamp, positions), its create timestamp and its CRC trailer."""
    body = fde[19 : len(fde) - 4] if checksums else fde[19:]
    return body[:52] + body[56:]


class RelayWriter:
    def __init__(self, directory: Path, options: RelayOptions | None = None, *, source: str = "?"):
        self.directory = directory
        self.options = options or RelayOptions()
        self.source = source
        self.manifest = Manifest()
        self._fd: int | None = None
        self._process_lock = ProcessLock(directory / LOCK_NAME)
        self._offset = 0  # bytes in the current segment, as handed to the OS
        self._last: Position | None = None  # after the last committed transaction
        # How much of the current segment is on disk, and the position after it: one tuple,
        # replaced whole (the sync thread writes it; readers never see half an update).
        self._durable_state: tuple[int, Position | None] = (0, None)
        self._synced_at = time.monotonic()
        self._manifest_at = 0.0
        self._syncer = _Syncer(self)
        self._format: tuple[bytes, bool] | None = None  # the FDE in force and its checksums flag
        self._segment_format: bytes | None = None  # identity of the current segment's FDE
        self._pending: list[bytes] = []  # events of the open transaction not yet written
        self._pending_bytes = 0
        self._txn_events = 0
        self._in_txn = False
        self._txn_start = 0
        self._stats = Footer(None, None, 0, 0, 0, 0)

    # ------------------------------------------------------------------ state
    @property
    def position(self) -> Position | None:
        """After the last transaction committed to the relay (handed to the OS)."""
        return self._last

    @property
    def durable_position(self) -> Position | None:
        return self._durable_state[1]

    @property
    def durable(self) -> tuple[int, Position | None]:
        """How much of the current segment is on disk and the position after it, read
        together (the sync thread replaces the pair whole)."""
        return self._durable_state

    @property
    def durable_offset(self) -> int:
        """How much of the current segment is known to be on disk (a transaction boundary)."""
        return self._durable_state[0]

    @property
    def segment(self) -> str | None:
        current = self.manifest.current
        return None if current is None else current.name

    @property
    def has_format(self) -> bool:
        return self._format is not None

    @property
    def committed_offset(self) -> int:
        """Where the last committed transaction ends in the current segment: readers of the
        segment being written stop there."""
        return self._txn_start if self._in_txn else self._offset

    def start_at(self, position: Position) -> None:
        """An empty relay starts after `position` (its first segment's start)."""
        if self.manifest.segments:
            raise RelayError("the relay is not empty", directory=str(self.directory))
        self._last = position

    @property
    def offset(self) -> int:
        """Where the current segment's committed data ends (a transaction boundary once the
        transaction in progress, if any, commits)."""
        return self._offset

    # ------------------------------------------------------------------ open / recovery
    def open(self) -> Recovery:
        """Load the manifest, check the segments it lists, cut a torn tail off the current
        segment (logging what was dropped) and get ready to append after it. The directory
        stays locked against other processes until `close()`."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            return self._open_locked()
        except BaseException:
            self._unlock()
            raise

    def _open_locked(self) -> Recovery:
        manifest = load_manifest(self.directory)
        if manifest is None:
            strays = sorted(p.name for p in self.directory.glob("relay-*.log"))
            if strays and not self._first_segment_before_its_manifest(strays):
                raise RelayCorruptError(
                    "relay segments without a MANIFEST: restore it, or empty the directory to "
                    "re-fetch from the primary",
                    directory=str(self.directory),
                    segments=",".join(strays[:5]),
                )
            if not strays:
                self.manifest = Manifest()
                return Recovery(None, None)
            manifest = Manifest()  # the first segment is adopted (or removed) below
        self.manifest = manifest
        for info in manifest.segments[:-1]:
            size = file_size(self.directory / info.name)
            if size < info.size:
                raise RelayCorruptError(
                    f"a sealed relay segment is shorter than the manifest says ({size} < "
                    f"{info.size} bytes)",
                    segment=info.name,
                )
        adopted = self._adopt_stray()
        current = manifest.current
        if current is None:
            return Recovery(None, None, adopted=adopted)
        recovery = self._recover_current(current)
        if adopted:
            recovery = Recovery(
                recovery.segment,
                recovery.position,
                recovery.truncated_bytes,
                recovery.reason,
                adopted,
            )
        return recovery

    def _first_segment_before_its_manifest(self, strays: list[str]) -> bool:
        """Whether the only segment is the first one and holds at most its header: a crash
        between creating it and saving the first MANIFEST (`_rotate` saves it before any
        record follows the header), so nothing in it was ever acknowledged. A MANIFEST lost
        any other way still stops the writer."""
        if strays != [segment_name(1)]:
            return False
        scan = SegmentScan(self.directory / strays[0])
        try:
            scan.read_header()
        except RelayCorruptError:
            return True  # cut inside the header: _adopt_stray removes it
        return file_size(self.directory / strays[0]) == scan.header_end

    def _adopt_stray(self) -> str | None:
        """A rotation writes the new segment before the manifest names it: after a crash in
        between, the next-numbered segment with a whole header is adopted, any other file
        that the manifest does not know is left alone and reported."""
        current = self.manifest.current
        known = {s.number for s in self.manifest.segments}
        after = (current.number if current else 0) + 1
        adopted = None
        for path in sorted(self.directory.glob("relay-*.log")):
            number = segment_number(path.name)
            if number is None or number in known:
                continue
            if number == after:
                scan = SegmentScan(path)
                try:
                    header = scan.read_header()
                except RelayCorruptError:
                    log.warning(
                        "relay_stray_segment_removed", segment=path.name, reason="no header"
                    )
                    path.unlink()
                    continue
                if current is not None:  # the rotation sealed it: summarise it
                    previous = SegmentScan(self.directory / current.name)
                    for _ in previous.chunks():
                        pass
                    _summarise(current, previous)
                self.manifest.segments.append(SegmentInfo(number, header.start))
                self.manifest.durable_offset = scan.header_end
                self.manifest.durable_position = header.start
                adopted = path.name
                log.warning("relay_segment_adopted", segment=path.name)
            else:
                raise RelayCorruptError(
                    "a relay segment the MANIFEST does not list", segment=path.name
                )
        return adopted

    def _recover_current(self, info: SegmentInfo) -> Recovery:
        path = self.directory / info.name
        size = file_size(path)
        manifest = self.manifest
        if size < manifest.durable_offset:
            raise RelayCorruptError(
                f"the current relay segment is shorter ({size} bytes) than the data the "
                f"manifest recorded as durable ({manifest.durable_offset} bytes)",
                segment=info.name,
                offset=size,
            )
        # The whole segment is scanned (not only past the durable offset): it is checked,
        # and its footer-to-be counts every transaction in it.
        scan = SegmentScan(path)
        reason = None
        try:
            for _ in scan.chunks():
                pass
        except RelayCorruptError as exc:  # RelayTornError included: cut the tail there
            if scan.header is None:
                raise
            if scan.end < manifest.durable_offset:
                raise RelayCorruptError(
                    "damage before the data the manifest recorded as durable: resume by "
                    "re-fetching from the primary (empty the relay directory)",
                    segment=info.name,
                    offset=exc.context.get("offset"),
                    error=exc.reason,
                ) from None
            reason = str(exc)
        assert scan.header is not None
        last = scan.last.position if scan.last is not None else scan.header.start
        truncated = size - scan.end
        if truncated:
            with open(path, "r+b") as f:
                f.truncate(scan.end)
                os.fsync(f.fileno())
            log.warning(
                "relay_tail_truncated",
                segment=info.name,
                offset=scan.end,
                dropped_bytes=truncated,
                reason=reason or "bytes after the last whole transaction",
                position=str(last),
            )
        self._open_segment_file(info.name, scan.end)
        self._segment_format = _format_identity(
            scan.header.format_description, scan.header.checksums
        )
        self._format = (scan.header.format_description, scan.header.checksums)
        self._last = last
        self._durable_state = (scan.end, last)
        if scan.footer is not None:  # sealed before the manifest said so: summarise it
            _summarise(info, scan)
        self._stats = Footer(
            scan.first.position if scan.first else None,
            last,
            scan.max_commit_ts,
            scan.transactions,
            scan.events,
            0,
        )
        manifest.durable_offset, manifest.durable_position = scan.end, last
        info.size = scan.end
        save_manifest(self.directory, manifest)
        return Recovery(info.name, last, truncated, reason)

    # ------------------------------------------------------------------ appending
    def set_format(self, format_description: bytes, checksums: bool) -> None:
        """The FORMAT_DESCRIPTION event now in force (sent at every dump start and binlog
        file). A different format starts a new segment at the next transaction."""
        self._format = (bytes(format_description), checksums)

    def append(self, event: bytes) -> None:
        """One raw event of the transaction in progress."""
        self._syncer.raise_failure()
        if not self._in_txn:
            self._start_transaction()
        self._pending.append(event)
        self._pending_bytes += len(event) + 4
        self._txn_events += 1
        if self._pending_bytes >= self.options.part_bytes:
            self._write(encode_part(self._pending))
            self._pending, self._pending_bytes = [], 0

    def commit(
        self, position: Position, commit_ts: int, *, wait: bool = True
    ) -> Future[None] | None:
        """End the transaction in progress (its last events included) at `position`. Under
        the `transaction` policy: returns once it is durable, or with `wait=False` returns
        the future of its sync."""
        self._syncer.raise_failure()
        if not self._in_txn:
            self._start_transaction()
        commit = CommitRecord(position, commit_ts, self._txn_events)
        self._write(encode_end(commit, self._pending))
        self._pending, self._pending_bytes, self._txn_events = [], 0, 0
        self._in_txn = False
        self._last = position
        s = self._stats
        self._stats = Footer(
            s.first or position,
            position,
            max(s.max_commit_ts, commit_ts),
            s.transactions + 1,
            s.events + commit.events,
            0,
        )
        if self.options.fsync == "transaction":
            if wait:  # on this thread: a hand-off to the sync thread and back costs ~140 µs
                self._syncer.drain()
                self._fsync_current()
                if self._manifest_due():
                    self._save_manifest()
                return None
            return self.request_sync()
        if self.options.fsync == "interval":
            self.sync_if_due()
        elif self._offset - self.durable_offset >= self.options.writeback_bytes:
            # `os`: not for durability, but so that sealing the segment at rotation does not
            # flush a whole segment's dirty pages at once (a 100+ ms stall at 128 MiB).
            self.request_sync()
        return None

    def abort(self) -> None:
        """Forget the transaction in progress (the source reconnected mid-transaction: it
        comes again whole). Parts already written are cut off the segment."""
        if not self._in_txn:
            return
        self._pending, self._pending_bytes, self._txn_events = [], 0, 0
        self._in_txn = False
        if self._offset != self._txn_start:
            assert self._fd is not None
            os.ftruncate(self._fd, self._txn_start)
            self._offset = self._txn_start

    def _start_transaction(self) -> None:
        if self._format is None:
            raise RelayError("no FORMAT_DESCRIPTION event before the first transaction")
        fmt = _format_identity(*self._format)
        current = self.manifest.current
        if (
            current is None
            or current.sealed
            or self._offset >= self.options.segment_bytes
            or fmt != self._segment_format
        ):
            self._rotate()
        self._in_txn = True
        self._txn_start = self._offset

    def _write(self, payload: bytes) -> None:
        data = encode_record(payload, self._offset)
        assert self._fd is not None
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            written = len(data) - len(view)
            raise RelayError(
                f"cannot write the relay: {exc.strerror}",
                segment=self.segment,
                offset=self._offset + written,
            ) from None
        self._offset += len(data)

    # ------------------------------------------------------------------ durability
    def sync(self) -> None:
        """fdatasync everything committed to the current segment and wait for it; the
        manifest follows at most every `manifest_interval_s` (it only names synced data)."""
        future = self.request_sync()
        if future is not None:
            future.result()

    def request_sync(self) -> Future[None] | None:
        """Have the sync thread make everything committed so far durable; the future is
        done when it is (None: it already is). Its failure is raised here next time."""
        self._syncer.raise_failure()
        if self._fd is None:
            return None
        self._synced_at = time.monotonic()
        return self._syncer.request(self._fd, self.committed_offset, self._last)

    def sync_if_due(self) -> None:
        """For the `interval` policy: called at each commit and by a timer (a quiet primary
        must not leave the last transactions unsynced)."""
        if self.options.fsync != "interval":
            return
        if time.monotonic() - self._synced_at >= self.options.fsync_interval_ms / 1000:
            self.request_sync()

    def _manifest_due(self) -> bool:
        """Asked by the sync thread after each sync."""
        if time.monotonic() - self._manifest_at >= self.options.manifest_interval_s:
            self._manifest_at = time.monotonic()
            return True
        return False

    def _manifest_snapshot(self, offset: int, position: Position | None) -> Manifest:
        """The manifest as it is, with `offset` of the current segment durable. Only the
        owner's thread changes the segment list, and only after `_syncer.drain()`."""
        segments = list(self.manifest.segments)
        if segments:
            segments[-1] = dataclasses.replace(segments[-1], size=offset)
        return Manifest(segments, offset, position)

    def _save_manifest(self) -> None:
        """Synchronously (the sync thread is idle: drained by the caller)."""
        manifest = self.manifest
        current = manifest.current
        if current is not None:
            current.size = self.durable_offset
        manifest.durable_offset, manifest.durable_position = self._durable_state
        save_manifest(self.directory, manifest)
        self._manifest_at = time.monotonic()

    def close(self) -> None:
        """Sync what was committed (a transaction in progress is dropped), close, unlock."""
        try:
            if self._fd is not None:
                self.abort()
                self._syncer.drain()
                self._fsync_current()
                self._save_manifest()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._syncer.shutdown()
            self._unlock()

    def _fsync_current(self) -> None:
        """On the caller's thread, the sync thread drained: rotation and close."""
        assert self._fd is not None
        if self.durable_offset != self._offset:
            _fdatasync(self._fd, self.segment)
            self._durable_state = (self._offset, self._last)
        self._synced_at = time.monotonic()

    def drop_segment(self, info: SegmentInfo) -> None:
        """Retention: the manifest stops naming a sealed segment, then its file goes."""
        assert info is not self.manifest.current, "the current segment is never dropped"
        self._syncer.drain()
        self.manifest.segments.remove(info)
        self._save_manifest()
        (self.directory / info.name).unlink(missing_ok=True)

    def _lock(self) -> None:
        """One process per relay directory: see ProcessLock."""
        if not self._process_lock.try_acquire():
            raise RelayLockedError(
                "the relay directory is in use by another process (another replicad with the "
                "same relay.directory and pipeline, or a previous leader still stopping)",
                directory=str(self.directory),
                holder_pid=holder_pid(self._process_lock.path),
            )

    def _unlock(self) -> None:
        self._process_lock.release()

    # ------------------------------------------------------------------ segments
    def _rotate(self) -> None:
        """Seal the current segment (footer, fsync) and start the next one; the manifest
        names the new segment only once its header is durable."""
        assert self._format is not None
        self._syncer.drain()
        current = self.manifest.current
        if current is not None and self._fd is not None:
            if not current.sealed:
                s = self._stats
                self._write(
                    encode_footer(
                        Footer(
                            s.first,
                            s.last,
                            s.max_commit_ts,
                            s.transactions,
                            s.events,
                            int(time.time() * 1000),
                        )
                    )
                )
            self._fsync_current()
            os.close(self._fd)
            self._fd = None
            current.sealed = True
            current.size = self._offset
            current.first, current.last = self._stats.first, self._stats.last
            current.max_commit_ts = self._stats.max_commit_ts
            current.transactions = self._stats.transactions
        number = (current.number if current else 0) + 1
        fde, checksums = self._format
        header = SegmentHeader(
            number, int(time.time() * 1000), self.source, checksums, self._last, fde
        )
        name = segment_name(number)
        path = self.directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._fd, self._offset = fd, 0
        self._write(encode_header(header))
        os.fdatasync(fd)
        fsync_directory(self.directory)
        self.manifest.segments.append(SegmentInfo(number, self._last))
        self._segment_format = _format_identity(fde, checksums)
        self._stats = Footer(None, None, 0, 0, 0, 0)
        self._durable_state = (self._offset, self._last)
        self._save_manifest()
        log.info("relay_segment_started", segment=name, start=str(self._last))

    def _open_segment_file(self, name: str, offset: int) -> None:
        fd = os.open(self.directory / name, os.O_WRONLY)
        os.lseek(fd, offset, os.SEEK_SET)
        self._fd, self._offset = fd, offset


def _summarise(info: SegmentInfo, scan: SegmentScan) -> None:
    """The manifest's summary of a sealed segment, from a complete scan of it."""
    info.sealed = True
    info.size = scan.end
    info.first = scan.first.position if scan.first else None
    info.last = scan.last.position if scan.last else None
    info.max_commit_ts = scan.max_commit_ts
    info.transactions = scan.transactions


def _fdatasync(fd: int, segment: str | None) -> None:
    try:
        os.fdatasync(fd)
    except OSError as exc:
        raise RelayError(f"cannot fsync the relay: {exc.strerror}", segment=segment) from None


class _Syncer:
    """One background thread that fdatasyncs the writer's current segment and then, when
    due, rewrites the manifest to name what is now durable. Requests made while a sync is
    queued but not started join it (group commit); a failure is kept and raised to the
    writer's owner at its next call."""

    def __init__(self, writer: RelayWriter) -> None:
        self._writer = writer
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._queued: Future[None] | None = None  # submitted, not started yet
        self._last: Future[None] | None = None
        self._target: tuple[int, int, Position | None] | None = None  # fd, offset, position
        self._failure: RelayError | None = None

    def request(self, fd: int, offset: int, position: Position | None) -> Future[None] | None:
        writer = self._writer
        with self._lock:
            if self._target is None and offset == writer.durable_offset:
                return None
            self._target = (fd, offset, position)
            if self._queued is not None:
                return self._queued
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="relay-sync")
            future = self._executor.submit(self._run)
            self._queued = self._last = future
            return future

    def _run(self) -> None:
        with self._lock:
            self._queued = None
            target, self._target = self._target, None
        if self._failure is not None:
            raise self._failure  # nothing after a failed sync is durable
        if target is None:
            return
        fd, offset, position = target
        writer = self._writer
        try:
            _fdatasync(fd, writer.segment)
            writer._durable_state = (offset, position)
            if writer._manifest_due():
                save_manifest(writer.directory, writer._manifest_snapshot(offset, position))
        except RelayError as exc:
            self._failure = exc
            raise

    def drain(self) -> None:
        """Wait until no sync is queued or running (for rotation, retention, close)."""
        last = self._last
        if last is not None:
            try:
                last.result()
            except RelayError:
                pass
        self.raise_failure()

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
