"""`replicad run` with ZooKeeper (docs/architecture.md, "ZooKeeper layout"): a worker
campaigns for each of its pipelines, leads at most `coordination.zookeeper.max_pipelines` of
them at once, and runs a pipeline only while it leads it.

- The position and the schema history live in ZooKeeper; every write is fenced by the
  leader's epoch (coordination.zk_store over coordination.zk), so a deposed leader cannot
  move them.
- Every row handed to a sink is preceded by a look at the leadership lease: publishing stops
  the moment ZooKeeper is suspended or silent for too long, and goes on only when the epoch
  is re-validated. A lost leadership abandons the pipeline (nothing more is sent, no final
  checkpoint) and the worker campaigns again.
- Operator commands queued under `commands/` (`replicad position set` while a leader runs)
  are picked up by the pipeline's ticker and applied at a transaction boundary: the pipeline
  stops cleanly (everything published is acknowledged and checkpointed), the new position
  and a schema snapshot for it are written (fenced), the command is marked applied, and the
  pipeline starts again from the new position.
- ZooKeeper unreachable: nobody leads, nothing is published, nothing is lost; the worker
  keeps trying and resumes when it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import structlog

from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.config import Config, ZookeeperConfig
from replicad.coordination.zk import (
    Command,
    CommandError,
    Leadership,
    LeadershipLostError,
    LeadershipSlots,
    ZkClient,
    ZkPaths,
    campaign_with_slot,
    force_set_position,
    list_pipelines,
    read_pipeline_state,
    submit_command,
    wait_command,
)
from replicad.coordination.zk_store import (
    SET_POSITION,
    ZkCommandInbox,
    ZkPipelineStore,
    compress_schema,
)
from replicad.errors import (
    ConfigError,
    CoordinationUnavailableError,
    ReplicadError,
)
from replicad.published.exits import needs_operator
from replicad.service.daemon import Pipeline, run_until_stopped
from replicad.service.operator import resolve_position
from replicad.service.status_view import zk_pipeline_status
from replicad.service.telemetry import Telemetry
from replicad.sinks.base import ProducerFencedError
from replicad.source.schema import snapshot
from replicad.source.stream import ReplicaDisplacedError, open_connection

log = structlog.get_logger("replicad.ha")

RETRY_AFTER_FAILURE_S = 5.0  # after a transient pipeline failure, before campaigning again
T = TypeVar("T")


async def run_with_zookeeper(
    configs: Sequence[Config],
    passwords: Sequence[str],
    stop: asyncio.Event,
    telemetry: Telemetry | None = None,
) -> None:
    """Run every pipeline of `configs` that this worker gets to lead, until `stop`."""
    zk = configs[0].coordination.zookeeper
    assert zk is not None
    for config in configs[1:]:
        other = config.coordination.zookeeper
        if other is None or (other.hosts, other.root, other.cluster) != (
            zk.hosts,
            zk.root,
            zk.cluster,
        ):
            raise ConfigError(
                "all pipelines of one worker must use the same ZooKeeper hosts, root and cluster",
                key="coordination.zookeeper",
                pipeline=config.pipeline,
            )
    names = [c.pipeline for c in configs]
    if len(set(names)) != len(names):
        raise ConfigError("two config files name the same pipeline", value=names)
    client = ZkClient(zk)
    telemetry = telemetry or Telemetry()
    telemetry.zookeeper = client  # /readyz: a standby is ready only with a live session
    try:
        started = await _unless_stopped(client.start_async(), stop)
        if started is None:
            log.info("stopped", note="stopped while connecting to ZooKeeper")
            return
        started.result()  # a refused login raises here
        slots = LeadershipSlots(zk.max_pipelines)
        tasks = [
            asyncio.create_task(_lead(config, password, client, slots, stop, telemetry))
            for config, password in zip(configs, passwords, strict=True)
        ]
        try:
            # The first failure (an operator error) ends the worker; the others stop cleanly.
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if task.exception() is not None:
                    stop.set()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    raise task.exception()  # type: ignore[misc]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await asyncio.to_thread(client.stop)


async def _unless_stopped(
    work: Coroutine[Any, Any, T], stop: asyncio.Event
) -> asyncio.Future[T] | None:
    """Run `work` unless `stop` is set first: its finished task (`.result()` gives its value
    or raises its error), or None once it has been cancelled because of the stop. Every wait
    of the worker outside a pipeline goes through here, so a signal is never ignored."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        return task
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, ReplicadError):
        await task
    return None


