"""Transaction metadata as Debezium provides it (`provide.transaction.metadata`): the
`transaction` block of every change message (`id`, `total_order`, `data_collection_order`)
and, on the transaction topic, a BEGIN event before a transaction's first change message and
an END event with its counts after its last (docs/consumers.md, "Transaction metadata").

A transaction that publishes nothing (every table filtered out) has neither. The counts are
of change messages (an update of a key column is two: a delete and a create; tombstones are
not counted), per table as `db.table`. When a restart resumes inside a transaction, the rows
delivered before it are counted again without being sent (`skipped`), so the END of that
transaction still counts all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from replicad.binlog.changes import RowChange


def transaction_id(change: RowChange) -> str:
    """The GTID of the change's transaction; file:pos of its first event without GTIDs."""
    return change.gtid or f"{change.file}:{change.pos}"


@dataclass
class TransactionMonitor:
    id: str | None = None
    total: int = 0
    per_table: dict[str, int] = field(default_factory=dict)

    def next_message(self, change: RowChange) -> tuple[dict[str, Any], bool]:
        """The `transaction` block of the next change message of `change`, and whether it
        is the transaction's first (its BEGIN is due before it)."""
        first = self.id is None
        if first:
            self.id = transaction_id(change)
        self.total += 1
        table = f"{change.db}.{change.table}"
        order = self.per_table.get(table, 0) + 1
        self.per_table[table] = order
        return {"id": self.id, "total_order": self.total, "data_collection_order": order}, first

    def begin(self, ts_ms: int) -> tuple[bytes, bytes]:
        """The BEGIN event (key, value) of the transaction just started."""
        assert self.id is not None
        value = {
            "status": "BEGIN",
            "id": self.id,
            "event_count": None,
            "data_collections": None,
            "ts_ms": ts_ms,
        }
        return self._key(), orjson.dumps(value)

    def end(self, ts_ms: int) -> tuple[bytes, bytes] | None:
        """The END event (key, value) of the open transaction, which it closes; None when
        no change message was published in it."""
        if self.id is None:
            return None
        collections = [{"data_collection": t, "event_count": n} for t, n in self.per_table.items()]
        value = {
            "status": "END",
            "id": self.id,
            "event_count": self.total,
            "data_collections": collections,
            "ts_ms": ts_ms,
        }
        key = self._key()
        self.reset()
        return key, orjson.dumps(value)

    def reset(self) -> None:
        self.id, self.total = None, 0
        self.per_table.clear()

    def _key(self) -> bytes:
        return orjson.dumps({"id": self.id})
