"""The primary dies and a replica is promoted: `source.hosts` lists both, and replicad
continues on the replica by GTID, or refuses it when it lacks GTIDs already published.

Two private MariaDB servers (scripts/services.sh with private state dirs and ports,
REPLICAD_MARIADB_SERVER_ID and REPLICAD_MARIADB_LOG_SLAVE_UPDATES) in a replication chain:
the replica follows the primary with MASTER_USE_GTID=slave_pos and logs what it applies, so
its binlog holds the primary's GTIDs. The same on MySQL: test_promoted_replica_mysql.py.

What is guaranteed at the switch: the stream resumes after the last transaction it handed
over, and the pipeline skips the rows of the transaction in flight it already delivered
(`Reconnected`), within one process. So the stdout sink holds every row exactly once. The
first test makes the switch land inside a 50,000-row transaction (replicad paused while it
is written, so the primary dies before replicad has read it all) and asserts that the
pipeline skipped the rows it had delivered.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.test_primary_restart import PrivateMariaDB
from tests.helpers.daemon_process import DaemonProcess, wait_for
from tests.helpers.mariadb_chain import (
    caught_up,
    follow,
    kill,
    private_mariadb,
    promote,
    scalar,
    stop_following,
)
from tests.helpers.mariadb_run import assert_converged, random_workload

pytestmark = pytest.mark.faults


@pytest.fixture
def chain(tmp_path_factory) -> Iterator[tuple[PrivateMariaDB, PrivateMariaDB]]:
    primary = private_mariadb(tmp_path_factory.mktemp("primary"), server_id=1, replica=False)
    replica = private_mariadb(tmp_path_factory.mktemp("replica"), server_id=2, replica=True)
    try:
        primary.up()
        replica.up()
        follow(replica, primary)
        yield primary, replica
    finally:
        replica.down()
        primary.down()


@pytest.fixture
def db(chain: tuple[PrivateMariaDB, PrivateMariaDB]) -> str:
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


def _replicad(tmp: Path, server_id: int, *servers: PrivateMariaDB) -> DaemonProcess:
    hosts = ", ".join(f"'127.0.0.1:{server.port}'" for server in servers)
    return DaemonProcess(
        tmp,
        pipeline="test",
        source_yaml=(
            f"  hosts: [{hosts}]\n  user: repl\n  server_id: {server_id}\n  start: latest\n"
            "  heartbeat_s: 1\n  reconnect: {initial_s: 0.05, max_s: 0.5}\n"
            # small parts: a transaction in flight at the switch has parts delivered already
            "  unit_part_bytes: 2048\n"
        ),
        password="repl",
    )


def _repeated(changes: list[dict[str, Any]], db: str) -> int:
    """Row changes delivered more than once. Coordinates cannot say it (file:pos differ per
    server, and `row` counts within one rows event), so a change is its GTID and content:
    the workload never makes the same change twice in one transaction (random 64-bit values;
    an UPDATE or upsert that changes nothing is not logged)."""
    seen: set[tuple[str, ...]] = set()
    repeated = 0
    for change in changes:
        source = change["source"]
        if source["db"] != db:
            continue
        key = (
            source["gtid"],
            source["table"],
            change["op"],
            json.dumps(change["before"], sort_keys=True),
            json.dumps(change["after"], sort_keys=True),
        )
        repeated += key in seen
        seen.add(key)
    return repeated


def _writes(server: PrivateMariaDB, db: str, transactions: int, seed: int) -> None:
    conn = server.connect()
    try:
        random_workload(conn, db, transactions=transactions, seed=seed)
    finally:
        conn.close()


def _big_transaction(server: PrivateMariaDB, db: str, rows: int) -> None:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.executemany(
                f"INSERT INTO `{db}`.a VALUES (%s, 'big', %s)",
                [(1000 + i, i) for i in range(rows)],
            )
            cur.execute("COMMIT")
    finally:
        conn.close()


def test_promoted_replica_continues_the_stream(chain, db: str, tmp_path: Path) -> None:
    primary, replica = chain
    replicad = _replicad(tmp_path, 5401, primary, replica)
    replicad.start()
    try:
        _writes(primary, db, transactions=60, seed=1)
        # Paused, replicad reads the big transaction only after the primary is gone: it has
        # delivered the parts its socket buffer held when the stream breaks mid-transaction.
        replicad.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        _big_transaction(primary, db, rows=50_000)
        caught_up(replica, primary)  # asynchronous replication: nothing in flight is lost
        kill(primary)
        replicad.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        promote(replica)
        _writes(replica, db, transactions=60, seed=2)
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
    (resumed,) = [e for e in replicad.log_events() if e["event"] == "source_resumed"]
    assert resumed["in_transaction"] and resumed["skip_rows"] > 0, resumed
    assert _repeated(replicad.changes(), db) == 0
    gtids = {c["source"]["gtid"] for c in replicad.changes() if c["source"]["db"] == db}
    assert any(g.startswith("0-2-") for g in gtids), "no row written on the promoted replica"


def test_lagging_candidate_is_refused_naming_the_missing_gtids(
    chain, db: str, tmp_path: Path
) -> None:
    primary, replica = chain
    replicad = _replicad(tmp_path, 5402, primary, replica)
    replicad.start()
    _writes(primary, db, transactions=10, seed=3)
    caught_up(replica, primary)
    stop_following(replica)  # it misses the next writes
    _writes(primary, db, transactions=10, seed=4)
    conn = primary.connect()
    try:
        assert_converged(replicad, conn, db, timeout=60)  # type: ignore[arg-type]
    finally:
        conn.close()
    had = int(scalar(replica, "SELECT @@gtid_binlog_pos").rsplit("-", 1)[1])
    published = int(scalar(primary, "SELECT @@gtid_binlog_pos").rsplit("-", 1)[1])
    kill(primary)
    assert replicad.proc is not None
    wait_for(lambda: replicad.proc.poll() is not None, 60, "replicad to refuse the replica")
    assert replicad.proc.returncode == 78
    missing = f"0-1-{had + 1}..0-1-{published}"
    refusals = [e for e in replicad.log_events() if e["event"] == "source_candidate_refused"]
    assert refusals and refusals[-1]["missing"] == missing
    assert f"127.0.0.1:{replica.port} lacks {missing}" in replicad.err.read_text()
    assert replicad.count("source_failover") == 0
