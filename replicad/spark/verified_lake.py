"""The lake as `replicad spark verify` reads it: which tables there are, each table's stored
rows with their last change's coordinates, and how far the `materialize` query has committed.

A MERGE removes a deleted key, so a key the lake lacks carries no coordinates to say when it
went: verify settles such a key only when a later round confirms it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from replicad.config import SparkConfig
from replicad.spark.complete import batch_end
from replicad.spark.delta_types import from_stored
from replicad.spark.jobs import Materialize
from replicad.spark.lake import FILE, POS
from replicad.spark.maintenance import lake_tables


@dataclass(frozen=True)
class VerifiedLake:
    settings: SparkConfig

    def path(self, table: str) -> Path:
        db, _, name = table.partition(".")
        return Path(self.settings.lake_path).resolve() / db / name

    def tables(self) -> list[str]:
        """`db.table` of every lake table, sorted."""
        paths = lake_tables(self.settings.lake_path)
        return sorted(f"{p.parent.name}.{p.name}" for p in paths)

    def stored(self, spark: SparkSession, table: str, columns: StructType) -> DataFrame:
        """The table's columns and FILE and POS of each key's last change."""
        rows = spark.read.format("delta").load(str(self.path(table)))
        return rows.select(
            *[from_stored(F.col(f.name), f.dataType).alias(f.name) for f in columns.fields],
            F.col(FILE),
            F.col(POS),
        )

    def checkpoint(self, table: str) -> Path:
        """The `materialize` query's checkpoint (jobs.TableJob.checkpoint)."""
        return Path(self.settings.checkpoint_path).resolve() / Materialize.checkpoints / table

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
            if offsets.exists():  # Spark's Kafka source: {"<topic>": {"<partition>": offset}}
                return {str(p): o for p, o in (batch_end(offsets.read_text(), topic) or {}).items()}
        return {}
