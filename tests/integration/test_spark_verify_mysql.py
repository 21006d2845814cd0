"""`replicad spark verify` against the real Oracle MySQL 9.7 through MySQL Connector/J (from
Maven Central: `scripts/services.sh spark-jars`), as the caching_sha2_password user `repl`.
The lake is built by the `materialize` job from replicad's change topics of MySQL's stream;
the oracle, as in test_spark_verify.py (MariaDB), is what the test changed behind the
pipeline's back with `sql_log_bin=0`: verify must name exactly those keys and columns.

The command runs as `replicad spark verify` (its own Spark session): the tests' shared session
was started with MariaDB Connector/J only, and a JVM's classpath is fixed at its start.

The values are the ones MySQL prints differently from a naive text of them: random JSON
documents (key orders MySQL changes, number spellings it rewrites, escapes, top-level strings
and `null`), doubles and floats of random bits (MySQL's `CAST(double AS CHAR)` rounds a text
longer than 22 characters).
"""

from __future__ import annotations

import json
import math
import random
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicad.config import load_config
from replicad.spark.canonical import mysql_double_text, mysql_text
from replicad.spark.jobs import Materialize
from tests.helpers.all_types import ALL_TYPES, COLUMNS, random_literal
from tests.helpers.daemon_process import ROOT
from tests.helpers.kafka_run import KafkaReplicad
from tests.helpers.mysql import MYSQL_PORT, connect_root, mysql, mysql_db  # noqa: F401
from tests.helpers.spark_jars import spark_jars_dir
from tests.integration.test_mysql_snapshots import _wait_caught_up
from tests.integration.test_spark_verify import _by_kind, _float_bits

pytestmark = [pytest.mark.integration, pytest.mark.serial]


def _json_number(rng: random.Random) -> str:
    """A JSON number in one of the spellings MySQL reads differently from how it prints them."""
    return rng.choice(
        [
            "1.0",
            "1e2",
            "1E+2",
            "-0",
            "-0.0",
            "0.5e-3",
            "100",
            "-7",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775809",
            "123456789012345678901234567890",
            "1e300",
            "-2.5e-300",
            _float_bits(rng),
            _float_bits(rng),
            str(rng.randint(-(2**63), 2**63 - 1)),
        ]
    )


def _json_string(rng: random.Random) -> str:
    """A JSON string literal: quotes, backslashes, controls, escapes MySQL rewrites."""
    pieces = [
        "a",
        "b",
        "ab",
        "é",
        "日本",
        "😀",
        '\\"',
        "\\\\",
        "\\n",
        "\\t",
        "\\u0001",
        "\\u2028",
        "\\/",
        "\\u00e9",
        " ",
        "\x7f",
    ]
    return '"' + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6))) + '"'


def _json_document(rng: random.Random, depth: int = 0) -> str:
    """Random JSON text: objects with keys MySQL reorders (and repeats), arrays, scalars,
    random whitespace."""
    space = rng.choice(["", " ", "\n  "])
    pick = rng.random() if depth < 3 else rng.random() * 0.6
    if pick < 0.15:
        return _json_string(rng)
    if pick < 0.35:
        return _json_number(rng)
    if pick < 0.45:
        return rng.choice(["true", "false", "null"])
    if pick < 0.7:
        items = [_json_document(rng, depth + 1) for _ in range(rng.randint(0, 4))]
        return "[" + f",{space}".join(items) + "]"
    members = [
        f"{_json_string(rng)}{space}:{space}{_json_document(rng, depth + 1)}"
        for _ in range(rng.randint(0, 5))
    ]
    return "{" + f",{space}".join(members) + "}"


# Values first, then random ones: a JSON null document, a top-level string, keys MySQL
# reorders with doubles it prints as 1.0 and -0.0; the double edges.
_FIXED_JSON = ["null", '"top-level string"', '{"bb": 1e2, "a": {"dd": 1.0, "c": -0.0}}', "-0"]
_FIXED_DOUBLES = ["-0.0", "5e-324", "1.7976931348623157e308", "-1.4074705188261364e113"]


