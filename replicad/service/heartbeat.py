"""Two chores beside a leading pipeline, on their own connections to the primary; neither
ever stops the pipeline (a failure is logged, counted and tried again):

- heartbeat writes (`heartbeat.query` every `heartbeat.interval_s`): a transaction in the
  binlog while the published tables are idle or filtered out, so the stored position (and
  the lag) moves instead of pointing at a binlog file the primary may purge;
- the retention check (`SHOW BINARY LOGS` every `heartbeat.retention_check_s`): a warning
  and a metric when the stored position's file is within `retention_warn_files` of the
  oldest file the primary still has (the next purge takes it; a restart then fails).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from replicad.binlog.position import Position
from replicad.config import Config
from replicad.errors import ReplicadError
from replicad.protocol.commands import cell_text
from replicad.protocol.transport import AsyncConnection
from replicad.service.telemetry import Telemetry
from replicad.source.stream import open_connection

log = structlog.get_logger("replicad.heartbeat")


async def heartbeat_writes(config: Config, password: str, telemetry: Telemetry) -> None:
    query = config.heartbeat.query
    assert query is not None
    name = config.pipeline
    conn: AsyncConnection | None = None
    failing = False
    try:
        while True:
            try:
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
    warn_at = config.heartbeat.retention_warn_files
    view = telemetry.view(name)
    warned = False
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
                before = files_before(logs, position.file)
                view.files_before_purge = before
                # The file being written is never purged: no warning however few files.
                if before is not None and before <= warn_at and position.file != logs[-1]:
                    if not warned:
                        log.warning(
                            "binlog_retention_near",
                            pipeline=name,
                            position=str(position),
                            oldest=logs[0],
                            files_before_purge=before,
                            note="the primary's next purge may take the binlog this pipeline "
                            "resumes from; publish faster, keep binlogs longer, or set "
                            "heartbeat.query for idle sources",
                        )
                        warned = True
                else:
                    warned = False
            except (ReplicadError, OSError, TimeoutError) as exc:
                telemetry.errors.labels(name, "retention_check").inc()
                log.warning("binlog_retention_check_failed", pipeline=name, error=str(exc))
        await asyncio.sleep(config.heartbeat.retention_check_s)
