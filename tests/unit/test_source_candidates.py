"""source.hosts: the candidate list in the config, and the check that a failover candidate
holds every GTID already published (sans-IO)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicad.binlog.gtid import GtidSet, MariaGtidPosition
from replicad.binlog.position import Position
from replicad.config import load_config
from replicad.errors import ConfigError
from replicad.exit_codes import EXIT_CONFIG
from replicad.source.candidates import CandidateRefusedError, missing_gtids
from replicad.source.stream import FATAL_SOURCE_ERRORS, ReplicaStream

pytestmark = pytest.mark.unit

UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
UUID_B = "4f22fa47-71ca-11e1-9e33-c80aa9429563"


def _maria(text: str) -> Position:
    return Position("mariadb-bin.000001", 4, None, MariaGtidPosition.parse(text))


def _mysql(text: str) -> Position:
    return Position("binlog.000001", 4, GtidSet.parse(text), None)


@pytest.mark.parametrize(
    ("ours", "theirs", "missing"),
    [
        ("0-1-57", "0-1-57", ""),
        ("0-1-57", "0-2-60", ""),  # promoted: its own GTIDs continue the domain's sequence
        ("0-1-57", "0-1-40", "0-1-41..0-1-57"),
        ("0-1-57", "0-1-56", "0-1-57"),
        ("0-1-57", "", "0-1-1..0-1-57"),
        ("0-1-5,1-3-9", "0-1-5,1-3-2", "1-3-3..1-3-9"),
        ("0-1-5,1-3-9", "0-1-7", "1-3-1..1-3-9"),
        ("", "0-1-7", ""),
    ],
)
def test_mariadb_candidate_needs_each_domains_seq_no(ours: str, theirs: str, missing: str) -> None:
    assert missing_gtids(_maria(ours), theirs, mariadb=True) == missing


@pytest.mark.parametrize(
    ("ours", "theirs", "missing"),
    [
        (f"{UUID_A}:1-57", f"{UUID_A}:1-57", ""),
        (f"{UUID_A}:1-57", f"{UUID_A}:1-60,{UUID_B}:1-3", ""),
        (f"{UUID_A}:1-57", f"{UUID_A}:1-40", f"{UUID_A}:41-57"),
        (f"{UUID_A}:1-57", f"{UUID_A}:1-10:20-57", f"{UUID_A}:11-19"),
        (f"{UUID_A}:1-5,{UUID_B}:1-2", f"{UUID_A}:1-5", f"{UUID_B}:1-2"),
        (f"{UUID_A}:1-5", "", f"{UUID_A}:1-5"),
    ],
)
def test_mysql_candidate_needs_a_superset(ours: str, theirs: str, missing: str) -> None:
    assert missing_gtids(_mysql(ours), theirs, mariadb=False) == missing


def test_a_position_without_gtids_of_that_flavour_has_nothing_to_miss() -> None:
    plain = Position("f.000001", 4)
    assert missing_gtids(plain, "0-1-9", mariadb=True) == ""
    assert missing_gtids(plain, f"{UUID_A}:1-3", mariadb=False) == ""


def test_refusal_is_fatal_and_exits_78() -> None:
    assert CandidateRefusedError.exit_code == EXIT_CONFIG
    assert CandidateRefusedError in FATAL_SOURCE_ERRORS


def _config(tmp_path: Path, source: str):
    path = tmp_path / "c.yaml"
    path.write_text(f"source:\n{source}")
    return load_config(path, {})


def test_hosts_are_the_candidates_and_the_first_is_host_and_port(tmp_path: Path) -> None:
    config = _config(tmp_path, "  hosts: ['127.0.0.1:3316', 'db2:3317', '[::1]:3318']\n")
    source = config.source
    assert source.candidates == [("127.0.0.1", 3316), ("db2", 3317), ("::1", 3318)]
    assert (source.host, source.port) == ("127.0.0.1", 3316)


def test_host_and_port_are_a_one_element_list(tmp_path: Path) -> None:
    source = _config(tmp_path, "  host: db1\n  port: 3310\n").source
    assert source.candidates == [("db1", 3310)]


@pytest.mark.parametrize("extra", ["  host: db1\n", "  port: 3310\n"])
def test_hosts_with_host_or_port_is_an_error_naming_the_keys(tmp_path: Path, extra: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(tmp_path, "  hosts: ['a:1']\n" + extra)
    assert "source.hosts" in str(caught.value) and "source.host" in str(caught.value)


@pytest.mark.parametrize("entry", ["db1", "db1:", ":3306", "db1:0", "db1:x", "db1:70000"])
def test_hosts_entries_must_be_host_port(tmp_path: Path, entry: str) -> None:
    with pytest.raises(ConfigError, match="not host:port"):
        _config(tmp_path, f"  hosts: ['{entry}']\n")


def test_reconnects_try_the_current_server_first_then_the_list_in_order(tmp_path: Path) -> None:
    source = _config(tmp_path, "  hosts: ['a:1', 'b:2', 'c:3']\n").source
    stream = ReplicaStream(source, "", pipeline="p")
    assert stream._failover_order() == [0, 1, 2]
    stream._current = 1
    assert stream._failover_order() == [1, 2, 0]
    assert stream.server == "b:2"


def test_a_file_position_cannot_fail_over(tmp_path: Path) -> None:
    source = _config(tmp_path, "  hosts: ['a:1', 'b:2']\n").source
    with pytest.raises(ConfigError, match="needs GTIDs"):
        ReplicaStream(source, "", pipeline="p")._refuse_file_failover(Position("f.000001", 4))
    single = _config(tmp_path, "  hosts: ['a:1']\n").source
    ReplicaStream(single, "", pipeline="p")._refuse_file_failover(Position("f.000001", 4))
