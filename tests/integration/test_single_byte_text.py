"""Differential test: text in every single-byte character set, every byte 0x00-0xFF, written
with SQL and read back through `replicad dump`, with the compiled decoder and the pure one.

The server is the oracle: for each value, `SELECT` over a utf8mb4 connection gives the
server's conversion of the stored bytes. Where the server can convert the whole value (the
text converts back to the same bytes), `replicad dump` must print exactly that text; where
it cannot (a byte the character set leaves undefined: the server prints '?'), replicad keeps
the value as bytes, printed as base64 of the stored bytes (`SELECT HEX(...)`). Both decoders
must print the same lines. MariaDB's default charset, latin1, is MySQL's Windows-1252 variant;
the others follow the servers' own tables, which differ from Python's codecs in places
(charsets._SERVER_FIXUPS)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from replicad.binlog.charsets import CODEC_BY_CHARSET, SINGLE_BYTE_CODECS
from tests.helpers.binlog_helpers import binlog_files_since
from tests.helpers.databases import fresh_database
from tests.helpers.mariadb import connect_root as mariadb_root
from tests.helpers.mysql import binlog_position, ensure_mysql, mysql
from tests.helpers.mysql import connect_root as mysql_root

pytestmark = pytest.mark.integration
__all__ = ["mysql"]  # a fixture, used by name

ROOT = Path(__file__).resolve().parents[2]
CHARSETS = sorted(cs for cs, codec in CODEC_BY_CHARSET.items() if codec in SINGLE_BYTE_CODECS)
COLUMNS = ("v", "c", "tx")
Conn = pymysql.connections.Connection


def _values(b: int) -> tuple[bytes, bytes, bytes]:
    """Row b (0-255): the byte alone, after a letter in a CHAR(3), between two bytes in a
    TEXT; row 256: all 256 bytes, forwards and backwards."""
    if b == 256:
        every = bytes(range(256))
        return every, b"xyz", every[::-1]
    return bytes([b]), bytes([0x41, b]), bytes([b, 0x42, b])


def _write(conn: Conn, charset: str, ignore: bool) -> None:
    """The 257 rows; `ignore`: MySQL's strict mode refuses bytes its charset leaves undefined
    (ascii's 0x80-0xFF ...), so there it stores what INSERT IGNORE makes of them, read back
    by the SELECT like any value (MariaDB stores them as given)."""
    table = f"t_{charset}"
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(300), c CHAR(3), tx TEXT)"
            f" DEFAULT CHARSET={charset}"
        )
        rows = ",".join(
            f"({b}," + ",".join(f"_{charset} X'{value.hex()}'" for value in _values(b)) + ")"
            for b in range(257)
        )
        cur.execute(f"INSERT {'IGNORE' if ignore else ''} INTO {table} VALUES {rows}")


def _select(conn: Conn, charset: str) -> dict[int, dict[str, str]]:
    """Per row, per column: the JSON string replicad must print (see the module doc)."""
    back = ", ".join(
        f"{c}, HEX({c}), HEX(CONVERT(CONVERT({c} USING utf8mb4) USING {charset})) = HEX({c})"
        for c in COLUMNS
    )
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, {back} FROM t_{charset}")
        out: dict[int, dict[str, str]] = {}
        for rid, *cells in cur.fetchall():
            row = {}
            for j, column in enumerate(COLUMNS):
                text, hexed, converts = cells[3 * j : 3 * j + 3]
                raw = bytes.fromhex(hexed)
                row[column] = text if converts else base64.b64encode(raw).decode()
            out[rid] = row
    return out


def _position(conn: Conn, flavour: str) -> tuple[str, int]:
    if flavour == "mysql":
        return binlog_position(conn)
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return str(row[0]), int(row[1])


def _dump(conn: Conn, flavour: str, start: tuple[str, int], decoder: str) -> bytes:
    if flavour == "mysql":
        binlog_dir = ensure_mysql().binlog_dir
    else:
        with conn.cursor() as cur:
            cur.execute("SELECT @@log_bin_basename")
            binlog_dir = Path(str(cur.fetchone()[0])).parent
    files = [str(binlog_dir / name) for name in binlog_files_since(conn, start[0])]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLICAD_")}
    env["REPLICAD_REQUIRE_SPEEDUPS" if decoder == "compiled" else "REPLICAD_PURE_PYTHON"] = "1"
    command = [sys.executable, "-m", "replicad.cli", "dump", "--start-position", str(start[1])]
    result = subprocess.run([*command, *files], capture_output=True, cwd=ROOT, timeout=300, env=env)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout


def _ours(output: bytes, db: str) -> list[bytes]:
    """The lines of this test's database: the two dumps run one after the other on a shared
    server, so the later one may read further into other tests' writes."""
    return [line for line in output.splitlines() if orjson.loads(line)["source"].get("db") == db]


def _compare(image: dict[str, Any], expected: dict[str, str], where: str) -> int:
    for column in COLUMNS:
        assert image[column] == expected[column], (
            f"{where} {column}: dump {image[column]!r}, server {expected[column]!r}"
        )
    return len(COLUMNS)


@pytest.mark.parametrize("flavour", ["mariadb", "mysql"])
def test_every_byte_of_every_single_byte_charset(
    flavour: str, request: pytest.FixtureRequest
) -> None:
    request.getfixturevalue(flavour)  # the server is up, or the test fails saying why
    connect = mysql_root if flavour == "mysql" else mariadb_root
    with fresh_database(connect) as (conn, db):
        start = _position(conn, flavour)
        for charset in CHARSETS:
            _write(conn, charset, ignore=flavour == "mysql")
        inserted = {cs: _select(conn, cs) for cs in CHARSETS}
        changed = {}  # rows the UPDATE changed (a row it leaves as it was is not logged)
        with conn.cursor() as cur:  # the even rows' columns swapped: both images logged
            for charset in CHARSETS:
                sql = f"UPDATE t_{charset} SET v = tx, tx = v WHERE id % 2 = 0"
                changed[charset] = cur.execute(sql)
        updated = {cs: _select(conn, cs) for cs in CHARSETS}
        outputs = {d: _dump(conn, flavour, start, d) for d in ("compiled", "python")}
    ours = {d: _ours(output, db) for d, output in outputs.items()}
    assert ours["compiled"] == ours["python"], "the two decoders print different lines"
    messages = [orjson.loads(line) for line in ours["compiled"]]
    seen = {cs: {"c": 0, "u": 0} for cs in CHARSETS}
    cells = 0
    for m in messages:
        if m.get("op") not in ("c", "u"):
            continue  # DDL
        charset = m["source"]["table"][2:]
        seen[charset][m["op"]] += 1
        if m["op"] == "c":
            rid = m["after"]["id"]
            cells += _compare(m["after"], inserted[charset][rid], f"{charset} insert {rid}")
        else:
            rid = m["before"]["id"]
            cells += _compare(m["before"], inserted[charset][rid], f"{charset} before {rid}")
            cells += _compare(m["after"], updated[charset][rid], f"{charset} after {rid}")
    assert seen == {cs: {"c": 257, "u": changed[cs]} for cs in CHARSETS}
    if flavour == "mariadb":  # strict mode stored every byte as given
        assert set(changed.values()) == {129}
    assert cells == sum(257 + 2 * n for n in changed.values()) * len(COLUMNS)
