"""Debezium's signal messages as the snapshot driver's requests
(replicad/snapshot/signal_messages.py), written out by hand from Debezium's documented
shapes."""

from __future__ import annotations

import orjson
import pytest

from replicad.snapshot.signal_messages import SignalError, SignalRequest, signal_requests

pytestmark = pytest.mark.unit


def _signal(value: object, offset: int = 7) -> list[SignalRequest]:
    return signal_requests(orjson.dumps(value), offset, chunk_rows=500)


def test_execute_snapshot_is_one_request_per_table_with_its_filter() -> None:
    got = _signal(
        {
            "type": "execute-snapshot",
            "data": {
                "data-collections": ["shop.orders", "shop.lines"],
                "type": "INCREMENTAL",
                "additional-conditions": [{"data-collection": "shop.orders", "filter": "id > 5"}],
            },
        }
    )
    assert got == [
        SignalRequest(
            "kafka-7:shop.orders",
            "snapshot",
            {"table": "shop.orders", "where": "id > 5", "chunk_rows": 500},
        ),
        SignalRequest(
            "kafka-7:shop.lines",
            "snapshot",
            {"table": "shop.lines", "where": None, "chunk_rows": 500},
        ),
    ]


def test_a_signal_id_given_in_the_message_names_its_requests() -> None:
    got = _signal(
        {"id": "ad-hoc-1", "type": "execute-snapshot", "data": {"data-collections": ["a.b"]}}
    )
    assert [r.id for r in got] == ["ad-hoc-1:a.b"]


def test_stop_pause_resume_and_log() -> None:
    assert _signal({"type": "stop-snapshot", "data": {"data-collections": ["a.b"]}}) == [
        SignalRequest("kafka-7", "snapshot-cancel", {"tables": ["a.b"]})
    ]
    assert _signal({"type": "stop-snapshot"}) == [
        SignalRequest("kafka-7", "snapshot-cancel", {"id": None})
    ]
    assert _signal({"type": "pause-snapshot"}) == [SignalRequest("kafka-7", "snapshot-pause", {})]
    assert _signal({"type": "resume-snapshot"}) == [SignalRequest("kafka-7", "snapshot-resume", {})]
    assert _signal({"type": "log", "data": {"message": "hello"}}) == [
        SignalRequest("kafka-7", "log", {"message": "hello"})
    ]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"not json", "not JSON"),
        (b'["execute-snapshot"]', "object with a"),
        (b'{"type": "restart-connector"}', "unknown signal type"),
        (
            b'{"type": "execute-snapshot", "data": {"data-collections": ["a.b"], '
            b'"type": "blocking"}}',
            "only incremental",
        ),
        (b'{"type": "execute-snapshot", "data": {}}', "data-collections"),
        (b'{"type": "execute-snapshot", "data": {"data-collections": ["nodot"]}}', "not db.table"),
    ],
)
def test_signals_that_cannot_apply_name_their_offset(value: bytes, reason: str) -> None:
    with pytest.raises(SignalError, match=reason) as info:
        signal_requests(value, 42, 500)
    assert info.value.context["offset"] == 42
