"""Kafka producing spread over N child processes (`sinks.kafka.producer_processes`).

Why: with the compiled envelope, most of what `replicad run` spends per row is librdkafka's
per-message cost in the Python client (`produce()`, headers, the delivery report): about 2.6×
what decoding and encoding the row costs (docs/performance.md). That cost is per process, so
the pipeline keeps reading, decoding and encoding in one process, in binlog order, and hands
the finished messages to N producer processes, each with its own librdkafka producer.

Order. A message goes to the process `crc32(key) mod N`: every message of a key goes through
one idempotent producer, so per-key (and per-partition-per-key) order is kept. Messages without
a key go to process 0. A message for an explicit partition (a TRUNCATE, sent to every
partition of the table's topic) is a fence: it waits until every other process has delivered
everything sent before it, and nothing goes to another process until it is delivered, so each
partition sees it between the rows around it, as with one producer.

Delivery. The parent counts messages per delivery unit (mark) as before. Messages travel in
batches; a child reports a batch once every message of it is acknowledged by Kafka, and only
then are its messages taken off their units. A mark is therefore acknowledged only when every
process has delivered every message before it: the stored position is the lowest position
acknowledged across the processes. A child that dies (killed, crashed) fails the sink with
SinkUnavailableError naming it; what it had not reported stays unacknowledged, so a restart
sends it again from the stored position (at-least-once; exactly-once is refused with N > 1).

The parent side (`ProducerPool`) answers the part of confluent-kafka's Producer API that
KafkaSink uses (`produce`, `poll`, `flush`, `purge`, `len`), so the sink's logic is unchanged.
`serve` is the child's loop (run by `replicad.service.producer_process`).

The wire between them is described in sinks/producer_child.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import subprocess
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from confluent_kafka import KafkaError

from replicad.sinks.base import DeliveryUnit, SinkUnavailableError
from replicad.sinks.producer_child import frame, read_into, whole_frames

log = structlog.get_logger("replicad.sinks.producer_pool")

BATCH_MESSAGES = 512  # a batch goes to its process at this many messages ...
BATCH_BYTES = 1 << 20  # ... or bytes,
LINGER_S = 0.002  # or this long after its first message
PIPE_BYTES = 1 << 20  # pipe capacity asked for (Linux), fewer wake-ups per batch


class _Reported:
    """What a failed delivery report of a child names: enough for the sink's error text."""

    __slots__ = ("_key", "_topic")

    def __init__(self, topic: str, key: bytes | None) -> None:
        self._topic, self._key = topic, key

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes | None:
        return self._key


