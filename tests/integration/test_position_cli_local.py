"""`replicad status` and `replicad position show|set|reset` against the local position file
and the real MariaDB: values are checked against the primary before anything is written, a
running daemon is never moved under its feet, and a set position is where it continues."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.daemon_process import wait_for
from tests.helpers.mariadb_run import Replicad
from tests.helpers.position_cli import cli, master_status

pytestmark = [pytest.mark.integration, pytest.mark.serial]


def stored(replicad: Replicad) -> dict[str, Any] | None:
    out = cli(replicad, "position", "show", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["position"]


def test_bad_values_change_nothing_and_good_ones_are_resolved(tmp_path: Path) -> None:
    replicad = Replicad(tmp_path, server_id=7301)
    assert stored(replicad) is None
    latest = cli(replicad, "position", "set", "latest", "--json")
    assert latest.returncode == 0, latest.stderr
    before = replicad.position_file.read_bytes()
    file, end = master_status()
    assert json.loads(latest.stdout)["new"]["file"] == file
    for value, words in [
        ("nosuch-bin.000001:4", "no such binlog file"),
        (f"{file}:5", "not the start of an event"),
        (f"{file}:{end + 10_000_000}", "past the end"),
        (f"{file}:2", "at least 4"),
        ("0-1-x", "malformed MariaDB GTID"),
        ("3E11FA47-71CA-11E1-9E33-C80AA9429562:0-x", "GTID"),
    ]:
        out = cli(replicad, "position", "set", value)
        assert out.returncode == 64, (value, out.returncode, out.stderr)
        assert words in out.stderr, (value, out.stderr)
        assert replicad.position_file.read_bytes() == before, f"{value} changed the file"
    # A real event boundary and a GTID position are accepted; reset goes to source.start.
    first = cli(replicad, "position", "set", f"{file}:4", "--json")
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    assert result["new"]["file"] == file and result["new"]["pos"] == 4
    assert result["old"] == json.loads(before)["position"]
    assert "mariadb_gtid" in result["new"], "the GTID position at file:4 was not filled in"
    gtid = result["new"]["mariadb_gtid"]
    by_gtid = cli(replicad, "position", "set", gtid, "--json")
    assert by_gtid.returncode == 0 and json.loads(by_gtid.stdout)["new"]["mariadb_gtid"] == gtid
    low = master_status()
    reset = cli(replicad, "position", "reset", "--json")
    assert reset.returncode == 0, reset.stderr
    new = json.loads(reset.stdout)["new"]
    assert low <= (new["file"], new["pos"]) <= master_status()  # latest, as source.start says
    status = cli(replicad, "status", "--json")
    assert status.returncode == 0
    (pipeline,) = json.loads(status.stdout)["pipelines"]
    assert pipeline["leader"] is None and pipeline["position"] == stored(replicad)


def test_running_daemon_is_not_moved_and_continues_from_a_set_position(db, tmp_path: Path) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    boundary = master_status()  # after the CREATE TABLE, before any row
    replicad = Replicad(tmp_path, server_id=7302)
    replicad.start()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 1)")
    wait_for(
        lambda: any(c["source"]["db"] == name for c in replicad.changes()), 40, "the first insert"
    )
    wait_for(lambda: "running" in cli(replicad, "status").stdout, 20, "status to show it")
    status = json.loads(cli(replicad, "status", "--json").stdout)["pipelines"][0]
    assert status["leader"]["pid"] == replicad.proc.pid
    before = replicad.position_file.read_bytes()
    refused = cli(replicad, "position", "set", "latest")
    assert refused.returncode != 0 and "another replicad process" in refused.stderr
    assert replicad.position_file.read_bytes() == before
    assert replicad.stop() == 0
    # Rewind to before the first insert: the daemon sends it again, then what follows.
    rewind = cli(replicad, "position", "set", f"{boundary[0]}:{boundary[1]}")
    assert rewind.returncode == 0, rewind.stderr
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (2, 2)")
    replicad.start()
    wait_for(
        lambda: sum(1 for c in replicad.changes() if c["source"]["db"] == name) >= 3,
        30,
        "the replay",
    )
    ids = [c["after"]["id"] for c in replicad.changes() if c["source"]["db"] == name]
    assert ids[:1] == [1] and ids[-2:] == [1, 2], ids
    assert replicad.stop() == 0
