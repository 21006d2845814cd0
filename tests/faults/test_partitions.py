"""Network partitions, made with real network namespaces (tests/helpers/netns.py): a worker
runs in a namespace of its own and one of its links (to ZooKeeper, Kafka or MariaDB) is cut
in the kernel — packets dropped both ways, so both ends see silence, not a reset — while a
random workload goes on, then healed. The oracles are the failover tests'
(tests/faults/test_ha_failover.py): the topics folded per key in binlog order equal the
tables; a repeated change lies inside the window the fault leaves (the position stored
before it .. the binlog end once the lease ran out, or once the link healed); the logs say
who led and published when. What each partition must do is in docs/operations.md
("Network partitions")."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.faults.test_ha_failover import (
    FAILOVER_BOUND_S,
    LEASE_S,
    change_id,
    first_publish_after,
    leader_of,
    wait_for_abandon,
    wait_for_takeover,
    worker_logs_on_failure,
    zk_state,
)
from tests.helpers.daemon_process import wait_for
from tests.helpers.ha import (
    MARIADB,
    SESSION_TIMEOUT_S,
    STARTUP_WAIT_S,
    HaReplicad,
    event_time,
    events_after,
    fold_in_binlog_order,
)
from tests.helpers.kafka_run import (
    BackgroundWriter,
    assert_read_committed_view,
    read_exactly_once,
    read_topics,
    state_difference,
)
from tests.helpers.netns import Direction, Link, NetNs, netns

pytestmark = pytest.mark.faults
__all__ = ["netns"]  # a fixture, used by name

Window = tuple[tuple[str, int], tuple[str, int]]
EXACTLY_ONCE_TIMEOUT_S = 10.0
EXACTLY_ONCE_YAML = "exactly_once: true\nproducer: {transaction.timeout.ms: 10000}"
CATCH_UP_S = 40.0  # a healed TCP connection waits for its next retransmission (backoff)
# Past the silence detection (5 s) and one reconnect attempt's connect timeout (10 s, the
# default `source.connect_timeout_s`): a second attempt is made while still cut.
PRIMARY_CUT_S = 17.0
# Past librdkafka's request.timeout.ms (30 s): the produce requests in flight time out and
# are sent again on a new connection, which hangs until the heal.
KAFKA_CUT_S = 35.0


@dataclass
class Pipeline:
    """One pipeline's workers (some in namespaces), its ZooKeeper state and its workload."""

    db: str
    kafka: str
    zookeeper: str
    zk_root: str
    tmp_path: Path
    name: str
    prefix: str
    exactly_once: bool = False

    def worker(self, name: str, server_id: int, ns: NetNs | None = None) -> HaReplicad:
        worker = HaReplicad(
            self.tmp_path,
            name,
            int(self.zookeeper.split(":")[1]),
            self.zk_root,
            server_id=server_id,
            prefix=self.prefix,
            kafka=self.kafka,
            pipeline=self.name,
            db=self.db,
            kafka_yaml=EXACTLY_ONCE_YAML if self.exactly_once else "",
        )
        if ns is not None:
            worker.command_prefix = ns.prefix
        return worker

    def state(self) -> dict[str, Any]:
        return zk_state(self.zookeeper, self.zk_root, self.name)

    def position(self) -> tuple[str, int]:
        position = self.state()["position"]
        assert position is not None
        return position["file"], position["pos"]

    def leader(self, workers: list[HaReplicad]) -> HaReplicad:
        return leader_of(workers, self.zookeeper, self.zk_root, self.name)

    def wait_candidates(self, names: list[str], what: str) -> None:
        wait_for(lambda: self.state()["candidates"] == sorted(names), STARTUP_WAIT_S, what)

    def caught_up_and_stopped(self, workers: list[HaReplicad]) -> None:
        """The leader reached the primary's executed GTIDs; every worker stops with 0."""
        target = MARIADB.executed()
        wait_for(
            lambda: MARIADB.reached(self.state()["position"], target),
            CATCH_UP_S,
            "the leader to catch up with the primary",
        )
        for worker in workers:
            assert worker.proc is not None and worker.proc.poll() is None, worker.name
        for worker in workers:
            assert worker.stop() == 0, f"{worker.name} did not stop cleanly"

    def assert_nothing_lost(self, conn: Any, windows: list[Window]) -> None:
        """The topics fold to the tables; every repeated change lies inside a window (in
        exactly-once, what read_committed consumers see: every change once)."""
        if self.exactly_once:
            view = read_exactly_once(self.kafka, self.prefix, self.db, self.name)
            assert_read_committed_view(
                view, conn, self.db, self.prefix, expected=MARIADB.expected_state(conn, self.db)
            )
            return
        records = read_topics(self.kafka, self.prefix, self.db)
        folded = fold_in_binlog_order(records, self.prefix, self.db)
        expected = MARIADB.expected_state(conn, self.db)
        assert folded == expected, state_difference(folded, expected)
        counts = Counter(change_id(r) for r in records)
        for dup in (k for k, n in counts.items() if n > 1):
            where = (dup[1], dup[2])
            assert any(low < where <= high for low, high in windows), (dup, windows)


