"""The sans-IO client connection: a state machine fed with bytes that yields events.

The I/O layer (transport.py, or a test playing the server) does only this:

    conn.receive_data(bytes_from_socket)      # b"" when the peer closed
    while (event := conn.next_event()) is not NEED_DATA:
        ...                                   # react to the event
        socket.write(conn.data_to_send())     # replies the handshake/auth produced
    socket.write(conn.send(Query("SELECT 1")))

`data_to_send()` exists because, unlike HTTP, the login is driven by the server: the greeting
and every auth challenge produce client bytes without the user sending a command.

States: HANDSHAKE (waiting for the greeting) → [TLS_UPGRADE (SSLRequest sent; the I/O layer
must start TLS and call `tls_established()`)] → AUTH → READY ⇄ COMMAND (a query, ping or
registration in flight) / DUMPING (binlog stream) → CLOSED. A dump ends the session: the server
closes the connection after the last event of a non-blocking dump or after an ERR.

Errors are raised from `next_event()` as replicad errors. A ServerError answering a command
leaves the connection READY; anything else makes it unusable (state CLOSED).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from replicad.errors import (
    AuthError,
    ConnectionLostError,
    ProtocolError,
    ReplicadError,
    ServerError,
    TlsError,
)
from replicad.protocol.auth import (
    AuthPlugin,
    CachingSha2Password,
    NativePassword,
    Secret,
    make_plugin,
)
from replicad.protocol.commands import (
    Command,
    Query,
    Quit,
    ResultSet,
    ResultSetReader,
)
from replicad.protocol.handshake import (
    Capability,
    Handshake,
    build_handshake_response,
    build_ssl_request,
    negotiate_capabilities,
    parse_handshake,
)
from replicad.protocol.packets import (
    DEFAULT_MAX_PAYLOAD,
    EOF_HEADER,
    ERR_HEADER,
    LOCAL_INFILE_HEADER,
    OK_HEADER,
    OkPacket,
    PacketReader,
    frame,
    parse_err,
    parse_ok,
    read_lenenc_int,
    read_nul_bytes,
)

AUTH_MORE_DATA = 0x01
AUTH_SWITCH = 0xFE

DEFAULT_CONNECT_ATTRS = {"_client_name": "replicad", "program_name": "replicad"}


class State(enum.Enum):
    HANDSHAKE = "handshake"
    TLS_UPGRADE = "tls-upgrade"
    AUTH = "auth"
    READY = "ready"
    COMMAND = "command"
    DUMPING = "dumping"
    CLOSED = "closed"


# ---------------------------------------------------------------------- events


class NeedData:
    """Sentinel: `next_event()` needs more bytes."""

    _instance: NeedData | None = None

    def __new__(cls) -> NeedData:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData()


@dataclass(frozen=True, slots=True)
class TlsUpgradeNeeded:
    """Write `data_to_send()` (the SSLRequest), start TLS, then call `tls_established()`."""


@dataclass(frozen=True, slots=True)
class Ready:
    """Logged in. `auth_plugin` is the plugin that finally succeeded."""

    server: Handshake
    auth_plugin: str
    tls: bool
    capabilities: int

    @property
    def server_version(self) -> str:
        return self.server.server_version

    @property
    def mariadb(self) -> bool:
        return self.server.mariadb


@dataclass(frozen=True, slots=True)
class Ok:
    affected_rows: int
    last_insert_id: int
    status_flags: int
    warnings: int
    info: str

    @classmethod
    def from_packet(cls, packet: OkPacket) -> Ok:
        return cls(
            packet.affected_rows,
            packet.last_insert_id,
            packet.status_flags,
            packet.warnings,
            packet.info,
        )


@dataclass(frozen=True, slots=True)
class BinlogEventPacket:
    """One binlog event exactly as the server sent it (header, body and checksum), without
    the packet's leading 0x00 and reassembled if it spanned several packets."""

    data: bytes = field(repr=False)

    def __repr__(self) -> str:
        return f"BinlogEventPacket({len(self.data)} bytes)"