def _float32_bits(rng: random.Random) -> str:
    while True:
        value = struct.unpack("<f", rng.randbytes(4))[0]
        if value == value and abs(value) != float("inf"):
            return repr(value)  # the float32 exactly, as a double's shortest text


def _insert_rows(cur, rng: random.Random, ids: range) -> None:
    """Every ALL_TYPES column: j, dbl and fl as parameters (random JSON text, random bits),
    the others as all_types' literals."""
    others = [c for c in COLUMNS if c not in ("j", "dbl", "fl")]
    for n, i in enumerate(ids):
        j = _FIXED_JSON[n] if n < len(_FIXED_JSON) else _json_document(rng)
        dbl = _FIXED_DOUBLES[n] if n < len(_FIXED_DOUBLES) else _float_bits(rng)
        fl = _float32_bits(rng)
        j, dbl, fl = (None if rng.random() < 0.05 else v for v in (j, dbl, fl))
        literals = ", ".join(random_literal(c, rng) for c in others)
        cur.execute(
            f"INSERT INTO t (id, j, dbl, fl, {', '.join(others)}) VALUES (%s, %s, %s, %s, "
            f"{literals})",
            (i, j, dbl, fl),
        )


def _connector_j() -> Path:
    """MySQL Connector/J's jar, fetched with the Spark jobs' jars if missing."""
    jars = sorted(Path(spark_jars_dir()).glob("mysql-connector-j-*.jar"))
    assert len(jars) == 1, jars
    return jars[0]


def _verify(replicad: KafkaReplicad) -> tuple[int, dict[str, dict], str]:
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
        _insert_rows(cur, rng, range(1, 301))
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
                    _float_bits(rng),
                    None if i % 5 == 0 else f"x{i}",
                ),
            )
    lake, checkpoints, jar = tmp_path / "lake", tmp_path / "ckpt", _connector_j()
    replicad = KafkaReplicad(
        tmp_path / "replicad",
        server_id=7311,
        prefix=f"w{uuid.uuid4().hex[:8]}",
        kafka=kafka,
        port=MYSQL_PORT,
        db=name,
        start="{gtid: '" + start.replace("\n", "") + "'}",  # the tables' whole history
        extra_yaml=(
            f"spark: {{lake_path: '{lake}', checkpoint_path: '{checkpoints}', "
            f"lake_jars: '{spark_jars_dir()}', "
            f"tables: '{name}\\.(t|k)', verify_ranges: 6, discover_s: 1.0, "
            f"verify_timeout_s: 120, verify_rounds: 2, "
            f"mysql_jdbc_driver_jar: '{jar}'}}\n"
        ),
    )
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
            cur.execute(
                "UPDATE t SET g = ST_GeomFromText('POINT(1 2)', 4326),"
                """ j = '{"hidden": true}' WHERE id = 8"""
            )
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
            "different": [(("7",), ("dbl", "dt6")), (("8",), ("g", "j"))],
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


_CONNECTION: list = []


@settings(max_examples=500, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double_text_is_what_mysql_computes_and_reads_back(value: float) -> None:
    """verify's SQL for a MySQL DOUBLE (canonical.mysql_text), run by MySQL 9.7, gives the
    Spark side's text, and that text reads back as the same double (sign of zero too)."""
    if not _CONNECTION:
        _CONNECTION.append(connect_root())
    sql = mysql_text({"name": "v", "type": "double"}, mariadb=False)
    with _CONNECTION[0].cursor() as cur:
        cur.execute(f"SELECT {sql} FROM (SELECT CAST(%s AS DOUBLE) AS v) AS x", (repr(value),))
        (text,) = cur.fetchone()
    assert mysql_double_text(value) == text
    assert float(text) == value and math.copysign(1, float(text)) == math.copysign(1, value)
