"""A private 3-node Apache Kafka cluster (scripts/services.sh kafka-cluster) for the tests that
kill brokers: every node is broker and KRaft controller, replication factor 3,
min.insync.replicas 2. Member N (1-3) is node id N and serves clients on base + N - 1.

Besides starting and stopping members it answers where things live: which member leads a
partition (metadata), and which member is the transaction coordinator of a transactional.id.
confluent-kafka's AdminClient has no FindCoordinator or DescribeTransactions call, so the
coordinator is found as the broker does it: the leader of the `__transaction_state` partition
the id hashes to (Java's String.hashCode, made non-negative, modulo the partition count).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, ClusterMetadata

from tests.helpers.ports import free_port_block

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "scripts/services.sh"
MEMBERS = (1, 2, 3)
TRANSACTION_STATE = "__transaction_state"


class KafkaClusterError(AssertionError):
    """The cluster did not reach the state a test waited for (names what and for how long)."""


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 code units, 32-bit wrap-around), signed."""
    value = 0
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        value = (31 * value + int.from_bytes(encoded[i : i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def transaction_state_partition(transactional_id: str, partitions: int) -> int:
    """The `__transaction_state` partition of an id (Kafka's Utils.abs: MIN_VALUE maps to 0)."""
    hashed = java_string_hash(transactional_id)
    return (0 if hashed == -(1 << 31) else abs(hashed)) % partitions


class KafkaCluster:
    """Three combined broker+controller nodes under `directory`/kafka1..3."""

    def __init__(self, directory: Path, base: int | None = None) -> None:
        self.dir = directory
        # 13 ports: clients on base..base+2, controllers on base+10..base+12
        self.base = base or free_port_block(13)

    def port(self, member: int) -> int:
        return self.base + member - 1

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port(n)}" for n in MEMBERS)

    def _run(self, action: str, *members: int) -> None:
        subprocess.run(
            [
                "bash",
                str(SERVICES),
                "kafka-cluster",
                action,
                str(self.dir),
                str(self.base),
                *(str(m) for m in members),
            ],
            check=True,
            timeout=180,
        )

    def up(self) -> None:
        """Start all three (formatting storage the first time); returns once each lists 3."""
        self._run("up")

    def down(self) -> None:
        """Graceful stop of all three at once (a node stopped alone last waits for a quorum)."""
        self._run("down")

    def kill(self, member: int) -> None:
        """SIGKILL one member, as a crash would."""
        self._run("kill", member)

    def start(self, *members: int) -> None:
        """Restart members on their storage (default: all); returns once they serve."""
        self._run("start", *members)

    def running(self, member: int) -> bool:
        result = subprocess.run(
            [
                "bash",
                str(SERVICES),
                "kafka-cluster",
                "status",
                str(self.dir),
                str(self.base),
                str(member),
            ],
            check=False,
            timeout=30,
            capture_output=True,
        )
        return result.returncode == 0

    # ------------------------------------------------------------------ metadata

    def metadata(self, topic: str | None = None, timeout_s: float = 5.0) -> ClusterMetadata:
        # log_level 0: the connection refusals from a killed member are expected, not news
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        return admin.list_topics(topic, timeout=timeout_s)

    def leader(self, topic: str, partition: int = 0) -> int:
        """The member leading a partition now (-1: none, e.g. during an election)."""
        meta = self.metadata(topic).topics[topic]
        if meta.error is not None:
            raise KafkaClusterError(f"no metadata for {topic}: {meta.error}")
        return int(meta.partitions[partition].leader)

    def isr(self, topic: str, partition: int = 0) -> list[int]:
        return list(self.metadata(topic).topics[topic].partitions[partition].isrs)

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The member coordinating `transactional_id`'s transactions (the leader of its
        `__transaction_state` partition; the topic exists once any transaction began)."""
        topic = self.metadata(TRANSACTION_STATE).topics[TRANSACTION_STATE]
        if topic.error is not None or not topic.partitions:
            raise KafkaClusterError(f"{TRANSACTION_STATE} does not exist yet: {topic.error}")
        partition = transaction_state_partition(transactional_id, len(topic.partitions))
        return int(topic.partitions[partition].leader)

    def wait_leader_other_than(
        self, topic: str, old: int, partition: int = 0, timeout_s: float = 60.0
    ) -> tuple[int, float]:
        """Wait until a live member other than `old` leads the partition; (member, seconds)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            try:
                leader = self.leader(topic, partition)
            except Exception:  # a metadata request to a dead bootstrap member: ask again
                leader = -1
            if leader not in (-1, old):
                return leader, time.monotonic() - started
            time.sleep(0.1)
        raise KafkaClusterError(
            f"{topic}[{partition}]: no leader other than {old} within {timeout_s} s"
        )
