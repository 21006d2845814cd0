"""Signals through Kafka (`signals.kafka.topic`, docs/snapshots.md "Signals"): the leader
reads the signal topic's partition 0 from the offset its stored checkpoint names, and hands
the signals (snapshot/signal_messages.py) to the snapshot driver beside the operator's
request inbox. A signal is applied once: the offset after it is stored in the same checkpoint
record as the snapshot progress it changed, so a restart or a new leader starts after it.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import structlog
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from replicad.config import Config
from replicad.coordination.requests import RequestInbox
from replicad.published.kafka_clients import kafka_client, shared_settings
from replicad.snapshot.signal_messages import SignalError, SignalRequest, signal_requests

log = structlog.get_logger("replicad.signals")

MAX_PER_POLL = 100  # signals taken per look at the topic
KEEP_RECENT = 20  # signals kept for `replicad status`
# The end of the partition, and a signal topic nobody created yet: nothing to read.
QUIET_ERRORS = (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART)


class KafkaSignals:
    def __init__(self, config: Config) -> None:
        kafka = config.sinks.kafka
        assert kafka is not None and config.signals.kafka is not None
        self.topic = config.signals.kafka.topic
        self.key = kafka.topic_prefix(config.pipeline).encode()
        self.chunk_rows = config.snapshot.chunk_rows
        self._settings = {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": f"replicad-{config.pipeline}-signals",  # nothing is committed to it
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **shared_settings(kafka),
        }
        self._consumer: Consumer | None = None
        self.next_offset: int | None = None  # after the last signal handed to the driver
        self._open: dict[str, SignalRequest] = {}  # handed over, not completed yet
        self.recent: deque[dict[str, Any]] = deque(maxlen=KEEP_RECENT)

    def start_at(self, offset: int | None) -> None:
        """Read from `offset` (the stored checkpoint's; None: the topic's beginning)."""
        self.next_offset = offset

    def pending(self) -> list[SignalRequest]:
        for value, offset in self._poll():
            self._take(value, offset)
        return list(self._open.values())

    def owns(self, request_id: str) -> bool:
        return request_id in self._open

    def complete(self, request_id: str, state: str, result: dict[str, Any]) -> None:
        request = self._open.pop(request_id, None)
        if request is not None:
            self._answer(request.id, request.op, state, result)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _poll(self) -> list[tuple[bytes | None, int]]:
        consumer = self._consumer
        if consumer is None:
            consumer = self._consumer = kafka_client(Consumer, self._settings)
            start = OFFSET_BEGINNING if self.next_offset is None else self.next_offset
            consumer.assign([TopicPartition(self.topic, 0, start)])
        out = []
        for message in consumer.consume(MAX_PER_POLL, timeout=0):
            error = message.error()
            if error is not None:
                if error.code() not in QUIET_ERRORS:
                    log.warning("signal_topic_error", topic=self.topic, error=error.str())
                continue
            offset = message.offset()
            assert offset is not None
            if message.key() == self.key:
                out.append((message.value(), offset))
            self.next_offset = offset + 1
        return out

    def _take(self, value: bytes | None, offset: int) -> None:
        try:
            requests = signal_requests(value, offset, self.chunk_rows)
        except SignalError as exc:
            log.warning("signal_refused", topic=self.topic, offset=offset, error=str(exc))
            self._answer(f"kafka-{offset}", "?", "rejected", {"error": str(exc)})
            return
        for request in requests:
            log.info("signal_received", topic=self.topic, offset=offset, signal=request.id)
            self._open[request.id] = request

    def _answer(self, signal: str, op: str, state: str, result: dict[str, Any]) -> None:
        log.info("signal_done", signal=signal, op=op, state=state, **result)
        self.recent.append({"id": signal, "op": op, "state": state, **result})


class RequestSources:
    """The operator's inbox and the Kafka signals, as one inbox for the snapshot driver."""

    def __init__(self, inbox: RequestInbox | None, signals: KafkaSignals) -> None:
        self.inbox = inbox
        self.signals = signals

    def pending(self) -> list[Any]:
        from_inbox = [] if self.inbox is None else self.inbox.pending()
        return [*from_inbox, *self.signals.pending()]

    def complete(self, request_id: str, state: str, result: dict[str, Any]) -> None:
        if self.signals.owns(request_id):
            self.signals.complete(request_id, state, result)
        elif self.inbox is not None:
            self.inbox.complete(request_id, state, result)
