"""What ZooKeeper nodes hold, and the operator's side: pipeline nodes, position records,
the schema blob (inline or split), operator commands, the state `replicad status` shows, and
a forced position. Everything here is synchronous and bounded (for a CLI, or for the daemon
at start); the leader's fenced writes live in `replicad.coordination.zk_leadership`.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import structlog
from kazoo.exceptions import (
    BadVersionError,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.coordination.zk_client import (
    COMMAND_PREFIX,
    CandidateExistsError,
    CommandError,
    CoordinationConflictError,
    CoordinationDataError,
    ZkClient,
    ZkPaths,
    dumps,
    is_op_error,
    loads,
    map_kazoo_error,
    now_ms,
    parse_epoch,
    sequence_of,
    sorted_candidates,
)
from replicad.errors import CoordinationError, CoordinationUnavailableError, InvalidPositionError

log = structlog.get_logger("replicad.coordination.zk")

# One ZooKeeper request (a whole multi-op included) must fit the server's jute.maxbuffer,
# 1 MiB - 1 byte by default: a schema blob larger than this is split into parts, each written
# by its own multi-op, and switched to by one last multi-op (see Leadership.save_schema).
SCHEMA_PART_BYTES = 900 * 1024
_SCHEMA_INLINE = b"\x00"
_SCHEMA_PARTS = b"\x01"
SCHEMA_PART_PREFIX = "part-"

CommandState = Literal["queued", "applied", "rejected"]


# ---------------------------------------------------------------------------------- nodes
def _initial_nodes(paths: ZkPaths) -> list[tuple[str, bytes]]:
    return [(paths.election, b""), (paths.commands, b""), (paths.epoch, b"0"), (paths.schema, b"")]


def ensure_pipeline_nodes(client: ZkClient, paths: ZkPaths) -> None:
    """Create the pipeline's persistent nodes if missing (with the client's ACL)."""
    what = "create the pipeline nodes"
    client.wait(client.kazoo.ensure_path_async(paths.base), what=what, path=paths.base)
    pending = [
        (path, client.kazoo.create_async(path, data)) for path, data in _initial_nodes(paths)
    ]
    for path, result in pending:
        try:
            client.wait(result, what=what, path=path, allow=(NodeExistsError,))
        except NodeExistsError:
            pass


async def ensure_pipeline_nodes_async(client: ZkClient, paths: ZkPaths) -> None:
    what = "create the pipeline nodes"
    await client.wait_async(client.kazoo.ensure_path_async(paths.base), what=what, path=paths.base)
    pending = [
        (path, client.kazoo.create_async(path, data)) for path, data in _initial_nodes(paths)
    ]
    for path, result in pending:
        try:
            await client.wait_async(result, what=what, path=path, allow=(NodeExistsError,))
        except NodeExistsError:
            pass


def _get(client: ZkClient, path: str, what: str) -> tuple[bytes, Any] | None:
    """(data, stat) of a node, None if it does not exist."""
    try:
        data, stat = client.wait(
            client.kazoo.get_async(path), what=what, path=path, allow=(NoNodeError,)
        )
    except NoNodeError:
        return None
    return data, stat


def _children(client: ZkClient, path: str, what: str) -> list[str]:
    try:
        return list(
            client.wait(
                client.kazoo.get_children_async(path), what=what, path=path, allow=(NoNodeError,)
            )
        )
    except NoNodeError:
        return []


# ---------------------------------------------------------------------------------- position
def position_record(checkpoint: Checkpoint, epoch: int, by: str) -> dict[str, Any]:
    return {"position": checkpoint.to_json(), "epoch": epoch, "ts_ms": now_ms(), "by": by}


def parse_position_record(data: bytes, path: str) -> dict[str, Any] | None:
    """The record a position node holds; None for an empty node."""
    if not data:
        return None
    record = loads(data, path)
    if not isinstance(record, dict) or not isinstance(record.get("position"), dict):
        raise CoordinationDataError("position node holds no position record", path=path)
    return record


def checkpoint_from_record(record: dict[str, Any], path: str) -> Checkpoint:
    try:
        return Checkpoint.from_json(record["position"])
    except InvalidPositionError as exc:
        raise CoordinationDataError(
            f"position node holds no valid position: {exc}", path=path
        ) from None


def read_position_record(client: ZkClient, paths: ZkPaths) -> dict[str, Any] | None:
    got = _get(client, paths.position, "read the position")
    return None if got is None else parse_position_record(got[0], paths.position)


def read_epoch(client: ZkClient, paths: ZkPaths) -> tuple[int, int] | None:
    """(epoch, node version), None if the pipeline has no epoch node yet."""
    got = _get(client, paths.epoch, "read the epoch")
    return None if got is None else (parse_epoch(got[0], paths.epoch), got[1].version)


# ---------------------------------------------------------------------------------- schema
def schema_part_name(generation: str, index: int) -> str:
    return f"{SCHEMA_PART_PREFIX}{generation}-{index:04d}"


def split_blob(blob: bytes, part_bytes: int = SCHEMA_PART_BYTES) -> list[bytes]:
    return [blob[i : i + part_bytes] for i in range(0, len(blob), part_bytes)] or [b""]


def schema_inline(blob: bytes) -> bytes:
    return _SCHEMA_INLINE + blob


def schema_manifest(generation: str, parts: list[bytes]) -> bytes:
    blob_size = sum(len(p) for p in parts)
    digest = hashlib.sha256(b"".join(parts)).hexdigest()
    return _SCHEMA_PARTS + dumps(
        {"generation": generation, "parts": len(parts), "size": blob_size, "sha256": digest}
    )


def decode_schema_node(data: bytes, path: str) -> bytes | dict[str, Any] | None:
    """The schema node's content: None (nothing stored), the blob itself, or a manifest."""
    if not data:
        return None
    tag, body = data[:1], data[1:]
    if tag == _SCHEMA_INLINE:
        return body
    if tag == _SCHEMA_PARTS:
        manifest = loads(body, path)
        if not isinstance(manifest, dict) or not {"generation", "parts", "size", "sha256"} <= set(
            manifest
        ):
            raise CoordinationDataError("schema manifest is incomplete", path=path)
        return manifest
    raise CoordinationDataError("schema node has an unknown format", path=path, tag=tag.hex())


