"""The archive reader (`replicad-binlog`) over a damaged binlog file, written by the real
server and then hit by one flipped byte: the read fails naming the file and the offset of the
damaged event, or, with `skipCorrupt`, keeps the rows before the damage and reads the other
files whole."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.serial]


def _flush(conn) -> str:
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        return str(cur.fetchone()[0])


def test_a_damaged_archive_file_fails_the_read_naming_file_and_offset(
    db, mariadb, spark, tmp_path
) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(200))")
    conn.commit()
    damaged_name = _flush(conn)
    with conn.cursor() as cur:
        for i in range(200):  # a transaction each: rows all through the file
            cur.execute("INSERT INTO a VALUES (%s, REPEAT('x', 150))", (i,))
            conn.commit()
    whole_name = _flush(conn)
    with conn.cursor() as cur:
        for i in range(200, 250):
            cur.execute("INSERT INTO a VALUES (%s, 'y')", (i,))
            conn.commit()
    _flush(conn)
    archive = tmp_path / "archive"
    archive.mkdir()
    binlogs = Path(mariadb["binlog_dir"])
    for file in (damaged_name, whole_name):
        shutil.copy(binlogs / file, archive / file)
    damaged = archive / damaged_name
    data = bytearray(damaged.read_bytes())
    spot = len(data) * 6 // 10
    data[spot] ^= 0xFF  # inside an event's body: its CRC32 no longer matches
    damaged.write_bytes(bytes(data))

    def read(**options: str) -> list:
        reader = spark.read.format("replicad-binlog").option("table", f"{name}.a")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(str(archive)).select("after.id").collect()

    with pytest.raises(Exception) as failure:
        read()
    message = str(failure.value)
    assert damaged_name in message, message[-2000:]
    offset = re.search(r"offset[\"']?[:=]\s*(\d+)", message)
    assert offset is not None, message[-2000:]
    assert int(offset.group(1)) <= spot < len(data)

    ids = sorted(r["id"] for r in read(skipCorrupt="true"))
    kept = [i for i in ids if i < 200]
    assert kept == list(range(len(kept))) and 0 < len(kept) < 200  # up to the damage
    assert [i for i in ids if i >= 200] == list(range(200, 250))  # the other file whole