class _Child:
    """One producer process as the parent sees it."""

    def __init__(self, index: int, command: Sequence[str], settings: dict[str, Any]) -> None:
        self.index = index
        # stdin: batches to it; stdout: its reports. stderr: its log lines, as ours.
        self.proc = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd = self.proc.stdin.fileno()
        self.rfd = self.proc.stdout.fileno()
        for fd in (self.wfd, self.rfd):
            _widen(fd)
            os.set_blocking(fd, False)
        self.out = bytearray()  # frames not yet taken by the pipe
        self.inbuf = bytearray()
        self.batch: list[tuple[Any, ...]] = []  # entries: ("m", ...) or ("e", ...), see serve
        self.units: list[list[Any]] = []  # [unit, messages] runs of the open batch
        self.batch_messages = 0
        self.batch_bytes = 0
        self.sent: dict[int, tuple[list[list[Any]], int, int]] = {}  # id -> units, count, bytes
        self.inflight = 0  # messages given to this process and not reported delivered
        self.inflight_bytes = 0
        self.messages = 0  # given to it in all
        self.closed = False
        client_id = f"{settings.get('client.id', 'replicad')}-{index}"
        self.enqueue(("settings", {**settings, "client.id": client_id}))

    def enqueue(self, message: tuple[Any, ...]) -> None:
        self.out += frame(message)

    def write(self) -> None:
        """Move what the pipe takes now (never blocks); BrokenPipeError when the child died."""
        while self.out:
            try:
                written = os.write(self.wfd, self.out)
            except BlockingIOError:
                return
            del self.out[:written]

    def read(self) -> tuple[list[tuple[Any, ...]], bool]:
        """The child's reports that arrived (never blocks), and whether its end was reached
        (it is gone: what it reported before still counts)."""
        ended = read_into(self.rfd, self.inbuf)
        return whole_frames(self.inbuf), ended

    # Closed through Popen's file objects, which own the descriptors: an os.close of the
    # number would leave them to close it again when collected, by then perhaps another
    # socket's (a test's MySQL connection died of exactly that).
    def close_input(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def close_output(self) -> None:
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    def exit_text(self) -> str:
        try:
            code = self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        return f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"


class ProducerPool:
    """N producer processes behind the part of the Producer API that KafkaSink uses.
    `produce`'s `on_delivery` must be a DeliveryUnit's `delivered`: reports come per batch,
    and are counted on the unit (`outstanding -= n`) instead of calling it per message."""

    def __init__(
        self,
        processes: int,
        command: Sequence[str],
        settings: dict[str, Any],
        on_error: Callable[[KafkaError], None],
        max_in_flight: int,
        max_bytes: int,
    ) -> None:
        if processes < 2:
            raise ValueError("a producer pool needs at least 2 processes")
        self._on_error = on_error
        # Each child's librdkafka queue is as large as one producer's would be, and the parent
        # gives a child at most its share: a child never has to refuse a message it was sent.
        self._max_messages = max(1, max_in_flight // processes)
        self._max_bytes = max(BATCH_BYTES, max_bytes // processes)
        child_settings = {k: v for k, v in settings.items() if k != "error_cb"}
        self._children = [_Child(i, command, child_settings) for i in range(processes)]
        self._n = processes
        self._ids = 0
        self._fence: _Child | None = None  # holds a fence message not yet delivered
        self._failure: SinkUnavailableError | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._closed = False
        log.info(
            "kafka_producer_processes_started",
            processes=processes,
            pids=[c.proc.pid for c in self._children],
        )
        self._write_all()

    # ------------------------------------------------------------------ Producer API

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        on_delivery: Any = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Queue one message for its process; BufferError (as librdkafka's) when there is
        no room now or a fence holds it back."""
        if self._failure is not None:
            raise self._failure
        unit: DeliveryUnit = on_delivery.__self__
        if partition >= 0:
            child = self._children[0]
            if not self._fence_may_pass(child):
                raise BufferError
        else:
            child = self._children[0 if key is None else zlib.crc32(key) % self._n]
            if self._fence is not None and self._fence is not child and not self._fence_over():
                raise BufferError
        if child.inflight >= self._max_messages or child.inflight_bytes >= self._max_bytes:
            self._serve()
            if child.inflight >= self._max_messages or child.inflight_bytes >= self._max_bytes:
                raise BufferError
        size = (0 if value is None else len(value)) + (0 if key is None else len(key))
        self._add(child, unit, ("m", topic, key, value, headers, partition), 1, size)
        if partition >= 0:
            self._fence = child
            self._send(child)

    def produce_event(
        self,
        topic: str,
        unit: DeliveryUnit,
        headers: tuple[list[tuple[str, bytes]], list[tuple[str, bytes]], bool] | None,
        messages: list[tuple[str, int, bytes | None, bytes]],
        tombstones: bool,
        limit: int,
    ) -> int:
        """The messages of one ROWS event from the compiled path, (op, row, key, value)
        each, as KafkaSink.publish_event sends them (a tombstone after a keyed delete; the
        headers before and after `replicad.row`, built by the child): split by key into one
        entry per process. Returns the messages queued, counted on `unit` by the caller; 0
        when they must go one by one (a value over `limit`, no room, a fence): nothing was
        queued then."""
        if self._failure is not None:
            raise self._failure
        n = self._n
        groups: list[list[tuple[int, bytes | None, bytes, bool]]] = [[] for _ in range(n)]
        counts = [0] * n
        sizes = [0] * n
        crc32 = zlib.crc32
        for op, row, key, value in messages:
            size = len(value)
            if size > limit:
                return 0
            if key is None:
                i, tombstone = 0, False
            else:
                i = crc32(key) % n
                size += len(key)
                tombstone = tombstones and op == "d"
            groups[i].append((row, key, value, tombstone))
            counts[i] += 2 if tombstone else 1
            sizes[i] += size
        children = self._children
        if self._fence is not None and any(
            group and children[i] is not self._fence for i, group in enumerate(groups)
        ):
            if not self._fence_over():
                return 0
        for i, count in enumerate(counts):
            child = children[i]
            if (
                count
                and child.inflight
                and (
                    child.inflight + count > self._max_messages
                    or child.inflight_bytes >= self._max_bytes
                )
            ):
                self._serve()
                if child.inflight + count > self._max_messages or (
                    child.inflight_bytes >= self._max_bytes
                ):
                    return 0
        for i, group in enumerate(groups):
            if group:
                self._add(children[i], unit, ("e", topic, headers, group), counts[i], sizes[i])
        return sum(counts)

    def _add(
        self, child: _Child, unit: DeliveryUnit, entry: tuple[Any, ...], count: int, size: int
    ) -> None:
        child.batch.append(entry)
        units = child.units
        if units and units[-1][0] is unit:
            units[-1][1] += count
        else:
            units.append([unit, count])
        child.batch_messages += count
        child.batch_bytes += size
        child.inflight += count
        child.inflight_bytes += size
        if child.batch_messages >= BATCH_MESSAGES or child.batch_bytes >= BATCH_BYTES:
            self._send(child)
        elif len(child.batch) == 1 and self._linger is None:
            self._schedule_linger()

    def poll(self, timeout: float = 0) -> int:
        """Send open batches, take the children's reports; raises when a child is gone."""
        self._send_all()
        self._serve()
        if self._failure is not None:
            raise self._failure
        return 0

    def flush(self, timeout: float) -> int:
        """Send everything and wait up to `timeout` s for the reports; returns the messages
        the live children still hold. A dead child's are not waited for (they never come;
        `poll` raises its failure, and they stay counted on their units)."""
        deadline = time.monotonic() + timeout
        self._send_all()
        while True:
            self._serve()
            live = [c for c in self._children if not c.closed]
            waiting = sum(c.inflight for c in live)
            remaining = deadline - time.monotonic()
            if not waiting or remaining <= 0:
                return waiting
            select.select(
                [c.rfd for c in live], [c.wfd for c in live if c.out], [], min(remaining, 0.05)
            )

    def __len__(self) -> int:
        return sum(c.inflight for c in self._children)

    def purge(self, in_queue: bool = True, in_flight: bool = False, blocking: bool = False) -> None:
        """Leadership lost: drop what is not sent to a child, ask each to purge its queue."""
        for child in self._children:
            child.batch.clear()
            child.units.clear()
            child.batch_messages = child.batch_bytes = 0
            child.enqueue(("purge",))
        self._write_all()

    def close(self, timeout_s: float = 3.0) -> None:
        """End of input tells each child to flush and stop (after the sink's drain, little
        is left); one that outlives `timeout_s` is killed. Whatever was not acknowledged is
        sent again from the stored position at the next start."""
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout_s
        for child in self._children:
            # What the pipe takes now, never waiting: a child that cannot read (Kafka away,
            # its queue full) must not hold the stop. What is left was never acknowledged;
            # the child ignores a frame cut short by the end of its input.
            with contextlib.suppress(OSError):  # the child is gone already
                child.write()
            with contextlib.suppress(OSError):
                child.close_input()
            child.closed = True
        for child in self._children:
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning(
                    "kafka_producer_process_killed", process=child.index, pid=child.proc.pid
                )
                child.proc.kill()
                child.proc.wait()
            with contextlib.suppress(OSError):  # the child is gone already
                child.close_output()
        log.info(
            "kafka_producer_processes_stopped",
            messages=[c.messages for c in self._children],
            unacknowledged=len(self),
        )

    # ------------------------------------------------------------------ internals

    def _fence_may_pass(self, child: _Child) -> bool:
        """A fence message goes once every other child delivered all it was given."""
        self._send_all()
        self._serve()
        return all(c.inflight == 0 for c in self._children if c is not child)

    def _fence_over(self) -> bool:
        self._serve()
        if self._fence is not None and self._fence.inflight == 0:
            self._fence = None
        if self._fence is not None:
            self._send_all()
            return False
        return True

    def _schedule_linger(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a tool): the next poll or flush sends it
        self._linger = loop.call_later(LINGER_S, self._linger_due)

    def _linger_due(self) -> None:
        self._linger = None
        try:
            self._send_all()
            self._serve()
        except SinkUnavailableError:
            pass  # kept in self._failure: raised by the next produce or poll
        if any(c.out for c in self._children) and self._failure is None:
            self._schedule_linger()  # a pipe was full: try again shortly

    def _send(self, child: _Child) -> None:
        self._ids += 1
        child.sent[self._ids] = (child.units, child.batch_messages, child.batch_bytes)
        child.messages += child.batch_messages
        child.enqueue(("batch", self._ids, child.batch_messages, child.batch))
        child.batch, child.units = [], []
        child.batch_messages = child.batch_bytes = 0
        self._write(child)

    def _send_all(self) -> None:
        for child in self._children:
            if child.batch:
                self._send(child)
            elif child.out:
                self._write(child)

    def _write_all(self) -> None:
        for child in self._children:
            self._write(child)

    def _write(self, child: _Child) -> None:
        try:
            child.write()
        except OSError:  # BrokenPipeError: it is gone
            self._gone(child)

    def _serve(self) -> None:
        """Take every report that arrived from every child."""
        for child in self._children:
            if child.closed:
                continue
            if child.out:
                self._write(child)
            reports, ended = child.read()
            for report in reports:
                self._report(child, report)
            if ended:
                self._gone(child)

    def _report(self, child: _Child, report: tuple[Any, ...]) -> None:
        kind = report[0]
        if kind == "acked":
            units, count, size = child.sent.pop(report[1])
            for unit, messages in units:
                unit.outstanding -= messages
            child.inflight -= count
            child.inflight_bytes -= size
        elif kind == "failed":
            _, batch_id, code, text, fatal, retriable, topic, key = report
            units = child.sent[batch_id][0]
            unit = units[0][0]  # the batch's first unit: its `after` is at or before the message's
            tracker = unit.tracker
            if tracker.failure is None:
                err = KafkaError(code, text, fatal=fatal, retriable=retriable)
                tracker.failure = tracker.failure_of(err, _Reported(topic, key), unit)
        elif kind == "error":
            _, code, text, fatal, retriable = report
            self._on_error(KafkaError(code, text, fatal=fatal, retriable=retriable))

    def _gone(self, child: _Child) -> None:
        child.closed = True
        if self._failure is None:
            self._failure = SinkUnavailableError(
                f"Kafka producer process {child.index} {child.exit_text()}; the messages it "
                "had not reported delivered are sent again from the stored position after a "
                "restart",
                process=child.index,
                pid=child.proc.pid,
                unacknowledged=child.inflight,
            )
            log.error("kafka_producer_process_lost", process=child.index, pid=child.proc.pid)


def _widen(fd: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except OSError:
        pass  # not Linux, or over /proc/sys/fs/pipe-max-size: the default size works too
