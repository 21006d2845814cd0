"""`replicad status` and `replicad position` with ZooKeeper (real ZooKeeper and MariaDB):
while no worker runs, a change needs --force and is written with an epoch bump; while a
leader runs, it is queued, applied by the leader at a transaction boundary and reported;
--force is refused then; bad values change nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from tests.helpers.daemon_process import wait_for
from tests.helpers.mariadb_run import Replicad
from tests.helpers.position_cli import cli, master_status

pytestmark = pytest.mark.integration


class ZkReplicad(Replicad):
    def __init__(self, tmp: Path, zookeeper: str, root: str, **kwargs: Any) -> None:
        super().__init__(tmp, **kwargs)
        self.zk_env = {
            "REPLICAD_COORDINATION__ZOOKEEPER__HOSTS": zookeeper,
            "REPLICAD_COORDINATION__ZOOKEEPER__ROOT": root,
            "REPLICAD_COORDINATION__ZOOKEEPER__SESSION_TIMEOUT_S": "3",
        }

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, **self.zk_env}


def node(zookeeper: str, path: str) -> bytes | None:
    client = KazooClient(hosts=zookeeper)
    client.start(10)
    try:
        return client.get(path)[0] if client.exists(path) else None
    finally:
        client.stop()


def status_of(replicad: ZkReplicad) -> dict[str, Any]:
    out = cli(replicad, "status", "--json")
    assert out.returncode == 0, out.stderr
    (pipeline,) = json.loads(out.stdout)["pipelines"]
    return pipeline


def test_stopped_pipeline_needs_force_and_then_resumes_there(
    db, zookeeper: str, zk_root: str, tmp_path: Path
) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    replicad = ZkReplicad(tmp_path, zookeeper, zk_root, server_id=7311)
    position_node = f"{zk_root}/default/pipelines/test/position"
    refused = cli(replicad, "position", "set", "latest")
    assert refused.returncode == 75 and "--force" in refused.stderr, refused.stderr
    assert node(zookeeper, position_node) is None
    file, pos = master_status()
    forced = cli(replicad, "position", "set", f"{file}:{pos}", "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["new"]["pos"] == pos
    written = node(zookeeper, position_node)
    assert written is not None and json.loads(written)["position"]["pos"] == pos
    for bad in ("nosuch.000001:4", f"{file}:5", "0-1-x"):
        out = cli(replicad, "position", "set", bad, "--force")
        assert out.returncode == 64, (bad, out.stderr)
        assert node(zookeeper, position_node) == written, f"{bad} changed the position"
    status = status_of(replicad)
    assert status["leader"] is None and status["epoch"] == 1
    assert status["position"]["pos"] == pos
    # Written while stopped, then the daemon starts there: the insert after it arrives.
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1)")
    replicad.start()
    wait_for(lambda: any(c["source"]["db"] == name for c in replicad.changes()), 40, "the insert")
    wait_for(lambda: status_of(replicad)["leader"] is not None, 20, "a leader in status")
    status = status_of(replicad)
    assert status["epoch"] == 2 and status["leader"]["pid"] == replicad.proc.pid
    assert replicad.stop() == 0


def test_running_leader_applies_a_queued_change_and_force_is_refused(
    db, zookeeper: str, zk_root: str, tmp_path: Path
) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    boundary = master_status()
    replicad = ZkReplicad(tmp_path, zookeeper, zk_root, server_id=7312)
    replicad.start()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1)")
    wait_for(lambda: any(c["source"]["db"] == name for c in replicad.changes()), 40, "the insert")
    position_node = f"{zk_root}/default/pipelines/test/position"
    wait_for(lambda: node(zookeeper, position_node) is not None, 20, "a stored position")
    before = node(zookeeper, position_node)
    assert before is not None
    forced = cli(replicad, "position", "set", "latest", "--force")
    assert forced.returncode != 0 and "leader is alive" in forced.stderr, forced.stderr
    bad = cli(replicad, "position", "set", "0-1-x")
    assert bad.returncode == 64
    assert status_of(replicad)["pending_commands"] == [], "a bad value was queued"
    queued = cli(replicad, "position", "set", f"{boundary[0]}:{boundary[1]}", "--json")
    assert queued.returncode == 0, queued.stderr + replicad.err.read_text()[-2000:]
    result = json.loads(queued.stdout)
    assert result["new"]["pos"] == boundary[1] and "applied by the leader" in result["how"]
    # The stored position when the leader applied it: where `before` was, or later (an
    # event of another writer may have moved it meanwhile), never earlier.
    stored_before = json.loads(before)["position"]
    assert (result["old"]["file"], result["old"]["pos"]) >= (
        stored_before["file"],
        stored_before["pos"],
    )
    changed = [e for e in replicad.log_events() if e.get("event") == "position_changed"]
    assert changed and changed[-1]["new"].startswith(f"{boundary[0]}:{boundary[1]}")
    # The leader went back to the boundary: the insert comes again, then what follows.
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (2)")
    wait_for(
        lambda: (
            [c["after"]["id"] for c in replicad.changes() if c["source"]["db"] == name] == [1, 1, 2]
        ),
        30,
        "the replay from the new position",
    )
    assert status_of(replicad)["pending_commands"] == []
    assert replicad.stop() == 0
