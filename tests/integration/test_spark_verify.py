"""`replicad spark verify` against the real server: MariaDB read through Spark's JDBC source
(MariaDB Connector/J from Debian's libmariadb-java), lake tables written by the `materialize`
job from replicad's change topics (replicad-kafka; Spark's own Kafka source cannot be fetched
here). The oracle is what the test did behind the pipeline's back with `sql_log_bin=0`:
verify must report exactly those keys, with the changed columns, and nothing else, also while
other rows keep changing and the lake follows them with a lag.
"""

from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
import threading
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicad.config import load_config
from replicad.spark.canonical import mariadb_double_text
from replicad.spark.jobs import Materialize
from replicad.spark.verify import Verifier
from tests.helpers.all_types import ALL_TYPES, COLUMNS, insert_random
from tests.helpers.daemon_process import ROOT
from tests.helpers.kafka_run import KafkaReplicad, wait_caught_up
from tests.helpers.mariadb import connect_root
from tests.helpers.spark_jars import spark_jars_dir

pytestmark = [pytest.mark.integration, pytest.mark.serial]


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double_text_is_what_mariadb_writes(value: float) -> None:
    """The Spark side's text of a double equals MariaDB's own CAST(double AS CHAR)."""
    conn = _shared_connection()
    with conn.cursor() as cur:
        cur.execute("SELECT CAST(CAST(%s AS DOUBLE) AS CHAR)", (repr(value),))
        (text,) = cur.fetchone()
    assert mariadb_double_text(value) == text


_CONNECTION: list = []


def _shared_connection():
    if not _CONNECTION:
        _CONNECTION.append(connect_root())
    return _CONNECTION[0]


def _float_bits(rng: random.Random) -> str:
    while True:
        value = struct.unpack("<d", rng.randbytes(8))[0]
        if value == value and abs(value) != float("inf"):
            return repr(value)


def _materialize_once(spark, config) -> None:
    Materialize(spark, config, once=True).run()


def _by_kind(report: dict) -> dict[str, object]:
    """A report (TableReport.to_json) as sorted key tuples per kind of difference."""
    return {
        "missing": sorted(tuple(k.values()) for k in report["missing"]),
        "extra": sorted(tuple(k.values()) for k in report["extra"]),
        "different": sorted(
            (tuple(d["key"].values()), tuple(d["columns"])) for d in report["different"]
        ),
    }


