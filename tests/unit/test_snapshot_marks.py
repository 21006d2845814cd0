"""Debezium's `source.snapshot` marks for an initial snapshot (its SnapshotRecord; the
connector marks each record by its place: the end of the whole snapshot before its start,
a table's end before its start)."""

import pytest

from replicad.snapshot.reader import initial_marker


@pytest.mark.parametrize(
    ("first_table", "last_table", "first_in_table", "last_in_table", "expected"),
    [
        (True, False, True, False, "first"),
        (True, False, False, False, "true"),
        (True, False, False, True, "last_in_data_collection"),
        (False, False, True, False, "first_in_data_collection"),
        (False, True, False, True, "last"),
        (True, True, True, False, "first"),  # one table
        (True, True, False, True, "last"),
        (True, True, True, True, "last"),  # the only row of the only table
        (True, False, True, True, "first"),  # the only row of the first of several tables
        (False, False, True, True, "last_in_data_collection"),
    ],
)
def test_a_read_is_marked_by_its_place(
    first_table: bool, last_table: bool, first_in_table: bool, last_in_table: bool, expected: str
) -> None:
    mark = initial_marker(
        first_table=first_table,
        last_table=last_table,
        first_in_table=first_in_table,
        last_in_table=last_in_table,
    )
    assert mark == expected
