"""`replicad-kafka`: a table's change topic as a typed change DataFrame, batch and streaming,
through Spark's Python data source API over confluent-kafka (docs/spark.md).

The jobs read with Spark's own Kafka source (kafka_changes.py); this one stays for what it
adds: it needs nothing beyond `pip install replicad[spark]` (no JVM jars), for reading the
topics typed from a notebook or a batch job, and its schema-topic reader gives the jobs the
versions they type records with (`ReplicadKafkaSource(options).versions`). The row struct
of `before` and `after` is built from the schema topic when the query starts
(replicad/spark/types.py); a message naming a schema version the struct was not built from
(an ALTER after the start) stops the read with an error that says so: start the query again
and the struct includes it.

Options (the Kafka ones named as Spark's Kafka source names them):
- `kafka.bootstrap.servers` (required), other `kafka.*` options go to the consumer;
- `table` (required): `db.table`;
- `prefix`: the pipeline's `sinks.kafka.prefix`, for the default topic names;
- `topic` (default `{prefix}.{db}.{table}`), `schemaTopic` (default `{prefix}.schema`);
- `startingOffsets`: `earliest` (default) or `latest`; streaming only: `maxOffsetsPerTrigger`;
- `schemaRegistryUrl`: the registry of an Avro topic (`envelope.format: avro`); JSON topics
  need none;
- `envelopeValues`: `exact` (default) or `debezium` (the daemon's `envelope.values`; Avro
  topics are `debezium`), with `debezium.<option>` for each of `envelope`'s Debezium options
  the daemon was given (`debezium.time_precision_mode`, ...): values are read back into the
  exact form the types expect (consumers/debezium_exact.py).
Offsets of a streaming query are kept in Spark's checkpoint, not in Kafka.

Reads are read_committed: a partition ends at its last stable offset (before the first record
of a transaction still open), and aborted records are never seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from replicad.consumers.debezium_exact import DebeziumForm, EnvelopeToExact
from replicad.consumers.typed import SchemaUnknownError, TypedSchema
from replicad.errors import ReplicadError
from replicad.published.kafka_clients import kafka_client
from replicad.published.message_values import MessageDecoder
from replicad.published.topics import DEFAULT_SCHEMA_TOPIC, DEFAULT_TABLE_TOPIC, TopicNames
from replicad.spark.types import change_row, change_schema, row_converter, row_struct

POLL_S = 1.0
IDLE_POLLS = 30  # a partition that yields nothing for this many polls while short of its end
# The end of a range is a last stable offset, and only read_committed consumers are told it
# (and skip aborted records): with read_uncommitted a range could end inside an open
# transaction and yield records that are aborted later.
ISOLATION = "read_committed"


class SparkSourceError(ReplicadError):
    """A change topic that cannot be read as asked: a missing option, an unknown table or
    topic, a message of an unknown schema version, a broker that does not answer."""


class OffsetPastEndError(SparkSourceError):
    """A streaming query's checkpoint holds an offset past its partition's end, or a partition
    the topic no longer has: the topic was deleted and created again, or its log truncated.
    Read on, the query would wait for offsets that may never come, or skip the new records."""


@dataclass(frozen=True)
class TopicRange(InputPartition):
    topic: str
    partition: int
    start: int  # first offset to read
    end: int  # offset after the last one to read


@dataclass(frozen=True)
class Settings:
    consumer: dict[str, str]
    db: str
    table: str
    topic: str
    schema_topic: str
    starting: str
    max_per_trigger: int | None
    registry_url: str | None = None
    form: DebeziumForm | None = None  # None: the exact value mode

    @classmethod
    def of(cls, given: dict[str, str]) -> Settings:
        options = {k.lower(): v for k, v in given.items()}  # Spark's options ignore case
        bootstrap = options.get("kafka.bootstrap.servers")
        table = options.get("table")
        if not bootstrap or not table or "." not in table:
            raise SparkSourceError(
                "replicad-kafka needs the options kafka.bootstrap.servers and table (db.table)",
                options=sorted(options),
            )
        db, _, name = table.partition(".")
        prefix = options.get("prefix")
        defaults = None if prefix is None else TopicNames(prefix, "", DEFAULT_TABLE_TOPIC)
        topic = options.get("topic") or (defaults and defaults.table(db, name))
        schema_topic = options.get("schematopic") or (
            defaults and defaults.expand(DEFAULT_SCHEMA_TOPIC)
        )
        if not topic or not schema_topic:
            raise SparkSourceError("replicad-kafka needs prefix, or topic and schemaTopic")
        starting = options.get("startingoffsets", "earliest")
        if starting not in ("earliest", "latest"):
            raise SparkSourceError("startingOffsets is earliest or latest", value=starting)
        limit = options.get("maxoffsetspertrigger")
        consumer = {
            key.removeprefix("kafka."): value
            for key, value in options.items()
            if key.startswith("kafka.")
        }
        isolation = consumer.setdefault("isolation.level", ISOLATION)
        if isolation != ISOLATION:
            raise SparkSourceError(
                "replicad-kafka reads read_committed only: a range's end is the last stable "
                "offset, and aborted records must not reach the lake",
                option="kafka.isolation.level",
                value=isolation,
            )
        return cls(
            consumer,
            db,
            name,
            topic,
            schema_topic,
            starting,
            int(limit) if limit else None,
            options.get("schemaregistryurl") or None,
            value_form(options),
        )

    def decoder(self) -> MessageDecoder:
        registry = {"url": self.registry_url} if self.registry_url else None
        return MessageDecoder(registry, "spark.schema_registry_url")

    def open(self) -> Consumer:
        return kafka_client(
            Consumer,
            {
                **self.consumer,
                "group.id": "replicad-spark",  # never committed: offsets live in Spark
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            },
        )


def value_form(options: dict[str, str]) -> DebeziumForm | None:
    """The Debezium options of `envelopeValues: debezium` (None for exact), from options
    whose names are lower case."""
    values = options.get("envelopevalues", "exact")
    if values == "exact":
        return None
    if values != "debezium":
        raise SparkSourceError("envelopeValues is exact or debezium", value=values)
    fields = DebeziumForm.__dataclass_fields__
    given = {
        k.removeprefix("debezium."): v for k, v in options.items() if k.startswith("debezium.")
    }
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise SparkSourceError("unknown Debezium options", options=unknown)
    return DebeziumForm(**given)


def messages(settings: Settings, part: TopicRange) -> Iterator[Any]:
    """The messages of one range, in offset order (transaction markers and aborted records
    leave gaps: the range ends at the consumer's position, not at a message)."""
    if part.start >= part.end:
        return
    consumer = settings.open()
    try:
        tp = TopicPartition(part.topic, part.partition, part.start)
        consumer.assign([tp])
        idle = 0
        while True:
            message = consumer.poll(POLL_S)
            error = None if message is None else message.error()
            if message is None or (error is not None and error.code() == KafkaError._PARTITION_EOF):
                # Markers and aborted records have no message: the position passes them.
                position = consumer.position([tp])[0].offset
                if position >= part.end:
                    return
                idle += 1
                if idle > IDLE_POLLS:
                    raise SparkSourceError(
                        "the broker stopped serving the range",
                        topic=part.topic,
                        partition=part.partition,
                        position=position,
                        end=part.end,
                    )
                continue
            if error is not None:
                raise SparkSourceError(
                    f"reading the change topic failed: {error}",
                    topic=part.topic,
                    partition=part.partition,
                )
            idle = 0
            if _offset(message) >= part.end:
                return
            yield message
            if _offset(message) + 1 >= part.end:
                return
    finally:
        consumer.close()


def _offset(message: Message) -> int:
    offset = message.offset()
    assert offset is not None  # a fetched message, or a partition-EOF event, has one
    return offset


def partition_bounds(consumer: Consumer, topic: str, partition: int) -> tuple[int, int]:
    """The first offset and the end of a partition, as the broker reports them to a
    read_committed consumer: the end is the last stable offset (the high watermark, or the
    first offset of the oldest transaction still open)."""
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    except KafkaException as exc:
        raise SparkSourceError(
            f"the broker did not tell the partition's offsets: {exc.args[0]}",
            topic=topic,
            partition=partition,
        ) from None


def read_schema_topic(settings: Settings) -> list[TypedSchema]:
    """Every version of the table in the schema topic, oldest first: ordered by the binlog
    coordinates of the first change that named each (a restart writes a record again, and
    compaction keeps only the last copy, so the topic's own order is not the schema's)."""
    consumer = settings.open()
    try:
        metadata = consumer.list_topics(settings.schema_topic, timeout=30)
        topic = metadata.topics.get(settings.schema_topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise SparkSourceError("no such schema topic", topic=settings.schema_topic)
        low, high = partition_bounds(consumer, settings.schema_topic, 0)
    finally:
        consumer.close()
    records: dict[str, dict[str, Any]] = {}
    for message in messages(settings, TopicRange(settings.schema_topic, 0, low, high)):
        if message.value() is None:
            continue
        record = orjson.loads(message.value())
        if record.get("type") == "table" and (record.get("db"), record.get("table")) == (
            settings.db,
            settings.table,
        ):
            known = records.get(record["version"])
            if known is None or _first_named(record) < _first_named(known):
                records[record["version"]] = record
    return [TypedSchema.from_record(r) for r in sorted(records.values(), key=_first_named)]


def _first_named(record: dict[str, Any]) -> tuple[str, int, int]:
    source = record.get("source") or {}
    return (str(source.get("file") or ""), int(source.get("pos") or 0), int(source.get("row") or 0))


def topic_ranges(settings: Settings, start: dict[str, int] | None) -> list[TopicRange]:
    """Every partition of the change topic from `start` (None: the starting offsets) to its
    end (the last stable offset)."""
    consumer = settings.open()
    try:
        metadata = consumer.list_topics(settings.topic, timeout=30)
        topic = metadata.topics.get(settings.topic)
        if topic is None or topic.error is not None:
            raise SparkSourceError("no such change topic", topic=settings.topic)
        ranges = []
        for partition in sorted(topic.partitions):
            low, high = partition_bounds(consumer, settings.topic, partition)
            if start is not None and str(partition) in start:
                first = start[str(partition)]
            else:
                first = high if settings.starting == "latest" and start is None else low
            ranges.append(TopicRange(settings.topic, partition, first, high))
        return ranges
    finally:
        consumer.close()


def check_within(topic: str, start: dict[str, int], ranges: list[TopicRange]) -> None:
    """Raises OffsetPastEndError for an offset of `start` (a checkpoint) past its partition's
    end, or of a partition the topic no longer has. An end only grows while the topic lives, so
    either means that the checkpoint's records are gone; reading on would wait silently for
    offsets that may never come, or skip the records of the new topic below them."""
    ends = {str(r.partition): r.end for r in ranges}
    for partition, offset in sorted(start.items(), key=lambda item: int(item[0])):
        end = ends.get(partition)
        if end is None or offset > end:
            raise OffsetPastEndError(
                "the query's checkpoint is past the end of the topic's partition (was the "
                "topic deleted and created again?): start the query with a new checkpoint",
                topic=topic,
                partition=int(partition),
                checkpoint_offset=offset,
                end="no such partition" if end is None else end,
            )


class _Rows:
    """Turns one range's messages into change rows, typed by the struct built at the start."""

    def __init__(self, settings: Settings, versions: list[TypedSchema], struct: StructType):
        self.settings = settings
        self.known = {v.version for v in versions}
        self.struct = struct
        self.to_exact = None if settings.form is None else EnvelopeToExact(versions, settings.form)

    def read(self, part: TopicRange) -> Iterator[tuple]:
        convert = row_converter(self.struct)
        decoder = self.settings.decoder()
        for message in messages(self.settings, part):
            value = message.value()
            if value is None:
                continue  # a tombstone: the delete before it is the change
            offset = _offset(message)
            envelope = decoder.value(value, part.topic, part.partition, offset)
            source = envelope["source"]
            if (source.get("db"), source.get("table")) != (self.settings.db, self.settings.table):
                continue  # a topic template shared by tables ({prefix}.{db}): not this one
            version = source.get("schema_version")
            if envelope["op"] != "t" and version not in self.known:
                raise SchemaUnknownError(
                    "a change names a schema version this query was not started with (a "
                    "DDL after the start, or a schema topic read short): start it again",
                    topic=part.topic,
                    partition=part.partition,
                    offset=offset,
                    version=version,
                )
            if self.to_exact is not None:
                envelope = self.to_exact(envelope)
            key = message.key()
            yield change_row(
                envelope,
                None if key is None else decoder.key_text(key, part.topic, part.partition, offset),
                convert,
                part.topic,
                part.partition,
                offset,
            )


class ReplicadKafkaSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "replicad-kafka"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.settings = Settings.of(dict(options))
        self.versions = read_schema_topic(self.settings)
        if not self.versions:
            raise SparkSourceError(
                "the schema topic holds no version of the table (no change of it published "
                "yet, or another prefix)",
                table=f"{self.settings.db}.{self.settings.table}",
                topic=self.settings.schema_topic,
            )

    def schema(self) -> StructType:
        return change_schema(row_struct(self.versions))

    @property
    def latest(self) -> TypedSchema:
        """The table as its newest version has it: the lake table's columns and key."""
        return self.versions[-1]

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader(self.settings, self.versions, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(self.settings, self.versions, schema)


def _row_struct(schema: StructType) -> StructType:
    after = schema["after"].dataType
    assert isinstance(after, StructType)
    return after


class _BatchReader(DataSourceReader):
    def __init__(self, settings: Settings, versions: list[TypedSchema], schema: StructType):
        self.rows = _Rows(settings, versions, _row_struct(schema))
        self.settings = settings

    def partitions(self) -> list[TopicRange]:
        return [r for r in topic_ranges(self.settings, None) if r.end > r.start] or [
            TopicRange(self.settings.topic, 0, 0, 0)
        ]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, TopicRange)
        return self.rows.read(partition)


class _StreamReader(DataSourceStreamReader):
    def __init__(self, settings: Settings, versions: list[TypedSchema], schema: StructType):
        self.rows = _Rows(settings, versions, _row_struct(schema))
        self.settings = settings

    def initialOffset(self) -> dict:
        return {str(r.partition): r.start for r in topic_ranges(self.settings, None)}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.settings.max_per_trigger:
            return ReadMaxRows(self.settings.max_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        ranges = topic_ranges(self.settings, start)
        check_within(self.settings.topic, start, ranges)
        ends = {str(r.partition): r.end for r in ranges}
        if isinstance(limit, ReadMaxRows):
            # Share the budget over the partitions in turn, so none starves.
            budget = limit.max_rows
            firsts = {str(r.partition): r.start for r in ranges}
            capped = dict(firsts)
            while budget > 0:
                moved = False
                for partition, end in ends.items():
                    if budget and capped[partition] < end:
                        step = max(1, min(end - capped[partition], budget // len(ends)))
                        capped[partition] += step
                        budget -= step
                        moved = True
                if not moved:
                    break
            ends = capped
        return ends

    def partitions(self, start: dict, end: dict) -> list[TopicRange]:
        return [
            TopicRange(self.settings.topic, int(p), int(start.get(p, 0)), int(last))
            for p, last in sorted(end.items(), key=lambda item: int(item[0]))
            if int(last) > int(start.get(p, 0))
        ]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, TopicRange)
        return self.rows.read(partition)

    def commit(self, end: dict) -> None:
        pass  # the offsets are in Spark's checkpoint
