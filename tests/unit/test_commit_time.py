"""The transaction's commit time in microseconds (MySQL 8.0.1+ GTID events carry it) reaches
the rows of that transaction (`StatementContext.commit_us`, `EventRows.commit_us`), and only
those: a MariaDB GTID event, an XID or a COMMIT ends it. Debezium's source.ts_ms/ts_us on
MySQL are this time (measured: tests/integration/test_debezium_contract.py); the
`debezium` value mode writes it (tests/unit/test_value_modes.py)."""

from __future__ import annotations

import pytest

from replicad.binlog.changes import EventRows, StatementContext, iter_changes_by_event
from replicad.binlog.events import (
    EventHeader,
    EventType,
    GtidEvent,
    MariaGtidEvent,
    QueryEvent,
    XidEvent,
)
from replicad.binlog.rows import RowsEvent

pytestmark = pytest.mark.unit

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def header(type_code: int) -> EventHeader:
    return EventHeader(
        timestamp=1_795_845_569, type_code=type_code, server_id=1, event_size=0, log_pos=0, flags=0
    )


def gtid(gno: int, commit_us: int | None) -> GtidEvent:
    return GtidEvent(
        header(EventType.GTID),
        uuid=UUID,
        gno=gno,
        immediate_commit_ts_us=commit_us,
        original_commit_ts_us=commit_us,
    )


def rows() -> RowsEvent:
    return RowsEvent(header(EventType.WRITE_ROWS))


def test_statement_context_keeps_the_commit_time_until_the_transaction_ends() -> None:
    context = StatementContext()
    context.see(gtid(5, 1_795_845_569_490_296))
    assert context.commit_us == 1_795_845_569_490_296
    context.see(XidEvent(header(EventType.XID), xid=1))
    assert context.commit_us is None
    context.see(gtid(6, 0))  # a zero field is "unknown", not the epoch
    assert context.commit_us is None


def test_original_commit_time_wins_over_the_immediate_one() -> None:
    # A replica's binlog: the original primary committed first.
    context = StatementContext()
    event = gtid(7, 1_795_845_570_000_001)
    event.original_commit_ts_us = 1_795_845_569_999_999
    context.see(event)
    assert context.commit_us == 1_795_845_569_999_999


def test_event_rows_carry_their_transactions_commit_time() -> None:
    begin = QueryEvent(header(EventType.QUERY), thread_id=3, schema="d", query="BEGIN")
    commit = QueryEvent(header(EventType.QUERY), thread_id=3, schema="d", query="COMMIT")
    maria = MariaGtidEvent(header(EventType.MARIADB_GTID), seq_no=9, domain_id=0, flags=0)
    events = [
        gtid(1, 1_000_001),
        begin,
        rows(),
        commit,
        rows(),
        gtid(2, 2_000_002),
        rows(),
        XidEvent(header(EventType.XID), xid=2),
        maria,
        rows(),
    ]
    items = [i for i in iter_changes_by_event(events) if isinstance(i, EventRows)]
    assert [i.commit_us for i in items] == [1_000_001, None, 2_000_002, None]
