"""The JSON-lines sink (replicad/sinks/stdout.py) on files that cannot be fsynced."""

from __future__ import annotations

import os

import pytest

from replicad.binlog.changes import RowChange
from replicad.sinks.base import SinkError
from replicad.sinks.stdout import JsonLinesSink

pytestmark = pytest.mark.unit


def _change() -> RowChange:
    return RowChange("c", "d", "t", None, {"id": 1}, "f", 4, 0, None, 1, 0, ("id",))


def test_dev_null_and_a_fifo_are_outputs_not_errors(tmp_path) -> None:
    """fsync of a character device or a FIFO fails with EINVAL: the sink writes and
    acknowledges without it (a regular file is still fsynced)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        for path in ("/dev/null", fifo):
            sink = JsonLinesSink(path)
            sink.publish(_change())
            sink.mark(1, None, True)  # type: ignore[arg-type]
            assert sink.acked() == 1
            sink.close()
        assert b'"after":{"id":1}' in os.read(reader, 65536)
    finally:
        os.close(reader)


def test_a_full_disk_is_still_an_error(tmp_path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.fail("/dev/full is needed to simulate a full disk")
    sink = JsonLinesSink("/dev/full")
    sink.publish(_change())
    sink.mark(1, None, True)  # type: ignore[arg-type]
    with pytest.raises(SinkError):
        sink.acked()
