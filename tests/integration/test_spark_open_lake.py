"""Lake tables in Delta Lake (replicad/spark/lake.py, kafka_changes.py):
`replicad spark materialize --once` reads the change topic with Spark's own Kafka source
(spark-sql-kafka-0-10, fetched by `scripts/services.sh spark-jars`) and folds each micro-batch
with one MERGE INTO. The oracle is MariaDB's SELECT; the lake is read by a second engine
without replicad's code or Spark: the `deltalake` package (delta-rs).

The change topic has three partitions, so a TRUNCATE (written to every partition) and the
two halves of a primary-key change (a delete of the old key, a create of the new one) are read
from different partitions in the same batch.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from tests.helpers.daemon_process import ROOT
from tests.helpers.kafka_run import KafkaReplicad, wait_caught_up
from tests.helpers.spark_jars import spark_jars_dir

pytestmark = [pytest.mark.integration, pytest.mark.serial]

COLUMNS = "id, v, note, amt, at, big, raw, tm"
BOOKKEEPING = {"_replicad_file", "_replicad_pos", "_replicad_row"}


def _selected(conn: pymysql.connections.Connection, db: str) -> dict[int, dict[str, Any]]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT {COLUMNS} FROM `{db}`.acc")
        return {row["id"]: row for row in cur.fetchall()}


def _delta_rows(
    path: str | Path, storage_options: dict[str, str] | None = None
) -> dict[int, dict[str, Any]]:
    """The Delta table's current rows as delta-rs reads them, in PyMySQL's value forms."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(path), storage_options=storage_options).to_pyarrow_table().to_pylist()
    out = {}
    for row in rows:
        values = {k: v for k, v in row.items() if k not in BOOKKEEPING}
        if values.get("big") is not None:
            values["big"] = int(values["big"])  # DECIMAL(20,0)
        if values.get("tm") is not None:
            values["tm"] = dt.timedelta(microseconds=values["tm"])  # TIME as microseconds
        assert values["id"] not in out, f"key {values['id']} twice in the Delta table"
        out[values["id"]] = values
    return out


def _materialize_once(config: Path, log: Path) -> None:
    result = _spark_cli(config, log, "materialize", "--master", "local[2]", "--once")
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-4000:]


def _insert(cur: Any, ids: range, tag: str) -> None:
    cur.executemany(
        f"INSERT INTO acc ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        [
            (
                i,
                i * 3,
                f"{tag}{i}é",
                Decimal(i) / 4,
                dt.datetime(2026, 11, 28, 10, 0, 0, i),
                2**64 - i,
                i.to_bytes(4, "big"),
                # TIME is a signed duration up to 838:59:59 (the lake stores microseconds)
                None if i % 11 == 0 else dt.timedelta(hours=i * 7 % 1600 - 800, microseconds=i),
            )
            for i in ids
        ],
    )


def _acc_pipeline(
    conn: pymysql.connections.Connection,
    name: str,
    kafka: str,
    tmp_path: Path,
    server_id: int,
    *,
    lake: str | None = None,
    checkpoints: str | None = None,
    spark_yaml: str = "",
) -> tuple[KafkaReplicad, str]:
    """The table `acc`, and replicad publishing it into a three-partition topic, configured
    for a Delta lake (under tmp_path unless `lake` and `checkpoints` say where); started.
    Returns it and the lake table's path."""
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE acc (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(40), "
            "amt DECIMAL(12,2), at DATETIME(6), big BIGINT UNSIGNED, raw VARBINARY(8), "
            "tm TIME(6))"
        )
    conn.commit()
    lake = lake or str(tmp_path / "lake")
    checkpoints = checkpoints or str(tmp_path / "ckpt")
    replicad = KafkaReplicad(
        tmp_path / "replicad",
        server_id=server_id,
        prefix=f"d{uuid.uuid4().hex[:8]}",
        kafka=kafka,
        db=name,
        kafka_yaml="topics: {partitions: 3}",
        extra_yaml=(
            f"spark: {{lake_jars: '{spark_jars_dir()}', lake_path: '{lake}', "
            f"checkpoint_path: '{checkpoints}'{spark_yaml}}}\n"
        ),
    )
    replicad.start()
    return replicad, f"{lake}/{name}/acc"


