"""The sans-IO Connection against a scripted MySQL 8 server: pure bytes, no sockets.

`ScriptedServer` plays the server side packet by packet from the documented layouts (greeting,
AuthMoreData 0x01, AuthSwitch 0xFE, OK, ERR, result sets, binlog stream packets) and checks the
sequence ids of what the client sends. The fuzz tests feed random bytes and require that only
replicad errors come out.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.signing import VerifyKey

from replicad.errors import (
    AuthError,
    ConnectionLostError,
    ProtocolError,
    ReplicadError,
    ServerError,
    TlsError,
)
from replicad.protocol.auth import caching_sha2_scramble, ed25519_public_key
from replicad.protocol.commands import BinlogDump, Ping, Query, Quit, ResultSet
from replicad.protocol.connection import (
    NEED_DATA,
    BinlogEventPacket,
    Connection,
    ConnectionClosed,
    EndOfDump,
    Ok,
    Ready,
    State,
    TlsUpgradeNeeded,
)
from replicad.protocol.handshake import Capability
from replicad.protocol.packets import MAX_CHUNK, PacketReader, frame, write_lenenc_bytes
from tests.helpers.server_packets import MYSQL8_CAPS, OK, PASSWORD, SCRAMBLE, greeting

pytestmark = pytest.mark.unit


ERR_1045 = b"\xff\x15\x04#28000Access denied for user 'repl'@'10.0.0.9' (using password: YES)"


class ScriptedServer:
    """The server end of one connection: frames what it says, unframes what the client says."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.seq = 0
        self.inbox = PacketReader()

    def say(self, payload: bytes) -> None:
        data, self.seq = frame(payload, self.seq)
        self.inbox.expected_sequence = self.seq
        self.conn.receive_data(data)

    def hear(self, data: bytes | None = None) -> bytes:
        """The next client packet (from `data`, or what the connection queued)."""
        self.inbox.feed(self.conn.data_to_send() if data is None else data)
        payload = self.inbox.read_payload()
        assert payload is not None, "client sent nothing"
        self.seq = self.inbox.expected_sequence or 0
        return payload

    def command(self, data: bytes) -> bytes:
        self.inbox.expected_sequence = 0
        return self.hear(data)

    def events(self) -> list[object]:
        out: list[object] = []
        while (event := self.conn.next_event()) is not NEED_DATA:
            out.append(event)
        return out


@dataclass(frozen=True)
class Response:
    caps: int
    user: str
    auth: bytes
    plugin: str


def parse_response(payload: bytes) -> Response:
    """HandshakeResponse41 fields, read with the documented layout."""
    caps, _max, _charset = struct.unpack_from("<IIB", payload, 0)
    pos = 32
    end = payload.index(b"\0", pos)
    user = payload[pos:end].decode()
    pos = end + 1
    assert caps & Capability.PLUGIN_AUTH_LENENC_CLIENT_DATA
    length = payload[pos]
    auth = payload[pos + 1 : pos + 1 + length]
    pos += 1 + length
    if caps & Capability.CONNECT_WITH_DB:
        pos = payload.index(b"\0", pos) + 1
    end = payload.index(b"\0", pos)
    plugin = payload[pos:end].decode()
    return Response(caps, user, auth, plugin)


def login(conn: Connection, server: ScriptedServer) -> Ready:
    server.say(greeting())
    assert server.events() == []
    response = parse_response(server.hear())
    assert response.auth == caching_sha2_scramble(PASSWORD.encode(), SCRAMBLE)
    server.say(b"\x01\x03")
    assert server.events() == []
    server.say(OK)
    (ready,) = server.events()
    assert isinstance(ready, Ready)
    return ready


@pytest.fixture
def conn() -> Connection:
    return Connection("repl", PASSWORD)


@pytest.fixture
def server(conn: Connection) -> ScriptedServer:
    return ScriptedServer(conn)


# ---------------------------------------------------------------------- caching_sha2


def test_fast_auth(conn: Connection, server: ScriptedServer) -> None:
    assert conn.state is State.HANDSHAKE
    server.say(greeting())
    assert server.events() == []
    assert conn.state is State.AUTH
    response = parse_response(server.hear())
    assert response.user == "repl"
    assert response.plugin == "caching_sha2_password"
    assert response.auth == caching_sha2_scramble(PASSWORD.encode(), SCRAMBLE)
    assert not response.caps & Capability.SSL
    server.say(b"\x01\x03")  # fast auth success: nothing to send, wait for OK
    assert server.events() == []
    assert conn.data_to_send() == b""
    server.say(OK)
    (ready,) = server.events()
    assert isinstance(ready, Ready)
    assert ready.auth_plugin == "caching_sha2_password" and not ready.tls
    assert ready.server_version == "8.0.36" and not ready.mariadb
    assert conn.state is State.READY


