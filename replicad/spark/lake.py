"""Lake tables that equal their source table (docs/spark.md): one Parquet table per source
table holding the current row per primary key, kept up to date batch by batch.

Changes fold by their binlog coordinates `(file, pos, row)`, never by arrival: the
at-least-once repeats of a restarted replicad (the same change again, at a later offset), a
micro-batch applied twice after a crash of the job, and the order in which partitions are read
change nothing. Snapshot reads carry the coordinates of the position they are consistent with
and fold like changes. A TRUNCATE drops every row whose last change is at or before it, also
one that arrives later from a partition read behind the others.

Layout of a lake table directory:
- `v<N>/_bucket=<b>/part-*.parquet`: the rows of key bucket `b` (a hash of the key) as version
  N wrote them. Each row keeps its key's last coordinates (`_replicad_file`, `_pos`, `_row`) and
  whether that was a delete (`_replicad_deleted`: a deleted key is remembered, so an older
  change of it that arrives later cannot bring it back);
- `_manifest.json`: the version readers use: for every bucket the version directory that holds
  it, the row schema, the truncation point. A batch writes only the buckets its keys fall in
  (every bucket after a TRUNCATE or a change of the row schema), then replaces the manifest
  with one rename: a reader sees the table before or after a batch, never half of it.
Read it with `read_lake_table` (it applies the manifest, drops deleted keys and the
bookkeeping columns); plain `spark.read.parquet` of the directory would see every version.
Version directories no longer named by the current or the previous manifest are deleted (a
reader that resolved the previous one just before a switch may still be reading it).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from replicad.errors import ReplicadError

MANIFEST = "_manifest.json"
FILE, POS, ROW, DELETED, BUCKET = (
    "_replicad_file",
    "_replicad_pos",
    "_replicad_row",
    "_replicad_deleted",
    "_bucket",
)
BOOKKEEPING = (FILE, POS, ROW, DELETED)
DEFAULT_BUCKETS = 16


class LakeError(ReplicadError):
    """A lake table that cannot be built or read: a table without a key, an unreadable
    manifest."""


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
    # create of one row) the row that lives wins over the delete marker.
    order = Window.partitionBy(*key).orderBy(
        F.col(FILE).desc(), F.col(POS).desc(), F.col(ROW).desc(), F.col(DELETED).asc()
    )
    return rows.withColumn("_n", F.row_number().over(order)).filter("_n = 1").drop("_n")


class LakeTable:
    """One lake table: `apply` a DataFrame of changes (the change schema of
    replicad/spark/types.py), `read` the current rows."""

    def __init__(
        self,
        spark: SparkSession,
        path: str | os.PathLike[str],
        primary_key: Sequence[str],
        columns: StructType,
        buckets: int = DEFAULT_BUCKETS,
    ) -> None:
        if not primary_key:
            raise LakeError(
                "a lake table needs a primary key to fold changes by; the table has none",
                path=str(path),
            )
        self.spark = spark
        self.root = Path(path)
        self.key = list(primary_key)
        self.columns = columns  # the table's columns now (its newest schema version)
        self.buckets = buckets

    # ------------------------------------------------------------------ manifest

    def manifest(self) -> dict[str, Any] | None:
        path = self.root / MANIFEST
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise LakeError(f"unreadable lake manifest: {exc}", path=str(path)) from None

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        previous = self.manifest()
        temporary = self.root / f"{MANIFEST}.tmp"
        with temporary.open("w") as handle:
            json.dump(manifest, handle, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.root / MANIFEST)
        kept = {p.split("/")[0] for m in (manifest, previous) if m for p in m["buckets"].values()}
        kept.add(f"v{manifest['version']:08d}")
        for version in self.root.glob("v[0-9]*"):
            if version.name not in kept:
                shutil.rmtree(version, ignore_errors=True)

    # ------------------------------------------------------------------ reading

    def _stored(self, manifest: dict[str, Any], buckets: Sequence[str] | None) -> DataFrame | None:
        """The stored rows (with bookkeeping) of some buckets (None: all), in today's
        columns: a column the files lack is null, a retyped one is cast."""
        paths = [
            str(self.root / where)
            for bucket, where in sorted(manifest["buckets"].items())
            if buckets is None or bucket in buckets
        ]
        if not paths:
            return None
        stored = self.spark.read.option("mergeSchema", "true").parquet(*paths)
        present = set(stored.columns)
        return stored.select(
            *[
                # try_cast: an older value the newest type cannot hold is null, not an error
                (F.col(f.name) if f.name in present else F.lit(None))
                .try_cast(f.dataType)
                .alias(f.name)
                for f in self.columns.fields
            ],
            *BOOKKEEPING,
        )

    def stored(self) -> DataFrame:
        """Every key the current version holds, deleted ones too, with the bookkeeping
        columns (its last change's coordinates, whether that was a delete)."""
        manifest = self.manifest()
        if manifest is None:
            raise LakeError("no version of the lake table yet", path=str(self.root))
        stored = self._stored(manifest, None)
        if stored is None:  # every row truncated
            bookkeeping = StructType(
                [
                    StructField(FILE, StringType()),
                    StructField(POS, LongType()),
                    StructField(ROW, LongType()),
                    StructField(DELETED, BooleanType()),
                ]
            )
            return self.spark.createDataFrame(
                [], StructType(self.columns.fields + bookkeeping.fields)
            )
        return stored

    def read(self) -> DataFrame:
        """The current rows: one per key, deleted keys left out, the table's own columns."""
        return self.stored().filter(~F.col(DELETED)).drop(*BOOKKEEPING)

    # ------------------------------------------------------------------ writing

    def apply(self, changes: DataFrame) -> int:
        """Fold one batch of changes into a new version; returns its number (the current one
        when the batch holds nothing for the table)."""
        # The batch is read by three actions (truncation point, touched buckets, the write):
        # held once, not read from the source three times.
        changes = changes.persist()
        try:
            return self._apply(changes)
        finally:
            changes.unpersist()

    def _apply(self, changes: DataFrame) -> int:
        manifest = self.manifest() or {"version": 0, "buckets": {}, "truncated": None}
        schema_json = self.columns.json()
        truncation = (
            changes.filter(F.col("op") == "t")
            .agg(F.max(_coordinates("file", "pos", "row")).alias("t"))
            .first()
        )
        batch_truncated = None if truncation is None or truncation["t"] is None else truncation["t"]
        truncated = manifest.get("truncated")
        if batch_truncated is not None:
            here = [batch_truncated["f"], batch_truncated["p"], batch_truncated["r"]]
            truncated = here if truncated is None else max(truncated, here)
        rows = self._rows(changes, truncated)
        full = (
            batch_truncated is not None
            or manifest.get("schema") != schema_json
            or manifest.get("bucket_count", self.buckets) != self.buckets  # every key moves
        )
        if full:
            touched = None
        else:
            touched = sorted(str(r[BUCKET]) for r in rows.select(BUCKET).distinct().collect())
            if not touched:
                return int(manifest["version"])
        old = None if not manifest["buckets"] else self._stored(manifest, touched)
        if old is not None:
            if truncated is not None:
                old = old.filter(_coordinates(FILE, POS, ROW) > _point(truncated))
            old = old.withColumn(BUCKET, self._bucket())
            rows = rows.unionByName(old)
        merged = _latest_per_key(rows, self.key)
        # Past every version directory on disk: one left by a batch that died before its
        # manifest switch is never written into (it goes with the next switch's clean-up).
        on_disk = [int(p.name[1:]) for p in self.root.glob("v[0-9]*") if p.name[1:].isdigit()]
        version = max([int(manifest["version"]), *on_disk]) + 1
        directory = self.root / f"v{version:08d}"
        merged.write.mode("errorifexists").partitionBy(BUCKET).parquet(str(directory))
        written = {
            p.name.split("=", 1)[1]: f"{directory.name}/{p.name}"
            for p in directory.glob(f"{BUCKET}=*")
        }
        buckets = (
            {}
            if touched is None
            else {b: where for b, where in manifest["buckets"].items() if b not in touched}
        )
        buckets.update(written)
        self._write_manifest(
            {
                "version": version,
                "buckets": buckets,
                "truncated": truncated,
                "schema": schema_json,
                "key": self.key,
                "bucket_count": self.buckets,
            }
        )
        return version

    def _bucket(self) -> Column:
        return F.pmod(F.xxhash64(*[F.col(k) for k in self.key]), F.lit(self.buckets))

    def _rows(self, changes: DataFrame, truncated: list[Any] | None) -> DataFrame:
        """The batch as stored rows: per key its latest change (a delete too), after the
        truncation point."""
        rows = changes.filter(F.col("op").isin("c", "u", "r", "d"))
        if truncated is not None:
            rows = rows.filter(_coordinates("file", "pos", "row") > _point(truncated))
        deleted = F.col("op") == "d"
        image = F.when(deleted, F.col("before")).otherwise(F.col("after"))
        stored = rows.select(
            *[
                (
                    image[f.name]
                    if f.name in self.key
                    else F.when(deleted, F.lit(None)).otherwise(F.col("after")[f.name])
                )
                .try_cast(f.dataType)
                .alias(f.name)
                for f in self.columns.fields
            ],
            F.col("file").alias(FILE),
            F.col("pos").alias(POS),
            F.col("row").alias(ROW),
            deleted.alias(DELETED),
        )
        return _latest_per_key(stored, self.key).withColumn(BUCKET, self._bucket())


def read_lake_table(spark: SparkSession, path: str | os.PathLike[str]) -> DataFrame:
    """A lake table's current rows, from its manifest alone."""
    root = Path(path)
    manifest_path = root / MANIFEST
    if not manifest_path.exists():
        raise LakeError("no version of the lake table yet", path=str(root))
    manifest = json.loads(manifest_path.read_text())
    columns = StructType.fromJson(json.loads(manifest["schema"]))
    return LakeTable(spark, root, manifest["key"], columns).read()