def test_the_delta_lake_equals_select_read_by_delta_rs(db, kafka, tmp_path) -> None:
    conn, name = db
    replicad, path = _acc_pipeline(conn, name, kafka, tmp_path, 7394)
    log = tmp_path / "spark.log"
    try:
        with conn.cursor() as cur:
            _insert(cur, range(1, 301), "n")
            conn.commit()
            cur.execute("UPDATE acc SET v = v + 1, note = NULL WHERE id % 3 = 0")
            cur.execute("DELETE FROM acc WHERE id % 7 = 0")
            cur.execute("UPDATE acc SET id = id + 100000 WHERE id BETWEEN 50 AND 69")  # key change
            cur.execute("UPDATE acc SET id = 7 WHERE id = 100050")  # onto a deleted key
            _insert(cur, range(400, 410), "gone")
            cur.execute("DELETE FROM acc WHERE id >= 400 AND id < 100000")  # inserted, deleted
            cur.execute("UPDATE acc SET amt = amt * 2 WHERE id <= 20")
        conn.commit()
        wait_caught_up(replicad)
        _materialize_once(replicad.config, log)
        assert _delta_rows(path) == _selected(conn, name)

        # Second run, from the first's checkpoint: deletes, updates and key changes of rows
        # the lake holds (MERGE's matched clauses), a deleted key inserted again.
        with conn.cursor() as cur:
            cur.execute("DELETE FROM acc WHERE id % 5 = 0 AND id < 1000")
            cur.execute("UPDATE acc SET note = CONCAT(note, '+'), big = NULL WHERE id % 4 = 1")
            cur.execute("UPDATE acc SET id = id + 300000 WHERE id BETWEEN 200 AND 209")
            cur.execute("UPDATE acc SET id = 10 WHERE id = 300201")
            _insert(cur, range(14, 15), "again")  # 14 was deleted in the first run
        conn.commit()
        wait_caught_up(replicad)
        _materialize_once(replicad.config, log)
        assert _delta_rows(path) == _selected(conn, name)

        # Third run: changes before a TRUNCATE, the TRUNCATE, and changes after it, all in
        # one batch (keys reused, a key change, a delete), from the checkpoint of the first.
        with conn.cursor() as cur:
            cur.execute("UPDATE acc SET v = -1 WHERE id <= 100")
            cur.execute("TRUNCATE TABLE acc")
            _insert(cur, range(90, 130), "t")
            cur.execute("UPDATE acc SET id = id + 200000 WHERE id < 95")
            cur.execute("DELETE FROM acc WHERE id BETWEEN 120 AND 124")
            cur.execute("UPDATE acc SET v = v * 10 WHERE id % 2 = 0")
        conn.commit()
        wait_caught_up(replicad)
        _materialize_once(replicad.config, log)
        expected = _selected(conn, name)
        assert len(expected) == 35
        assert _delta_rows(path) == expected
        assert log.read_text(errors="replace").count('"event": "lake_batch_applied"') >= 3
    finally:
        assert replicad.stop() == 0


