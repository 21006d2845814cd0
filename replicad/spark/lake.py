"""Lake tables (docs/spark.md, "Lake tables"): one Delta Lake table per source table holding
the current row per primary key, readable by any Delta engine (Spark, delta-rs, DuckDB).

A batch of changes (the change DataFrame, replicad/spark/types.py) is
1. reduced to the last change per key by binlog coordinates `(file, pos, row)`, never by
   arrival: the at-least-once repeats of a restarted replicad (the same change again, at a
   later offset), a micro-batch applied twice after a crash of the job and the order in which
   partitions are read change nothing; snapshot reads carry the coordinates of the position
   they are consistent with and fold like changes;
2. folded by one `MERGE INTO` (one Delta commit, so a reader sees the table before or after a
   batch, never half of it): a matched row is updated or deleted only by a change with greater
   coordinates, an unmatched key is inserted unless its last change is a delete, and a
   TRUNCATE in the batch deletes every row whose last change is at or before it
   (`WHEN NOT MATCHED BY SOURCE`), the batch's rows before it dropped.

The table holds the source table's columns (TIME as microseconds: delta_types.py) plus
`_replicad_file`, `_replicad_pos`, `_replicad_row`: the coordinates of each row's last change.
A deleted key is removed, not kept as a marker, so an older change of it that arrives later
inserts it again until the newer changes after it arrive too. Within one partition that
happens only when a suffix is read again (at-least-once repeats, a batch applied twice), which
replays the delete as well; across partitions only for changes read behind a TRUNCATE, which
every partition carries: the lake converges, but a reader can see such a key between batches.

replicad's former format (Parquet bucket directories switched by a `_manifest.json`) is not
read: a lake table that has one is refused with the way to rebuild it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import structlog
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from replicad.errors import ConfigError, ReplicadError
from replicad.spark import storage
from replicad.spark.cut import Point, commit_metadata
from replicad.spark.delta_types import stored_struct, to_stored

FILE, POS, ROW, DELETED = ("_replicad_file", "_replicad_pos", "_replicad_row", "_replicad_deleted")
COORDINATES = (FILE, POS, ROW)
# Delta's session setting for the next commit's `userMetadata` (commitInfo), which MERGE
# (SQL or DeltaTable.merge) takes; DataFrameWriter's `userMetadata` option covers writes only.
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
FORMER_MANIFEST = "_manifest.json"  # what a lake table of replicad's former format has

log = structlog.get_logger("replicad.spark")


class LakeError(ReplicadError):
    """A lake table that cannot be built: a source table without a primary key."""


class FormerLakeFormatError(ConfigError):
    """A lake path that holds a table of replicad's former lake format."""


def refuse_former_format(spark: SparkSession, path: str) -> None:
    """A ConfigError (exit 78) when `path` holds a table of replicad's former format: Delta
    would write its log beside the old files and the lake would start empty."""
    if storage.exists(spark, storage.join(path, FORMER_MANIFEST)):
        raise FormerLakeFormatError(
            "this lake table is in replicad's former lake format, which is not read any more: "
            "rebuild it as a Delta table (docs/spark.md, \"Migrating from replicad's former "
            'lake format")',
            key="spark.lake_path",
            path=path,
        )


def _coordinates(file: str, pos: str, row: str) -> Column:
    return F.struct(F.col(file).alias("f"), F.col(pos).alias("p"), F.col(row).alias("r"))


def _point(coordinates: Sequence[Any]) -> Column:
    """Literal coordinates, typed and named as `_coordinates` builds them."""
    file, pos, row = coordinates
    return F.struct(
        F.lit(file).cast("string").alias("f"),
        F.lit(pos).cast("bigint").alias("p"),
        F.lit(row).cast("bigint").alias("r"),
    )


def _latest_per_key(rows: DataFrame, key: Sequence[str]) -> DataFrame:
    # At equal coordinates (a key-column change under filters.key_columns is a delete and a
    # create of one row) the row that lives wins over the delete.
    order = Window.partitionBy(*key).orderBy(
        F.col(FILE).desc(), F.col(POS).desc(), F.col(ROW).desc(), F.col(DELETED).asc()
    )
    return rows.withColumn("_n", F.row_number().over(order)).filter("_n = 1").drop("_n")


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class LakeTable:
    """One lake table, a Delta table at `path`: `apply` folds a batch of changes (the change
    DataFrame) in one MERGE."""

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
        """The table exists with the columns of `columns`: an ALTER's new columns are added
        (a commit of its own, harmless since they are null until a batch writes them); a
        dropped or retyped column rewrites the table (`_rewrite`)."""
        stored = stored_struct(self.columns)
        if not storage.exists(spark, storage.join(self.path, "_delta_log")):
            schema = StructType([*stored.fields, *_bookkeeping().fields])
            spark.createDataFrame([], schema).write.format("delta").mode("append").save(self.path)
            return
        present = {
            f.name: f.dataType
            for f in spark.read.format("delta").load(self.path).schema.fields
            if f.name not in COORDINATES
        }
        wanted = {f.name: f.dataType for f in stored.fields}
        if any(wanted.get(name) != kind for name, kind in present.items()):
            self._rewrite(spark, stored, sorted(set(present) - set(wanted)))
            return
        missing = [f for f in stored.fields if f.name not in present]
        if missing:
            added = ", ".join(f"{_q(f.name)} {f.dataType.simpleString()}" for f in missing)
            spark.sql(f"ALTER TABLE {self.target} ADD COLUMNS ({added})")

    def _rewrite(self, spark: SparkSession, stored: StructType, dropped: list[str]) -> None:
        """The table rewritten with the columns of `stored` in one commit (a dropped column
        gone, a retyped one cast: null where its value does not fit the new type, as the
        readers type such a value; a new one null), the coordinates kept. Delta's own type
        widening covers a few widenings only; a DDL is rare enough to pay for a rewrite."""
        current = spark.read.format("delta").load(self.path)
        have = set(current.columns)
        columns = [
            (
                F.col(_q(f.name)).try_cast(f.dataType)
                if f.name in have
                else F.lit(None).cast(f.dataType)
            ).alias(f.name)
            for f in stored.fields
        ]
        rewritten = current.select(*columns, *COORDINATES)
        log.info("lake_table_rewritten", path=self.path, dropped=dropped, reason="columns changed")
        rewritten.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
            self.path
        )

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
