"""The asyncio transport against a scripted server on a loopback socket: the real TLS upgrade
(`start_tls` on both ends, certificates made here with `cryptography`), each TLS mode's
verification, and the errors for refused, silent and vanishing servers.

The MariaDB test server has no certificates, so this is where TLS is exercised end to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import socket
import ssl
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from replicad.errors import AuthError, ConnectError, ConnectionLostError, TlsError
from replicad.protocol.handshake import Capability, TlsMode, TlsSettings
from replicad.protocol.packets import frame, write_lenenc_bytes
from replicad.protocol.transport import connect
from tests.helpers.server_packets import OK, PASSWORD, greeting

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------------- certificates


@dataclass
class Pki:
    ca: Path
    cert: Path
    key: Path
    other_ca: Path
    wrong_name_cert: Path
    wrong_name_key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, names: list[x509.GeneralName]
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("mysql-server"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    out = tmp_path_factory.mktemp("pki")
    ca, ca_key = _ca("replicad test CA")
    other, _ = _ca("some other CA")
    good, good_key = _leaf(
        ca,
        ca_key,
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    wrong, wrong_key = _leaf(ca, ca_key, [x509.DNSName("db.example.invalid")])
    pem = serialization.Encoding.PEM
    (out / "ca.pem").write_bytes(ca.public_bytes(pem))
    (out / "other-ca.pem").write_bytes(other.public_bytes(pem))
    (out / "server.pem").write_bytes(good.public_bytes(pem))
    (out / "wrong.pem").write_bytes(wrong.public_bytes(pem))
    _write_key(out / "server-key.pem", good_key)
    _write_key(out / "wrong-key.pem", wrong_key)
    return Pki(
        out / "ca.pem",
        out / "server.pem",
        out / "server-key.pem",
        out / "other-ca.pem",
        out / "wrong.pem",
        out / "wrong-key.pem",
    )


# ---------------------------------------------------------------------- scripted server


@dataclass
class Seen:
    """What the scripted server observed."""

    tls: bool = False
    password_packet: bytes | None = None
    commands: list[bytes] = field(default_factory=list)


class Peer:
    """Blocking socket I/O with exact reads: a packet is read as header then payload, never
    more, so the TLS ClientHello that follows the SSLRequest stays in the socket for the TLS
    layer (an asyncio StreamReader would swallow it into its buffer)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.seq = sock, 0

    def say(self, payload: bytes) -> None:
        data, self.seq = frame(payload, self.seq)
        self.sock.sendall(data)

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("client went away")
            out += chunk
        return bytes(out)

    def hear(self) -> bytes:
        header = self._exactly(4)
        assert header[3] == self.seq, (header[3], self.seq)
        self.seq = (header[3] + 1) & 0xFF
        return self._exactly(int.from_bytes(header[:3], "little"))


Handler = Callable[[socket.socket], None]


