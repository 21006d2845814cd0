"""`replicad relay inspect` and `replicad dump` on relay segments, with real binlog events:
SQL runs on MariaDB, the binlog files it wrote are cut into transactions (as the daemon's
source does: TransactionAssembler) and written through RelayWriter, then the CLI reads the
relay back and is held against the same binlog files."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from replicad.binlog.events import FormatDescriptionEvent, MariaGtidListEvent
from replicad.binlog.files import iter_raw_events
from replicad.binlog.gtid import MariaGtidPosition
from replicad.binlog.parser import BinlogParser
from replicad.binlog.position import Position
from replicad.relay.files import SegmentScan
from replicad.relay.manifest import MANIFEST, load_manifest
from replicad.relay.records import BLOCK_SIZE, HEADER_SIZE
from replicad.relay.writer import RelayOptions, RelayWriter
from replicad.source.transactions import Begin, Commit, TransactionAssembler
from tests.helpers.binlog_helpers import binlog_files_since, binlog_position
from tests.helpers.relay_helpers import crash

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
# Small segments and parts: several segments, transactions of several parts, records of
# several fragments (the big transaction's parts cross 64 KiB blocks).
OPTIONS = RelayOptions(segment_bytes=4 * 1024, part_bytes=96 * 1024, fsync="os")
# Events a relay does not hold (they are outside every transaction); FORMAT_DESCRIPTION is
# in each segment's header instead.
OUTSIDE_TRANSACTIONS = {
    "FORMAT_DESCRIPTION",
    "ROTATE",
    "STOP",
    "MARIADB_GTID_LIST",
    "BINLOG_CHECKPOINT",
}
RELAY_LINES = {"RELAY_SEGMENT", "RELAY_COMMIT"}  # what dump adds for a relay


@dataclass(slots=True)
class Relayed:
    files: list[Path]  # the binlog files, complete (closed by the server)
    directory: Path
    commits: list[tuple[Position, int, int]]  # position, commit_ts, events


def relay_binlog_files(files: list[Path], directory: Path) -> list[tuple[Position, int, int]]:
    """Write every transaction of the binlog files through RelayWriter, event bytes as read:
    set_format with each file's FDE, append per event, commit at the assembler's position."""
    writer = RelayWriter(directory, OPTIONS, source="127.0.0.1:3306")
    writer.open()
    assembler: TransactionAssembler | None = None
    commits: list[tuple[Position, int, int]] = []
    inside, count = False, 0
    for path in files:
        parser = BinlogParser(source=str(path))
        with open(path, "rb") as stream:
            for raw in iter_raw_events(stream, source=str(path)):
                event = parser.parse(raw.data, raw.pos)
                if isinstance(event, FormatDescriptionEvent):
                    writer.set_format(raw.data, parser.checksums_on)
                    continue
                if assembler is None:
                    assembler = TransactionAssembler(Position(path.name, 4))
                if isinstance(event, MariaGtidListEvent) and not commits and not inside:
                    gtids = MariaGtidPosition(event.gtids)
                    assembler.position = Position(path.name, 4, None, gtids)
                items = assembler.feed(event)
                inside = inside or any(isinstance(i, Begin) for i in items)
                if inside:
                    writer.append(raw.data)
                    count += 1
                for item in items:
                    if isinstance(item, Commit):
                        writer.commit(item.position, event.header.timestamp)
                        commits.append((item.position, event.header.timestamp, count))
                        inside, count = False, 0
    assert not inside
    writer.close()
    return commits


def _exec(conn, *statements: str) -> None:
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


@pytest.fixture
def relayed(db, mariadb, tmp_path: Path) -> Relayed:
    conn, _ = db
    _exec(conn, "FLUSH BINARY LOGS")
    first, _ = binlog_position(conn)
    _exec(
        conn,
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(300), d DECIMAL(10,2), "
        "ts DATETIME(3), j JSON, b BLOB)",
    )
    for i in range(30):
        _exec(
            conn, f"INSERT INTO t VALUES ({i}, 'row{i}', {i}.25, NOW(3), '{{\"k\": {i}}}', x'0a')"
        )
    values = ",".join(f"({i}, REPEAT('x', 250), 1, NULL, NULL, NULL)" for i in range(100, 2100))
    _exec(conn, "BEGIN", f"INSERT INTO t VALUES {values}", "COMMIT")  # ~0.6 MB, several parts
    _exec(
        conn,
        "BEGIN",
        "UPDATE t SET a = 'changed' WHERE id < 10",
        "DELETE FROM t WHERE id BETWEEN 10 AND 14",
        "COMMIT",
        "ALTER TABLE t ADD COLUMN extra INT",
        "INSERT INTO t (id, a, extra) VALUES (5000, 'after ddl', 7)",
        "DELETE FROM t WHERE id >= 1000 AND id < 1500",
        "FLUSH BINARY LOGS",
    )
    names = binlog_files_since(conn, first)[:-1]  # the last one is still being written
    files = [mariadb["binlog_dir"] / name for name in names]
    directory = tmp_path / "relay"
    commits = relay_binlog_files(files, directory)
    return Relayed(files, directory, commits)


def cli(*args: str | Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "replicad.cli", *map(str, args)],
        capture_output=True,
        cwd=ROOT,
        timeout=300,
    )


def lines(result: subprocess.CompletedProcess[bytes]) -> list[dict]:
    assert result.returncode == 0, result.stderr.decode()
    return [orjson.loads(line) for line in result.stdout.splitlines()]


def segments(directory: Path) -> list[Path]:
    manifest = load_manifest(directory)
    assert manifest is not None
    return [directory / s.name for s in manifest.segments]


def test_dump_of_a_relay_prints_what_dump_prints_for_the_binlog_files(relayed: Relayed) -> None:
    parts = segments(relayed.directory)
    assert len(parts) >= 4
    binlog = cli("dump", *relayed.files)
    rows = lines(binlog)
    assert len(rows) >= 30 + 2000 + 15 + 500
    # Row changes: identical, whether the relay is read as a directory or segment by segment.
    assert cli("dump", relayed.directory).stdout == binlog.stdout
    assert cli("dump", *parts).stdout == binlog.stdout

    # Events: the binlog's, less those outside transactions; FORMAT_DESCRIPTION per segment;
    # a RELAY_SEGMENT line before each segment and a RELAY_COMMIT after each transaction.
    from_binlog = lines(cli("dump", "--events", *relayed.files))
    from_relay = lines(cli("dump", "--events", relayed.directory))
    assert {e["type"] for e in from_binlog if e["type"] in OUTSIDE_TRANSACTIONS} >= {
        "FORMAT_DESCRIPTION",
        "ROTATE",
    }
    expected = [e for e in from_binlog if e["type"] not in OUTSIDE_TRANSACTIONS]
    got = [e for e in from_relay if e["type"] not in OUTSIDE_TRANSACTIONS | RELAY_LINES]
    assert got == expected
    fdes = [e for e in from_binlog if e["type"] == "FORMAT_DESCRIPTION"]
    relay_fdes = [e for e in from_relay if e["type"] == "FORMAT_DESCRIPTION"]
    assert len(relay_fdes) == len(parts) and all(e in fdes for e in relay_fdes)
    assert [e["segment"] for e in from_relay if e["type"] == "RELAY_SEGMENT"] == [
        p.name for p in parts
    ]
    # every transaction ends with a RELAY_COMMIT at the position after its last event
    commits = [e for e in from_relay if e["type"] == "RELAY_COMMIT"]
    assert [Position.from_json(c["position"]) for c in commits] == [c[0] for c in relayed.commits]
    for index, line in enumerate(from_relay):
        if line["type"] == "RELAY_COMMIT":
            last = from_relay[index - 1]
            assert last["type"] in ("XID", "QUERY"), last
            assert line["position"]["pos"] == last["next_pos"]
            assert line["commit_ts"] == last["timestamp"]

    # A segment alone is the binlog file between the segment's start and its last commit.
    checked = 0
    for part in parts:
        scan = SegmentScan(part)
        header = scan.read_header()
        txns = list(scan.transactions_iter())
        start = header.start or Position(relayed.files[0].name, 4)
        if not txns or txns[-1][1].position.file != start.file:
            continue
        stop = txns[-1][1].position.pos
        binlog_file = next(f for f in relayed.files if f.name == start.file)
        for mode in ([], ["--events"]):
            ranged = lines(
                cli(
                    "dump",
                    *mode,
                    "--start-position",
                    start.pos,
                    "--stop-position",
                    stop,
                    binlog_file,
                )
            )
            alone = lines(cli("dump", *mode, part))
            if mode:
                ranged = [e for e in ranged if e["type"] not in OUTSIDE_TRANSACTIONS]
                alone = [e for e in alone if e["type"] not in OUTSIDE_TRANSACTIONS | RELAY_LINES]
            assert alone == ranged, part.name
        checked += 1
    assert checked >= 2

    # binlog offsets make no sense for a relay
    refused = cli("dump", "--start-position", "4", relayed.directory)
    assert refused.returncode == 64 and b"do not apply to a relay" in refused.stderr


def test_inspect_reports_what_was_written(relayed: Relayed) -> None:
    commits = relayed.commits
    plain = cli("relay", "inspect", "--json", relayed.directory)
    report = orjson.loads(plain.stdout)
    assert plain.returncode == 0 and report["healthy"] and not report["verified"]
    assert report["transactions"] is None and report["problems"] == []
    entries = report["segments"]
    assert [e["name"] for e in entries] == [p.name for p in segments(relayed.directory)]
    assert entries[-1]["current"] and not entries[-1]["sealed"]
    assert entries[-1]["transactions"] is None  # the MANIFEST counts a segment when sealing it
    on_disk = sum(p.stat().st_size for p in segments(relayed.directory))
    assert report["total_bytes"] == on_disk
    assert report["durable"] == {
        "segment": entries[-1]["name"],
        "offset": entries[-1]["file_size"],
        "position": commits[-1][0].to_json(),
    }

    verified = cli("relay", "inspect", "--json", "--verify", relayed.directory)
    report = orjson.loads(verified.stdout)
    assert verified.returncode == 0, verified.stdout
    assert report["healthy"] and report["verified"] and report["warnings"] == []
    assert report["transactions"] == len(commits)
    done = 0
    previous = None
    for entry in report["segments"]:
        scan = entry["scan"]
        mine = commits[done : done + scan["transactions"]]
        assert mine and scan["error"] is None and scan["tail"] is None
        assert scan["first"] == mine[0][0].to_json()
        assert scan["last"] == mine[-1][0].to_json()
        assert scan["events"] == sum(c[2] for c in mine)
        assert scan["max_commit_ts"] == max(c[1] for c in mine)
        assert entry["start"] == (None if previous is None else previous.to_json())
        assert scan["end"] == entry["file_size"]
        if entry["sealed"]:  # the MANIFEST's own summary agrees
            assert (entry["transactions"], entry["first"], entry["last"]) == (
                scan["transactions"],
                scan["first"],
                scan["last"],
            )
            assert entry["size"] == entry["file_size"]
            assert entry["max_commit_time"] == scan["max_commit_time"]
            assert entry["max_commit_time"].endswith("Z")
        assert entry["status"] == "ok"
        done += scan["transactions"]
        previous = mine[-1][0]
    assert done == len(commits)

    text = cli("relay", "inspect", "--verify", relayed.directory)
    assert text.returncode == 0
    out = text.stdout.decode()
    assert f"total    {len(commits)} transactions" in out
    assert str(commits[-1][0]) in out and "health   OK" in out


def fragments(data: bytes) -> list[tuple[int, int]]:
    """(offset, payload length) of every record fragment of a segment's bytes."""
    out, pos = [], 0
    while pos < len(data):
        room = BLOCK_SIZE - pos % BLOCK_SIZE
        if room < HEADER_SIZE:
            pos += room
            continue
        length = int.from_bytes(data[pos + 4 : pos + 7], "little")
        out.append((pos, length))
        pos += HEADER_SIZE + length
    return out


