"""Issue 36, the table of bad inputs, through the command line: each ends with the exit
status docs/operations.md gives (64 usage, 65 data, 75 transient, 78 config) and one line
on standard error that names what to fix, never a traceback.

The commands run as child processes. Kafka and ZooKeeper "down" are ports nothing listens
on; the invalidator's Redis is a private instance (tests/helpers/invalidate.PrivateRedis)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import events as ev
from tests.helpers.invalidate import PrivateRedis

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
REPLICAD = [sys.executable, "-m", "replicad.cli"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REPLICAD_")}
    return {**clean, "PYTHONPATH": str(ROOT)}


def run(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*REPLICAD, *args], cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout
    )


def one_line(proc: subprocess.CompletedProcess[str], code: int, prefix: str) -> str:
    """The single line on standard error, which must start with `prefix`."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return name


def test_invalidate_with_an_http_redis_url_exits_78_naming_the_key(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        "c.yaml",
        (
            f"sinks: {{kafka: {{bootstrap_servers: '127.0.0.1:{closed_port()}'}}}}\n"
            "invalidate:\n  redis: {url: 'http://user:s3cret@127.0.0.1:6379'}\n"
            "  rules: [{table: '.*', keys: ['k:{id}']}]\n"
        ),
    )
    line = one_line(run("invalidate", "-c", config, cwd=tmp_path), 78, "replicad invalidate: ")
    assert "key=invalidate.redis.url" in line and "s3cret" not in line


def test_a_config_file_that_is_not_utf8_exits_78_naming_the_file_and_offset(
    tmp_path: Path,
) -> None:
    head = b"pipeline: p\nsource:\n  user: r"
    config = write(tmp_path, "latin1.yaml", head + "\xe9pl\n".encode("latin-1"))
    line = one_line(run("status", "-c", config, cwd=tmp_path), 78, "replicad status: ")
    assert f"offset={len(head)}" in line and "file=latin1.yaml" in line and "UTF-8" in line


