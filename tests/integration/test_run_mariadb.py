"""`replicad run` against the real MariaDB, as a subprocess: random DML across tables, the dump
thread killed mid-transaction, SIGTERM and SIGKILL restarts, ALTER TABLE between changes,
binlogs purged past the position, wrong credentials.

Oracle: fold the JSON-lines stream by primary key (c/u/d in order) and compare with the
tables' final state; count duplicates by source coordinates (file, pos, row).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pymysql
import pytest

from tests.helpers.daemon_process import wait_for
from tests.helpers.mariadb import MARIADB_PORT, connect_root
from tests.helpers.mariadb_run import (
    Replicad,
    assert_converged,
    duplicates,
    random_workload,
)
from tests.helpers.tcp_proxy import FaultProxy

pytestmark = [pytest.mark.integration, pytest.mark.serial]
ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------ tests


def test_random_dml_arrives_complete_in_commit_order(workdb, tmp_path) -> None:
    conn, db = workdb
    replicad = Replicad(tmp_path, server_id=5101)
    replicad.start()
    try:
        random_workload(conn, db, transactions=150, seed=1)
        assert_converged(replicad, conn, db)
    finally:
        assert replicad.stop() == 0
    changes = [c for c in replicad.changes() if c["source"]["db"] == db]
    assert duplicates(changes, db) == 0
    # Commit order: GTID sequence numbers never go backwards; rows of one transaction are
    # contiguous and numbered 0.. within each ROWS event.
    seqs = [int(c["source"]["gtid"].rsplit("-", 1)[1]) for c in changes]
    assert seqs == sorted(seqs)
    position = json.loads(replicad.position_file.read_text())["position"]
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        (server_gtid,) = cur.fetchone()
    assert position["mariadb_gtid"] == server_gtid, "the saved position is the last commit"
    assert any(e["event"] == "stopped" for e in replicad.log_events())


def _kill_dump_threads(user: str = "repl") -> int:
    root = connect_root()
    killed = 0
    with root.cursor() as cur:
        cur.execute(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE "
            "'Binlog Dump%%' AND USER = %s",
            (user,),
        )
        for (thread_id,) in cur.fetchall():
            try:
                cur.execute(f"KILL {int(thread_id)}")
                killed += 1
            except pymysql.err.OperationalError:
                pass
    root.close()
    return killed


def _dump_threads(user: str = "repl") -> int:
    root = connect_root()
    with root.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE "
            "'Binlog Dump%%' AND USER = %s",
            (user,),
        )
        (count,) = cur.fetchone()
    root.close()
    return int(count)


def test_dump_thread_killed_while_streaming(workdb, tmp_path) -> None:
    """KILL the dump thread right after big commits, six times: replicad reconnects each
    time and the stream still folds to the tables' state without duplicates."""
    conn, db = workdb
    replicad = Replicad(tmp_path, server_id=5102)
    replicad.start()
    kills = 0
    try:
        with conn.cursor() as cur:
            for round_ in range(6):
                cur.execute("BEGIN")
                for i in range(300):
                    key = round_ * 1000 + i
                    cur.execute(f"INSERT INTO `{db}`.a VALUES (%s, %s, %s)", (key, "x" * 40, key))
                cur.execute("COMMIT")
                wait_for(lambda: _dump_threads() == 1, 20, "replicad's dump thread")
                kills += _kill_dump_threads()
                random_workload(conn, db, transactions=5, seed=round_)
        assert_converged(replicad, conn, db, timeout=60)
    finally:
        assert replicad.stop() == 0
    assert kills == 6
    assert len([e for e in replicad.log_events() if e["event"] == "source_resumed"]) >= 6
    assert duplicates(replicad.changes(), db) == 0


def test_connection_cut_mid_transaction_loses_and_repeats_nothing(workdb, tmp_path) -> None:
    """A TCP proxy cuts the dump connection after a random number of bytes, over and over,
    while big transactions stream: cuts land inside transactions (asserted), and the stream
    must still fold to the tables' state with no row delivered twice."""
    conn, db = workdb
    with FaultProxy("127.0.0.1", MARIADB_PORT) as proxy:
        # Transactions of ~20 kB handed on in 2 kB parts: a cut can land after rows of one
        # were published (the resume then skips them), as with a transaction over 1 MiB.
        replicad = Replicad(tmp_path, server_id=5107, port=proxy.port, unit_part_bytes=2048)
        replicad.start()
        proxy.cut_randomly(2_000, 60_000, seed=11)
        try:
            with conn.cursor() as cur:
                for round_ in range(8):
                    cur.execute("BEGIN")
                    cur.executemany(
                        f"INSERT INTO `{db}`.a VALUES (%s, %s, %s)",
                        [(round_ * 1000 + i, "y" * 30, i) for i in range(400)],
                    )
                    cur.execute(f"UPDATE `{db}`.a SET n = n + 1 WHERE MOD(id, 7) = 0")
                    cur.execute("COMMIT")
            wait_for(lambda: proxy.cuts >= 10, 60, "ten cuts")
            proxy.never_cut()
            assert_converged(replicad, conn, db, timeout=60)
        finally:
            assert replicad.stop() == 0
    resumes = [e for e in replicad.log_events() if e["event"] == "source_resumed"]
    assert any(e["skip_rows"] > 0 for e in resumes), "no cut landed inside a transaction"
    assert duplicates(replicad.changes(), db) == 0


