"""`replicad snapshot request|status|cancel`: checks a request against the primary (table,
condition, signal table and grant) before anything is queued, queues it for the pipeline's
leader (ZooKeeper command queue, or the local request files), and shows progress as the
running pipeline publishes it (docs/snapshots.md)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from replicad.config import Config
from replicad.coordination.local import (
    LocalPositionStore,
    read_status,
    running_pid,
    status_path,
)
from replicad.coordination.requests import LocalRequests
from replicad.snapshot.incremental import (
    IncrementalSnapshots,
    SnapshotRequest,
    SnapshotRequestError,
    new_request,
)
from replicad.snapshot.watermarks import ChunkReader
from replicad.source.stream import open_connection, server_info


async def _check(config: Config, password: str, request: SnapshotRequest) -> dict[str, Any]:
    conn = await open_connection(config.source, password)
    try:
        info = await server_info(conn)
        reader = ChunkReader(conn, info, config.snapshot.signal, config.pipeline)
        await reader.prepare()
        plan = await reader.check(request)
    finally:
        await conn.close()
    return {"key": list(plan.chunk_key), "columns": len(plan.columns)}


def request_snapshot(
    config: Config, password: str, table: str, where: str | None, chunk_rows: int | None
) -> dict[str, Any]:
    request = new_request(table, where, chunk_rows or config.snapshot.chunk_rows)
    checked = asyncio.run(_check(config, password, request))
    queued = _submit(config, "snapshot", request.to_json())
    return {"request": request.to_json(), "queued_as": queued, **checked}


def cancel_snapshot(config: Config, request_id: str | None) -> dict[str, Any]:
    """Queue a cancellation (None: of every snapshot). An id that is neither queued, active
    nor among the recently finished is refused (64) rather than queued to do nothing."""
    if request_id is not None:
        waiting, progress = _requests_known(config)
        if request_id not in waiting and not IncrementalSnapshots(progress).known(request_id):
            raise SnapshotRequestError(
                "no snapshot request with this id is queued, active or among the recently "
                "finished (`replicad snapshot status` lists them)",
                id=request_id,
                pipeline=config.pipeline,
            )
    return {"queued_as": _submit(config, "snapshot-cancel", {"id": request_id}), "id": request_id}


def _requests_known(config: Config) -> tuple[set[str], str | None]:
    """(the ids of snapshot requests not taken yet, the stored snapshot progress). The queue is
    read first: the pipeline completes a request only once the stored progress holds it, so a
    request taken between the two reads is in the progress read second."""
    if config.coordination.zookeeper is None:
        path = config.coordination.local.path
        waiting = LocalRequests(path).pending()
        stored = LocalPositionStore(path, config.pipeline).load()
        ids = {str(r.args.get("id")) for r in waiting if r.op == "snapshot"}
        return ids, None if stored is None else stored.snapshot
    from replicad.coordination.zk_ops import (
        ZkPaths,
        checkpoint_from_record,
        list_commands,
        read_position_record,
    )
    from replicad.service.ha import zk_client

    zk, client = zk_client(config)
    try:
        paths = ZkPaths.from_config(zk, config.pipeline)
        commands = list_commands(client, paths, pending_only=True)
        record = read_position_record(client, paths)
    finally:
        client.stop()
    ids = {str(c.args.get("id")) for c in commands if c.op == "snapshot"}
    stored = None if record is None else checkpoint_from_record(record, paths.position)
    return ids, None if stored is None else stored.snapshot


def _submit(config: Config, op: str, args: dict[str, Any]) -> str:
    if config.coordination.zookeeper is None:
        return LocalRequests(config.coordination.local.path).submit(op, args)
    from replicad.coordination.zk_ops import ZkPaths, submit_command
    from replicad.service.ha import zk_client

    zk, client = zk_client(config)
    try:
        command = submit_command(
            client,
            ZkPaths.from_config(zk, config.pipeline),
            op,
            args,
            requested_by=f"cli@{socket.gethostname()}",
        )
    finally:
        client.stop()
    return command.id


def snapshot_status(config: Config) -> dict[str, Any]:
    """The pipeline's incremental snapshots as its leader last published them, and the
    requests it has not taken yet."""
    if config.coordination.zookeeper is None:
        path = config.coordination.local.path
        status = read_status(status_path(path)) or {}
        running = running_pid(path) is not None
        inbox = LocalRequests(path)
        waiting = [{"id": r.id, "op": r.op, **r.args} for r in inbox.pending()]
        return {
            "pipeline": config.pipeline,
            "running": running,
            "incremental": status.get("incremental") if running else None,
            "initial": status.get("snapshot") if running else None,
            "signals": status.get("signals") if running else None,
            "waiting": waiting,
            "completed": inbox.done(),
        }
    from replicad.service.ha import zk_status

    state = next((p for p in zk_status(config) if p["pipeline"] == config.pipeline), {})
    return {
        "pipeline": config.pipeline,
        "running": bool(state.get("leader")),
        "incremental": state.get("incremental"),
        "initial": state.get("snapshot"),
        "signals": state.get("signals"),
        "waiting": [
            {"id": c["id"], "op": c["op"], **(c.get("args") or {})}
            for c in state.get("pending_commands") or []
            if c.get("op") in ("snapshot", "snapshot-cancel")
        ],
        "completed": [],
    }


def render_snapshot_status(status: dict[str, Any]) -> str:
    lines = [f"pipeline {status['pipeline']}  ({'running' if status['running'] else 'stopped'})"]
    incremental = status.get("incremental") or {}
    if incremental.get("paused"):
        lines.append("  paused    (pause-snapshot: no new chunk until resume-snapshot)")
    active = incremental.get("active")
    if active:
        request = active["request"]
        lines.append(
            f"  active    {request['id']} {request['table']}: {active['rows']} rows in "
            f"{active['chunks']} chunks ({active.get('rows_per_s', 0):g} rows/s), next after "
            f"{active['after'] or 'the start'}"
        )
    for request in incremental.get("queued") or []:
        lines.append(f"  queued    {request['id']} {request['table']}")
    for request in status.get("waiting") or []:
        what = request.get("table") or request.get("id") or "all"
        lines.append(f"  waiting   {request['id']} {request['op']} {what} (queued)")
    for done in incremental.get("finished") or []:
        error = f": {done['error']}" if done.get("error") else ""
        lines.append(
            f"  {done['state']:<9} {done['id']} {done['table']}: {done['rows']} rows, "
            f"{done['chunks']} chunks{error}"
        )
    for signal in status.get("signals") or []:
        error = f": {signal['error']}" if signal.get("error") else ""
        lines.append(f"  signal    {signal['id']} {signal['op']} {signal['state']}{error}")
    if len(lines) == 1:
        lines.append("  no snapshot requested")
    return "\n".join(lines)