def read_schema(client: ZkClient, paths: ZkPaths) -> bytes | None:
    """The stored schema-history blob (None if none). A reader racing a writer that switches
    to a new generation retries: the old generation's parts vanish only after the switch."""
    for _ in range(5):
        got = _get(client, paths.schema, "read the schema history")
        content = None if got is None else decode_schema_node(got[0], paths.schema)
        if content is None or isinstance(content, bytes):
            return content
        generation = str(content["generation"])
        names = [schema_part_name(generation, i) for i in range(int(content["parts"]))]
        pending = [client.kazoo.get_async(paths.schema_part(n)) for n in names]
        try:
            parts = [
                client.wait(
                    r, what="read a schema part", path=paths.schema_part(n), allow=(NoNodeError,)
                )[0]
                for n, r in zip(names, pending, strict=True)
            ]
        except NoNodeError:
            continue  # a new generation was switched to meanwhile
        blob = b"".join(parts)
        if len(blob) != content["size"] or hashlib.sha256(blob).hexdigest() != content["sha256"]:
            raise CoordinationDataError(
                "schema parts do not match their manifest", path=paths.schema, generation=generation
            )
        return blob
    raise CoordinationUnavailableError("schema history kept changing while read", path=paths.schema)


# ---------------------------------------------------------------------------------- commands
@dataclass(frozen=True, slots=True)
class Command:
    """An operator request under `commands/`; `id` is the node name (cmd-NNNNNNNNNN)."""

    id: str
    op: str
    args: dict[str, Any]
    requested_by: str | None
    ts_ms: int
    state: CommandState = "queued"
    result: Any = None
    completed_ms: int | None = None
    completed_by: str | None = None
    epoch: int | None = None

    @property
    def pending(self) -> bool:
        return self.state == "queued"

    def node_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "op": self.op,
            "args": self.args,
            "requested_by": self.requested_by,
            "ts_ms": self.ts_ms,
            "state": self.state,
        }
        if not self.pending:
            out.update(
                result=self.result,
                completed_ms=self.completed_ms,
                completed_by=self.completed_by,
                epoch=self.epoch,
            )
        return out

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, **self.node_json()}

    @classmethod
    def from_node(cls, name: str, data: bytes, path: str) -> Command:
        raw = loads(data, path)
        if not isinstance(raw, dict) or not isinstance(raw.get("op"), str):
            raise CoordinationDataError("command node holds no command", path=path)
        state = raw.get("state", "queued")
        if state not in ("queued", "applied", "rejected"):
            raise CoordinationDataError("command node has an unknown state", path=path, state=state)
        args = raw.get("args") or {}
        if not isinstance(args, dict):
            raise CoordinationDataError("command args must be an object", path=path)
        return cls(
            name,
            raw["op"],
            args,
            raw.get("requested_by"),
            int(raw.get("ts_ms", 0)),
            state,
            raw.get("result"),
            raw.get("completed_ms"),
            raw.get("completed_by"),
            raw.get("epoch"),
        )