@pytest.fixture
def pipeline(shop: Any, kafka: str, zookeeper: str, zk_root: str, tmp_path: Path) -> Pipeline:
    tag = uuid.uuid4().hex[:8]
    return Pipeline(shop[1], kafka, zookeeper, zk_root, tmp_path, f"np{tag}", f"np{tag}")


@contextmanager
def workload(pipeline: Pipeline, seed: int) -> Iterator[BackgroundWriter]:
    writer = BackgroundWriter(pipeline.db, seed=seed, pause_s=0.02)
    writer.start()
    try:
        yield writer
    finally:
        writer.stop()


def start_leading(pipeline: Pipeline, leader: HaReplicad, standby: HaReplicad | None) -> None:
    """`leader` first (it wins the election and connects), then the standby."""
    leader.start()
    wait_for(lambda: leader.count("source_connected") > 0, STARTUP_WAIT_S, "the leader")
    if standby is not None:
        standby.start()
    assert pipeline.leader([leader] + ([standby] if standby else [])) is leader


@pytest.mark.parametrize(
    ("mode", "direction"),
    [
        ("at_least_once", "both"),
        ("at_least_once", "to_service"),
        ("at_least_once", "from_service"),
        ("exactly_once", "both"),
    ],
)
def test_leader_cut_from_zookeeper_hands_over(
    pipeline: Pipeline, shop: Any, netns: Callable[[], NetNs], mode: str, direction: Direction
) -> None:
    """The leader, in its own namespace, loses ZooKeeper (Kafka and MariaDB still reachable).
    Its lease runs out (0.6 x session timeout after its last renewal): it stops handing rows
    to Kafka within the session timeout of the cut and abandons its pipeline (nothing more
    published: the rows count at the pause and at the abandonment are equal); the standby
    takes over within the failover bound; repeats only inside [position before the cut,
    binlog end when the lease had run out], none at all in exactly-once (read_committed,
    the old leader's open transaction aborted by the new one's fence). Cut both ways, or one
    way only (its pings lost, or ZooKeeper's answers lost: the same for both ends). Healed,
    the old leader's expired session makes it a standby again, not a leader; nothing is
    lost."""
    pipeline.exactly_once = mode == "exactly_once"
    ns = netns()
    w0 = pipeline.worker("w0", 7801, ns)
    w1 = pipeline.worker("w1", 7801)

    def stopped_in_time(cut: float) -> None:
        stopped = events_after(w0, cut, "publishing_paused", "pipeline_abandoned")
        assert event_time(stopped[0]) - cut <= SESSION_TIMEOUT_S, stopped[0]
        abandoned = events_after(w0, cut, "pipeline_abandoned")[0]
        assert stopped[0]["rows"] == abandoned["rows"], (stopped[0], abandoned)

    with worker_logs_on_failure([w0, w1]):
        window = hand_over_on_cut(
            pipeline, ns, (w0, w1), 81, ("zookeeper",), direction, stopped_in_time
        )
        pipeline.caught_up_and_stopped([w0, w1])
        pipeline.assert_nothing_lost(shop[0], [window])