def test_verify_names_the_damaged_segment_and_offset(relayed: Relayed) -> None:
    parts = segments(relayed.directory)
    # damage the middle of the big transaction, in an older segment
    victim, (txn_start, txn_end, commit) = max(
        (
            (part, (start, end, c.position))
            for part in parts[:-1]
            for _, c, start, end in SegmentScan(part).transactions_iter()
        ),
        key=lambda found: found[1][1] - found[1][0],
    )
    assert txn_end - txn_start > 3 * BLOCK_SIZE
    data = bytearray(victim.read_bytes())
    inside = [f for f in fragments(bytes(data)) if txn_start <= f[0] and f[0] + f[1] <= txn_end]
    fragment, length = inside[len(inside) // 2]
    data[fragment + HEADER_SIZE + length // 2] ^= 0x10
    victim.write_bytes(bytes(data))

    quick = cli("relay", "inspect", relayed.directory)  # sizes only: cannot see it
    assert quick.returncode == 0, quick.stderr

    result = cli("relay", "inspect", "--json", "--verify", relayed.directory)
    assert result.returncode == 65, result.stderr
    report = orjson.loads(result.stdout)
    assert not report["healthy"]
    assert report["problems"] == [
        {"segment": victim.name, "offset": fragment, "error": "fragment CRC32C mismatch"}
    ]
    statuses = {e["name"]: e["status"] for e in report["segments"]}
    assert statuses.pop(victim.name) == "damaged" and set(statuses.values()) == {"ok"}

    text = cli("relay", "inspect", "--verify", relayed.directory)
    assert text.returncode == 65
    assert f"DAMAGED  {victim.name} offset {fragment}: fragment CRC32C mismatch" in (
        text.stdout.decode()
    )

    # dump prints every transaction before the damaged one and nothing of it
    dumped = cli("dump", relayed.directory)
    assert dumped.returncode == 65
    err = dumped.stderr.decode()
    assert f"segment={victim.name}, offset={fragment}" in err and "CRC32C" in err, err
    index = [c[0] for c in relayed.commits].index(commit)
    before = relayed.commits[index - 1][0]
    expected = [
        r
        for r in lines(cli("dump", *relayed.files))
        if (r["source"]["file"], r["source"]["pos"]) < (before.file, before.pos)
    ]
    assert [orjson.loads(x) for x in dumped.stdout.splitlines()] == expected and expected


def test_a_torn_tail_is_noted_not_damage(relayed: Relayed) -> None:
    """A crash inside a transaction leaves parts of it in the current segment: inspect
    notes it (the writer cuts it at open), dump serves every whole transaction, exit 0."""
    first = SegmentScan(segments(relayed.directory)[0])
    header = first.read_header()
    biggest = max(
        (t for part in segments(relayed.directory) for t in SegmentScan(part).transactions_iter()),
        key=lambda t: len(t[0]),
    )[0]
    writer = RelayWriter(relayed.directory, OPTIONS)
    writer.open()
    writer.set_format(header.format_description, header.checksums)
    for event in biggest[:-1]:
        writer.append(event)
    current = relayed.directory / writer.segment  # type: ignore[operator]
    size = current.stat().st_size
    assert size > writer.durable_offset
    crash(writer)  # a crash: no commit, no close

    result = cli("relay", "inspect", "--json", "--verify", relayed.directory)
    assert result.returncode == 0, result.stdout
    report = orjson.loads(result.stdout)
    entry = report["segments"][-1]
    assert entry["name"] == current.name and entry["status"] == "tail"
    tail = entry["scan"]["tail"]
    assert tail["offset"] + tail["bytes"] == size and "inside a" in tail["reason"]
    assert report["transactions"] == len(relayed.commits) and report["notes"]

    dumped = cli("dump", relayed.directory)
    assert dumped.returncode == 0
    assert dumped.stdout == cli("dump", *relayed.files).stdout
    assert f"{current.name} at offset {tail['offset']}" in dumped.stderr.decode()
    alone = cli("dump", current)  # the segment by itself is a truncated file
    assert alone.returncode == 65 and b"inside a transaction" in alone.stderr


def test_no_manifest_or_a_garbage_one_is_a_clear_error(relayed: Relayed, tmp_path: Path) -> None:
    manifest = relayed.directory / MANIFEST
    original = manifest.read_bytes()
    for garbage, reason in (
        (b"{not json", "manifest is unreadable"),
        (
            b'{"version": 1, "segments": [{"number": 1, "start": {"file": "x", "pos": 1}}], '
            b'"durable": {"offset": 0}}',
            "manifest is unreadable",
        ),
        (b"[]", "manifest is unreadable"),
    ):
        manifest.write_bytes(garbage)
        for args in (("relay", "inspect"), ("relay", "inspect", "--verify"), ("dump",)):
            result = cli(*args, relayed.directory)
            assert result.returncode == 65, (args, garbage)
            err = result.stderr.decode()
            assert reason in err and f"file={manifest}" in err, err
            assert "Traceback" not in err
    manifest.unlink()
    result = cli("relay", "inspect", relayed.directory)
    assert result.returncode == 65
    err = result.stderr.decode()
    assert "no relay MANIFEST" in err and f"file={manifest}" in err and "relay-000001.log" in err
    manifest.write_bytes(original)
    assert cli("relay", "inspect", relayed.directory).returncode == 0

    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("relay", "inspect", empty)
    assert result.returncode == 65 and f"file={empty / MANIFEST}" in result.stderr.decode()
    result = cli("relay", "inspect", tmp_path / "nowhere")
    assert result.returncode == 65 and b"no such directory" in result.stderr
