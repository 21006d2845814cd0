"""Filters, topic names, keys and the acknowledgement bookkeeping of the sinks."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from replicad.binlog.changes import RowChange
from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.config import FiltersConfig, KafkaSinkConfig, load_config
from replicad.errors import ConfigError
from replicad.published.topics import sanitize_topic
from replicad.sinks.base import DeliveryTracker, SinkError
from replicad.sinks.kafka import _delivery_failure as kafka_delivery_failure
from replicad.sinks.routing import ChangeFilter, KafkaRouting

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

        def fatal(self) -> bool:
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


class _FakeProducer:
    """Records what the Kafka sink hands to librdkafka (no broker)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.sent: list[tuple[str, bytes | None, list[tuple[str, bytes]] | None]] = []
        self.log: list[str] = []

    def produce(
        self, topic: str, value: Any, key: Any, partition: int, on_delivery: Any, headers: Any
    ) -> None:
        self.sent.append((topic, value, headers))

    def poll(self, timeout: float) -> int:
        return 0

    def begin_transaction(self) -> None:
        self.log.append("begin")

    def commit_transaction(self, timeout: float) -> None:
        self.log.append("commit")

    def abort_transaction(self, timeout: float) -> None:
        self.log.append("abort")

    def __len__(self) -> int:
        return 0


def _sink_with_fake_producer(monkeypatch: pytest.MonkeyPatch, **options: Any) -> Any:
    from replicad.sinks import kafka, kafka_admin

    monkeypatch.setattr(kafka, "Producer", _FakeProducer)
    # no connections; the sink polls the admin client for its log lines
    monkeypatch.setattr(kafka_admin, "AdminClient", _FakeProducer)
    config = KafkaSinkConfig(bootstrap_servers="127.0.0.1:1", prefix="p", **options)
    sink = kafka.KafkaSink(config, "pipe", ChangeFilter(FiltersConfig()))
    sink.topics.ready.update({"p.shop.users", sink.routing.positions_topic})
    return sink


def _row(row: int, pos: int = 4) -> RowChange:
    return RowChange("c", "shop", "users", None, {"id": row}, "bin.000001", pos, row, "0-1-7", 1, 0)


def test_exactly_once_messages_name_their_kafka_transaction(monkeypatch) -> None:
    """Exactly-once: every data message carries `replicad.batch` = `<instance>:<n>` of the
    Kafka transaction it is produced in, and that transaction's position record names the
    same batch; rows of one ROWS event that straddle a commit get the new id."""
    import asyncio

    import orjson

    sink = _sink_with_fake_producer(monkeypatch, exactly_once=True)
    producer = sink.producer
    sink.publish(_row(0))
    sink.publish(_row(1))
    sink.mark(1, Checkpoint(Position("bin.000001", 100)), True)
    asyncio.run(sink._commit_batch())
    sink.publish(_row(2))  # the same ROWS event: only the batch part changes
    sink.mark(2, Checkpoint(Position("bin.000001", 200)), True)
    asyncio.run(sink._commit_batch())
    assert producer.log == ["begin", "commit", "begin", "commit"]
    data = [dict(h) for t, _, h in producer.sent if t == "p.shop.users"]
    positions = [orjson.loads(v) for t, v, _ in producer.sent if t == sink.routing.positions_topic]
    batches = [h["replicad.batch"].decode() for h in data]
    instance = batches[0].split(":")[0]
    assert len(instance) == 16 and int(instance, 16) >= 0
    assert batches == [f"{instance}:1", f"{instance}:1", f"{instance}:2"]
    assert [p["batch"] for p in positions] == [f"{instance}:1", f"{instance}:2"]
    assert [h["replicad.row"] for h in data] == [b"0", b"1", b"2"]
    assert all(h["replicad.gtid"] == b"0-1-7" and h["replicad.pos"] == b"4" for h in data)
    # Another sink (another pipeline run) has another instance id.
    other = _sink_with_fake_producer(monkeypatch, exactly_once=True)
    other.publish(_row(0))
    assert dict(other.producer.sent[0][2])["replicad.batch"] != f"{instance}:1"


def test_at_least_once_messages_have_no_batch_header(monkeypatch) -> None:
    sink = _sink_with_fake_producer(monkeypatch)
    sink.publish(_row(0))
    sink.publish(_row(1, pos=90))
    sink.mark(1, Checkpoint(Position("bin.000001", 100)), True)
    headers = [h for _, _, h in sink.producer.sent]
    assert [[name for name, _ in h] for h in headers] == [
        ["replicad.file", "replicad.pos", "replicad.row", "replicad.gtid"]
    ] * 2
    assert sink.producer.log == []  # no transactions


def _hashing(**columns: Any) -> ChangeFilter:
    config = FiltersConfig(columns={"hash": [r"shop\.users\.email"], **columns})
    return ChangeFilter(config, environ={"REPLICAD_MASK_SALT": "pepper"})


def test_hashed_columns_are_a_salted_hmac_in_images_and_keys() -> None:
    import hashlib
    import hmac

    f = _hashing()
    change = _change({"email": "a@x", "n": 1}, {"email": "b@x", "n": 2}, pk=("email",))
    before, after = f.rows(change)
    # HMAC-SHA256 of the value's JSON text ("a@x" with its quotes) under the salt
    expected = hmac.new(b"pepper", b'"a@x"', hashlib.sha256).hexdigest()
    assert before == {"email": expected, "n": 1}
    assert after is not None and after["email"] != "b@x" and len(after["email"]) == 64
    assert f.key_row(change, change.before) == {"email": expected, "n": 1}
    # another salt, another hash: nothing is guessable without the secret
    other = ChangeFilter(
        FiltersConfig(columns={"hash": [r"shop\.users\.email"]}),
        environ={"REPLICAD_MASK_SALT": "salt2"},
    )
    assert other.rows(change)[0] != before


def test_hashing_needs_a_salt_and_a_masked_key_column_is_refused() -> None:
    with pytest.raises(ConfigError) as missing:
        ChangeFilter(FiltersConfig(columns={"hash": ["x"]}), environ={})
    assert missing.value.context["variable"] == "REPLICAD_MASK_SALT"
    f = ChangeFilter(FiltersConfig(columns={"mask": [r"shop\.users\.email"]}), environ={})
    change = _change(None, {"email": "b@x", "n": 2}, pk=("email",))
    with pytest.raises(ConfigError) as refused:
        f.key_row(change, change.after)
    assert refused.value.context["table"] == "shop.users"


def test_key_columns_replace_the_key_and_the_statement_of_a_masked_table_is_dropped() -> None:
    import dataclasses

    f = ChangeFilter(
        FiltersConfig(key_columns={r"shop\.users": ["n"]}, columns={"mask": [r"shop\.users\.e"]})
    )
    change = dataclasses.replace(_change(None, {"n": 5, "e": "x"}, pk=()), query="INSERT 'x'")
    prepared = f.prepared(change)
    assert prepared.primary_key == ("n",) and prepared.query is None
    unrelated = dataclasses.replace(_change(None, {"id": 1}, table="other"), query="INSERT 1")
    assert f.prepared(unrelated) is unrelated
    wrong = ChangeFilter(FiltersConfig(key_columns={r"shop\.users": ["nope"]}))
    with pytest.raises(ConfigError):
        wrong.prepared(change)