def hand_over_on_cut(
    pipeline: Pipeline,
    ns: NetNs,
    workers: tuple[HaReplicad, HaReplicad],
    seed: int,
    links: tuple[Link, ...],
    direction: Direction = "both",
    check: Callable[[float], None] = lambda cut: None,
) -> Window:
    """Under a workload, cut the leader's `links` (it runs in `ns`): the standby takes over
    within the failover bound, the leader abandons its pipeline (`check(cut time)` says more);
    healed, it is a candidate again, not the leader. Returns the window in which a change may
    repeat: [position before the cut, binlog end once the lease had run out]."""
    leader, standby = workers
    start_leading(pipeline, leader, standby)
    with workload(pipeline, seed=seed):
        wait_for(lambda: pipeline.state()["position"], STARTUP_WAIT_S, "a position")
        time.sleep(1.0)
        before = pipeline.position()
        cut = time.time()
        for link in links:
            ns.cut(link, direction)
        time.sleep(LEASE_S + 0.5)  # what it may still publish, by its lease's clock
        window = (before, MARIADB.binlog_end())
        took = wait_for_takeover([standby], cut, f"{'+'.join(links)} cut") - cut
        assert took <= FAILOVER_BOUND_S, took
        wait_for_abandon(leader, cut, "the cut leader")
        assert leader.proc is not None and leader.proc.poll() is None, "the cut leader exited"
        check(cut)
        for link in links:
            ns.heal(link)
        pipeline.wait_candidates(["w0", "w1"], "the healed leader to be a candidate again")
        assert pipeline.leader(list(workers)) is standby
        time.sleep(1.0)
    assert not events_after(leader, cut, "leading"), "the healed leader led again"
    return window


@pytest.mark.parametrize(
    ("mode", "direction"),
    [("at_least_once", "both"), ("at_least_once", "from_service"), ("exactly_once", "both")],
)
def test_leader_cut_from_kafka_waits(
    pipeline: Pipeline, shop: Any, netns: Callable[[], NetNs], mode: str, direction: Direction
) -> None:
    """The only worker loses Kafka (ZooKeeper and MariaDB reachable) for 35 s: it keeps
    running (no exit, 78 or other), keeps its leadership, and the stored position does not
    move while nothing can be acknowledged; healed, it delivers the rest: the topics fold to
    the tables, repeats only inside [position before the cut, binlog end at the heal]. One
    way (`from_service`): its requests reach the broker and are written, the answers are
    lost: nothing may count as acknowledged either. Exactly-once: the cut outlasts the
    transaction timeout (10 s): the open transaction cannot be committed any more, the sink
    fails the pipeline and the worker steps down (alone here, it leads again at once), but
    not before that timeout; nothing is committed meanwhile, and read_committed consumers
    see every change once."""
    pipeline.exactly_once = mode == "exactly_once"
    ns = netns()
    w0 = pipeline.worker("w0", 7802, ns)
    with worker_logs_on_failure([w0]):
        start_leading(pipeline, w0, None)
        with workload(pipeline, seed=82):
            wait_for(lambda: pipeline.state()["position"], STARTUP_WAIT_S, "a position")
            time.sleep(1.0)
            before = pipeline.position()
            cut = time.time()
            ns.cut("kafka", direction)
            time.sleep(1.0)  # a checkpoint of what was acknowledged before the cut
            held = pipeline.position()
            while time.time() < cut + KAFKA_CUT_S:
                assert w0.proc is not None and w0.proc.poll() is None, "exited while cut"
                assert pipeline.position() == held, "the position moved without Kafka"
                time.sleep(0.5)
            ns.heal("kafka")
            window = (before, MARIADB.binlog_end())
            wait_for(lambda: pipeline.position() > held, CATCH_UP_S, "the position to move")
        gave_up = events_after(w0, cut, "pipeline_abandoned", "leadership_lost")
        if pipeline.exactly_once:
            # A Kafka transaction cannot outlive its timeout: past it the sink fails the
            # pipeline and the worker steps down (a standby, or itself here, resumes from the
            # last committed position). Not before: until then it waits like the others.
            # (less 2 s: the wait for acknowledgements may have begun just before the cut)
            early = [e for e in gave_up if event_time(e) < cut + EXACTLY_ONCE_TIMEOUT_S - 2]
            assert not early, early[:1]
            reasons = [e.get("error", "") for e in gave_up if e["event"] == "leadership_lost"]
            assert all("Kafka" in reason for reason in reasons), reasons[:1]
        else:
            assert not gave_up, gave_up[:1]
        pipeline.caught_up_and_stopped([w0])
        pipeline.assert_nothing_lost(shop[0], [window])


