"""Handshake v10 parsing, HandshakeResponse41 / SSLRequest layout, capability negotiation and
the TLS-mode → SSLContext mapping.

MARIADB_10_11_GREETING is a real greeting captured from MariaDB 10.11.19 (Debian 12) with a
plain socket on this project's test server. MYSQL_8_GREETING is built here from the documented
Handshake v10 layout with the values a MySQL 8.0 server sends (no MySQL 8 server can be
installed on this machine); each field is written out separately.
"""

from __future__ import annotations

import dataclasses
import ssl
import struct
from pathlib import Path

import pytest

from replicad.errors import ConfigError, ProtocolError
from replicad.protocol.handshake import (
    Capability,
    TlsMode,
    TlsSettings,
    build_handshake_response,
    build_ssl_context,
    build_ssl_request,
    negotiate_capabilities,
    parse_handshake,
)
from replicad.protocol.packets import read_lenenc_bytes, read_lenenc_int

pytestmark = pytest.mark.unit

MARIADB_10_11_GREETING = bytes.fromhex(
    "0a352e352e352d31302e31312e31392d4d6172696144422d302b646562313275312d6c6f6700"
    "42010000"  # connection id 322
    "32454158745f6046"  # scramble part 1
    "00"
    "fef7"  # capabilities, low word: CLIENT_MYSQL (bit 0) clear
    "2d"  # charset 45
    "0200"  # status: autocommit
    "ff81"  # capabilities, high word
    "15"  # auth data length 21
    "000000000000"  # filler
    "1d000000"  # MariaDB extended capabilities
    "7b592a653e457e6c22634c3300"  # scramble part 2 + NUL
    "6d7973716c5f6e61746976655f70617373776f726400"  # mysql_native_password
)

MYSQL_8_SCRAMBLE = bytes(range(0x41, 0x41 + 20))
MYSQL_8_CAPS = 0xDFFFFFFF  # what MySQL 8.0 announces with TLS configured
MYSQL_8_GREETING = (
    b"\x0a"
    + b"8.0.36\x00"
    + struct.pack("<I", 0x0000_1234)
    + MYSQL_8_SCRAMBLE[:8]
    + b"\x00"
    + struct.pack("<H", MYSQL_8_CAPS & 0xFFFF)
    + bytes((255,))  # utf8mb4_0900_ai_ci
    + struct.pack("<H", 0x0002)
    + struct.pack("<H", MYSQL_8_CAPS >> 16)
    + bytes((21,))
    + bytes(10)
    + MYSQL_8_SCRAMBLE[8:]
    + b"\x00"
    + b"caching_sha2_password\x00"
)


def test_parse_mariadb_10_11_capture() -> None:
    hs = parse_handshake(MARIADB_10_11_GREETING)
    assert hs.protocol_version == 10
    assert hs.mariadb
    assert hs.server_version == "10.11.19-MariaDB-0+deb12u1-log"  # "5.5.5-" stripped
    assert hs.connection_id == 322
    assert hs.auth_data == bytes.fromhex("32454158745f6046") + bytes.fromhex(
        "7b592a653e457e6c22634c33"
    )
    assert len(hs.auth_data) == 20
    assert hs.charset == 45 and hs.status_flags == 2
    assert hs.auth_plugin == "mysql_native_password"
    assert hs.capabilities & 0xFFFFFFFF == 0x81FFF7FE
    assert hs.capabilities >> 32 == 0x1D
    assert hs.has(Capability.MARIADB_PROGRESS | Capability.MARIADB_CACHE_METADATA)
    assert not hs.has(Capability.SSL)


def test_parse_mysql_8_layout() -> None:
    hs = parse_handshake(MYSQL_8_GREETING)
    assert not hs.mariadb
    assert hs.server_version == "8.0.36"
    assert hs.connection_id == 0x1234
    assert hs.auth_data == MYSQL_8_SCRAMBLE
    assert hs.capabilities == MYSQL_8_CAPS
    assert hs.charset == 255
    assert hs.auth_plugin == "caching_sha2_password"
    assert hs.has(Capability.SSL | Capability.DEPRECATE_EOF | Capability.PLUGIN_AUTH)


