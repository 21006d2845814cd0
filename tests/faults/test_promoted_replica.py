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

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.test_primary_restart import PrivateMariaDB
from tests.helpers.daemon_process import wait_for
from tests.helpers.failover import create_database, repeated, replicad_over, scalar, write
from tests.helpers.mariadb_chain import (
    caught_up,
    follow,
    kill,
    private_mariadb,
    promote,
    stop_following,
)
from tests.helpers.mariadb_run import assert_converged

pytestmark = pytest.mark.faults
# Small parts: a transaction in flight at the switch has parts delivered already.
SMALL_PARTS = "  unit_part_bytes: 2048\n"


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
    name = create_database(primary)
    caught_up(replica, primary)
    return name


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
    replicad = replicad_over(tmp_path, 5401, primary, replica, extra_yaml=SMALL_PARTS)
    replicad.start()
    try:
        write(primary, db, transactions=60, seed=1)
        # Paused, replicad reads the big transaction only after the primary is gone: it has
        # delivered the parts its socket buffer held when the stream breaks mid-transaction.
        replicad.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        _big_transaction(primary, db, rows=50_000)
        caught_up(replica, primary)  # asynchronous replication: nothing in flight is lost
        kill(primary)
        replicad.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        promote(replica)
        write(replica, db, transactions=60, seed=2)
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
    assert repeated(replicad.changes(), db) == 0
    gtids = {c["source"]["gtid"] for c in replicad.changes() if c["source"]["db"] == db}
    assert any(g.startswith("0-2-") for g in gtids), "no row written on the promoted replica"


def test_lagging_candidate_is_refused_naming_the_missing_gtids(
    chain, db: str, tmp_path: Path
) -> None:
    primary, replica = chain
    replicad = replicad_over(tmp_path, 5402, primary, replica, extra_yaml=SMALL_PARTS)
    replicad.start()
    write(primary, db, transactions=10, seed=3)
    caught_up(replica, primary)
    stop_following(replica)  # it misses the next writes
    write(primary, db, transactions=10, seed=4)
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
