"""Lake tables that equal their source table: the fold of a change DataFrame to the current
row per primary key, written as a new Parquet version and switched to atomically
(docs/spark.md).

The fold orders changes by their binlog coordinates `(file, pos, row)`, never by arrival, so
the at-least-once repeats of a restarted replicad (the same change again, with the same
coordinates, at a later offset) and the order in which partitions are read change nothing.
Snapshot reads carry the coordinates of the position they are consistent with and fold like
changes. A TRUNCATE drops every change at or before its coordinates.

A version is a directory `v<NNNNNNNN>` of Parquet files; `_current` names the one readers use
and is replaced with one rename once the version is complete, so a reader sees the table
before or after a batch, never half of it. The previous version is kept (a reader that resolved
it just before the switch may still be reading); older ones are deleted.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from replicad.errors import ReplicadError

CURRENT = "_current"
KEEP_VERSIONS = 2


class LakeError(ReplicadError):
    """A lake table that cannot be built or read: a table without a key, an unreadable
    version pointer."""


def current_rows(
    changes: DataFrame, primary_key: Sequence[str], columns: Sequence[str] | None = None
) -> DataFrame:
    """The table the changes fold to: per key, the row of its latest change unless that is a
    delete; nothing at or before the latest TRUNCATE. `columns`: the table's columns now (its
    newest schema version; None: every column any version had)."""
    if not primary_key:
        raise LakeError("a lake table needs a primary key to fold changes by (or key_columns)")
    coordinates = F.struct("file", "pos", "row")
    truncated = changes.filter(F.col("op") == "t").agg(F.max(coordinates).alias("_truncated"))
    rows = (
        changes.filter(F.col("op").isin("c", "u", "r", "d"))
        .crossJoin(truncated)
        .filter(F.col("_truncated").isNull() | (coordinates > F.col("_truncated")))
    )
    image = F.when(F.col("op") == "d", F.col("before")).otherwise(F.col("after"))
    keyed = rows.withColumn("_key", F.struct(*[image[k].alias(k) for k in primary_key]))
    latest = Window.partitionBy("_key").orderBy(
        F.col("file").desc(), F.col("pos").desc(), F.col("row").desc()
    )
    return (
        keyed.withColumn("_n", F.row_number().over(latest))
        .filter((F.col("_n") == 1) & (F.col("op") != "d"))
        .select([F.col("after")[c].alias(c) for c in columns] if columns else ["after.*"])
    )


def _versions(path: Path) -> list[Path]:
    return sorted(p for p in path.glob("v[0-9]*") if p.is_dir())


def current_version(path: str | os.PathLike[str]) -> Path | None:
    pointer = Path(path) / CURRENT
    if not pointer.exists():
        return None
    name = pointer.read_text().strip()
    version = Path(path) / name
    if not name.startswith("v") or not version.is_dir():
        raise LakeError("the lake table's version pointer names no version", path=str(pointer))
    return version


def write_version(table: DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write `table` as the next version and switch readers to it."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    existing = _versions(root)
    number = int(existing[-1].name[1:]) + 1 if existing else 1
    version = root / f"v{number:08d}"
    table.write.mode("errorifexists").parquet(str(version))
    pointer = root / f"{CURRENT}.tmp"
    pointer.write_text(version.name + "\n")
    with pointer.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(pointer, root / CURRENT)
    for old in _versions(root)[:-KEEP_VERSIONS]:
        shutil.rmtree(old, ignore_errors=True)
    return version


def read_lake_table(spark: SparkSession, path: str | os.PathLike[str]) -> DataFrame:
    version = current_version(path)
    if version is None:
        raise LakeError("no version of the lake table yet", path=str(path))
    return spark.read.parquet(str(version))
