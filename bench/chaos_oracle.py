"""The campaign's oracle, on what consumers read once the run is over.

- Nothing lost: the data topics, each change taken once (by topic, binlog coordinates and op:
  tests/faults/test_ha_failover.change_id) and applied in binlog order, equal SELECT: the shop
  tables by key (tests/helpers/ha.py's message mapping), the table without a key by its row
  count, the all-types table through the schema topic alone (tests/helpers/all_types.py), a
  TRUNCATE emptying it.
- Duplicates: in exactly-once none, and the read_committed audit of tests/helpers/kafka_run.py
  (every committed batch with its position record, aborted ones hidden); in at-least-once every
  repeated change lies inside the window of some fault.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson
import pymysql

from bench.chaos_faults import Window
from replicad.consumers.typed import SchemaCatalog
from tests.faults.test_ha_failover import change_id
from tests.helpers.all_types import fold_typed, selected_rows
from tests.helpers.ha import MARIADB, coordinate
from tests.helpers.kafka_helpers import Record, consume_all
from tests.helpers.kafka_run import (
    ExactlyOnceView,
    after_image,
    assert_read_committed_view,
    audit_rows,
    read_exactly_once,
    read_topics,
)

SHOP_TABLES = ("items", "accounts", "audit")


@dataclass
class Verdict:
    changes: int = 0  # distinct changes read
    lost: int = 0  # rows missing or different from SELECT
    duplicates: int = 0  # repeated deliveries of a change
    problems: list[str] = field(default_factory=list)


def _table(record: Record, prefix: str, db: str) -> str:
    return record.topic[len(f"{prefix}.{db}.") :]


def distinct_in_binlog_order(records: list[Record]) -> tuple[list[Record], int]:
    """Each change once (its first delivery), sorted by binlog coordinates; and how many
    deliveries were repeats."""
    seen: set[tuple[Any, ...]] = set()
    once = []
    for record in records:
        if (ident := change_id(record)) not in seen:
            seen.add(ident)
            once.append(record)
    return sorted(once, key=coordinate), len(records) - len(once)


def _fold_shop(records: list[Record], prefix: str, db: str) -> tuple[dict[str, Any], int]:
    """The keyed shop tables as the records leave them, and the audit rows' count."""
    state: dict[str, dict[str, Any]] = {"items": {}, "accounts": {}}
    audit = 0
    for record in records:
        table = _table(record, prefix, db)
        envelope = None if record.value is None else orjson.loads(record.value)
        if table == "audit":
            audit += envelope is not None and envelope["op"] == "c"
        elif table in state and record.key is not None:
            if envelope is None or envelope["op"] == "d":
                state[table].pop(record.key.decode(), None)
            else:
                state[table][record.key.decode()] = after_image(envelope)
    return state, audit


def _differing(got: dict[Any, Any], want: dict[Any, Any]) -> list[Any]:
    return [k for k in set(got) | set(want) if got.get(k) != want.get(k)]


def _compare(
    verdict: Verdict, conn: Any, prefix: str, db: str, kafka: str, once: list[Record]
) -> None:
    shop, audit = _fold_shop(once, prefix, db)
    expected = MARIADB.expected_state(conn, db)
    for table, rows in shop.items():
        differ = _differing(rows, expected.get(table, {}))
        verdict.lost += len(differ)
        if differ:
            verdict.problems.append(
                f"{table}: {len(differ)} keys differ, e.g. {sorted(differ)[:3]}"
            )
    if audit != audit_rows(conn, db):
        verdict.lost += abs(audit_rows(conn, db) - audit)
        verdict.problems.append(f"audit: {audit} rows published, {audit_rows(conn, db)} in table")
    catalog = SchemaCatalog()
    for schema in consume_all(kafka, [f"{prefix}.schema"], idle_s=1.0):
        catalog.add(schema.value)
    typed = [orjson.loads(r.value) for r in once if _table(r, prefix, db) == "t" and r.value]
    differ = _differing(fold_typed(typed, catalog), selected_rows(conn, db))
    verdict.lost += len(differ)
    if differ:
        verdict.problems.append(f"t: {len(differ)} ids differ, e.g. {sorted(differ)[:3]}")


def _outside(records: list[Record], windows: list[Window]) -> list[tuple[Any, ...]]:
    counts = Counter(change_id(r) for r in records)
    return [
        dup
        for dup, n in counts.items()
        if n > 1 and not any(low < (dup[1], dup[2]) <= high for low, high in windows)
    ]


def _audit_exactly_once(
    verdict: Verdict, conn: Any, kafka: str, prefix: str, db: str, pipeline: str
) -> None:
    """The read_committed audit, on the shop tables (what it knows how to fold)."""
    view = read_exactly_once(kafka, prefix, db, pipeline)

    def shop(records: list[Record]) -> list[Record]:
        return [r for r in records if _table(r, prefix, db) in SHOP_TABLES]

    shop_view = ExactlyOnceView(
        shop(view.committed), shop(view.written), view.positions, view.positions_written
    )
    try:
        assert_read_committed_view(
            shop_view, conn, db, prefix, expected=MARIADB.expected_state(conn, db)
        )
    except AssertionError as exc:
        verdict.problems.append(f"read_committed audit: {str(exc)[:300]}")


def judge(
    conn: pymysql.connections.Connection,
    kafka: str,
    prefix: str,
    db: str,
    pipeline: str,
    mode: str,
    windows: list[Window],
) -> Verdict:
    verdict = Verdict()
    records = read_topics(kafka, prefix, db)
    once, verdict.duplicates = distinct_in_binlog_order(records)
    verdict.changes = len(once)
    _compare(verdict, conn, prefix, db, kafka, once)
    if mode == "exactly-once":
        if verdict.duplicates:
            verdict.problems.append(f"{verdict.duplicates} duplicates in exactly-once")
        _audit_exactly_once(verdict, conn, kafka, prefix, db, pipeline)
    elif outside := _outside(records, windows):
        verdict.problems.append(
            f"{len(outside)} changes repeated outside every fault's window, e.g. {outside[:2]}"
        )
    return verdict
