"""The lake as `replicad spark verify` reads it, in either format (`spark.lake_format`):
which tables there are, each table's stored rows with their last change's coordinates, and
how far the `materialize` query has committed.

replicad's own format keeps a deleted key as a marker with its coordinates; Delta removes
it. So in Delta a key the lake lacks carries no coordinates to say when it went, and verify
settles it only when a later round confirms it (`absent_keys_settle_at_once`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from replicad.config import SparkConfig
from replicad.spark.complete import batch_end
from replicad.spark.delta_types import from_stored
from replicad.spark.lake import DELETED, FILE, MANIFEST, POS, LakeTable
from replicad.spark.maintenance import lake_tables


@dataclass(frozen=True)
class VerifiedLake:
    settings: SparkConfig

    @property
    def delta(self) -> bool:
        return self.settings.lake_format == "delta"

    @property
    def absent_keys_settle_at_once(self) -> bool:
        return not self.delta

    def path(self, table: str) -> Path:
        db, _, name = table.partition(".")
        return Path(self.settings.lake_path).resolve() / db / name

    def tables(self) -> list[str]:
        """`db.table` of every lake table, sorted."""
        if self.delta:
            paths = lake_tables(self.settings.lake_path)
        else:
            paths = [p.parent for p in Path(self.settings.lake_path).glob(f"*/*/{MANIFEST}")]
        return sorted(f"{p.parent.name}.{p.name}" for p in paths)

    def stored(
        self, spark: SparkSession, table: str, key: list[str], columns: StructType
    ) -> DataFrame:
        """The table's columns, FILE and POS of each key's last change, and DELETED."""
        if not self.delta:
            return LakeTable(spark, self.path(table), key, columns, self.settings.buckets).stored()
        rows = spark.read.format("delta").load(str(self.path(table)))
        return rows.select(
            *[from_stored(F.col(f.name), f.dataType).alias(f.name) for f in columns.fields],
            F.col(FILE),
            F.col(POS),
        ).withColumn(DELETED, F.lit(False))

    def checkpoint(self, table: str) -> Path:
        """The `materialize` query's checkpoint (jobs.TableJob.checkpoint: by job class)."""
        job = "deltamaterialize" if self.delta else "materialize"
        return Path(self.settings.checkpoint_path).resolve() / job / table

    def committed_offsets(self, table: str, topic: str) -> dict[str, int]:
        """The end offsets of the last micro-batch the query committed (`offsets/<n>` once
        `commits/<n>` exists), by partition."""
        checkpoint = self.checkpoint(table)
        batches = sorted(
            (int(p.name) for p in (checkpoint / "commits").glob("[0-9]*") if p.name.isdigit()),
            reverse=True,
        )
        for batch in batches:
            offsets = checkpoint / "offsets" / str(batch)
            if not offsets.exists():
                continue
            text = offsets.read_text()
            if self.delta:  # Spark's Kafka source: {"<topic>": {"<partition>": offset}}
                return {str(p): o for p, o in (batch_end(text, topic) or {}).items()}
            return {str(k): int(v) for k, v in orjson.loads(text.splitlines()[-1]).items()}
        return {}
