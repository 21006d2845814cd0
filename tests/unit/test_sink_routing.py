"""Filters, topic names, keys and the acknowledgement bookkeeping of the sinks."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from replicad.binlog.changes import RowChange
from replicad.config import FiltersConfig, KafkaSinkConfig, load_config
from replicad.errors import ConfigError
from replicad.sinks.base import DeliveryTracker, SinkError
from replicad.sinks.kafka import _delivery_failure as kafka_delivery_failure
from replicad.sinks.routing import ChangeFilter, KafkaRouting, sanitize_topic
from replicad.source.position import Position

pytestmark = pytest.mark.unit


def _change(
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    pk: tuple[str, ...] = ("id",),
    db: str = "shop",
    table: str = "users",
) -> RowChange:
    op = "c" if before is None else "d" if after is None else "u"
    return RowChange(op, db, table, before, after, "bin.000001", 4, 0, None, 1, 0, pk)


def test_table_filters_fully_match_and_exclude_wins() -> None:
    f = ChangeFilter(
        FiltersConfig(include=[r"shop\..*", "crm.accounts"], exclude=[r"shop\.audit_.*"])
    )
    assert f.includes("shop", "orders")
    assert not f.includes("myshop", "orders")  # a full match, not a search
    assert not f.includes("shop", "audit_2024")
    assert f.includes("crm", "accounts")
    assert not f.includes("crm", "accounts_old")


def test_columns_dropped_and_masked_without_touching_the_change() -> None:
    f = ChangeFilter(
        FiltersConfig(
            columns={
                "exclude": [r"shop\.users\.password_hash"],
                "mask": [r"shop\.users\.(email|phone)"],
            }
        )
    )
    change = _change(
        {"id": 1, "email": "a@x", "phone": None, "password_hash": "h"},
        {"id": 1, "email": "b@x", "phone": "555", "password_hash": "h2"},
    )
    before, after = f.rows(change)
    assert before == {"id": 1, "email": "***", "phone": None}  # NULL stays NULL
    assert after == {"id": 1, "email": "***", "phone": "***"}
    assert change.after is not None and change.after["email"] == "b@x"
    other = _change(None, {"id": 2, "email": "c@x"}, table="admins")
    assert f.rows(other) == (None, {"id": 2, "email": "c@x"})


def test_topic_template_and_sanitising() -> None:
    routing = KafkaRouting(KafkaSinkConfig(bootstrap_servers="k:9092", prefix="cdc"), "orders")
    assert routing.topic("shop", "orders") == "cdc.shop.orders"
    assert routing.topic("shöp", "my table") == "cdc.sh_p.my_table"
    assert routing.positions_topic == "cdc.replicad-positions"
    default = KafkaRouting(KafkaSinkConfig(bootstrap_servers="k:9092"), "orders-db")
    assert default.topic("a", "b") == "orders-db.a.b"  # the prefix defaults to the pipeline
    with pytest.raises(ConfigError, match="placeholders"):
        KafkaRouting(KafkaSinkConfig(bootstrap_servers="k", topic="{prefix}.{schema}"), "p")
    with pytest.raises(ConfigError, match="249"):
        sanitize_topic("x" * 250)


@pytest.mark.parametrize(
    ("fallback", "expected"),
    [("null", None), ("table", {"db": "shop", "table": "log"}), ("row", {"a": 1, "b": "x"})],
)
def test_key_is_the_primary_key_or_the_documented_fallback(fallback: str, expected: Any) -> None:
    routing = KafkaRouting(KafkaSinkConfig(bootstrap_servers="k", key_without_pk=fallback), "p")
    with_pk = _change(None, {"id": 7, "region": "eu", "v": 1}, pk=("region", "id"))
    assert routing.key(with_pk, with_pk.after) == {"region": "eu", "id": 7}
    without = _change(None, {"a": 1, "b": "x"}, pk=(), table="log")
    assert routing.key(without, without.after) == expected


class _Msg:
    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def key(self) -> bytes:
        return b'{"id":1}'

    def headers(self) -> None:
        return None  # librdkafka's delivery reports carry no headers


def test_tracker_reports_marks_in_order_once_all_their_messages_are_delivered() -> None:
    tracker = DeliveryTracker()
    first = []
    for _ in range(2):
        unit = tracker.current
        unit.outstanding += 1
        first.append(unit)
    tracker.close(1)
    second = tracker.current
    second.outstanding += 1
    tracker.close(2)
    tracker.close(3)  # a transaction that published nothing
    assert tracker.acked() == 0
    second.delivered(None, _Msg())  # a later mark completing first does not count yet
    assert tracker.acked() == 0
    first[0].delivered(None, _Msg())
    assert tracker.acked() == 0
    first[1].delivered(None, _Msg())
    assert tracker.acked() == 3
    assert tracker.outstanding == 0


def test_tracker_failure_is_raised_and_names_the_message() -> None:
    """The failure names topic, key and the binlog position the failed message follows (the
    mark before its unit), although the delivery report itself carries no headers."""
    tracker = DeliveryTracker(kafka_delivery_failure)
    tracker.close(1, Position("bin.000001", 1234))
    unit = tracker.current
    unit.outstanding += 1
    tracker.close(2, Position("bin.000001", 5678))

    class _Err:
        def code(self) -> int:
            return KafkaError.MSG_SIZE_TOO_LARGE

        def retriable(self) -> bool:
            return False

        def str(self) -> str:
            return "MSG_SIZE_TOO_LARGE"

    unit.delivered(_Err(), _Msg())
    with pytest.raises(SinkError, match="MSG_SIZE_TOO_LARGE") as raised:
        tracker.acked()
    assert raised.value.context["topic"] == "t"
    assert raised.value.context["key"] == '{"id":1}'
    assert raised.value.context["after_position"] == "bin.000001:1234"


def test_kafka_config_errors_name_the_key() -> None:
    env = {"REPLICAD_SINKS__KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9092"}
    config = load_config(None, env)
    assert config.sinks.kafka is not None and config.sinks.kafka.tombstones
    with pytest.raises(ConfigError, match="key_without_pk"):
        load_config(None, {**env, "REPLICAD_SINKS__KAFKA__KEY_WITHOUT_PK": "random"})
    with pytest.raises(ConfigError, match="bad regex"):
        load_config(None, {"REPLICAD_FILTERS__INCLUDE": "['shop(']"})
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        load_config(None, {"REPLICAD_SINKS__KAFKA__TOMBSTONES": "false"})
