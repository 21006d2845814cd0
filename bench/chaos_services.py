"""Where a campaign's services are. By default the shared ones (scripts/services.sh up); with
`--cluster`, services of the campaign's own: a 3-broker Apache Kafka (replication factor 3,
min.insync.replicas 2), a 3-member ZooKeeper ensemble and a MariaDB, so that a run can kill a
broker or a ZooKeeper member and restart the primary without disturbing anything else that
uses the shared servers. They start once for the whole campaign (six JVMs take about a
minute to start on 2 cores) and stop when it ends."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.kafka_cluster import MEMBERS, KafkaCluster
from tests.helpers.mariadb import MARIADB_PORT
from tests.helpers.netns import LINKS, Links
from tests.helpers.private_mariadb import PrivateMariaDB
from tests.helpers.zk_helpers import ZkEnsemble

PRIVATE_PRIMARY_ENV = "REPLICAD_TEST_CHAOS_PRIVATE_PRIMARY"


@dataclass
class Services:
    kafka: str  # bootstrap servers
    zookeeper: str  # connect string
    links: Links  # what a worker's namespace forwards, by link
    cluster: KafkaCluster | None = None
    ensemble: ZkEnsemble | None = None
    primary: PrivateMariaDB | None = None


def shared() -> Services:
    kafka_port, zk_port = LINKS["kafka"][0], LINKS["zookeeper"][0]
    return Services(f"127.0.0.1:{kafka_port}", f"127.0.0.1:{zk_port}", dict(LINKS))


@contextmanager
def private() -> Iterator[Services]:
    """Start the campaign's own services; stop them (and remove their state) afterwards.
    The primary listens on REPLICAD_MARIADB_PORT, which bench/chaos.py chose before the test
    helpers read it."""
    if os.environ.get(PRIVATE_PRIMARY_ENV) != "1":
        raise RuntimeError(f"the private primary's port was not chosen ({PRIVATE_PRIMARY_ENV})")
    with ExitStack() as stack:
        state = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="replicad-chaos-")))
        primary = PrivateMariaDB(state / "mariadb", MARIADB_PORT)
        ensemble = ZkEnsemble(state / "zk")
        cluster = KafkaCluster(state / "kafka")
        for server in (primary, ensemble, cluster):
            stack.callback(server.down)
            server.up()
        yield Services(
            cluster.bootstrap,
            ensemble.hosts,
            {
                "mariadb": (MARIADB_PORT,),
                "zookeeper": tuple(ensemble.port(n) for n in (1, 2, 3)),
                "kafka": tuple(cluster.port(n) for n in MEMBERS),
            },
            cluster,
            ensemble,
            primary,
        )
