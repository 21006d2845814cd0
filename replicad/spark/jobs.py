"""The Spark jobs `replicad spark <job> -c CONFIG` runs (docs/spark.md).

One streaming query per source table, reading its change topic with Spark's own Kafka source
(kafka_changes.py), its offsets in a Spark checkpoint of its own:
- `materialize`: each micro-batch folded into the table's Delta lake table by one MERGE
  (lake.py). A micro-batch applied again after a crash (written, not yet committed to the
  checkpoint) folds to the same table, since the fold goes by binlog coordinates; each commit
  records the position the table is complete through (complete.py, for `spark cut`);
- `changes`: each table's change rows appended to a Delta table partitioned by commit date.
A query stopped by a schema version it was not started with (a DDL) is started again, which
re-reads the schema topic; new tables are picked up every `spark.discover_s`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from replicad.config import Config
from replicad.consumers.debezium_exact import DebeziumForm
from replicad.consumers.typed import TypedSchema
from replicad.errors import ConfigError, ReplicadError
from replicad.published.kafka_clients import shared_settings
from replicad.published.topics import TopicNames
from replicad.spark import storage
from replicad.spark.complete import Completeness, batch_end, offset_log
from replicad.spark.delta_types import stored_images
from replicad.spark.kafka_changes import kafka_changes
from replicad.spark.kafka_source import (
    ReplicadKafkaSource,
    Settings,
    TopicRange,
    messages,
    partition_bounds,
)
from replicad.spark.lake import LakeError, LakeTable, refuse_former_format
from replicad.spark.types import table_struct

log = structlog.get_logger("replicad.spark")
PROGRESS_LOG_S = 10.0  # how often each query's progress is logged


@dataclass(frozen=True)
class Source:
    """Where a pipeline's change topics are, as `replicad-kafka` options."""

    bootstrap: str
    topics: TopicNames
    schema_topic: str
    security: dict[str, str] = field(repr=False)  # may hold sinks.kafka.sasl's password
    registry_url: str | None = None  # spark.schema_registry_url: for Avro topics
    values: dict[str, str] = field(default_factory=dict)  # envelope.values and its options

    @classmethod
    def of(cls, config: Config) -> Source:
        kafka = config.sinks.kafka
        if kafka is None:
            raise ConfigError(
                "the Spark jobs read the change topics of sinks.kafka, which is not configured",
                key="sinks.kafka",
            )
        names = TopicNames.of(kafka, config.pipeline)
        if not kafka.schema_topic:
            raise ConfigError(
                "the Spark jobs type changes from the schema topic; it is switched off",
                key="sinks.kafka.schema_topic",
            )
        security = {k: str(v) for k, v in shared_settings(kafka).items()}
        return cls(
            kafka.bootstrap_servers,
            names,
            names.expand(kafka.schema_topic),
            security,
            _registry_url(config),
            _value_options(config),
        )

    def options(self, table: str) -> dict[str, str]:
        db, _, name = table.partition(".")
        topic = self.topics.table(db, name)
        return {
            "kafka.bootstrap.servers": self.bootstrap,
            **{f"kafka.{k}": v for k, v in self.security.items()},
            "table": table,
            "topic": topic,
            "schemaTopic": self.schema_topic,
            **({"schemaRegistryUrl": self.registry_url} if self.registry_url else {}),
            **self.values,
        }

    def tables(self) -> list[str]:
        """Every db.table the schema topic has a table schema for."""
        settings = Settings.of(self.options("_._"))  # (a table is required; none is read)
        consumer = settings.open()
        try:
            topic = consumer.list_topics(self.schema_topic, timeout=30).topics.get(
                self.schema_topic
            )
            if topic is None or topic.error is not None or not topic.partitions:
                log.info(
                    "schema_topic_absent",
                    topic=self.schema_topic,
                    note="nothing published yet; looked for again later",
                )
                return []
            low, high = partition_bounds(consumer, self.schema_topic, 0)
        finally:
            consumer.close()
        found = set()
        for message in messages(settings, TopicRange(self.schema_topic, 0, low, high)):
            if message.value() is not None:
                record = orjson.loads(message.value())
                if record.get("type") == "table":
                    found.add(f"{record['db']}.{record['table']}")
        return sorted(found)


