"""Lake tables in Delta Lake (`spark.lake_format: delta`), read from Kafka by Spark's own
source (docs/spark.md, "Delta Lake tables").

Beside replicad's own format (replicad/spark/lake.py), selected per config; the default is
unchanged. Each micro-batch of a table's change topic is
1. read by `spark.readStream.format("kafka")` (spark-sql-kafka-0-10) with `failOnDataLoss`
   true, so records that retention removed while the job was down fail the query instead of
   being skipped, and `read_committed`, so aborted records never reach the lake;
2. typed by replicad's own converter (replicad/spark/types.py) in a Python UDF, from the
   schema topic's versions, as `replicad-kafka` types them: the same change DataFrame;
3. reduced to the last change per key by binlog coordinates `(file, pos, row)`;
4. folded by one `MERGE INTO` (one Delta commit): a matched row is updated or deleted only by
   a change with greater coordinates, an unmatched key is inserted unless its last change is a
   delete, and a TRUNCATE in the batch deletes every row whose last change is at or before it
   (`WHEN NOT MATCHED BY SOURCE`), the batch's rows before it dropped.

The Delta table holds the source table's columns plus `_replicad_file`, `_replicad_pos`,
`_replicad_row`: the coordinates of each row's last change. A deleted key is removed, not kept
as a marker, so unlike replicad's format an older change of it that arrives later re-inserts
it until the newer changes after it arrive again. Within one partition that happens only when
a suffix is read again (at-least-once repeats, a batch applied twice), which replays the delete
as well; across partitions only changes read behind a TRUNCATE, which every partition carries:
the lake converges, but a reader can see such a key between two batches.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery
from pyspark.sql.types import StructType

from replicad.config import Config
from replicad.consumers.debezium_exact import EnvelopeToExact
from replicad.consumers.typed import SchemaUnknownError, TypedSchema
from replicad.errors import ConfigError
from replicad.published.message_values import MessageDecoder
from replicad.spark import storage
from replicad.spark.complete import Completeness, batch_end, offset_log
from replicad.spark.cut import Point, commit_metadata
from replicad.spark.delta_types import stored_struct, to_stored
from replicad.spark.jobs import Materialize
from replicad.spark.kafka_source import ReplicadKafkaSource, value_form
from replicad.spark.lake import (
    DELETED,
    FILE,
    POS,
    ROW,
    LakeError,
    _coordinates,
    _latest_per_key,
    _point,
)
from replicad.spark.types import (
    RowConvert,
    change_row,
    change_schema,
    row_converter,
    row_struct,
    table_struct,
)

log = structlog.get_logger("replicad.spark")

# The jars of scripts/spark/pom.xml a Delta job loads, by file name prefix.
DELTA_JARS = (
    "delta-spark_4.2_2.13-",
    "delta-storage-",
    "spark-sql-kafka-0-10_2.13-",
    "spark-token-provider-kafka-0-10_2.13-",
    "kafka-clients-",
    "commons-pool2-",
)
COORDINATES = (FILE, POS, ROW)
# Delta's session setting for the next commit's `userMetadata` (commitInfo), which MERGE
# (SQL or DeltaTable.merge) takes; DataFrameWriter's `userMetadata` option covers writes only.
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


def delta_jars(directory: str | None) -> list[Path]:
    """The jars a Delta job needs from `spark.lake_jars` (`bash scripts/services.sh
    spark-jars` prints the directory); a missing one is a ConfigError naming the key."""
    if not directory:
        raise ConfigError(
            "spark.lake_format delta needs spark.lake_jars: the directory `bash "
            "scripts/services.sh spark-jars` fetches Delta and spark-sql-kafka into",
            key="spark.lake_jars",
        )
    found = []
    for prefix in DELTA_JARS:
        jars = sorted(Path(directory).glob(f"{prefix}*.jar"))
        if not jars:
            raise ConfigError(
                f"no {prefix}*.jar in spark.lake_jars", key="spark.lake_jars", value=directory
            )
        found.append(jars[-1])
    return found


def session_conf(config: Config) -> dict[str, str]:
    """What a session of the `materialize` job needs for the configured lake format."""
    if config.spark.lake_format != "delta":
        return {}
    return {
        "spark.jars": ",".join(str(j) for j in delta_jars(config.spark.lake_jars)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }


# ---------------------------------------------------------------------- reading


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
            "spark.lake_format delta reads Kafka with Spark's Java client, which does not "
            "take sinks.kafka's security settings yet",
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


# ---------------------------------------------------------------------- folding


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class DeltaLakeTable:
    """One lake table as a Delta table at `path`: `apply` folds a batch of changes (the
    change DataFrame) in one MERGE."""

    def __init__(self, path: str, primary_key: Sequence[str], columns: StructType) -> None:
        if not primary_key:
            raise LakeError(
                "a lake table needs a primary key to fold changes by; the table has none",
                path=str(path),
            )
        self.path = path  # absolute, or an s3a:// URI (storage.join)
        self.key = list(primary_key)
        self.columns = columns

    @property
    def target(self) -> str:
        return f"delta.{_q(self.path)}"

    def _ensure(self, spark: SparkSession) -> None:
        """The table exists with every column of `columns` (an ALTER's new ones added: a
        separate commit, harmless since they are null until the batch writes them)."""
        stored = stored_struct(self.columns)
        if not storage.exists(spark, storage.join(self.path, "_delta_log")):
            schema = StructType([*stored.fields, *_bookkeeping().fields])
            spark.createDataFrame([], schema).write.format("delta").mode("append").save(self.path)
            return
        present = set(spark.read.format("delta").load(self.path).columns)
        missing = [f for f in stored.fields if f.name not in present]
        if missing:
            added = ", ".join(f"{_q(f.name)} {f.dataType.simpleString()}" for f in missing)
            spark.sql(f"ALTER TABLE {self.target} ADD COLUMNS ({added})")

    def _latest(self, changes: DataFrame, truncated: Any) -> DataFrame:
        """Per key its last change of the batch (after the batch's TRUNCATE, if any)."""
        rows = changes.filter(F.col("op").isin("c", "u", "r", "d"))
        if truncated is not None:
            rows = rows.filter(_coordinates("file", "pos", "row") > _point(truncated))
        deleted = F.col("op") == "d"
        image = F.when(deleted, F.col("before")).otherwise(F.col("after"))
        stored = rows.select(
            *[
                to_stored(
                    image[f.name] if f.name in self.key else F.col("after")[f.name], f.dataType
                ).alias(f.name)
                for f in self.columns.fields
            ],
            F.col("file").alias(FILE),
            F.col("pos").alias(POS),
            F.col("row").alias(ROW),
            deleted.alias(DELETED),
        )
        return _latest_per_key(stored, self.key)

    def apply(self, changes: DataFrame, through: Point | None = None) -> int | None:
        """Fold one batch; the Delta version it committed (None: nothing to do). The commit
        records the batch's lowest and highest coordinates and `through`, a position the
        table is complete up to with this batch (replicad/spark/cut.py)."""
        spark = changes.sparkSession  # foreachBatch's session: the view must live in it
        changes = changes.persist()
        try:
            coordinates = _coordinates("file", "pos", "row")
            bounds = changes.agg(
                F.max(F.when(F.col("op") == "t", coordinates)).alias("t"),
                F.min(coordinates).alias("low"),
                F.max(coordinates).alias("high"),
            ).first()
            assert bounds is not None  # (an aggregate without grouping has one row)
            truncated = None if bounds["t"] is None else tuple(bounds["t"])
            latest = self._latest(changes, truncated).persist()
            try:
                if truncated is None and latest.isEmpty():
                    return None
                self._ensure(spark)
                view = f"replicad_batch_{uuid.uuid4().hex}"
                latest.createOrReplaceTempView(view)
                # The session is the query's own (Spark clones one per streaming query), so
                # the metadata goes on this MERGE's commit only, not on other tables'.
                spark.conf.set(
                    USER_METADATA, commit_metadata(through, bounds["low"], bounds["high"])
                )
                try:
                    spark.sql(self._merge(view, truncated))
                finally:
                    spark.conf.unset(USER_METADATA)
                    spark.catalog.dropTempView(view)
            finally:
                latest.unpersist()
        finally:
            changes.unpersist()
        version = spark.sql(f"DESCRIBE HISTORY {self.target} LIMIT 1").first()
        return None if version is None else int(version["version"])

    def _merge(self, view: str, truncated: Any) -> str:
        names = [f.name for f in self.columns.fields] + list(COORDINATES)
        on = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in self.key)
        newer = _struct("s") + " > " + _struct("t")
        sets = ", ".join(f"t.{_q(n)} = s.{_q(n)}" for n in names)
        inserted = ", ".join(_q(n) for n in names)
        values = ", ".join(f"s.{_q(n)}" for n in names)
        statement = (
            f"MERGE INTO {self.target} t USING {view} s ON {on} "
            f"WHEN MATCHED AND s.{DELETED} AND {newer} THEN DELETE "
            f"WHEN MATCHED AND {newer} THEN UPDATE SET {sets} "
            f"WHEN NOT MATCHED AND NOT s.{DELETED} THEN INSERT ({inserted}) VALUES ({values})"
        )
        if truncated is not None:
            file, pos, row = truncated
            point = f"named_struct('f', {_literal(file)}, 'p', {int(pos)}L, 'r', {int(row)}L)"
            statement += f" WHEN NOT MATCHED BY SOURCE AND {_struct('t')} <= {point} THEN DELETE"
        return statement


