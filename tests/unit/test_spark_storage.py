"""Where the Spark jobs' paths point (replicad/spark/storage.py): local directories or s3a://
URIs, the S3A settings and jars a job gets, and the configurations refused before Spark
starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicad.config import Config
from replicad.errors import ConfigError
from replicad.spark import storage

pytestmark = pytest.mark.unit


def _config(**spark: object) -> Config:
    return Config.model_validate({"spark": spark})


def _jars(tmp_path: Path, *names: str) -> str:
    (tmp_path / "s3").mkdir()
    for name in names:
        (tmp_path / "s3" / name).write_bytes(b"")
    return str(tmp_path)


def test_join_keeps_uris_and_makes_local_paths_absolute(tmp_path: Path) -> None:
    assert storage.join("s3a://b/lake/", "shop", "acc") == "s3a://b/lake/shop/acc"
    assert storage.join(str(tmp_path / "lake"), "shop", "acc") == str(tmp_path / "lake/shop/acc")
    assert Path(storage.join("lake", "shop")).is_absolute()


def test_local_paths_get_nothing_added(tmp_path: Path) -> None:
    conf = {"spark.jars": "/d.jar"}
    assert storage.with_s3(conf, _config(lake_path=str(tmp_path))) == conf


def test_an_s3a_lake_gets_the_s3a_settings_and_jars(tmp_path: Path) -> None:
    jars = _jars(tmp_path, "hadoop-aws-3.5.0.jar", "s3-2.35.4.jar")
    config = _config(
        lake_jars=jars,
        lake_path="s3a://b/lake",
        checkpoint_path="s3a://b/ckpt",
        s3={"endpoint": "http://127.0.0.1:9010", "path_style_access": True},
    )
    conf = storage.with_s3({"spark.jars": "/d.jar"}, config)
    assert conf["spark.jars"].split(",") == [
        "/d.jar",
        f"{jars}/s3/hadoop-aws-3.5.0.jar",
        f"{jars}/s3/s3-2.35.4.jar",
    ]
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9010"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert "spark.hadoop.fs.s3a.endpoint.region" not in conf


@pytest.mark.parametrize(
    ("spark", "key", "fragment"),
    [
        ({"lake_path": "s3://b/lake"}, "spark.lake_path", "s3a://"),
        ({"checkpoint_path": "gs://b/c"}, "spark.checkpoint_path", "s3a://"),
        ({"changes_path": "s3a://b/c"}, "spark.lake_jars", "spark-jars"),
    ],
)
def test_refused_before_spark_starts(spark: dict, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as caught:
        storage.with_s3({}, _config(**spark))
    assert caught.value.context["key"] == key


def test_an_s3a_path_without_hadoop_aws_names_the_directory(tmp_path: Path) -> None:
    jars = _jars(tmp_path, "s3-2.35.4.jar")
    config = _config(lake_jars=jars, lake_path="s3a://b/lake")
    with pytest.raises(ConfigError, match="hadoop-aws"):
        storage.with_s3({}, config)


def test_commands_that_read_lake_files_refuse_s3() -> None:
    with pytest.raises(ConfigError, match="spark cut"):
        storage.local_only("s3a://b/lake", "spark.lake_path", "cut")
    storage.local_only("/var/lake", "spark.lake_path", "cut")