def test_sigterm_and_sigkill_restarts(workdb, tmp_path) -> None:
    conn, db = workdb
    replicad = Replicad(tmp_path, server_id=5103)
    replicad.start()
    random_workload(conn, db, transactions=30, seed=7)
    assert_converged(replicad, conn, db)
    assert replicad.stop(signal.SIGTERM) == 0
    saved = json.loads(replicad.position_file.read_text())["position"]
    random_workload(conn, db, transactions=30, seed=8)  # written while replicad is down
    replicad.start()
    assert_converged(replicad, conn, db)
    assert duplicates(replicad.changes(), db) == 0, "a clean stop re-sends nothing"
    assert saved["pos"] >= 4

    # SIGKILL while a big transaction streams: only that transaction may repeat.
    before = len(replicad.changes())
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.executemany(
            f"INSERT INTO `{db}`.a VALUES (%s, %s, %s)", [(5000 + i, "big", i) for i in range(3000)]
        )
        cur.execute("COMMIT")
    wait_for(lambda: len(replicad.changes()) > before, 20, "the big transaction to start")
    replicad.stop(signal.SIGKILL)
    replicad.start()
    try:
        assert_converged(replicad, conn, db, timeout=60)
    finally:
        assert replicad.stop() == 0
    assert duplicates(replicad.changes(), db) <= 3000


def test_alter_table_between_changes_full_metadata(workdb, tmp_path) -> None:
    conn, db = workdb
    replicad = Replicad(tmp_path, server_id=5104)
    replicad.start()
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{db}`.a VALUES (1, 'before', 1)")
            cur.execute(f"ALTER TABLE `{db}`.a ADD COLUMN extra INT DEFAULT 7 FIRST")
            cur.execute(f"INSERT INTO `{db}`.a (id, v, n, extra) VALUES (2, 'after', 2, 8)")
            cur.execute(f"ALTER TABLE `{db}`.a DROP COLUMN v")
            cur.execute(f"UPDATE `{db}`.a SET n = 3 WHERE id = 2")
        wait_for(
            lambda: len([c for c in replicad.changes() if c["source"]["db"] == db]) >= 3,
            20,
            "three changes",
        )
    finally:
        replicad.stop()
    changes = [c for c in replicad.changes() if c["source"]["db"] == db]
    assert changes[0]["after"] == {"id": 1, "v": "before", "n": 1}
    assert list(changes[1]["after"]) == ["extra", "id", "v", "n"]
    assert changes[1]["after"] == {"extra": 8, "id": 2, "v": "after", "n": 2}
    assert changes[2]["before"] == {"extra": 8, "id": 2, "n": 2}
    assert changes[2]["after"] == {"extra": 8, "id": 2, "n": 3}


def test_wrong_password_is_a_clear_fatal_error(tmp_path) -> None:
    replicad = Replicad(tmp_path, server_id=5105, password="not-the-password")
    result = subprocess.run(
        [sys.executable, "-m", "replicad.cli", "run", "-c", str(replicad.config)],
        cwd=ROOT,
        env=replicad.env,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 78
    assert b"repl@127.0.0.1" in result.stderr and b"not-the-password" not in result.stderr


def test_purged_position_is_fatal_with_advice(workdb, tmp_path) -> None:
    conn, db = workdb
    replicad = Replicad(tmp_path, server_id=5106)
    replicad.start()
    random_workload(conn, db, transactions=3, seed=3)
    assert_converged(replicad, conn, db)
    assert replicad.stop() == 0
    # Pretend the stored position is in a binlog the primary no longer has.
    record = json.loads(replicad.position_file.read_text())
    record["position"] = {"file": "mariadb-bin.000000", "pos": 4}
    replicad.position_file.write_text(json.dumps(record))
    result = subprocess.run(
        [sys.executable, "-m", "replicad.cli", "run", "-c", str(replicad.config)],
        cwd=ROOT,
        env={**os.environ, "TEST_REPLICAD_PASSWORD": "repl"},
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 78, result.stderr
    assert b"purged" in result.stderr and b"mariadb-bin.000000" in result.stderr


def test_server_id_of_a_live_replica_is_refused(tmp_path) -> None:
    """Registering with the server_id of another live replica would cut that replica's
    stream; replicad refuses (when it may read SHOW SLAVE HOSTS) and exits 78."""
    import asyncio

    from replicad.protocol.transport import connect

    async def scenario() -> subprocess.CompletedProcess[bytes]:
        other = await connect("127.0.0.1", MARIADB_PORT, "root", "root")
        try:
            await other.register_replica(5299, host="other-replica")
            replicad = Replicad(tmp_path, server_id=5299, user="root", password="root")
            return await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "replicad.cli", "run", "-c", str(replicad.config)],
                cwd=ROOT,
                env={**os.environ, "TEST_REPLICAD_PASSWORD": "root"},
                capture_output=True,
                timeout=60,
            )
        finally:
            await other.close()

    result = asyncio.run(scenario())
    assert result.returncode == 78, result.stderr
    assert b"other-replica" in result.stderr and b"server_id 5299" in result.stderr