async def _lead(
    config: Config,
    password: str,
    client: ZkClient,
    slots: LeadershipSlots,
    stop: asyncio.Event,
    telemetry: Telemetry,
) -> None:
    """Campaign, lead until stopped or deposed, campaign again."""
    zk = config.coordination.zookeeper
    assert zk is not None
    leadership = Leadership(client, ZkPaths.from_config(zk, config.pipeline))
    plog = log.bind(pipeline=config.pipeline)
    while not stop.is_set():
        telemetry.set_role(config.pipeline, "standby")
        campaign = await _unless_stopped(campaign_with_slot(leadership, slots), stop)
        if campaign is None:
            break
        epoch = campaign.result()
        plog.info("leading", epoch=epoch, worker=client.identity.worker_id)
        telemetry.set_role(config.pipeline, "leading", epoch)
        pause = 0.0
        try:
            await _run_as_leader(config, password, leadership, stop, plog, telemetry)
            break  # stopped on request
        except (LeadershipLostError, ProducerFencedError) as exc:
            # Deposed: the session ended or was suspended too long, the epoch moved on, or
            # the next leader's producer fenced ours. Back to standby at once, in this
            # process; the next pipeline gets a fresh producer.
            plog.warning("leadership_lost", error=str(exc), kind=type(exc).__name__, epoch=epoch)
            if isinstance(exc, LeadershipLostError):  # a fenced producer is counted as itself
                telemetry.errors.labels(config.pipeline, "leadership_lost").inc()
            await _settle_loss(leadership)
        except ReplicaDisplacedError as exc:
            # The primary ended our dump for another with the pipeline's server_id. With
            # our lease expired that is the next leader (the failover itself): step down.
            # With it valid, another pipeline or daemon uses this server_id: exit 78.
            if leadership.valid:
                raise
            plog.warning("leadership_lost", error=str(exc), kind=type(exc).__name__, epoch=epoch)
            await _settle_loss(leadership)
        except CoordinationUnavailableError as exc:
            # The lease could not be confirmed and the pipeline gave up on a write: treat it
            # as a loss (the position is still where the last fenced write put it).
            plog.warning("leadership_abandoned", error=str(exc), epoch=epoch)
            await _settle_loss(leadership)
        except ReplicadError as exc:
            if needs_operator(exc):
                raise  # a restart cannot fix it: the worker stops (exit 78)
            # Transient (the primary or Kafka away for good measure, a producer in a fatal
            # state, the relay directory still held by a deposed leader on this host): this
            # pipeline stopped at its last checkpoint. Step down so that a standby (or this
            # worker, after a pause) starts it afresh; the worker's other pipelines go on.
            plog.error("pipeline_failed", error=str(exc), kind=type(exc).__name__, epoch=epoch)
            await _settle_loss(leadership)
            pause = RETRY_AFTER_FAILURE_S
        finally:
            slots.release()
            telemetry.set_role(config.pipeline, "standby")  # also during a pause after a failure
        if pause:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)
    with contextlib.suppress(ReplicadError):
        await leadership.resign()


async def _settle_loss(leadership: Leadership) -> None:
    with contextlib.suppress(ReplicadError):
        await leadership.resign()  # drops the candidate node if the session still has it


async def _run_as_leader(
    config: Config,
    password: str,
    leadership: Leadership,
    stop: asyncio.Event,
    plog: Any,
    telemetry: Telemetry,
) -> None:
    store = ZkPipelineStore(leadership)
    inbox = ZkCommandInbox(leadership)
    while True:
        pipeline: Pipeline = await run_until_stopped(
            config,
            password,
            stop,
            store=store,
            lease=leadership,
            inbox=inbox,
            requests=inbox,
            telemetry=telemetry,
        )
        command = pipeline.command
        if command is None:
            return  # stopped on request
        await _apply_set_position(config, password, leadership, store, command, plog)
        if stop.is_set():
            return


