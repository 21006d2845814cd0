"""`replicad spark maintain`: keep a Delta lake small and fast (docs/spark.md, "Maintenance").

Every MERGE of the materialize job writes new files and leaves the ones it replaced in the
table's directory, referenced only by older versions (time travel, `spark cut`). Per lake
table, `OPTIMIZE` compacts the small files the micro-batches wrote into fewer large ones, and
`VACUUM ... RETAIN n HOURS` deletes the files no version younger than `n` hours references:
what replaces the former lake format's delete-marker pruning (a MERGE deletes rows from the
current version at once; VACUUM reclaims their bytes once no kept version needs them).
Versions older than the retention can no longer be read afterwards.

Both run beside the materialize job: Delta's optimistic concurrency lets them commit between
its MERGEs, and a conflict (a MERGE rewrote a file OPTIMIZE was compacting) fails this run
without touching the table (exit 75: run it again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog
from pyspark.sql import SparkSession

from replicad.config import Config
from replicad.spark import storage

log = structlog.get_logger("replicad.spark")

DEFAULT_RETAIN_HOURS = 168.0  # Delta's own default (delta.deletedFileRetentionDuration)


def lake_tables(lake_path: str) -> list[Path]:
    """The Delta tables under `<lake_path>/<db>/<table>` (those with a transaction log)."""
    root = Path(lake_path)
    return sorted(p.parent for p in root.glob("*/*/_delta_log") if p.is_dir())


def session_settings(retain_hours: float) -> dict[str, str]:
    """A retention under Delta's default is refused by Delta unless its check is off: off only
    when asked for (readers of versions older than that may fail)."""
    if retain_hours >= DEFAULT_RETAIN_HOURS:
        return {}
    return {"spark.databricks.delta.retentionDurationCheck.enabled": "false"}


def maintain(
    spark: SparkSession, config: Config, *, retain_hours: float, optimize: bool = True
) -> list[dict[str, Any]]:
    """OPTIMIZE (unless `optimize` is False) and VACUUM every Delta table of the lake; one
    report per table: files before and after, and the files VACUUM deleted."""
    storage.local_only(config.spark.lake_path, "spark.lake_path", "maintain")
    reports = []
    for path in lake_tables(config.spark.lake_path):
        target = f"delta.`{path}`"
        before = _files(spark, target)
        if optimize:
            spark.sql(f"OPTIMIZE {target}").collect()
        vacuum = f"VACUUM {target} RETAIN {retain_hours:g} HOURS"
        deleted = spark.sql(f"{vacuum} DRY RUN").count()  # the files VACUUM is about to delete
        spark.sql(vacuum).collect()
        report = {
            "table": f"{path.parent.name}.{path.name}",
            "path": str(path),
            "files_before": before,
            "files_after": _files(spark, target),
            "vacuumed": deleted,
        }
        log.info("lake_table_maintained", **report)
        reports.append(report)
    return reports


def _files(spark: SparkSession, target: str) -> int:
    return int(spark.sql(f"DESCRIBE DETAIL {target}").collect()[0]["numFiles"])
