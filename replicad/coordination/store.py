"""What a pipeline keeps outside itself: its checkpoint (position and snapshot progress), its
schema history, and what it tells operators (status, last error). `coordination.local` keeps
them in files for a single daemon; `coordination.zk_store` keeps them in ZooKeeper, where every
write is fenced by the leader's epoch.
"""

from __future__ import annotations

from typing import Any, Protocol

from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.source.schema import SchemaHistory


class PipelineStore(Protocol):
    def describe(self) -> str:
        """Where the state lives, for logs and errors ("file /var/lib/...", "zookeeper ...")."""

    def load_checkpoint(self) -> Checkpoint | None: ...

    def save_checkpoint(self, checkpoint: Checkpoint) -> None: ...

    def load_history(self, position: Position) -> SchemaHistory | None:
        """The schema history as it was at `position` (None: none stored). Raises
        SchemaHistoryAheadError when the stored history starts after `position`."""

    def save_history(self, history: SchemaHistory, durable: Position | None) -> None:
        """Persist the history; entries at or before `durable` may be folded into its base."""

    def publish_status(self, status: dict[str, Any]) -> None:
        """Best effort: what `replicad status` shows (position, lag, ...)."""

    def record_error(self, error: str, kind: str) -> None:
        """Best effort: the error that stopped the pipeline, kept for `replicad status`."""


class Lease(Protocol):
    """The right to publish (ZooKeeper leadership). Checked before every row handed to a sink:
    `valid` must be cheap; `wait_valid()` returns once publishing may go on, or raises
    LeadershipLostError when it never may again."""

    @property
    def valid(self) -> bool: ...

    async def wait_valid(self, timeout_s: float | None = None) -> None:
        """Raises CoordinationUnavailableError when `timeout_s` passes first."""


class CommandInbox(Protocol):
    def next_command(self) -> Any:
        """An operator command due now, or None. Called by the pipeline's ticker."""
