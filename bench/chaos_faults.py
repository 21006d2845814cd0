"""The faults of the campaign, each made the way the scripted fault tests make it
(tests/faults/test_ha_failover.py, test_partitions.py, test_disk_full.py) and applied to the
worker leading at that moment. Each returns what the oracle needs: the window of positions in
which a change may repeat (ZooKeeper's position before the fault .. the binlog end once the
fault can no longer publish), and how long until a leader published again."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.chaos_plan import Fault
from bench.chaos_world import World
from replicad.exit_codes import EXIT_TEMPFAIL
from tests.faults.test_ha_failover import wait_for_abandon, wait_for_takeover
from tests.faults.test_partitions import CATCH_UP_S
from tests.helpers.daemon_process import wait_for
from tests.helpers.ha import MARIADB, HaReplicad, events_after
from tests.helpers.netns import Direction
from tests.helpers.small_disk import fill

Window = tuple[tuple[str, int], tuple[str, int]]
ZK_DIRECTIONS: dict[str, Direction] = {
    "zk-cut": "both",
    "zk-cut-to": "to_service",
    "zk-cut-from": "from_service",
}


@dataclass
class Outcome:
    kind: str
    worker: str
    before: tuple[str, int]  # ZooKeeper's position when the fault began
    takeover_s: float | None = None  # fault -> another worker's first publish (deposing faults)
    resume_s: float | None = None  # heal -> the same leader's position moving again
    window: Window | None = None  # None: no change may repeat

    def repeats_until_now(self) -> None:
        """A change may repeat from the position before the fault up to the binlog end now
        (the fault can no longer publish: it was deposed, or its link is back)."""
        self.window = (self.before, MARIADB.binlog_end())


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


def _takeover(world: World, leader: HaReplicad, started: float, kind: str) -> float:
    return wait_for_takeover(world.others(leader), started, kind) - started


def kill(world: World, leader: HaReplicad, fault: Fault, out: Outcome) -> None:
    started = time.time()
    os.kill(leader.pid, signal.SIGKILL)
    assert leader.proc is not None
    leader.proc.wait(10)
    out.takeover_s = _takeover(world, leader, started, fault.kind)
    out.repeats_until_now()
    time.sleep(fault.hold_s)
    leader.start()  # as a supervisor restarts it: a standby now


def stop(world: World, leader: HaReplicad, fault: Fault, out: Outcome) -> None:
    started = time.time()
    os.kill(leader.pid, signal.SIGSTOP)
    try:
        out.takeover_s = _takeover(world, leader, started, fault.kind)
        out.repeats_until_now()
        _sleep_until(started + fault.hold_s)
    finally:
        os.kill(leader.pid, signal.SIGCONT)
    wait_for_abandon(leader, started, "the woken zombie")


def zk_cut(world: World, leader: HaReplicad, fault: Fault, out: Outcome) -> None:
    ns = world.spaces[leader.name]
    started = time.time()
    ns.cut("zookeeper", ZK_DIRECTIONS[fault.kind])
    try:
        out.takeover_s = _takeover(world, leader, started, fault.kind)
        wait_for_abandon(leader, started, "the cut leader")
        out.repeats_until_now()
        time.sleep(fault.hold_s)
    finally:
        ns.heal("zookeeper")


def kafka_cut(world: World, leader: HaReplicad, fault: Fault, out: Outcome) -> None:
    ns = world.spaces[leader.name]
    started = time.time()
    ns.cut("kafka")
    try:
        time.sleep(1.0)  # what was acknowledged before the cut is checkpointed
        held = world.position()
        _sleep_until(started + fault.hold_s)
        assert leader.proc is not None and leader.proc.poll() is None, "exited while cut"
    finally:
        ns.heal("kafka")
    healed = time.time()
    wait_for(lambda: world.position() > held, CATCH_UP_S, "the position to move after the heal")
    out.resume_s = time.time() - healed
    out.repeats_until_now()
    _keeps_leading(world, leader, started, "cut from Kafka", kafka_outage=True)


def db_cut(world: World, leader: HaReplicad, fault: Fault, out: Outcome) -> None:
    ns = world.spaces[leader.name]
    started = time.time()
    ns.cut("mariadb")
    try:
        _sleep_until(started + fault.hold_s)
    finally:
        ns.heal("mariadb")
    healed = time.time()
    if events_after(leader, started, "source_disconnected"):  # else the cut went unnoticed
        wait_for(
            lambda: bool(events_after(leader, healed, "source_connected")),
            CATCH_UP_S,
            "a reconnect after the heal",
        )
        out.resume_s = time.time() - healed


def disk_full(world: World, leader: HaReplicad, fault: Fault, out: Outcome) -> None:
    """Under ZooKeeper a full relay disk fails the pipeline (DiskFullError, naming the
    path); the worker resigns and campaigns again later (docs/operations.md, "Under
    ZooKeeper: losing leadership is not an exit"), or exits 75; a standby takes over."""
    disk = world.disks[leader.name]
    started = time.time()
    filler = fill(disk)
    try:
        out.takeover_s = _takeover(world, leader, started, fault.kind)
        out.repeats_until_now()
        failed = events_after(leader, started, "pipeline_failed")
        assert leader.proc is not None
        exited = leader.proc.poll()
        named = any(str(disk) in e.get("error", "") for e in failed)
        assert named or exited == EXIT_TEMPFAIL, (
            f"a full relay disk: exit {exited}, pipeline_failed {failed[:1]}"
        )
        time.sleep(fault.hold_s)
    finally:
        os.unlink(filler)
    if leader.proc.poll() is not None:
        leader.start()  # as a supervisor restarts it: a standby now


def _keeps_leading(
    world: World, leader: HaReplicad, started: float, what: str, kafka_outage: bool = False
) -> None:
    """The leader still runs and never gave its pipeline up since `started`. Except, in
    exactly-once, for a Kafka outage (a cut, a broker gone until the cluster fences it): a
    Kafka transaction cannot outlive its timeout (10 s here, and it may have begun before the
    fault); past it the sink fails the pipeline (not acknowledged in time, or the
    coordinator's abort fenced the producer's epoch), the worker steps down and a standby or
    itself resumes from the last committed position."""
    assert leader.proc is not None and leader.proc.poll() is None, f"exited: {what}"
    gave_up = events_after(leader, started, "pipeline_abandoned", "leadership_lost")
    if kafka_outage and world.mode == "exactly-once":
        reasons = [e.get("error", "") for e in gave_up if e["event"] == "leadership_lost"]
        assert all("Kafka" in r for r in reasons), f"gave up, not for Kafka ({what}): {reasons}"
    else:
        assert not gave_up, f"the leader gave up ({what}): {gave_up[:1]}"


def _down_and_back(
    world: World, fault: Fault, kill: Callable[[int], None], start: Callable[[int], None]
) -> float:
    """SIGKILL `fault.member`, start it again after the hold; returns once the pipeline's
    position moved after that. The moment of the kill."""
    started = time.time()
    kill(fault.member)
    try:
        _sleep_until(started + fault.hold_s)
        held = world.position()
    finally:
        start(fault.member)
    wait_for(lambda: world.position() > held, CATCH_UP_S, "the position to move after a restart")
    return started


def broker_kill(world: World, leader: HaReplicad, fault: Fault, out: Outcome) -> None:
    """One broker of three gone (min.insync.replicas 2): partitions and the transaction
    coordinator move to the others once the cluster fences it; the leader retries, it
    neither exits nor resigns (in exactly-once it may step down if that takes longer than
    its transaction may stay open)."""
    cluster = world.services.cluster
    assert cluster is not None, "broker-kill needs --cluster"
    started = _down_and_back(world, fault, cluster.kill, cluster.start)
    out.resume_s = time.time() - started
    out.repeats_until_now()
    _keeps_leading(world, leader, started, f"broker {fault.member} killed", kafka_outage=True)


def zk_member_kill(world: World, leader: HaReplicad, fault: Fault, out: Outcome) -> None:
    """One ZooKeeper member of three gone, the quorum's leader or not: the workers' sessions
    move to another member within the session, so nobody loses leadership; a takeover would
    still be correct (the oracle checks), only slower."""
    ensemble = world.services.ensemble
    assert ensemble is not None, "zk-member-kill needs --cluster"
    started = _down_and_back(world, fault, ensemble.kill, ensemble.start)
    out.resume_s = time.time() - started
    out.repeats_until_now()


def primary_restart(world: World, leader: HaReplicad, fault: Fault, out: Outcome) -> None:
    """The primary stopped and started again between transactions (its writers drained
    first): the leader reconnects (with backoff) and resumes by GTID from where it was."""
    _primary_down_and_up(world, leader, fault, out, crash=False)


def primary_crash(world: World, leader: HaReplicad, fault: Fault, out: Outcome) -> None:
    """The primary SIGKILLed with writers inside transactions, started again after the hold:
    it recovers (a transaction is committed exactly when its binlog events are whole), the
    leader reconnects and resumes by GTID, and the oracle's SELECT shows that nothing the
    recovery rolled back was published."""
    _primary_down_and_up(world, leader, fault, out, crash=True)


def _primary_down_and_up(
    world: World, leader: HaReplicad, fault: Fault, out: Outcome, crash: bool
) -> None:
    primary = world.services.primary
    assert primary is not None, f"{fault.kind} needs --cluster"
    with world.gate.crashing() if crash else world.gate.restarting():
        started = time.time()
        primary.crash() if crash else primary.down()
        time.sleep(fault.hold_s)
        primary.up()
    restarted = time.time()
    # from `started`: services.sh returns after the server is up and checked, and the
    # reconnect may come first
    wait_for(
        lambda: bool(events_after(leader, started, "source_connected")),
        CATCH_UP_S,
        "a reconnect after the restart",
    )
    out.resume_s = max(0.0, time.time() - restarted)
    _keeps_leading(world, leader, started, fault.kind)


APPLY: dict[str, Callable[[World, HaReplicad, Fault, Outcome], None]] = {
    "kill": kill,
    "stop": stop,
    **dict.fromkeys(ZK_DIRECTIONS, zk_cut),
    "kafka-cut": kafka_cut,
    "db-cut": db_cut,
    "disk-full": disk_full,
    "broker-kill": broker_kill,
    "zk-member-kill": zk_member_kill,
    "primary-restart": primary_restart,
    "primary-crash": primary_crash,
}


def apply(world: World, fault: Fault) -> Outcome:
    """Wait the fault's quiet time, hit the leader, and return once the pipeline settled
    again: both workers running and candidates, one of them leading."""
    time.sleep(fault.delay_s)
    leader = world.settled(f"before {fault.kind}")
    out = Outcome(fault.kind, leader.name, world.position())
    APPLY[fault.kind](world, leader, fault, out)
    world.settled(f"after {fault.kind}")
    return out
