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
import time
from collections.abc import Callable
from dataclasses import dataclass

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
                    log.warning(
                        "heartbeat_write_failed",
                        pipeline=name,
                        error=str(exc),
                        kind=type(exc).__name__,
                        query=query,
                    )
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


# Within this share of the primary's time-based expiry a file counts as near purging (72 h of
# MySQL's default 720 h): time to raise the retention or catch up before it goes.
NEAR_EXPIRY_SHARE = 0.1
_PURGE_VARIABLES = (
    "binlog_expire_logs_seconds",
    "expire_logs_days",
    "binlog_expire_logs_auto_purge",  # MySQL 8.0.29+
    "max_binlog_total_size",  # MariaDB 11.4+ (alias binlog_space_limit)
    "binlog_space_limit",
)


class FileClock:
    """The newest transaction timestamp the pipeline read from each binlog file: a lower bound
    of when the primary last wrote it, which is what its time-based expiry counts from (the
    file's modification time). Only the most recent files are kept."""

    KEEP = 16

    def __init__(self) -> None:
        self._newest: dict[str, int] = {}

    def seen(self, file: str, timestamp: int) -> None:
        newest = self._newest
        if timestamp > newest.get(file, 0):
            if file not in newest and len(newest) >= self.KEEP:
                del newest[next(iter(newest))]  # the oldest file seen
            newest[file] = timestamp

    def newest(self, file: str) -> int | None:
        return self._newest.get(file)


@dataclass(frozen=True, slots=True)
class PurgePolicy:
    """How the primary purges binlogs by itself."""

    expire_s: float  # files older than this go (0: no automatic time-based purge)
    by_size: bool  # a total-size limit: the oldest files go, whatever their age


async def purge_policy(conn: AsyncConnection) -> PurgePolicy:
    names = ", ".join(f"'{name}'" for name in _PURGE_VARIABLES)
    result = await conn.query(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
    values = {cell_text(row[0]).lower(): cell_text(row[1]) for row in result.rows}
    # Where both exist the seconds win (MySQL 8.0); on MariaDB 10.6+ they are one setting.
    expire_s = float(values.get("binlog_expire_logs_seconds") or 0) or (
        float(values.get("expire_logs_days") or 0) * 86400
    )
    if values.get("binlog_expire_logs_auto_purge", "ON").upper() == "OFF":
        expire_s = 0.0
    limit = values.get("max_binlog_total_size") or values.get("binlog_space_limit") or "0"
    return PurgePolicy(expire_s, int(limit) > 0)


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
    clock: FileClock,
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
                    policy = await purge_policy(conn)
                finally:
                    await conn.close()
                logs = [cell_text(row[0]) for row in result.rows]
                state, detail = judge(config, position, logs, view, policy, clock, time.time())
                if state != said and state is not None:
                    _say(state, name, position, logs, view.files_before_purge, detail)
                said = state
            except (ReplicadError, OSError, TimeoutError) as exc:
                telemetry.errors.labels(name, "retention_check").inc()
                if said != "failing":  # once per outage (e.g. no BINLOG MONITOR privilege)
                    log.warning("binlog_retention_check_failed", pipeline=name, error=str(exc))
                said = "failing"
        await asyncio.sleep(config.heartbeat.retention_check_s)


def judge(
    config: Config,
    position: Position,
    logs: list[str],
    view: PipelineView,
    policy: PurgePolicy,
    clock: FileClock,
    now: float,
) -> tuple[str | None, dict[str, object]]:
    """ "purged", "near" or None (fine, or not known yet), with what the warning should say;
    sets the metric's value on `view`.

    Purges by size (or by an operator, when nothing purges automatically) take the oldest
    files first: there the distance from the oldest file is the measure. A time-based expiry
    takes a file once it is older than the expiry, however many files precede it (on a fresh
    server every file is the oldest, for 30 days): there the file's age is."""
    before = files_before(logs, position.file)
    if before is None:
        view.files_before_purge = -1
        return "purged", {}
    view.files_before_purge = before
    if position.file == logs[-1]:  # the file being written is never purged
        return None, {}
    if policy.expire_s > 0 and not policy.by_size:
        written = clock.newest(position.file)
        if written is None:  # nothing read from that file yet: its age is unknown
            return None, {}
        left_s = written + policy.expire_s - now  # at least this long before it may go
        if left_s < policy.expire_s * NEAR_EXPIRY_SHARE:
            return "near", {"expires_in_h": round(max(left_s, 0.0) / 3600, 1)}
        return None, {}
    if before <= config.heartbeat.retention_warn_files:
        return "near", {}
    return None, {}


def _say(
    state: str,
    name: str,
    position: Position,
    logs: list[str],
    before: int | None,
    detail: dict[str, object],
) -> None:
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
            **detail,
            note="the primary's next purge may take the binlog this pipeline resumes "
            "from; publish faster, keep binlogs longer, or set heartbeat.query for idle "
            "sources",
        )
