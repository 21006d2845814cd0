"""Authentication plugins (sans-IO): each turns the server's challenge into response bytes.

Supported: mysql_native_password, caching_sha2_password (fast path, full authentication over
TLS or RSA) and MariaDB's client_ed25519. The password lives in a `Secret`, whose repr never
shows it; errors name the plugin and the step, never the password.

`cryptography` is needed only for RSA (caching_sha2 full authentication without TLS) and
PyNaCl only for ed25519; both are imported on first use so that a deployment using neither
does not pay for them.
"""

from __future__ import annotations

import hashlib
import hmac
from abc import ABC, abstractmethod
from pathlib import Path
from types import ModuleType
from typing import ClassVar

from replicad.errors import AuthError, ProtocolError

SCRAMBLE_LENGTH = 20
ED25519_NONCE_LENGTH = 32


class Secret:
    """A password that does not show up in reprs, logs or exception messages."""

    __slots__ = ("_value",)
    _value: bytes

    def __init__(self, value: str | bytes | Secret | None) -> None:
        if isinstance(value, Secret):
            raw = value._value
        elif isinstance(value, str):
            raw = value.encode("utf-8")
        else:
            raw = bytes(value or b"")
        self._value = raw

    def reveal(self) -> bytes:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(other._value, self._value)

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> str | tuple[object, ...]:
        # Pickling would write the clear text somewhere it was never meant to go.
        raise TypeError("Secret cannot be pickled")


def _xor(data: bytes, key: bytes) -> bytes:
    """XOR with `key` repeated over the length of `data`."""
    return bytes(b ^ key[i % len(key)] for i, b in enumerate(data))


# ---------------------------------------------------------------------- scrambles


def native_password_scramble(password: bytes, nonce: bytes) -> bytes:
    """mysql_native_password: SHA1(pw) XOR SHA1(nonce + SHA1(SHA1(pw))); empty for no password."""
    if not password:
        return b""
    stage1 = hashlib.sha1(password).digest()
    stage2 = hashlib.sha1(stage1).digest()
    return _xor(stage1, hashlib.sha1(nonce + stage2).digest())


def caching_sha2_scramble(password: bytes, nonce: bytes) -> bytes:
    """caching_sha2_password fast path: SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) + nonce)."""
    if not password:
        return b""
    stage1 = hashlib.sha256(password).digest()
    stage2 = hashlib.sha256(stage1).digest()
    return _xor(stage1, hashlib.sha256(stage2 + nonce).digest())


def rsa_encrypt_password(password: bytes, nonce: bytes, public_key_pem: bytes) -> bytes:
    """caching_sha2 full authentication without TLS: RSA-OAEP(SHA1) of (pw + NUL) XOR nonce.

    The XOR with the per-connection nonce keeps a captured ciphertext from being replayed.
    """
    try:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa
    except ImportError as exc:  # pragma: no cover - the dependency is declared
        raise AuthError(
            "caching_sha2_password without TLS needs the 'cryptography' package",
            plugin="caching_sha2_password",
        ) from exc
    try:
        key = serialization.load_pem_public_key(public_key_pem)
    except (ValueError, TypeError) as exc:
        raise AuthError(
            "the server's RSA public key is not a valid PEM public key",
            plugin="caching_sha2_password",
        ) from exc
    if not isinstance(key, rsa.RSAPublicKey):
        raise AuthError("the server's public key is not an RSA key", plugin="caching_sha2_password")
    plain = _xor(password + b"\0", nonce)
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    try:
        return key.encrypt(plain, oaep)
    except ValueError as exc:
        # The message is only the length problem, not the data.
        raise AuthError(
            f"password too long for the server's {key.key_size}-bit RSA key",
            plugin="caching_sha2_password",
        ) from exc


def _ed25519_secret(password: bytes) -> tuple[bytes, bytes]:
    """MariaDB's key derivation: SHA512 of the password itself (not of a 32-byte seed).

    Returns the clamped secret scalar and the second half of the hash, which seeds the
    deterministic per-signature nonce as in RFC 8032.
    """
    digest = hashlib.sha512(password).digest()
    scalar = bytearray(digest[:32])
    scalar[0] &= 248
    scalar[31] &= 63
    scalar[31] |= 64
    return bytes(scalar), digest[32:]


def _nacl_bindings() -> ModuleType:
    try:
        from nacl import bindings
    except ImportError as exc:  # pragma: no cover - the dependency is declared
        raise AuthError(
            "client_ed25519 needs the 'pynacl' package", plugin="client_ed25519"
        ) from exc
    return bindings


def ed25519_public_key(password: bytes) -> bytes:
    """The 32-byte public key MariaDB stores (base64, unpadded) for an ed25519 account."""
    nacl = _nacl_bindings()
    scalar, _ = _ed25519_secret(password)
    return bytes(nacl.crypto_scalarmult_ed25519_base_noclamp(scalar))


