"""The checkpoint record: what a pipeline stores to resume (docs/architecture.md, "Positions
and delivery") — the binlog position after the last delivered change, the progress of the
incremental snapshots running beside the stream, and how far the Kafka signal topic was read.

Snapshot progress travels here rather than in binlog's `Position` because it is the pipeline's
state, not the binary log's: it becomes durable exactly when the reads published before the
mark are acknowledged, in the same record as the position. `service/checkpoint.py` builds the
records and stores them; this module sits below `sinks/` and `coordination/` because both
persist them (the exactly-once Kafka record, ZooKeeper and the local file).

The JSON is the position record of earlier versions (`Position.to_json` with an optional
`"snapshot"` string, and `"signal_offset"` where signals come through Kafka), so stored
positions stay readable in both directions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from replicad.binlog.position import Position
from replicad.errors import InvalidPositionError


@dataclass(frozen=True, slots=True)
class Checkpoint:
    position: Position
    # Incremental snapshot progress (JSON, replicad/snapshot/incremental.py); None: none runs.
    snapshot: str | None = None
    # The offset of the next message to read in the signal topic (signals.kafka): signals
    # before it were applied, their effect is in `snapshot`. None: no Kafka signals.
    signal_offset: int | None = None

    def with_row(self, row: int) -> Checkpoint:
        return replace(self, position=self.position.with_row(row))

    def to_json(self) -> dict[str, Any]:
        out = self.position.to_json()
        if self.snapshot is not None:
            out["snapshot"] = self.snapshot
        if self.signal_offset is not None:
            out["signal_offset"] = self.signal_offset
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Checkpoint:
        position = Position.from_json(data)
        snapshot = data.get("snapshot")
        if snapshot is not None and not isinstance(snapshot, str):
            raise InvalidPositionError("position record snapshot must be a string", value=data)
        offset = data.get("signal_offset")
        if offset is not None and (not isinstance(offset, int) or offset < 0):
            raise InvalidPositionError(
                "position record signal_offset must be an offset (integer >= 0)", value=data
            )
        return cls(position, snapshot, offset)

    def __str__(self) -> str:  # logs and errors name the binlog position only
        return str(self.position)
