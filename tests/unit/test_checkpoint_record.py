"""The checkpoint record (replicad/checkpoint_record.py): a binlog position with the incremental
snapshots' progress beside it, stored as the position record always was."""

from __future__ import annotations

import pytest

from replicad.binlog.gtid import GtidSet
from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.errors import InvalidPositionError

pytestmark = pytest.mark.unit

GTIDS = GtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77")
PROGRESS = '{"queue":[],"active":{"request":{"id":"s1","table":"shop.orders"}}}'


def test_a_record_written_before_the_split_reads_back_whole() -> None:
    """Records stored by versions where the progress lived in Position: same keys, same
    values, so both the binlog position and the progress come back."""
    stored = {"file": "binlog.000007", "pos": 1234, "gtid_set": str(GTIDS), "row": 3}
    stored["snapshot"] = PROGRESS
    checkpoint = Checkpoint.from_json(stored)
    assert checkpoint == Checkpoint(Position("binlog.000007", 1234, GTIDS, None, 3), PROGRESS)
    assert checkpoint.to_json() == stored


def test_without_snapshots_the_record_is_the_position_record() -> None:
    position = Position("binlog.000007", 1234, GTIDS)
    assert Checkpoint(position).to_json() == position.to_json()
    assert "snapshot" not in Checkpoint(position).to_json()
    assert Checkpoint.from_json(position.to_json()) == Checkpoint(position)


def test_the_binlog_position_ignores_the_progress() -> None:
    """What reads only positions (relay manifests, `position show`) keeps working on a
    checkpoint record, and a position never carries snapshot state."""
    record = Checkpoint(Position("binlog.000007", 1234), PROGRESS).to_json()
    assert Position.from_json(record) == Position("binlog.000007", 1234)
    assert "snapshot" not in Position.from_json(record).to_json()


def test_a_row_mark_keeps_the_progress() -> None:
    checkpoint = Checkpoint(Position("binlog.000007", 1234), PROGRESS)
    inside = checkpoint.with_row(10_000)
    assert inside.position.row == 10_000 and inside.snapshot == PROGRESS
    assert str(inside) == "binlog.000007:1234 row=10000"


def test_a_progress_that_is_not_text_is_refused() -> None:
    with pytest.raises(InvalidPositionError, match="snapshot must be a string"):
        Checkpoint.from_json({"file": "binlog.000007", "pos": 4, "snapshot": {"queue": []}})


def test_the_signal_offset_rides_along_and_is_checked() -> None:
    checkpoint = Checkpoint(Position("binlog.000007", 1234), PROGRESS, 42)
    record = checkpoint.to_json()
    assert record["signal_offset"] == 42
    assert Checkpoint.from_json(record) == checkpoint
    assert checkpoint.with_row(5).signal_offset == 42
    for bad in (-1, "42", 4.2):
        with pytest.raises(InvalidPositionError, match="signal_offset"):
            Checkpoint.from_json({"file": "binlog.000007", "pos": 4, "signal_offset": bad})