def test_records_removed_while_the_job_was_down_fail_the_query(db, kafka, tmp_path) -> None:
    """Spark's Kafka source with failOnDataLoss: records the first run did not read are
    deleted (as retention would delete them) before the second run, which then fails (exit 75)
    instead of skipping to the first record left, and leaves the lake as it was."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE r (id INT PRIMARY KEY, v INT)")
    conn.commit()
    prefix = f"r{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp_path / "replicad",
        server_id=7396,
        prefix=prefix,
        kafka=kafka,
        db=name,
        extra_yaml=(
            f"spark: {{lake_jars: '{spark_jars_dir()}', "
            f"lake_path: '{tmp_path / 'lake'}', checkpoint_path: '{tmp_path / 'ckpt'}'}}\n"
        ),
    )
    replicad.start()
    log = tmp_path / "spark.log"
    try:
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO r VALUES (%s, %s)", [(i, i) for i in range(20)])
        conn.commit()
        wait_caught_up(replicad)
        _materialize_once(replicad.config, log)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO r VALUES (%s, %s)", [(i, i) for i in range(20, 40)])
        conn.commit()
        wait_caught_up(replicad)
        topic = f"{prefix}.{name}.r"
        admin = AdminClient({"bootstrap.servers": kafka})
        end = admin.list_topics(topic, timeout=30).topics[topic].partitions
        assert list(end) == [0]
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": kafka, "group.id": "unused"})
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.close()
        # Everything up to 5 records before the end: the 20 unread changes lose 15.
        futures = admin.delete_records([TopicPartition(topic, 0, high - 5)])
        for future in futures.values():
            future.result(30)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "replicad.cli",
                "spark",
                "materialize",
                "-c",
                str(replicad.config),
                "--master",
                "local[1]",
                "--once",
            ],
            cwd=ROOT,
            capture_output=True,
            timeout=600,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )
        stderr = result.stderr.decode(errors="replace")
        with log.open("ab") as out:
            out.write(result.stderr)
        assert result.returncode == 75, stderr[-3000:]
        assert "spark_job_failed" in stderr
        # (The job's own spark_job_failed line has no reason: jobs._failure takes the first
        # line of an error raised inside foreachBatch, which is empty; Spark's is in stderr.)
        assert "Some data may have been lost" in stderr, stderr[-3000:]
        assert "OffsetOutOfRangeException" in stderr
        # The lake kept the first run's rows, nothing of the lost range.
        assert sorted(_delta_rows(tmp_path / "lake" / name / "r")) == list(range(20))
    finally:
        assert replicad.stop() == 0


def _spark_cli(
    config: Path, log: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """`replicad spark ARGS -c CONFIG` (the job's log appended to `log`), in `env` (else this
    process's) with the workers on this interpreter."""
    result = subprocess.run(
        [sys.executable, "-m", "replicad.cli", "spark", *args, "-c", str(config)],
        cwd=ROOT,
        capture_output=True,
        timeout=600,
        env={**(env or os.environ), "PYSPARK_PYTHON": sys.executable},
    )
    with log.open("ab") as out:
        out.write(result.stderr)
    return result


def test_maintain_compacts_and_vacuums_the_delta_tables(db, kafka, tmp_path) -> None:
    """Three materialize runs leave versions of small files (inserts: each run adds files);
    `spark maintain --retain-hours 0` compacts them (fewer files, one new version) and vacuums
    what no current version references: the lake still equals SELECT through delta-rs, the
    first version can no longer be read, and the data files on disk are the current ones."""
    from deltalake import DeltaTable

    conn, name = db
    replicad, lake = _acc_pipeline(conn, name, kafka, tmp_path, 7395)
    path = Path(lake)
    log = tmp_path / "spark.log"
    try:
        for run in range(3):
            with conn.cursor() as cur:
                # Inserts only after the first run: each MERGE adds files, none rewritten.
                _insert(cur, range(run * 100 + 1, run * 100 + 101), f"r{run}")
                if run == 0:
                    cur.execute("UPDATE acc SET v = v + 1 WHERE id % 2 = 0")
                    cur.execute("DELETE FROM acc WHERE id % 11 = 0")
            conn.commit()
            wait_caught_up(replicad)
            _materialize_once(replicad.config, log)
    finally:
        assert replicad.stop() == 0
    expected = _selected(conn, name)
    assert _delta_rows(path) == expected
    data_files = sorted(p.name for p in path.rglob("*.parquet"))
    result = _spark_cli(replicad.config, log, "maintain", "--retain-hours", "0")
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-4000:]
    assert result.stdout, result.stderr.decode(errors="replace")[-4000:]
    (report,) = orjson.loads(result.stdout)["tables"]
    assert report["table"] == f"{name}.acc"
    assert report["files_after"] < report["files_before"], report
    assert report["vacuumed"] > 0, report
    assert _delta_rows(path) == expected
    table = DeltaTable(str(path))
    current = {Path(f).name for f in table.file_uris()}
    assert {p.name for p in path.rglob("*.parquet")} == current, "only the current files stay"
    assert len(current) < len(data_files)
    with pytest.raises(Exception):  # noqa: B017 (delta-rs raises its own IO error type)
        DeltaTable(str(path), version=1).to_pyarrow_table()
    refused = _spark_cli(replicad.config, log, "maintain", "--retain-hours", "-1")
    assert refused.returncode == 64


def test_a_lake_table_of_the_former_format_is_refused_not_overwritten(db, kafka, tmp_path) -> None:
    """replicad's former lake format (Parquet buckets and a `_manifest.json`): the job exits
    78 naming the table's path and the migration note, and writes no Delta log beside it."""
    conn, name = db
    replicad, path = _acc_pipeline(conn, name, kafka, tmp_path, 7399)
    former = Path(path)
    former.mkdir(parents=True)
    (former / "_manifest.json").write_text('{"version": 3}')
    log = tmp_path / "spark.log"
    try:
        with conn.cursor() as cur:
            _insert(cur, range(1, 4), "f")
        conn.commit()
        wait_caught_up(replicad)
        result = _spark_cli(replicad.config, log, "materialize", "--master", "local[1]", "--once")
    finally:
        assert replicad.stop() == 0
    error = result.stderr.decode(errors="replace")
    assert result.returncode == 78, error[-3000:]
    assert "former lake format" in error and str(former) in error, error[-3000:]
    assert not (former / "_delta_log").exists()
    assert sorted(p.name for p in former.iterdir()) == ["_manifest.json"]