def submit_command(
    client: ZkClient,
    paths: ZkPaths,
    op: str,
    args: dict[str, Any] | None = None,
    requested_by: str | None = None,
) -> Command:
    """Queue a command for the pipeline's leader; returns it with its id."""
    if not op:
        raise CommandError("a command needs an op", pipeline=paths.pipeline)
    ensure_pipeline_nodes(client, paths)
    command = Command("", op, dict(args or {}), requested_by or client.identity.worker_id, now_ms())
    path = client.wait(
        client.kazoo.create_async(
            paths.command(COMMAND_PREFIX), dumps(command.node_json()), sequence=True
        ),
        what="submit a command",
        path=paths.commands,
    )
    name = str(path).rsplit("/", 1)[-1]
    log.info("zk_command_submitted", pipeline=paths.pipeline, command=name, op=op)
    return Command(name, command.op, command.args, command.requested_by, command.ts_ms)


def get_command(client: ZkClient, paths: ZkPaths, command_id: str) -> tuple[Command, int]:
    """A command and its node version."""
    path = paths.command(command_id)
    got = _get(client, path, "read a command")
    if got is None:
        raise CommandError("no such command", pipeline=paths.pipeline, command=command_id)
    return Command.from_node(command_id, got[0], path), got[1].version


def _command_names(client: ZkClient, paths: ZkPaths) -> list[str]:
    """The command nodes' names in submission order."""
    names = _children(client, paths.commands, "list commands")
    return sorted((n for n in names if n.startswith(COMMAND_PREFIX)), key=sequence_of)


def list_commands(client: ZkClient, paths: ZkPaths, *, pending_only: bool = False) -> list[Command]:
    """Commands in submission order (the oldest first)."""
    pending = [(n, client.kazoo.get_async(paths.command(n))) for n in _command_names(client, paths)]
    out: list[Command] = []
    for name, result in pending:
        try:
            data, _ = client.wait(
                result, what="read a command", path=paths.command(name), allow=(NoNodeError,)
            )
        except NoNodeError:
            continue  # pruned meanwhile
        command = Command.from_node(name, data, paths.command(name))
        if command.pending or not pending_only:
            out.append(command)
    return out


# Completed commands are kept for the operators who wait on them and for `status`, then
# pruned: those beyond the newest KEEP_COMPLETED that completed over PRUNE_AFTER_S ago.
KEEP_COMPLETED_COMMANDS = 20
PRUNE_COMPLETED_AFTER_S = 600.0


def prune_commands(
    client: ZkClient,
    paths: ZkPaths,
    *,
    keep: int = KEEP_COMPLETED_COMMANDS,
    older_than_s: float = PRUNE_COMPLETED_AFTER_S,
) -> list[str]:
    """Delete old completed commands (never a queued one); returns the ids deleted. Each
    delete checks the version read, so a node that changed meanwhile stays."""
    completed: list[tuple[Command, int]] = []
    for name in _command_names(client, paths):
        try:
            completed_or_queued = get_command(client, paths, name)
        except CommandError:
            continue  # deleted meanwhile
        if not completed_or_queued[0].pending:
            completed.append(completed_or_queued)
    cutoff_ms = now_ms() - older_than_s * 1000
    doomed = [
        (command, version)
        for command, version in completed[: max(0, len(completed) - keep)]
        if (command.completed_ms or 0) < cutoff_ms
    ]
    deleted: list[str] = []
    for command, version in doomed:
        try:
            client.wait(
                client.kazoo.delete_async(paths.command(command.id), version=version),
                what="prune a command",
                path=paths.command(command.id),
                allow=(NoNodeError, BadVersionError),
            )
            deleted.append(command.id)
        except (NoNodeError, BadVersionError):
            continue
    if deleted:
        log.info("zk_commands_pruned", pipeline=paths.pipeline, commands=len(deleted))
    return deleted


