"""`replicad invalidate -c CONFIG` (docs/invalidate.md): a Kafka consumer group over the
pipeline's change topics (and its schema topic, for DROP and RENAME) that turns each poll
batch into one Redis plan (replicad/invalidate/rules.py), applies it pipelined, and commits the
batch's offsets only once Redis has acknowledged it.

Redis away: the assigned partitions are paused (the consumer keeps polling, so it stays in the
group) and the same batch is retried with backoff; nothing after it is read, nothing is
skipped. A rebalance drops the batch held for partitions this instance no longer owns: their
new owner reads them again from the last commit (an UNLINK twice is harmless). A key's
messages are in one partition (the row's primary key is the message key), so one row's
changes are applied in order; a key two rows share (a unique column that moved between rows)
is only ever deleted, and deletes commute.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from replicad.config import Config
from replicad.errors import ConfigError, ReplicadError
from replicad.exit_codes import EXIT_DATA_ERROR
from replicad.extras import missing_extra
from replicad.invalidate.metrics import InvalidatorTelemetry
from replicad.invalidate.redis_target import (
    RedisUnavailableError,
    apply,
    check,
    redis_client,
    replicas_to_wait_for,
)
from replicad.invalidate.rules import Plan, RuleSet
from replicad.log_limit import EveryInterval
from replicad.published.kafka_clients import kafka_client, shared_settings
from replicad.published.message_values import MessageDecoder, reader_registry
from replicad.published.topics import TopicNames

try:  # the `invalidate` extra
    import redis
except ImportError:
    raise missing_extra("invalidate", "replicad invalidate", "invalidate") from None

log = structlog.get_logger("replicad.invalidate")
_NOT_YET = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})
PROGRESS_LOG_S = 10.0
REDIS_PROBE_S = 2.0
# Kafka away: `kafka_unavailable` at once, then at most once per this many seconds (with the
# count of errors in between); librdkafka's own lines are held back likewise (service/logging).
KAFKA_ERROR_LOG_S = 30.0


class MessageError(ReplicadError):
    """A message that is not a change envelope: the invalidator stops before it (exit 65),
    its offset not committed."""

    exit_code = EXIT_DATA_ERROR


@dataclass
class Batch:
    plan: Plan
    offsets: dict[tuple[str, int], int]  # (topic, partition) -> next offset to read
    redelete_at: float = 0.0
    oldest_ms: int | None = None  # the commit time of its oldest change (source.ts_ms)


@dataclass
class Counters:
    messages: int = 0
    changes: int = 0
    keys_deleted: int = 0
    notices: int = 0
    table_wide: int = 0
    batches: int = 0
    redis_errors: int = 0
    rebalanced_batches: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class Invalidator:
    def __init__(self, config: Config) -> None:
        kafka = config.sinks.kafka
        if kafka is None:
            raise ConfigError(
                "the invalidator reads the change topics of sinks.kafka, which is not configured",
                key="sinks.kafka",
            )
        settings = config.invalidate
        if not settings.rules:
            raise ConfigError("no invalidation rules: nothing to do", key="invalidate.rules")
        self.config = config
        self.settings = settings
        self.rules = RuleSet.from_config(settings.rules)
        names = TopicNames.of(kafka, config.pipeline)
        self.schema_topic = names.expand(kafka.schema_topic) if kafka.schema_topic else ""
        self.topics = names.pattern()
        self.decoder = MessageDecoder(
            reader_registry(settings.schema_registry_url, config), "invalidate.schema_registry_url"
        )
        self.consumer_settings: dict[str, Any] = {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": settings.group_id or f"replicad-invalidate-{config.pipeline}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "topic.metadata.refresh.interval.ms": 5000,  # new tables' topics found soon
            # A SIGKILLed or cut-off member's partitions move on after 6 s (librdkafka's
            # default: 45 s of stale caches). 6 s is the least a broker accepts by default
            # (group.min.session.timeout.ms); heartbeats run on librdkafka's own thread, so
            # a slow batch does not end the session (max.poll.interval.ms governs that).
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            **shared_settings(kafka),
            **settings.consumer,
            "error_cb": self._on_kafka_error,
        }
        self._kafka_errors = EveryInterval(KAFKA_ERROR_LOG_S)
        self.redis = redis_client(settings.redis)
        self.replicas = replicas_to_wait_for(settings.redis)
        # WAIT gives up well before the socket's timeout would end the connection.
        self.wait_ms = int(settings.redis.timeout_s * 500)
        self.stopping = threading.Event()
        self.counters = Counters()
        self._revoked = False
        self._waiting_for_topics = False
        self._pending: deque[Batch] = deque()  # applied, waiting for their redelete
        # For the metrics and health endpoints (invalidate/metrics.py, read by their thread).
        self.assigned: set[tuple[str, int]] = set()
        self.subscribed = False
        self.redis_down_since: float | None = None  # monotonic; None while Redis takes batches
        self._probed_at = 0.0
        self.telemetry = InvalidatorTelemetry(self)
        self._reported = time.monotonic()

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        check(self.redis, self.settings.redis)
        consumer = kafka_client(Consumer, self.consumer_settings)
        subscriptions = [self.topics] + ([self.schema_topic] if self.schema_topic else [])
        consumer.subscribe(subscriptions, on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.subscribed = True
        log.info(
            "invalidate_started",
            group=self.consumer_settings["group.id"],
            topics=subscriptions,
            rules=len(self.rules.rules),
        )
        try:
            while not self.stopping.is_set():
                self.telemetry.loop_tick = time.monotonic()
                messages = consumer.consume(self.settings.batch_max, self.settings.poll_s)
                self._revoked = False
                batch = self._plan(messages)
                if batch is not None:
                    self._apply(consumer, batch)
                else:
                    self._probe_redis()  # idle: whether Redis is there, for /readyz
                self._finish_due(consumer, final=False)
                self._report()
            self._finish_due(consumer, final=True)
        finally:
            consumer.close()  # leaves the group: the partitions move on at once
            log.info("invalidate_stopped", **self._figures())

    def _on_kafka_error(self, error: KafkaError) -> None:
        """librdkafka's client-level errors (brokers down, transport, authentication), from
        the consumer's poll: one `kafka_unavailable` line per interval, not one per attempt.
        A fatal one is also raised by the next consume."""
        allowed, repeated = self._kafka_errors.allow("kafka_unavailable")
        if allowed:
            more = {"repeated": repeated} if repeated else {}
            log.warning("kafka_unavailable", error=error.str(), code=error.name(), **more)

    def _probe_redis(self) -> None:
        """While nothing is read, a PING at most every REDIS_PROBE_S: /readyz then says
        whether Redis is there without waiting for the next batch (and a batch dropped by
        a rebalance does not leave it marked away for good)."""
        now = time.monotonic()
        if now - self._probed_at < REDIS_PROBE_S:
            return
        self._probed_at = now
        try:
            self.redis.ping()
        except (redis.RedisError, OSError) as exc:
            if self.redis_down_since is None:
                self.redis_down_since = now
                log.warning("redis_unavailable", error=str(exc), idle=True)
            return
        if self.redis_down_since is not None:
            self.redis_down_since = None
            log.info("redis_recovered")

    @property
    def pending(self) -> deque[Batch]:
        return self._pending

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.assigned.update((tp.topic, tp.partition) for tp in partitions)
        # Which instance of the group holds what: operators (and the tests) read it here.
        log.info(
            "invalidate_assigned",
            partitions=sorted(f"{tp.topic}[{tp.partition}]" for tp in partitions),
        )

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        # Whatever is held is for partitions that may have moved: their new owner re-reads
        # from the last commit.
        log.info(
            "invalidate_revoked",
            partitions=sorted(f"{tp.topic}[{tp.partition}]" for tp in partitions),
        )
        self.assigned.difference_update((tp.topic, tp.partition) for tp in partitions)
        self._revoked = True
        if self._pending:
            self.counters.rebalanced_batches += len(self._pending)
            self._pending.clear()

    def _plan(self, messages: list[Message]) -> Batch | None:
        if not messages:
            return None
        plan = Plan()
        offsets: dict[tuple[str, int], int] = {}
        oldest: int | None = None
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                if error.code() in _NOT_YET:  # a pattern no topic matches yet: tables to come
                    if not self._waiting_for_topics:
                        self._waiting_for_topics = True
                        log.info("invalidate_waiting_for_topics", detail=error.str())
                    continue
                if error.fatal() or not error.retriable():
                    raise KafkaException(error)
                log.warning("kafka_consumer_error", error=str(error))
                continue
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            assert topic is not None and partition is not None and offset is not None
            offsets[(topic, partition)] = offset + 1
            self.counters.messages += 1
            value = message.value()
            if value is None:
                continue  # a tombstone
            try:
                record = self.decoder.value(value, topic, partition, offset)
                if isinstance(record, dict) and "payload" in record and "schema" in record:
                    record = record["payload"]  # the Debezium-style envelope with schemas
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
                if topic == self.schema_topic:
                    self.rules.add_schema_event(plan, record)
                else:
                    self.rules.add_change(plan, record)
                source = record.get("source")
                committed = source.get("ts_ms") if isinstance(source, dict) else None
                if isinstance(committed, int) and (oldest is None or committed < oldest):
                    oldest = committed
            except (ValueError, KeyError, TypeError) as exc:
                raise MessageError(
                    f"not a change message: {exc}",
                    topic=topic,
                    partition=partition,
                    offset=offset,
                ) from None
            except ConfigError as exc:  # a template the table's rows cannot fill
                exc.with_context(topic=topic, partition=partition, offset=offset)
                raise
        if not offsets:
            return None
        self.counters.changes += plan.changes
        return Batch(plan, offsets, oldest_ms=oldest)

    def _apply(self, consumer: Any, batch: Batch, deletes_only: bool = False) -> bool:
        """Applies until Redis takes it; False if a rebalance took the batch away meanwhile."""
        delay = self.settings.retry_initial_s
        paused: list[TopicPartition] = []
        try:
            while True:
                try:
                    apply(self.redis, batch.plan, deletes_only, self.replicas, self.wait_ms)
                    self.redis_down_since = None
                    break
                except RedisUnavailableError as exc:
                    self.counters.redis_errors += 1
                    if self.redis_down_since is None:
                        self.redis_down_since = time.monotonic()
                    if not paused:
                        log.warning("redis_unavailable", error=str(exc), retry_s=delay)
                    paused = consumer.assignment()
                    consumer.pause(paused)
                    deadline = time.monotonic() + delay
                    while time.monotonic() < deadline:
                        self.telemetry.loop_tick = time.monotonic()  # waiting, not hung
                        consumer.poll(min(0.1, self.settings.poll_s))  # stay in the group
                        if self._revoked:
                            log.info("invalidate_batch_dropped", reason="rebalance")
                            self.counters.rebalanced_batches += 1
                            return False
                        if self.stopping.is_set():  # stopped while Redis is away:
                            return False  # the batch stays uncommitted, read again later
                    delay = min(delay * 2, self.settings.retry_max_s)
                    paused = consumer.assignment()
                    consumer.pause(paused)
            if paused:
                log.info("redis_recovered")
        finally:
            if paused:
                consumer.resume(consumer.assignment())
        if not deletes_only:
            if batch.oldest_ms is not None:
                self.telemetry.commit_to_apply.observe(
                    max(0.0, time.time() - batch.oldest_ms / 1000.0)
                )
            self.counters.batches += 1
            self.counters.keys_deleted += len(batch.plan.delete)
            self.counters.notices += sum(len(k) for k in batch.plan.notices.values())
            self.counters.table_wide += len(batch.plan.table_wide)
            for event in batch.plan.table_wide:
                log.info(
                    "invalidate_table_wide",
                    action=event.action,
                    target=event.target,
                    table=f"{event.db}.{event.table}",
                    reason=event.reason,
                )
        redelete = self.settings.redelete_after_ms
        if deletes_only or not redelete or not batch.plan.delete:
            if not deletes_only and self._pending:
                # Offsets are committed in order: this one waits behind earlier redeletes.
                batch.plan = Plan()
                batch.redelete_at = 0.0
                self._pending.append(batch)
            else:
                self._commit(consumer, batch)
            return True
        batch.redelete_at = time.monotonic() + redelete / 1000.0
        self._pending.append(batch)
        return True

    def _finish_due(self, consumer: Any, final: bool) -> None:
        """Redeletes whose time has come, then their commits, in order (at the end: all)."""
        while self._pending:
            head = self._pending[0]
            wait = head.redelete_at - time.monotonic()
            if wait > 0:
                if not final:
                    return
                time.sleep(wait)
            self._pending.popleft()
            if head.plan.delete and not self._apply(consumer, head, deletes_only=True):
                self._pending.clear()
                return
            self._commit(consumer, head)

    def _commit(self, consumer: Any, batch: Batch) -> None:
        offsets = [TopicPartition(t, p, o) for (t, p), o in batch.offsets.items()]
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            # Partitions that moved: their new owner re-reads (harmless repeats).
            log.warning("invalidate_commit_failed", error=str(exc))

    def _figures(self) -> dict[str, int]:
        c = self.counters
        return {
            "messages": c.messages,
            "changes": c.changes,
            "keys_deleted": c.keys_deleted,
            "notices": c.notices,
            "table_wide": c.table_wide,
            "batches": c.batches,
            "redis_errors": c.redis_errors,
            "rebalanced_batches": c.rebalanced_batches,
        }

    def _report(self) -> None:
        if time.monotonic() - self._reported >= PROGRESS_LOG_S:
            self._reported = time.monotonic()
            log.info("invalidate_progress", **self._figures())


def run_invalidator(config: Config) -> int:
    """The command: runs until SIGTERM/SIGINT; the exit status of docs/operations.md."""
    import signal
    import sys

    from replicad.exit_codes import EXIT_OK
    from replicad.published.exits import exit_code
    from replicad.published.http import Endpoints

    endpoints = None
    try:
        invalidator = Invalidator(config)

        def stop(signum: int, _frame: Any) -> None:
            log.info("stop_signal", signal=signal.Signals(signum).name)
            invalidator.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        listen = config.invalidate.metrics_listen
        if listen is not None:
            endpoints = Endpoints(
                invalidator.telemetry,
                listen,
                config.metrics.loop_stall_s,
                key="invalidate.metrics_listen",
            )
            endpoints.start()
        invalidator.run()
        return EXIT_OK
    except ConfigError as exc:  # one plain line, as when the file itself is refused
        print(f"replicad invalidate: {exc}", file=sys.stderr)
        return exit_code(exc)
    except ReplicadError as exc:
        log.error("invalidate_failed", error=str(exc))
        print(f"replicad invalidate: {exc}", file=sys.stderr)
        return exit_code(exc)
    except KafkaException as exc:
        log.error("invalidate_failed", error=str(exc))
        print(f"replicad invalidate: {exc}", file=sys.stderr)
        return exit_code(exc)
    finally:
        if endpoints is not None:
            endpoints.stop()
