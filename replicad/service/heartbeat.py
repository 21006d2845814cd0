"""Two chores beside a leading pipeline, on their own connections to the primary; neither
ever stops the pipeline (a failure is logged, counted and tried again):

- heartbeat writes (`heartbeat.query` every `heartbeat.interval_s`): a transaction in the
  binlog while the published tables are idle or filtered out, so the stored position (and
  the lag) moves instead of pointing at a binlog file the primary may purge;
- the retention check (`SHOW BINARY LOGS` every `heartbeat.retention_check_s`): a warning
  and a metric when at most `retention_warn_files` files precede the stored position's file
  on the primary (purges take the oldest first; a restart fails once it is gone), and an
  error when it is gone already.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from replicad.binlog.position import Position
from replicad.config import Config
from replicad.coordination.store import Lease
from replicad.errors import ReplicadError
from replicad.protocol.commands import cell_text
from replicad.protocol.transport import AsyncConnection
from replicad.service.telemetry import PipelineView, Telemetry
from replicad.source.stream import open_connection

log = structlog.get_logger("replicad.heartbeat")


async def heartbeat_writes(
    config: Config, password: str, telemetry: Telemetry, lease: Lease | None
) -> None:
    """Only while `lease` (leadership) is valid: a deposed leader does not write."""
    query = config.heartbeat.query
    assert query is not None
    name = config.pipeline
    conn: AsyncConnection | None = None
    failing = False
    try:
        while True:
            try:
                if lease is not None and not lease.valid:
                    await asyncio.sleep(config.heartbeat.interval_s)
                    continue
                if conn is None:
                    conn = await open_connection(config.source, password)
                await conn.execute(query)
                telemetry.heartbeats.labels(name, "ok").inc()
                if failing:
                    log.info("heartbeat_write_resumed", pipeline=name)
                    failing = False
            except (ReplicadError, OSError, TimeoutError) as exc:
                telemetry.heartbeats.labels(name, "failed").inc()
                telemetry.errors.labels(name, "heartbeat_write").inc()
                if not failing:  # once per outage, not every interval
                    log.warning("heartbeat_write_failed", pipeline=name, error=str(exc),
                                kind=type(exc).__name__, query=query)  # fmt: skip
                    failing = True
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
                    conn = None
            await asyncio.sleep(config.heartbeat.interval_s)
    finally:
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()


def files_before(logs: list[str], file: str) -> int | None:
    """How many of the primary's binlog files come before `file` (None: it is not there)."""
    try:
        return logs.index(file)
    except ValueError:
        return None


async def retention_checks(
    config: Config,
    password: str,
    stored: Callable[[], Position | None],
    telemetry: Telemetry,
) -> None:
    name = config.pipeline
    view = telemetry.view(name)
    said: str | None = None  # the last state logged: each is said once until it changes
    while True:
        position = stored()
        if position is None:  # nothing stored yet: look again soon, not a period later
            await asyncio.sleep(min(1.0, config.heartbeat.retention_check_s))
            continue
        if position.file:
            try:
                conn = await open_connection(config.source, password)
                try:
                    result = await conn.query("SHOW BINARY LOGS")
                finally:
                    await conn.close()
                logs = [cell_text(row[0]) for row in result.rows]
                state = _judge(config, position, logs, view)
                if state != said and state is not None:
                    _say(state, name, position, logs, view.files_before_purge)
                said = state
            except (ReplicadError, OSError, TimeoutError) as exc:
                telemetry.errors.labels(name, "retention_check").inc()
                if said != "failing":  # once per outage (e.g. no BINLOG MONITOR privilege)
                    log.warning("binlog_retention_check_failed", pipeline=name, error=str(exc))
                said = "failing"
        await asyncio.sleep(config.heartbeat.retention_check_s)


def _judge(config: Config, position: Position, logs: list[str], view: PipelineView) -> str | None:
    """ "purged", "near" or None (fine); sets the metric's value on `view`."""
    before = files_before(logs, position.file)
    if before is None:
        view.files_before_purge = -1
        return "purged"
    view.files_before_purge = before
    # The file being written is never purged: no warning however few files precede it.
    if before <= config.heartbeat.retention_warn_files and position.file != logs[-1]:
        return "near"
    return None


def _say(state: str, name: str, position: Position, logs: list[str], before: int | None) -> None:
    if state == "purged":
        log.error(
            "binlog_retention_purged",
            pipeline=name,
            position=str(position),
            oldest=logs[0] if logs else None,
            note="the primary no longer has the stored position's binlog: unless this "
            "process reads past it before it stops, the next start cannot resume",
        )
    else:
        log.warning(
            "binlog_retention_near",
            pipeline=name,
            position=str(position),
            oldest=logs[0],
            files_before_purge=before,
            note="the primary's next purge may take the binlog this pipeline resumes "
            "from; publish faster, keep binlogs longer, or set heartbeat.query for idle "
            "sources",
        )