def test_leader_cut_from_the_primary_resumes_by_gtid(
    pipeline: Pipeline, shop: Any, netns: Callable[[], NetNs]
) -> None:
    """The only worker loses MariaDB (ZooKeeper and Kafka reachable) for 17 s: it notices
    the silence (no event or heartbeat for max(3 x heartbeat_s, 5 s)), logs
    `source_disconnected` with its backoff (capped at `reconnect.max_s` + jitter), tries
    again, with a longer delay, after its reconnect attempt times out; once healed it
    reconnects and resumes by GTID from where it was: the topics fold to the tables with no
    change repeated (the same pipeline and producer go on: a reconnect skips what was
    handed over already)."""
    ns = netns()
    w0 = pipeline.worker("w0", 7803, ns)
    with worker_logs_on_failure([w0]):
        start_leading(pipeline, w0, None)
        with workload(pipeline, seed=83):
            wait_for(lambda: pipeline.state()["position"], STARTUP_WAIT_S, "a position")
            time.sleep(1.0)
            cut = time.time()
            ns.cut("mariadb")
            wait_for(
                lambda: bool(events_after(w0, cut, "source_disconnected")),
                15,
                "the silence to be noticed",
            )
            time.sleep(max(0.0, cut + PRIMARY_CUT_S - time.time()))
            ns.heal("mariadb")
            healed = time.time()
            wait_for(
                lambda: bool(events_after(w0, healed, "source_connected")),
                CATCH_UP_S,
                "a reconnect after the heal",
            )
        lost = events_after(w0, cut, "source_disconnected")
        assert [e["attempt"] for e in lost] == list(range(1, len(lost) + 1)), lost
        assert len(lost) >= 2 and all(e["retry_in_s"] <= 0.5 * 1.2 for e in lost), lost
        assert lost[1]["retry_in_s"] > lost[0]["retry_in_s"], lost  # it backs off
        resumed = events_after(w0, healed, "source_connected")[0]
        assert resumed["dump"] == "mariadb_gtid", resumed
        assert resumed["start"] == lost[0]["resume_at"], (resumed, lost[0])
        assert not events_after(w0, cut, "pipeline_abandoned", "pipeline_failed")
        pipeline.caught_up_and_stopped([w0])
        pipeline.assert_nothing_lost(shop[0], [])  # no window: no change may repeat


def test_standby_cut_from_zookeeper_never_publishes(
    pipeline: Pipeline, shop: Any, netns: Callable[[], NetNs]
) -> None:
    """A standby in its own namespace loses ZooKeeper for two session timeouts and more: its
    candidacy expires on the server (the candidates are the leader alone), it never leads,
    connects to MariaDB or publishes, during the cut or after; healed, it is a candidate
    again and the leader is unchanged; nothing lost, nothing repeated."""
    ns = netns()
    w0 = pipeline.worker("w0", 7804)
    w1 = pipeline.worker("w1", 7804, ns)
    with worker_logs_on_failure([w0, w1]):
        start_leading(pipeline, w0, w1)
        with workload(pipeline, seed=84):
            wait_for(lambda: pipeline.state()["position"], STARTUP_WAIT_S, "a position")
            cut = time.time()
            ns.cut("zookeeper")
            pipeline.wait_candidates(["w0"], "the cut standby's session to expire")
            time.sleep(max(0.0, cut + 2 * SESSION_TIMEOUT_S + 2 - time.time()))
            ns.heal("zookeeper")
            pipeline.wait_candidates(["w0", "w1"], "the healed standby to be a candidate")
            assert pipeline.leader([w0, w1]) is w0
            time.sleep(1.0)
        never = ("leading", "source_connected", "first_row_published")
        assert not [e for e in w1.log_events() if e.get("event") in never]
        assert first_publish_after(w1, 0) is None
        pipeline.caught_up_and_stopped([w0, w1])
        pipeline.assert_nothing_lost(shop[0], [])


@pytest.mark.parametrize("mode", ["at_least_once", "exactly_once"])
def test_leader_cut_from_every_link_at_once_hands_over(
    pipeline: Pipeline, shop: Any, netns: Callable[[], NetNs], mode: str
) -> None:
    """The leader's host loses its network: ZooKeeper, Kafka and the primary cut at the same
    moment, both ways. Nothing it still holds can reach Kafka, and its lease runs out as in
    the ZooKeeper cut alone: it abandons its pipeline, the standby takes over within the
    failover bound; repeats only inside [position before the cut, binlog end when the lease
    had run out], none in exactly-once (the cut leader's open transaction is aborted by the
    new leader's fence). Healed all at once, the old leader is a standby again; nothing lost."""
    pipeline.exactly_once = mode == "exactly_once"
    ns = netns()
    w0 = pipeline.worker("w0", 7805, ns)
    w1 = pipeline.worker("w1", 7805)
    with worker_logs_on_failure([w0, w1]):
        window = hand_over_on_cut(pipeline, ns, (w0, w1), 85, ("zookeeper", "kafka", "mariadb"))
        pipeline.caught_up_and_stopped([w0, w1])
        pipeline.assert_nothing_lost(shop[0], [window])