def test_verify_reports_exactly_the_rows_changed_behind_the_pipelines_back(
    db, kafka, spark, tmp_path
) -> None:
    conn, name = db
    rng = random.Random(17)
    with conn.cursor() as cur:
        cur.execute(ALL_TYPES)
        insert_random(cur, rng, range(1, 301), COLUMNS)
        # A composite key that is not an integer: hash buckets instead of value ranges.
        cur.execute(
            "CREATE TABLE k (name VARCHAR(20) CHARACTER SET latin1, at DATETIME(6), v DOUBLE,"
            " note VARCHAR(10), PRIMARY KEY (name, at))"
        )
        for i in range(200):
            cur.execute(
                "INSERT INTO k VALUES (%s, %s, %s, %s)",
                (
                    f"n{i % 37}é",
                    f"2026-01-{1 + i % 28:02d} 10:00:00.{i:06d}",
                    float(_float_bits(rng)),
                    None if i % 5 == 0 else f"x{i}",
                ),
            )
    conn.commit()
    lake, checkpoints = tmp_path / "lake", tmp_path / "ckpt"
    replicad = KafkaReplicad(
        tmp_path / "replicad",
        server_id=7301,
        prefix=f"v{uuid.uuid4().hex[:8]}",
        kafka=kafka,
        extra_yaml=(
            "snapshot: {mode: initial, chunk_rows: 100}\n"
            f"filters: {{include: ['{name}\\.(t|k)']}}\n"
            f"spark: {{lake_path: '{lake}', checkpoint_path: '{checkpoints}', "
            f"lake_jars: '{spark_jars_dir()}', "
            f"tables: '{name}\\.(t|k)', verify_ranges: 6, trigger_s: 0.5, discover_s: 1.0, "
            "verify_timeout_s: 120, verify_rounds: 2}\n"
        ),
    )
    replicad.start()
    try:
        wait_caught_up(replicad, timeout=120)
        config = load_config(replicad.config)
        _materialize_once(spark, config)
        verifier = Verifier(spark, config, "repl")
        assert verifier.tables() == sorted([f"{name}.k", f"{name}.t"])

        # 1. Equal: every type's text agrees on both sides.
        for table, rows in ((f"{name}.t", 300), (f"{name}.k", 200)):
            report = verifier.verify(table, 120)
            assert report.equal, report.to_json()
            assert (report.rows_mysql, report.rows_lake) == (rows, rows)
            assert report.ranges_differing == 0

        # 2. Changes the binlog never sees, beside ordinary ones it does.
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("UPDATE t SET dbl = dbl + 1, dt6 = '2020-02-02 02:02:02.5' WHERE id = 7")
            cur.execute("UPDATE t SET g = ST_GeomFromText('POINT(1 2)', 4326) WHERE id = 8")
            cur.execute("DELETE FROM t WHERE id = 150")
            cur.execute("INSERT INTO t (id, vc) VALUES (1000, 'hidden')")
            cur.execute("UPDATE k SET note = 'hidden' WHERE name = 'n3é' AND at LIKE '%.000003'")
            cur.execute("DELETE FROM k WHERE name = 'n4é' AND at LIKE '%.000004'")
            cur.execute("SET SESSION sql_log_bin = 1")
            cur.execute("UPDATE t SET vc = 'seen' WHERE id BETWEEN 20 AND 40")
            cur.execute("DELETE FROM t WHERE id = 41")
            cur.execute("INSERT INTO t (id, tx) VALUES (1001, 'seen')")
            cur.execute("UPDATE k SET v = 0.5 WHERE name = 'n5é'")
        conn.commit()
        wait_caught_up(replicad, timeout=120)
        _materialize_once(spark, config)
        expected_t = {
            "missing": [("1000",)],
            "extra": [("150",)],
            "different": [(("7",), ("dbl", "dt6")), (("8",), ("g",))],
        }
        expected_k = {
            "missing": [],
            "extra": [("n4é", "2026-01-05 10:00:00.000004")],
            "different": [(("n3é", "2026-01-04 10:00:00.000003"), ("note",))],
        }
        # The command (its JSON report; exit 1: a difference).
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "replicad.cli",
                "spark",
                "verify",
                "-c",
                str(replicad.config),
                "--master",
                "local[2]",
                "--json",
            ],
            cwd=ROOT,
            capture_output=True,
            timeout=300,
            env=replicad.env,
        )
        assert result.returncode == 1, result.stderr.decode()[-3000:]
        reports = {t["table"]: t for t in json.loads(result.stdout)["tables"]}
        report_t, report_k = reports[f"{name}.t"], reports[f"{name}.k"]
        assert _by_kind(report_t) == expected_t, report_t
        assert report_t["counts"] == {"missing": 1, "extra": 1, "different": 2, "unsettled": 0}
        assert 1 <= report_t["ranges_differing"] < report_t["ranges"]  # not every range re-read
        assert _by_kind(report_k) == expected_k, report_k

        # 3. The same while other rows keep changing and the job follows them with a lag:
        # a row changed after the checksums is read again once the lake has passed it.
        job = Materialize(spark, config)
        runner = threading.Thread(target=job.run, daemon=True)
        runner.start()
        stop = threading.Event()
        touched: set[str] = set()

        def write() -> None:
            writer = connect_root()
            with writer.cursor() as cur:
                cur.execute(f"USE `{name}`")
                n = 0
                while not stop.is_set():
                    key = rng.choice([i for i in range(100, 140)])
                    touched.add(str(key))
                    cur.execute(
                        "UPDATE t SET si = %s, vc = %s WHERE id = %s", (n % 30000, f"w{n}", key)
                    )
                    writer.commit()
                    n += 1
                    stop.wait(0.005)
            writer.close()

        writing = threading.Thread(target=write, daemon=True)
        writing.start()
        try:
            report_t = verifier.verify(f"{name}.t", 120)
        finally:
            stop.set()
            writing.join(30)
            job.stop()
            runner.join(60)
        assert _by_kind(report_t.to_json()) == expected_t, report_t.to_json()
        assert {k["id"] for k in report_t.unsettled} <= touched
    finally:
        assert replicad.stop() == 0
