"""The JSON-lines sink (replicad/sinks/stdout.py) on files that cannot be fsynced."""

from __future__ import annotations

import json
import os

import pytest

from replicad.binlog.changes import RowChange
from replicad.errors import DiskFullError
from replicad.exit_codes import EXIT_TEMPFAIL
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
    with pytest.raises(DiskFullError, match="/dev/full") as raised:
        sink.acked()
    assert raised.value.exit_code == EXIT_TEMPFAIL  # freeing space and restarting resumes


@pytest.mark.parametrize("tail", [b"", b'{"op":"c","aft', b"x" * 70000])
def test_a_torn_last_line_is_cut_before_appending(tmp_path, tail: bytes) -> None:
    """A write that failed midway (a full disk) left a line without its newline; it was
    never acknowledged and comes again, so the next run cuts it instead of gluing onto it
    (a tail longer than the 64 KiB the search reads at a time included)."""
    out = tmp_path / "out.jsonl"
    out.write_bytes(b'{"first":1}\n' + tail)
    sink = JsonLinesSink(out)
    sink.publish(_change())
    sink.mark(1, None, True)  # type: ignore[arg-type]
    sink.acked()
    sink.close()
    lines = out.read_bytes().split(b"\n")
    assert lines[0] == b'{"first":1}' and lines[2] == b""
    assert json.loads(lines[1])["after"] == {"id": 1}
    assert len(lines) == 3


def test_a_file_of_one_torn_line_is_emptied(tmp_path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_bytes(b'{"op":')
    JsonLinesSink(out).close()
    assert out.read_bytes() == b""