def test_spark_with_a_nonsense_master_exits_64_naming_master(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = run("spark", "materialize", "--master", "nonsense://x", cwd=tmp_path)
    line = one_line(proc, 64, "replicad spark materialize: --master: ")
    assert "'nonsense://x'" in line
    assert time.monotonic() - started < 20  # no JVM was started


def test_spark_without_its_jars_exits_78_naming_lake_jars(tmp_path: Path) -> None:
    started = time.monotonic()
    config = write(
        tmp_path,
        "c.yaml",
        f"sinks:\n  kafka:\n    bootstrap_servers: '127.0.0.1:{closed_port()}'\n",
    )
    proc = run("spark", "materialize", "-c", config, "--master", "local[1]", cwd=tmp_path)
    line = one_line(proc, 78, "replicad spark materialize: ")
    assert "key=spark.lake_jars" in line and "spark-jars" in line
    assert time.monotonic() - started < 20  # no JVM was started


def test_a_config_of_the_former_lake_format_exits_78_naming_the_migration(tmp_path: Path) -> None:
    config = write(tmp_path, "c.yaml", "spark:\n  buckets: 16\n")
    proc = run("spark", "materialize", "-c", config, "--master", "local[1]", cwd=tmp_path)
    line = one_line(proc, 78, "replicad spark materialize: ")
    assert "key=spark.buckets" in line and "Migrating from replicad's former lake format" in line


def test_a_bad_regex_in_spark_tables_exits_78_at_load_naming_the_key(tmp_path: Path) -> None:
    config = write(tmp_path, "c.yaml", "spark:\n  tables: 'shop\\.(orders'\n")
    proc = run("spark", "materialize", "-c", config, "--master", "local[1]", cwd=tmp_path)
    assert "key=spark.tables" in one_line(proc, 78, "replicad spark materialize: ")


def test_a_key_given_twice_exits_78_naming_the_key_and_both_lines(tmp_path: Path) -> None:
    config = write(tmp_path, "c.yaml", "source:\n  host: a\nlog: {}\nsource:\n  host: b\n")
    for args in (["status"], ["run"], ["check"]):
        line = one_line(run(*args, "-c", config, cwd=tmp_path), 78, f"replicad {args[0]}: ")
        assert "key=source" in line and "lines 1 and 4" in line


def _binlog(tmp_path: Path) -> tuple[str, int]:
    data = ev.binlog_file([ev.fde_mysql8(), ev.event(ev.QUERY, ev.query_body("BEGIN"))])
    return write(tmp_path, "binlog.000001", data), len(data)


@pytest.mark.parametrize("where", ["past the end", "after the stop"])
def test_dump_with_a_start_past_the_end_or_after_the_stop_exits_64(
    tmp_path: Path, where: str
) -> None:
    name, size = _binlog(tmp_path)
    assert run("dump", name, "--start-position", str(size), cwd=tmp_path).returncode == 0
    args = (
        ["--start-position", str(size + 1)]
        if where == "past the end"
        else ["--start-position", "200", "--stop-position", "100"]
    )
    proc = run("dump", name, *args, cwd=tmp_path)
    line = one_line(proc, 64, "replicad dump: --start-position ")
    assert proc.stdout == ""
    assert (
        f"past the end of {name} ({size} bytes)"
        if where == "past the end"
        else "is after --stop-position 100"
    ) in line


def test_dump_of_the_magic_then_garbage_exits_65_with_an_implausible_length(
    tmp_path: Path,
) -> None:
    garbage = bytes(range(256)) * 16  # its first header's length field: 0x0C0B0A09
    name = write(tmp_path, "not-a-binlog", b"\xfebin" + garbage)
    line = one_line(run("dump", name, cwd=tmp_path), 65, f"replicad dump: {name}: ")
    assert f"implausible event length {0x0C0B0A09} at offset 4 (not a binlog?)" in line


def test_invalidate_with_kafka_down_says_so_once_not_per_attempt(tmp_path: Path) -> None:
    cache = PrivateRedis(tmp_path / "redis")
    cache.up()
    try:
        config = write(
            tmp_path,
            "c.yaml",
            (
                f"sinks: {{kafka: {{bootstrap_servers: '127.0.0.1:{closed_port()}'}}}}\n"
                "log: {format: json}\n"
                f"invalidate:\n  redis: {{url: 'redis://127.0.0.1:{cache.port}/0'}}\n"
                "  rules: [{table: '.*', keys: ['k:{id}']}]\n"
            ),
        )
        proc = subprocess.Popen(
            [*REPLICAD, "invalidate", "-c", config],
            cwd=tmp_path,
            env=env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(10)  # librdkafka retried ~190 times in 10 s before the limit
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        cache.down()
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in err.splitlines()]
    names = [e["event"] for e in events]
    assert names.count("kafka_unavailable") == 1, names
    assert names.count("librdkafka_log") <= 2, names  # one per facility (FAIL), per 30 s
    noisy = [e for e in events if e["level"] in ("warning", "error")]
    assert len(noisy) <= 3, noisy


def _zookeeper_config(tmp_path: Path, hosts: str) -> str:
    return write(
        tmp_path,
        "zk.yaml",
        f"coordination:\n  zookeeper:\n    hosts: '{hosts}'\n    connect_timeout_s: 1\n",
    )


@pytest.mark.parametrize("command", [["status"], ["snapshot", "status"]])
def test_status_with_zookeeper_down_is_one_line(tmp_path: Path, command: list[str]) -> None:
    config = _zookeeper_config(tmp_path, f"127.0.0.1:{closed_port()}")
    proc = run(*command, "-c", config, cwd=tmp_path)
    line = one_line(proc, 75, f"replicad {' '.join(command)}: ")
    assert "ZooKeeper not reachable" in line


def test_status_with_an_unparseable_zookeeper_host_list_exits_78(tmp_path: Path) -> None:
    config = _zookeeper_config(tmp_path, "a:b:c,,:x")
    line = one_line(run("status", "-c", config, cwd=tmp_path), 78, "replicad status: ")
    assert "key=coordination.zookeeper.hosts" in line


def _run_config(tmp_path: Path) -> str:
    return write(
        tmp_path,
        "run.yaml",
        f"source: {{port: {closed_port()}, password: x}}\n"
        f"coordination: {{local: {{path: {tmp_path / 'pos.json'}}}}}\n",
    )


def test_run_whose_stderr_reader_went_away_exits_non_zero(tmp_path: Path) -> None:
    config = _run_config(tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)  # `2>&1 | head -0`: nobody reads the log
    try:
        proc = subprocess.run(
            [*REPLICAD, "run", "-c", config],
            cwd=tmp_path,
            env=env(),
            stdout=write_end,
            stderr=write_end,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 75


def test_run_started_with_stderr_closed_exits_non_zero(tmp_path: Path) -> None:
    config = _run_config(tmp_path)
    proc = subprocess.run(
        ["bash", "-c", 'exec "$@" 2>&-', "-", *REPLICAD, "run", "-c", config],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 78
    assert proc.stdout == ""  # its log did not go to standard output instead


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("sorce:\n  host: a\n", "sorce: unknown key `sorce` (did you mean `source`?)"),
        (
            "source: {start: earliest}\nsnapshot: {mode: initial}\n",
            "source.start: snapshot.mode initial/when_needed",
        ),
    ],
)
def test_config_errors_are_one_plain_line_naming_the_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    config = write(tmp_path, "c.yaml", text)
    for command in ("run", "status", "check"):
        line = one_line(run(command, "-c", config, cwd=tmp_path), 78, f"replicad {command}: ")
        assert f"invalid configuration: {expected}" in line
        assert "Extra inputs" not in line and "Value error" not in line
