"""`source.snapshot` on snapshot reads, as Debezium marks them (its SnapshotRecord): an
initial snapshot's first table starts with "first", its last table ends with "last", the
other tables start with "first_in_data_collection" and end with "last_in_data_collection",
"true" between; every read of an incremental snapshot requested while streaming is
"incremental"."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import orjson

from tests.helpers.daemon_process import DaemonProcess
from tests.helpers.kafka_helpers import Record


def snapshot_order(daemon: DaemonProcess) -> list[str]:
    """The initial snapshot's tables in the order it read them (its `snapshot_started`
    event), as table names."""
    started = [e for e in daemon.log_events() if e.get("event") == "snapshot_started"]
    assert started, "no snapshot_started event"
    return [name.rsplit(".", 1)[1] for name in started[0]["tables"]]


def marks_by_table(reads: Sequence[Record]) -> dict[str, Counter[str]]:
    """How often each mark appears on each table's reads (the topic's last name part)."""
    out: dict[str, Counter[str]] = {}
    for record in reads:
        table = record.topic.rsplit(".", 1)[1]
        mark = orjson.loads(record.value or b"{}")["source"]["snapshot"]
        out.setdefault(table, Counter())[mark] += 1
    return out


def assert_initial_marks(reads: Sequence[Record], order: Sequence[str]) -> None:
    """Each table of `order` (the snapshot's table order) starts and ends once, with the
    marks of its place; every other read is "true". Where a read falls within its topic is
    not checked: a table's topic may have several partitions."""
    found = marks_by_table(reads)
    assert sorted(found) == sorted(order), (sorted(found), order)
    for index, table in enumerate(order):
        start = "first" if index == 0 else "first_in_data_collection"
        end = "last" if index == len(order) - 1 else "last_in_data_collection"
        counts = found[table]
        rows = sum(counts.values())
        assert rows > 1, f"{table}: one read cannot show both ends"
        assert +counts == Counter({start: 1, end: 1, "true": rows - 2}), (table, dict(counts))