def test_full_auth_over_tls_sends_the_password_after_the_upgrade() -> None:
    conn = Connection("repl", PASSWORD, tls=True)
    server = ScriptedServer(conn)
    server.say(greeting())
    (event,) = server.events()
    assert isinstance(event, TlsUpgradeNeeded)
    assert conn.state is State.TLS_UPGRADE
    ssl_request = server.hear()
    assert len(ssl_request) == 32
    assert struct.unpack_from("<I", ssl_request)[0] & Capability.SSL
    with pytest.raises(ProtocolError):
        conn.send(Ping())
    # ... the I/O layer runs the TLS handshake here; from now on the bytes are inside TLS.
    conn.tls_established()
    response = parse_response(server.hear())
    assert response.caps & Capability.SSL
    assert server.seq == 3  # greeting 0, SSLRequest 1, response 2
    server.say(b"\x01\x04")  # perform full authentication
    assert server.events() == []
    assert server.hear() == PASSWORD.encode() + b"\0"
    server.say(OK)
    (ready,) = server.events()
    assert isinstance(ready, Ready) and ready.tls


def test_tls_required_but_not_offered() -> None:
    conn = Connection("repl", PASSWORD, tls=True)
    server = ScriptedServer(conn)
    server.say(greeting(caps=MYSQL8_CAPS & ~Capability.SSL))
    with pytest.raises(TlsError, match="does not offer"):
        conn.next_event()
    assert conn.state is State.CLOSED
    assert conn.data_to_send() == b""  # nothing, not even the password, went out


def test_tls_preferred_but_not_offered_continues_in_clear_text() -> None:
    conn = Connection("repl", PASSWORD, tls=True, tls_optional=True)
    server = ScriptedServer(conn)
    server.say(greeting(caps=MYSQL8_CAPS & ~Capability.SSL))
    assert server.events() == []
    response = parse_response(server.hear())
    assert not response.caps & Capability.SSL, "no SSLRequest: the full response went out"
    assert server.seq == 2
    server.say(b"\x01\x03")  # fast auth success
    server.say(OK)
    (ready,) = server.events()
    assert isinstance(ready, Ready) and not ready.tls


def test_clear_text_during_tls_upgrade_is_refused() -> None:
    conn = Connection("repl", PASSWORD, tls=True)
    server = ScriptedServer(conn)
    server.say(greeting())
    server.events()
    server.hear()
    conn.receive_data(b"\x07\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00")
    with pytest.raises(ProtocolError, match="clear-text"):
        conn.tls_established()


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _decrypt_password(key: rsa.RSAPrivateKey, blob: bytes) -> bytes:
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    plain = key.decrypt(blob, oaep)
    return bytes(b ^ SCRAMBLE[i % 20] for i, b in enumerate(plain))


def test_full_auth_via_rsa_key_from_server(
    conn: Connection, server: ScriptedServer, rsa_key: rsa.RSAPrivateKey
) -> None:
    server.say(greeting())
    server.events()
    server.hear()
    server.say(b"\x01\x04")
    server.events()
    assert server.hear() == b"\x02"  # request the public key
    server.say(b"\x01" + _pem(rsa_key))
    server.events()
    blob = server.hear()
    assert PASSWORD.encode() not in blob
    assert _decrypt_password(rsa_key, blob) == PASSWORD.encode() + b"\0"
    server.say(OK)
    assert isinstance(server.events()[0], Ready)


def test_full_auth_via_configured_rsa_key(rsa_key: rsa.RSAPrivateKey) -> None:
    conn = Connection("repl", PASSWORD, server_public_key=_pem(rsa_key))
    server = ScriptedServer(conn)
    server.say(greeting())
    server.events()
    server.hear()
    server.say(b"\x01\x04")
    server.events()
    # No round trip for the key: the encrypted password comes at once.
    assert _decrypt_password(rsa_key, server.hear()) == PASSWORD.encode() + b"\0"


# ---------------------------------------------------------------------- switch and errors


