"""Being a replica: connect, set the session up, register, dump, decode; reconnect and resume.

`ReplicaStream.units(start)` yields the primary's transactions as `TransactionUnit`s (raw bytes
and decoded events, from the one `UnitAssembler`) forever. After any transient failure
(connection reset, server restart, dump thread killed, heartbeat silence) it waits with
exponential backoff and jitter, reconnects and resumes after the last complete unit it handed
over (the caller has handled it: a unit is only asked for once the one before is done) and
yields a `Reconnected` marker first, so that the caller can drop the parts it saw of the
transaction in flight and skip rows it already delivered.

Fatal conditions raise instead: wrong credentials, a position the primary no longer has
(error 1236: binlog purged), a binlog format replicad cannot read.

With several `source.hosts`, each reconnect tries the server it streamed from first, then the
others in list order, and resumes by GTID on the first that answers and holds every GTID
already handed over (`source/candidates.py`); one lacking some is refused, never dumped from.
With `source.discovery`, the list is asked of a command before each (re)connect
(`source/discovery.py`).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from replicad.binlog.events import Event, HeartbeatEvent
from replicad.binlog.parser import BinlogParser, version_tuple
from replicad.binlog.position import Position
from replicad.config import ReconnectConfig, SourceConfig
from replicad.errors import (
    AuthError,
    ConfigError,
    ReplicadError,
    ServerError,
    TlsError,
)
from replicad.exit_codes import EXIT_CONFIG
from replicad.protocol.commands import DUMP_HEARTBEAT_V2, cell_text
from replicad.protocol.handshake import TlsMode, TlsSettings
from replicad.protocol.transport import AsyncConnection, connect
from replicad.source.candidates import CandidateRefusedError, missing_gtids
from replicad.source.discovery import discovered_or
from replicad.source.transactions import TransactionUnit, UnitAssembler

log = structlog.get_logger("replicad.source")

ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236


class PositionLostError(ReplicadError):
    """The primary can no longer serve the stored position (binlog purged or never existed)."""

    exit_code = EXIT_CONFIG


class DumpRefusedError(ReplicadError):
    """The primary ended the dump with a fatal error that retrying will not fix."""

    exit_code = EXIT_CONFIG


class ReplicaDisplacedError(DumpRefusedError):
    """The primary ended this dump because another replica connected with the same
    server_id (MySQL: "A replica with the same server_uuid/server_id as this replica has
    connected"). Two daemons sharing a server_id is a configuration mistake (exit 78), except
    under ZooKeeper, where a pipeline's workers share it by design: a new leader displacing a
    deposed one is the failover itself (service/ha.py takes it as leadership lost)."""


# 1236's message when a replica with this server_id displaced the dump (MySQL rpl_master.cc;
# older servers say "slave" and "master")
_DISPLACED_MARKER = "same server_uuid/server_id"
# Server messages of error 1236 that mean "the requested position is no longer (or never was)
# in the binlogs" (MySQL rpl_binlog_sender.cc, MariaDB sql_repl.cc).
_PURGE_MARKERS = (
    "purged",
    "could not find first log file name",
    "could not find gtid state",
    "position > file size",
    "binary log is not open",
    "log file not found",
    "could not open log file",
    "error: connecting slave requested to start from gtid",
    "which is not in the master's binlog",
)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    version: str
    mariadb: bool
    server_id: int
    checksum: bool
    binlog_format: str
    row_image: str
    row_metadata: str | None
    gtid_position: str  # MariaDB @@gtid_binlog_pos or MySQL @@gtid_executed ("" if none)
    gtid_mode: bool


@dataclass(frozen=True, slots=True)
class Reconnected:
    """Marker: the stream restarted at `position`; anything after it is sent again."""

    position: Position
    attempt: int


def replica_uuid(source: SourceConfig, pipeline: str) -> str:
    if source.replica_uuid:
        return source.replica_uuid
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"replicad:{pipeline}:{source.server_id}"))


def tls_config(source: SourceConfig) -> TlsSettings:
    tls = source.tls
    return TlsSettings(TlsMode(tls.mode), ca=tls.ca, cert=tls.cert, key=tls.key)


# A restart cannot fix these: raised at once, never retried (the caller exits 78).
FATAL_SOURCE_ERRORS: tuple[type[BaseException], ...] = (
    AuthError,
    ConfigError,
    TlsError,
    PositionLostError,
    DumpRefusedError,
    CandidateRefusedError,
)
T = TypeVar("T")


class Backoff:
    """The reconnect policy (`source.reconnect`): exponential from `initial_s`, capped at
    `max_s`, each wait varied by ±`jitter` so that replicas do not come back in step."""

    def __init__(self, policy: ReconnectConfig) -> None:
        self.policy = policy
        self.attempt = 0
        self._delay = policy.initial_s

    def reset(self) -> None:
        self.attempt = 0
        self._delay = self.policy.initial_s

    async def wait(self, event: str, exc: BaseException, **context: object) -> None:
        """Log `event` (why, which attempt, how long until the next) and sleep."""
        self.attempt += 1
        jitter = self.policy.jitter
        wait = self._delay * (1 + random.uniform(-jitter, jitter))
        log.warning(
            event,
            error=str(exc),
            error_type=type(exc).__name__,
            attempt=self.attempt,
            retry_in_s=round(wait, 3),
            **context,
        )
        await asyncio.sleep(wait)
        self._delay = min(self._delay * 2, self.policy.max_s)


async def with_primary(
    source: SourceConfig,
    password: str,
    work: Callable[[AsyncConnection], Awaitable[T]],
    *,
    what: str,
) -> T:
    """Open a connection to the primary, run `work` on it and close it. A primary that is
    down or drops the connection is retried with the reconnect policy, as an outage while
    streaming is (`source_unavailable`, every attempt); wrong credentials, TLS refusals and
    bad configuration raise at once. Cancel the caller to give up (e.g. on a stop signal)."""
    backoff = Backoff(source.reconnect)
    while True:
        try:
            conn = await open_first(source, password)
            try:
                return await work(conn)
            finally:
                await conn.close()
        except FATAL_SOURCE_ERRORS:
            raise
        except (ReplicadError, OSError, TimeoutError) as exc:
            await backoff.wait(
                "source_unavailable", exc, host=source.host, port=source.port, doing=what
            )


async def connect_retrying(source: SourceConfig, password: str, *, what: str) -> AsyncConnection:
    """A connection to the primary, retried with the reconnect policy while it is down (wrong
    credentials, TLS refusals and bad configuration raise at once). For work that must not be
    repeated silently once started (a snapshot): the caller owns the connection."""
    backoff = Backoff(source.reconnect)
    while True:
        try:
            return await open_first(source, password)
        except FATAL_SOURCE_ERRORS:
            raise
        except (ReplicadError, OSError, TimeoutError) as exc:
            await backoff.wait(
                "source_unavailable", exc, host=source.host, port=source.port, doing=what
            )


async def open_first(source: SourceConfig, password: str) -> AsyncConnection:
    """A connection to the first of `source.hosts` that answers (the one host without it):
    reads made around the stream (position, schema, snapshots) follow a failover too. The
    last candidate's failure is raised when none answers."""
    *others, last = await discovered_or(source.discovery, source.candidates)
    for host, port in others:
        try:
            return await open_connection(source, password, (host, port))
        except FATAL_SOURCE_ERRORS:
            raise
        except (ReplicadError, OSError, TimeoutError) as exc:
            _candidate_unavailable(host, port, exc)
    return await open_connection(source, password, last)


def _candidate_unavailable(host: str, port: int, exc: BaseException) -> None:
    log.warning(
        "source_candidate_unavailable",
        host=host,
        port=port,
        error=str(exc),
        error_type=type(exc).__name__,
    )


async def open_connection(
    source: SourceConfig, password: str, at: tuple[str, int] | None = None
) -> AsyncConnection:
    """A connection to `at` (host, port), by default `source.host:source.port`."""
    host, port = at or (source.host, source.port)
    return await connect(
        host,
        port,
        source.user,
        password,
        tls=tls_config(source),
        connect_timeout=source.connect_timeout_s,
        read_timeout=max(source.connect_timeout_s, 30.0),
        server_public_key=source.tls.server_public_key,
    )


async def server_info(conn: AsyncConnection) -> ServerInfo:
    version = await _scalar(conn, "SELECT @@version")
    mariadb = "mariadb" in version.lower()
    checksum = (await _variable(conn, "binlog_checksum") or "NONE").upper()
    metadata = await _variable(conn, "binlog_row_metadata")
    if mariadb:
        gtid = await _scalar(conn, "SELECT @@gtid_binlog_pos")
        gtid_mode = True
    else:
        gtid_mode = (await _variable(conn, "gtid_mode") or "OFF").upper() == "ON"
        gtid = await _scalar(conn, "SELECT @@gtid_executed") if gtid_mode else ""
    return ServerInfo(
        version=version,
        mariadb=mariadb,
        server_id=int(await _scalar(conn, "SELECT @@server_id")),
        checksum=checksum == "CRC32",
        binlog_format=(await _variable(conn, "binlog_format") or "").upper(),
        row_image=(await _variable(conn, "binlog_row_image") or "").upper(),
        row_metadata=metadata.upper() if metadata else None,
        gtid_position=(gtid or "").replace("\n", ""),
        gtid_mode=gtid_mode,
    )


async def _scalar(conn: AsyncConnection, sql: str) -> str:
    result = await conn.query(sql)
    value = result.rows[0][0] if result.rows else None
    if isinstance(value, bytes):
        value = value.decode()
    return value or ""


async def _variable(conn: AsyncConnection, name: str) -> str | None:
    result = await conn.query(f"SHOW GLOBAL VARIABLES LIKE '{name}'")
    if not result.rows:
        return None
    value = result.rows[0][1]
    return value.decode() if isinstance(value, bytes) else value


def _heartbeat_flags(info: ServerInfo) -> int:
    """Ask MySQL for HEARTBEAT_V2 (8.0.26+): its position is not cut to 32 bits past 4 GiB.
    MariaDB gives the same bit another meaning (send ANNOTATE_ROWS), so never there."""
    if info.mariadb:
        return 0
    return DUMP_HEARTBEAT_V2 if version_tuple(info.version) >= (8, 0, 26) else 0


class ReplicaStream:
    def __init__(
        self, source: SourceConfig, password: str, *, pipeline: str, statements: bool = False
    ) -> None:
        self.source = source
        self._password = password
        self.pipeline = pipeline
        # Ask MariaDB for ANNOTATE_ROWS (the statement of the rows): only when messages carry
        # it, since each one repeats a client's whole multi-row INSERT.
        self.statements = statements
        self.info: ServerInfo | None = None
        self.connections = 0
        self._candidates = source.candidates
        self._current = 0  # the index in _candidates of the server streamed from (or last)
        self._conn: AsyncConnection | None = None
        # For lag and readiness: streaming from the primary now, and when (monotonic) it was
        # last heard from (an event or a heartbeat)
        self.connected = False
        self.last_heard = time.monotonic()

    async def units(
        self, start: Position
    ) -> AsyncIterator[TransactionUnit | Reconnected | HeartbeatEvent]:
        """The transactions after `start`, forever (see the module's docstring), and the
        primary's heartbeats while it is idle (they say how far it is: lag while quiet)."""
        backoff = Backoff(self.source.reconnect)
        position = start
        while True:
            try:
                conn = await self._start(position)
            except FATAL_SOURCE_ERRORS:
                raise
            except (ReplicadError, OSError, TimeoutError) as exc:
                await backoff.wait("source_disconnected", exc, resume_at=str(position))
                continue
            if self.connections > 1:
                yield Reconnected(position, backoff.attempt)
            backoff.reset()
            # A new dump re-sends the transaction in flight whole: its parts seen so far go.
            assembler = UnitAssembler(position, part_bytes=self.source.unit_part_bytes)
            self.connected = True
            try:
                async for raw, events in self._decode(conn):
                    self.last_heard = time.monotonic()
                    heartbeat = events[0]
                    if isinstance(heartbeat, HeartbeatEvent):  # in no transaction, not stored
                        yield heartbeat
                        continue
                    unit = assembler.feed(raw, events)
                    if unit is not None:
                        yield unit
                        position = assembler.position
                # A blocking dump never ends by itself: the server went away.
                raise ConnectionResetError("the primary ended the binlog stream")
            except PositionLostError:
                raise
            except ServerError as exc:
                if exc.code == ER_MASTER_FATAL_ERROR_READING_BINLOG:
                    raise self._fatal_dump_error(exc, position) from None
                await backoff.wait("source_disconnected", exc, resume_at=str(position))
            except (ReplicadError, OSError, TimeoutError) as exc:
                await backoff.wait("source_disconnected", exc, resume_at=str(position))
            finally:
                self.connected = False
                await conn.close()
                self._conn = None

    async def close(self) -> None:
        self.connected = False
        if self._conn is not None:
            await self._conn.close()

    def _fatal_dump_error(self, exc: ServerError, position: Position) -> ReplicadError:
        """Error 1236 covers every fatal dump condition; only some mean the position is gone.
        Telling an operator to re-snapshot for, say, an oversized event would be harmful."""
        message = exc.message.lower()
        if _DISPLACED_MARKER in message:
            return ReplicaDisplacedError(
                f"the primary stopped the binlog dump: {exc.message}",
                position=str(position),
                code=exc.code,
                server_id=self.source.server_id,
            )
        purged = any(marker in message for marker in _PURGE_MARKERS)
        if not purged:
            return DumpRefusedError(
                f"the primary stopped the binlog dump: {exc.message}",
                position=str(position),
                code=exc.code,
            )
        return PositionLostError(
            "the primary cannot serve the stored position (its binlog was purged or never "
            "existed): changes after it are no longer available. Re-snapshot the downstream "
            "data, then start again from 'earliest' or 'latest' (delete the position file or "
            "use `replicad position reset`)",
            position=str(position),
            server_message=exc.message,
        )

    @property
    def server(self) -> str:
        """The `host:port` streamed from (or last tried)."""
        host, port = self._candidates[self._current]
        return f"{host}:{port}"

    async def _start(self, position: Position) -> AsyncConnection:
        """Connect and dump from the first server that can serve `position`: the current
        one, then the other candidates in list order. With no usable server, the refusal of
        a server that lacks GTIDs wins over mere unavailability (a retry will not fix it)."""
        streamed = self._candidates[self._current]
        if self.source.discovery is not None:
            self._adopt(await discovered_or(self.source.discovery, self._candidates))
        if len(self._candidates) == 1 and self._candidates[0] == streamed:
            return await self._start_at(0, position)
        refused: CandidateRefusedError | None = None
        failure: BaseException | None = None
        for index in self._failover_order():
            host, port = self._candidates[index]
            try:
                conn = await self._start_at(index, position)
            except CandidateRefusedError as exc:
                refused = refused or exc
                continue
            except FATAL_SOURCE_ERRORS:
                raise
            except (ReplicadError, OSError, TimeoutError) as exc:
                _candidate_unavailable(host, port, exc)
                failure = exc
                continue
            self._current = index
            if (host, port) != streamed:
                previous = f"{streamed[0]}:{streamed[1]}"
                log.warning(
                    "source_failover", previous=previous, host=host, port=port, at=str(position)
                )
            return conn
        if refused is not None:
            raise refused
        assert failure is not None
        raise failure

    def _adopt(self, candidates: list[tuple[str, int]]) -> None:
        """Take a discovered list, keeping the server streamed from first if still listed."""
        streamed = self._candidates[self._current]
        self._candidates = candidates
        self._current = candidates.index(streamed) if streamed in candidates else 0

    @property
    def _may_fail_over(self) -> bool:
        return len(self._candidates) > 1 or self.source.discovery is not None

    def _failover_order(self) -> list[int]:
        count = len(self._candidates)
        return [(self._current + step) % count for step in range(count)]

    def _refuse_lagging(self, index: int, info: ServerInfo, position: Position) -> None:
        """A candidate must hold every GTID handed over already (`source/candidates.py`)."""
        missing = missing_gtids(position, info.gtid_position, mariadb=info.mariadb)
        if not missing:
            return
        host, port = self._candidates[index]
        log.error(
            "source_candidate_refused", host=host, port=port, missing=missing, at=str(position)
        )
        raise CandidateRefusedError(
            f"{host}:{port} lacks {missing}: it has not applied every transaction replicad "
            "already published, and streaming from it would silently skip them. Let it catch "
            "up (or promote a server that has them), or re-snapshot the downstream data",
            host=f"{host}:{port}",
            missing=missing,
            position=str(position),
        )

    async def _start_at(self, index: int, position: Position) -> AsyncConnection:
        host, port = self._candidates[index]
        conn = await open_connection(self.source, self._password, (host, port))
        self._conn = conn
        try:
            info = await server_info(conn)
            self.info = info
            if self._may_fail_over:
                self._refuse_lagging(index, info, position)
            await self._prepare_session(conn, info)
            await self._refuse_server_id_clash(conn)
            await conn.register_replica(
                self.source.server_id, host=self.report_host, user=self.source.user
            )
            dump = await self._start_dump(conn, info, position)
        except BaseException:
            await conn.close()
            self._conn = None
            raise
        self.connections += 1
        log.info(
            "source_connected",
            host=host,
            port=port,
            server_version=info.version,
            tls=conn.server.tls,
            auth_plugin=conn.server.auth_plugin,
            start=str(position),
            dump=dump,
            connection=self.connections,
        )
        return conn

    @property
    def report_host(self) -> str:
        """What SHOW SLAVE HOSTS shows for us: names the pipeline, so clashes are visible."""
        return f"replicad:{self.pipeline}"

    async def _refuse_server_id_clash(self, conn: AsyncConnection) -> None:
        """A primary drops the older dump of two replicas with one server_id: registering
        with the id of a live replica would silently break it. SHOW SLAVE HOSTS needs a
        privilege the replication user may lack; then the check is skipped."""
        try:
            hosts = await conn.query("SHOW SLAVE HOSTS")
        except ServerError as exc:
            log.debug("replica_list_unavailable", error=str(exc))
            return
        for row in hosts.rows:
            server_id = int(cell_text(row[0]))
            host = row[1].decode() if isinstance(row[1], bytes) else str(row[1] or "")
            if server_id == self.source.server_id and host != self.report_host:
                raise ConfigError(
                    f"another replica ({host or 'no host reported'}) is registered with "
                    f"server_id {server_id}; registering would cut its binlog stream. Give "
                    "replicad a unique source.server_id",
                    key="source.server_id",
                    value=server_id,
                )

    async def _prepare_session(self, conn: AsyncConnection, info: ServerInfo) -> None:
        checksum = "CRC32" if info.checksum else "NONE"
        period_ns = int(self.source.heartbeat_s * 1_000_000_000)
        uid = replica_uuid(self.source, self.pipeline)
        statements = [
            f"SET @master_binlog_checksum = '{checksum}', @source_binlog_checksum = '{checksum}'",
            f"SET @master_heartbeat_period = {period_ns}, @source_heartbeat_period = {period_ns}",
            f"SET @slave_uuid = '{uid}', @replica_uuid = '{uid}'",
        ]
        if info.mariadb:
            statements.append("SET @mariadb_slave_capability = 4")
        for sql in statements:
            await conn.execute(sql)

    async def _start_dump(self, conn: AsyncConnection, info: ServerInfo, position: Position) -> str:
        """Start the dump from `position`; returns how it was asked for (`gtid`: MySQL's
        COM_BINLOG_DUMP_GTID, `mariadb_gtid`: @slave_connect_state, `file`: file:pos)."""
        server_id = self.source.server_id
        if info.mariadb and position.mariadb_gtids is not None:
            # GTID positions survive rotations and are checked by the server (strict mode).
            await conn.execute(f"SET @slave_connect_state = '{position.mariadb_gtids}'")
            await conn.execute("SET @slave_gtid_strict_mode = 1")
            await conn.execute("SET @slave_gtid_ignore_duplicates = 0")
            await conn.start_dump(server_id, "", 4, annotate_rows=self.statements)
            return "mariadb_gtid"
        if not info.mariadb and position.mysql_gtids is not None and info.gtid_mode:
            await conn.start_dump(
                server_id, "", 4, gtid_set=position.mysql_gtids, flags=_heartbeat_flags(info)
            )
            return "gtid"
        self._refuse_file_failover(position)
        await conn.start_dump(
            server_id,
            position.file,
            position.pos,
            flags=_heartbeat_flags(info),
            annotate_rows=info.mariadb and self.statements,
        )
        return "file"

    def _refuse_file_failover(self, position: Position) -> None:
        """A file:pos names a place in one server's binlog only: it cannot move to another."""
        if self._may_fail_over:
            key = "source.discovery" if self.source.discovery is not None else "source.hosts"
            raise ConfigError(
                f"{key} may switch servers, but the position {position} can only be resumed "
                "by file:pos: failing over needs GTIDs (a stored GTID position, and "
                "gtid_mode=ON on MySQL). List one host, or start from a GTID position",
                key=key,
                position=str(position),
            )

    async def _decode(self, conn: AsyncConnection) -> AsyncIterator[tuple[bytes, list[Event]]]:
        """Each event the primary sends with what it decodes to."""
        assert self.info is not None
        parser = BinlogParser(
            checksums=self.info.checksum, source=self._candidates[self._current][0]
        )
        silence = max(self.source.heartbeat_s * 3, 5.0)
        iterator = conn.__aiter__()
        while True:
            raw = conn.received()  # already read: no need to time the wait
            if raw is None:
                try:
                    async with asyncio.timeout(silence):
                        raw = await iterator.__anext__()
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise TimeoutError(
                        f"no event or heartbeat from the primary for {silence:.0f} s"
                    ) from None
            raw = bytes(raw)
            yield raw, list(parser.decode(raw))
