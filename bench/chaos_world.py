"""The processes of one campaign run: two HA workers of one pipeline, each in a network
namespace of its own (tests/helpers/netns.py) and, in relay mode, with its relay directory on
a small tmpfs of its own (tests/helpers/small_disk.py); its ZooKeeper root and Kafka topics.
`World.open` removes all of it when the run ends, whatever happened."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from bench.chaos_services import Services
from bench.chaos_workload import PrimaryGate
from tests.faults.test_ha_failover import leader_of, zk_state
from tests.faults.test_partitions import EXACTLY_ONCE_YAML
from tests.helpers.daemon_process import kill_leftovers, wait_for
from tests.helpers.ha import STARTUP_WAIT_S, HaReplicad
from tests.helpers.kafka_helpers import delete_topics
from tests.helpers.netns import NetNs
from tests.helpers.small_disk import mounted_tmpfs
from tests.helpers.zk_helpers import delete_tree

RELAY_DISK = "64m"
SERVER_IDS = range(8370, 8400)  # no other test registers these with the shared MariaDB
WORKERS = ("w0", "w1")
# The topics the workers create on the campaign's own cluster: 3, as in production; 1 makes
# a broker kill an outage of the partitions it holds (how the exactly-once duplicates of
# docs/operations.md were reproduced).
REPLICATION_FACTOR = int(os.environ.get("REPLICAD_TEST_CHAOS_REPLICATION_FACTOR", "3"))


@dataclass
class World:
    services: Services
    db: str
    mode: str
    tmp: Path
    run: int
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    workers: list[HaReplicad] = field(default_factory=list)
    spaces: dict[str, NetNs] = field(default_factory=dict)
    disks: dict[str, Path] = field(default_factory=dict)
    gate: PrimaryGate = field(default_factory=PrimaryGate)  # writers drained for a restart
    keep_topics: bool = False  # a failed run's topics stay for a look (its line says so)

    @property
    def kafka(self) -> str:
        return self.services.kafka

    @property
    def zookeeper(self) -> str:
        return self.services.zookeeper

    @property
    def pipeline(self) -> str:
        return f"chaos{self.tag}"

    prefix = pipeline

    @property
    def zk_root(self) -> str:
        return f"/replicad-chaos-{self.tag}"

    @classmethod
    @contextmanager
    def open(cls, services: Services, db: str, mode: str, tmp: Path, run: int) -> Iterator[World]:
        world = cls(services, db, mode, tmp, run)
        with ExitStack() as stack:
            stack.callback(world._remove_traces)
            for name in WORKERS:
                ns = NetNs.create(services.links)
                stack.callback(ns.close)
                world.spaces[name] = ns
                if mode == "relay":
                    disk = stack.enter_context(mounted_tmpfs(tmp / f"disk-{name}", RELAY_DISK))
                    world.disks[name] = disk
                world.workers.append(world._worker(name))
            stack.callback(kill_leftovers)  # first: nothing may run on a disk going away
            yield world

    def _worker(self, name: str) -> HaReplicad:
        relay = (
            f"relay: {{enabled: true, directory: '{self.disks[name] / 'relay'}'}}\n"
            if name in self.disks
            else ""
        )
        worker = HaReplicad(
            self.tmp,
            name,
            0,
            self.zk_root,
            zk_hosts=self.zookeeper,
            server_id=SERVER_IDS[self.run % len(SERVER_IDS)],
            prefix=self.prefix,
            kafka=self.kafka,
            pipeline=self.pipeline,
            db=self.db,
            kafka_yaml=self._kafka_yaml(),
            extra_yaml=relay,
        )
        worker.command_prefix = self.spaces[name].prefix
        return worker

    def _kafka_yaml(self) -> str:
        lines = [EXACTLY_ONCE_YAML] if self.mode == "exactly-once" else []
        if self.services.cluster is not None:  # replicated, as in production: a kill fails over
            isr = min(2, REPLICATION_FACTOR)  # the cluster's 2 cannot hold for one replica
            lines.append(
                f"topics: {{replication_factor: {REPLICATION_FACTOR}, "
                f'config: {{"min.insync.replicas": "{isr}"}}}}'
            )
        return "\n".join(lines)

    def _remove_traces(self) -> None:
        delete_tree(self.zookeeper, self.zk_root)
        if self.keep_topics:
            return
        topics = AdminClient({"bootstrap.servers": self.kafka}).list_topics(timeout=10).topics
        delete_topics(self.kafka, [t for t in topics if t.startswith(f"{self.prefix}.")])

    # ------------------------------------------------------------------ the pipeline's state

    def zk_position(self) -> dict[str, Any] | None:
        """The pipeline's stored position (ZooKeeper), whole."""
        position: dict[str, Any] | None = zk_state(self.zookeeper, self.zk_root, self.pipeline)[
            "position"
        ]
        return position

    def position(self) -> tuple[str, int]:
        position = self.zk_position()
        assert position is not None, "no stored position"
        return position["file"], position["pos"]

    def leader(self) -> HaReplicad:
        return leader_of(self.workers, self.zookeeper, self.zk_root, self.pipeline)

    def others(self, worker: HaReplicad) -> list[HaReplicad]:
        return [w for w in self.workers if w is not worker]

    def settled(self, what: str) -> HaReplicad:
        """Every worker running and a candidate, one of them leading: the leader."""
        names = sorted(WORKERS)
        wait_for(
            lambda: zk_state(self.zookeeper, self.zk_root, self.pipeline)["candidates"] == names,
            STARTUP_WAIT_S,
            f"both workers to be candidates ({what})",
        )
        for worker in self.workers:
            assert worker.proc is not None and worker.proc.poll() is None, (
                f"{worker.name} exited {worker.proc and worker.proc.poll()} ({what})"
            )
        return self.leader()

    def start(self) -> None:
        """w0 first (it wins the election and connects), then w1."""
        first, second = self.workers
        first.start()
        wait_for(lambda: first.count("source_connected") > 0, STARTUP_WAIT_S, "the leader")
        second.start()

    def wait_position(self) -> None:
        wait_for(lambda: self.zk_position() is not None, STARTUP_WAIT_S, "a stored position")
