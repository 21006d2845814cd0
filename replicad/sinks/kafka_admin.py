"""Kafka administration for the sink: topics that exist or are created on demand, the
exactly-once position record read back at start, and the reachability probe of
`replicad check`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from replicad.checkpoint_record import Checkpoint
from replicad.config import KafkaSinkConfig
from replicad.errors import ConfigError
from replicad.published.kafka_clients import kafka_client, serve_logs, shared_settings
from replicad.sinks.base import SinkError, SinkUnavailableError

log = structlog.get_logger("replicad.sinks.kafka")

ADMIN_TIMEOUT_S = 10.0
METADATA_PROBE_S = 1.0  # one look at the topics while waiting for Kafka (retried)
# Topic creation errors a retry cannot fix.
_REFUSED = {
    KafkaError.INVALID_CONFIG,
    KafkaError.POLICY_VIOLATION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_EXCEPTION,
}
# A replication factor over the brokers registered is a configuration error only if it lasts:
# a KRaft cluster shutting down or starting refuses it the same way ("All brokers are
# currently fenced", "only 1 broker(s) are registered") for as long as that takes.
REPLICATION_REFUSED_GRACE_S = 120.0


class Topics:
    """The topics known to exist; `ensure` looks a topic up and creates it when allowed."""

    def __init__(self, config: KafkaSinkConfig) -> None:
        self.config = config
        self.ready: set[str] = set()
        self.partitions: dict[str, int] = {}  # of the topics in `ready`
        self.admin = kafka_client(
            AdminClient, {"bootstrap.servers": config.bootstrap_servers, **shared_settings(config)}
        )
        self._replication_refused_since: float | None = None  # monotonic, while refused

    def serve_logs(self) -> None:
        """Nothing else polls the admin client: its queued log lines are handed over here."""
        serve_logs(self.admin)

    async def ensure(self, topic: str, compacted: bool = False) -> None:
        """Idempotent; retried with backoff while Kafka is unreachable."""
        delay = 0.5
        while topic not in self.ready:
            try:
                # short: a thread blocked here holds up the process's exit on a stop
                meta = await asyncio.to_thread(self.admin.list_topics, timeout=METADATA_PROBE_S)
            except KafkaException as exc:
                self.serve_logs()
                log.warning("kafka_metadata_retry", topic=topic, error=exc.args[0].str())
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            existing = meta.topics.get(topic)
            if existing is not None and existing.error is None:
                self.ready.add(topic)
                self.partitions[topic] = max(1, len(existing.partitions))
                break
            if not self.config.topics.create:
                raise SinkError(
                    "topic does not exist and sinks.kafka.topics.create is false", topic=topic
                )
            await self._create(topic, compacted)

    async def _create(self, topic: str, compacted: bool) -> None:
        spec = self.config.topics
        conf = dict(spec.config)
        if compacted:
            conf["cleanup.policy"] = "compact"
        new = NewTopic(
            topic,
            num_partitions=1 if compacted else spec.partitions,
            replication_factor=spec.replication_factor,
            config=conf,
        )
        futures = self.admin.create_topics([new], request_timeout=ADMIN_TIMEOUT_S)
        try:
            await asyncio.wrap_future(futures[topic])
            log.info("kafka_topic_created", topic=topic, partitions=new.num_partitions)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if err.code() in _REFUSED or self._replication_refused_for_good(err):
                raise ConfigError(
                    f"Kafka refused to create a topic: {err.str()}",
                    topic=topic,
                    key="sinks.kafka.topics",
                ) from None
            log.warning("kafka_topic_create_retry", topic=topic, error=err.str())
            await asyncio.sleep(1.0)
        else:
            self._replication_refused_since = None

    def _replication_refused_for_good(self, err: KafkaError) -> bool:
        """Whether an INVALID_REPLICATION_FACTOR refusal has lasted the grace period."""
        if err.code() != KafkaError.INVALID_REPLICATION_FACTOR:
            self._replication_refused_since = None
            return False
        now = time.monotonic()
        if self._replication_refused_since is None:
            self._replication_refused_since = now
        return now - self._replication_refused_since >= REPLICATION_REFUSED_GRACE_S


TAIL_WINDOW = 32  # offsets read back from each partition's end; grown until a record is found
IDLE_S = 2.0  # a partition that gives nothing for this long counts as read (an open transaction
# of another pipeline sharing the topic holds read_committed readers back)


class PositionReader:
    """Reads the last committed position record of `pipeline` in the positions topic
    (read_committed), from the tail: a window of each partition's last offsets, growing
    eightfold while it holds no record of the pipeline, so that a takeover does not read the
    whole topic (long on a broker that does not compact, or when pipelines share the topic).

    `prepare()` (connection, metadata, where each partition ends) may run while the
    producer's init_transactions does; `read()` must come after it, when no transaction of
    this pipeline is open any more: every record of it up to the end read is settled. An end
    learnt before a late commit only makes the window start earlier than needed."""

    def __init__(self, config: KafkaSinkConfig, topic: str, pipeline: str) -> None:
        self.topic = topic
        self.pipeline = pipeline
        self.consumer = kafka_client(
            Consumer,
            {
                "bootstrap.servers": config.bootstrap_servers,
                "group.id": f"replicad-{pipeline}-positions",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                # The end of a partition is reported by an empty fetch, which the broker
                # holds for this long: librdkafka's 500 ms default was most of a takeover's
                # position read.
                "fetch.wait.max.ms": 20,
                **shared_settings(config),
            },
        )
        self._ends: dict[int, tuple[int, int]] | None = None

    def prepare(self) -> None:
        """Where each partition ends. A partition without a leader now (its brokers down)
        cannot be read to its end: a transient error, never "no position" (which would
        resume from an older one)."""
        try:
            meta = self.consumer.list_topics(self.topic, timeout=ADMIN_TIMEOUT_S)
            partitions = meta.topics[self.topic].partitions
            self._ends = {
                p: self.consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=ADMIN_TIMEOUT_S
                )
                for p in partitions
            }
        except KafkaException as exc:
            raise SinkUnavailableError(
                f"cannot learn where the positions topic ends: {exc.args[0].str()}",
                topic=self.topic,
                pipeline=self.pipeline,
            ) from None

    def read(self) -> Checkpoint | None:
        """The checkpoint (None: the pipeline has none); closes the consumer."""
        try:
            if self._ends is None:
                self.prepare()
            ends = self._ends
            assert ends is not None
            window = TAIL_WINDOW
            while True:
                found = _last_record(self.consumer, self.topic, self.pipeline, ends, window)
                if found is not None or all(high - window <= low for low, high in ends.values()):
                    break
                window *= 8
        finally:
            self.close()
        if found is None:
            log.info("kafka_position_absent", topic=self.topic)
            return None
        checkpoint = Checkpoint.from_json(found["position"])
        log.info("kafka_position_loaded", topic=self.topic, position=str(checkpoint))
        return checkpoint

    def close(self) -> None:
        self.consumer.close()


def read_checkpoint(config: KafkaSinkConfig, topic: str, pipeline: str) -> Checkpoint | None:
    """`PositionReader` in one step (nothing to overlap)."""
    return PositionReader(config, topic, pipeline).read()


def _last_record(
    consumer: Consumer,
    topic: str,
    pipeline: str,
    ends: dict[int, tuple[int, int]],
    window: int,
) -> dict[str, Any] | None:
    """The pipeline's last record in the last `window` offsets of each partition."""
    key = pipeline.encode()
    # (partition, offset, record); the pipeline is the key, so its records share a partition
    found: tuple[int, int, dict[str, Any]] | None = None
    consumer.assign(
        [TopicPartition(topic, p, max(low, high - window)) for p, (low, high) in ends.items()]
    )
    # The end of a partition is the EOF the fetch reports (the last stable offset then), not
    # the watermark asked before, which a commit since may have moved (an end learnt too early
    # only makes the window start earlier than needed).
    open_partitions = set(ends)
    idle_since = time.monotonic()
    while open_partitions and time.monotonic() - idle_since < IDLE_S:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        error = msg.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                open_partitions.discard(msg.partition())
            continue
        idle_since = time.monotonic()
        # A fetched message (no error) always has its partition and offset.
        partition, offset, value = msg.partition(), msg.offset(), msg.value()
        if msg.key() == key and value and partition is not None and offset is not None:
            record = (partition, offset, orjson.loads(value))
            if found is None or record[:2] > found[:2]:
                found = record
    return None if found is None else found[2]


def probe_kafka(config: KafkaSinkConfig, timeout_s: float = 5.0) -> str:
    """For `replicad check`: can the cluster be reached with these settings?"""
    admin = kafka_client(
        AdminClient, {"bootstrap.servers": config.bootstrap_servers, **shared_settings(config)}
    )
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise SinkError(
            f"cannot reach Kafka: {exc.args[0].str()}", bootstrap_servers=config.bootstrap_servers
        ) from None
    finally:
        serve_logs(admin)  # why it could not connect, in the log, before the client goes
    mode = "exactly-once" if config.exactly_once else "at-least-once"
    return (
        f"Kafka at {config.bootstrap_servers}: {len(meta.brokers)} broker(s), "
        f"{len(meta.topics)} topic(s); {mode}"
    )