def _struct(alias: str) -> str:
    return f"named_struct('f', {alias}.{FILE}, 'p', {alias}.{POS}, 'r', {alias}.{ROW})"


def _literal(text: str) -> str:
    return "'" + str(text).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _bookkeeping() -> StructType:
    return StructType.fromJson(
        {
            "type": "struct",
            "fields": [
                {"name": FILE, "type": "string", "nullable": True, "metadata": {}},
                {"name": POS, "type": "long", "nullable": True, "metadata": {}},
                {"name": ROW, "type": "long", "nullable": True, "metadata": {}},
            ],
        }
    )


# ---------------------------------------------------------------------- the job


class DeltaMaterialize(Materialize):
    """`materialize` with `spark.lake_format: delta`: Spark's Kafka source → `MERGE INTO`
    a Delta table per source table, at `<lake_path>/<db>/<table>`."""

    def _start(self, table: str) -> StreamingQuery:
        options = self.source.options(table)
        versions = ReplicadKafkaSource(options).versions  # the schema topic, as replicad reads it
        changes = kafka_changes(
            self.spark, options, versions, self.settings.max_offsets_per_trigger
        )
        completeness = Completeness.of(self.config, options)
        completeness.sample()  # before any batch of this query has its end offsets
        writer = (
            self._delta_sink(table, changes, versions, completeness, options["topic"])
            .option("checkpointLocation", self.checkpoint(table))
            .queryName(f"{self.name} {table}")
        )
        if self.once:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.settings.trigger_s} seconds")
        log.info(
            "lake_query_started",
            table=table,
            versions=len(versions),
            format="delta",
            key=list(versions[-1].primary_key),
        )
        return writer.start()

    def _delta_sink(
        self,
        table: str,
        changes: DataFrame,
        versions: list[TypedSchema],
        completeness: Completeness,
        topic: str,
    ) -> DataStreamWriter:
        lake = DeltaLakeTable(
            self.lake_path(table), versions[-1].primary_key, table_struct(versions)
        )
        checkpoint = self.checkpoint(table)

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
                format="delta",
                through=None if through is None else f"{through[0]}:{through[1]}",
                seconds=round(time.monotonic() - started, 3),
            )

        return changes.writeStream.foreachBatch(apply)