def test_auth_switch_to_native_password(conn: Connection, server: ScriptedServer) -> None:
    server.say(greeting())
    server.events()
    server.hear()
    new_nonce = bytes(range(100, 120))
    server.say(b"\xfemysql_native_password\x00" + new_nonce + b"\x00")
    server.events()
    stage1 = hashlib.sha1(PASSWORD.encode()).digest()
    mask = hashlib.sha1(new_nonce + hashlib.sha1(stage1).digest()).digest()
    assert server.hear() == bytes(a ^ b for a, b in zip(stage1, mask, strict=True))
    server.say(OK)
    (ready,) = server.events()
    assert isinstance(ready, Ready) and ready.auth_plugin == "mysql_native_password"


def test_auth_switch_to_ed25519(conn: Connection, server: ScriptedServer) -> None:
    server.say(greeting(plugin="mysql_native_password"))
    server.events()
    server.hear()
    nonce = bytes(range(32))
    server.say(b"\xfeclient_ed25519\x00" + nonce)
    server.events()
    signature = server.hear()
    VerifyKey(ed25519_public_key(PASSWORD.encode())).verify(nonce, signature)
    server.say(OK)
    (ready,) = server.events()
    assert isinstance(ready, Ready) and ready.auth_plugin == "client_ed25519"


def test_auth_switch_to_unknown_plugin(conn: Connection, server: ScriptedServer) -> None:
    server.say(greeting())
    server.events()
    server.hear()
    server.say(b"\xfeauth_gssapi_client\x00data")
    with pytest.raises(AuthError, match="auth_gssapi_client") as info:
        conn.next_event()
    assert info.value.context["user"] == "repl"
    assert PASSWORD not in str(info.value)


def test_second_auth_switch_refused(conn: Connection, server: ScriptedServer) -> None:
    server.say(greeting())
    server.events()
    server.hear()
    server.say(b"\xfemysql_native_password\x00" + bytes(20) + b"\x00")
    server.events()
    server.hear()
    server.say(b"\xfemysql_native_password\x00" + bytes(20) + b"\x00")
    with pytest.raises(ProtocolError, match="twice"):
        conn.next_event()


def test_err_during_auth_is_an_auth_error(conn: Connection, server: ScriptedServer) -> None:
    server.say(greeting())
    server.events()
    server.hear()
    server.say(ERR_1045)
    with pytest.raises(AuthError) as info:
        conn.next_event()
    err = info.value
    assert err.code == 1045 and err.sqlstate == "28000"
    assert "Access denied" in str(err) and "repl" in str(err)
    assert PASSWORD not in str(err) and PASSWORD not in repr(err)
    assert PASSWORD not in repr(conn)
    assert conn.state is State.CLOSED
    with pytest.raises(ProtocolError, match="unusable"):
        conn.next_event()


def test_old_password_switch_refused(conn: Connection, server: ScriptedServer) -> None:
    server.say(greeting())
    server.events()
    server.hear()
    server.say(b"\xfe")
    with pytest.raises(AuthError, match="mysql_old_password"):
        conn.next_event()


def test_err_instead_of_greeting(conn: Connection, server: ScriptedServer) -> None:
    server.say(b"\xff\x10\x04Too many connections")
    with pytest.raises(ServerError) as info:
        conn.next_event()
    assert info.value.code == 1040 and info.value.sqlstate is None


def test_server_closes_during_auth(conn: Connection, server: ScriptedServer) -> None:
    server.say(greeting())
    server.events()
    conn.receive_data(b"\x07\x00\x00")  # half a header, then EOF
    conn.receive_data(b"")
    with pytest.raises(ConnectionLostError, match="auth") as info:
        conn.next_event()
    assert info.value.context["buffered_bytes"] == 3


def test_wrong_sequence_from_server(conn: Connection, server: ScriptedServer) -> None:
    server.say(greeting())
    server.events()
    server.hear()
    conn.receive_data(frame(OK, 9)[0])
    with pytest.raises(ProtocolError, match="sequence id 9, expected 2"):
        conn.next_event()


@pytest.mark.parametrize("default", ["auth_gssapi_client", "client_ed25519"])
def test_other_default_plugins_start_with_native(conn: Connection, default: str) -> None:
    # Neither can answer the greeting's 20-byte scramble; the server will switch if needed.
    server = ScriptedServer(conn)
    server.say(greeting(plugin=default))
    server.events()
    assert parse_response(server.hear()).plugin == "mysql_native_password"


# ---------------------------------------------------------------------- commands


def column_def(name: str) -> bytes:
    return (
        b"".join(write_lenenc_bytes(x) for x in (b"def", b"", b"", b"", name.encode(), b""))
        + b"\x0c"
        + struct.pack("<HIBHB", 45, 80, 0xFD, 0, 0)
        + b"\x00\x00"
    )


