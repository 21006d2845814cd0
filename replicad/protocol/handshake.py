"""Initial handshake: the server greeting (Handshake v10), the client's HandshakeResponse41,
the SSLRequest that precedes a TLS upgrade, and the TLS settings (sans-IO).

Capabilities this client requests, and why (all only when the server offers them):

- LONG_PASSWORD: marks us as a MySQL-compatible client ("CLIENT_MYSQL" to MariaDB), so
  MariaDB expects no extended-capability word from us; we need none of its extensions.
- LONG_FLAG, TRANSACTIONS: harmless, every 4.1+ client sends them.
- PROTOCOL_41, SECURE_CONNECTION: required; older servers are refused.
- PLUGIN_AUTH, PLUGIN_AUTH_LENENC_CLIENT_DATA: auth-switch and responses longer than 250 bytes
  (an RSA-encrypted password is 256+ bytes).
- CONNECT_WITH_DB: only when a database is given.
- CONNECT_ATTRS: `_client_name=replicad` etc., so operators can see who is connected.
- DEPRECATE_EOF (on by default, can be turned off): modern clients all use it; result sets end
  with an OK packet. The result-set reader handles both forms, and tests cover both.
- SSL: only when TLS is requested.

Deliberately not requested: LOCAL_FILES (a server could then read any client file),
MULTI_STATEMENTS / MULTI_RESULTS (one statement, one result), COMPRESS, SESSION_TRACK and
QUERY_ATTRIBUTES (they change the OK and COM_QUERY layouts), CAN_HANDLE_EXPIRED_PASSWORDS
(an expired account then fails at connect time with a clear error instead of a sandbox where
every statement fails).
"""

from __future__ import annotations

import enum
import ssl
import struct
from dataclasses import dataclass, field
from pathlib import Path

from replicad.errors import ConfigError, ProtocolError
from replicad.protocol.packets import need, read_nul_bytes, write_lenenc_bytes


class Capability(enum.IntFlag):
    LONG_PASSWORD = 1 << 0  # MariaDB: CLIENT_MYSQL
    FOUND_ROWS = 1 << 1
    LONG_FLAG = 1 << 2
    CONNECT_WITH_DB = 1 << 3
    NO_SCHEMA = 1 << 4
    COMPRESS = 1 << 5
    ODBC = 1 << 6
    LOCAL_FILES = 1 << 7
    IGNORE_SPACE = 1 << 8
    PROTOCOL_41 = 1 << 9
    INTERACTIVE = 1 << 10
    SSL = 1 << 11
    IGNORE_SIGPIPE = 1 << 12
    TRANSACTIONS = 1 << 13
    RESERVED = 1 << 14
    SECURE_CONNECTION = 1 << 15
    MULTI_STATEMENTS = 1 << 16
    MULTI_RESULTS = 1 << 17
    PS_MULTI_RESULTS = 1 << 18
    PLUGIN_AUTH = 1 << 19
    CONNECT_ATTRS = 1 << 20
    PLUGIN_AUTH_LENENC_CLIENT_DATA = 1 << 21
    CAN_HANDLE_EXPIRED_PASSWORDS = 1 << 22
    SESSION_TRACK = 1 << 23
    DEPRECATE_EOF = 1 << 24
    OPTIONAL_RESULTSET_METADATA = 1 << 25
    ZSTD_COMPRESSION = 1 << 26
    QUERY_ATTRIBUTES = 1 << 27
    MULTI_FACTOR_AUTH = 1 << 28
    CAPABILITY_EXTENSION = 1 << 29
    SSL_VERIFY_SERVER_CERT = 1 << 30
    REMEMBER_OPTIONS = 1 << 31
    # MariaDB extended capabilities: the 4 bytes at the end of the greeting's reserved area,
    # seen here shifted above the 32 standard bits.
    MARIADB_PROGRESS = 1 << 32
    MARIADB_COM_MULTI = 1 << 33
    MARIADB_STMT_BULK_OPERATIONS = 1 << 34
    MARIADB_EXTENDED_METADATA = 1 << 35
    MARIADB_CACHE_METADATA = 1 << 36


CLIENT_MYSQL = Capability.LONG_PASSWORD

REQUIRED_SERVER_CAPABILITIES = Capability.PROTOCOL_41 | Capability.SECURE_CONNECTION
BASE_CLIENT_CAPABILITIES = (
    Capability.LONG_PASSWORD
    | Capability.LONG_FLAG
    | Capability.TRANSACTIONS
    | Capability.PROTOCOL_41
    | Capability.SECURE_CONNECTION
    | Capability.PLUGIN_AUTH
    | Capability.PLUGIN_AUTH_LENENC_CLIENT_DATA
    | Capability.CONNECT_ATTRS
)

