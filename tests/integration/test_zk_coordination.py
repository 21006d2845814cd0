"""ZooKeeper coordination against real servers: the standalone one of scripts/services.sh, a
private standalone one (outages, restarts) and a private 3-node ensemble (member restarts).
Every test works under its own root, removed afterwards. Nothing is mocked: sessions expire,
processes are stopped and servers killed for real.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError
from structlog.testing import capture_logs

from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.config import ZookeeperConfig
from replicad.coordination.zk import (
    CandidateExistsError,
    CommandError,
    CoordinationAuthError,
    CoordinationError,
    CoordinationUnavailableError,
    FencedError,
    Leadership,
    LeadershipLostError,
    LeadershipSlots,
    ZkClient,
    ZkPaths,
    campaign_with_slot,
    force_set_position,
    list_commands,
    list_pipelines,
    read_epoch,
    read_pipeline_state,
    read_schema,
    submit_command,
    wait_command,
)
from tests.helpers.zk_helpers import (
    DIGEST,
    ROOT,
    TEST_PASSWORD,
    TEST_USER,
    ZkEnsemble,
    ZkServer,
    delete_tree,
    expire_session,
    poll_until,
    raw_client,
    read_json,
    unique_root,
    within,
    zk_config,
)

pytestmark = pytest.mark.integration


def pos(n: int, file: str = "mariadb-bin.000001") -> Position:
    return Position(file, 4 + n)


@pytest.fixture
def zk_root(zookeeper: str) -> Iterator[str]:
    root = unique_root()
    yield root
    delete_tree(zookeeper, root)


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkEnsemble]:
    group = ZkEnsemble(tmp_path_factory.mktemp("zk-ensemble"))
    try:
        group.up()
        yield group
    finally:
        group.down()


async def _cancel(*tasks: asyncio.Future[object]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with suppress(BaseException):
            await task


# ------------------------------------------------------------------------------------------ 1
@pytest.mark.asyncio
async def test_one_leader_epochs_and_fencing(
    zookeeper: str, zk_root: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """Three sessions campaign: the first in line wins epoch 1. Its client closes: the next
    wins epoch 2, and the old leader cannot write. An operator removes the second leader's
    candidate node while its session lives: the third wins epoch 3 and the deposed leader's
    write is fenced by ZooKeeper; the position node holds the new leader's write."""
    paths = ZkPaths(zk_root, "default", "orders")
    workers = [clients(zk_config(zookeeper, zk_root, worker_id=f"w{i}")) for i in range(3)]
    for worker in workers:
        await worker.start_async(timeout_s=15)
    leads = [Leadership(worker, paths) for worker in workers]
    tasks: list[asyncio.Task[int]] = []
    try:
        for lead in leads:  # one after the other, so the election order is known
            tasks.append(asyncio.ensure_future(lead.campaign()))
            await poll_until(lambda lead=lead: lead.candidate is not None, 10, "a candidate")
        assert await within(tasks[0], 10, "the first leader") == 1
        await poll_until(lambda: leads[0].valid, 5, "a valid lease")
        assert [lead.is_leader for lead in leads] == [True, False, False]
        assert not tasks[1].done() and not tasks[2].done()
        assert read_epoch(workers[1], paths) == (1, 1)
        leads[0].save_checkpoint(Checkpoint(pos(1)))

        workers[0].stop()
        assert await within(tasks[1], 15, "the second leader") == 2
        assert not tasks[2].done()
        assert leads[0].lost and not leads[0].valid
        leads[1].save_checkpoint(Checkpoint(pos(2)))
        with pytest.raises(LeadershipLostError) as lost:
            leads[0].save_checkpoint(Checkpoint(pos(99)))
        assert type(lost.value) is LeadershipLostError  # its session is gone: never sent

        with raw_client(zookeeper) as kz:
            assert read_json(kz, paths.position)["by"] == "w1"
            kz.delete(paths.candidate(leads[1].candidate or "?"))
        assert await within(tasks[2], 15, "the third leader") == 3
        leads[2].save_checkpoint(Checkpoint(pos(3)))
        with pytest.raises(FencedError):
            leads[1].save_checkpoint(Checkpoint(pos(98)))
        assert leads[1].lost and not leads[1].valid
        with raw_client(zookeeper) as kz:
            record = read_json(kz, paths.position)
            assert kz.get(paths.epoch)[0] == b"3"
        assert record["position"] == pos(3).to_json()
        assert (record["epoch"], record["by"]) == (3, "w2")
        assert leads[2].load_checkpoint() == Checkpoint(pos(3))
    finally:
        await _cancel(*tasks)


