"""`replicad check`: a preflight of the primary (and of Kafka, when configured), in plain
words.

Each finding is OK, WARN (replication works, but something is degraded) or FAIL (replication
would stop or lose data). The command exits non-zero when anything FAILs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from replicad.config import Config
from replicad.coordination.local import LocalPositionStore
from replicad.errors import ReplicadError
from replicad.protocol.transport import AsyncConnection
from replicad.sinks.kafka_admin import probe_kafka
from replicad.source.stream import ServerInfo, open_connection, server_info

OK, WARN, FAIL = "OK", "WARN", "FAIL"


@dataclass(slots=True)
class Finding:
    level: str
    topic: str
    text: str


async def run_check(config: Config, password: str) -> list[Finding]:
    source = config.source
    findings: list[Finding] = []
    add = findings.append
    try:
        conn = await open_connection(source, password)
    except ReplicadError as exc:
        add(Finding(FAIL, "connection", f"cannot connect as {source.user}: {exc}"))
        return findings
    try:
        tls = "with TLS" if conn.server.tls else "without TLS"
        add(
            Finding(
                OK,
                "connection",
                f"connected to {source.host}:{source.port} as {source.user} ({tls})",
            )
        )
        if not conn.server.tls and source.tls.mode == "preferred":
            add(Finding(WARN, "tls", "the primary offers no TLS: changes travel in clear text"))
        info = await server_info(conn)
        add(
            Finding(
                OK,
                "server",
                f"{'MariaDB' if info.mariadb else 'MySQL'} {info.version}, "
                f"server_id {info.server_id}",
            )
        )
        await _binlog_settings(conn, info, add)
        await _privileges(conn, add)
        await _retention(conn, info, config, add)
        if source.server_id == info.server_id:
            add(
                Finding(
                    FAIL,
                    "server_id",
                    f"source.server_id {source.server_id} is the "
                    "primary's own server_id; pick a unique one",
                )
            )
        else:
            add(Finding(OK, "server_id", f"replica server_id {source.server_id}"))
    except ReplicadError as exc:
        add(Finding(FAIL, "query", f"a preflight query failed: {exc}"))
    finally:
        await conn.close()
    if config.sinks.kafka is not None:
        try:
            add(Finding(OK, "kafka", await asyncio.to_thread(probe_kafka, config.sinks.kafka)))
        except ReplicadError as exc:
            add(Finding(FAIL, "kafka", str(exc)))
    return findings


async def _binlog_settings(conn: AsyncConnection, info: ServerInfo, add) -> None:
    log_bin = await _var(conn, "log_bin")
    if (log_bin or "").upper() != "ON":
        add(Finding(FAIL, "log_bin", "binary logging is off: there is nothing to replicate"))
        return
    if info.binlog_format != "ROW":
        add(
            Finding(
                FAIL,
                "binlog_format",
                f"binlog_format is {info.binlog_format}; replicad "
                "needs ROW (statements cannot be decoded into rows)",
            )
        )
    else:
        add(Finding(OK, "binlog_format", "ROW"))
    if info.row_image != "FULL":
        add(
            Finding(
                WARN,
                "binlog_row_image",
                f"binlog_row_image is {info.row_image}: "
                "updates and deletes carry only some columns (before/after images are "
                "partial); set FULL for complete change events",
            )
        )
    else:
        add(Finding(OK, "binlog_row_image", "FULL"))
    if info.row_metadata is None:
        add(
            Finding(
                WARN,
                "binlog_row_metadata",
                "the server has no binlog_row_metadata "
                "(MySQL < 8.0.1 / MariaDB < 10.5): column names come from the schema "
                "history",
            )
        )
    elif info.row_metadata != "FULL":
        add(
            Finding(
                WARN,
                "binlog_row_metadata",
                f"binlog_row_metadata is {info.row_metadata}: "
                "the binlog does not carry column names, ENUM/SET members or the primary "
                "key; set FULL so every change decodes with the columns it was written "
                "with",
            )
        )
    else:
        add(Finding(OK, "binlog_row_metadata", "FULL"))
    if info.mariadb:
        strict = await _var(conn, "gtid_strict_mode")
        add(
            Finding(
                OK,
                "gtid",
                f"MariaDB GTID position {info.gtid_position or '(empty)'}; "
                f"gtid_strict_mode {strict}",
            )
        )
    elif info.gtid_mode:
        add(Finding(OK, "gtid", "gtid_mode ON"))
    else:
        add(
            Finding(
                WARN,
                "gtid",
                "gtid_mode is OFF: positions are file:offset only, which "
                "do not survive a failover to another primary",
            )
        )
    add(
        Finding(
            OK if info.checksum else WARN,
            "binlog_checksum",
            "CRC32" if info.checksum else "NONE: corruption in transit cannot be detected",
        )
    )


async def _privileges(conn: AsyncConnection, add) -> None:
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
        add(Finding(level, "privileges", f"the user lacks {', '.join(missing)}"))
    else:
        add(Finding(OK, "privileges", "REPLICATION SLAVE, REPLICATION CLIENT, SELECT"))


async def _retention(conn: AsyncConnection, info: ServerInfo, config: Config, add) -> None:
    logs = (await conn.query("SHOW BINARY LOGS")).rows
    names = [str(r[0]) for r in logs]
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
                OK,
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
    if retention is None:
        add(Finding(OK, "retention", "binlogs are never expired automatically"))
    else:
        add(
            Finding(
                OK,
                "retention",
                f"binlogs expire after {retention}: replicad must not be down longer than that",
            )
        )
    try:
        stored = LocalPositionStore(config.coordination.local.path, config.pipeline).load()
    except ReplicadError as exc:
        add(Finding(FAIL, "position", str(exc)))
        return
    if stored is None:
        add(Finding(OK, "position", f"no stored position; will start at {config.source.start}"))
    elif stored.file and stored.file not in names and stored.mariadb_gtids is None:
        add(
            Finding(
                FAIL,
                "position",
                f"stored position {stored} is no longer on the primary "
                "(purged): changes after it are lost",
            )
        )
    else:
        add(Finding(OK, "position", f"stored position {stored}"))


async def _var(conn: AsyncConnection, name: str) -> str | None:
    rows = (await conn.query(f"SHOW GLOBAL VARIABLES LIKE '{name}'")).rows
    if not rows:
        return None
    value = rows[0][1]
    return value.decode() if isinstance(value, bytes) else str(value)
