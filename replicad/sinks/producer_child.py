"""The child side of `sinks.kafka.producer_processes` (the parent side and the why are in
sinks/producer_pool.py): one librdkafka producer fed with batches over a pipe, reporting each
batch once Kafka acknowledged all of it. Kept apart from the parent side so that a producer
process imports only what it needs (it starts once per pipeline start, per process).

Frames, both ways: a 4-byte little-endian length, then a pickle (`frame`, `whole_frames`).
Parent to child: `("settings", librdkafka settings)` first, then `("batch", id, messages, entries)`
(see `_produce_batch`), `("purge",)`; end of input means flush and stop. Child to parent:
`("acked", id)`, `("failed", id, code, text, fatal, retriable, topic, key)` (the first failed
message of a batch, before its "acked"), `("error", code, text, fatal, retriable)`
(librdkafka's client errors).
"""

from __future__ import annotations

import os
import pickle
import select
import struct
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from replicad.published.kafka_clients import kafka_client

LENGTH = struct.Struct("<I")
ROW_HEADER = "replicad.row"  # the header the Kafka sink writes too (sinks/kafka.py)


def frame(message: tuple[Any, ...]) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return LENGTH.pack(len(payload)) + payload


def serve(read_fd: int, write_fd: int) -> None:
    """The child: produce every batch read from `read_fd` with one librdkafka producer and
    report each once Kafka acknowledged all of it; at end of input flush and return. One
    thread: delivery reports are served between reads (no lock, no GIL contention)."""
    writer = _ReportWriter(write_fd)

    def on_error(err: KafkaError) -> None:
        writer.send(("error", err.code(), err.str(), err.fatal(), err.retriable()))

    producer: Producer | None = None
    os.set_blocking(read_fd, False)
    buf = bytearray()
    ended = False
    while not ended:
        # Reports are due while messages are in flight: wake up often then.
        busy = producer is not None and len(producer) > 0
        readable, _, _ = select.select([read_fd], [], [], 0.005 if busy else 0.2)
        if readable:
            ended = read_into(read_fd, buf)
            for message in whole_frames(buf):
                if message[0] == "batch":
                    assert producer is not None, "a batch before the settings"
                    _produce_batch(producer, message[1], message[2], message[3], writer)
                elif message[0] == "purge" and producer is not None:
                    producer.purge(in_queue=True, in_flight=False, blocking=False)
                elif message[0] == "settings":
                    producer = kafka_client(Producer, {**message[1], "error_cb": on_error})
        if producer is not None:
            producer.poll(0)
    if producer is not None:
        producer.flush(2.0)  # after the drain little is left; the parent waits 3 s at most


def read_into(fd: int, buf: bytearray) -> bool:
    """Append what `fd` holds now; whether its end was reached."""
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return False
        if not chunk:
            return True
        buf += chunk


class _ReportWriter:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, report: tuple[Any, ...]) -> None:
        view = memoryview(frame(report))
        while view:
            view = view[os.write(self.fd, view) :]


class _Batch:
    """A batch in a child: reported once all its messages have a delivery report."""

    __slots__ = ("failed", "id", "remaining", "writer")

    def __init__(self, batch_id: int, count: int, writer: _ReportWriter) -> None:
        self.id = batch_id
        self.remaining = count
        self.failed = False
        self.writer = writer

    def delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.fail(err, msg.topic(), msg.key())
        self.remaining -= 1
        if self.remaining == 0:
            self.writer.send(("acked", self.id))

    def fail(self, err: KafkaError, topic: str, key: bytes | None) -> None:
        if not self.failed:
            self.failed = True
            self.writer.send(
                ("failed", self.id, err.code(), err.str(), err.fatal(), err.retriable(), topic, key)
            )


def _produce_batch(
    producer: Producer,
    batch_id: int,
    count: int,
    entries: list[tuple[Any, ...]],
    writer: _ReportWriter,
) -> None:
    """`count` messages in `entries`: ("m", topic, key, value, headers, partition), one
    message; ("e", topic, header parts or None, [(row, key, value, tombstone), ...]), a ROWS
    event's messages for this process, headers `[*first, ("replicad.row", row), *last]` when
    the parts' third item (sinks.kafka.headers "full") says so, else `last`."""
    batch = _Batch(batch_id, count, writer)
    report = batch.delivered
    produce = producer.produce
    for entry in entries:
        if entry[0] == "m":
            _, topic, key, value, headers, partition = entry
            _produce_one(producer, batch, topic, key, value, headers, partition)
            continue
        _, topic, parts, rows = entry
        first, last, with_row = parts if parts is not None else ((), None, False)
        for row, key, value, tombstone in rows:
            headers = last
            if with_row and last is not None:
                headers = [*first, (ROW_HEADER, b"%d" % row), *last]
            try:  # the common case inline; a full queue or an error through _produce_one
                produce(topic, value, key, on_delivery=report, headers=headers)
            except (BufferError, KafkaException):
                _produce_one(producer, batch, topic, key, value, headers, -1)
            if tombstone:
                _produce_one(producer, batch, topic, key, None, headers, -1)


def _produce_one(
    producer: Producer,
    batch: _Batch,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]] | None,
    partition: int,
) -> None:
    while True:
        try:
            producer.produce(
                topic,
                value,
                key,
                partition=partition,
                on_delivery=batch.delivered,
                headers=headers,  # type: ignore[arg-type]
            )
            return
        except BufferError:  # not expected (the parent keeps within the queue): serve, retry
            producer.poll(0.005)
        except KafkaException as exc:
            batch.fail(exc.args[0], topic, key)
            batch.delivered(None, None)
            return


def whole_frames(buf: bytearray) -> list[tuple[Any, ...]]:
    """The whole frames at the start of `buf`, taken out of it (a partial one stays)."""
    frames = []
    at = 0
    while len(buf) - at >= 4:
        (size,) = LENGTH.unpack_from(buf, at)
        if len(buf) - at - 4 < size:
            break
        frames.append(pickle.loads(bytes(buf[at + 4 : at + 4 + size])))
        at += 4 + size
    del buf[:at]
    return frames