def _registry_url(config: Config) -> str | None:
    """spark.schema_registry_url, else the daemon's envelope.schema_registry.url (its basic
    auth is not passed on: Spark's options are not the place for a password)."""
    daemon = config.envelope.schema_registry
    return config.spark.schema_registry_url or (None if daemon is None else daemon.url)


def _value_options(config: Config) -> dict[str, str]:
    """`replicad-kafka`'s envelopeValues and debezium.* options for the daemon's envelope."""
    envelope = config.envelope
    if envelope.values != "debezium":
        return {}
    names = DebeziumForm.__dataclass_fields__
    return {
        "envelopeValues": "debezium",
        **{f"debezium.{name}": str(getattr(envelope, name)) for name in names},
    }


class TableJob:
    """A job of one streaming query per table: every table the config's `spark.tables` regex
    takes and the schema topic knows, new ones found every `spark.discover_s`."""

    name = "job"
    # The checkpoints' directory under spark.checkpoint_path. The Delta jobs ran beside replicad's
    # former lake format under these names; that format's (`materialize/`, `changes/`) hold
    # replicad-kafka's offsets, which Spark's Kafka source cannot resume from.
    checkpoints = "job"

    def __init__(self, spark: SparkSession, config: Config, once: bool = False) -> None:
        self.spark = spark
        self.config = config
        self.settings = config.spark
        self.source = Source.of(config)
        self.pattern = re.compile(self.settings.tables)
        self.once = once
        self.queries: dict[str, StreamingQuery] = {}
        self.skipped: set[str] = set()
        self.stopping = threading.Event()
        self._reported = time.monotonic()

    def _sink(
        self, table: str, changes: DataFrame, versions: list[TypedSchema], options: dict[str, str]
    ) -> DataStreamWriter:
        raise NotImplementedError

    def _start(self, table: str) -> StreamingQuery:
        options = self.source.options(table)
        versions = ReplicadKafkaSource(options).versions  # the schema topic, as replicad reads it
        changes = kafka_changes(
            self.spark, options, versions, self.settings.max_offsets_per_trigger
        )
        writer = (
            self._sink(table, changes, versions, options)
            .option("checkpointLocation", self.checkpoint(table))
            .queryName(f"{self.name} {table}")
        )
        if self.once:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.settings.trigger_s} seconds")
        log.info(
            f"{self.name}_query_started",
            table=table,
            versions=len(versions),
            key=list(versions[-1].primary_key),
        )
        return writer.start()

    def checkpoint(self, table: str) -> str:
        return storage.join(self.settings.checkpoint_path, self.checkpoints, table)

    def _discover(self) -> None:
        for table in self.source.tables():
            if table in self.queries or table in self.skipped or not self.pattern.fullmatch(table):
                continue
            try:
                self.queries[table] = self._start(table)
            except LakeError as exc:  # one table the job cannot take stops none of the others
                self.skipped.add(table)
                log.warning(f"{self.name}_table_skipped", table=table, reason=str(exc))

    def run(self, on_round: Callable[[], None] | None = None) -> None:
        """Until stopped (or, once: until every table's available changes are applied)."""
        self._discover()
        discovered = time.monotonic()
        while not self.stopping.is_set():
            # Taken before the checks: a query that ends (fails) after its check below is
            # still active here, so its error is looked at next round, never skipped.
            finished = self.once and not any(q.isActive for q in self.queries.values())
            for table, query in list(self.queries.items()):
                if query.isActive:
                    continue
                error = query.exception()
                if error is None:
                    if self.once:
                        continue
                    raise RuntimeError(f"the query of {table} stopped")  # not asked to
                if "SchemaUnknownError" in str(error) or "schema version" in str(error):
                    log.info(f"{self.name}_query_restarted", table=table, reason="schema changed")
                    self.queries[table] = self._start(table)
                    finished = False
                    continue
                raise _failure(table, error)
            if finished:
                return
            if on_round is not None:
                on_round()
            if time.monotonic() - self._reported >= PROGRESS_LOG_S:
                self._reported = time.monotonic()
                for table, query in self.queries.items():
                    progress: dict[str, Any] = query.lastProgress or {}
                    log.info(
                        f"{self.name}_query_progress",
                        table=table,
                        status=query.status.get("message"),
                        batch=progress.get("batchId"),
                        rows=progress.get("numInputRows"),
                    )
            if not self.once and time.monotonic() - discovered >= self.settings.discover_s:
                self._discover()
                discovered = time.monotonic()
            self.stopping.wait(0.5)

    def stop(self) -> None:
        self.stopping.set()
        for query in self.queries.values():
            if query.isActive:
                query.stop()


