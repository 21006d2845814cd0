"""The store adapters of a ZooKeeper leader (the `coordination.store` protocols over
ZooKeeper): its PipelineStore and its ZkCommandInbox. The Lease is `zk_leadership.Leadership`
itself. `coordination.local` is the file-based counterpart for a single daemon.
"""

from __future__ import annotations

import time
from typing import Any

import zstandard

from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.coordination.requests import SNAPSHOT_OPS, OperatorRequest
from replicad.coordination.zk_leadership import Leadership
from replicad.coordination.zk_ops import Command
from replicad.source.schema import SchemaHistory

SET_POSITION = "set_position"
COMMAND_POLL_S = 1.0
# The schema history is JSON and ZooKeeper nodes are limited to ~1 MiB: compressed, it fits
# (or needs fewer parts); level 3 is zstd's default trade-off.
_ZSTD_LEVEL = 3


def compress_schema(raw: bytes) -> bytes:
    """A serialized schema history as stored in the `schema` node."""
    return zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(raw)


class ZkPipelineStore:
    """The PipelineStore of a leader: ZooKeeper nodes written under its epoch. The schema
    history is stored zstd-compressed (it is JSON; ZooKeeper nodes are limited to ~1 MiB)."""

    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership

    def describe(self) -> str:
        return f"zookeeper {self.leadership.paths.base}"

    def load_checkpoint(self) -> Checkpoint | None:
        return self.leadership.load_checkpoint()

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.leadership.save_checkpoint(checkpoint)

    def load_history(self, position: Position) -> SchemaHistory | None:
        blob = self.leadership.load_schema()
        if not blob:
            return None
        raw = zstandard.ZstdDecompressor().decompress(blob)
        return SchemaHistory.parse(raw, position, zookeeper=self.leadership.paths.schema)

    def save_history(self, history: SchemaHistory, durable: Position | None) -> None:
        self.leadership.save_schema(compress_schema(history.serialize(durable=durable)))

    def publish_status(self, status: dict[str, Any]) -> None:
        self.leadership.publish_status(status)

    def record_error(self, error: str, kind: str) -> None:
        self.leadership.record_error(error, kind)


class ZkCommandInbox:
    """Operator commands for the pipeline this worker leads, looked for at most every
    COMMAND_POLL_S (by the pipeline's ticker, outside the hot path)."""

    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership
        self._checked = 0.0

    def next_command(self) -> Command | None:
        now = time.monotonic()
        if now - self._checked < COMMAND_POLL_S or not self.leadership.valid:
            return None
        self._checked = now
        for command in self.leadership.pending_commands():
            if command.op == SET_POSITION:
                return command
            if command.op in SNAPSHOT_OPS:
                continue  # the pipeline takes these itself (pending/complete)
            self.leadership.complete_command(
                command.id, "rejected", {"error": f"unknown command {command.op!r}"}
            )
        return None

    def pending(self) -> list[OperatorRequest]:
        """Snapshot requests and cancellations (coordination/requests.py)."""
        if not self.leadership.valid:
            return []
        return [
            OperatorRequest(c.id, c.op, c.args)
            for c in self.leadership.pending_commands()
            if c.op in SNAPSHOT_OPS
        ]

    def complete(self, request_id: str, state: str, result: dict[str, Any]) -> None:
        self.leadership.complete_command(
            request_id, "applied" if state == "applied" else "rejected", result
        )