def test_query_with_result_set(conn: Connection, server: ScriptedServer) -> None:
    ready = login(conn, server)
    assert ready.capabilities & Capability.DEPRECATE_EOF
    sent = server.command(conn.send(Query("SELECT @@version, NULL")))
    assert sent == b"\x03SELECT @@version, NULL"
    assert conn.state is State.COMMAND
    server.say(b"\x02")
    server.say(column_def("@@version"))
    server.say(column_def("NULL"))
    server.say(b"\x068.0.36\xfb")
    assert server.events() == []
    server.say(b"\xfe\x00\x00\x02\x00\x00\x00")
    (result,) = server.events()
    assert isinstance(result, ResultSet)
    assert result.column_names == ["@@version", "NULL"]
    assert result.rows == [("8.0.36", None)]
    assert conn.state is State.READY


def test_query_error_keeps_the_connection(conn: Connection, server: ScriptedServer) -> None:
    login(conn, server)
    server.command(conn.send(Query("SELEC 1")))
    server.say(b"\xff\x28\x04#42000You have an error in your SQL syntax")
    with pytest.raises(ServerError) as info:
        conn.next_event()
    assert info.value.code == 1064
    assert conn.state is State.READY
    server.command(conn.send(Ping()))
    server.say(OK)
    assert isinstance(server.events()[0], Ok)


def test_send_while_busy_is_refused(conn: Connection, server: ScriptedServer) -> None:
    with pytest.raises(ProtocolError, match="handshake"):
        conn.send(Ping())
    login(conn, server)
    conn.send(Ping())
    with pytest.raises(ProtocolError, match="command"):
        conn.send(Ping())


def test_local_infile_request_refused(conn: Connection, server: ScriptedServer) -> None:
    login(conn, server)
    server.command(conn.send(Query("LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE t")))
    server.say(b"\xfb/etc/passwd")
    with pytest.raises(ProtocolError, match="LOCAL INFILE"):
        conn.next_event()


def test_unsolicited_err_while_idle(conn: Connection, server: ScriptedServer) -> None:
    login(conn, server)
    conn.receive_data(frame(b"\xff\xbf\x0f#HY000The client was disconnected", 0)[0])
    with pytest.raises(ServerError) as info:
        conn.next_event()
    assert info.value.code == 4031
    assert conn.state is State.CLOSED


def test_quit_then_close(conn: Connection, server: ScriptedServer) -> None:
    login(conn, server)
    assert server.command(conn.send(Quit())) == b"\x01"
    assert conn.state is State.CLOSED
    conn.receive_data(b"")
    assert isinstance(conn.next_event(), ConnectionClosed)
    assert conn.next_event() is NEED_DATA


def test_idle_close_is_a_lost_connection(conn: Connection, server: ScriptedServer) -> None:
    login(conn, server)
    conn.receive_data(b"")
    with pytest.raises(ConnectionLostError, match="ready"):
        conn.next_event()


# ---------------------------------------------------------------------- binlog stream


def test_binlog_dump_stream(conn: Connection, server: ScriptedServer) -> None:
    login(conn, server)
    sent = server.command(conn.send(BinlogDump(42, "bin.000001", 4, flags=1)))
    assert sent[0] == 0x12
    assert conn.state is State.DUMPING
    small = b"E" * 60
    huge = bytes(range(256)) * (MAX_CHUNK // 256 + 100)  # > 16 MiB: two chunks
    server.say(b"\x00" + small)
    server.say(b"\x00" + huge)
    events = server.events()
    assert events == [BinlogEventPacket(small), BinlogEventPacket(huge)]
    assert "bytes" in repr(events[1]) and len(repr(events[1])) < 80
    server.say(b"\xfe\x00\x00\x02\x00")
    assert server.events() == [EndOfDump()]
    assert conn.state is State.CLOSED
    conn.receive_data(b"")
    assert server.events() == [ConnectionClosed()]


def test_binlog_dump_error(conn: Connection, server: ScriptedServer) -> None:
    login(conn, server)
    server.command(conn.send(BinlogDump(42, "bin.000001", 4)))
    server.say(b"\x00" + b"E" * 30)
    server.say(b"\xff\xd4\x04#HY000Could not find first log file name in binary log index file")
    assert isinstance(conn.next_event(), BinlogEventPacket)
    with pytest.raises(ServerError) as info:
        conn.next_event()
    assert info.value.code == 1236
    assert conn.state is State.CLOSED


def test_dump_stream_sequence_wraps(conn: Connection, server: ScriptedServer) -> None:
    login(conn, server)
    server.command(conn.send(BinlogDump(42, "f", 4)))
    for i in range(600):
        server.say(b"\x00" + i.to_bytes(2, "little"))
    events = server.events()
    assert len(events) == 600
    assert events[-1] == BinlogEventPacket((599).to_bytes(2, "little"))


def test_garbage_in_dump_stream(conn: Connection, server: ScriptedServer) -> None:
    login(conn, server)
    server.command(conn.send(BinlogDump(42, "f", 4)))
    server.say(b"\x07junk")
    with pytest.raises(ProtocolError, match="0x07"):
        conn.next_event()


# ---------------------------------------------------------------------- fuzz


def _drain(conn: Connection) -> None:
    for _ in range(1000):
        if conn.next_event() is NEED_DATA:
            return
        conn.data_to_send()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=200), max_size=6), st.booleans())