def mysql_server(
    seen: Seen,
    *,
    cert: Path | None = None,
    key: Path | None = None,
    refuse: bool = False,
) -> Handler:
    """MySQL 8 with caching_sha2_password and an empty auth cache: full authentication."""

    def handle(sock: socket.socket) -> None:
        peer = Peer(sock)
        caps = 0xDFFFFFFF if cert else 0xDFFFFFFF & ~Capability.SSL
        peer.say(greeting(caps=caps))
        first = peer.hear()
        if struct.unpack_from("<I", first)[0] & Capability.SSL:
            assert len(first) == 32
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(cert), str(key))
            peer.sock = ctx.wrap_socket(sock, server_side=True)
            seen.tls = True
            peer.hear()
        if refuse:
            peer.say(b"\xff\x15\x04#28000Access denied for user 'repl'@'127.0.0.1'")
            return
        peer.say(b"\x01\x04")
        seen.password_packet = peer.hear()
        peer.say(OK)
        while True:
            peer.seq = 0
            command = peer.hear()
            seen.commands.append(command)
            if command[:1] == b"\x01":
                return
            peer.say(b"\x01")
            peer.say(
                b"".join(write_lenenc_bytes(x) for x in (b"def", b"", b"", b"", b"1", b""))
                + b"\x0c"
                + struct.pack("<HIBHB", 63, 1, 0x08, 0, 0)
                + b"\x00\x00"
            )
            peer.say(b"\x011")
            peer.say(b"\xfe\x00\x00\x02\x00\x00\x00")

    return handle


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[int]:
    """Run `handler` for each connection on a thread; yields the port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    stop = threading.Event()

    def one(sock: socket.socket) -> None:
        sock.settimeout(10)
        with contextlib.suppress(OSError, ssl.SSLError):
            try:
                handler(sock)
            finally:
                sock.close()

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=one, args=(sock,), daemon=True).start()

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 5)
        listener.close()


# ---------------------------------------------------------------------- TLS


@pytest.mark.asyncio
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_verify_identity_then_full_auth_inside_tls(pki: Pki, host: str) -> None:
    seen = Seen()
    async with serve(mysql_server(seen, cert=pki.cert, key=pki.key)) as port:
        tls = TlsSettings(TlsMode.VERIFY_IDENTITY, ca=pki.ca)
        conn = await connect(host, port, "repl", PASSWORD, tls=tls, connect_timeout=5)
        assert conn.server.tls
        result = await conn.query("SELECT 1")
        assert result.rows == [("1",)]
        await conn.close()
    assert seen.tls
    # Full authentication over TLS sends the password itself, which only TLS may carry.
    assert seen.password_packet == PASSWORD.encode() + b"\0"
    assert seen.commands == [b"\x03SELECT 1", b"\x01"]


@pytest.mark.asyncio
async def test_unknown_ca_is_refused(pki: Pki) -> None:
    seen = Seen()
    async with serve(mysql_server(seen, cert=pki.cert, key=pki.key)) as port:
        with pytest.raises(TlsError, match="certificate") as info:
            await connect(
                "127.0.0.1",
                port,
                "repl",
                PASSWORD,
                tls=TlsSettings(TlsMode.VERIFY_CA, ca=pki.other_ca),
                connect_timeout=5,
            )
    assert info.value.context["address"] == f"127.0.0.1:{port}"
    assert seen.password_packet is None


@pytest.mark.asyncio
async def test_host_name_checked_only_in_verify_identity(pki: Pki) -> None:
    seen = Seen()
    handler = mysql_server(seen, cert=pki.wrong_name_cert, key=pki.wrong_name_key)
    async with serve(handler) as port:
        with pytest.raises(TlsError, match="certificate"):
            await connect(
                "127.0.0.1",
                port,
                "repl",
                PASSWORD,
                tls=TlsSettings(TlsMode.VERIFY_IDENTITY, ca=pki.ca),
                connect_timeout=5,
            )
        for mode in (TlsMode.VERIFY_CA, TlsMode.REQUIRED):
            ca = pki.ca if mode is TlsMode.VERIFY_CA else None
            conn = await connect(
                "127.0.0.1", port, "repl", PASSWORD, tls=TlsSettings(mode, ca=ca), connect_timeout=5
            )
            assert conn.server.tls
            await conn.close()
        # The name to verify can differ from the address connected to.
        conn = await connect(
            "127.0.0.1",
            port,
            "repl",
            PASSWORD,
            tls=TlsSettings(
                TlsMode.VERIFY_IDENTITY, ca=pki.ca, server_hostname="db.example.invalid"
            ),
            connect_timeout=5,
        )
        await conn.close()


@pytest.mark.asyncio
async def test_tls_required_but_server_has_none() -> None:
    seen = Seen()
    async with serve(mysql_server(seen)) as port:
        with pytest.raises(TlsError, match="does not offer"):
            await connect("127.0.0.1", port, "repl", PASSWORD, tls="required", connect_timeout=5)
    assert seen.password_packet is None


# ---------------------------------------------------------------------- errors


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.asyncio
async def test_refused_port_names_the_address() -> None:
    port = _free_port()
    with pytest.raises(ConnectError, match=f"127.0.0.1:{port}") as info:
        await connect("127.0.0.1", port, "repl", PASSWORD, connect_timeout=5)
    assert PASSWORD not in str(info.value)


@pytest.mark.asyncio
async def test_silent_server_times_out() -> None:
    def silent(sock: socket.socket) -> None:
        time.sleep(2)

    async with serve(silent) as port:
        with pytest.raises(ConnectError, match=r"timed out after 0\.3s"):
            await connect("127.0.0.1", port, "repl", PASSWORD, connect_timeout=0.3)


@pytest.mark.asyncio
async def test_server_vanishing_mid_login() -> None:
    def rude(sock: socket.socket) -> None:
        sock.sendall(frame(greeting(), 0)[0][:30])

    async with serve(rude) as port:
        with pytest.raises(ConnectionLostError, match="closed the connection") as info:
            await connect("127.0.0.1", port, "repl", PASSWORD, connect_timeout=5)
    assert info.value.context["address"] == f"127.0.0.1:{port}"


@pytest.mark.asyncio
async def test_refused_login_names_the_account_not_the_password() -> None:
    seen = Seen()
    async with serve(mysql_server(seen, refuse=True)) as port:
        with pytest.raises(AuthError) as info:
            await connect("127.0.0.1", port, "repl", PASSWORD, connect_timeout=5)
    err = info.value
    assert err.code == 1045
    assert err.context["account"] == "repl@127.0.0.1"
    for text in (str(err), repr(err), repr(err.context)):
        assert PASSWORD not in text


@pytest.mark.asyncio
async def test_close_of_a_connection_whose_other_closer_was_cancelled() -> None:
    """Two tasks close one connection (the stream's clean-up, then Pipeline.abandon); the
    first is cancelled while the close is in progress. The second must return normally, not
    inherit the cancellation through the shared close waiter."""
    from replicad.protocol.transport import _close_writer

    class SlowClosingWriter:
        def __init__(self) -> None:
            self._closed = asyncio.get_running_loop().create_future()

        def close(self) -> None:
            loop = asyncio.get_running_loop()
            loop.call_later(0.2, lambda: self._closed.done() or self._closed.set_result(None))

        async def wait_closed(self) -> None:
            await self._closed

    writer = SlowClosingWriter()
    first = asyncio.create_task(_close_writer(writer))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    first.cancel()
    await asyncio.sleep(0)
    await _close_writer(writer)  # type: ignore[arg-type]
