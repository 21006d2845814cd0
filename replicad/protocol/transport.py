"""asyncio transport: opens the socket, upgrades it to TLS when asked, and moves bytes between
the socket and the sans-IO `Connection`. Every protocol decision lives in connection.py."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from types import TracebackType

import replicad
from replicad.binlog.gtid import GtidSet
from replicad.errors import (
    AuthError,
    ConnectError,
    ConnectionLostError,
    ProtocolError,
    ReplicadError,
    TlsError,
)
from replicad.protocol.auth import Secret, load_public_key
from replicad.protocol.commands import (
    DUMP_NON_BLOCK,
    DUMP_SEND_ANNOTATE_ROWS,
    BinlogDump,
    BinlogDumpGtid,
    Command,
    Ping,
    Query,
    Quit,
    RegisterSlave,
    ResultSet,
)
from replicad.protocol.connection import (
    BinlogEventPacket,
    Connection,
    ConnectionClosed,
    EndOfDump,
    Event,
    NeedData,
    Ok,
    Ready,
    State,
    TlsUpgradeNeeded,
)
from replicad.protocol.handshake import TlsMode, TlsSettings, build_ssl_context

READ_SIZE = 256 * 1024


def _client_version() -> str:
    return replicad.__version__


def _tls_config(tls: TlsSettings | TlsMode | str | None) -> TlsSettings:
    if tls is None:
        return TlsSettings(TlsMode.DISABLED)
    if isinstance(tls, TlsSettings):
        return tls
    return TlsSettings(TlsMode(tls))


class AsyncConnection:
    """A logged-in connection. Request/response commands take `read_timeout` (None: wait);
    the binlog stream has none (heartbeats are the caller's liveness signal)."""

    def __init__(
        self,
        conn: Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        ready: Ready,
        *,
        address: str,
        read_timeout: float | None,
    ) -> None:
        self._conn = conn
        self._reader = reader
        self._writer = writer
        self.server = ready
        self.address = address
        self.read_timeout = read_timeout
        self._dump_over = False

    def __repr__(self) -> str:
        return (
            f"AsyncConnection({self._conn.user!r}@{self.address}, "
            f"server={self.server.server_version!r}, state={self._conn.state.value})"
        )

    @property
    def state(self) -> State:
        return self._conn.state

    # ------------------------------------------------------------------ commands

    async def query(self, sql: str, *, packets: bool = False) -> ResultSet:
        """Run a statement that returns rows (SELECT, SHOW ...); `packets`: the rows as their
        packets (Query.packets)."""
        event = await self._request(Query(sql, packets))
        if not isinstance(event, ResultSet):
            raise ProtocolError("statement returned no result set; use execute()", sql=sql[:80])
        return event

    async def execute(self, sql: str) -> Ok:
        """Run a statement that returns no rows (SET, INSERT ...)."""
        event = await self._request(Query(sql))
        if not isinstance(event, Ok):
            raise ProtocolError("statement returned a result set; use query()", sql=sql[:80])
        return event

    async def ping(self) -> None:
        await self._request(Ping())

    async def register_replica(
        self,
        server_id: int,
        *,
        host: str = "",
        user: str = "",
        password: str | Secret = "",
        port: int = 0,
    ) -> None:
        """COM_REGISTER_SLAVE (what shows in SHOW SLAVE HOSTS / SHOW REPLICAS)."""
        await self._request(
            RegisterSlave(server_id, host=host, user=user, password=Secret(password), port=port)
        )

    async def start_dump(
        self,
        server_id: int,
        log_file: str = "",
        log_pos: int = 4,
        *,
        gtid_set: GtidSet | None = None,
        non_blocking: bool = False,
        annotate_rows: bool = False,
        flags: int = 0,
    ) -> None:
        """Start the binlog stream; then iterate over this object for raw events.

        With `gtid_set` this sends MySQL's COM_BINLOG_DUMP_GTID. MariaDB starts from a GTID
        with `SET @slave_connect_state=...` and this call with log_file="".
        """
        command: BinlogDump | BinlogDumpGtid
        if non_blocking:
            flags |= DUMP_NON_BLOCK
        if gtid_set is not None:
            if annotate_rows:
                raise ProtocolError("annotate_rows is a MariaDB COM_BINLOG_DUMP flag")
            command = BinlogDumpGtid(server_id, gtid_set, log_file, log_pos, flags)
        else:
            if annotate_rows:
                flags |= DUMP_SEND_ANNOTATE_ROWS
            command = BinlogDump(server_id, log_file, log_pos, flags)
        await self._write(self._conn.send(command))

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        """The next raw event of the dump (header to checksum); stops at the end of a
        non-blocking dump. A server ERR (e.g. 1236, binlog purged) is raised."""
        if self._dump_over:
            raise StopAsyncIteration
        if self._conn.state is not State.DUMPING:
            raise ProtocolError("no binlog dump is running", state=self._conn.state.value)
        while True:
            event = await self._next_event(timeout=None)
            if isinstance(event, BinlogEventPacket):
                return event.data
            if isinstance(event, EndOfDump | ConnectionClosed):
                self._dump_over = True
                raise StopAsyncIteration
            raise ProtocolError(f"unexpected {type(event).__name__} in the binlog stream")

    def received(self) -> bytes | None:
        """The next raw event of the dump if its bytes are already here (None: more must be
        read, through `__anext__`). Most events of a busy stream arrive many to a read;
        taking them without a timer saves a timeout per event."""
        if self._dump_over or self._conn.state is not State.DUMPING:
            return None
        try:
            event = self._conn.next_event()
        except ReplicadError as exc:
            exc.with_context(address=self.address)
            raise
        outgoing = self._conn.data_to_send()
        if outgoing:
            self._writer.write(outgoing)  # drained by the next read through `_pump`
        if isinstance(event, NeedData):
            return None
        if isinstance(event, BinlogEventPacket):
            return event.data
        if isinstance(event, EndOfDump | ConnectionClosed):
            self._dump_over = True  # `__anext__` ends the iteration
            return None
        raise ProtocolError(f"unexpected {type(event).__name__} in the binlog stream")

    async def close(self) -> None:
        """Say goodbye when idle, then close the socket. Never raises.

        A connection in a binlog dump is aborted (socket closed at once, no TLS
        close_notify): the primary streams on, a graceful TLS close waits for an answer
        that never comes, and meanwhile the half-open socket keeps the primary's dump thread
        for this server_id alive, so the next dump with the same server_id waited too."""
        if self._conn.state is State.DUMPING and not self._dump_over:
            with contextlib.suppress(Exception):
                self._writer.transport.abort()
            return
        if self._conn.state is State.READY:
            with contextlib.suppress(ReplicadError, OSError):
                self._writer.write(self._conn.send(Quit()))
        await _close_writer(self._writer)

    async def __aenter__(self) -> AsyncConnection:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ plumbing

    async def _request(self, command: Command) -> Event:
        await self._write(self._conn.send(command))
        return await self._next_event(timeout=self.read_timeout)

    async def _next_event(self, timeout: float | None) -> Event:
        try:
            if timeout is None:
                return await _pump(self._conn, self._reader, self._writer)
            async with asyncio.timeout(timeout):
                return await _pump(self._conn, self._reader, self._writer)
        except TimeoutError:
            await _close_writer(self._writer)
            raise ConnectionLostError(
                f"no reply within {timeout}s; connection closed", address=self.address
            ) from None
        except ReplicadError as exc:
            exc.with_context(address=self.address)
            raise

    async def _write(self, data: bytes) -> None:
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (OSError, ssl.SSLError) as exc:
            raise ConnectionLostError(f"write failed: {exc}", address=self.address) from exc


async def _pump(
    conn: Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> Event:
    """Feed the connection until it produces an event, writing whatever it wants to send."""
    while True:
        event = conn.next_event()
        outgoing = conn.data_to_send()
        if outgoing:
            try:
                writer.write(outgoing)
                await writer.drain()
            except (OSError, ssl.SSLError) as exc:
                raise ConnectionLostError(f"write failed: {exc}") from exc
        if not isinstance(event, NeedData):
            return event
        try:
            data = await reader.read(READ_SIZE)
        except (OSError, ssl.SSLError) as exc:
            raise ConnectionLostError(f"read failed: {exc}") from exc
        conn.receive_data(data)


async def _close_writer(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()
        # A TLS peer that never answers close_notify must not hang the caller. Shielded: the
        # close waiter is one future shared by every caller (the stream's own clean-up and
        # Pipeline.close/abandon close the same connection); a timeout or a cancelled caller
        # must not cancel it under the others, who would get CancelledError.
        try:
            await asyncio.wait_for(asyncio.shield(writer.wait_closed()), 2.0)
        except TimeoutError:
            writer.transport.abort()  # or the socket lingers through asyncio's 30 s SSL timeout


async def connect(
    host: str,
    port: int,
    user: str,
    password: Secret | str | bytes | None,
    *,
    database: str | None = None,
    tls: TlsSettings | TlsMode | str | None = None,
    connect_timeout: float = 10.0,
    read_timeout: float | None = None,
    server_public_key: bytes | Path | str | None = None,
    deprecate_eof: bool = True,
    connect_attrs: dict[str, str] | None = None,
) -> AsyncConnection:
    """Open, optionally upgrade to TLS, and log in. `connect_timeout` covers all of it.

    server_public_key: PEM bytes, or the path of a PEM file, of the server's RSA key for
    caching_sha2_password without TLS (otherwise the key is requested from the server).
    """
    address = f"{host}:{port}"
    account = f"{user}@{host}"
    tls_config = _tls_config(tls)
    ssl_context = build_ssl_context(tls_config)
    if isinstance(server_public_key, Path | str):
        server_public_key = load_public_key(server_public_key)
    attrs = connect_attrs
    if attrs is None:
        attrs = {"_client_name": "replicad", "_client_version": _client_version()}
        attrs["program_name"] = "replicad"
    conn = Connection(
        user,
        Secret(password),
        database=database,
        tls=ssl_context is not None,
        tls_optional=tls_config.mode is TlsMode.PREFERRED,
        server_public_key=server_public_key,
        connect_attrs=attrs,
        deprecate_eof=deprecate_eof,
    )
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(connect_timeout):
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError as exc:
                # asyncio words a refusal as "Connect call failed"; say what it is.
                detail = (
                    "connection refused"
                    if isinstance(exc, ConnectionRefusedError)
                    else exc.strerror or str(exc)
                )
                raise ConnectError(
                    f"cannot connect to MySQL server at {address}: {detail}", address=address
                ) from exc
            while True:
                event = await _pump(conn, reader, writer)
                if isinstance(event, Ready):
                    return AsyncConnection(
                        conn, reader, writer, event, address=address, read_timeout=read_timeout
                    )
                if isinstance(event, TlsUpgradeNeeded):
                    assert ssl_context is not None
                    try:
                        await writer.start_tls(
                            ssl_context, server_hostname=tls_config.server_hostname or host
                        )
                    except ssl.SSLCertVerificationError as exc:
                        raise TlsError(
                            f"server certificate rejected: {exc.verify_message}",
                            address=address,
                            mode=tls_config.mode.value,
                        ) from exc
                    except (ssl.SSLError, OSError) as exc:
                        raise TlsError(
                            f"TLS handshake failed: {exc}",
                            address=address,
                            mode=tls_config.mode.value,
                        ) from exc
                    conn.tls_established()
                    continue
                raise ProtocolError(f"unexpected {type(event).__name__} during login")
    except TimeoutError:
        if writer is not None:
            await _close_writer(writer)
        raise ConnectError(
            f"timed out after {connect_timeout}s connecting to MySQL server at {address}",
            address=address,
        ) from None
    except AuthError as exc:
        if writer is not None:
            await _close_writer(writer)
        exc.with_context(account=account, address=address)
        raise
    except ReplicadError as exc:
        if writer is not None:
            await _close_writer(writer)
        exc.with_context(address=address)
        raise
    except BaseException:
        if writer is not None:
            await _close_writer(writer)
        raise
