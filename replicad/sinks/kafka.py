"""Kafka sink: one topic per table, Debezium-style values, delivery tracked per transaction.

At-least-once (default): an idempotent producer with acks=all and no message timeout, so a
Kafka outage pauses delivery (and, through the bounded producer queue, reading) instead of
dropping messages; the position advances only past marks whose messages were all acknowledged.

Exactly-once (`exactly_once: true`): a transactional producer (`transactional.id` =
`replicad-<pipeline>`). Batches of binlog transactions and a position record in the internal
compacted positions topic commit atomically; on start the position is read back from there.
A second producer with the same id fences this one: the next produce/commit raises
PRODUCER_FENCED and the sink stops without writing more. Every data message carries the
header `replicad.batch` = `<instance>:<n>` (a random id of this sink, the number of the Kafka
transaction), and the transaction's position record carries the same `"batch"`: a batch whose
position record is absent never committed (what a broker that shows aborted records, or a
consumer reading read_uncommitted, can tell from it).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn

import orjson
import structlog
from confluent_kafka import (
    KafkaError,
    KafkaException,
    Producer,
)

from replicad.binlog.changes import EventRows, ReadRows, RowChange, TableChange
from replicad.binlog.column_types import TableDescription
from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.config import KafkaSinkConfig
from replicad.errors import ConfigError
from replicad.published.kafka_clients import kafka_client
from replicad.sinks.base import (
    DeliveryTracker,
    DeliveryUnit,
    ProducerFencedError,
    SinkError,
    SinkUnavailableError,
    TopicDeletedError,
)
from replicad.sinks.envelope import (
    EnvelopeWriter,
    dumps,
    row_messages,
    schema_change_value,
    table_schema_value,
)
from replicad.sinks.event_envelope import EventEncoder
from replicad.sinks.kafka_admin import ADMIN_TIMEOUT_S, PositionReader, Topics
from replicad.sinks.producer_child import ROW_HEADER
from replicad.sinks.producer_pool import ProducerPool
from replicad.sinks.read_envelope import ReadEncoder
from replicad.sinks.routing import ChangeFilter, KafkaRouting
from replicad.sinks.transaction_metadata import TransactionMonitor
from replicad.sinks.value_modes import ValueMode

if TYPE_CHECKING:
    from replicad.sinks.avro_registry import AvroEncoder

log = structlog.get_logger("replicad.sinks.kafka")

BATCH_HEADER = "replicad.batch"  # exactly-once: the Kafka transaction a message belongs to
POLL_EVERY = 1000  # serve delivery reports every this many messages
QUEUE_KBYTES = 256 * 1024  # librdkafka's queue bound (it defaults to 1 GiB)
WARM_UP_S = 2.0  # the metadata request that connects the producer before init_transactions
_FENCED = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
}
_NOT_AUTHORIZED = {
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
# A delivery report with one of these names a topic that existed (messages only reach
# librdkafka for topics `Topics.ensure` found) and is gone now: deleted under the pipeline.
_TOPIC_GONE = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
}
# Kafka away or too slow: with a user's `message.timeout.ms` the outage ends in delivery
# reports with these, which librdkafka does not mark retriable; a restart rides it out.
_OUTAGE = {
    KafkaError._MSG_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    # Purged by an abort of the transaction they were in (librdkafka aborts one whose
    # messages timed out, or that failed to add a partition): not delivered, but a restart
    # from the last committed position sends them again.
    KafkaError._PURGE_QUEUE,
    KafkaError._PURGE_INFLIGHT,
}
# Local timeouts: the request may still reach its broker after we gave up on it.
_TIMEOUTS = {KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}
# Settings that would break the delivery guarantee; allowed, but said out loud.
_WEAKENING = {"enable.idempotence": (False, "false"), "acks": ("0", "1", 0, 1)}

# topic, key, value, headers, the delivery unit (mark) the message counts towards, partition
# (-1: librdkafka's partitioner, by key)
Message = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]] | None, DeliveryUnit, int]


class KafkaSink:
    def __init__(
        self,
        config: KafkaSinkConfig,
        pipeline: str,
        change_filter: ChangeFilter,
        values: ValueMode | None = None,
        producer_command: Sequence[str] | None = None,
    ):
        """`producer_command`: how to start one producer process, with
        `config.producer_processes` > 1 (replicad.service.producer_process.command)."""
        self.config = config
        self.values = values or ValueMode()
        self.pipeline = pipeline
        self.routing = KafkaRouting(config, pipeline)
        self.filter = change_filter
        self.exactly_once = config.exactly_once
        self.transactional_id = transactional_id(config, pipeline)
        self.tracker = DeliveryTracker(_delivery_failure)
        self._fatal: SinkError | None = None
        self._last_error_log = 0.0
        self._settings = producer_settings(config, pipeline, self._on_error)
        self.producer: Producer | ProducerPool
        try:
            self.producer = kafka_client(Producer, self._settings)
        except KafkaException as exc:
            raise ConfigError(
                f"librdkafka refused the producer settings: {exc.args[0].str()}",
                key="sinks.kafka.producer",
            ) from None
        if config.producer_processes > 1:
            if producer_command is None:
                raise ConfigError(
                    "internal: producer_processes > 1 without a producer command",
                    key="sinks.kafka.producer_processes",
                )
            # The settings were checked by building one producer above; the children use them.
            self.producer = ProducerPool(
                config.producer_processes,
                producer_command,
                self._settings,
                self._on_error,
                config.max_in_flight,
                QUEUE_KBYTES * 1024,
            )
        self.topics = Topics(config)
        self._pending: deque[Message] = deque()  # waiting for a topic or for queue room
        self._since_poll = 0
        self.writer = EnvelopeWriter(pipeline, self.values.connect)
        # envelope.format: avro: keys and values through the schema registry instead.
        self._avro: AvroEncoder | None = None
        if self.values.registry is not None and self.values.options is not None:
            # Imported here: confluent-kafka's registry client brings an HTTP and a JOSE
            # stack: about 0.2 s of CPU and 16 MB in every start that does not use it.
            from replicad.sinks.avro_registry import AvroEncoder

            self._avro = AvroEncoder(self.values.registry, pipeline, self.values.options)
        self._events = EventEncoder(self.writer)
        self._reads = ReadEncoder(self.writer)
        self._schema_topic = self.routing.schema_topic  # "" when switched off
        self._schemas_sent: set[tuple[str, str, str]] = set()
        self._last_schema: TableDescription | None = None
        self._header_event: tuple[str | None, int | None, str | None] | None = None
        self._header_parts: tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]] = ([], [])
        self._paused_since: float | None = None  # reading paused by a full producer queue
        self._pause_logged = False
        # transaction metadata: the envelope's "transaction" block, BEGIN and END events
        self._transactions = TransactionMonitor()
        self._transaction_topic = self.routing.transaction_topic
        # exactly-once state
        self._in_kafka_txn = False
        self._txn_started = 0.0
        self._since_mark = 0  # messages published after the last mark
        self._last_mark: tuple[int, Checkpoint] | None = None
        self._marks_in_batch = 0
        self._committed_seq = 0
        self._commit_due = False
        self._committing = False
        # The commit in progress, as a task of its own (see `_commit_batch`).
        self._commit_task: asyncio.Task[None] | None = None
        # The id of the Kafka transaction that is open or (between transactions) begins with
        # the next message: `<instance>:<n>`, n counting the transactions begun.
        self._instance = secrets.token_hex(8)
        self._batches = 0  # Kafka transactions begun
        self._batch_id = f"{self._instance}:1"
        self._batch_header = (BATCH_HEADER, self._batch_id.encode())

    # ------------------------------------------------------------------ settings

    def _poll(self) -> None:
        """Serve delivery reports and client errors; a fatal producer state (fenced) is
        raised by the client from here."""
        try:
            self.producer.poll(0)
        except KafkaException as exc:
            raise _fenced_or(exc.args[0], "the Kafka producer failed") from None
        self.topics.serve_logs()

    def _on_error(self, err: KafkaError) -> None:
        """librdkafka's client-level errors: broker down, authentication, fatal producer
        states. Transient ones are logged (at most every 5 s); fatal ones stop the sink."""
        if err.fatal():
            self._fatal = _fenced_or(err, "the Kafka producer hit a fatal error")
            return
        now = time.monotonic()
        if now - self._last_error_log >= 5.0:
            self._last_error_log = now
            log.warning("kafka_unavailable", error=err.str(), code=err.name())

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Checkpoint | None:
        """Exactly-once: fence older producers of this pipeline and read the position stored
        in Kafka. At-least-once: nothing to do (returns None)."""
        if not self.exactly_once:
            return None
        await self.topics.ensure(self.routing.positions_topic, compacted=True)
        reader = PositionReader(self.config, self.routing.positions_topic, self.pipeline)
        # Connecting the reader overlaps init_transactions (a takeover waits for both);
        # reading waits for it: only then is every transaction of this pipeline settled.
        # On a failure the reader is left to the garbage collector: its thread may still be
        # using it, and closing a consumer under another thread's call is not safe.
        preparing = asyncio.ensure_future(asyncio.to_thread(reader.prepare))
        await self._init_transactions()
        await preparing
        log.info(
            "kafka_transactions_ready",
            transactional_id=self.transactional_id,
            instance=self._instance,  # the first part of this sink's `replicad.batch` ids
        )
        return await asyncio.to_thread(reader.read)

    async def _init_transactions(self) -> None:
        """Fence older producers of this transactional id (aborting what they left open)."""
        # librdkafka asks for the transaction coordinator only through a connected broker;
        # right after the bootstrap it has none and retries on a 500 ms timer, half of a
        # takeover. Two metadata requests connect one first: the first is answered on the
        # bootstrap connection, which librdkafka then drops for the brokers' own addresses.
        # (A failure here is init_transactions' to report.)
        with contextlib.suppress(KafkaException):
            for _ in range(2):
                await asyncio.to_thread(
                    self._transactional.list_topics, self.routing.positions_topic, WARM_UP_S
                )
        while True:
            try:
                await asyncio.to_thread(self._transactional.init_transactions, ADMIN_TIMEOUT_S)
                return
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable():
                    log.warning("kafka_init_transactions_retry", error=err.str())
                    await asyncio.sleep(1.0)
                    continue
                raise _fenced_or(err, "cannot initialise Kafka transactions") from None

    # ------------------------------------------------------------------ publishing

    def publish(self, change: RowChange) -> None:
        change = self.values.convert(change)
        routing = self.routing
        topic = routing.topic(change.db, change.table)
        self._note_schema(change)
        filtered_before, filtered_after = self.filter.rows(change)
        now_ms = int(time.time() * 1000)
        headers = self._headers(change)
        # Snapshot reads belong to no transaction (as in Debezium): no block, no BEGIN/END.
        metadata = self.config.transaction_metadata and change.op != "r"
        value: Callable[..., bytes] = self.writer.value
        if self._avro is not None:
            value = partial(self._avro.value, topic)
        for op, before, after in row_messages(change):
            transaction = self._transaction_block(change, now_ms) if metadata else None
            row = self.filter.key_row(change, before if op == "d" else after)
            key = self._key(topic, change, routing.key(change, row))
            self._send_raw(
                topic,
                key,
                value(
                    change,
                    op,
                    None if before is None else filtered_before,
                    None if after is None else filtered_after,
                    now_ms,
                    transaction,
                ),
                headers,
            )
            if op == "d" and self.config.tombstones and key is not None:
                self._send_raw(topic, key, None, headers)

    def publish_event(self, rows: EventRows) -> int | None:
        """Every row change of one ROWS event through the compiled path (`event_envelope`):
        the same messages `publish` sends for each of them. Returns the number of row
        changes, or None when the event must go row by row (values converted, columns
        filtered, transaction metadata, schemas in the values, the row as the key, no
        compiled decoder); nothing is sent then."""
        if self._rewrites or self.config.transaction_metadata:
            return None
        table = rows.table or rows.event.table_map
        if table is None:
            return None
        key = self.routing.event_key(table.schema, table.table, tuple(table.primary_key_names))
        if key is None:
            return None
        encoded = self._events.encode(rows, int(time.time() * 1000), lines=False, key=key)
        if encoded is None:
            return None
        return self._send_encoded(*encoded)

    def publish_reads(self, reads: ReadRows) -> int | None:
        """Snapshot rows through the compiled read path (`read_envelope`): the same messages
        `publish` sends for each of `reads.changes()`. Returns the number of rows, or None
        when they must go row by row (as `publish_event`, except that reads belong to no
        transaction, so transaction metadata does not matter); nothing is sent then."""
        if self._rewrites:
            return None
        schema = reads.schema
        key = self.routing.event_key(schema.db, schema.table, reads.primary_key)
        if key is None:
            return None
        encoded = self._reads.encode(reads, int(time.time() * 1000), lines=False, key=key)
        if encoded is None:
            return None
        return self._send_encoded(*encoded)

    @property
    def _rewrites(self) -> bool:
        """Whether the value mode or the filters rewrite changes: then no compiled path
        writes them (it writes the changes as they are)."""
        return self.values.options is not None or self.filter.rewrites_changes

    def _send_encoded(self, messages: list[Any], change: RowChange, count: int) -> int:
        """The messages the compiled paths wrote for `count` row changes (`change` stands
        for them), sent to the change's topic; returns `count`."""
        topic = self.routing.topic(change.db, change.table)
        self._note_schema(change)
        first, last = self._header_parts_of(change)
        parts = None if last is None else (first, last, self.config.headers == "full")
        direct = not self._pending and topic in self.topics.ready
        if direct:
            if isinstance(self.producer, ProducerPool) and self._to_pool(topic, parts, messages):
                return count
            self._ready_to_produce()
        self._send_messages(topic, parts, messages, direct)
        return count

    def _to_pool(self, topic: str, parts: Any, messages: list[Any]) -> bool:
        """Producer processes: the event split by key in one call, headers built there.
        False when the pool took none of them (the messages go one by one then)."""
        assert isinstance(self.producer, ProducerPool)
        unit = self.tracker.current
        sent = self.producer.produce_event(
            topic, unit, parts, messages, self.config.tombstones, self.config.max_message_bytes
        )
        if not sent:
            return False
        unit.outstanding += sent
        self._since_mark += sent
        self._since_poll += sent
        if self._since_poll >= POLL_EVERY:
            self._since_poll = 0
            self._poll()
        return True

    def _send_messages(self, topic: str, parts: Any, messages: list[Any], direct: bool) -> None:
        """`_send_raw` for each message, without its per-message checks while `direct`
        (nothing waits, the topic exists, and `_ready_to_produce` was called for the batch:
        nothing commits while the pipeline publishes). From the first message that cannot
        go that way (queue full, too large), the rest go through `_send_raw`, in order."""
        first, last, with_row = parts or ((), None, False)
        tombstones = self.config.tombstones
        limit = self.config.max_message_bytes
        unit = self.tracker.current
        # librdkafka's Producer or the ProducerPool: the same call.
        send: Callable[..., None] = self.producer.produce
        delivered, since_poll = unit.delivered, self._since_poll
        sent = 0
        for op, row, key_bytes, value in messages:
            headers = last
            if with_row and last is not None:
                headers = [*first, (ROW_HEADER, b"%d" % row), *last]
            tombstone = op == "d" and tombstones and key_bytes is not None
            if direct and len(value) <= limit:
                # A full queue sends the rest to the pending list, in order: a delete's
                # tombstone after its delete even when the delete itself did not fit.
                for message in (value, None) if tombstone else (value,):
                    sent += 1
                    unit.outstanding += 1  # counted before it is queued, as in `_send_raw`
                    if direct:
                        try:
                            send(topic, message, key_bytes, on_delivery=delivered, headers=headers)
                        except BufferError:
                            self._poll()
                        except KafkaException as exc:
                            self._refused(exc, topic)
                        else:
                            since_poll += 1
                            if since_poll >= POLL_EVERY:
                                since_poll = 0
                                self._poll()
                            continue
                        self._since_poll, direct = since_poll, False
                    self._pending.append((topic, key_bytes, message, headers, unit, -1))
                continue
            if direct:
                self._since_poll, direct = since_poll, False
            self._send_raw(topic, key_bytes, value, headers)
            if tombstone:
                self._send_raw(topic, key_bytes, None, headers)
        if direct:
            self._since_poll = since_poll
        self._since_mark += sent

    def _note_schema(self, change: RowChange) -> None:
        """The schema topic's record of the change's table version, before its first row."""
        schema = change.schema
        if schema is not None and schema is not self._last_schema:
            self._last_schema = schema
            if (
                self._schema_topic
                and (schema.db, schema.table, schema.version) not in self._schemas_sent
            ):
                self._send_schema(change, schema)

    async def publish_table(self, change: TableChange) -> None:
        """TRUNCATE: op "t" (no key, like Debezium) on every partition of the table's topic,
        so that each partition's consumers see it between the rows around it. A schema
        change: an event in the schema topic, keyed by table and binlog coordinates so that
        compaction keeps every one."""
        now_ms = int(time.time() * 1000)
        headers = self._table_headers(change)
        if change.kind == "truncate":
            topic = self.routing.topic(change.db, change.table)
            await self.topics.ensure(topic)
            if self._avro is None:
                value = self.writer.truncate(change, now_ms)
            else:
                avro_value = self._avro.truncate(topic, change, now_ms)
                if avro_value is None:
                    return
                value = avro_value
            for partition in range(self.topics.partitions.get(topic, 1)):
                self._send_raw(topic, None, value, headers, partition)
            return
        topic = self._schema_topic
        if not topic:
            return
        key = {"db": change.db, "table": change.table, "ddl": f"{change.file}:{change.pos}"}
        value = dumps(schema_change_value(change, self.pipeline, now_ms))
        self._send_raw(topic, dumps(key), value, headers)

    def _key(self, topic: str, change: RowChange, key: dict[str, Any] | None) -> bytes | None:
        if key is None:
            return None
        if self._avro is not None:
            return self._avro.key(topic, change, key)
        body = dumps(key)
        connect = self.values.connect
        if connect is None:
            return body
        return connect.wrap_key(body, key, change.db, change.table, self.pipeline, change.schema)

    def _send_schema(self, change: RowChange, schema: TableDescription) -> None:
        """The table's schema record, before the first change of this process that names its
        version (a restart writes it again: compaction keeps one per version)."""
        self._schemas_sent.add((schema.db, schema.table, schema.version))
        key = {"db": schema.db, "table": schema.table, "version": schema.version}
        value = dumps(table_schema_value(schema, change, self.pipeline))
        headers = self._headers(change)
        self._send_raw(self._schema_topic, dumps(key), value, headers)

    def _send_raw(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None,
        partition: int = -1,
    ) -> None:
        if value is not None and len(value) > self.config.max_message_bytes:
            topic = self._oversized(topic, key, value, headers)
        self._since_mark += 1
        # Counted at once, queued or not: a mark placed now must wait for this message.
        unit = self.tracker.current
        unit.outstanding += 1
        message = (topic, key, value, headers, unit, partition)
        if self._pending or topic not in self.topics.ready:
            self._pending.append(message)
            return
        if not self._produce(*message):
            self._pending.append(message)

    def _oversized(
        self, topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]] | None
    ) -> str:
        context = {
            "topic": topic,
            "key": None if key is None else key[:200].decode("utf-8", "replace"),
            "bytes": len(value),
            "limit": self.config.max_message_bytes,
        }
        if headers and self.config.headers == "full":
            context["source"] = ":".join(v.decode() for _, v in headers[:3])
        if self.config.oversized == "fail":
            raise SinkError(
                "a message is larger than sinks.kafka.max_message_bytes; the position stays "
                "before it (raise the limit or set sinks.kafka.oversized: route)",
                **context,
            )
        log.warning("kafka_message_oversized_routed", to=self.routing.oversized_topic, **context)
        return self.routing.oversized_topic

    def _produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None,
        unit: DeliveryUnit,
        partition: int = -1,
    ) -> bool:
        """Hand one (already counted) message to librdkafka; False when its queue is full."""
        self._ready_to_produce()
        try:
            # ignore: the stub's list[tuple[str, str | bytes | None]] is invariant; a list of
            # (str, bytes) is one of the values it accepts.
            self.producer.produce(
                topic,
                value,
                key,
                partition=partition,
                on_delivery=unit.delivered,
                headers=headers,  # type: ignore[arg-type]
            )
        except BufferError:
            self._poll()
            return False
        except KafkaException as exc:
            self._refused(exc, topic)
        # Inline, not shared with `_to_pool`: this runs once per message.
        self._since_poll += 1
        if self._since_poll >= POLL_EVERY:
            self._since_poll = 0
            self._poll()
        return True

    def _ready_to_produce(self) -> None:
        """Before a message goes to librdkafka: not inside a commit, and, exactly-once, a
        Kafka transaction open (none after an aborted one)."""
        if self._committing:  # the pipeline's gate keeps publishing and commits apart
            raise SinkUnavailableError("internal: a message was published during a Kafka commit")
        if self.exactly_once and not self._in_kafka_txn:
            if self._fatal is not None:  # no new transaction after an aborted one
                raise self._fatal
            self._begin_kafka_transaction()

    def _refused(self, exc: KafkaException, topic: str) -> NoReturn:
        """librdkafka refused a message (not for a full queue): the error that says why."""
        err = exc.args[0]
        if err.code() == KafkaError._FATAL:
            # The cause (e.g. fenced) comes out of poll() or error_cb: report that.
            self._poll()
            if self._fatal is not None:
                raise self._fatal from None
        if self.exactly_once and err.code() == KafkaError._STATE:
            # The transaction failed underneath (fenced, timed out): the abort, when it
            # may run, says which.
            self._fail_transaction("the transaction is in an error state")
            raise SinkUnavailableError(
                f"the Kafka transaction is in an error state ({err.str()}); a restart "
                "resumes from the last committed position",
                topic=topic,
            ) from None
        raise _fenced_or(err, "Kafka refused a message", topic=topic) from None

    def _headers(self, change: RowChange) -> list[tuple[str, bytes]] | None:
        first, last = self._header_parts_of(change)
        if self.config.headers != "full" or last is None:
            return last
        return [*first, (ROW_HEADER, b"%d" % change.row), *last]

    def _header_parts_of(
        self, change: RowChange
    ) -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]] | None]:
        """The headers before and after `replicad.row` (`sinks.kafka.headers` "full"; with
        "minimal" only the second part is sent, and with "none" it is None). The rows of one
        ROWS event share file, pos and GTID (and, exactly-once, mostly the Kafka transaction:
        a new one clears the cache): rendered once."""
        if self.config.headers == "none":
            return [], None
        event = (change.file, change.pos, change.gtid)
        if event != self._header_event:
            self._header_event = event
            last = [] if change.gtid is None else [("replicad.gtid", change.gtid.encode())]
            if self.exactly_once:
                last.append(self._batch_header)
            self._header_parts = (
                [
                    ("replicad.file", (change.file or "").encode()),
                    ("replicad.pos", str(change.pos).encode()),
                ],
                last,
            )
        return self._header_parts

    def _table_headers(self, change: TableChange) -> list[tuple[str, bytes]] | None:
        if self.config.headers == "none":
            return None
        headers: list[tuple[str, bytes]] = []
        if self.config.headers == "full":
            headers += [
                ("replicad.file", (change.file or "").encode()),
                ("replicad.pos", str(change.pos).encode()),
                (ROW_HEADER, b"0"),
            ]
        if change.gtid is not None:
            headers.append(("replicad.gtid", change.gtid.encode()))
        if self.exactly_once:
            headers.append(self._batch_header)
        return headers

    def _transaction_block(self, change: RowChange, now_ms: int) -> dict[str, Any]:
        """The next change message's `transaction` block; its transaction's BEGIN event goes
        out first when it is the first."""
        block, first = self._transactions.next_message(change)
        if first and self._transaction_topic:
            key, value = self._transactions.begin(now_ms)
            self._send_raw(self._transaction_topic, key, value, None)
        return block

    def skipped(self, change: RowChange) -> None:
        """A change delivered before a restart inside its transaction, not sent again:
        counted towards the transaction's metadata as if it were."""
        if self.config.transaction_metadata and change.op != "r":
            for _ in row_messages(self.values.convert(change)):
                self._transactions.next_message(change)

    def transaction_restarts(self) -> None:
        """The transaction in flight comes again from its start (the source reconnected):
        its rows already sent will be counted again through `skipped`."""
        self._transactions.reset()

    async def publish_heartbeat(self, position: Position) -> None:
        """A heartbeat message (`heartbeat.publish`): keyed by the topic prefix, with the
        source position read so far, so consumers see the pipeline alive and offsets move
        while the tables are idle or filtered out."""
        topic = self.routing.heartbeat_topic
        await self.topics.ensure(topic)
        key = dumps({"serverName": self.routing.names.prefix})
        value = {"ts_ms": int(time.time() * 1000), "source": position.to_json()}
        self._send_raw(topic, key, dumps(value), None)

    # ------------------------------------------------------------------ marks and acks

    def mark(self, seq: int, checkpoint: Checkpoint, transaction_end: bool) -> None:
        if self._fatal is not None:
            raise self._fatal
        if transaction_end and self.config.transaction_metadata:
            end = self._transactions.end(int(time.time() * 1000))
            if end is not None and self._transaction_topic:
                self._send_raw(self._transaction_topic, *end, None)
        self.tracker.close(seq, checkpoint.position)
        self._since_mark = 0
        if self.exactly_once:
            self._last_mark = (seq, checkpoint)
            self._marks_in_batch += 1
            if self._marks_in_batch >= self.config.batch_transactions or (
                self._in_kafka_txn
                and time.monotonic() - self._txn_started >= self.config.batch_ms / 1000
            ):
                self._commit_due = True

    def acked(self) -> int:
        if self._fatal is not None:
            raise self._fatal
        self._poll()
        acked = self.tracker.acked()
        return self._committed_seq if self.exactly_once else acked

    @property
    def queued(self) -> int:
        """Messages not yet acknowledged: in librdkafka's queue or waiting to enter it (read
        by the metrics thread: both lengths are safe to take from another thread)."""
        return len(self.producer) + len(self._pending)

    @property
    def backlogged(self) -> bool:
        return bool(self._pending) or self._commit_due

    async def wait_for_room(self) -> None:
        await self._finish_commit()  # nothing is produced while a commit is in progress
        while self._pending:
            if self._fatal is not None:
                raise self._fatal
            message = self._pending[0]
            topic = message[0]
            if topic not in self.topics.ready:
                await self.topics.ensure(topic, compacted=topic == self._schema_topic)
                continue
            if self._produce(*message):
                self._pending.popleft()
                self._end_pause()
            else:
                # librdkafka's queue is full: Kafka is slow or away. Reading waits here.
                self._note_pause()
                await asyncio.sleep(0.01)
        if self._commit_due:
            await self._commit_batch()

    def _note_pause(self) -> None:
        """Short waits for queue room are normal at full speed; one over a second is not."""
        now = time.monotonic()
        if self._paused_since is None:
            self._paused_since = now
        elif not self._pause_logged and now - self._paused_since >= 1.0:
            self._pause_logged = True
            log.warning(
                "kafka_backpressure",
                queued=len(self.producer),
                note="reading pauses until Kafka acknowledges",
            )

    def _end_pause(self) -> None:
        if self._pause_logged:
            log.info(
                "kafka_backpressure_released",
                paused_s=round(time.monotonic() - (self._paused_since or 0), 3),
            )
        self._paused_since = None
        self._pause_logged = False

    async def maintain(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        await self._finish_commit()
        self._poll()
        if (
            self.exactly_once
            and self._last_mark is not None
            and self._last_mark[0] > self._committed_seq
            and self._since_mark == 0
            and not self._pending
        ):
            await self._commit_batch()

    async def drain(self, timeout_s: float, failed: bool = False) -> None:
        deadline = time.monotonic() + timeout_s
        if self.exactly_once:
            await self._drain_transaction(failed)
            return
        if not failed:
            await self.wait_for_room()
        # flush() on this thread, in short slices: delivery reports touch the tracker.
        try:
            while self.producer.flush(0.1) and time.monotonic() < deadline:
                await asyncio.sleep(0)
        except KafkaException as exc:
            raise _fenced_or(exc.args[0], "the Kafka producer failed") from None
        remaining = self.tracker.outstanding
        if remaining:
            log.warning(
                "kafka_undelivered_at_shutdown",
                messages=remaining,
                note="they are re-sent from the stored position at the next start",
            )

    async def _drain_transaction(self, failed: bool) -> None:
        """Exactly-once at a stop: end the open Kafka transaction at its last mark. A stop
        cancels the pipeline wherever it waits, possibly inside a commit: that one ends
        first (`_finish_commit`), then what remains is committed, or left to close() to
        abort."""
        await self._finish_commit()
        if failed:
            return  # the open Kafka transaction is aborted by close()
        if self._since_mark:
            # Stopped inside a binlog transaction (the stop's grace ran out, or the source
            # reconnected mid-transaction): a Kafka transaction commits whole, so it may only
            # end at a mark, and this one holds messages after its last. Aborted by close();
            # a restart resumes from the last committed position and sends them again.
            log.warning(
                "kafka_batch_aborted_at_stop",
                messages_after_mark=self._since_mark,
                committed_seq=self._committed_seq,
            )
            return
        await self.wait_for_room()
        if self._last_mark is not None and self._last_mark[0] > self._committed_seq:
            await self._commit_batch()

    def abandon(self) -> None:
        """Leadership lost: purge what librdkafka has not sent yet, so this (deposed) process
        adds nothing more to the topics. Messages already on the wire cannot be recalled:
        at-least-once consumers see them as duplicates of the new leader's; exactly-once
        needs no purge (the new leader's init_transactions aborts this producer's open
        transaction), but it does no harm."""
        self._pending.clear()
        try:
            self.producer.purge(in_queue=True, in_flight=False, blocking=False)
            log.warning("kafka_queue_purged", remaining=len(self.producer))
        except KafkaException as exc:
            log.warning("kafka_purge_failed", error=exc.args[0].str())
        if isinstance(self.producer, ProducerPool):
            # No close() follows an abandon: the processes go now (their queues are purged).
            self.producer.close(timeout_s=2.0)

    def close(self) -> None:
        if self.exactly_once:
            self._abort_at_close()
        try:
            self._poll()
        except SinkError:
            pass  # already reported by whatever failed first
        if isinstance(self.producer, ProducerPool):
            self.producer.close()

    # ------------------------------------------------------------------ exactly-once

    def _abort_at_close(self) -> None:
        """Abort the open Kafka transaction: whatever follows the last committed mark is sent
        again after a restart. Not while a commit is still in progress (a drain cut short by
        its timeout): an abort would only conflict with it; the broker completes it, or
        aborts it at the transaction timeout."""
        task = self._commit_task
        if task is not None and not task.done():
            log.warning(
                "kafka_commit_unsettled_at_close",
                committed_seq=self._committed_seq,
                note="a restart resumes from the last position committed in Kafka",
            )
            return
        if task is not None and not task.cancelled() and task.exception() is not None:
            self._commit_task = None  # its error was raised by the drain (or the pipeline's)
            return  # a failed commit ended its transaction already (aborted or left)
        if self._in_kafka_txn and self._fatal is None:
            if self._settled():
                try:
                    self._transactional.abort_transaction(5.0)
                except KafkaException as exc:
                    log.warning("kafka_abort_failed", error=exc.args[0].str())
            else:
                self._leave_to_fencing("closed with messages not acknowledged")
            self._end_kafka_transaction()

    def _begin_kafka_transaction(self) -> None:
        try:
            self._transactional.begin_transaction()
        except KafkaException as exc:
            raise _fenced_or(exc.args[0], "cannot begin a Kafka transaction") from None
        self._in_kafka_txn = True
        self._txn_started = time.monotonic()
        self._marks_in_batch = 0
        self._batches += 1
        assert self._batch_id == f"{self._instance}:{self._batches}", "batch header out of step"

    def _end_kafka_transaction(self) -> None:
        """The open Kafka transaction is over (committed or aborted): messages published from
        now on belong to the next one, whose id their headers carry."""
        self._in_kafka_txn = False
        self._batch_id = f"{self._instance}:{self._batches + 1}"
        self._batch_header = (BATCH_HEADER, self._batch_id.encode())
        self._header_event = None  # re-render the cached header parts with the new id

    @property
    def _transactional(self) -> Producer:
        """The one producer of exactly-once (the config refuses producer processes then)."""
        producer = self.producer
        assert not isinstance(producer, ProducerPool)
        return producer

    @property
    def _transaction_timeout_s(self) -> float:
        return float(self._settings["transaction.timeout.ms"]) / 1000

    def _settled(self) -> bool:
        """Every message of the open transaction acknowledged by Kafka: nothing of it can
        still reach a partition, so an abort (EndTxn) leaves nothing behind."""
        self.producer.poll(0)  # failures reported meanwhile count
        return not len(self.producer) and self.tracker.failure is None

    def _leave_to_fencing(self, why: str) -> None:
        """Leave the open transaction to the next init_transactions of this transactional id
        (the restart's, or a standby's) or to the coordinator's transaction timeout: both
        abort it under a new producer epoch, which the partitions then hold, so a produce
        request of this epoch still in flight is refused when it lands. Aborting it here
        would write the markers under this epoch: a request that timed out on our side but
        reaches its broker after them is appended, left open, and made visible by this
        producer id's next commit (KAFKA-14053; librdkafka has no KIP-890 protection)."""
        with contextlib.suppress(KafkaException):  # unsent ones: not sent under this epoch
            self.producer.purge(in_queue=True, in_flight=False, blocking=False)
        log.warning(
            "kafka_transaction_left_to_fencing",
            reason=why,
            committed_seq=self._committed_seq,
            note="the next init_transactions or the transaction timeout aborts it",
        )

    def _fail_transaction(self, why: str, *, may_abort: bool = True) -> None:
        """The open transaction cannot be committed. The sink is done then: the marks it
        held are not delivered, so no later commit may carry a position past them (a commit
        of just a position record, with the data aborted, loses that data for every
        read_committed consumer). Aborted here only when settled, else left to fencing."""
        self._fatal = self._fatal or SinkUnavailableError(
            "a Kafka transaction failed; a restart resumes from the last committed position",
            committed_seq=self._committed_seq,
        )
        self._end_kafka_transaction()
        if not (may_abort and self._settled()):
            self._leave_to_fencing(why)
            return
        try:
            self._transactional.abort_transaction(5.0)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() in _FENCED or err.fatal():
                raise _fenced_or(err, "cannot abort a Kafka transaction") from None
            # Not fatal: the transaction stays open on the coordinator until it times out or
            # the next producer of this transactional id aborts it.
            log.warning("kafka_abort_failed", error=err.str(), committed_seq=self._committed_seq)

    async def _commit_batch(self) -> None:
        """Commit the open Kafka transaction with a position record for its last mark.

        The commit runs as a task of its own, which the caller waits for through a shield: a
        stop cancels the pipeline wherever it waits, and a commit cut off at one of its awaits
        would go on in librdkafka's worker thread while this sink still counted its
        transaction open; the drain's own commit then produced into a transaction that was
        no longer there ("Erroneous state", exit 75 instead of a clean stop). Shielded, the
        commit ends in full, and whoever comes next waits for it first (`_finish_commit`)."""
        await self._finish_commit()
        if self._last_mark is None or self._last_mark[0] <= self._committed_seq:
            self._commit_due = False
            return  # the commit just waited for covered the last mark already
        self._commit_task = asyncio.ensure_future(self._commit_last_mark())
        await self._finish_commit()

    async def _finish_commit(self) -> None:
        """Wait for the commit in progress, if any; its error is raised here (once)."""
        task = self._commit_task
        if task is None:
            return
        try:
            await asyncio.shield(task)
        finally:
            if task.done():  # not when this wait itself was cancelled: the task goes on
                self._commit_task = None

    async def _commit_last_mark(self) -> None:
        self._commit_due = False
        if self._fatal is not None:  # e.g. an aborted transaction: its marks are lost
            raise self._fatal
        assert self._last_mark is not None
        seq, checkpoint = self._last_mark
        position = checkpoint.position
        if self._since_mark:
            raise AssertionError("a Kafka transaction may only end at a mark")
        topic = self.routing.positions_topic
        if topic not in self.topics.ready:
            await self.topics.ensure(topic, compacted=True)
        # The batch's data messages are acknowledged here, before the commit, so that their
        # delivery reports run on this thread (commit_transaction, in a worker thread, would
        # serve them there: they touch the tracker) and a failed one is reported as itself.
        deadline = time.monotonic() + self._transaction_timeout_s
        await self._wait_for_acks(deadline, position)
        record = {
            "pipeline": self.pipeline,
            "position": checkpoint.to_json(),
            "ts_ms": int(time.time() * 1000),
            "batch": self._batch_id,  # as in its messages' headers (this one may begin it)
        }
        unit = self.tracker.current
        unit.outstanding += 1
        if not self._produce(topic, self.pipeline.encode(), orjson.dumps(record), None, unit):
            await asyncio.to_thread(self.producer.flush, 1.0)
            if not self._produce(topic, self.pipeline.encode(), orjson.dumps(record), None, unit):
                raise SinkUnavailableError("Kafka producer queue stays full", topic=topic)
        # Retried until the transaction timeout: past it the broker aborts it anyway.
        self._committing = True
        try:
            await self._commit_until(deadline, position)
        finally:
            self._committing = False
        self._end_kafka_transaction()
        self._committed_seq = seq
        self.tracker.settle()  # every message so far is delivered: the commit says so
        log.debug("kafka_batch_committed", position=str(position), seq=seq)

    async def _wait_for_acks(self, deadline: float, position: Position) -> None:
        """Until librdkafka holds no unacknowledged message (delivery reports served on this
        thread: they touch the tracker). A failure reported already counts even when the
        queue is empty by now (a purge empties it)."""
        while True:
            self._poll()
            if self._fatal is not None:
                raise self._fatal
            if self.tracker.failure is not None:  # e.g. a topic deleted: not committable
                self._fail_transaction("a message was not delivered")
                raise self.tracker.failure
            if not len(self.producer):
                return
            if time.monotonic() > deadline:
                self._fail_transaction("messages not acknowledged in time")
                raise SinkUnavailableError(
                    f"the messages of a Kafka transaction were not acknowledged within "
                    f"{self._transaction_timeout_s:g} s; a restart resumes from the last "
                    "committed position",
                    position=str(position),
                    queued=len(self.producer),
                )
            await asyncio.sleep(0.002)

    async def _commit_until(self, deadline: float, position: Position) -> None:
        while True:
            try:
                await asyncio.to_thread(self._transactional.commit_transaction, 5.0)
                break
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    log.warning("kafka_commit_retry", error=err.str(), position=str(position))
                    continue
                if err.retriable():
                    # The commit request may still be on its way: not a moment to abort.
                    self._fail_transaction("commit not confirmed", may_abort=False)
                    raise SinkUnavailableError(
                        f"a Kafka transaction could not be committed within "
                        f"{self._transaction_timeout_s:g} s ({err.str()}); a restart resumes "
                        "from the last committed position",
                        position=str(position),
                    ) from None
                if err.txn_requires_abort():
                    # librdkafka asks for an abort after messages timed out: those may
                    # still land, so that abort is the next producer epoch's.
                    self._fail_transaction(
                        "the commit needs an abort", may_abort=err.code() not in _TIMEOUTS
                    )
                    raise SinkUnavailableError(
                        f"a Kafka transaction failed ({err.str()}); a restart resumes "
                        "from the last committed position",
                        position=str(position),
                    ) from None
                raise _fenced_or(err, "cannot commit a Kafka transaction") from None


def transactional_id(config: KafkaSinkConfig, pipeline: str) -> str:
    return str(config.producer.get("transactional.id", f"replicad-{pipeline}"))


def producer_settings(
    config: KafkaSinkConfig, pipeline: str, error_cb: Any = None
) -> dict[str, Any]:
    """librdkafka settings: our delivery defaults, then `sinks.kafka.producer` on top."""
    settings: dict[str, Any] = {
        "bootstrap.servers": config.bootstrap_servers,
        "client.id": f"replicad-{pipeline}",
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": config.compression,
        "queue.buffering.max.messages": config.max_in_flight,
        "queue.buffering.max.kbytes": QUEUE_KBYTES,
        "message.max.bytes": max(
            config.max_message_bytes,
            config.oversized_max_bytes if config.oversized == "route" else 0,
        )
        + 64 * 1024,  # room for key, headers and framing: our own check is on the value
    }
    if error_cb is not None:
        settings["error_cb"] = error_cb
    if config.exactly_once:
        settings["transactional.id"] = transactional_id(config, pipeline)
        settings["transaction.timeout.ms"] = 60_000
        # A committed transaction says its messages are delivered, so only failures need a
        # report: confluent-kafka then skips the Python call for each delivered message.
        settings["delivery.report.only.error"] = True
    else:
        settings["message.timeout.ms"] = 0  # never give up: an outage pauses, not drops
    for key, value in config.producer.items():
        if key in _WEAKENING and value in _WEAKENING[key]:
            log.warning("kafka_setting_weakens_delivery", setting=key, value=value)
        settings[key] = value
    settings.update(config.client_settings())  # never beside the same key in `producer`
    if config.exactly_once and "message.timeout.ms" not in config.producer:
        # librdkafka refuses a message timeout longer than the transaction timeout
        settings["message.timeout.ms"] = settings["transaction.timeout.ms"]
    return settings


def _delivery_failure(err: KafkaError, msg: Any, unit: DeliveryUnit) -> SinkError:
    """A failed delivery report: which message, after which binlog position, and why.
    (librdkafka's reports carry no headers: the unit knows the position instead.)"""
    key = msg.key()
    context: dict[str, object] = {
        "topic": msg.topic(),
        "key": None if key is None else key[:200].decode("utf-8", "replace"),
        "after_position": None if unit.after is None else str(unit.after),
    }
    if err.code() in _TOPIC_GONE:
        log.error("kafka_topic_deleted", error=err.str(), **context)
        return TopicDeletedError(
            f"a topic this pipeline writes to was deleted from the cluster ({err.str()}); "
            "it is not re-created: its consumers lost what it held. Restore it, or reset "
            "the position and re-snapshot, then start again",
            **context,
        )
    return _fenced_or(err, "Kafka did not accept a message", **context)


def _fenced_or(err: KafkaError, reason: str, **context: object) -> SinkError:
    if err.code() in _FENCED:
        return ProducerFencedError(
            "this pipeline's Kafka transactional id was fenced: another replicad instance "
            "took it over, or the coordinator aborted a transaction that outlived "
            "transaction.timeout.ms; this producer stops without writing more",
            error=err.str(),
            **context,
        )
    if err.retriable() or err.code() in _OUTAGE:
        return SinkUnavailableError(f"{reason}: {err.str()}", **context)
    if err.fatal() and err.code() not in _NOT_AUTHORIZED:
        # A fatal producer state (e.g. the idempotent producer's sequence numbers out of step
        # with the broker): this producer is finished, but a new one, after a restart from
        # the stored position, is not.
        return SinkUnavailableError(
            f"{reason}: {err.str()}; a restart resumes from the stored position", **context
        )
    return SinkError(f"{reason}: {err.str()}", **context)