async def _apply_set_position(
    config: Config,
    password: str,
    leadership: Leadership,
    store: ZkPipelineStore,
    command: Command,
    plog: Any,
) -> None:
    """The pipeline stopped cleanly at a transaction boundary: write the requested position
    with a schema snapshot for it (both fenced), then mark the command applied."""
    old = store.load_checkpoint()
    try:
        position = Position.from_json(command.args["position"])
        conn = await open_connection(config.source, password)
        try:
            history = await snapshot(conn, position)
        finally:
            await conn.close()
    except (KeyError, TypeError, ReplicadError) as exc:
        plog.warning("position_command_rejected", command=command.id, error=str(exc))
        leadership.complete_command(command.id, "rejected", {"error": str(exc)})
        return
    store.save_history(history, None)  # the history first: never behind the position
    store.save_checkpoint(Checkpoint(position))  # incremental snapshots are not carried
    result = {
        "old": None if old is None else old.to_json(),
        "new": position.to_json(),
        "how": f"applied by the leader (epoch {leadership.epoch})",
    }
    leadership.complete_command(command.id, "applied", result)
    plog.warning(
        "position_changed",
        old=str(old),
        new=str(position),
        command=command.id,
        requested_by=command.requested_by,
        epoch=leadership.epoch,
    )


# ---------------------------------------------------------------------- operator side


def zk_client(config: Config) -> tuple[ZookeeperConfig, ZkClient]:
    zk = config.coordination.zookeeper
    assert zk is not None
    client = ZkClient(zk)
    client.start(timeout_s=zk.connect_timeout_s)
    return zk, client


def zk_status(config: Config) -> list[dict[str, Any]]:
    """Every pipeline of the cluster, as `replicad status` shows it."""
    zk, client = zk_client(config)
    try:
        names = list_pipelines(client, zk.root, zk.cluster)
        return [
            zk_pipeline_status(read_pipeline_state(client, ZkPaths.from_config(zk, name)))
            for name in names
        ]
    finally:
        client.stop()


def zk_change_position(
    config: Config, password: str, value: str, force: bool, timeout_s: float
) -> dict[str, Any]:
    """`replicad position set|reset` with ZooKeeper: queued for a live leader, or written
    directly with --force when no worker is a candidate. The value is resolved and checked
    against the primary first; a bad value writes nothing."""
    position, history = asyncio.run(resolve_position(config, password, value))
    zk, client = zk_client(config)
    by = f"cli@{socket.gethostname()}"
    try:
        paths = ZkPaths.from_config(zk, config.pipeline)
        state = read_pipeline_state(client, paths)
        old = (state.get("position") or {}).get("position")
        if state.get("leader") is not None:
            if force:
                raise CommandError(
                    "a leader is alive: --force is only for a pipeline nobody runs; without "
                    "--force the change is queued and applied by the leader",
                    pipeline=config.pipeline,
                    leader=state["leader"].get("worker"),
                )
            command = submit_command(
                client,
                paths,
                SET_POSITION,
                {"position": position.to_json(), "value": value},
                requested_by=by,
            )
            done = wait_command(client, paths, command.id, timeout_s)
            if done.state != "applied":
                raise CommandError(
                    "the leader rejected the change",
                    command=command.id,
                    error=(done.result or {}).get("error"),
                )
            return dict(done.result or {}, command=command.id)
        if not force:
            raise CommandError(
                "no leader is alive: a queued change would wait for one. Use --force to "
                "write the position now",
                pipeline=config.pipeline,
            )
        blob = compress_schema(history.serialize())
        epoch = force_set_position(client, paths, position, by, schema=blob)
        return {"old": old, "new": position.to_json(), "how": f"forced (epoch {epoch})"}
    finally:
        client.stop()
