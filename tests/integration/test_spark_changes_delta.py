"""`replicad spark changes`: every change of the table, read
by Spark's Kafka source, appended once to a Delta table partitioned by commit date; read by
delta-rs without Spark or replicad. The oracle is the workload itself (how many rows each
statement changed) and the topic (every record once, by its offset), across two runs, an
ALTER between them (a new column merged into the table's schema) and a TRUNCATE.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.kafka_run import wait_caught_up
from tests.integration.test_spark_open_lake import _acc_pipeline, _insert, _spark_cli

pytestmark = [pytest.mark.integration, pytest.mark.serial]


def _changes_once(config: Path, log: Path) -> None:
    result = _spark_cli(config, log, "changes", "--master", "local[2]", "--once")
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-4000:]


def _history(path: Path) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def test_changes_are_appended_once_to_a_delta_table_by_date(db, kafka, tmp_path) -> None:
    conn, name = db
    history = tmp_path / "changes"
    replicad, _ = _acc_pipeline(
        conn, name, kafka, tmp_path, 7398, spark_yaml=f", changes_path: '{history}'"
    )
    path = history / f"db={name}" / "table=acc"
    log = tmp_path / "spark.log"
    try:
        with conn.cursor() as cur:
            _insert(cur, range(1, 101), "c")
            conn.commit()
            updated = cur.execute("UPDATE acc SET v = v + 1 WHERE id % 4 = 0")
            deleted = cur.execute("DELETE FROM acc WHERE id % 10 = 0")
        conn.commit()
        wait_caught_up(replicad)
        _changes_once(replicad.config, log)
        first = _history(path)
        assert Counter(r["op"] for r in first) == {"c": 100, "u": updated, "d": deleted}

        with conn.cursor() as cur:
            cur.execute("ALTER TABLE acc ADD COLUMN extra VARCHAR(10) DEFAULT 'x'")
            cur.execute("UPDATE acc SET extra = 'y' WHERE id < 5")
            cur.execute("TRUNCATE TABLE acc")
            _insert(cur, range(500, 520), "n")
        conn.commit()
        wait_caught_up(replicad)
        _changes_once(replicad.config, log)
        rows = _history(path)
    finally:
        assert replicad.stop() == 0
    ops = Counter(r["op"] for r in rows)
    assert ops == {"c": 120, "u": updated + 4, "d": deleted, "t": ops["t"]} and ops["t"] >= 1
    offsets = Counter((r["partition"], r["offset"]) for r in rows)
    assert max(offsets.values()) == 1, "a topic record appended twice"
    assert {r["date"] for r in rows} == {r["commit_ts"].date() for r in rows}
    assert all(isinstance(r["date"], dt.date) for r in rows)
    after_alter = [r for r in rows if r["op"] == "u" and r["before"]["extra"] == "x"]
    assert sorted((r["after"]["id"], r["after"]["extra"]) for r in after_alter) == [
        (i, "y") for i in range(1, 5)
    ]
    assert (path / "_delta_log").is_dir() and any(
        p.name.startswith("date=") for p in path.iterdir()
    )
