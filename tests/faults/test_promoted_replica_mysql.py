"""The promoted-replica tests of test_promoted_replica.py on MySQL 9.7: two private mysqld
(tests/helpers/mysql_chain.py) in a GTID auto-position chain; `source.hosts` lists both, and
replicad continues on the promoted replica by GTID set (COM_BINLOG_DUMP_GTID), or refuses a
replica that lacks GTIDs already published, naming the missing set.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.test_promoted_replica import _repeated
from tests.helpers.daemon_process import DaemonProcess, wait_for
from tests.helpers.mariadb_run import assert_converged, random_workload
from tests.helpers.mysql_chain import (
    PrivateMySQL,
    caught_up,
    follow,
    promote,
    scalar,
    stop_following,
)

pytestmark = pytest.mark.faults


@pytest.fixture
def chain() -> Iterator[tuple[PrivateMySQL, PrivateMySQL]]:
    primary, replica = PrivateMySQL(server_id=11), PrivateMySQL(server_id=12)
    try:
        primary.up()
        replica.up()
        follow(replica, primary)
        yield primary, replica
    finally:
        replica.down()
        primary.down()


@pytest.fixture
def db(chain: tuple[PrivateMySQL, PrivateMySQL]) -> str:
    primary, replica = chain
    name = f"f_{os.getpid()}_{int(time.time() * 1000) % 100000}"
    conn = primary.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
            cur.execute(f"CREATE TABLE {name}.a (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT)")
            cur.execute(
                f"CREATE TABLE {name}.b (k VARCHAR(20) PRIMARY KEY, d DECIMAL(10,2), t DATETIME(3))"
            )
    finally:
        conn.close()
    caught_up(replica, primary)
    return name


def _replicad(tmp: Path, server_id: int, *servers: PrivateMySQL) -> DaemonProcess:
    hosts = ", ".join(f"'127.0.0.1:{server.port}'" for server in servers)
    return DaemonProcess(
        tmp,
        pipeline="test",
        source_yaml=(
            f"  hosts: [{hosts}]\n  user: repl\n  server_id: {server_id}\n  start: latest\n"
            "  heartbeat_s: 1\n  reconnect: {initial_s: 0.05, max_s: 0.5}\n"
        ),
        password="repl",
    )


def _writes(server: PrivateMySQL, db: str, transactions: int, seed: int) -> None:
    conn = server.connect()
    try:
        random_workload(conn, db, transactions=transactions, seed=seed)
    finally:
        conn.close()


def test_promoted_mysql_replica_continues_the_stream(chain, db: str, tmp_path: Path) -> None:
    primary, replica = chain
    replicad = _replicad(tmp_path, 5421, primary, replica)
    replicad.start()
    try:
        _writes(primary, db, transactions=60, seed=21)
        caught_up(replica, primary)
        primary.kill()
        promote(replica)
        _writes(replica, db, transactions=60, seed=22)
        conn = replica.connect()
        try:
            assert_converged(replicad, conn, db, timeout=90)  # type: ignore[arg-type]
        finally:
            conn.close()
    finally:
        code = replicad.stop()
    assert code == 0
    failovers = [e for e in replicad.log_events() if e["event"] == "source_failover"]
    assert [(e["host"], e["port"]) for e in failovers] == [("127.0.0.1", replica.port)]
    assert failovers[0]["previous"] == f"127.0.0.1:{primary.port}"
    assert _repeated(replicad.changes(), db) == 0
    uuid = scalar(replica, "SELECT @@server_uuid")
    gtids = {c["source"]["gtid"] for c in replicad.changes() if c["source"]["db"] == db}
    assert any(g.startswith(uuid) for g in gtids), "no row written on the promoted replica"


def test_lagging_mysql_replica_is_refused_naming_the_missing_gtids(
    chain, db: str, tmp_path: Path
) -> None:
    primary, replica = chain
    replicad = _replicad(tmp_path, 5422, primary, replica)
    replicad.start()
    _writes(primary, db, transactions=10, seed=23)
    caught_up(replica, primary)
    stop_following(replica)  # it misses the next writes
    _writes(primary, db, transactions=10, seed=24)
    conn = primary.connect()
    try:
        assert_converged(replicad, conn, db, timeout=60)  # type: ignore[arg-type]
    finally:
        conn.close()
    published = scalar(primary, "SELECT @@gtid_executed").replace("\n", "")
    had = scalar(replica, "SELECT @@gtid_executed").replace("\n", "")
    missing = scalar(primary, f"SELECT GTID_SUBTRACT('{published}', '{had}')").replace("\n", "")
    assert missing, "the replica missed nothing: the test would prove nothing"
    primary.kill()
    assert replicad.proc is not None
    wait_for(lambda: replicad.proc.poll() is not None, 60, "replicad to refuse the replica")
    assert replicad.proc.returncode == 78
    refusals = [e for e in replicad.log_events() if e["event"] == "source_candidate_refused"]
    assert refusals and refusals[-1]["missing"] == missing
    assert f"127.0.0.1:{replica.port} lacks {missing}" in replicad.err.read_text()
    assert replicad.count("source_failover") == 0