def wait_command(client: ZkClient, paths: ZkPaths, command_id: str, timeout_s: float) -> Command:
    """Block until the leader applied or rejected the command; CommandError on timeout."""
    deadline = time.monotonic() + timeout_s
    path = paths.command(command_id)
    while True:
        changed = threading.Event()
        try:
            data, _ = client.wait(
                client.kazoo.get_async(path, watch=lambda _event, ev=changed: ev.set()),
                what="read a command",
                path=path,
                allow=(NoNodeError,),
            )
        except NoNodeError:
            raise CommandError(
                "no such command", pipeline=paths.pipeline, command=command_id
            ) from None
        except CoordinationUnavailableError:
            data = None
        if data is not None:
            command = Command.from_node(command_id, data, path)
            if not command.pending:
                return command
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CommandError(
                f"command still queued after {timeout_s:g} s (is a leader running?)",
                pipeline=paths.pipeline,
                command=command_id,
            )
        changed.wait(min(remaining, 1.0))


# ---------------------------------------------------------------------------------- operators
def list_pipelines(client: ZkClient, root: str, cluster: str) -> list[str]:
    paths = ZkPaths(root, cluster, "_")
    return sorted(_children(client, paths.pipelines, "list pipelines"))


def list_candidates(client: ZkClient, paths: ZkPaths) -> list[dict[str, Any]]:
    """The election's candidates, the leader first: {candidate, session, worker, host, pid}."""
    names = sorted_candidates(_children(client, paths.election, "list the candidates"))
    pending = [(n, client.kazoo.get_async(paths.candidate(n))) for n in names]
    out: list[dict[str, Any]] = []
    for name, result in pending:
        try:
            data, stat = client.wait(
                result, what="read a candidate", path=paths.candidate(name), allow=(NoNodeError,)
            )
        except NoNodeError:
            continue  # its session ended meanwhile
        info = loads(data, paths.candidate(name)) if data else {}
        out.append(
            {
                "candidate": name,
                "session": f"{stat.ephemeralOwner:#x}",
                **(info if isinstance(info, dict) else {}),
            }
        )
    return out


def read_pipeline_state(client: ZkClient, paths: ZkPaths) -> dict[str, Any]:
    """Everything `replicad status` shows for one pipeline."""
    candidates = list_candidates(client, paths)
    epoch = read_epoch(client, paths)
    record = read_position_record(client, paths)
    status_node = _get(client, paths.status, "read the status")
    status = loads(status_node[0], paths.status) if status_node and status_node[0] else None
    error_node = _get(client, paths.last_error, "read the last error")
    last_error = loads(error_node[0], paths.last_error) if error_node and error_node[0] else None
    age = None
    if record is not None and isinstance(record.get("ts_ms"), int):
        age = round(max(0.0, time.time() - record["ts_ms"] / 1000.0), 3)
    return {
        "pipeline": paths.pipeline,
        "path": paths.base,
        "leader": candidates[0] if candidates else None,
        "candidates": candidates,
        "epoch": epoch[0] if epoch else None,
        "status": status,
        "position": record,
        "position_age_s": age,
        "lag_s": status.get("lag_s") if isinstance(status, dict) else None,
        "last_error": last_error,
        "pending_commands": [c.to_json() for c in list_commands(client, paths, pending_only=True)],
    }


