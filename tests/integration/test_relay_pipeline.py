"""The pipeline through the relay log (`relay.enabled`), against the real MariaDB: a replicad
with the relay and one without read the same workload side by side and must publish the same
changes; restarts resume the relay where it ends; a relay that does not hold the stored
position is re-fetched from the primary."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from replicad.relay.manifest import load_manifest
from replicad.relay.reader import RelayReader
from tests.helpers.daemon_process import DaemonProcess, wait_for
from tests.helpers.mariadb import MARIADB_PORT
from tests.helpers.mariadb_run import Replicad, assert_converged, duplicates, random_workload

pytestmark = pytest.mark.integration


class RelayReplicad(DaemonProcess):
    def __init__(self, tmp: Path, *, server_id: int, relay_yaml: str = "") -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.relay_dir = tmp / "relay" / "test"  # <directory>/<pipeline>
        super().__init__(
            tmp,
            pipeline="test",
            source_yaml=(
                f"  host: 127.0.0.1\n  port: {MARIADB_PORT}\n  user: repl\n"
                f"  server_id: {server_id}\n  start: latest\n  heartbeat_s: 1\n"
                "  reconnect: {initial_s: 0.05, max_s: 0.5}\n"
            ),
            password="repl",
            extra_yaml=(
                f"relay:\n  enabled: true\n  directory: {self.relay_dir.parent}\n"
                f"  segment_bytes: 65536\n  fsync: transaction\n{relay_yaml}"
            ),
        )


def comparable(changes: list[dict[str, Any]], db: str) -> list[tuple[Any, ...]]:
    """What must be equal between two replicas of the same primary: every field of every
    change of `db` except when it was read."""
    out = []
    for change in changes:
        if change["source"]["db"] != db:
            continue
        source = dict(change["source"])
        source.pop("read_ms", None)
        published = {"ts_ms": None, "ts_us": None, "ts_ns": None}  # when it was published
        out.append(json.dumps({**change, "source": source, **published}, sort_keys=True))
    return out


def test_relay_publishes_exactly_what_the_direct_stream_does(workdb, tmp_path) -> None:
    conn, db = workdb
    relayed = RelayReplicad(tmp_path / "relayed", server_id=5201)
    (tmp_path / "direct").mkdir()
    direct = Replicad(tmp_path / "direct", server_id=5202)
    relayed.start()
    direct.start()
    try:
        random_workload(conn, db, transactions=200, seed=21)
        with conn.cursor() as cur:  # one transaction over several 64 KiB blocks and parts
            cur.execute("BEGIN")
            cur.executemany(
                f"INSERT INTO `{db}`.a VALUES (%s, %s, %s)",
                [(90_000 + i, "x" * 40, i) for i in range(4000)],
            )
            cur.execute("COMMIT")
        assert_converged(relayed, conn, db)
        assert_converged(direct, conn, db)
        # Retention runs on the pipeline's ticker (every 0.5 s) after a checkpoint: a fast
        # pipeline can converge within one checkpoint interval, before the ticker ran.
        wait_for(lambda: relayed.count("relay_segments_deleted") > 0, 10, "relay segments deleted")
    finally:
        assert relayed.stop() == 0
        assert direct.stop() == 0
    assert comparable(relayed.changes(), db) == comparable(direct.changes(), db)
    assert duplicates(relayed.changes(), db) == 0
    manifest = load_manifest(relayed.relay_dir)
    assert manifest is not None and manifest.segments[-1].number > 3, "the relay did not rotate"
    # ...and segments every checkpoint passed were deleted (retention keep_s 0)
    assert manifest.segments[0].number > 1 and relayed.count("relay_segments_deleted") > 0
    # The relay holds whole transactions up to the stored position.
    stored = json.loads(relayed.position_file.read_text())["position"]
    last = list(RelayReader(relayed.relay_dir).transactions())[-1].commit.position
    assert (last.file, last.pos) >= (stored["file"], stored["pos"])
    opened = [e for e in relayed.log_events() if e["event"] == "relay_opened"]
    assert len(opened) == 1


def test_restarts_resume_the_relay_and_a_lost_relay_is_refetched(workdb, tmp_path) -> None:
    conn, db = workdb
    replicad = RelayReplicad(tmp_path, server_id=5203)
    replicad.start()
    random_workload(conn, db, transactions=40, seed=22)
    assert_converged(replicad, conn, db)
    assert replicad.stop(signal.SIGTERM) == 0
    random_workload(conn, db, transactions=40, seed=23)  # written while replicad is down
    replicad.start()
    assert_converged(replicad, conn, db)
    assert duplicates(replicad.changes(), db) == 0, "a clean stop re-sends nothing"
    # SIGKILL: the relay's torn tail (if any) is cut; only changes after the position stored
    # at the kill (the unacknowledged window) may come again, once.
    replicad.stop(signal.SIGKILL)
    at_kill = json.loads(replicad.position_file.read_text())["position"]
    random_workload(conn, db, transactions=20, seed=24)
    replicad.start()
    assert_converged(replicad, conn, db)
    repeated = Counter(source_key(c) for c in replicad.changes() if c["source"]["db"] == db)
    assert all(n <= 2 for n in repeated.values())
    after_kill = [k for k, n in repeated.items() if n == 2]
    assert all(k[:2] > (at_kill["file"], at_kill["pos"]) for k in after_kill), at_kill
    events = replicad.log_events()
    assert not [e for e in events if e["event"] == "relay_reset"], "the relay was thrown away"
    # A relay that lost its files is re-fetched from the stored position: nothing more repeats
    # (the stop before was clean).
    assert replicad.stop() == 0
    for path in replicad.relay_dir.iterdir():
        path.unlink()
    random_workload(conn, db, transactions=20, seed=25)
    replicad.start()
    try:
        assert_converged(replicad, conn, db)
    finally:
        assert replicad.stop() == 0
    assert duplicates(replicad.changes(), db) == len(after_kill)


def source_key(change: dict[str, Any]) -> tuple[str, int, int]:
    s = change["source"]
    return s["file"], s["pos"], s["row"]


def test_a_damaged_relay_fails_clearly_or_is_refetched(workdb, tmp_path) -> None:
    """A relay damaged while replicad was stopped: with `on_corruption: fail` the start
    fails with an error naming the file; with `refetch` the relay is dropped and read again
    from the primary, and nothing is lost."""
    conn, db = workdb
    replicad = RelayReplicad(tmp_path / "a", server_id=5205)
    replicad.start()
    random_workload(conn, db, transactions=30, seed=27)
    assert_converged(replicad, conn, db)
    assert replicad.stop() == 0
    (replicad.relay_dir / "MANIFEST").write_bytes(b"\x00garbage")
    random_workload(conn, db, transactions=30, seed=28)
    result = replicad.run_to_exit()
    assert result.returncode == 78, result.stderr[-2000:]  # EX_CONFIG: a restart cannot fix it
    errors = [
        json.loads(line)
        for line in result.stderr.decode().splitlines()
        if line.startswith("{") and '"level": "error"' in line
    ]
    assert errors and "manifest is unreadable" in errors[-1]["error"], errors[-1:]
    assert str(replicad.relay_dir / "MANIFEST") in errors[-1]["error"]

    refetching = RelayReplicad(
        tmp_path / "a", server_id=5205, relay_yaml="  on_corruption: refetch\n"
    )
    refetching.start()
    try:
        assert_converged(refetching, conn, db)
    finally:
        assert refetching.stop() == 0
    assert refetching.count("relay_corrupt_refetch") == 1
    assert duplicates(refetching.changes(), db) == 0
