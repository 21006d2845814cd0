"""`replicad run` against the real MySQL 9.7 (3307): logging in as repl with
caching_sha2_password over TLS and over plain TCP (the RSA key exchange), resuming a stream
that carries tagged GTIDs, and the schema history with binlog_row_metadata=MINIMAL.

The log does not say which caching_sha2 path a login took, so the tests pin it from outside:
`FLUSH PRIVILEGES` empties the server's cache of verified passwords (the next login must be a
full authentication), and a configured RSA public key that is not the server's breaks a full
authentication without TLS but neither one over TLS (the password then travels in clear over
the encrypted channel) nor the fast path (which never uses a key). Other test runs may log in
as repl on this shared server at any moment and refill its cache entry, so the login-path
tests use an account of their own, made like repl.
These tests are serial: they flush a server-wide cache, compare with the server-wide
@@gtid_executed or set the global binlog_row_metadata.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.helpers.binlog_helpers import row_metadata, table_maps_since
from tests.helpers.daemon_process import wait_for
from tests.helpers.mariadb_run import Replicad
from tests.helpers.mysql import (
    MYSQL_FS_ROOT,
    MYSQL_PORT,
    MySQLServer,
    binlog_position,
    connect_root,
    mysql,
    mysql_db,
)
from tests.helpers.pki import server_pki

pytestmark = [pytest.mark.integration, pytest.mark.serial]
__all__ = ["mysql", "mysql_db"]  # fixtures, used by name

# MySQL 9 generates its CA and server certificate in the datadir on first start.
SERVER_CA = MYSQL_FS_ROOT / "srv/replicad/data/ca.pem"
Db = tuple[pymysql.connections.Connection, str]


@pytest.fixture
def sha2_user(mysql: MySQLServer) -> Iterator[tuple[str, str]]:
    """(user, password): a caching_sha2_password account with repl's privileges."""
    user, password = f"sha2_{uuid.uuid4().hex[:10]}", "Sha2-Secret-7"
    root = connect_root()
    try:
        with root.cursor() as cur:
            cur.execute(
                f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED WITH"
                f" caching_sha2_password BY '{password}'"
            )
            cur.execute(
                "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.*"
                f" TO '{user}'@'127.0.0.1'"
            )
        yield user, password
    finally:
        with root.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")
        root.close()


def _flush_password_cache(conn: pymysql.connections.Connection) -> None:
    with conn.cursor() as cur:
        cur.execute("FLUSH PRIVILEGES")


def _ours(replicad: Replicad, db: str) -> list[dict[str, Any]]:
    return [c for c in replicad.changes() if c["source"]["db"] == db]


def _streams_row(replicad: Replicad, conn: pymysql.connections.Connection, db: str, key: int):
    """Start replicad, write row `key` and wait for it; the daemon is stopped again."""
    replicad.start()
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (%s)", (key,))
        wait_for(
            lambda: any(c["after"]["id"] == key for c in _ours(replicad, db)), 60, f"row {key}"
        )
    finally:
        assert replicad.stop() == 0


def _logins(replicad: Replicad) -> list[tuple[bool, str]]:
    """(over TLS, authentication plugin) of each connection, from `source_connected`."""
    return [
        (e["tls"], e["auth_plugin"])
        for e in replicad.log_events()
        if e["event"] == "source_connected"
    ]


def _stranger_key(tmp: Path) -> Path:
    path = tmp / "stranger.pem"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return path


def test_caching_sha2_full_authentication_over_tls_with_a_verified_ca(
    mysql_db: Db, sha2_user: tuple[str, str], tmp_path: Path
) -> None:
    conn, db = mysql_db
    user, password = sha2_user
    assert SERVER_CA.is_file(), f"MySQL's generated CA is not at {SERVER_CA}"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    stranger = _stranger_key(tmp_path)
    (tmp_path / "ok").mkdir()
    replicad = Replicad(
        tmp_path / "ok",
        server_id=7901,
        port=MYSQL_PORT,
        user=user,
        password=password,
        tls=f"{{mode: verify-ca, ca: {SERVER_CA}, server_public_key: {stranger}}}",
    )
    # A full authentication: it succeeds with a stranger's RSA key configured only because
    # the password goes in clear over TLS instead of encrypted with that key.
    _flush_password_cache(conn)
    _streams_row(replicad, conn, db, 1)
    assert [c["after"] for c in _ours(replicad, db)] == [{"id": 1}]
    assert _logins(replicad) == [(True, "caching_sha2_password")]

    # verify-ca means it: a CA that did not sign the server's certificate is refused.
    other_ca = server_pki(tmp_path / "bad").other_ca
    refused = Replicad(
        tmp_path / "bad",
        server_id=7902,
        port=MYSQL_PORT,
        user=user,
        password=password,
        tls=f"{{mode: verify-ca, ca: {other_ca}}}",
    ).run_to_exit()
    assert refused.returncode != 0, refused.stderr
    assert b"certificate" in refused.stderr.lower(), refused.stderr


