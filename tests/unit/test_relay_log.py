"""The relay log on disk: writer, recovery and reader against a tmp directory (no services).
Crash safety under SIGKILL is in tests/faults/test_relay_crash.py."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicad.binlog.position import Position
from replicad.errors import RelayCorruptError, RelayError, RelayLockedError, RelayTornError
from replicad.relay.files import SegmentScan
from replicad.relay.manifest import MANIFEST, SegmentInfo, load_manifest
from replicad.relay.reader import RelayReader, binlog_key, first_segment
from replicad.relay.writer import RelayOptions, RelayWriter
from tests.helpers.relay_helpers import Txn, crash, fake_fde, random_transactions

SMALL = RelayOptions(segment_bytes=256 * 1024, part_bytes=64 * 1024, fsync="os")


def write(directory: Path, txns: list[Txn], options: RelayOptions = SMALL) -> RelayWriter:
    writer = RelayWriter(directory, options, source="127.0.0.1:3306")
    writer.open()
    writer.set_format(fake_fde(), True)
    for txn in txns:
        for event in txn.events:
            writer.append(event)
        writer.commit(txn.position, txn.commit_ts)
    return writer


def read_back(directory: Path, after=None) -> list[Txn]:
    return [
        Txn(t.events, t.commit.position, t.commit.commit_ts)
        for t in RelayReader(directory).transactions(after)
    ]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n=st.integers(1, 60),
    big=st.integers(0, 2),
    policy=st.sampled_from(["transaction", "interval", "os"]),
    reopen_at=st.integers(0, 60),
)
def test_transactions_round_trip_across_rotations_and_reopen(
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    n: int,
    big: int,
    policy: str,
    reopen_at: int,
) -> None:
    directory = tmp_path_factory.mktemp("relay")
    rng = random.Random(seed)
    txns = random_transactions(rng, n, big=big)
    options = RelayOptions(
        segment_bytes=256 * 1024, part_bytes=64 * 1024, fsync=policy, fsync_interval_ms=1
    )
    cut = min(reopen_at, n)
    write(directory, txns[:cut], options).close()
    writer = RelayWriter(directory, options)
    recovery = writer.open()
    assert recovery.position == (txns[cut - 1].position if cut else None)
    assert recovery.truncated_bytes == 0
    writer.set_format(fake_fde(created=5), True)  # same format, another file: no rotation
    for txn in txns[cut:]:
        for event in txn.events:
            writer.append(event)
        writer.commit(txn.position, txn.commit_ts)
    writer.close()
    assert read_back(directory) == txns
    middle = txns[n // 2].position
    assert read_back(directory, middle) == txns[n // 2 + 1 :]
    # each segment decodes alone and starts where the previous one ended
    manifest = load_manifest(directory)
    assert manifest is not None
    previous_last = None
    for info in manifest.segments:
        scan = SegmentScan(directory / info.name)
        got = list(scan.transactions_iter())
        assert scan.header is not None and scan.header.start == previous_last
        if info.sealed:
            assert scan.footer is not None and scan.footer.transactions == len(got)
            assert scan.footer.last == (got[-1][1].position if got else previous_last)
        if got:
            previous_last = got[-1][1].position


def test_a_torn_transaction_is_cut_at_open_and_never_served(tmp_path: Path) -> None:
    rng = random.Random(7)
    txns = random_transactions(rng, 20, big=1)
    writer = write(tmp_path, txns)
    writer.sync()
    for event in random_transactions(rng, 1, big=1)[0].events:  # a big one, never committed
        writer.append(event)
    segment = tmp_path / writer.segment  # type: ignore[operator]
    size = segment.stat().st_size
    assert size > writer.durable_offset  # parts of the open transaction are on disk
    assert read_back(tmp_path) == txns  # a reader does not serve it
    crash(writer)  # a crash: no close()
    reopened = RelayWriter(tmp_path, SMALL)
    recovery = reopened.open()
    assert recovery.position == txns[-1].position
    assert recovery.truncated_bytes > 0 and "inside a transaction" in (recovery.reason or "")
    assert segment.stat().st_size == size - recovery.truncated_bytes
    reopened.close()
    assert read_back(tmp_path) == txns


def test_garbage_after_the_last_transaction_is_cut(tmp_path: Path) -> None:
    txns = random_transactions(random.Random(3), 5)
    writer = write(tmp_path, txns)
    name = writer.segment
    writer.close()
    with open(tmp_path / name, "ab") as f:  # type: ignore[operator]
        f.write(b"\x01garbage that is no record")
    reopened = RelayWriter(tmp_path, SMALL)
    recovery = reopened.open()
    assert recovery.truncated_bytes == 26 and recovery.position == txns[-1].position
    reopened.close()
    assert read_back(tmp_path) == txns


def test_damage_in_an_older_segment_names_segment_and_offset(tmp_path: Path) -> None:
    txns = random_transactions(random.Random(5), 200)
    write(tmp_path, txns).close()
    manifest = load_manifest(tmp_path)
    assert manifest is not None and len(manifest.segments) >= 3
    victim = tmp_path / manifest.segments[1].name
    data = bytearray(victim.read_bytes())
    at = len(data) // 2
    data[at] ^= 0x40
    victim.write_bytes(bytes(data))
    with pytest.raises(RelayCorruptError) as info:
        read_back(tmp_path)
    assert info.value.context["segment"] == victim.name
    offset = info.value.context["offset"]
    assert isinstance(offset, int) and 0 <= at - offset < 64 * 1024
    # the transactions before the damage were served in order
    got = []
    with pytest.raises(RelayCorruptError):
        for t in RelayReader(tmp_path).transactions():
            got.append(t.commit.position)
    assert got == [t.position for t in txns[: len(got)]] and got


def test_a_missing_segment_or_a_garbage_manifest_is_a_clear_error(tmp_path: Path) -> None:
    txns = random_transactions(random.Random(9), 200)
    write(tmp_path, txns).close()
    manifest = load_manifest(tmp_path)
    assert manifest is not None
    missing = tmp_path / manifest.segments[0].name
    missing.unlink()
    with pytest.raises(RelayCorruptError, match="missing") as info:
        RelayWriter(tmp_path, SMALL).open()
    assert info.value.context["segment"] == missing.name
    (tmp_path / MANIFEST).write_bytes(b"{not json")
    with pytest.raises(RelayCorruptError, match="manifest is unreadable") as info:
        RelayWriter(tmp_path, SMALL).open()
    assert info.value.context["file"] == str(tmp_path / MANIFEST)
    (tmp_path / MANIFEST).unlink()
    with pytest.raises(RelayCorruptError, match="without a MANIFEST"):
        RelayWriter(tmp_path, SMALL).open()


def test_a_new_format_starts_a_new_segment(tmp_path: Path) -> None:
    txns = random_transactions(random.Random(1), 4)
    writer = write(tmp_path, txns[:2], RelayOptions(fsync="os"))
    first = writer.segment
    writer.set_format(fake_fde(b"11.4.2-MariaDB"), True)
    for txn in txns[2:]:
        for event in txn.events:
            writer.append(event)
        writer.commit(txn.position, txn.commit_ts)
    assert writer.segment != first
    writer.close()
    assert read_back(tmp_path) == txns
    second = SegmentScan(tmp_path / writer.segment)  # type: ignore[operator]
    assert second.read_header().format_description == fake_fde(b"11.4.2-MariaDB")


def test_a_crash_after_a_rotation_before_the_manifest_adopts_the_new_segment(
    tmp_path: Path,
) -> None:
    txns = random_transactions(random.Random(2), 60)
    writer = write(tmp_path, txns)
    writer.close()
    manifest_before = (tmp_path / MANIFEST).read_bytes()
    writer = RelayWriter(tmp_path, RelayOptions(segment_bytes=1, fsync="os"))
    writer.open()
    writer.set_format(fake_fde(), True)
    extra = random_transactions(random.Random(4), 1, start_pos=txns[-1].position.pos)[0]
    writer._rotate()  # header of the next segment written, manifest then saved...
    (tmp_path / MANIFEST).write_bytes(manifest_before)  # ...pretend the save never happened
    crash(writer)
    reopened = RelayWriter(tmp_path, SMALL)
    recovery = reopened.open()
    assert recovery.adopted is not None and recovery.position == txns[-1].position
    reopened.set_format(fake_fde(), True)
    for event in extra.events:
        reopened.append(event)
    reopened.commit(extra.position, extra.commit_ts)
    reopened.close()
    assert read_back(tmp_path) == [*txns, extra]


def _first_segment_without_manifest(directory: Path) -> Path:
    """The state a crash leaves between creating the first segment and saving the first
    MANIFEST (the window test_relay_crash's kills can land in)."""
    writer = RelayWriter(directory, SMALL)
    writer.open()
    writer.set_format(fake_fde(), True)
    writer._rotate()  # the first segment's header written and synced...
    (directory / MANIFEST).unlink()  # ...its MANIFEST not yet saved
    crash(writer)
    return directory / "relay-000001.log"


def test_a_crash_before_the_first_manifest_leaves_a_relay_that_opens(tmp_path: Path) -> None:
    txns = random_transactions(random.Random(5), 5)
    first = _first_segment_without_manifest(tmp_path)
    writer = RelayWriter(tmp_path, SMALL)
    recovery = writer.open()
    assert recovery.adopted == first.name and recovery.position is None
    writer.close()
    write(tmp_path, txns).close()
    assert read_back(tmp_path) == txns


def test_a_first_segment_cut_inside_its_header_is_removed(tmp_path: Path) -> None:
    first = _first_segment_without_manifest(tmp_path / "a")
    os.truncate(first, 7)
    recovery = RelayWriter(tmp_path / "a", SMALL).open()
    assert recovery.segment is None and not first.exists()


def test_a_lost_manifest_with_transactions_behind_it_still_stops_the_writer(
    tmp_path: Path,
) -> None:
    write(tmp_path, random_transactions(random.Random(6), 3)).close()  # one segment
    assert [p.name for p in tmp_path.glob("relay-*.log")] == ["relay-000001.log"]
    (tmp_path / MANIFEST).unlink()
    with pytest.raises(RelayCorruptError, match="without a MANIFEST"):
        RelayWriter(tmp_path, SMALL).open()


def test_memory_stays_bounded_for_a_huge_transaction(tmp_path: Path) -> None:
    """A 64 MiB transaction goes to disk in parts of about part_bytes while it is written
    (the writer never holds more than one part) and is read back as parts too."""
    writer = RelayWriter(tmp_path, RelayOptions(part_bytes=1 << 20, fsync="os"))
    writer.open()
    writer.set_format(fake_fde(), True)
    event = os.urandom(256 * 1024)
    for _ in range(256):
        writer.append(event)
        assert writer._pending_bytes <= (1 << 20) + len(event) + 4
    writer.commit(Txn([], random_transactions(random.Random(0), 1)[0].position, 1).position, 1)
    writer.close()
    scan = SegmentScan(tmp_path / writer.segment)  # type: ignore[operator]
    chunks = list(scan.chunks())
    assert len(chunks) >= 64 and all(len(c.events) <= 5 for c in chunks)
    assert sum(len(c.events) for c in chunks) == 256 and chunks[-1].commit is not None


def test_reading_stops_at_the_given_offset_even_inside_a_record(tmp_path: Path) -> None:
    """A reader of the segment being written stops at the writer's committed offset: nothing
    beyond it is returned, whatever the read sizes."""
    txns = random_transactions(random.Random(11), 30, big=2)
    writer = write(tmp_path, txns, RelayOptions(fsync="os"))
    writer.close()
    scan = SegmentScan(tmp_path / writer.segment)  # type: ignore[operator]
    ends = [end for _, _, _, end in scan.transactions_iter()]
    for k in (3, 12, 25):
        stop = ends[k] - 5  # inside transaction k's last record
        reader = SegmentScan(tmp_path / writer.segment)  # type: ignore[operator]
        got = []
        with pytest.raises(RelayTornError) as info:
            for _events, commit, _start, end in reader.transactions_iter(stop=stop):
                assert end <= stop
                got.append(commit.position)
        assert got == [t.position for t in txns[:k]]
        assert info.value.context["offset"] == ends[k - 1]
        clean = SegmentScan(tmp_path / writer.segment)  # type: ignore[operator]
        assert [c.position for _, c, _, _ in clean.transactions_iter(stop=ends[k])] == [
            t.position for t in txns[: k + 1]
        ]


def test_a_new_format_after_reopening_an_empty_segment_rotates(tmp_path: Path) -> None:
    writer = RelayWriter(tmp_path, RelayOptions(fsync="os"))
    writer.open()
    writer.set_format(fake_fde(), True)
    txns = random_transactions(random.Random(12), 3)
    writer.append(b"x")
    writer.abort()  # the segment now holds only its header
    writer.close()
    reopened = RelayWriter(tmp_path, RelayOptions(fsync="os"))
    reopened.open()
    reopened.set_format(fake_fde(b"11.8.1-MariaDB"), True)
    for txn in txns:
        for event in txn.events:
            reopened.append(event)
        reopened.commit(txn.position, txn.commit_ts)
    reopened.close()
    assert read_back(tmp_path) == txns
    manifest = load_manifest(tmp_path)
    assert manifest is not None
    for info in manifest.segments:  # every transaction lies under the format it was read in
        scan = SegmentScan(tmp_path / info.name)
        if list(scan.transactions_iter()):
            assert scan.header is not None
            assert scan.header.format_description == fake_fde(b"11.8.1-MariaDB"), info.name


def test_a_relay_directory_is_locked_by_one_process_at_a_time(tmp_path: Path) -> None:
    """A second daemon on the same relay directory would interleave segments: it is refused,
    with the holder's pid, until the holder closes or dies (the kernel drops its lock)."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path\n"
            "from replicad.relay.writer import RelayWriter\n"
            "RelayWriter(Path(sys.argv[1])).open(); print('ready', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        with pytest.raises(RelayLockedError) as info:
            RelayWriter(tmp_path).open()
        assert info.value.context == {"directory": str(tmp_path), "holder_pid": child.pid}
    finally:
        child.kill()
        child.wait()
    writer = write(tmp_path, random_transactions(random.Random(21), 3))  # the lock died with it
    with pytest.raises(RelayLockedError):  # one writer per directory within a process too
        RelayWriter(tmp_path).open()
    writer.close()
    reopened = RelayWriter(tmp_path)
    reopened.open()
    reopened.close()


def test_binlog_files_order_by_number_past_six_digits(tmp_path: Path) -> None:
    """The server goes from mariadb-bin.999999 to mariadb-bin.1000000: as strings that would
    sort backwards, and the reader would start in the wrong segment."""
    last_six = Position("mariadb-bin.999999", 4000)
    first_seven = Position("mariadb-bin.1000000", 4)
    assert binlog_key(last_six) < binlog_key(first_seven)
    segments = [
        SegmentInfo(1, Position("mariadb-bin.999998", 4)),
        SegmentInfo(2, Position("mariadb-bin.999999", 900)),
        SegmentInfo(3, Position("mariadb-bin.1000000", 4)),
    ]
    assert first_segment(segments, last_six) == 1
    assert first_segment(segments, Position("mariadb-bin.1000000", 500)) == 2
    assert first_segment(segments, Position("mariadb-bin.1000001", 4)) == 2


def test_syncs_run_beside_the_writer_and_the_manifest_never_names_unsynced_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `transaction`, a slow disk does not hold up commit(wait=False) (the relayed
    stream's event loop goes on publishing); commits made during a sync are synced together;
    the manifest names a transaction only once its sync completed."""
    txns = random_transactions(random.Random(31), 12)
    writer = RelayWriter(tmp_path, RelayOptions(fsync="transaction", manifest_interval_s=0))
    writer.open()
    writer.set_format(fake_fde(), True)
    for event in txns[0].events:
        writer.append(event)
    writer.commit(txns[0].position, txns[0].commit_ts)  # waits: durable on return
    assert load_manifest(tmp_path).durable_position == txns[0].position  # type: ignore[union-attr]

    gate = threading.Event()
    calls = []
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        calls.append(fd)
        gate.wait(10)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    started = time.monotonic()
    futures = []
    for txn in txns[1:]:
        for event in txn.events:
            writer.append(event)
        futures.append(writer.commit(txn.position, txn.commit_ts, wait=False))
    assert time.monotonic() - started < 2.0, "commit waited for the disk"
    assert all(f is not None and not f.done() for f in futures)
    assert load_manifest(tmp_path).durable_position == txns[0].position  # type: ignore[union-attr]
    assert read_back(tmp_path) == txns  # readers see what was handed to the OS

    gate.set()
    for future in futures:
        future.result(timeout=10)  # type: ignore[union-attr]
    assert writer.durable_position == txns[-1].position
    assert load_manifest(tmp_path).durable_position == txns[-1].position  # type: ignore[union-attr]
    assert len(calls) <= 2, f"{len(calls)} syncs for {len(futures)} commits: not grouped"
    writer.close()


def test_a_failed_sync_fails_its_commit_and_every_later_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    txns = random_transactions(random.Random(32), 3)
    writer = write(tmp_path, txns[:1], RelayOptions(fsync="transaction"))

    def failing_fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    for event in txns[1].events:
        writer.append(event)
    future = writer.commit(txns[1].position, txns[1].commit_ts, wait=False)
    assert future is not None
    with pytest.raises(RelayError, match="cannot fsync the relay: Input/output error"):
        future.result(timeout=10)
    with pytest.raises(RelayError, match="cannot fsync"):
        writer.append(txns[2].events[0])  # nothing after a failed sync is taken
    monkeypatch.undo()
    with pytest.raises(RelayError):
        writer.close()
    reopened = RelayWriter(tmp_path, SMALL)  # closed and unlocked all the same
    assert reopened.open().position in (txns[0].position, txns[1].position)
    reopened.close()