def test_random_bytes_raise_only_replicad_errors(chunks: list[bytes], tls: bool) -> None:
    conn = Connection("repl", PASSWORD, tls=tls)
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            _drain(conn)
    except ReplicadError:
        pass


PACKET = st.builds(
    lambda body, seq: frame(body, seq)[0],
    st.one_of(
        st.binary(max_size=120),
        st.sampled_from([b"\x01\x03", b"\x01\x04", b"\xfe", OK, ERR_1045]).map(lambda b: b),
        st.binary(max_size=40).map(lambda b: b"\xfe" + b),
        st.binary(max_size=40).map(lambda b: b"\x01" + b),
    ),
    st.integers(1, 4),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PACKET, max_size=6), st.sampled_from(["caching_sha2_password", "other"]))
def test_random_packets_after_a_valid_greeting(packets: list[bytes], plugin: str) -> None:
    conn = Connection("repl", PASSWORD)
    conn.receive_data(frame(greeting(plugin=plugin), 0)[0])
    try:
        _drain(conn)
        for packet in packets:
            conn.receive_data(packet)
            _drain(conn)
        conn.receive_data(b"")
        _drain(conn)
    except ReplicadError as exc:
        assert PASSWORD not in str(exc)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_random_replies_to_commands(bodies: list[bytes]) -> None:
    conn = Connection("repl", PASSWORD)
    server = ScriptedServer(conn)
    login(conn, server)
    server.command(conn.send(Query("SELECT 1")))
    try:
        for body in bodies:
            server.say(body)
            _drain(conn)
    except ReplicadError:
        pass


def _rows_reply(conn: Connection, server: ScriptedServer, payloads: list[bytes]) -> None:
    """A two-column result set in packets mode, its rows and final OK in one receive."""
    login(conn, server)
    server.command(conn.send(Query("SELECT a, b FROM t", packets=True)))
    server.say(b"\x02")
    server.say(column_def("a"))
    server.say(column_def("b"))
    data = bytearray()
    for payload in payloads:
        framed, server.seq = frame(payload, server.seq)
        data += framed
    conn.receive_data(bytes(data))


def test_rows_in_packets_mode_arrive_whole_and_in_order(
    conn: Connection, server: ScriptedServer
) -> None:
    """Rows taken in bulk (PacketReader.take_rows) and rows it leaves to the one-by-one
    reader (a first value of 16 MiB or more starts with 0xFE and spans two chunks) come out
    as the same list of payloads, in order."""
    huge = b"\xfe" + (MAX_CHUNK + 5).to_bytes(8, "little") + b"x" * (MAX_CHUNK + 5) + b"\xfb"
    rows = [b"\x011\x012", b"\xfb\x01y", huge, b"\xfc\x2c\x01" + b"z" * 300 + b"\xfb"]
    rows += [b"\x01%c\xfb" % (48 + i % 10) for i in range(1000)]
    _rows_reply(conn, server, [*rows, b"\xfe\x00\x00\x02\x00\x00\x00"])
    (result,) = server.events()
    assert isinstance(result, ResultSet)
    assert result.packets == rows and result.rows == []
    assert conn.state is State.READY


def test_an_error_or_a_wrong_sequence_among_bulk_rows_is_raised(
    conn: Connection, server: ScriptedServer
) -> None:
    _rows_reply(conn, server, [b"\x011\x012", b"\xff\x28\x04#HY000Query execution was interrupted"])
    with pytest.raises(ServerError, match="interrupted"):
        server.events()
    other = Connection("repl", PASSWORD)
    scripted = ScriptedServer(other)
    _rows_reply(other, scripted, [b"\x011\x012"])
    other.receive_data(b"\x04\x00\x00\x09\x011\x012")  # sequence id 9, not the next one
    with pytest.raises(ProtocolError, match="sequence id"):
        scripted.events()
