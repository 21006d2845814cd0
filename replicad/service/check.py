"""`replicad check`: a preflight of every dependency the config names, in plain words: the
primary (here), and Kafka, ZooKeeper, the MQTT broker, Redis, the snapshot signal table and
the metrics port (service/check_deps.py). They are checked side by side and each one's
failure is a finding, never the end of the check: an operator fixing a deployment wants
every problem from one run, not one per run.

Each finding is PASS, WARN (replication works, but something is degraded) or FAIL
(replication would stop or lose data); WARN and FAIL carry a one-line remedy. The report is
text for people or one JSON document (`--json`) for automation; the command exits 1 when
anything FAILs (EXIT_CHECK_FAILED), else 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson

from replicad.config import Config
from replicad.coordination.local import LocalPositionStore
from replicad.errors import AuthError, ReplicadError, TlsError
from replicad.exit_codes import EXIT_CHECK_FAILED, EXIT_OK
from replicad.protocol.transport import AsyncConnection
from replicad.service.check_deps import (
    FAIL,
    PASS,
    WARN,
    Finding,
    dependency_checks,
    signal_level,
    signal_table,
)
from replicad.source.stream import ServerInfo, open_connection, server_info

__all__ = ["FAIL", "PASS", "WARN", "Finding", "exit_status", "render_json", "render_text"]

Add = Callable[[Finding], None]
_INDENT = " " * 27  # under the text column of a finding line


async def run_check(config: Config, password: str) -> list[Finding]:
    """Every check, concurrently; the findings in a fixed order (the primary first)."""
    found = await asyncio.gather(_primary(config, password), *dependency_checks(config))
    return [finding for findings in found for finding in findings]


# ------------------------------------------------------------------------------ report
def exit_status(findings: list[Finding]) -> int:
    return EXIT_CHECK_FAILED if any(f.level == FAIL for f in findings) else EXIT_OK


def render_text(findings: list[Finding]) -> str:
    """A line per finding (level, topic, text), its remedy on the next, then a verdict."""
    lines = []
    for finding in findings:
        lines.append(f"{finding.level:<4}  {finding.topic:<20} {finding.text}")
        if finding.remedy:
            lines.append(f"{_INDENT}fix: {finding.remedy}")
    if exit_status(findings) != EXIT_OK:
        lines.append("replication would stop: fix the FAIL lines above")
    elif any(f.level == WARN for f in findings):
        lines.append("ready to replicate (see WARN lines)")
    else:
        lines.append("ready to replicate")
    return "\n".join(lines)


def render_json(findings: list[Finding]) -> str:
    """{"findings": [{"level", "topic", "text", "remedy"}], "ok": no FAIL}."""
    return orjson.dumps(
        {
            "findings": [
                {"level": f.level, "topic": f.topic, "text": f.text, "remedy": f.remedy}
                for f in findings
            ],
            "ok": exit_status(findings) == EXIT_OK,
        }
    ).decode()


# ----------------------------------------------------------------------------- primary
async def _primary(config: Config, password: str) -> list[Finding]:
    source = config.source
    findings: list[Finding] = []
    add = findings.append
    try:
        conn = await open_connection(source, password)
    except ReplicadError as exc:
        add(
            Finding(
                FAIL,
                "connection",
                f"cannot connect as {source.user}: {exc}",
                _connection_remedy(exc),
            )
        )
        return findings
    try:
        tls = "with TLS" if conn.server.tls else "without TLS"
        where = f"{source.host}:{source.port}"
        add(Finding(PASS, "connection", f"connected to {where} as {source.user} ({tls})"))
        if not conn.server.tls and source.tls.mode == "preferred":
            add(
                Finding(
                    WARN,
                    "tls",
                    "the primary offers no TLS: changes travel in clear text",
                    "enable TLS on the primary, or set source.tls.mode: disabled to accept "
                    "clear text",
                )
            )
        info = await server_info(conn)
        kind = "MariaDB" if info.mariadb else "MySQL"
        add(Finding(PASS, "server", f"{kind} {info.version}, server_id {info.server_id}"))
        await _binlog_settings(conn, info, add)
        await _privileges(conn, add)
        await _retention(conn, info, config, add)
        level = signal_level(config, info)
        if level is not None:
            findings += await signal_table(conn, info, config, level)
        add(_server_id(config, info))
    except ReplicadError as exc:
        add(
            Finding(
                FAIL,
                "query",
                f"a preflight query failed: {exc}",
                "grant the source user what the failed query needs (see the error)",
            )
        )
    finally:
        await conn.close()
    return findings


def _connection_remedy(exc: ReplicadError) -> str:
    if isinstance(exc, AuthError):
        return "fix source.user or its password (source.password_env / password_file)"
    if isinstance(exc, TlsError):
        return "fix source.tls (mode, ca) or the primary's TLS certificate"
    return "start the primary or fix source.host and source.port"


def _server_id(config: Config, info: ServerInfo) -> Finding:
    server_id = config.source.server_id
    if server_id == info.server_id:
        return Finding(
            FAIL,
            "server_id",
            f"source.server_id {server_id} is the primary's own server_id",
            "set source.server_id to a number no server or replica of the primary uses",
        )
    return Finding(PASS, "server_id", f"replica server_id {server_id}")


async def _binlog_settings(conn: AsyncConnection, info: ServerInfo, add: Add) -> None:
    log_bin = await _var(conn, "log_bin")
    if (log_bin or "").upper() != "ON":
        add(
            Finding(
                FAIL,
                "log_bin",
                "binary logging is off: there is nothing to replicate",
                "enable log_bin in the primary's configuration and restart it",
            )
        )
        return
    if info.binlog_format != "ROW":
        add(
            Finding(
                FAIL,
                "binlog_format",
                f"binlog_format is {info.binlog_format}; replicad "
                "needs ROW (statements cannot be decoded into rows)",
                _set_global("binlog_format", "ROW"),
            )
        )
    else:
        add(Finding(PASS, "binlog_format", "ROW"))
    _row_settings(info, add)
    await _gtid(conn, info, add)
    if info.checksum:
        add(Finding(PASS, "binlog_checksum", "CRC32"))
    else:
        add(
            Finding(
                WARN,
                "binlog_checksum",
                "NONE: corruption in transit cannot be detected",
                _set_global("binlog_checksum", "CRC32"),
            )
        )


def _set_global(name: str, value: str) -> str:
    return f"SET GLOBAL {name} = {value} on the primary (and {name}={value} in its config file)"


def _row_settings(info: ServerInfo, add: Add) -> None:
    if info.row_image != "FULL":
        add(
            Finding(
                WARN,
                "binlog_row_image",
                f"binlog_row_image is {info.row_image}: updates "
                "and deletes carry only some columns (before/after images are partial)",
                _set_global("binlog_row_image", "FULL"),
            )
        )
    else:
        add(Finding(PASS, "binlog_row_image", "FULL"))
    if info.row_metadata is None:
        add(
            Finding(
                WARN,
                "binlog_row_metadata",
                "the server has no binlog_row_metadata "
                "(MySQL < 8.0.1 / MariaDB < 10.5): column names come from the schema "
                "history",
                "upgrade the primary to MySQL 8.0.1 / MariaDB 10.5 or later",
            )
        )
    elif info.row_metadata != "FULL":
        add(
            Finding(
                WARN,
                "binlog_row_metadata",
                f"binlog_row_metadata is {info.row_metadata}: "
                "the binlog does not carry column names, ENUM/SET members or the primary "
                "key",
                _set_global("binlog_row_metadata", "FULL"),
            )
        )
    else:
        add(Finding(PASS, "binlog_row_metadata", "FULL"))


async def _gtid(conn: AsyncConnection, info: ServerInfo, add: Add) -> None:
    if info.mariadb:
        strict = await _var(conn, "gtid_strict_mode")
        position = info.gtid_position or "(empty)"
        add(Finding(PASS, "gtid", f"MariaDB GTID position {position}; gtid_strict_mode {strict}"))
    elif info.gtid_mode:
        add(Finding(PASS, "gtid", "gtid_mode ON"))
    else:
        add(
            Finding(
                WARN,
                "gtid",
                "gtid_mode is OFF: positions are file:offset only, which do "
                "not survive a failover to another primary",
                "turn on gtid_mode and "
                "enforce_gtid_consistency on the primary (MySQL's online procedure)",
            )
        )


async def _privileges(conn: AsyncConnection, add: Add) -> None:
    grants = " ".join(
        str(row[0]) for row in (await conn.query("SHOW GRANTS FOR CURRENT_USER()")).rows
    ).upper()
    everything = "ALL PRIVILEGES ON *.*" in grants
    needed = {
        "REPLICATION SLAVE": ("REPLICATION SLAVE", "REPLICATION REPLICA"),
        "REPLICATION CLIENT": ("REPLICATION CLIENT", "BINLOG MONITOR"),
        "SELECT": ("SELECT",),
    }
    missing = [
        name
        for name, spellings in needed.items()
        if not everything and not any(s in grants for s in spellings)
    ]
    if missing:
        level = FAIL if "REPLICATION SLAVE" in missing else WARN
        add(
            Finding(
                level,
                "privileges",
                f"the user lacks {', '.join(missing)}",
                f"GRANT {', '.join(missing)} ON *.* TO the source user",
            )
        )
    else:
        add(Finding(PASS, "privileges", "REPLICATION SLAVE, REPLICATION CLIENT, SELECT"))


async def _retention(conn: AsyncConnection, info: ServerInfo, config: Config, add: Add) -> None:
    names = [str(r[0]) for r in (await conn.query("SHOW BINARY LOGS")).rows]
    if names:
        oldest = names[0]
        where = f"{oldest}:4"
        if info.mariadb:
            gtid = (await conn.query(f"SELECT BINLOG_GTID_POS('{oldest}', 4)")).rows[0][0]
            if isinstance(gtid, bytes):  # a text function: str, unless the collation is binary
                gtid = gtid.decode()
            where += f" (GTID {gtid or 'empty'})"
        add(
            Finding(
                PASS,
                "oldest_position",
                f"oldest available position {where}; {len(names)} binlog file(s)",
            )
        )
    seconds = await _var(conn, "binlog_expire_logs_seconds")
    days = await _var(conn, "expire_logs_days")
    if seconds and int(float(seconds)) > 0:
        retention = f"{int(float(seconds)) / 3600:.1f} h"
    elif days and float(days) > 0:
        retention = f"{float(days) * 24:.1f} h"
    else:
        retention = None
    add(
        Finding(
            PASS,
            "retention",
            "binlogs are never expired automatically"
            if retention is None
            else f"binlogs expire after {retention}: replicad must not be down longer than that",
        )
    )
    if config.coordination.zookeeper is None:  # else the position is in ZooKeeper (check_deps)
        add(_local_position(config, names))


def _local_position(config: Config, names: list[str]) -> Finding:
    """The stored position, and whether the primary still has its binlog file."""
    path = config.coordination.local.path
    try:
        checkpoint = LocalPositionStore(path, config.pipeline).load()
    except ReplicadError as exc:
        return Finding(
            FAIL,
            "position",
            str(exc),
            f"repair or move away {path} (then `replicad position set` or a re-snapshot)",
        )
    if checkpoint is None:
        return Finding(PASS, "position", f"no stored position; will start at {config.source.start}")
    stored = checkpoint.position
    if stored.file and stored.file not in names and stored.mariadb_gtids is None:
        text = f"stored position {stored} is no longer on the primary (purged)"
        if config.snapshot.mode in ("when_needed", "always"):
            return Finding(
                WARN,
                "position",
                f"{text}: snapshot.mode {config.snapshot.mode} will re-snapshot",
                "none needed, if a re-snapshot is what you want",
            )
        return Finding(
            FAIL,
            "position",
            f"{text}: changes after it are lost",
            "re-snapshot, then `replicad position reset` (or set snapshot.mode: when_needed)",
        )
    return Finding(PASS, "position", f"stored position {stored}")


async def _var(conn: AsyncConnection, name: str) -> str | None:
    rows = (await conn.query(f"SHOW GLOBAL VARIABLES LIKE '{name}'")).rows
    if not rows:
        return None
    value = rows[0][1]
    return value.decode() if isinstance(value, bytes) else str(value)
