"""Where the Spark jobs keep lake tables and checkpoints: a local directory (the default) or
S3 through Hadoop's S3A file system (`s3a://bucket/prefix`, docs/spark.md "Object storage").

Paths stay strings: a local one is made absolute (Delta names a table by its path), an S3 one
is used as given. Files the driver reads itself (a streaming query's offset log) go through
Hadoop's file system API of the session, so they are read wherever the path points.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from replicad.config import Config
from replicad.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

S3_SCHEME = "s3a://"
# The jars of scripts/spark/s3/pom.xml, fetched beside the others into <lake_jars>/s3.
S3_JARS_DIR = "s3"


def is_remote(path: str) -> bool:
    return "://" in path


def check_path(path: str, key: str) -> None:
    """Local paths and s3a:// are supported; other schemes are a ConfigError naming `key`."""
    if is_remote(path) and not path.startswith(S3_SCHEME):
        raise ConfigError(
            "only local paths and s3a:// URIs are supported (S3 is reached through Hadoop's "
            "S3A file system: write s3a://bucket/prefix)",
            key=key,
            value=path,
        )


def join(base: str, *parts: str) -> str:
    """`base` / parts: an absolute local path, or the URI with the parts appended."""
    if is_remote(base):
        return "/".join([base.rstrip("/"), *parts])
    return str(Path(base, *parts).resolve())


def with_s3(conf: dict[str, str], config: Config) -> dict[str, str]:
    """A job's session settings `conf` with S3A's jars and settings added when one of its
    paths is on S3; a path the job cannot use is a ConfigError naming its key."""
    spark = config.spark
    for key in ("lake_path", "checkpoint_path", "changes_path"):
        check_path(getattr(spark, key), f"spark.{key}")
    if not uses_s3(config):
        return conf
    if not spark.lake_jars:
        raise ConfigError(
            "an s3a:// path needs spark.lake_jars: the directory `bash scripts/services.sh "
            "spark-jars` fetches hadoop-aws and the AWS SDK into",
            key="spark.lake_jars",
        )
    jars = [
        *filter(None, conf.get("spark.jars", "").split(",")),
        *map(str, s3_jars(spark.lake_jars)),
    ]
    return {**conf, **s3_session_conf(config), "spark.jars": ",".join(jars)}


def local_only(path: str, key: str, command: str) -> None:
    """Commands that read the lake's files themselves work on local lakes only (for now)."""
    if is_remote(path):
        raise ConfigError(f"`replicad spark {command}` reads local lakes only", key=key, value=path)


def uses_s3(config: Config) -> bool:
    spark = config.spark
    paths = (spark.lake_path, spark.checkpoint_path, spark.changes_path)
    return any(p.startswith(S3_SCHEME) for p in paths)


def s3_session_conf(config: Config) -> dict[str, str]:
    """S3A's settings from `spark.s3` (credentials come from the AWS chain S3A reads: the
    AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY variables, a profile, an instance role)."""
    s3 = config.spark.s3
    conf = {
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.path.style.access": str(s3.path_style_access).lower(),
    }
    if s3.endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = s3.endpoint
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            s3.endpoint.startswith("https://")
        ).lower()
    if s3.region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = s3.region
    return conf


def s3_jars(lake_jars: str) -> list[Path]:
    jars = sorted((Path(lake_jars) / S3_JARS_DIR).glob("*.jar"))
    if not any(j.name.startswith("hadoop-aws-") for j in jars):
        raise ConfigError(
            f"an s3a:// path needs hadoop-aws and the AWS SDK in spark.lake_jars/{S3_JARS_DIR} "
            "(`bash scripts/services.sh spark-jars` fetches them)",
            key="spark.lake_jars",
            value=lake_jars,
        )
    return jars


def _file(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """(file system, Hadoop path) of `path` in the session's Hadoop configuration."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hadoop_path


def exists(spark: SparkSession, path: str) -> bool:
    fs, hadoop_path = _file(spark, path)
    return bool(fs.exists(hadoop_path))


def read_text(spark: SparkSession, path: str) -> str | None:
    """A (small) file's text through the session's Hadoop file system (None: not there)."""
    fs, hadoop_path = _file(spark, path)
    if not fs.exists(hadoop_path):
        return None
    stream = fs.open(hadoop_path)
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        data = jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
    finally:
        stream.close()
    return bytes(data).decode()