# ------------------------------------------------------------------------------------------ 2
@pytest.mark.asyncio
async def test_session_expiry_loses_leadership(
    zookeeper: str, zk_root: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """A real session expiry: the leader sees LOST, its lease is invalid, wait_valid() raises
    LeadershipLostError, its save fails; the standby leads with the next epoch."""
    paths = ZkPaths(zk_root, "default", "orders")
    victim = clients(zk_config(zookeeper, zk_root, worker_id="victim"))
    standby = clients(zk_config(zookeeper, zk_root, worker_id="standby"))
    await victim.start_async(timeout_s=15)
    await standby.start_async(timeout_s=15)
    states: list[str] = []
    victim.add_listener(states.append)
    victim_lead, standby_lead = Leadership(victim, paths), Leadership(standby, paths)
    standby_task: asyncio.Future[int] | None = None
    try:
        assert await within(victim_lead.campaign(), 10, "the victim leads") == 1
        standby_task = asyncio.ensure_future(standby_lead.campaign())
        await poll_until(lambda: standby_lead.candidate is not None, 10, "the standby queues")
        victim_lead.save_checkpoint(Checkpoint(pos(1)))
        assert victim_lead.valid

        await asyncio.to_thread(expire_session, zookeeper, victim.kazoo)
        await poll_until(lambda: victim_lead.lost, 15, "the victim noticing the expiry")
        assert "LOST" in states
        assert not victim_lead.valid
        with pytest.raises(LeadershipLostError):
            await victim_lead.wait_valid(timeout_s=5)
        with pytest.raises(LeadershipLostError):
            victim_lead.save_checkpoint(Checkpoint(pos(99)))

        assert await within(standby_task, 15, "the standby leads") == 2
        standby_lead.save_checkpoint(Checkpoint(pos(2)))
        with raw_client(zookeeper) as kz:
            assert read_json(kz, paths.position)["position"] == pos(2).to_json()
        # The victim's client is back with a new session: it can queue again, behind.
        await victim.wait_connected(15)
        again = asyncio.ensure_future(victim_lead.campaign())
        await poll_until(lambda: victim_lead.candidate is not None, 10, "the victim requeues")
        state = read_pipeline_state(standby, paths)
        assert [c["worker"] for c in state["candidates"]] == ["standby", "victim"]
        assert not again.done()
        await _cancel(again)
    finally:
        if standby_task is not None:
            await _cancel(standby_task)


@pytest.mark.asyncio
async def test_lease_follows_the_session_timeout_the_server_granted(
    zookeeper: str, zk_root: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """The project's server grants at most 20 ticks (10 s): asking for 60 s must not give a
    36 s lease."""
    client = clients(zk_config(zookeeper, zk_root, session_timeout_s=60))
    await client.start_async(timeout_s=15)
    lead = Leadership(client, ZkPaths(zk_root, "default", "p"))
    assert await within(lead.campaign(), 10, "leadership") == 1
    assert client.session_timeout_s == pytest.approx(10.0)
    assert lead.lease_s == pytest.approx(6.0)
    assert 0 < lead.valid_for_s <= 6.0


# ------------------------------------------------------------------------------------------ 3
@pytest.mark.asyncio
async def test_stopped_zombie_is_invalid_on_waking(
    zookeeper: str, zk_root: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """A leader process is SIGSTOPped for longer than its session timeout; a standby takes
    over. On SIGCONT the very first lease the zombie reports is invalid (its monotonic clock
    ran on: its lease ran out by the clock, whatever kazoo says yet), it then learns it
    lost, and none of its saves land."""
    paths = ZkPaths(zk_root, "default", "orders")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.helpers.zk_helpers",
            "zombie",
            "--hosts",
            zookeeper,
            "--root",
            zk_root,
            "--pipeline",
            "orders",
            "--session-timeout",
            "2",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[dict[str, object]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    standby = clients(zk_config(zookeeper, zk_root, worker_id="standby"))
    standby_lead = Leadership(standby, paths)
    standby_task: asyncio.Future[int] | None = None
    try:
        await poll_until(lambda: any(x["event"] == "leader" for x in lines), 20, "the zombie")
        await poll_until(lambda: any(x.get("valid") for x in lines), 5, "a valid tick")
        await standby.start_async(timeout_s=15)
        standby_task = asyncio.ensure_future(standby_lead.campaign())
        await poll_until(lambda: standby_lead.candidate is not None, 10, "the standby queues")

        stopped_at = time.monotonic()
        os.kill(proc.pid, signal.SIGSTOP)
        assert await within(standby_task, 15, "the standby taking over") == 2
        standby_lead.save_checkpoint(Checkpoint(pos(7)))
        # The takeover proves the session expired (the server counts from the zombie's last
        # packet, before the stop); keep it stopped longer than its session timeout anyway.
        await asyncio.sleep(max(0.0, stopped_at + 2.5 - time.monotonic()))
        resumed_at = time.monotonic()
        os.kill(proc.pid, signal.SIGCONT)
        proc.wait(timeout=30)
        reader.join(timeout=5)

        before = [x for x in lines if x["event"] == "tick" and float(x["mono"]) < stopped_at]  # type: ignore[arg-type]
        after = [x for x in lines if x["event"] == "tick" and float(x["mono"]) >= resumed_at]  # type: ignore[arg-type]
        assert before and before[-1]["valid"] is True
        assert after, lines[-5:]
        assert after[0]["valid"] is False, after[:3]
        # ...by the clock alone: kazoo may or may not have seen the closed socket yet.
        assert float(after[0]["expires_in"]) < 0, after[:3]  # type: ignore[arg-type]
        assert not any(x["valid"] for x in after)
        assert any(x["lost"] for x in after)
        events = {str(x["event"]): x for x in lines}
        assert events["woke"]["stopped_s"] > 2.0  # type: ignore[operator]  # > session timeout
        assert events["save_at_wake"]["result"] in (
            "LeaseInvalidError",
            "LeadershipLostError",
            "FencedError",
        )
        assert events["wait_valid"]["result"] in ("LeadershipLostError", "FencedError")
        assert events["save_after_loss"]["result"] in ("LeadershipLostError", "FencedError")
        with raw_client(zookeeper) as kz:
            record = read_json(kz, paths.position)
        assert (record["position"], record["epoch"], record["by"]) == (
            pos(7).to_json(),
            2,
            "standby",
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=10)
        if standby_task is not None:
            await _cancel(standby_task)


# ------------------------------------------------------------------------------------------ 4
@pytest.mark.asyncio
async def test_outage_suspends_then_revalidates(
    tmp_path: Path, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """A private server: the client waits for it (zk_unavailable, no crash). Once leading,
    the server is killed for less than the session timeout and restarted on its dataDir: the
    lease is invalid while SUSPENDED, then valid again in the same session and epoch."""
    server = ZkServer(tmp_path / "zk")
    root = unique_root()
    try:
        impatient = clients(zk_config(server.hosts, root))
        with pytest.raises(CoordinationUnavailableError):  # typed and transient, not a crash
            await asyncio.to_thread(impatient.start, 0.5)
        with capture_logs() as logs:
            client = clients(
                zk_config(server.hosts, root, session_timeout_s=10, connect_timeout_s=0.3)
            )
            connecting = asyncio.ensure_future(client.start_async())
            await poll_until(
                lambda: any(e["event"] == "zk_unavailable" for e in logs), 10, "zk_unavailable"
            )
            assert not connecting.done()
            await asyncio.to_thread(server.up)
            await within(connecting, 15, "the connection")
        states: list[str] = []
        client.add_listener(states.append)
        lead = Leadership(client, ZkPaths(root, "default", "orders"))
        epoch = await within(lead.campaign(), 10, "leadership")
        lead.save_checkpoint(Checkpoint(pos(1)))
        session = client.session_id

        await asyncio.to_thread(server.kill)
        await poll_until(lambda: not lead.valid, 5, "the lease turning invalid")
        assert "SUSPENDED" in states and not lead.lost
        with pytest.raises(CoordinationError):  # LeaseInvalidError: nothing is sent
            lead.save_checkpoint(Checkpoint(pos(2)))
        await asyncio.to_thread(server.up)
        await within(lead.wait_valid(), 15, "the lease valid again")
        assert states[states.index("SUSPENDED") :][-1] == "CONNECTED"
        assert "LOST" not in states
        assert (client.session_id, lead.epoch, lead.lost) == (session, epoch, False)
        lead.save_checkpoint(Checkpoint(pos(3)))
        assert read_epoch(client, lead.paths) == (epoch, 1)
        assert lead.load_checkpoint() == Checkpoint(pos(3))
    finally:
        with suppress(Exception):
            delete_tree(server.hosts, root)
        await asyncio.to_thread(server.down)


# ------------------------------------------------------------------------------------------ 5
@pytest.mark.asyncio
async def test_ensemble_member_restarts(
    ensemble: ZkEnsemble, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """Each member of a 3-node ensemble is killed (-9) and restarted in turn while a leader
    keeps saving positions: every save succeeds or raises a typed error, the leadership
    survives (or is won again with a higher epoch), the last successful save is stored."""
    root = unique_root()
    client = clients(zk_config(ensemble.hosts, root, session_timeout_s=6))
    await client.start_async(timeout_s=20)
    lead = Leadership(client, ZkPaths(root, "default", "orders"))
    first_epoch = await within(lead.campaign(), 15, "leadership")
    ok: list[tuple[Position, int]] = []  # (position, epoch) of each successful save
    failures: list[str] = []
    stop = asyncio.Event()

    async def saver() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                if not lead.valid:
                    await lead.wait_valid(timeout_s=2)
                lead.save_checkpoint(Checkpoint(pos(n)))
                ok.append((pos(n), lead.epoch or 0))
            except LeadershipLostError as exc:
                failures.append(type(exc).__name__)
                await lead.campaign()
            except CoordinationError as exc:  # typed and transient: in doubt at worst
                failures.append(type(exc).__name__)
            await asyncio.sleep(0.03)

    task = asyncio.ensure_future(saver())
    try:
        for member in (1, 2, 3):
            before = len(ok)
            await asyncio.to_thread(ensemble.kill, member)
            await asyncio.to_thread(ensemble.start, member)
            await poll_until(lambda before=before: len(ok) > before + 5, 20, "saves going on")
        stop.set()
        await within(task, 15, "the saver")
        await within(lead.wait_valid(), 15, "a valid lease")
        final = pos(10_000)
        lead.save_checkpoint(Checkpoint(final))
        ok.append((final, lead.epoch or 0))
        assert lead.epoch is not None and lead.epoch >= first_epoch
        if "LeadershipLostError" in failures or "FencedError" in failures:
            assert lead.epoch > first_epoch
        with raw_client(ensemble.hosts) as kz:
            record = read_json(kz, f"{root}/default/pipelines/orders/position")
            epoch_node = int(kz.get(f"{root}/default/pipelines/orders/epoch")[0])
        assert (record["position"], record["epoch"]) == (ok[-1][0].to_json(), ok[-1][1])
        assert epoch_node == lead.epoch
        assert len(ok) > 20
    finally:
        stop.set()
        await _cancel(task)
        with suppress(Exception):
            delete_tree(ensemble.hosts, root)


# ------------------------------------------------------------------------------------------ 6
@pytest.mark.asyncio
async def test_private_acl_and_digest_auth(
    zookeeper: str, zk_root: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """acl=private: nodes are the configured user's alone; a client without credentials
    gets NoAuth, a wrong password the typed operator error. private-readable adds world
    READ, not write."""
    auth = {"username": TEST_USER, "password": TEST_PASSWORD}
    paths = ZkPaths(zk_root, "default", "orders")
    owner = clients(zk_config(zookeeper, zk_root, acl="private", auth=auth))
    await owner.start_async(timeout_s=15)
    lead = Leadership(owner, paths)
    assert await within(lead.campaign(), 10, "leadership") == 1
    lead.save_checkpoint(Checkpoint(pos(1)))
    assert lead.load_checkpoint() == Checkpoint(pos(1))
    assert lead.publish_status({"lag_s": 0.5})

    with raw_client(zookeeper) as anonymous:
        for action in (
            lambda: anonymous.get(paths.position),
            lambda: anonymous.set(paths.position, b"{}"),
            lambda: anonymous.get_children(paths.election),
            lambda: anonymous.create(paths.candidate("c_intruder_"), b"", sequence=True),
        ):
            with pytest.raises(NoAuthError):
                action()
    with raw_client(zookeeper, auth=DIGEST) as kz:
        acl, _ = kz.get_acls(paths.position)
        assert [(a.id.scheme, a.perms) for a in acl] == [("digest", 31)]

    wrong = clients(
        zk_config(
            zookeeper, zk_root, acl="private", auth={"username": TEST_USER, "password": "wrong"}
        )
    )
    await wrong.start_async(timeout_s=15)
    with pytest.raises(CoordinationAuthError) as refused:
        await within(Leadership(wrong, paths).campaign(), 10, "a refusal")
    assert "ACL" in str(refused.value) and refused.value.context.get("path")
    with pytest.raises(CoordinationAuthError):
        read_pipeline_state(wrong, paths)

    readable = ZkPaths(zk_root, "default", "public")
    shared = clients(zk_config(zookeeper, zk_root, acl="private-readable", auth=auth))
    await shared.start_async(timeout_s=15)
    shared_lead = Leadership(shared, readable)
    assert await within(shared_lead.campaign(), 10, "leadership") == 1
    shared_lead.save_checkpoint(Checkpoint(pos(2)))
    with raw_client(zookeeper) as anonymous:
        assert read_json(anonymous, readable.position)["position"] == pos(2).to_json()
        with pytest.raises(NoAuthError):
            anonymous.set(readable.position, b"{}")


# ------------------------------------------------------------------------------------------ 7
@pytest.mark.asyncio
async def test_capacity_spreads_pipelines(
    zookeeper: str, zk_root: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """Two workers, three pipelines, max_pipelines=2: nobody leads more than two, all three
    are led. When one worker goes, the other takes one more and stays at two, with no
    candidacy left for the pipeline it cannot take."""
    pipelines = ["p1", "p2", "p3"]
    workers = {
        w: clients(zk_config(zookeeper, zk_root, worker_id=w, max_pipelines=2)) for w in ("a", "b")
    }
    leads = {
        (w, p): Leadership(c, ZkPaths(zk_root, "default", p))
        for w, c in workers.items()
        for p in pipelines
    }
    slots = {w: LeadershipSlots(c.config.max_pipelines) for w, c in workers.items()}
    # What the test counts is what a daemon would run: pipelines whose campaign returned. A
    # win that raced the last slot away is led for an instant and resigned before it returns
    # (zk_capacity_resign), so ZooKeeper's view of leaders may briefly show three.
    running: dict[str, set[str]] = {"a": set(), "b": set()}
    worst = {"a": 0, "b": 0}

    async def run(worker: str, pipeline: str) -> None:
        lead = leads[worker, pipeline]
        while True:
            await campaign_with_slot(lead, slots[worker])
            running[worker].add(pipeline)
            try:
                assert lead.is_leader, f"{worker} runs {pipeline} without leading it"
                worst[worker] = max(worst[worker], len(running[worker]))
                await lead.wait_lost()
            finally:
                running[worker].discard(pipeline)
                slots[worker].release()

    def led_by(worker: str) -> list[str]:
        return [p for p in pipelines if leads[worker, p].is_leader]

    for client in workers.values():
        await client.start_async(timeout_s=15)
    tasks = {(w, p): asyncio.ensure_future(run(w, p)) for w in workers for p in pipelines}
    try:
        await poll_until(
            lambda: running["a"] | running["b"] == set(pipelines), 20, "all pipelines run"
        )
        assert sorted(led_by("a") + led_by("b")) == pipelines
        assert 1 <= len(running["a"]) <= 2 and 1 <= len(running["b"]) <= 2
        assert not running["a"] & running["b"]

        await _cancel(*(tasks["a", p] for p in pipelines))
        for p in pipelines:
            await leads["a", p].resign()
        workers["a"].stop()
        await poll_until(lambda: len(led_by("b")) == 2, 20, "b leading two")
        orphan = next(p for p in pipelines if not leads["b", p].is_leader)
        orphan_paths = ZkPaths(zk_root, "default", orphan)
        await poll_until(
            lambda: read_pipeline_state(workers["b"], orphan_paths)["candidates"] == [],
            10,
            "b withdrawing from the third pipeline",
        )
        assert slots["b"].held == 2 and len(running["b"]) == 2
        assert worst["a"] <= 2 and worst["b"] <= 2
    finally:
        await _cancel(*tasks.values())


@pytest.mark.asyncio
async def test_capacity_race_resigns_the_extra_win(
    zookeeper: str, zk_root: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """One slot, two pipelines nobody else wants: both campaigns can win at once; the worker
    keeps one and resigns (or withdraws from) the other."""
    client = clients(zk_config(zookeeper, zk_root, worker_id="solo", max_pipelines=1))
    await client.start_async(timeout_s=15)
    slots = LeadershipSlots(1)
    leads = [Leadership(client, ZkPaths(zk_root, "default", p)) for p in ("q1", "q2")]
    tasks = [asyncio.ensure_future(campaign_with_slot(lead, slots)) for lead in leads]
    try:
        done, _ = await asyncio.wait(tasks, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1 and slots.held == 1
        winner = 0 if tasks[0] in done else 1
        other = leads[1 - winner]
        await poll_until(
            lambda: read_pipeline_state(client, other.paths)["candidates"] == [],
            10,
            "the other candidacy gone",
        )
        assert leads[winner].is_leader and not other.is_leader and not tasks[1 - winner].done()
    finally:
        await _cancel(*tasks)


# ------------------------------------------------------------------------------------------ 8
@pytest.mark.asyncio
async def test_operator_helpers_and_commands(
    zookeeper: str, zk_root: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """force_set_position works only with no candidate (bumping the epoch, so a leader
    starting later reads it); commands go from submitted to applied/rejected by a leader
    loop, and wait_command returns the result; status, last error and listing."""
    paths = ZkPaths(zk_root, "default", "orders")
    operator = clients(zk_config(zookeeper, zk_root, worker_id="operator"))
    worker = clients(zk_config(zookeeper, zk_root, worker_id="worker"))
    await operator.start_async(timeout_s=15)
    await worker.start_async(timeout_s=15)

    assert force_set_position(operator, paths, pos(5), by="alice") == 1
    lead = Leadership(worker, paths)
    assert await within(lead.campaign(), 10, "leadership") == 2
    assert lead.load_checkpoint() == Checkpoint(pos(5))
    with pytest.raises(CandidateExistsError):
        force_set_position(operator, paths, pos(6), by="alice")
    assert read_epoch(operator, paths) == (2, 2)

    lead.save_checkpoint(Checkpoint(pos(8)))
    assert lead.publish_status(
        {"position": str(pos(8)), "read_position": str(pos(9)), "lag_s": 1.25}
    )
    assert lead.record_error(RuntimeError("broker down"))
    state = read_pipeline_state(operator, paths)
    assert state["leader"]["worker"] == "worker" and state["epoch"] == 2
    assert state["position"]["position"] == pos(8).to_json() and state["lag_s"] == 1.25
    assert state["status"]["epoch"] == 2 and state["status"]["worker"] == "worker"
    assert state["last_error"]["kind"] == "RuntimeError"
    assert list_pipelines(operator, zk_root, "default") == ["orders"]

    reset = submit_command(operator, paths, "reset_position", {"file": "x", "pos": 4})
    bogus = submit_command(operator, paths, "explode")
    assert [c.id for c in list_commands(operator, paths, pending_only=True)] == [reset.id, bogus.id]
    assert [c["id"] for c in read_pipeline_state(operator, paths)["pending_commands"]] == [
        reset.id,
        bogus.id,
    ]

    async def leader_loop() -> None:
        while True:
            for command in lead.pending_commands():
                if command.op == "reset_position":
                    lead.complete_command(command.id, "applied", {"position": command.args})
                else:
                    lead.complete_command(command.id, "rejected", "unknown op")
            await asyncio.sleep(0.05)

    loop_task = asyncio.ensure_future(leader_loop())
    try:
        applied = await asyncio.to_thread(wait_command, operator, paths, reset.id, 10)
        rejected = await asyncio.to_thread(wait_command, operator, paths, bogus.id, 10)
    finally:
        await _cancel(loop_task)
    assert (applied.state, applied.result) == ("applied", {"position": {"file": "x", "pos": 4}})
    assert (applied.completed_by, applied.epoch) == ("worker", 2)
    assert (rejected.state, rejected.result) == ("rejected", "unknown op")
    with pytest.raises(CommandError):
        lead.complete_command(reset.id, "applied")
    assert list_commands(operator, paths, pending_only=True) == []
    lonely = submit_command(operator, paths, "noop")
    with pytest.raises(CommandError):
        wait_command(operator, paths, lonely.id, 0.3)

    await lead.resign()
    state = read_pipeline_state(operator, paths)
    assert state["leader"] is None and state["status"] is None
    assert force_set_position(operator, paths, pos(9), by="alice") == 3
    assert read_pipeline_state(operator, paths)["position"]["by"] == "alice"


@pytest.mark.asyncio
async def test_schema_blob_inline_and_split(
    zookeeper: str, zk_root: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """A blob over one request's size limit is stored as parts and read back whole; a small
    one replaces it inline and the parts are gone; a deposed leader cannot write either; an
    operator's forced position writes its schema snapshot along."""
    paths = ZkPaths(zk_root, "default", "orders")
    client = clients(zk_config(zookeeper, zk_root))
    await client.start_async(timeout_s=15)
    lead = Leadership(client, paths)
    await within(lead.campaign(), 10, "leadership")
    assert lead.load_schema() is None
    big = os.urandom(2_300_000)
    lead.save_schema(big)
    assert lead.load_schema() == big
    with raw_client(zookeeper) as kz:
        assert len(kz.get_children(paths.schema)) == 3
    lead.save_schema(b"small")
    assert lead.load_schema() == b"small"
    with raw_client(zookeeper) as kz:
        assert kz.get_children(paths.schema) == []
        kz.set(paths.epoch, b"42")  # another leader took over
    with pytest.raises(FencedError):
        lead.save_schema(b"stale")
    assert lead.load_schema() == b"small"

    # A forced position carries its schema snapshot in the same multi-op (split if large).
    await lead.resign()
    snapshot = os.urandom(1_500_000)
    assert force_set_position(client, paths, pos(4), "alice", schema=snapshot) == 43
    assert read_schema(client, paths) == snapshot
    with raw_client(zookeeper) as kz:
        assert len(kz.get_children(paths.schema)) == 2
    assert force_set_position(client, paths, pos(5), "alice", schema=b"tiny") == 44
    assert read_schema(client, paths) == b"tiny" and lead.load_checkpoint() == Checkpoint(pos(5))
    with raw_client(zookeeper) as kz:
        assert kz.get_children(paths.schema) == []


@pytest.mark.asyncio
async def test_completed_commands_are_pruned_queued_ones_never(
    zookeeper: str, zk_root: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """Completing a command prunes the completed ones beyond the newest 20 that completed
    over 10 minutes ago; a queued command is never pruned, however old."""
    paths = ZkPaths(zk_root, "default", "orders")
    client = clients(zk_config(zookeeper, zk_root))
    await client.start_async(timeout_s=15)
    lead = Leadership(client, paths)
    await within(lead.campaign(), 10, "leadership")
    queued_old = submit_command(client, paths, "noop")
    done = [submit_command(client, paths, "noop") for _ in range(22)]
    for command in done:
        lead.complete_command(command.id, "applied")
    hour_ago = int(time.time() * 1000) - 3_600_000
    with raw_client(zookeeper) as kz:
        for command in [*done[:2], queued_old]:  # age two completed ones and the queued one
            path = paths.command(command.id)
            node = json.loads(kz.get(path)[0])
            node["ts_ms"] = hour_ago
            if node["state"] != "queued":
                node["completed_ms"] = hour_ago
            kz.set(path, json.dumps(node).encode())
    last = submit_command(client, paths, "noop")
    lead.complete_command(last.id, "applied")
    left = [c.id for c in list_commands(client, paths)]
    # 23 completed: the 3 oldest are beyond the newest 20, and 2 of them are old enough.
    assert left == [queued_old.id, *(c.id for c in done[2:]), last.id], left
    assert [c.id for c in list_commands(client, paths, pending_only=True)] == [queued_old.id]
