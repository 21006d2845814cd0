"""`replicad dump` starts without the imports it does not use, and still warns.

structlog (which imports asyncio), the relay's crc32c package and ssl cost about 60 ms at
start-up, a sixth of a `replicad dump` of a 40 MB binlog (docs/performance.md). A dump that
logs nothing must not import them; a dump that meets a DDL it cannot follow must still print
the warning on standard error, and only there (replicad.lazy_logging).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import events as ev

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DEFERRED = ("structlog", "asyncio", "crc32c", "ssl", "pydantic")
# Runs `replicad dump FILE`, then names the deferred modules that were imported after all.
SCRIPT = f"""
import sys
from replicad.cli import main
sys.argv = ["replicad", "dump", *sys.argv[1:]]
code = main()
loaded = [m for m in {DEFERRED!r} if m in sys.modules]
print("imported:" + ",".join(loaded), file=sys.stderr)
sys.exit(code)
"""


def _dump(tmp_path: Path, *statements: tuple[str, str]) -> subprocess.CompletedProcess[str]:
    events = [ev.fde_mysql8()]
    events += [ev.event(ev.QUERY, ev.query_body(sql, schema=schema)) for sql, schema in statements]
    path = tmp_path / "binlog.000001"
    path.write_bytes(ev.binlog_file(events))
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_dump_that_logs_nothing_imports_no_logging_library(tmp_path: Path) -> None:
    # A DDL the history follows: its note is at info, below the dump's warning level.
    proc = _dump(tmp_path, ("CREATE TABLE t (a INT)", "shop"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["imported:"]
    assert [_table(line) for line in proc.stdout.splitlines()] == [("ddl", "shop", "t")]


def test_a_warning_is_still_printed_on_standard_error(tmp_path: Path) -> None:
    # No default schema: the history cannot tell which table the DDL creates.
    proc = _dump(tmp_path, ("CREATE TABLE t (a INT)", "shop"), ("CREATE TABLE nodb (a INT)", ""))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, lines
    assert "schema_ddl_unparsed" in lines[0] and "[warning" in lines[0]
    assert "CREATE TABLE nodb" in lines[0]
    assert "structlog" in lines[1].removeprefix("imported:").split(",")
    assert [_table(line) for line in proc.stdout.splitlines()] == [("ddl", "shop", "t")]


def _table(line: str) -> tuple[str, str, str]:
    event = json.loads(line)  # standard output carries the change events only
    return event["type"], event["db"], event["table"]


def test_a_direct_set_up_replaces_a_deferred_one() -> None:
    import structlog
    from structlog.testing import capture_logs

    from replicad import lazy_logging
    from replicad.service.logging import configure_logging, configure_logging_on_first_use

    saved = structlog.get_config()
    try:
        configure_logging_on_first_use("console", "error")
        configure_logging("json", "info")  # e.g. a command run after a dump in one process
        logger = lazy_logging.get_logger("replicad.test")
        with capture_logs() as logs:
            logger.info("seen_at_info")  # the deferred "error" level would have dropped it
        assert [e["event"] for e in logs] == ["seen_at_info"]
    finally:
        structlog.configure(**saved)
