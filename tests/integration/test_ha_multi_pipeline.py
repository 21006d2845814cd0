"""One worker, several pipelines (`replicad run -c a.yaml -c b.yaml`, ZooKeeper): with
`max_pipelines: 1` two workers share two pipelines one each; a worker at capacity is no
candidate for the other pipeline, so when one worker dies its pipeline waits for a free
worker instead of overloading the survivor; restarted, the worker takes it up again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from tests.helpers.daemon_process import ROOT, DaemonProcess, wait_for, worker_server_id
from tests.helpers.mariadb import MARIADB_PORT

pytestmark = pytest.mark.integration


def write_config(path: Path, pipeline: str, server_id: int, zookeeper: str, root: str) -> None:
    path.write_text(
        f"pipeline: {pipeline}\n"
        f"source: {{port: {MARIADB_PORT}, password: repl, "
        f"server_id: {worker_server_id(server_id)}, heartbeat_s: 1}}\n"
        f"sinks: {{stdout: {{path: {path.parent / (pipeline + '.jsonl')}}}}}\n"
        f"coordination:\n  zookeeper: {{hosts: '{zookeeper}', root: {root}, "
        "session_timeout_s: 3, max_pipelines: 1}\n"
        "log: {format: json}\n"
    )


def spawn(configs: list[Path], log: Path, worker: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "replicad.cli", "run"]
    for config in configs:
        args += ["-c", str(config)]
    env = {**os.environ, "REPLICAD_COORDINATION__ZOOKEEPER__WORKER_ID": worker}
    with log.open("ab") as err:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
    DaemonProcess.started.append(proc)  # reaped by the autouse fixture whatever happens
    return proc


def leaders(zookeeper: str, root: str) -> dict[str, Any]:
    client = KazooClient(hosts=zookeeper)
    client.start(10)
    try:
        out = {}
        for pipeline in ("pa", "pb"):
            try:  # ephemeral: it may vanish between any two calls
                data = client.get(f"{root}/default/pipelines/{pipeline}/status")[0]
            except NoNodeError:
                data = None
            out[pipeline] = json.loads(data)["worker"] if data else None
        return out
    finally:
        client.stop()


def test_two_workers_share_two_pipelines_within_capacity(
    mariadb: dict[str, object], zookeeper: str, zk_root: str, tmp_path: Path
) -> None:
    a, b = tmp_path / "pa.yaml", tmp_path / "pb.yaml"
    write_config(a, "pa", 7331, zookeeper, zk_root)
    write_config(b, "pb", 7332, zookeeper, zk_root)
    one = spawn([a, b], tmp_path / "w1.log", "w1")
    two = spawn([a, b], tmp_path / "w2.log", "w2")
    wait_for(lambda: None not in leaders(zookeeper, zk_root).values(), 30, "both pipelines led")
    led = leaders(zookeeper, zk_root)
    assert sorted(led.values()) == ["w1", "w2"], led  # one each: capacity 1
    victim, survivor = (one, "w2") if led["pa"] == "w1" else (two, "w1")
    orphan = "pa" if led["pa"] != survivor else "pb"
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    wait_for(lambda: leaders(zookeeper, zk_root)[orphan] is None, 15, "the dead leader's status")
    # The survivor is full: it must not take the orphan (it is not even a candidate).
    client = KazooClient(hosts=zookeeper)
    client.start(10)
    try:
        election = f"{zk_root}/default/pipelines/{orphan}/election"
        wait_for(lambda: client.get_children(election) == [], 15, "no candidate for the orphan")
    finally:
        client.stop()
    assert leaders(zookeeper, zk_root)[orphan] is None
    name = "w1" if victim is one else "w2"
    back = spawn([a, b], tmp_path / f"{name}.log", name)
    wait_for(
        lambda: leaders(zookeeper, zk_root)[orphan] == name, 30, "the restarted worker to lead"
    )
    for proc in (one, two, back):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
