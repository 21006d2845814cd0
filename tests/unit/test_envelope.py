"""The JSON mapping of column values in the change envelope (docs/architecture.md,
"Message format")."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replicad.binlog.changes import RowChange
from replicad.binlog.column_types import TableDescription
from replicad.binlog.values import Geometry, float32_shortest
from replicad.sinks.envelope import (
    EnvelopeLines,
    EnvelopeWriter,
    change_envelope,
    dumps,
    format_time,
    row_messages,
)

pytestmark = pytest.mark.unit


def _change(after: dict, json_columns: frozenset[str] = frozenset()) -> dict:
    change = RowChange(
        "c", "db", "t", None, after, "bin.000001", 120, 0, "0-1-5", 1, 1000, ("id",), json_columns
    )
    return orjson.loads(EnvelopeLines("pipe").row(change))


def test_value_mapping() -> None:
    out = _change(
        {
            "dec": Decimal("-0.000100"),
            "blob": b"\x00\xff",
            "date": dt.date(2020, 1, 2),
            "dt": dt.datetime(2020, 1, 2, 3, 4, 5, 60),
            "ts": dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
            "time": -dt.timedelta(hours=838, minutes=59, seconds=59),
            "zero": "0000-00-00 00:00:00",
            "geo": Geometry(4326, b"\x01\x02"),
            "bit": 2**64 - 1,
            "doc": {"a": [1, 2.5, None], "d": Decimal("1.10")},
        },
        frozenset({"doc"}),
    )["after"]
    assert out == {
        "dec": "-0.000100",
        "blob": "AP8=",
        "date": "2020-01-02",
        "dt": "2020-01-02T03:04:05.000060",
        "ts": "2020-01-02T03:04:05Z",
        "time": "-838:59:59",
        "zero": "0000-00-00 00:00:00",
        "geo": {"srid": 4326, "wkb": "AQI="},
        "bit": 2**64 - 1,
        "doc": {"a": [1, 2.5, None], "d": 1.10},
    }


def test_json_column_keeps_decimal_digits_verbatim() -> None:
    change = RowChange(
        "c",
        "db",
        "t",
        None,
        {"doc": {"d": Decimal("1.10")}},
        None,
        None,
        0,
        None,
        1,
        0,
        (),
        frozenset({"doc"}),
    )
    assert b'"doc":{"d": 1.10}' in EnvelopeLines("pipe").row(change)


def test_source_block() -> None:
    out = _change({"id": 1})
    source = out["source"]
    assert source.pop("version")  # the package's
    # Debezium 3's MySQL source fields (name, snapshot, ts_us, ts_ns, sequence, thread,
    # query), then replicad's. Without a commit time in microseconds ts_us is ts_ms's.
    assert source == {
        "connector": "replicad",
        "name": "pipe",
        "ts_ms": 1000,
        "ts_us": 1_000_000,
        "ts_ns": 1_000_000_000,
        "snapshot": "false",
        "db": "db",
        "sequence": None,
        "table": "t",
        "server_id": 1,
        "gtid": "0-1-5",
        "file": "bin.000001",
        "pos": 120,
        "row": 0,
        "thread": None,
        "query": None,
        "schema_version": None,
    }
    assert out["op"] == "c" and out["before"] is None and out["transaction"] is None
    assert out["ts_us"] == out["ts_ms"] * 1000 and out["ts_ns"] == out["ts_ms"] * 1_000_000


def _update(before: dict, after: dict, pk: tuple[str, ...]) -> RowChange:
    return RowChange("u", "db", "t", before, after, "f", 4, 0, None, 1, 0, pk)


def test_a_primary_key_update_is_a_delete_and_a_create_in_every_output() -> None:
    change = _update({"id": 1, "v": "a"}, {"id": 2, "v": "a"}, ("id",))
    assert row_messages(change) == (("d", change.before, None), ("c", None, change.after))
    lines = [orjson.loads(line) for line in EnvelopeLines("p").row(change).splitlines()]
    assert [(m["op"], m["before"], m["after"]) for m in lines] == [
        ("d", {"id": 1, "v": "a"}, None),
        ("c", None, {"id": 2, "v": "a"}),
    ]


@pytest.mark.parametrize(
    ("before", "after", "pk"),
    [
        ({"id": 1, "v": "a"}, {"id": 1, "v": "b"}, ("id",)),  # key unchanged
        ({"id": 1, "v": "a"}, {"id": 2, "v": "b"}, ()),  # no primary key: nothing to split
    ],
)
def test_other_updates_stay_one_message(before: dict, after: dict, pk: tuple[str, ...]) -> None:
    change = _update(before, after, pk)
    assert row_messages(change) == (("u", before, after),)
    assert len(EnvelopeLines("p").row(change).splitlines()) == 1


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (dt.timedelta(0), "00:00:00"),
        (-dt.timedelta(microseconds=100000), "-00:00:00.100000"),
        (dt.timedelta(hours=25, seconds=1, microseconds=5), "25:00:01.000005"),
        (-dt.timedelta(hours=12, minutes=34, seconds=56, microseconds=789012), "-12:34:56.789012"),
    ],
)
def test_format_time(delta: dt.timedelta, text: str) -> None:
    assert format_time(delta) == text


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float32_shortest_round_trips(value: float) -> None:
    shortest = float32_shortest(value)
    assert struct.pack("<f", shortest) == struct.pack("<f", value)
    assert len(repr(shortest)) <= len(repr(value))


def test_float32_shortest_examples() -> None:
    stored = struct.unpack("<f", struct.pack("<f", 1.1))[0]
    assert stored != 1.1 and float32_shortest(stored) == 1.1


_VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
    st.binary(max_size=40),
    st.decimals(
        allow_nan=False, allow_infinity=False, places=3, max_value=10**12, min_value=-(10**12)
    ),
    st.datetimes(),
    st.datetimes(timezones=st.just(dt.UTC)),
    st.dates(),
    st.timedeltas(min_value=-dt.timedelta(hours=838), max_value=dt.timedelta(hours=838)),
)
_ROWS = st.dictionaries(st.text(min_size=1, max_size=8), _VALUES, max_size=6)


@given(
    before=st.one_of(st.none(), _ROWS),
    after=st.one_of(st.none(), _ROWS),
    op=st.sampled_from(["c", "u", "d"]),
    gtid=st.one_of(st.none(), st.just("0-1-5"), st.text(max_size=10)),
    file=st.one_of(st.none(), st.just("bin.000001"), st.text(max_size=10)),
    pos=st.one_of(st.none(), st.integers(min_value=0, max_value=2**63)),
    table=st.text(min_size=1, max_size=10),
    transaction=st.one_of(
        st.none(), st.just({"id": "0-1-5", "total_order": 2, "data_collection_order": 1})
    ),
    thread=st.one_of(st.none(), st.integers(min_value=0, max_value=2**32 - 1)),
    query=st.one_of(st.none(), st.text(max_size=20)),
    schema=st.one_of(st.none(), st.just(TableDescription("db", "t", (), ("id",), "0123abcd"))),
)
def test_envelope_writer_renders_exactly_the_reference_envelope(
    before, after, op, gtid, file, pos, table, transaction, thread, query, schema
) -> None:
    """EnvelopeWriter (pre-rendered parts, bytes formatting) against change_envelope + dumps
    (a dict built field by field): byte-for-byte the same JSON."""
    change = RowChange(
        op,
        'db"x',
        table,
        before,
        after,
        file,
        pos,
        3,
        gtid,
        7,
        1000,
        (),
        frozenset(),
        schema,
        thread,
        query,
    )
    writer = EnvelopeWriter('pipe"line')
    for _ in range(2):  # the second time from the cached parts
        fast = writer.value(change, op, before, after, 123, transaction)
        reference = dumps(change_envelope(change, op, before, after, 'pipe"line', 123, transaction))
        assert fast == reference


def test_envelope_writer_keeps_json_columns_verbatim() -> None:
    change = RowChange(
        "c",
        "db",
        "t",
        None,
        {"doc": {"d": Decimal("1.10")}},
        "f",
        4,
        0,
        None,
        1,
        0,
        (),
        frozenset({"doc"}),
    )
    value = EnvelopeWriter("p").value(change, "c", None, change.after, 1)
    assert b'"after":{"doc":{"d": 1.10}}' in value