def force_set_position(
    client: ZkClient,
    paths: ZkPaths,
    position: Position,
    by: str,
    *,
    schema: bytes | None = None,
) -> int:
    """Set the stored position (and, if given, the schema-history blob that goes with it)
    while no worker runs the pipeline; returns the new epoch.

    One multi-op bumps the epoch (compare-and-set on its version) and writes the position and
    the schema: a leader that starts meanwhile bumps the same epoch, so exactly one of the two
    succeeds. A schema over SCHEMA_PART_BYTES has its parts written first, under a new
    generation name that nothing refers to until that multi-op succeeds (they are removed
    again if it fails).
    """
    ensure_pipeline_nodes(client, paths)
    candidates = list_candidates(client, paths)
    if candidates:
        raise CandidateExistsError(
            "workers are candidates for this pipeline: stop them before forcing a position",
            pipeline=paths.pipeline,
            candidates=",".join(f"{c['candidate']}({c.get('worker')})" for c in candidates),
        )
    current = read_epoch(client, paths)
    if current is None:  # deleted right after ensure_pipeline_nodes created it
        raise CoordinationConflictError("the epoch node vanished", path=paths.epoch)
    epoch, version = current
    data = dumps(position_record(Checkpoint(position), epoch + 1, by))
    exists = _get(client, paths.position, "read the position") is not None
    old_parts = [
        c
        for c in _children(client, paths.schema, "list schema parts")
        if c.startswith(SCHEMA_PART_PREFIX)
    ]
    new_parts: list[str] = []
    header = None
    if schema is not None and len(schema) > SCHEMA_PART_BYTES:
        generation = f"{epoch + 1}f{uuid.uuid4().hex[:8]}"
        chunks = split_blob(schema)
        for index, chunk in enumerate(chunks):
            name = schema_part_name(generation, index)
            new_parts.append(name)
            client.wait(
                client.kazoo.create_async(paths.schema_part(name), chunk),
                what="write a schema part",
                path=paths.schema_part(name),
            )
        header = schema_manifest(generation, chunks)
    elif schema is not None:
        header = schema_inline(schema)
    txn = client.kazoo.transaction()
    txn.set_data(paths.epoch, str(epoch + 1).encode(), version=version)
    if exists:
        txn.set_data(paths.position, data)
    else:
        txn.create(paths.position, data)
    if header is not None:
        txn.set_data(paths.schema, header)
        for name in old_parts:
            txn.delete(paths.schema_part(name))
    try:
        results = client.wait(txn.commit_async(), what="force the position", path=paths.position)
        failed = [
            (i, r)
            for i, r in enumerate(results)
            if is_op_error(r) and not isinstance(r, (RolledBackError, RuntimeInconsistency))
        ]
        if failed:
            index, error = failed[0]
            if isinstance(error, NoAuthError):
                raise map_kazoo_error(error, "force the position", path=paths.position)
            if index == 0 and isinstance(error, (BadVersionError, NoNodeError)):
                raise CoordinationConflictError(
                    "the epoch moved while forcing the position (a leader started?): nothing "
                    "was written",
                    pipeline=paths.pipeline,
                    epoch=epoch,
                )
            raise CoordinationConflictError(
                f"a node changed while forcing the position ({type(error).__name__}): nothing "
                "was written",
                pipeline=paths.pipeline,
                path=paths.position,
            )
    except CoordinationError:
        for name in new_parts:  # nothing refers to them: best-effort cleanup
            client.kazoo.delete_async(paths.schema_part(name))
        raise
    log.warning(
        "zk_position_forced",
        pipeline=paths.pipeline,
        position=str(position),
        epoch=epoch + 1,
        by=by,
        schema_bytes=None if schema is None else len(schema),
    )
    return epoch + 1


def record_error(client: ZkClient, paths: ZkPaths, record: Mapping[str, Any]) -> bool:
    """Store `last_error` (persistent, not fenced). Best effort: it is called on error paths,
    where raising would hide the error being recorded."""
    data = dumps(dict(record))
    kazoo = client.kazoo
    try:
        try:
            client.wait(
                kazoo.set_async(paths.last_error, data),
                what="record the error",
                path=paths.last_error,
                allow=(NoNodeError,),
            )
        except NoNodeError:
            client.wait(
                kazoo.create_async(paths.last_error, data, makepath=True),
                what="record the error",
                path=paths.last_error,
            )
        return True
    except CoordinationError as exc:
        log.warning("zk_record_error_failed", pipeline=paths.pipeline, error=str(exc))
        return False
