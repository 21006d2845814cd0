"""One place for the SparkSession replicad's jobs and tests use: local mode by default, UTC,
no UI, the venv's interpreter on the workers, and replicad's data sources registered."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def build_session(
    master: str | None = "local[*]",
    app: str = "replicad",
    local_dir: str | None = None,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """`master` None: whatever `spark-submit` set. The workers run this interpreter unless
    PYSPARK_PYTHON says otherwise (else they start the system python, which lacks replicad)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master is not None and master.startswith("local"):
        # Local mode only: on a cluster the executors must reach the driver's real address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app)
    if master is not None:
        builder = builder.master(master)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # progress bars would break JSON log lines
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        "spark.sql.shuffle.partitions": "4",
        # Catalyst recurses over a plan: a lake batch of a wide table (the 28-column test
        # table) overflowed the default 1 MB stack of a streaming query's thread once.
        "spark.driver.extraJavaOptions": "-Xss16m",
        **({"spark.local.dir": local_dir} if local_dir else {}),
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    """Make the formats `replicad-kafka` and `replicad-binlog` known to this session."""
    from replicad.spark.archive import ReplicadBinlogSource
    from replicad.spark.kafka_source import ReplicadKafkaSource

    spark.dataSource.register(ReplicadKafkaSource)
    spark.dataSource.register(ReplicadBinlogSource)