# utf8mb4_general_ci: known to every MySQL >= 5.5.3 and MariaDB; MySQL 8's default 255
# (utf8mb4_0900_ai_ci) does not exist on MariaDB.
UTF8MB4_GENERAL_CI = 45
# The largest packet we accept (MySQL's own ceiling for max_allowed_packet).
CLIENT_MAX_PACKET = 1 << 30

_MARIADB_PREFIX = "5.5.5-"


@dataclass(frozen=True, slots=True)
class Handshake:
    """The server greeting. `capabilities` includes MariaDB's extended bits (<< 32)."""

    protocol_version: int
    server_version: str
    connection_id: int
    auth_data: bytes = field(repr=False)
    capabilities: int
    charset: int
    status_flags: int
    auth_plugin: str
    mariadb: bool

    def has(self, capability: int) -> bool:
        return self.capabilities & capability == capability


def parse_handshake(payload: bytes) -> Handshake:
    """Parse a Handshake v10 payload (the caller has already turned an ERR into an error)."""
    need(payload, 0, 1, "handshake")
    protocol_version = payload[0]
    if protocol_version != 10:
        raise ProtocolError(
            f"unsupported handshake protocol version {protocol_version} (only v10 is supported)"
        )
    raw_version, pos = read_nul_bytes(payload, 1, "server version")
    version = raw_version.decode("utf-8", "replace")
    need(payload, pos, 4 + 8 + 1 + 2, "handshake fixed part")
    connection_id = struct.unpack_from("<I", payload, pos)[0]
    scramble1 = bytes(payload[pos + 4 : pos + 12])
    pos += 13  # scramble part 1 and its filler byte
    caps = struct.unpack_from("<H", payload, pos)[0]
    pos += 2
    charset = status = 0
    auth_len = 0
    scramble2 = b""
    plugin = ""
    mariadb = "mariadb" in version.lower()
    if len(payload) > pos:
        # Everything past the lower capability word is optional in the v10 layout.
        need(payload, pos, 1 + 2 + 2 + 1 + 10, "handshake extended part")
        charset = payload[pos]
        status, caps_hi = struct.unpack_from("<HH", payload, pos + 1)
        caps |= caps_hi << 16
        auth_len = payload[pos + 5]
        reserved = bytes(payload[pos + 6 : pos + 16])
        pos += 16
        if mariadb and not caps & CLIENT_MYSQL:
            caps |= int.from_bytes(reserved[6:10], "little") << 32
        if caps & Capability.SECURE_CONNECTION:
            length = max(13, auth_len - 8)
            need(payload, pos, length, "scramble part 2")
            scramble2 = bytes(payload[pos : pos + length])
            pos += length
            # The 20-byte scramble is stored with a trailing NUL that is not part of it.
            if scramble2.endswith(b"\0"):
                scramble2 = scramble2[:-1]
        if caps & Capability.PLUGIN_AUTH:
            # MySQL 5.5.7-5.5.9 omitted the final NUL; accept the rest of the payload then.
            end = payload.find(b"\0", pos)
            raw_plugin = payload[pos:] if end < 0 else payload[pos:end]
            plugin = bytes(raw_plugin).decode("ascii", "replace")
    if mariadb and version.startswith(_MARIADB_PREFIX):
        # MariaDB 10+ announces "5.5.5-" so that old MySQL replicas accept it as a master.
        version = version[len(_MARIADB_PREFIX) :]
    return Handshake(
        protocol_version=protocol_version,
        server_version=version,
        connection_id=connection_id,
        auth_data=scramble1 + scramble2,
        capabilities=caps,
        charset=charset,
        status_flags=status,
        auth_plugin=plugin or "mysql_native_password",
        mariadb=mariadb,
    )