def ed25519_sign(password: bytes, message: bytes) -> bytes:
    """The 64-byte signature R || S of `message` under the key MariaDB derives from `password`.

    For a 32-byte password this is exactly standard Ed25519 with that password as the seed.
    """
    nacl = _nacl_bindings()
    scalar, prefix = _ed25519_secret(password)
    public = nacl.crypto_scalarmult_ed25519_base_noclamp(scalar)
    # Scalars are reduced mod L before the arithmetic; the points are unaffected because the
    # base point has order L.
    a = nacl.crypto_core_ed25519_scalar_reduce(scalar + bytes(32))
    r = nacl.crypto_core_ed25519_scalar_reduce(hashlib.sha512(prefix + message).digest())
    big_r = nacl.crypto_scalarmult_ed25519_base_noclamp(r)
    h = nacl.crypto_core_ed25519_scalar_reduce(hashlib.sha512(big_r + public + message).digest())
    s = nacl.crypto_core_ed25519_scalar_add(r, nacl.crypto_core_ed25519_scalar_mul(h, a))
    return bytes(big_r + s)


# ---------------------------------------------------------------------- plugins


class AuthPlugin(ABC):
    """One authentication method, driven by the connection's state machine.

    `start(challenge)` returns the first response (for the handshake response or the answer
    to an auth switch); `more_data(data)` answers an AuthMoreData (0x01) packet and returns
    None when the plugin expects the server's final OK/ERR without sending anything.
    """

    name: ClassVar[str]

    def __init__(
        self,
        password: Secret,
        *,
        secure_channel: bool = False,
        server_public_key: bytes | None = None,
    ) -> None:
        self._password = password
        self.secure_channel = secure_channel
        self.server_public_key = server_public_key

    @abstractmethod
    def start(self, challenge: bytes) -> bytes: ...

    def more_data(self, data: bytes) -> bytes | None:
        raise ProtocolError(
            f"{self.name} expects no extra authentication data, got {len(data)} bytes",
            plugin=self.name,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(secure_channel={self.secure_channel})"


def _scramble_from(challenge: bytes, plugin: str) -> bytes:
    # Both a greeting's scramble and an auth switch's data are 20 bytes (+ an optional NUL).
    if len(challenge) < SCRAMBLE_LENGTH:
        raise ProtocolError(
            f"{plugin} challenge has {len(challenge)} bytes, expected {SCRAMBLE_LENGTH}",
            plugin=plugin,
        )
    return challenge[:SCRAMBLE_LENGTH]


class NativePassword(AuthPlugin):
    name = "mysql_native_password"

    def start(self, challenge: bytes) -> bytes:
        return native_password_scramble(
            self._password.reveal(), _scramble_from(challenge, self.name)
        )


class CachingSha2Password(AuthPlugin):
    name = "caching_sha2_password"

    FAST_AUTH_SUCCESS = 0x03
    PERFORM_FULL_AUTHENTICATION = 0x04
    REQUEST_PUBLIC_KEY = b"\x02"

    def __init__(
        self,
        password: Secret,
        *,
        secure_channel: bool = False,
        server_public_key: bytes | None = None,
    ) -> None:
        super().__init__(
            password, secure_channel=secure_channel, server_public_key=server_public_key
        )
        self._nonce = b""
        self._step = "scramble-sent"

    def start(self, challenge: bytes) -> bytes:
        self._nonce = _scramble_from(challenge, self.name)
        self._step = "scramble-sent"
        return caching_sha2_scramble(self._password.reveal(), self._nonce)

    def more_data(self, data: bytes) -> bytes | None:
        if self._step == "key-requested":
            self._step = "password-sent"
            return rsa_encrypt_password(self._password.reveal(), self._nonce, data)
        if self._step == "scramble-sent" and len(data) == 1:
            if data[0] == self.FAST_AUTH_SUCCESS:
                self._step = "fast-auth-ok"
                return None
            if data[0] == self.PERFORM_FULL_AUTHENTICATION:
                return self._full_authentication()
        raise ProtocolError(
            f"unexpected caching_sha2_password data ({len(data)} bytes) after step {self._step}",
            plugin=self.name,
        )

    def _full_authentication(self) -> bytes:
        self._step = "password-sent"
        if self.secure_channel:
            return self._password.reveal() + b"\0"
        if self.server_public_key is not None:
            return rsa_encrypt_password(
                self._password.reveal(), self._nonce, self.server_public_key
            )
        self._step = "key-requested"
        return self.REQUEST_PUBLIC_KEY


class ClientEd25519(AuthPlugin):
    name = "client_ed25519"

    def start(self, challenge: bytes) -> bytes:
        if len(challenge) != ED25519_NONCE_LENGTH:
            raise ProtocolError(
                f"client_ed25519 nonce has {len(challenge)} bytes, expected {ED25519_NONCE_LENGTH}",
                plugin=self.name,
            )
        return ed25519_sign(self._password.reveal(), challenge)


PLUGINS: dict[str, type[AuthPlugin]] = {
    plugin.name: plugin for plugin in (NativePassword, CachingSha2Password, ClientEd25519)
}


def make_plugin(
    name: str,
    password: Secret,
    *,
    secure_channel: bool = False,
    server_public_key: bytes | None = None,
    user: str | None = None,
) -> AuthPlugin:
    cls = PLUGINS.get(name)
    if cls is None:
        raise AuthError(
            f"server asks for authentication plugin {name!r}, which replicad does not support "
            f"(supported: {', '.join(sorted(PLUGINS))})",
            plugin=name,
            user=user,
        )
    return cls(password, secure_channel=secure_channel, server_public_key=server_public_key)


def load_public_key(path: Path | str) -> bytes:
    """Read a configured server RSA public key (PEM), as MySQL's --server-public-key-path."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise AuthError(
            f"cannot read the server public key file: {exc.strerror}", path=str(path)
        ) from exc
