"""A table's change topic as the change DataFrame (docs/spark.md), streamed by Spark's own Kafka
source (spark-sql-kafka-0-10), which the `materialize` and `changes` jobs read with:
- `failOnDataLoss` true: records that retention removed while the job was down fail the query
  instead of being skipped;
- `read_committed`: aborted records of an exactly-once replicad never reach the lake;
- each record typed by replicad's own converter (replicad/spark/types.py) in a Python UDF,
  from the schema topic's versions, as `replicad-kafka` types them: the same change DataFrame.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from replicad.consumers.debezium_exact import EnvelopeToExact
from replicad.consumers.typed import SchemaUnknownError, TypedSchema
from replicad.errors import ConfigError
from replicad.published.message_values import MessageDecoder
from replicad.spark.kafka_source import value_form
from replicad.spark.types import RowConvert, change_row, change_schema, row_converter, row_struct


def kafka_changes(
    spark: SparkSession,
    options: dict[str, str],
    versions: list[TypedSchema],
    max_per_trigger: int | None,
) -> DataFrame:
    """A table's change topic as the change DataFrame (docs/spark.md), streamed by Spark's
    Kafka source. `options` are a `Source`'s for the table (replicad-kafka's names)."""
    security = sorted(
        k for k in options if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
    )
    if security:
        # librdkafka's names and files (sasl.mechanisms, ssl.ca.location) are not the Java
        # client's (sasl.mechanism + sasl.jaas.config, trust stores): not mapped yet.
        raise ConfigError(
            "the Spark jobs read Kafka with Spark's Java client, which does not take "
            "sinks.kafka's security settings yet",
            key="sinks.kafka.producer",
            settings=security,
        )
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", options["kafka.bootstrap.servers"])
        .option("subscribe", options["topic"])
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .option("kafka.isolation.level", "read_committed")
        # A topic partition is one task by default, and the typing below is Python, record
        # by record: split each batch's offset ranges so that every core types a share.
        .option("minPartitions", str(spark.sparkContext.defaultParallelism))
    )
    if max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_per_trigger))
    schema = change_schema(row_struct(versions))
    db, _, table = options["table"].partition(".")
    # A plain Python UDF, one record at a time: mapInArrow would hand over whole Arrow
    # batches, but PySpark 4.2 refuses it without pandas, which replicad does not install.
    url = options.get("schemaRegistryUrl")
    decoder = MessageDecoder({"url": url} if url else None, "spark.schema_registry_url")
    form = value_form({k.lower(): v for k, v in options.items()})
    to_exact = None if form is None else EnvelopeToExact(versions, form)
    typer = _Typer(schema, db, table, {v.version for v in versions}, decoder, to_exact)
    typed = F.udf(typer, schema)
    raw = reader.load()
    change = typed("key", "value", "topic", "partition", "offset").alias("change")
    return raw.select(change).filter(F.col("change").isNotNull()).select("change.*")


class _Typer:
    """One Kafka record to a change row (None: a tombstone or another table's record), on
    the Python workers, as `replicad-kafka` types it (replicad/spark/kafka_source.py)."""

    def __init__(
        self,
        schema: StructType,
        db: str,
        table: str,
        known: set[str],
        decoder: MessageDecoder,
        to_exact: EnvelopeToExact | None,
    ) -> None:
        self.schema = schema
        self.db = db
        self.table = table
        self.known = known
        self.decoder = decoder
        self.to_exact = to_exact
        self._convert: RowConvert | None = None

    def __call__(
        self, key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int
    ) -> tuple | None:
        if value is None:
            return None  # a tombstone: the delete before it is the change
        envelope = self.decoder.value(value, topic, partition, offset)
        source = envelope["source"]
        if (source.get("db"), source.get("table")) != (self.db, self.table):
            return None  # a topic template shared by tables
        version = source.get("schema_version")
        if envelope["op"] != "t" and version not in self.known:
            raise SchemaUnknownError(
                "a change names a schema version this query was not started with (a DDL "
                "after the start): start it again",
                topic=topic,
                partition=partition,
                offset=offset,
                version=version,
            )
        if self.to_exact is not None:
            envelope = self.to_exact(envelope)
        if self._convert is None:  # built on the worker, once per deserialized copy
            after = self.schema["after"].dataType
            assert isinstance(after, StructType)
            self._convert = row_converter(after)
        return change_row(
            envelope,
            None if key is None else self.decoder.key_text(key, topic, partition, offset),
            self._convert,
            topic,
            partition,
            offset,
        )
