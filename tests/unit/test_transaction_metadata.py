"""Transaction metadata bookkeeping (replicad/sinks/transaction_metadata.py): the blocks and
the BEGIN/END events Debezium's `provide.transaction.metadata` documents, checked against
counts written out by hand here."""

from __future__ import annotations

import orjson
import pytest

from replicad.binlog.changes import RowChange
from replicad.config import ConfigError, load_config
from replicad.sinks.transaction_metadata import TransactionMonitor, transaction_id

pytestmark = pytest.mark.unit


def _change(table: str, gtid: str | None = "0-1-9", pos: int = 400) -> RowChange:
    return RowChange("c", "shop", table, None, {"id": 1}, "bin.000002", pos, 0, gtid, 1, 0)


def test_blocks_number_messages_in_the_transaction_and_per_table() -> None:
    monitor = TransactionMonitor()
    blocks = [monitor.next_message(_change(t)) for t in ("a", "b", "a", "a")]
    assert [first for _, first in blocks] == [True, False, False, False]
    assert [b["total_order"] for b, _ in blocks] == [1, 2, 3, 4]
    assert [b["data_collection_order"] for b, _ in blocks] == [1, 1, 2, 3]
    assert {b["id"] for b, _ in blocks} == {"0-1-9"}


def test_begin_and_end_events_as_debezium_writes_them() -> None:
    monitor = TransactionMonitor()
    for table in ("a", "b", "a"):
        monitor.next_message(_change(table))
    key, begin = monitor.begin(1000)
    assert orjson.loads(key) == {"id": "0-1-9"}
    assert orjson.loads(begin) == {
        "status": "BEGIN",
        "id": "0-1-9",
        "event_count": None,
        "data_collections": None,
        "ts_ms": 1000,
    }
    end = monitor.end(2000)
    assert end is not None
    assert orjson.loads(end[1]) == {
        "status": "END",
        "id": "0-1-9",
        "event_count": 3,
        "data_collections": [
            {"data_collection": "shop.a", "event_count": 2},
            {"data_collection": "shop.b", "event_count": 1},
        ],
        "ts_ms": 2000,
    }
    assert monitor.end(3000) is None, "END closes the transaction"
    _, first = monitor.next_message(_change("a", gtid="0-1-10"))
    assert first and monitor.id == "0-1-10"


def test_without_gtids_the_id_is_the_first_change_s_coordinates() -> None:
    assert transaction_id(_change("a", gtid=None, pos=1234)) == "bin.000002:1234"


def test_heartbeat_messages_need_the_kafka_sink(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "source: {host: 127.0.0.1, user: r, server_id: 9}\n"
        "sinks: {stdout: {}}\nheartbeat: {publish: true}\n"
    )
    with pytest.raises(ConfigError, match=r"heartbeat\.publish"):
        load_config(path)