@dataclass(frozen=True, slots=True)
class EndOfDump:
    """A non-blocking dump reached the end of the binlog; the server closes the connection."""


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed the connection where that was expected (after COM_QUIT or a dump)."""


Event = TlsUpgradeNeeded | Ready | ResultSet | Ok | BinlogEventPacket | EndOfDump | ConnectionClosed

_FATAL_PARSE_ERRORS = (IndexError, struct.error, ValueError, UnicodeDecodeError, OverflowError)


class Connection:
    """Client side of the MySQL protocol, from greeting to binlog stream, without I/O."""

    def __init__(
        self,
        user: str,
        password: Secret | str | bytes | None = None,
        *,
        database: str | None = None,
        tls: bool = False,
        tls_optional: bool = False,
        server_public_key: bytes | None = None,
        connect_attrs: dict[str, str] | None = None,
        deprecate_eof: bool = True,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
    ) -> None:
        self.user = user
        self._password = Secret(password)
        self.database = database
        self.tls_requested = tls
        self.tls_optional = tls_optional  # "preferred": carry on in clear text if not offered
        self.server_public_key = server_public_key
        self.connect_attrs = dict(DEFAULT_CONNECT_ATTRS if connect_attrs is None else connect_attrs)
        self.deprecate_eof_requested = deprecate_eof
        self._reader = PacketReader(max_payload=max_payload)
        self._outbox = bytearray()
        self._state = State.HANDSHAKE
        self._tls_active = False
        self._eof = False
        self._close_expected = False
        self._closed_reported = False
        self._fatal: ReplicadError | None = None
        self.handshake: Handshake | None = None
        self.capabilities = 0
        self._plugin: AuthPlugin | None = None
        self._switched = False
        self._pending_kind: str | None = None
        self._pending_packets = False  # Query.packets of the command in flight
        self._result: ResultSetReader | None = None

    def __repr__(self) -> str:
        return f"Connection(user={self.user!r}, state={self._state.value})"

    # ------------------------------------------------------------------ public API

    @property
    def state(self) -> State:
        return self._state

    @property
    def deprecate_eof(self) -> bool:
        return bool(self.capabilities & Capability.DEPRECATE_EOF)

    def receive_data(self, data: bytes) -> None:
        """Bytes from the server; b"" means the server closed the connection."""
        if self._eof:
            if data:
                raise ProtocolError("data received after the end of the stream")
            return
        if not data:
            self._eof = True
            return
        self._reader.feed(data)

    def data_to_send(self) -> bytes:
        """Bytes the connection produced on its own (handshake and auth replies)."""
        out = bytes(self._outbox)
        self._outbox.clear()
        return out

    def send(self, command: Command) -> bytes:
        """Encode a command and switch to waiting for its reply; returns the bytes to write."""
        if self._state is not State.READY:
            raise ProtocolError(
                f"cannot send {type(command).__name__} while the connection is {self._state.value}",
                state=self._state.value,
            )
        payload = command.encode()
        data, self._reader.expected_sequence = frame(payload, 0)
        kind = command.kind
        if isinstance(command, Quit):
            self._state = State.CLOSED
            self._close_expected = True
        elif kind == "dump":
            self._state = State.DUMPING
        else:
            self._state = State.COMMAND
            self._pending_kind = kind
            self._pending_packets = isinstance(command, Query) and command.packets
        return data

    def tls_established(self) -> None:
        """The I/O layer finished the TLS handshake: send the real handshake response."""
        if self._state is not State.TLS_UPGRADE:
            raise ProtocolError(
                f"tls_established() called while {self._state.value}", state=self._state.value
            )
        if self._reader.buffered:
            # Nothing may arrive in clear between SSLRequest and TLS; bytes that did could
            # be injected by someone on the path.
            raise self._die(ProtocolError("server sent clear-text data during the TLS upgrade"))
        self._tls_active = True
        if self._plugin is not None:
            self._plugin.secure_channel = True
        self._state = State.AUTH
        try:
            self._queue_handshake_response()
        except ReplicadError as exc:
            raise self._die(exc) from None

    def next_event(self) -> Event | NeedData:
        while True:
            if self._fatal is not None:
                raise ProtocolError(
                    f"connection unusable after an earlier error: {self._fatal.reason}"
                )
            try:
                rows = None if self._result is None else self._result.row_packets
                if rows is not None:
                    self._reader.take_rows(rows)
                payload = self._reader.read_payload()
            except ReplicadError as exc:
                raise self._die(exc) from None
            if payload is None:
                return self._no_packet()
            if not payload:
                raise self._die(ProtocolError("empty packet", state=self._state.value))
            try:
                event = self._handle(payload)
            except ServerError as exc:
                if self._state is State.COMMAND:
                    # The ERR was the whole reply: the session itself is fine.
                    self._finish_command()
                    raise
                raise self._die(exc) from None
            except ReplicadError as exc:
                raise self._die(exc) from None
            except _FATAL_PARSE_ERRORS as exc:
                raise self._die(
                    ProtocolError(
                        f"packet does not match its layout: {exc}", state=self._state.value
                    )
                ) from exc
            if event is not None:
                return event

    # ------------------------------------------------------------------ internals

    def _die(self, exc: ReplicadError) -> ReplicadError:
        self._state = State.CLOSED
        self._fatal = exc
        return exc

    def _no_packet(self) -> Event | NeedData:
        if not self._eof:
            return NEED_DATA
        if self._close_expected and self._state is State.CLOSED:
            if self._closed_reported:
                return NEED_DATA
            self._closed_reported = True
            return ConnectionClosed()
        partial = self._reader.buffered
        raise self._die(
            ConnectionLostError(
                f"server closed the connection while {self._state.value}",
                buffered_bytes=partial or None,
            )
        )

    def _write(self, payload: bytes) -> None:
        data, self._reader.expected_sequence = frame(payload, self._reader.expected_sequence or 0)
        self._outbox += data

    def _handle(self, payload: bytes) -> Event | None:
        state = self._state
        if state is State.HANDSHAKE:
            return self._on_greeting(payload)
        if state is State.AUTH:
            return self._on_auth(payload)
        if state is State.COMMAND:
            return self._on_reply(payload)
        if state is State.DUMPING:
            return self._on_dump(payload)
        if state is State.READY:
            if payload[0] == ERR_HEADER:
                # Servers announce some disconnects (idle timeout, KILL) with an ERR.
                self._reader.expected_sequence = None
                raise parse_err(payload, state="idle")
            raise ProtocolError(f"unsolicited packet {payload[0]:#04x} while idle")
        if state is State.CLOSED:
            return None  # whatever the server says after COM_QUIT or a dump is moot
        raise ProtocolError(f"no packet expected while {state.value}", state=state.value)

    # -- login

    def _on_greeting(self, payload: bytes) -> Event | None:
        if payload[0] == ERR_HEADER:
            # e.g. "too many connections" or "host is blocked", sent instead of a greeting.
            raise parse_err(payload, state="greeting")
        server = parse_handshake(payload)
        self.handshake = server
        self.capabilities = negotiate_capabilities(
            server,
            database=self.database is not None,
            tls=self.tls_requested,
            deprecate_eof=self.deprecate_eof_requested,
        )
        if self.tls_requested and not server.has(Capability.SSL) and self.tls_optional:
            self.tls_requested = False
            self.capabilities = negotiate_capabilities(
                server,
                database=self.database is not None,
                tls=False,
                deprecate_eof=self.deprecate_eof_requested,
            )
        if self.tls_requested and not server.has(Capability.SSL):
            raise TlsError(
                "TLS is required but the server does not offer it (no CLIENT_SSL)",
                server_version=server.server_version,
            )
        # An account may use another plugin than the server default; the server then sends
        # an auth switch, so an unknown default is no reason to fail yet.
        # Only the scramble-based plugins can answer the greeting's 20-byte challenge.
        name = server.auth_plugin
        if name not in (NativePassword.name, CachingSha2Password.name):
            name = NativePassword.name
        self._plugin = make_plugin(
            name,
            self._password,
            secure_channel=False,  # becomes True in tls_established(), not before
            server_public_key=self.server_public_key,
            user=self.user,
        )
        if self.tls_requested:
            self._write(build_ssl_request(self.capabilities))
            self._state = State.TLS_UPGRADE
            return TlsUpgradeNeeded()
        self._state = State.AUTH
        self._queue_handshake_response()
        return None

    def _queue_handshake_response(self) -> None:
        assert self.handshake is not None and self._plugin is not None
        auth = self._plugin.start(self.handshake.auth_data)
        self._write(
            build_handshake_response(
                capabilities=self.capabilities,
                user=self.user,
                auth_response=auth,
                auth_plugin=self._plugin.name,
                database=self.database,
                connect_attrs=self.connect_attrs,
            )
        )

    def _on_auth(self, payload: bytes) -> Event | None:
        assert self._plugin is not None and self.handshake is not None
        header = payload[0]
        if header == OK_HEADER:
            parse_ok(payload)
            self._state = State.READY
            self._reader.expected_sequence = None
            return Ready(self.handshake, self._plugin.name, self._tls_active, self.capabilities)
        if header == ERR_HEADER:
            err = parse_err(payload)
            raise AuthError(
                f"login failed: {err.message}",
                code=err.code,
                sqlstate=err.sqlstate,
                user=self.user,
                plugin=self._plugin.name,
            )
        if header == AUTH_SWITCH:
            if len(payload) == 1:
                raise AuthError(
                    "server asks for the pre-4.1 mysql_old_password method, which is insecure "
                    "and not supported",
                    user=self.user,
                )
            if self._switched:
                raise ProtocolError("server switched the authentication plugin twice")
            self._switched = True
            raw_name, pos = read_nul_bytes(payload, 1, "auth switch plugin name")
            name = raw_name.decode("ascii", "replace")
            self._plugin = make_plugin(
                name,
                self._password,
                secure_channel=self._tls_active,
                server_public_key=self.server_public_key,
                user=self.user,
            )
            # Switch data may carry a trailing NUL; the plugins take what they need.
            self._write(self._plugin.start(bytes(payload[pos:])))
            return None
        if header == AUTH_MORE_DATA:
            reply = self._plugin.more_data(bytes(payload[1:]))
            if reply is not None:
                self._write(reply)
            return None
        raise ProtocolError(f"unexpected packet {header:#04x} during authentication")

    # -- commands

    def _on_reply(self, payload: bytes) -> Event | None:
        if self._result is not None:
            result = self._result.feed(payload)
            if result is None:
                return None
            self._finish_command()
            return result
        header = payload[0]
        if header == ERR_HEADER:
            raise parse_err(payload, command=self._pending_kind)
        if header == OK_HEADER:
            ok = Ok.from_packet(parse_ok(payload))
            self._finish_command()
            return ok
        if self._pending_kind != "query":
            raise ProtocolError(
                f"unexpected packet {header:#04x} in reply to a {self._pending_kind} command"
            )
        if header == LOCAL_INFILE_HEADER:
            # Never requested (no CLIENT_LOCAL_FILES); a server asking anyway is hostile.
            raise ProtocolError("server requested LOAD DATA LOCAL INFILE, which is refused")
        count, pos = read_lenenc_int(payload, 0)
        if pos != len(payload):
            raise ProtocolError("column count packet has trailing bytes")
        self._result = ResultSetReader(
            count,
            deprecate_eof=self.deprecate_eof,
            packets=self._pending_packets,
        )
        return None

    def _finish_command(self) -> None:
        self._result = None
        self._pending_kind = None
        self._state = State.READY
        self._reader.expected_sequence = None

    # -- binlog stream

    def _on_dump(self, payload: bytes) -> Event | None:
        header = payload[0]
        if header == OK_HEADER:
            return BinlogEventPacket(payload[1:])
        if header == ERR_HEADER:
            self._state = State.CLOSED
            self._close_expected = True
            raise parse_err(payload, state="dumping")
        if header == EOF_HEADER:
            self._state = State.CLOSED
            self._close_expected = True
            return EndOfDump()
        raise ProtocolError(f"unexpected packet {header:#04x} in the binlog stream")
