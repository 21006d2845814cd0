"""The local position store: atomic replacement, validation of what it reads back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from replicad.binlog.gtid import MariaGtidPosition
from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.coordination.local import LocalPositionStore, PositionStoreError
from replicad.errors import DiskFullError

pytestmark = pytest.mark.unit


def test_round_trip_and_missing_file(tmp_path: Path) -> None:
    store = LocalPositionStore(tmp_path / "sub" / "pos.json", "p1")
    assert store.load() is None
    position = Position("mariadb-bin.000003", 1234, None, MariaGtidPosition.parse("0-1-9"), 5)
    checkpoint = Checkpoint(position, '{"queue": [{"id": "s1"}]}')
    store.save(checkpoint)
    assert store.load() == checkpoint
    assert not list((tmp_path / "sub").glob(".*.tmp")), "no temporary file left behind"


def test_replacement_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalPositionStore(tmp_path / "pos.json", "p1")
    old = Checkpoint(Position("b.000001", 4))
    store.save(old)

    def failing_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(DiskFullError, match="No space left"):
        store.save(Checkpoint(Position("b.000001", 999)))
    monkeypatch.undo()
    assert store.load() == old, "a failed save leaves the previous position intact"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not valid JSON"),
        ('{"version": 99}', "unknown format"),
        ('{"version": 1, "pipeline": "other", "position": {"file": "b", "pos": 4}}', "belongs"),
        ('{"version": 1, "pipeline": "p1", "position": {"file": "b", "pos": 1}}', "no valid"),
    ],
)
def test_bad_files_are_clear_errors(tmp_path: Path, content: str, reason: str) -> None:
    path = tmp_path / "pos.json"
    path.write_text(content)
    with pytest.raises(PositionStoreError, match=reason) as info:
        LocalPositionStore(path, "p1").load()
    assert info.value.context["file"] == str(path)