def test_caching_sha2_without_tls_takes_the_rsa_exchange_then_the_fast_path(
    mysql_db: Db, sha2_user: tuple[str, str], tmp_path: Path
) -> None:
    conn, db = mysql_db
    user, password = sha2_user
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    stranger = _stranger_key(tmp_path)
    runs = [tmp_path / name for name in ("wrong-key", "asked-key", "cached")]
    for run in runs:
        run.mkdir()

    def plain(run: Path, server_id: int, key: Path | None = None) -> Replicad:
        tls = "{mode: disabled}" if key is None else f"{{mode: disabled, server_public_key: {key}}}"
        return Replicad(
            run, server_id=server_id, port=MYSQL_PORT, user=user, password=password, tls=tls
        )

    _flush_password_cache(conn)
    # A full authentication without TLS encrypts the password with the key given: with a
    # stranger's key the server cannot decrypt it. That this fails shows a full
    # authentication was asked for and that the channel was not TLS.
    refused = plain(runs[0], 7903, stranger).run_to_exit()
    assert refused.returncode == 78, refused.stderr
    assert f"{user}@127.0.0.1".encode() in refused.stderr, refused.stderr
    # Without a configured key replicad asks the server for its key: the RSA exchange.
    asked = plain(runs[1], 7904)
    _streams_row(asked, conn, db, 1)
    assert _logins(asked) == [(False, "caching_sha2_password")]
    # That login filled the cache: the fast path never touches the (still wrong) key.
    _streams_row(plain(runs[2], 7905, stranger), conn, db, 2)


def test_a_wrong_password_exits_78_naming_the_user_not_the_password(
    mysql: MySQLServer, tmp_path: Path
) -> None:
    replicad = Replicad(tmp_path, server_id=7906, port=MYSQL_PORT, password="Not-The-Pass-7906")
    result = replicad.run_to_exit()
    assert result.returncode == 78, result.stderr
    assert b"repl@127.0.0.1" in result.stderr, result.stderr
    assert b"Not-The-Pass-7906" not in result.stderr + result.stdout


def _executed(conn: pymysql.connections.Connection) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_executed")
        return str(cur.fetchone()[0]).replace("\n", "")


def _gtid_set(text: str) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """A printed GTID set (`uuid:1-5:tag:1-2,uuid2:3`) as intervals by (uuid, tag)."""
    out: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for member in text.replace("\n", "").split(","):
        uuid, *parts = member.strip().split(":")
        tag = ""
        for part in parts:
            if part[0].isdigit():
                low, _, high = part.partition("-")
                out.setdefault((uuid, tag), []).append((int(low), int(high or low)))
            else:  # a tag names the intervals that follow it
                tag = part
    return out


def _covers(stored: str, executed: str) -> bool:
    """Every GTID of `executed` is in `stored`. Other test runs may share this MySQL, so the
    stored set is compared with what had executed when our writes were done, not equated
    with a moving @@gtid_executed."""
    have = _gtid_set(stored)
    return all(
        any(lo <= low and high <= hi for lo, hi in have.get(key, []))
        for key, intervals in _gtid_set(executed).items()
        for low, high in intervals
    )


def _write(conn: pymysql.connections.Connection, ids: list[int], tag: str | None) -> None:
    with conn.cursor() as cur:
        for key in ids:
            cur.execute(f"SET gtid_next = '{'AUTOMATIC' if tag is None else 'AUTOMATIC:' + tag}'")
            cur.execute("INSERT INTO t VALUES (%s)", (key,))
        cur.execute("SET gtid_next = 'AUTOMATIC'")


def test_a_stream_with_tagged_gtids_resumes_with_every_row_once(
    mysql_db: Db, tmp_path: Path
) -> None:
    conn, db = mysql_db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    replicad = Replicad(tmp_path, server_id=7907, port=MYSQL_PORT)
    replicad.start()
    _write(conn, [1], "replicadtag")
    _write(conn, [2, 3], None)
    wait_for(lambda: len(_ours(replicad, db)) >= 3, 60, "the first three rows")
    executed = _executed(conn)
    assert ":replicadtag:" in executed, executed
    wait_for(
        lambda: _covers((replicad.position() or {}).get("gtid_set", ""), executed),
        60,
        f"the stored position to carry {executed}: {replicad.position()}",
    )
    assert replicad.stop() == 0
    _write(conn, [4, 5], "replicadtag")  # while it is stopped
    _write(conn, [6], "othertag")
    _write(conn, [7], None)
    replicad.start()
    try:
        wait_for(lambda: len(_ours(replicad, db)) >= 7, 60, "the rows written while stopped")
        executed = _executed(conn)
        wait_for(
            lambda: _covers((replicad.position() or {}).get("gtid_set", ""), executed),
            60,
            f"the stored position to carry {executed}: {replicad.position()}",
        )
    finally:
        assert replicad.stop() == 0
    connected = [e for e in replicad.log_events() if e["event"] == "source_connected"]
    assert connected[-1]["dump"] == "gtid" and ":replicadtag:" in connected[-1]["start"], connected
    assert [c["after"]["id"] for c in _ours(replicad, db)] == list(range(1, 8))
    stored = replicad.position()["gtid_set"]
    assert _covers(_executed(conn), stored), f"{stored} has GTIDs the server never executed"
    tags = {tag for _, tag in _gtid_set(stored)}
    assert {"replicadtag", "othertag"} <= tags, stored