class Materialize(TableJob):
    """`materialize`: each table streamed into its Delta lake table at
    `<lake_path>/<db>/<table>` (lake.py)."""

    name = "lake"
    checkpoints = "deltamaterialize"

    def lake_path(self, table: str) -> str:
        db, _, name = table.partition(".")
        return storage.join(self.settings.lake_path, db, name)

    def _start(self, table: str) -> StreamingQuery:
        refuse_former_format(self.spark, self.lake_path(table))
        return super()._start(table)

    def _sink(
        self, table: str, changes: DataFrame, versions: list[TypedSchema], options: dict[str, str]
    ) -> DataStreamWriter:
        lake = LakeTable(self.lake_path(table), versions[-1].primary_key, table_struct(versions))
        checkpoint = self.checkpoint(table)
        topic = options["topic"]
        completeness = Completeness.of(self.config, options)
        completeness.sample()  # before any batch of this query has its end offsets

        def apply(batch: DataFrame, batch_id: int) -> None:
            started = time.monotonic()
            completeness.sample()  # the newest sample this batch can reach: its end is fixed
            offsets = storage.read_text(batch.sparkSession, offset_log(checkpoint, batch_id))
            through = completeness.through(batch_end(offsets, topic))
            version = lake.apply(batch, through)
            log.info(
                "lake_batch_applied",
                table=table,
                batch=batch_id,
                version=version,
                through=None if through is None else f"{through[0]}:{through[1]}",
                seconds=round(time.monotonic() - started, 3),
            )

        return changes.writeStream.foreachBatch(apply)


class Changes(TableJob):
    """`changes`: each table's change rows appended to a Delta table at
    `<changes_path>/db=<db>/table=<table>`, partitioned by the commit date.

    Delta's streaming sink records each micro-batch's id in the table's log (the query's id
    and batch id as a transaction), so a batch run again after a crash is not appended twice,
    and with the checkpoint each topic record lands once. The columns a new schema version
    adds are merged into the table's schema (`mergeSchema`); older rows read them as null.
    TIME values in the row images are stored as microseconds (delta_types.py)."""

    name = "changes"
    checkpoints = "deltachanges"

    def changes_path(self, table: str) -> str:
        db, _, name = table.partition(".")
        return storage.join(self.settings.changes_path, f"db={db}", f"table={name}")

    def _sink(
        self, table: str, changes: DataFrame, versions: list[TypedSchema], options: dict[str, str]
    ) -> DataStreamWriter:
        dated = stored_images(changes).withColumn("date", F.to_date("commit_ts"))
        return (
            dated.writeStream.format("delta")
            .outputMode("append")
            .option("path", self.changes_path(table))
            .option("mergeSchema", "true")
            .partitionBy("date")
        )


JOBS: dict[str, type[TableJob]] = {"materialize": Materialize, "changes": Changes}


class SparkJobError(ReplicadError):
    """A Spark job that failed: names the table and Spark's error."""


def _failure(table: str, error: Any) -> Exception:
    text = error.getMessage() if isinstance(error, StreamingQueryException) else str(error)
    lines = text.splitlines() or [text]
    # An error of replicad's own source is the last line of a Python traceback that Spark
    # puts after its own first line ("... Failed when Python streaming data source perform
    # latestOffset: Traceback"): that line names the topic and partition, the first does not.
    raised = [line for line in lines if line.startswith("replicad.") and "Error: " in line]
    reason = raised[-1] if raised else lines[0]
    return SparkJobError(f"the lake query failed: {reason[:2000]}", table=table)
