"""`replicad spark verify` against the real Oracle MySQL 9.7 through MySQL Connector/J (from
Maven Central: `scripts/services.sh spark-jars`), as the caching_sha2_password user `repl`.
The lake is built by the `materialize` job from replicad's change topics of MySQL's stream;
the oracle, as in test_spark_verify.py (MariaDB), is what the test changed behind the
pipeline's back with `sql_log_bin=0`: verify must name exactly those keys and columns.

The command runs as `replicad spark verify` (its own Spark session): the tests' shared session
was started with MariaDB Connector/J only, and a JVM's classpath is fixed at its start.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from replicad.config import load_config
from replicad.spark.jobs import Materialize
from tests.helpers.all_types import ALL_TYPES, COLUMNS, insert_random
from tests.helpers.daemon_process import ROOT
from tests.helpers.kafka_run import KafkaReplicad
from tests.helpers.mysql import MYSQL_PORT, mysql, mysql_db  # noqa: F401 (fixtures)
from tests.integration.test_mysql_snapshots import _wait_caught_up
from tests.integration.test_spark_verify import _by_kind

pytestmark = [pytest.mark.integration, pytest.mark.serial]


def _connector_j() -> Path:
    """MySQL Connector/J's jar, fetched if missing (a no-op once fetched)."""
    fetched = subprocess.run(
        ["bash", str(ROOT / "scripts/services.sh"), "spark-jars"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr[-2000:]
    jars = sorted(Path(fetched.stdout.strip()).glob("mysql-connector-j-*.jar"))
    assert len(jars) == 1, jars
    return jars[0]


def _verify(replicad: KafkaReplicad) -> tuple[int, dict[str, dict], str]:
    result = subprocess.run(
        [sys.executable, "-m", "replicad.cli", "spark", "verify", "-c", str(replicad.config),
         "--master", "local[2]", "--json"],
        cwd=ROOT, capture_output=True, timeout=300, env=replicad.env,
    )  # fmt: skip
    # The job's events and the error's own lines (a JVM stack trace follows them).
    lines = result.stderr.decode().splitlines()
    said = [line[:3000] for line in lines if line.startswith(("replicad spark verify:", ": ", "{"))]
    stderr = "\n".join(said or lines[-30:])
    if result.returncode not in (0, 1):
        return result.returncode, {}, stderr
    reports = {t["table"]: t for t in json.loads(result.stdout)["tables"]}
    return result.returncode, reports, stderr


def test_verify_of_mysql_reports_exactly_the_rows_changed_behind_the_pipelines_back(
    mysql_db,  # noqa: F811
    kafka,
    spark,
    tmp_path,
) -> None:
    conn, name = mysql_db
    rng = random.Random(23)
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_executed")
        (start,) = cur.fetchone()
        cur.execute(ALL_TYPES)
        # JSON stays NULL: the lake keeps a MySQL JSON value as orjson's text (a string
        # value unquoted), which is not MySQL's own text of it; verify reports those rows.
        insert_random(cur, rng, range(1, 301), [c for c in COLUMNS if c != "j"])
        # A composite key that is not an integer: hash buckets instead of value ranges. Its
        # doubles have few digits: MySQL's CAST(double AS CHAR) keeps at most 22 characters
        # (-1.4074705188261364e113 reads -1.407470518826136e113), so a double that needs
        # 17 digits is reported different (see docs/spark.md).
        cur.execute(
            "CREATE TABLE k (name VARCHAR(20) CHARACTER SET latin1, at DATETIME(6), v DOUBLE,"
            " note VARCHAR(10), PRIMARY KEY (name, at))"
        )
        for i in range(200):
            cur.execute("INSERT INTO k VALUES (%s, %s, %s, %s)",
                        (f"n{i % 37}é", f"2026-01-{1 + i % 28:02d} 10:00:00.{i:06d}",
                         round(rng.uniform(-1e6, 1e6), 6),
                         None if i % 5 == 0 else f"x{i}"))  # fmt: skip
    lake, checkpoints, jar = tmp_path / "lake", tmp_path / "ckpt", _connector_j()
    replicad = KafkaReplicad(
        tmp_path / "replicad", server_id=7311, prefix=f"w{uuid.uuid4().hex[:8]}",
        kafka=kafka, port=MYSQL_PORT, db=name,
        start="{gtid: '" + start.replace("\n", "") + "'}",  # the tables' whole history
        extra_yaml=(
            f"spark: {{lake_path: '{lake}', checkpoint_path: '{checkpoints}', buckets: 4, "
            f"tables: '{name}\\.(t|k)', verify_ranges: 6, discover_s: 1.0, "
            f"verify_timeout_s: 120, verify_rounds: 2, "
            f"mysql_jdbc_driver_jar: '{jar}'}}\n"
        ),
    )  # fmt: skip
    replicad.start()
    try:
        _wait_caught_up(replicad, timeout=120)
        config = load_config(replicad.config)
        Materialize(spark, config, once=True).run()

        # 1. Equal: every type's text agrees on both sides (exit 0).
        code, reports, stderr = _verify(replicad)
        assert code == 0, (code, stderr, {t: _by_kind(r) for t, r in reports.items()})
        assert sorted(reports) == sorted([f"{name}.k", f"{name}.t"])
        # MariaDB Connector/J reads MySQL too once the account's caching_sha2 cache is warm:
        # only the job's own word shows which driver read it.
        assert f'"driver": "com.mysql.cj.jdbc.Driver", "jar": "{jar}"' in stderr, stderr
        for table, rows in ((f"{name}.t", 300), (f"{name}.k", 200)):
            report = reports[table]
            assert report["equal"], report
            assert (report["rows_mysql"], report["rows_lake"]) == (rows, rows)

        # 2. Changes the binlog never sees, beside ordinary ones it does (exit 1).
        with conn.cursor() as cur:
            cur.execute("SELECT dbl FROM t WHERE id = 7")
            assert cur.fetchone()[0] != -7.5  # (dbl + 1 may equal dbl: 1e300 is a value here)
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("UPDATE t SET dbl = -7.5, dt6 = '2020-02-02 02:02:02.5' WHERE id = 7")
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
        _wait_caught_up(replicad, timeout=120)
        Materialize(spark, config, once=True).run()
        code, reports, stderr = _verify(replicad)
        assert code == 1, (code, stderr, reports)
        report_t, report_k = reports[f"{name}.t"], reports[f"{name}.k"]
        assert _by_kind(report_t) == {
            "missing": [("1000",)],
            "extra": [("150",)],
            "different": [(("7",), ("dbl", "dt6")), (("8",), ("g",))],
        }, report_t
        assert report_t["counts"] == {"missing": 1, "extra": 1, "different": 2, "unsettled": 0}
        assert 1 <= report_t["ranges_differing"] < report_t["ranges"]  # not every range re-read
        assert _by_kind(report_k) == {
            "missing": [],
            "extra": [("n4é", "2026-01-05 10:00:00.000004")],
            "different": [(("n3é", "2026-01-04 10:00:00.000003"), ("note",))],
        }, report_k
    finally:
        assert replicad.stop() == 0
