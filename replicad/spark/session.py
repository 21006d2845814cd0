"""One place for the SparkSession replicad's jobs and tests use: local mode by default, UTC,
no UI, the venv's interpreter on the workers, replicad's data sources registered, and the
jars of Delta Lake and Spark's Kafka source (`lake_conf`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from replicad.config import SparkConfig
from replicad.errors import ConfigError

# The jars of scripts/spark/pom.xml the jobs load, by file name prefix.
LAKE_JARS = (
    "delta-spark_4.2_2.13-",
    "delta-storage-",
    "spark-sql-kafka-0-10_2.13-",
    "spark-token-provider-kafka-0-10_2.13-",
    "kafka-clients-",
    "commons-pool2-",
)


def lake_jars(directory: str | None) -> list[Path]:
    """The jars of Delta and Spark's Kafka source in `spark.lake_jars` (`bash
    scripts/services.sh spark-jars` prints the directory); a missing one is a ConfigError
    naming the key."""
    if not directory:
        raise ConfigError(
            "the Spark jobs need spark.lake_jars: the directory `bash scripts/services.sh "
            "spark-jars` fetches Delta Lake and spark-sql-kafka into",
            key="spark.lake_jars",
        )
    found = []
    for prefix in LAKE_JARS:
        jars = sorted(Path(directory).glob(f"{prefix}*.jar"))
        if not jars:
            raise ConfigError(
                f"no {prefix}*.jar in spark.lake_jars", key="spark.lake_jars", value=directory
            )
        found.append(jars[-1])
    return found


def lake_conf(settings: SparkConfig) -> dict[str, str]:
    """The session settings of a job that reads or writes Delta tables or reads Kafka, with
    `spark.session_conf` over them."""
    return {
        "spark.jars": ",".join(str(j) for j in lake_jars(settings.lake_jars)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # The partitions Delta rebuilds a table's state in after each commit (50 by default,
        # sized for logs of very many files): on the lake's small logs each MERGE paid for 50
        # tasks; 2 halved its time on local[2] (4.4 s -> 2.0 s per batch, 1k keys into 200k
        # rows, docs/spark.md "Lake tables").
        "spark.databricks.delta.snapshotPartitions": "2",
        **settings.session_conf,
    }


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
