"""Memory stays bounded however large the snapshotted table: a table of about 250 MB is read
by both initial methods (one consistent read view, and watermarked chunks beside the stream)
and the daemon's peak resident memory (VmHWM) stays far below the table's size.

The sink is the JSON-lines sink writing to /dev/null, so only the snapshot path holds memory
(the Kafka sink's own queue is bounded by `max_in_flight` and tested elsewhere).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.daemon_process import DaemonProcess, wait_for
from tests.helpers.mariadb import MARIADB_PORT

pytestmark = pytest.mark.integration

ROWS = 50_000
ROW_BYTES = 5_120  # REPEAT(MD5(...), 160)
TABLE_MIB = ROWS * ROW_BYTES / 2**20  # about 244 MiB of values
# Measured here: 53-57 MiB peak with chunks of 500 rows (the daemon with its clients imported
# is most of it). Holding a quarter of the table would fail this bound.
PEAK_BOUND_MIB = 110


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


@pytest.mark.parametrize(
    ("method", "chunks"),
    [
        ("consistent", "chunk_rows: 500"),
        ("watermarks", "chunk_rows: 500"),
        # 20,000 of these rows are 100 MiB: chunk_bytes (4 MiB) keeps the chunks small
        ("consistent", "chunk_rows: 20000, chunk_bytes: 4194304"),
    ],
)
def test_a_large_table_is_snapshotted_in_bounded_memory(db, tmp_path, method, chunks) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE wide (id INT PRIMARY KEY, body MEDIUMTEXT NOT NULL)")
        cur.execute(f"INSERT INTO wide SELECT seq, REPEAT(MD5(seq), 160) FROM seq_1_to_{ROWS}")
        cur.execute(
            "CREATE TABLE replicad_signal (id VARCHAR(128) NOT NULL PRIMARY KEY, "
            "kind VARCHAR(16) NOT NULL, window_id VARCHAR(64) NOT NULL, "
            "at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))"
        )
        cur.execute(
            f"GRANT INSERT, UPDATE, DELETE ON `{name}`.replicad_signal TO 'repl'@'127.0.0.1'"
        )
    replicad = DaemonProcess(
        tmp_path,
        pipeline="memory",
        source_yaml=(
            f"  host: 127.0.0.1\n  port: {MARIADB_PORT}\n  user: repl\n"
            "  server_id: 7181\n  start: latest\n  heartbeat_s: 1\n"
        ),
        password="repl",
        sinks_yaml="  stdout: {path: /dev/null}",
        extra_yaml=(
            f"snapshot: {{mode: initial, {chunks}, initial_method: {method}, "
            f"signal: {{database: {name}, table: replicad_signal}}}}\n"
            f"filters: {{include: ['{name}\\.wide']}}\n"
        ),
    )
    replicad.spawn()
    done = "snapshot_done" if method == "consistent" else "snapshot_request_done"
    wait_for(lambda: replicad.count(done) == 1 or replicad.proc.poll() is not None, 600, done)
    assert replicad.proc.poll() is None, replicad.err.read_text()[-2000:]
    peak = _peak_rss_mib(replicad.pid)
    assert replicad.stop() == 0
    rows = sum(
        e.get("rows", 0)
        for e in replicad.log_events()
        if e.get("event") in ("snapshot_done", "snapshot_chunk_emitted")
    )
    assert rows == ROWS
    assert peak < PEAK_BOUND_MIB, f"peak RSS {peak:.0f} MiB for a {TABLE_MIB:.0f} MiB table"
    print(f"{method}: peak RSS {peak:.0f} MiB, table {TABLE_MIB:.0f} MiB")