def _rows(change: dict[str, Any]) -> tuple[str, str, Any, Any]:
    return change["source"]["table"], change["op"], change["before"], change["after"]


def test_minimal_metadata_changes_carry_the_columns_they_were_written_with(
    mysql: MySQLServer, mysql_db: Db, tmp_path: Path
) -> None:
    conn, db = mysql_db
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT UNSIGNED, "
            "color ENUM('red','green','blue'), tags SET('x','y'))"
        )
    replicad = Replicad(tmp_path, server_id=7908, port=MYSQL_PORT)
    statements_live = [
        "INSERT INTO a VALUES (1, 'one', 18446744073709551615, 'green', 'x,y')",
        "ALTER TABLE a ADD COLUMN extra INT DEFAULT 7 FIRST",
        "INSERT INTO a (id, v, n, color, extra) VALUES (2, 'two', 2, 'blue', 8)",
        "ALTER TABLE a DROP COLUMN v",
        "UPDATE a SET n = 3 WHERE id = 2",
    ]
    # written while replicad is down: the restart must not decode them with today's schema
    statements_down = [
        "ALTER TABLE a RENAME COLUMN n TO amount",
        "DELETE FROM a WHERE id = 1",
        "CREATE TABLE b (k VARCHAR(10) PRIMARY KEY, e ENUM('p','q'))",
        "INSERT INTO b VALUES ('k1', 'q')",
        "ALTER TABLE b ADD COLUMN z INT FIRST, DROP COLUMN e",
        "INSERT INTO b VALUES (5, 'k2')",
        "RENAME TABLE a TO a2",
        "UPDATE a2 SET amount = 4 WHERE id = 2",
    ]
    with row_metadata(connect_root, "MINIMAL"), conn.cursor() as cur:
        start = binlog_position(conn)
        replicad.start()
        for sql in statements_live:
            cur.execute(sql)
        wait_for(lambda: len(_ours(replicad, db)) >= 3, 60, "three changes")
        assert replicad.stop() == 0
        for sql in statements_down:
            cur.execute(sql)
        replicad.start()
        try:
            wait_for(lambda: len(_ours(replicad, db)) >= 7, 60, "seven changes")
        finally:
            assert replicad.stop() == 0
    maps = table_maps_since(conn, mysql.binlog_dir, start, db)
    assert len(maps) >= 7 and not any(m.has_names for m in maps), "MINIMAL was not in effect"
    assert [_rows(c) for c in _ours(replicad, db)] == [
        ("a", "c", None, {"id": 1, "v": "one", "n": 18446744073709551615, "color": "green",
                          "tags": "x,y"}),
        ("a", "c", None, {"extra": 8, "id": 2, "v": "two", "n": 2, "color": "blue",
                          "tags": None}),
        ("a", "u", {"extra": 8, "id": 2, "n": 2, "color": "blue", "tags": None},
                   {"extra": 8, "id": 2, "n": 3, "color": "blue", "tags": None}),
        ("a", "d", {"extra": 7, "id": 1, "amount": 18446744073709551615, "color": "green",
                    "tags": "x,y"}, None),
        ("b", "c", None, {"k": "k1", "e": "q"}),
        ("b", "c", None, {"z": 5, "k": "k2"}),
        ("a2", "u", {"extra": 8, "id": 2, "amount": 3, "color": "blue", "tags": None},
                    {"extra": 8, "id": 2, "amount": 4, "color": "blue", "tags": None}),
    ]  # fmt: skip
    assert list(_ours(replicad, db)[1]["after"]) == ["extra", "id", "v", "n", "color", "tags"]
    events = [e["event"] for e in replicad.log_events()]
    assert events.count("schema_snapshot") == 1, "a resume never takes a new snapshot"
    assert "schema_history_loaded" in events
    warnings = [
        e
        for e in replicad.log_events()
        if e["event"].startswith("schema_") and e.get("level") == "warning"
    ]
    assert warnings == []
