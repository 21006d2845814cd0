"""What `replicad status` shows about a pipeline: one dict per pipeline (the --json output),
built from the local position file or from a pipeline's ZooKeeper state, and its text form.
Both stores give the same keys so that one renderer reads either."""

from __future__ import annotations

import socket
from typing import Any

from replicad.config import Config
from replicad.coordination.local import (
    LocalPositionStore,
    read_status,
    running_pid,
    status_path,
)
from replicad.service.operator import describe_position


def local_pipeline_status(config: Config) -> dict[str, Any]:
    """The pipeline of `config` as the local store and its daemon's status file tell it."""
    path = config.coordination.local.path
    position = LocalPositionStore(path, config.pipeline).load()
    pid = running_pid(path)
    status = read_status(status_path(path)) or {}
    # Absolute, and whether it exists: a relative default read from the wrong directory
    # (no -c) otherwise looks like a stopped pipeline.
    where = path.resolve()
    return {
        "pipeline": config.pipeline,
        "store": f"file {where}" + ("" if where.exists() else ", absent"),
        "store_path": str(where),
        "store_exists": where.exists(),
        "leader": None if pid is None else {"pid": pid, "host": socket.gethostname()},
        "epoch": None,
        "position": None if position is None else position.to_json(),
        # The status file outlives its daemon: what it read and its lag mean nothing after.
        "read_position": status.get("read_position") if pid is not None else None,
        "lag_s": status.get("lag_s") if pid is not None else None,
        "snapshot": status.get("snapshot") if pid is not None else None,
        "incremental": status.get("incremental") if pid is not None else None,
        "updated_ms": status.get("updated_ms"),
        "last_error": status.get("last_error"),
    }


def zk_pipeline_status(state: dict[str, Any]) -> dict[str, Any]:
    """A pipeline's state as coordination.zk.read_pipeline_state reads it from ZooKeeper."""
    status = state.get("status") or {}
    record = state.get("position") or {}
    leader = state.get("leader")
    return {
        "pipeline": state["pipeline"],
        "store": f"zookeeper {state['path']}",
        "leader": None
        if leader is None
        else {k: leader.get(k) for k in ("worker", "host", "pid") if leader.get(k) is not None},
        "standbys": len(state.get("candidates") or []) - (1 if leader else 0),
        "epoch": state.get("epoch"),
        "position": record.get("position"),
        "position_epoch": record.get("epoch"),
        "position_age_s": state.get("position_age_s"),
        "read_position": status.get("read_position"),
        "lag_s": state.get("lag_s"),
        "snapshot": status.get("snapshot"),
        "incremental": status.get("incremental"),
        "signals": status.get("signals"),
        "last_error": state.get("last_error"),
        "pending_commands": state.get("pending_commands") or [],
    }


def render_status(p: dict[str, Any]) -> str:
    """The text form of one pipeline's status (either store)."""
    leader = p.get("leader")
    if leader:
        who = " ".join(f"{k}={v}" for k, v in leader.items() if v is not None)
        state = f"running ({who})"
    else:
        # Only ZooKeeper has an epoch: there a pipeline nobody leads waits for a leader.
        state = "no leader" if p.get("epoch") is not None else "stopped"
    lines = [
        f"pipeline {p['pipeline']}  ({p['store']})",
        f"  state     {state}",
    ]
    if "config" in p:
        lines.append(f"  config    {p['config'] or 'none given: built-in defaults (no -c)'}")
    if p.get("epoch") is not None:
        lines.append(f"  epoch     {p['epoch']}")
    lines.append(f"  position  {describe_position(p.get('position'))}")
    if p.get("read_position"):
        lines.append(f"  read      {describe_position(p['read_position'])}")
    if p.get("lag_s") is not None:
        lines.append(f"  lag       {p['lag_s']} s")
    tables = p.get("snapshot") or []
    if tables:
        done = sum(1 for t in tables if t.get("done"))
        lines.append(f"  snapshot  {done}/{len(tables)} tables done")
        for t in tables:
            if t.get("rows") or t.get("done"):
                state = "done" if t.get("done") else f"{t.get('rows_per_s', 0)} rows/s"
                lines.append(f"    {t['table']}  {t['rows']} rows, {t['chunks']} chunks, {state}")
    if p.get("pending_commands"):
        lines.append(f"  queued    {len(p['pending_commands'])} command(s)")
    error = p.get("last_error")
    if error:
        lines.append(f"  last error  {error.get('kind')}: {error.get('error')}")
    return "\n".join(lines)
