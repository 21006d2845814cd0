"""A consistent cut across Delta lake tables (`replicad spark cut`, replicad/spark/cut.py).

Transfers between two tables (each transaction takes an amount from a row of accounts_a and
gives it to a row of accounts_b, or back) run in bursts while the daemon publishes and the
Delta job (Spark's Kafka source, a MERGE per batch, each table its own query) runs. After each
transaction the test records SHOW MASTER STATUS and what both tables hold then. Afterwards
every recorded position is cut: where the cut finds a version for every table, the tables read
at those versions by delta-rs keep the sum and equal the recorded state; where it finds none,
it says which table and why. `latest` is cut too.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pymysql
import pytest

from replicad.spark.cut import CutError, cut_lake, parse_position
from tests.helpers.daemon_process import ROOT
from tests.helpers.kafka_run import KafkaReplicad, wait_caught_up
from tests.helpers.spark_jars import spark_jars_dir

pytestmark = [pytest.mark.integration, pytest.mark.serial]

ROWS = 8
START = 1000
TOTAL = 2 * ROWS * START
CLI = (sys.executable, "-m", "replicad.cli", "spark")
State = tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]


def _position(conn: pymysql.connections.Connection) -> str:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return f"{file}:{pos}"


def _transfer(conn: pymysql.connections.Connection, rnd: random.Random, books: dict) -> None:
    """One transaction moving an amount between a row of each table, mirrored in `books`."""
    giver, taker = rnd.sample(["accounts_a", "accounts_b"], 2)
    source, target, amount = rnd.randrange(ROWS), rnd.randrange(ROWS), rnd.randrange(1, 50)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {giver} SET bal = bal - %s WHERE id = %s", (amount, source))
        cur.execute(f"UPDATE {taker} SET bal = bal + %s WHERE id = %s", (amount, target))
    conn.commit()
    books[giver][source] -= amount
    books[taker][target] += amount


def _state(books: dict) -> State:
    return tuple(sorted(books["accounts_a"].items())), tuple(sorted(books["accounts_b"].items()))


def _read(found: dict[str, Any], name: str) -> State:
    """Both tables as delta-rs reads them at the cut's versions."""
    from deltalake import DeltaTable

    tables = []
    for table in ("accounts_a", "accounts_b"):
        at = found["tables"][f"{name}.{table}"]
        rows = DeltaTable(at["path"], version=at["version"]).to_pyarrow_table().to_pylist()
        tables.append(tuple(sorted((r["id"], r["bal"]) for r in rows)))
    return tables[0], tables[1]


def _newest(lake: Path, name: str) -> State:
    """Both tables at their newest versions, as a reader without the cut sees them."""
    from deltalake import DeltaTable

    tables = []
    for table in ("accounts_a", "accounts_b"):
        path = lake / name / table
        rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist() if path.exists() else []
        tables.append(tuple(sorted((r["id"], r["bal"]) for r in rows)))
    return tables[0], tables[1]


def _sum(state: State) -> int:
    return sum(b for _, b in state[0] + state[1])


