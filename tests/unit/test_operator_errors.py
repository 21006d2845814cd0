"""Issue 36, the table of bad inputs: the pure parts. Config loading (not UTF-8, a key given
twice, an unknown key with the closest known one, a bad regex in spark.tables, a ZooKeeper
host list kazoo cannot read), the Spark master's form, an implausible event length in a
binlog file, and the rate limit of repeated log lines. The commands' exit codes and single
lines are in tests/integration/test_operator_errors_cli.py."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import structlog

from replicad.binlog.files import iter_raw_events
from replicad.config import load_config
from replicad.errors import ConfigError, MalformedEventError, TruncatedError
from replicad.log_limit import EveryInterval
from replicad.service import logging as service_logging
from replicad.spark.run import master_problem
from tests.helpers import events as ev

pytestmark = pytest.mark.unit


def _config(tmp_path: Path, content: str | bytes) -> ConfigError:
    path = tmp_path / "c.yaml"
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    return info.value


def test_a_file_that_is_not_utf8_names_the_file_and_the_byte_offset(tmp_path: Path) -> None:
    head = b"pipeline: ok\nsource:\n  host: caf"
    error = _config(tmp_path, head + b"\xe9\n")  # latin-1 é: no UTF-8 sequence starts so
    assert error.context["offset"] == len(head)
    assert error.context["file"].endswith("c.yaml")
    assert f"byte offset {len(head)} (line 3)" in str(error)


def test_a_key_given_twice_is_refused_naming_its_path_and_both_lines(tmp_path: Path) -> None:
    error = _config(tmp_path, "source:\n  host: a\npipeline: p\nsource:\n  host: b\n")
    assert error.context["key"] == "source"
    assert "lines 1 and 4" in str(error)
    nested = _config(tmp_path, "source:\n  host: a\n  port: 1\n  host: b\n")
    assert nested.context["key"] == "source.host" and "lines 2 and 4" in str(nested)
    in_a_list = _config(
        tmp_path, "invalidate:\n  rules:\n    - table: t\n      keys: [a]\n      table: u\n"
    )
    assert in_a_list.context["key"] == "invalidate.rules.0.table"


def test_a_merge_key_still_overrides_and_the_same_key_in_two_sections_is_fine(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "x-common: &common {port: 3307, host: a}\nsource:\n  <<: *common\n  host: b\n"
        "sinks:\n  kafka: {bootstrap_servers: k, topic: 't.{db}.{table}'}\n"
        "envelope: {}\n"
    )
    with pytest.raises(ConfigError) as info:  # x-common is unknown: the merge itself is fine
        load_config(path, {})
    assert info.value.context["key"] == "x-common"
    path.write_text("source: {host: a, port: 3307}\nsnapshot: {chunk_rows: 5}\n")
    assert load_config(path, {}).source.host == "a"


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        ("sorce:\n  host: a\n", "sorce", "unknown key `sorce` (did you mean `source`?)"),
        ("source:\n  hots: a\n", "source.hots", "unknown key `hots` (did you mean `hosts`?)"),
        ("source:\n  start: {gtdi: 0-1-2}\n", "source.start.gtdi", "(did you mean `gtid`?)"),
        (
            "invalidate:\n  rules:\n    - {table: t, keys: [a], tabel_action: scan}\n",
            "invalidate.rules.0.tabel_action",
            "(did you mean `table_action`?)",
        ),
        ("zzz: 1\n", "zzz", "unknown key `zzz`:"),  # no near miss: no suggestion
        # a check across sections (the top-level model): still names a key
        (
            "source: {start: earliest}\nsnapshot: {mode: initial}\n",
            "source.start",
            "source.start: snapshot.mode initial",
        ),
        ("source:\n  start: {}\n", "source.start", "source.start: source.start takes exactly"),
    ],
)
def test_config_errors_name_the_key_in_an_operators_words(
    tmp_path: Path, text: str, key: str, line: str
) -> None:
    error = _config(tmp_path, text)
    message = str(error).replace(" (file=", ":(file=")  # the suggestion-less case ends at `:`
    assert error.context["key"] == key
    assert line in message, message
    for raw in ("Extra inputs", "Value error", ": :", "(top level)"):
        assert raw not in str(error)


def test_a_bad_regex_in_spark_tables_is_refused_at_load(tmp_path: Path) -> None:
    error = _config(tmp_path, "spark:\n  tables: 'shop\\.(orders'\n")
    assert error.context["key"] == "spark.tables" and "not a regex" in str(error)
    path = tmp_path / "ok.yaml"
    path.write_text("spark:\n  tables: 'shop\\.(orders|lines)'\n")
    assert load_config(path, {}).spark.tables == r"shop\.(orders|lines)"


@pytest.mark.parametrize("hosts", ["a:b:c", "127.0.0.1:abc", "h:99999", ",,,", "h:2181,,", "h:0"])
def test_a_zookeeper_host_list_kazoo_cannot_read_is_a_config_error(
    tmp_path: Path, hosts: str
) -> None:
    kazoo_hosts = pytest.importorskip("kazoo.hosts")
    if hosts != "h:0":  # the oracle: kazoo's own parser refuses it too (port 0 it takes)
        with pytest.raises(ValueError):
            kazoo_hosts.collect_hosts(hosts)
    error = _config(tmp_path, f"coordination:\n  zookeeper:\n    hosts: '{hosts}'\n")
    assert error.context["key"] == "coordination.zookeeper.hosts"


@pytest.mark.parametrize("hosts", ["127.0.0.1:2181", "a:1,b:2/chroot/x", "h", "[::1]:2181"])
def test_host_lists_kazoo_reads_are_accepted(tmp_path: Path, hosts: str) -> None:
    kazoo_hosts = pytest.importorskip("kazoo.hosts")
    kazoo_hosts.collect_hosts(hosts)
    path = tmp_path / "c.yaml"
    path.write_text(f"coordination:\n  zookeeper:\n    hosts: '{hosts}'\n")
    zookeeper = load_config(path, {}).coordination.zookeeper
    assert zookeeper is not None and zookeeper.hosts == hosts


@pytest.mark.parametrize(
    "master",
    [
        "local",
        "local[1]",
        "local[16]",
        "local[*]",
        "local[4,2]",
        "local[*,3]",
        "local-cluster[2,1,1024]",
        "spark://h:7077",
        "spark://a:7077,b:7077",
        "yarn",
        "k8s://https://10.0.0.1:6443",
        "mesos://zk://h:2181/mesos",
    ],
)
def test_master_urls_spark_takes_pass_the_check(master: str) -> None:
    assert master_problem(master) is None


@pytest.mark.parametrize(
    "master",
    [
        "nonsense://x",
        "",
        "local[0]",
        "local[x]",
        "local[",
        "spark://",
        "yarn-x",
        "localhost",
        "k8s:/x",
    ],
)
def test_master_urls_spark_refuses_fail_the_check(master: str) -> None:
    problem = master_problem(master)
    assert problem is not None and repr(master) in problem


def _binlog_then(tail: bytes) -> bytes:
    return ev.binlog_file([ev.fde_mysql8()]) + tail


def test_the_magic_then_garbage_is_an_implausible_length_naming_the_offset(
    tmp_path: Path,
) -> None:
    path = tmp_path / "garbage.bin"
    # a header whose length field (bytes 9..12) says 3005968776, the figure
    garbage = bytes(9) + (3005968776).to_bytes(4, "little") + bytes(6) + b"x" * 4000
    data = _binlog_then(garbage)
    path.write_bytes(data)
    at = len(data) - len(garbage)
    with path.open("rb") as stream, pytest.raises(MalformedEventError) as info:
        list(iter_raw_events(stream, source=str(path)))
    assert str(info.value).startswith(
        f"implausible event length 3005968776 at offset {at} (not a binlog?)"
    )
    assert info.value.context["offset"] == at


def test_a_length_longer_than_the_whole_file_is_implausible_a_torn_tail_is_not(
    tmp_path: Path,
) -> None:
    second = ev.event(ev.QUERY, ev.query_body("BEGIN", schema="s"))
    whole = ev.binlog_file([ev.fde_mysql8(), second])
    cut = tmp_path / "torn.bin"
    cut.write_bytes(whole[:-3])  # the last event torn: its length fits the file
    with cut.open("rb") as stream, pytest.raises(TruncatedError, match="ends inside an event"):
        list(iter_raw_events(stream, source=str(cut)))
    longer = bytearray(whole)
    start = len(whole) - len(second)
    longer[start + 9 : start + 13] = (len(whole) + 1).to_bytes(4, "little")
    cut.write_bytes(bytes(longer))
    with cut.open("rb") as stream, pytest.raises(MalformedEventError, match="implausible"):
        list(iter_raw_events(stream, source=str(cut)))
    # from memory (no file size) only the 1 GiB bound applies: the same bytes are torn ...
    with pytest.raises(TruncatedError):
        list(iter_raw_events(io.BytesIO(bytes(longer)), source="memory"))
    # ... and a length one above max_allowed_packet's ceiling (1 GiB) is not an event
    longer[start + 9 : start + 13] = ((1 << 30) + 1).to_bytes(4, "little")
    with pytest.raises(MalformedEventError, match=f"implausible event length {(1 << 30) + 1}"):
        list(iter_raw_events(io.BytesIO(bytes(longer)), source="memory"))
    longer[start + 9 : start + 13] = (1 << 30).to_bytes(4, "little")  # the ceiling itself:
    with pytest.raises(TruncatedError):  # possible, and these bytes end inside it
        list(iter_raw_events(io.BytesIO(bytes(longer)), source="memory"))


def test_every_interval_allows_the_first_then_one_per_interval_with_the_count() -> None:
    now = [100.0]
    limit = EveryInterval(30.0, clock=lambda: now[0])
    assert limit.allow("k") == (True, 0)
    seen = []
    for _ in range(210):
        now[0] += 12.0 / 210
        seen.append(limit.allow("k"))
    assert not any(allowed for allowed, _ in seen)
    assert limit.allow("other") == (True, 0)  # keys are separate
    now[0] = 130.0
    assert limit.allow("k") == (True, 210)
    assert limit.allow("k") == (False, 0)


def test_librdkafka_lines_are_limited_per_client_and_facility(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]
    monkeypatch.setattr(
        service_logging, "_librdkafka_lines", EveryInterval(30.0, clock=lambda: now[0])
    )
    limit = service_logging._limit_librdkafka_repeats

    def line(facility: str = "FAIL", client: str = "rdkafka#consumer-1") -> dict[str, object]:
        return {"event": "librdkafka_log", "facility": facility, "client": client}

    assert limit(None, "error", line()) == line()
    for _ in range(50):
        with pytest.raises(structlog.DropEvent):
            limit(None, "error", line())
    assert limit(None, "error", line("REQTMOUT")) == line("REQTMOUT")
    assert limit(None, "error", line(client="rdkafka#producer-1"))["client"] == "rdkafka#producer-1"
    other = {"event": "kafka_unavailable"}
    assert limit(None, "warning", dict(other)) == other  # only librdkafka's lines
    now[0] = 31.0
    assert limit(None, "error", line())["repeated"] == 50
