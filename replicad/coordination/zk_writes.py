"""The leader's writes, each fenced by the epoch: position, schema history, command results;
and the status and last error nodes. A mixin of `Leadership` (zk_leadership), which owns the
state these methods read.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

from kazoo.client import TransactionRequest
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from replicad.checkpoint_record import Checkpoint
from replicad.coordination.zk_client import (
    CommandError,
    LeaseInvalidError,
    ZkClient,
    ZkPaths,
    dumps,
    fresh_error,
    is_op_error,
    map_kazoo_error,
    now_ms,
)
from replicad.coordination.zk_ops import (
    SCHEMA_PART_BYTES,
    SCHEMA_PART_PREFIX,
    Command,
    checkpoint_from_record,
    get_command,
    list_commands,
    parse_position_record,
    position_record,
    prune_commands,
    read_schema,
    record_error,
    schema_inline,
    schema_manifest,
    schema_part_name,
    split_blob,
)
from replicad.errors import CoordinationError, FencedError, LeadershipLostError


class LeaderWrites:
    """Writes under the epoch this leader bumped: check(epoch, version) + the write, in one
    multi-op, so that a deposed leader's write fails in ZooKeeper."""

    # Owned and set by Leadership.
    client: ZkClient
    paths: ZkPaths
    _log: Any  # a bound structlog logger
    _state: str
    _epoch: int | None
    _epoch_version: int | None
    _since_ms: int | None
    _lost_error: LeadershipLostError | None
    _position_exists: bool | None
    _status_mine: bool

    @property
    def valid(self) -> bool:  # pragma: no cover - Leadership defines it
        raise NotImplementedError

    def _mark_lost(self, error: LeadershipLostError) -> None:  # pragma: no cover
        raise NotImplementedError

    def _require_valid(self, what: str) -> None:
        if self._lost_error is not None:
            raise fresh_error(self._lost_error).with_context(action=what)
        if self._state != "leader":
            raise LeadershipLostError(f"{what}: not the leader", pipeline=self.paths.pipeline)
        if not self.valid:
            raise LeaseInvalidError(
                f"{what}: the leadership lease is not valid (ZooKeeper connection suspended "
                "or not renewed in time)",
                pipeline=self.paths.pipeline,
                epoch=self._epoch,
            )

    def _fenced(
        self,
        what: str,
        path: str,
        build: Callable[[TransactionRequest], None],
        tolerate: tuple[type[BaseException], ...] = (),
    ) -> list[Any]:
        """check(epoch, my version) + the operations `build` adds, as one multi-op. A failed
        check marks the leadership lost and raises FencedError. Returns the results of the
        operations after the check; a failed operation whose error is in `tolerate` is
        returned (as the kazoo exception instance) for the caller to handle, others raise."""
        self._require_valid(what)
        txn = self.client.kazoo.transaction()
        txn.check(self.paths.epoch, self._epoch_version)
        build(txn)
        results = self.client.wait(
            txn.commit_async(),
            what=what,
            path=path,
            pipeline=self.paths.pipeline,
            epoch=self._epoch,
        )
        if is_op_error(results[0]) and not isinstance(results[0], RolledBackError):
            error = FencedError(
                f"{what} refused: the epoch moved on, another worker leads",
                path=path,
                pipeline=self.paths.pipeline,
                epoch=self._epoch,
            )
            self._log.warning(
                "zk_position_fenced" if path == self.paths.position else "zk_write_fenced",
                path=path,
                epoch=self._epoch,
            )
            self._mark_lost(error)
            raise fresh_error(error)
        failed = [
            r
            for r in results[1:]
            if is_op_error(r) and not isinstance(r, (RolledBackError, RuntimeInconsistency))
        ]
        if failed and not isinstance(failed[0], tolerate):
            raise map_kazoo_error(failed[0], what, path=path, pipeline=self.paths.pipeline)
        return results[1:]

    def load_checkpoint(self) -> Checkpoint | None:
        """The stored checkpoint (None if none). Read in this session after the epoch bump, so
        it includes every write of every earlier leader."""
        try:
            data, _ = self.client.wait(
                self.client.kazoo.get_async(self.paths.position),
                what="read the position",
                path=self.paths.position,
                allow=(NoNodeError,),
            )
        except NoNodeError:
            self._position_exists = False
            return None
        self._position_exists = True
        record = parse_position_record(data, self.paths.position)
        return None if record is None else checkpoint_from_record(record, self.paths.position)

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Store the checkpoint under this epoch (fenced; bounded by the client's op timeout).

        Raises LeaseInvalidError (wait_valid, then retry), CoordinationUnavailableError (in
        doubt: a later successful save supersedes it), FencedError / LeadershipLostError
        (stop the pipeline)."""
        data = dumps(position_record(checkpoint, self._epoch or 0, self.client.identity.worker_id))
        for _ in range(2):
            create = self._position_exists is False

            def build(txn: TransactionRequest, create: bool = create) -> None:
                if create:
                    txn.create(self.paths.position, data)
                else:
                    txn.set_data(self.paths.position, data)

            (result,) = self._fenced(
                "save the position",
                self.paths.position,
                build,
                tolerate=(NoNodeError, NodeExistsError),
            )
            if isinstance(result, NoNodeError):
                self._position_exists = False
                continue
            if isinstance(result, NodeExistsError):
                self._position_exists = True
                continue
            self._position_exists = True
            self._log.debug("zk_position_written", epoch=self._epoch, position=str(checkpoint))
            return
        raise CoordinationError(
            "the position node keeps appearing and vanishing", path=self.paths.position
        )

    def load_schema(self) -> bytes | None:
        return read_schema(self.client, self.paths)

    def save_schema(self, blob: bytes) -> None:
        """Store the schema-history blob (fenced). Up to SCHEMA_PART_BYTES it goes inline in
        one multi-op; larger, its parts are written first (each part one fenced multi-op,
        under a new generation name) and one last multi-op switches the manifest to them and
        deletes the previous generation: readers see the old blob or the new one, whole."""
        children = self.client.wait(
            self.client.kazoo.get_children_async(self.paths.schema),
            what="list schema parts",
            path=self.paths.schema,
        )
        old_parts = [c for c in children if c.startswith(SCHEMA_PART_PREFIX)]
        if len(blob) <= SCHEMA_PART_BYTES:
            header, new_parts = schema_inline(blob), []
        else:
            generation = f"{self._epoch}x{uuid.uuid4().hex[:8]}"
            chunks = split_blob(blob)
            for index, chunk in enumerate(chunks):
                name = schema_part_name(generation, index)
                path = self.paths.schema_part(name)

                def create_part(txn: TransactionRequest, p: str = path, c: bytes = chunk) -> None:
                    txn.create(p, c)

                self._fenced("write a schema part", path, create_part)
            header = schema_manifest(generation, chunks)
            new_parts = [schema_part_name(generation, i) for i in range(len(chunks))]

        def switch(txn: TransactionRequest) -> None:
            txn.set_data(self.paths.schema, header)
            for name in old_parts:
                if name not in new_parts:
                    txn.delete(self.paths.schema_part(name))

        self._fenced("save the schema history", self.paths.schema, switch)
        self._log.info(
            "zk_schema_written", epoch=self._epoch, bytes=len(blob), parts=len(new_parts)
        )

    # -------------------------------------------------------------- status, errors, commands
    def publish_status(self, fields: Mapping[str, Any]) -> bool:
        """Write the ephemeral status node (the caller passes position, read_position, lag_s
        ...; identity, epoch and times are added). Only while leader with a valid lease;
        best effort: False (and a log line) if it could not be written."""
        if not self.valid:
            return False
        record = {
            **self.client.identity.to_json(),
            "epoch": self._epoch,
            "since": self._since_ms,
            "updated_ms": now_ms(),
            **fields,
        }
        data = dumps(record)
        kazoo, path, what = self.client.kazoo, self.paths.status, "publish the status"
        try:
            if self._status_mine:
                try:
                    self.client.wait(
                        kazoo.set_async(path, data), what=what, path=path, allow=(NoNodeError,)
                    )
                    return True
                except NoNodeError:
                    self._status_mine = False
            stat = self.client.wait(kazoo.exists_async(path), what=what, path=path)
            if stat is None:
                self.client.wait(
                    kazoo.create_async(path, data, ephemeral=True), what=what, path=path
                )
            elif stat.ephemeralOwner == self.client.session_id:
                self.client.wait(kazoo.set_async(path, data), what=what, path=path)
            else:  # a deposed leader's status, still held by its live session: replace it
                txn = kazoo.transaction()
                txn.delete(path, version=stat.version)
                txn.create(path, data, ephemeral=True)
                results = self.client.wait(txn.commit_async(), what=what, path=path)
                if any(is_op_error(r) for r in results):
                    return False
            self._status_mine = True
            return True
        except CoordinationError as exc:
            self._log.warning("zk_status_failed", error=str(exc), kind=type(exc).__name__)
            return False

    def record_error(self, error: BaseException | str, kind: str | None = None) -> bool:
        """Store `last_error` (any worker, not fenced). Best effort: False if not written."""
        if isinstance(error, BaseException):
            kind = kind or type(error).__name__
        record = {
            "error": str(error),
            "kind": kind or "error",
            "worker": self.client.identity.worker_id,
            "ts_ms": now_ms(),
        }
        return record_error(self.client, self.paths, record)

    def pending_commands(self) -> list[Command]:
        return list_commands(self.client, self.paths, pending_only=True)

    def complete_command(
        self, command_id: str, state: Literal["applied", "rejected"], result: Any = None
    ) -> Command:
        """Mark a queued command applied or rejected (fenced, and compare-and-set on the
        command node so it is completed once)."""
        command, version = get_command(self.client, self.paths, command_id)
        if not command.pending:
            raise CommandError(
                f"command already {command.state}", pipeline=self.paths.pipeline, command=command_id
            )
        done = Command(
            command.id,
            command.op,
            command.args,
            command.requested_by,
            command.ts_ms,
            state,
            result,
            now_ms(),
            self.client.identity.worker_id,
            self._epoch,
        )
        path = self.paths.command(command_id)
        (outcome,) = self._fenced(
            "complete a command",
            path,
            lambda txn: txn.set_data(path, dumps(done.node_json()), version=version),
            tolerate=(BadVersionError, NoNodeError),
        )
        if is_op_error(outcome):
            raise CommandError(
                f"the command changed meanwhile ({type(outcome).__name__})",
                pipeline=self.paths.pipeline,
                command=command_id,
            )
        self._log.info("zk_command_completed", command=command_id, op=command.op, state=state)
        try:
            prune_commands(self.client, self.paths)
        except CoordinationError as exc:  # housekeeping: the next completion tries again
            self._log.warning("zk_command_prune_failed", error=str(exc))
        return done