def negotiate_capabilities(
    server: Handshake, *, database: bool, tls: bool, deprecate_eof: bool
) -> int:
    """The capability word this client sends: what it wants, limited to what the server has."""
    missing = Capability(REQUIRED_SERVER_CAPABILITIES & ~server.capabilities)
    if missing:
        raise ProtocolError(
            f"server lacks required capabilities {missing!r} (MySQL < 4.1 is not supported)",
            server_version=server.server_version,
        )
    wanted = BASE_CLIENT_CAPABILITIES
    if database:
        wanted |= Capability.CONNECT_WITH_DB
    if deprecate_eof:
        wanted |= Capability.DEPRECATE_EOF
    caps = int(wanted) & server.capabilities
    # MariaDB servers clear CLIENT_MYSQL in their greeting; a client that sets it anyway tells
    # them that no extended-capability word follows, which is what we mean.
    caps |= CLIENT_MYSQL
    if tls:
        # Checked by the caller, which knows the TLS mode to name in its error.
        caps |= Capability.SSL
    # Only standard bits: a CLIENT_MYSQL client sends no MariaDB extended word.
    return int(caps) & 0xFFFFFFFF


def _fixed_prefix(capabilities: int, charset: int) -> bytes:
    return struct.pack("<IIB", capabilities & 0xFFFFFFFF, CLIENT_MAX_PACKET, charset) + bytes(23)


def build_ssl_request(capabilities: int, charset: int = UTF8MB4_GENERAL_CI) -> bytes:
    """The 32-byte prefix of the response with CLIENT_SSL, sent in clear before TLS starts."""
    return _fixed_prefix(capabilities | Capability.SSL, charset)


def build_handshake_response(
    *,
    capabilities: int,
    user: str,
    auth_response: bytes,
    auth_plugin: str,
    database: str | None = None,
    connect_attrs: dict[str, str] | None = None,
    charset: int = UTF8MB4_GENERAL_CI,
) -> bytes:
    out = bytearray(_fixed_prefix(capabilities, charset))
    out += user.encode("utf-8") + b"\0"
    if capabilities & Capability.PLUGIN_AUTH_LENENC_CLIENT_DATA:
        out += write_lenenc_bytes(auth_response)
    else:
        if len(auth_response) > 255:
            raise ProtocolError("auth response longer than 255 bytes needs lenenc client data")
        out.append(len(auth_response))
        out += auth_response
    if capabilities & Capability.CONNECT_WITH_DB:
        out += (database or "").encode("utf-8") + b"\0"
    if capabilities & Capability.PLUGIN_AUTH:
        out += auth_plugin.encode("ascii") + b"\0"
    if capabilities & Capability.CONNECT_ATTRS:
        attrs = b"".join(
            write_lenenc_bytes(k.encode("utf-8")) + write_lenenc_bytes(v.encode("utf-8"))
            for k, v in (connect_attrs or {}).items()
        )
        out += write_lenenc_bytes(attrs)
    return bytes(out)


# ---------------------------------------------------------------------- TLS settings


class TlsMode(enum.Enum):
    """Named after MySQL's --ssl-mode. PREFERRED (MySQL's client default) encrypts when the
    server offers TLS and otherwise continues in clear text; it checks no certificate, so a
    replica carrying a whole database's changes should use VERIFY_IDENTITY in production."""

    DISABLED = "disabled"
    PREFERRED = "preferred"  # TLS when offered, unverified; clear text otherwise
    REQUIRED = "required"  # encrypted, server certificate not checked
    VERIFY_CA = "verify-ca"  # certificate chain checked against the CA
    VERIFY_IDENTITY = "verify-identity"  # chain and host name checked


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """How the protocol layer negotiates TLS (the YAML side is `config.TlsConfig`)."""

    mode: TlsMode = TlsMode.VERIFY_IDENTITY
    ca: Path | str | None = None  # PEM bundle; None uses the system trust store
    cert: Path | str | None = None  # client certificate (PEM) for X509 accounts
    key: Path | str | None = None
    server_hostname: str | None = None  # name to verify instead of the host connected to

    @property
    def enabled(self) -> bool:
        return self.mode is not TlsMode.DISABLED


def build_ssl_context(config: TlsSettings) -> ssl.SSLContext | None:
    """The SSLContext for a TLS mode (None when TLS is disabled)."""
    if config.mode is TlsMode.DISABLED:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if config.mode in (TlsMode.REQUIRED, TlsMode.PREFERRED):
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx.check_hostname = config.mode is TlsMode.VERIFY_IDENTITY
            ctx.verify_mode = ssl.CERT_REQUIRED
            if config.ca is not None:
                ctx.load_verify_locations(cafile=str(config.ca))
            else:
                ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        if config.cert is not None:
            ctx.load_cert_chain(str(config.cert), str(config.key) if config.key else None)
        elif config.key is not None:
            raise ConfigError("a TLS client key needs its certificate", key="tls.cert")
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load TLS files: {exc}", key="tls") from exc
    return ctx