def _wait_lake(lake: Path, name: str, state: State, job: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 300
    while _newest(lake, name) != state:
        assert job.poll() is None, log.read_text(errors="replace")[-4000:]
        assert time.monotonic() < deadline, "the lake did not catch up in 300 s"
        time.sleep(0.5)


def _start_job(config: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, "materialize", "-c", str(config), "--master", "local[2]"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )


def _wait_log(log: Path, text: str, count: int, job: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while log.read_text(errors="replace").count(text) < count:
        assert job.poll() is None, log.read_text(errors="replace")[-4000:]
        assert time.monotonic() < deadline, f"{count} x {text!r} in the job's log"
        time.sleep(0.5)


def test_every_cut_keeps_the_sum_and_equals_select_at_its_position(db, kafka, tmp_path) -> None:
    conn, name = db
    lake = tmp_path / "lake"
    replicad = KafkaReplicad(
        tmp_path / "replicad",
        server_id=7398,
        prefix=f"c{uuid.uuid4().hex[:8]}",
        kafka=kafka,
        db=name,
        kafka_yaml="topics: {partitions: 2}",
        extra_yaml=(
            f"spark: {{lake_jars: '{spark_jars_dir()}', lake_path: '{lake}', "
            f"checkpoint_path: '{tmp_path / 'ckpt'}', trigger_s: 1.0}}\n"
        ),
    )
    log = tmp_path / "spark.log"
    rnd = random.Random(33)
    books = {t: dict.fromkeys(range(ROWS), START) for t in ("accounts_a", "accounts_b")}
    recorded: list[tuple[str, State]] = []
    replicad.start()
    try:
        with conn.cursor() as cur:
            for table in ("accounts_a", "accounts_b"):
                cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, bal INT NOT NULL)")
                cur.executemany(
                    f"INSERT INTO {table} VALUES (%s, %s)", [(i, START) for i in range(ROWS)]
                )
        conn.commit()
        wait_caught_up(replicad)
        job = _start_job(replicad.config, log)
        try:
            _wait_log(log, "lake_batch_applied", 2, job, timeout=300)
            torn = 0  # newest versions read while a burst ran that break the sum
            for _burst in range(3):
                for _ in range(rnd.randrange(10, 20)):  # ~2 s: batches end inside bursts
                    _transfer(conn, rnd, books)
                    recorded.append((_position(conn), _state(books)))
                    torn += _sum(_newest(lake, name)) != TOTAL
                    time.sleep(0.1)
                # The lake caught up with the burst: its end is a batch boundary of both.
                _wait_lake(lake, name, _state(books), job, log)
            # The last burst's end is proven by the tables' next batches: a transfer whose
            # batch samples a stored position past it (a sample's stored position may
            # predate the burst's end, then another transfer).
            last = recorded[-1][0]
            proving = len(recorded)  # the transfers recorded from here on are past `last`
            for _ in range(4):
                _transfer(conn, rnd, books)
                recorded.append((_position(conn), _state(books)))
                wait_caught_up(replicad)
                _wait_lake(lake, name, _state(books), job, log)
                try:
                    cut_lake(lake, last)
                    break
                except CutError:
                    continue
            cut_lake(lake, last)
        finally:
            job.send_signal(signal.SIGTERM)
            assert job.wait(120) == 0, log.read_text(errors="replace")[-4000:]
    finally:
        assert replicad.stop() == 0

    found_at = 0
    for index, (position, expected) in enumerate(recorded):
        try:
            found = cut_lake(lake, position)
        except CutError as exc:
            if index >= proving and "has not proven the table complete" in str(exc):
                continue  # a transfer after `last`: no later batch has to prove its end
            # a batch of some table holds both sides of the position
            assert "both sides" in str(exc) and f"table={name}.accounts_" in str(exc)
            continue
        found_at += 1
        state = _read(found, name)
        assert _sum(state) == TOTAL, (position, found)
        assert state == expected, (position, found)
    assert found_at >= 3, f"only {found_at} of {len(recorded)} recorded positions have a cut"

    # latest, through the command: the state at the last recorded position before it.
    result = subprocess.run(
        [*CLI, "cut", "-c", str(replicad.config), "--at", "latest"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    state = _read(found, name)
    assert _sum(state) == TOTAL
    # The state after the last transfer recorded at or before latest (or the one after it:
    # SHOW MASTER STATUS ran after the commit, when other tests' writes may follow it).
    at = parse_position(found["position"])
    before = [i for i, (p, _) in enumerate(recorded) if parse_position(p) <= at]
    assert before, (found, recorded[0])
    assert state in [s for _, s in recorded[before[-1] : before[-1] + 2]], found
    print(
        f"cuts: {found_at} of {len(recorded)} positions; latest {found['position']}; "
        f"{torn} of the newest versions read during bursts broke the sum"
    )
