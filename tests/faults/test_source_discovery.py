"""`source.discovery`: the servers to stream from are asked of a command before each
(re)connect, as an orchestrator would name the promoted primary. The static configuration
names only the old primary; the replica is reachable only through what the command prints.

The command is `cat` of a file the test rewrites, standing in for the orchestrator's answer
(the command itself is the real mechanism: replicad runs it and parses what it prints).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.test_primary_restart import PrivateMariaDB
from tests.faults.test_promoted_replica import _repeated, _writes, chain, db  # noqa: F401
from tests.helpers.daemon_process import DaemonProcess, wait_for
from tests.helpers.mariadb_chain import caught_up, kill, promote
from tests.helpers.mariadb_run import assert_converged

pytestmark = pytest.mark.faults


def _replicad(tmp: Path, primary: PrivateMariaDB, answer: Path) -> DaemonProcess:
    return DaemonProcess(
        tmp,
        pipeline="test",
        source_yaml=(
            f"  host: 127.0.0.1\n  port: {primary.port}\n"
            f"  discovery: {{command: [cat, '{answer}'], timeout_s: 2}}\n"
            "  user: repl\n  server_id: 5411\n  start: latest\n"
            "  heartbeat_s: 1\n  reconnect: {initial_s: 0.05, max_s: 0.5}\n"
        ),
        password="repl",
    )


def test_discovery_names_the_promoted_replica(chain, db: str, tmp_path: Path) -> None:  # noqa: F811
    primary, replica = chain
    answer = tmp_path / "primary.txt"
    answer.write_text(f"# the orchestrator's view\n127.0.0.1:{primary.port}\n")
    replicad = _replicad(tmp_path, primary, answer)
    replicad.start()
    try:
        _writes(primary, db, transactions=40, seed=11)
        caught_up(replica, primary)
        kill(primary)
        # A broken answer keeps the last list: replicad goes on trying the dead primary.
        answer.write_text("no-port-here\n")
        wait_for(lambda: replicad.count("source_discovery_failed") > 0, 30, "a failed discovery")
        assert replicad.count("source_failover") == 0
        promote(replica)
        answer.write_text(f"127.0.0.1:{replica.port}\n")
        _writes(replica, db, transactions=40, seed=12)
        conn = replica.connect()
        try:
            assert_converged(replicad, conn, db, timeout=60)  # type: ignore[arg-type]
        finally:
            conn.close()
    finally:
        code = replicad.stop()
    assert code == 0
    events = replicad.log_events()
    failed = [e for e in events if e["event"] == "source_discovery_failed"]
    assert "line 1 is not host:port" in failed[0]["error"]
    assert failed[0]["keeping"] == [f"127.0.0.1:{primary.port}"]
    failovers = [e for e in events if e["event"] == "source_failover"]
    assert [(e["host"], e["port"]) for e in failovers] == [("127.0.0.1", replica.port)]
    assert failovers[0]["previous"] == f"127.0.0.1:{primary.port}"
    assert _repeated(replicad.changes(), db) == 0
    gtids = {c["source"]["gtid"] for c in replicad.changes() if c["source"]["db"] == db}
    assert any(g.startswith("0-2-") for g in gtids), "no row written on the promoted replica"