def test_mysql_reserved_bytes_are_not_extended_capabilities() -> None:
    # CLIENT_MYSQL is set here, so the last reserved bytes mean nothing even if non-zero.
    raw = bytearray(MYSQL_8_GREETING)
    reserved_at = MYSQL_8_GREETING.index(MYSQL_8_SCRAMBLE[8:]) - 4
    raw[reserved_at : reserved_at + 4] = b"\xff\xff\xff\xff"
    assert parse_handshake(bytes(raw)).capabilities == MYSQL_8_CAPS


def test_mariadb_prefix_kept_for_mysql_5_5_5() -> None:
    raw = MYSQL_8_GREETING.replace(b"8.0.36", b"5.5.5-log")
    assert parse_handshake(raw).server_version == "5.5.5-log"


def test_plugin_name_without_trailing_nul() -> None:
    hs = parse_handshake(MYSQL_8_GREETING[:-1])
    assert hs.auth_plugin == "caching_sha2_password"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x09" + MYSQL_8_GREETING[1:], "protocol version 9"),
        (b"\x0a8.0.36", "NUL"),
        (MYSQL_8_GREETING[:20], "needs"),
        (MYSQL_8_GREETING[:40], "needs"),
    ],
)
def test_bad_greetings(raw: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        parse_handshake(raw)


def test_negotiated_capabilities() -> None:
    mysql = parse_handshake(MYSQL_8_GREETING)
    caps = negotiate_capabilities(mysql, database=False, tls=False, deprecate_eof=True)
    for wanted in (
        Capability.LONG_PASSWORD,
        Capability.PROTOCOL_41,
        Capability.SECURE_CONNECTION,
        Capability.PLUGIN_AUTH,
        Capability.PLUGIN_AUTH_LENENC_CLIENT_DATA,
        Capability.CONNECT_ATTRS,
        Capability.DEPRECATE_EOF,
    ):
        assert caps & wanted, wanted
    for refused in (
        Capability.LOCAL_FILES,
        Capability.MULTI_STATEMENTS,
        Capability.COMPRESS,
        Capability.SESSION_TRACK,
        Capability.QUERY_ATTRIBUTES,
        Capability.CONNECT_WITH_DB,
        Capability.SSL,
        Capability.CAN_HANDLE_EXPIRED_PASSWORDS,
    ):
        assert not caps & refused, refused
    with_db = negotiate_capabilities(mysql, database=True, tls=True, deprecate_eof=False)
    assert with_db & Capability.CONNECT_WITH_DB and with_db & Capability.SSL
    assert not with_db & Capability.DEPRECATE_EOF


def test_mariadb_gets_no_extended_capability_word() -> None:
    maria = parse_handshake(MARIADB_10_11_GREETING)
    caps = negotiate_capabilities(maria, database=False, tls=False, deprecate_eof=True)
    assert caps >> 32 == 0
    assert caps & Capability.LONG_PASSWORD  # = CLIENT_MYSQL: "no extended word follows"


def test_pre_4_1_server_refused() -> None:
    hs = parse_handshake(MYSQL_8_GREETING)
    old = dataclasses.replace(hs, capabilities=hs.capabilities & ~Capability.PROTOCOL_41)
    with pytest.raises(ProtocolError, match="PROTOCOL_41"):
        negotiate_capabilities(old, database=False, tls=False, deprecate_eof=True)


def test_handshake_response_layout() -> None:
    caps = int(
        Capability.PROTOCOL_41
        | Capability.SECURE_CONNECTION
        | Capability.PLUGIN_AUTH
        | Capability.PLUGIN_AUTH_LENENC_CLIENT_DATA
        | Capability.CONNECT_WITH_DB
        | Capability.CONNECT_ATTRS
    )
    auth = bytes(range(20))
    raw = build_handshake_response(
        capabilities=caps,
        user="repl",
        auth_response=auth,
        auth_plugin="caching_sha2_password",
        database="shop",
        connect_attrs={"_client_name": "replicad", "k": "välue"},
    )
    got_caps, max_packet, charset = struct.unpack_from("<IIB", raw, 0)
    assert (got_caps, max_packet, charset) == (caps, 1 << 30, 45)
    assert raw[9:32] == bytes(23)
    pos = 32
    assert raw[pos : pos + 5] == b"repl\0"
    pos += 5
    got_auth, pos = read_lenenc_bytes(raw, pos)
    assert got_auth == auth
    assert raw[pos : pos + 5] == b"shop\0"
    pos += 5
    end = raw.index(b"\0", pos)
    assert raw[pos:end] == b"caching_sha2_password"
    pos = end + 1
    total, pos = read_lenenc_int(raw, pos)
    assert pos + total == len(raw)
    pairs = []
    while pos < len(raw):
        key, pos = read_lenenc_bytes(raw, pos)
        value, pos = read_lenenc_bytes(raw, pos)
        pairs.append((key, value))
    assert pairs == [(b"_client_name", b"replicad"), (b"k", "välue".encode())]


def test_handshake_response_without_lenenc_auth() -> None:
    caps = int(Capability.PROTOCOL_41 | Capability.SECURE_CONNECTION)
    raw = build_handshake_response(
        capabilities=caps, user="u", auth_response=b"\x01\x02", auth_plugin="x"
    )
    assert raw[32:] == b"u\0\x02\x01\x02"  # 1-byte length, no db, no plugin, no attrs
    with pytest.raises(ProtocolError, match="255"):
        build_handshake_response(
            capabilities=caps, user="u", auth_response=bytes(256), auth_plugin="x"
        )


def test_ssl_request_is_the_response_prefix_with_ssl() -> None:
    caps = int(Capability.PROTOCOL_41 | Capability.SECURE_CONNECTION | Capability.SSL)
    request = build_ssl_request(caps)
    assert len(request) == 32
    assert struct.unpack_from("<I", request)[0] & Capability.SSL
    full = build_handshake_response(capabilities=caps, user="u", auth_response=b"", auth_plugin="p")
    assert full[:32] == request


# ---------------------------------------------------------------------- TLS modes


def test_tls_disabled_has_no_context() -> None:
    assert build_ssl_context(TlsSettings(TlsMode.DISABLED)) is None


def test_tls_required_encrypts_without_verifying() -> None:
    ctx = build_ssl_context(TlsSettings(TlsMode.REQUIRED))
    assert ctx is not None
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname
    assert ctx.minimum_version >= ssl.TLSVersion.TLSv1_2


def test_tls_verify_ca_checks_chain_not_name() -> None:
    ctx = build_ssl_context(TlsSettings(TlsMode.VERIFY_CA))
    assert ctx is not None
    assert ctx.verify_mode == ssl.CERT_REQUIRED and not ctx.check_hostname


def test_tls_verify_identity_checks_chain_and_name() -> None:
    ctx = build_ssl_context(TlsSettings(TlsMode.VERIFY_IDENTITY))
    assert ctx is not None
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_tls_missing_ca_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tls"):
        build_ssl_context(TlsSettings(TlsMode.VERIFY_CA, ca=tmp_path / "missing.pem"))


def test_tls_key_without_cert_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tls\.cert"):
        build_ssl_context(TlsSettings(TlsMode.REQUIRED, key=tmp_path / "k.pem"))


def test_tls_mode_names_match_mysql_ssl_mode() -> None:
    assert [m.value for m in TlsMode] == [
        "disabled",
        "preferred",
        "required",
        "verify-ca",
        "verify-identity",
    ]
