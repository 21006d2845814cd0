"""`_speedups.decode_rows`: a whole ROWS event's images in one compiled call.

`RowsEvent.rows()` hands out what it returns instead of decoding row by row, so it must
give exactly the pairs the row-by-row loop gives - same dicts, same types, same values -
and refuse (None) every event that loop would stop on, so that the loop runs and raises
the error that names the event. The oracle is the generated pure-Python decoder, one image
after another, on random layouts and images of every column type (test_event_envelope's
strategy), cut short at random.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicad.binlog import decoder_choice
from replicad.binlog.files import iter_file_events
from replicad.errors import MalformedEventError
from tests.helpers import events as ev
from tests.unit.test_accel import same
from tests.unit.test_event_envelope import events, pure_pairs

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not decoder_choice.available(), reason="_speedups is not built"),
]


def _same_pairs(got: list, expected: list) -> bool:
    if len(got) != len(expected):
        return False
    for pair, want in zip(got, expected, strict=True):
        for image, image_want in zip(pair, want, strict=True):
            if (image is None) != (image_want is None):
                return False
            if image is not None and (
                list(image) != list(image_want)
                or not all(same(image[k], image_want[k]) for k in image)
            ):
                return False
    return True


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events(), st.integers(0, 12))
def test_equals_the_row_by_row_loop(event, cut: int) -> None:
    from replicad.binlog import _speedups

    columns, body, pos, kind, _rows, _key, mariadb = event
    body = body[: max(pos, len(body) - cut)] if cut else body
    expected = pure_pairs(columns, body, pos, kind, mariadb)
    decoder = decoder_choice.build_compiled_decoder(columns, mariadb=mariadb).__self__
    got = _speedups.decode_rows(decoder, decoder if kind == 1 else None, body, pos, kind == 0)
    if expected is None:
        assert got is None
    else:
        assert got is not None and _same_pairs(got, expected)


def _rows_event(tmp_path, images: bytes):
    columns = [ev.Col(ev.T_LONG, nullable=False)]
    data = ev.binlog_file(
        [
            ev.fde_mysql8(),
            ev.event(ev.TABLE_MAP, ev.table_map(9, "db", "t", columns)),
            ev.event(ev.WRITE_ROWS, ev.rows_v2(ev.WRITE_ROWS, 9, 1, images)),
        ]
    )
    path = tmp_path / "binlog.000001"
    path.write_bytes(data)
    return list(iter_file_events(path))[2]


def test_a_faulty_event_gives_its_good_rows_then_the_error(tmp_path) -> None:
    # Three images, the third cut to 2 of its 4 bytes: the compiled call refuses the event,
    # the row-by-row loop hands out the first two rows and raises with the table and offset.
    image = ev.row_image
    event = _rows_event(
        tmp_path, image([ev.int_le(1, 4)]) + image([ev.int_le(2, 4)]) + b"\x00\x03\x00"
    )
    rows = event.rows()
    assert next(rows) == (None, {"@1": 1})
    assert next(rows) == (None, {"@1": 2})
    with pytest.raises(MalformedEventError) as caught:
        next(rows)
    assert caught.value.context["table"] == "db.t"
    assert caught.value.context["offset"] == event.header.pos


def test_a_whole_event_comes_from_one_call(tmp_path, monkeypatch) -> None:
    event = _rows_event(tmp_path, b"".join(ev.row_image([ev.int_le(i, 4)]) for i in range(5)))
    calls = []
    real = decoder_choice.decode_event_rows

    def counted(*args: Any) -> Any:
        result = real(*args)
        calls.append(result)
        return result

    monkeypatch.setattr(decoder_choice, "decode_event_rows", counted)
    assert list(event.rows()) == [(None, {"@1": i}) for i in range(5)]
    assert len(calls) == 1 and calls[0] is not None  # not the row-by-row loop
