"""`replicad spark materialize` as operators run it: a process of its own (Spark local[2])
streaming a change topic into its lake table while a workload writes, an initial snapshot as
the base, an ALTER mid-stream, the job SIGKILLed and restarted, replicad SIGKILLed and
restarted (its changes sent again). The job reads with Spark's own Kafka source and folds into
a Delta table, which delta-rs reads here. Oracle: SELECT of the table, typed as PyMySQL returns
it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pymysql
import pytest

from tests.helpers.daemon_process import ROOT, wait_for
from tests.helpers.kafka_run import BackgroundWriter, KafkaReplicad, wait_caught_up
from tests.helpers.spark_jars import spark_jars_dir

pytestmark = [pytest.mark.integration, pytest.mark.serial]

ROWS = 3000


class AccountWorkload:
    """Updates, deletes, inserts and primary-key changes on `acc`, one per transaction."""

    def __init__(self, conn, seed: int) -> None:
        self.conn = conn
        self.rng = random.Random(seed)
        self.statements = 0

    def transaction(self) -> None:
        rng = self.rng
        key = rng.randrange(1, ROWS + 500)
        pick = rng.random()
        with self.conn.cursor() as cur:
            if pick < 0.55:
                cur.execute(
                    "UPDATE acc SET v = v + 1, note = %s WHERE id = %s",
                    (f"u{rng.randrange(10**6)}", key),
                )
            elif pick < 0.7:
                cur.execute("DELETE FROM acc WHERE id = %s", (key,))
            elif pick < 0.8:
                cur.execute("UPDATE IGNORE acc SET id = id + 100000 WHERE id = %s", (key,))
            else:
                cur.execute(
                    "REPLACE INTO acc (id, v, note) VALUES (%s, %s, 'new')",
                    (key, rng.randrange(1000)),
                )
        self.conn.commit()
        self.statements += 1


class SparkJob:
    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "replicad.cli",
                    "spark",
                    "materialize",
                    "-c",
                    str(self.config),
                    "--master",
                    "local[2]",
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            )

    def count(self, event: str) -> int:
        """Occurrences of a log event; fails at once if the job has exited."""
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]
        return self.log.read_text(errors="replace").count(f'"event": "{event}"')


def _selected(conn, db: str) -> dict[int, dict]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM `{db}`.acc")
        return {row["id"]: row for row in cur.fetchall()}


def _lake(path: Path) -> dict[int, dict] | None:
    """The Delta table's rows by id, read by delta-rs (None: no table yet)."""
    from deltalake import DeltaTable

    if not (path / "_delta_log").is_dir():
        return None
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return {r["id"]: {k: v for k, v in r.items() if not k.startswith("_replicad_")} for r in rows}


def _columns(path: Path) -> list[str]:
    from deltalake import DeltaTable

    return [f.name for f in DeltaTable(str(path)).schema().fields]


def test_the_materialize_job_keeps_the_lake_table_equal_through_kills_and_an_alter(
    db, kafka, tmp_path
) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE acc (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(40))")
        cur.execute(f"INSERT INTO acc SELECT seq, seq, CONCAT('n', seq) FROM seq_1_to_{ROWS}")
    prefix = f"m{uuid.uuid4().hex[:8]}"
    lake_root = tmp_path / "lake"
    replicad = KafkaReplicad(
        tmp_path / "replicad",
        server_id=7192,
        prefix=prefix,
        kafka=kafka,
        extra_yaml=(
            "snapshot: {mode: initial, chunk_rows: 500}\n"
            f"filters: {{include: ['{name}\\.acc']}}\n"
            f"spark: {{lake_path: '{lake_root}', checkpoint_path: '{tmp_path / 'ckpt'}', "
            f"lake_jars: '{spark_jars_dir()}', trigger_s: 1.0, discover_s: 2.0}}\n"
        ),
    )
    replicad.start()
    writer = BackgroundWriter(name, seed=71, pause_s=0.004, workload=AccountWorkload)
    writer.start()
    job = SparkJob(replicad.config, tmp_path / "spark.log")
    try:
        _run(conn, name, replicad, writer, job, lake_root)
    finally:
        if job.proc is not None and job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait(30)


def _run(conn, name, replicad, writer, job, lake_root) -> None:
    job.start()
    wait_for(lambda: job.count("lake_batch_applied") >= 2, 180, "two micro-batches applied")
    assert job.proc is not None
    job.proc.send_signal(signal.SIGKILL)
    job.proc.wait(30)
    replicad.proc.send_signal(signal.SIGKILL)
    replicad.proc.wait(30)
    replicad.start()
    job.start()
    applied = job.count("lake_batch_applied")
    wait_for(lambda: job.count("lake_batch_applied") >= applied + 2, 180, "batches after restart")
    # A DDL while the job runs: the query meets a schema version it was not started with and
    # is started again with the new row struct.
    with conn.cursor() as cur:
        # default NULL: no refill
        cur.execute("ALTER TABLE acc ADD COLUMN extra INT NULL, ADD COLUMN gone INT NULL")
        cur.execute("UPDATE acc SET extra = id % 7, gone = 1 WHERE id % 3 = 0")
    conn.commit()
    wait_for(lambda: job.count("lake_query_restarted") >= 1, 120, "the query restarted")
    # A column dropped once the lake table has it: the table is rewritten without it.
    wait_for(lambda: "gone" in _columns(lake_root / name / "acc"), 120, "`gone` in the lake")
    with conn.cursor() as cur:
        cur.execute("ALTER TABLE acc DROP COLUMN gone")
        cur.execute("UPDATE acc SET extra = 0 WHERE id % 5 = 0")
    conn.commit()
    wait_for(lambda: job.count("lake_query_restarted") >= 2, 120, "the query restarted again")
    assert writer.stop() > 0
    wait_caught_up(replicad, timeout=120)
    assert replicad.stop() == 0
    expected = _selected(conn, name)
    path = lake_root / name / "acc"
    wait_for(lambda: _lake(path) == expected, 240, "the lake table to equal SELECT")
    assert job.count("lake_table_rewritten") >= 1  # the DROP COLUMN, not ADD COLUMNS
    job.proc.send_signal(signal.SIGTERM)
    assert job.proc.wait(60) == 0, job.log.read_text()[-3000:]
    assert "extra" in next(iter((_lake(path) or {0: {}}).values()))
