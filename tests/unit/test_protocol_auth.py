"""Auth scrambles and signatures, each checked the way the *server* checks it (so the test does
not restate the client formula), plus RSA round trips and Ed25519 against PyNaCl's standard
signer."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from hypothesis import given
from hypothesis import strategies as st
from nacl.signing import SigningKey, VerifyKey

from replicad.errors import AuthError, ProtocolError
from replicad.protocol.auth import (
    CachingSha2Password,
    ClientEd25519,
    NativePassword,
    Secret,
    caching_sha2_scramble,
    ed25519_public_key,
    ed25519_sign,
    load_public_key,
    make_plugin,
    native_password_scramble,
    rsa_encrypt_password,
)

pytestmark = pytest.mark.unit

NONCE = bytes.fromhex("32454158745f60467b592a653e457e6c22634c33")  # a real MariaDB scramble
PASSWORDS = st.binary(min_size=1, max_size=80)
NONCES = st.binary(min_size=20, max_size=20)


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


@given(PASSWORDS, NONCES)
def test_native_scramble_passes_the_server_check(password: bytes, nonce: bytes) -> None:
    # The server stores SHA1(SHA1(pw)) and recovers SHA1(pw) from the reply.
    stored = hashlib.sha1(hashlib.sha1(password).digest()).digest()
    reply = native_password_scramble(password, nonce)
    candidate = _xor(reply, hashlib.sha1(nonce + stored).digest())
    assert hashlib.sha1(candidate).digest() == stored


def test_native_scramble_known_value() -> None:
    # Computed once with the formula written out step by step.
    stage1 = hashlib.sha1(b"root").digest()
    expected = _xor(stage1, hashlib.sha1(NONCE + hashlib.sha1(stage1).digest()).digest())
    assert native_password_scramble(b"root", NONCE) == expected
    assert native_password_scramble(b"root", NONCE) != native_password_scramble(b"roo", NONCE)


@given(PASSWORDS, NONCES)
def test_caching_sha2_scramble_passes_the_server_check(password: bytes, nonce: bytes) -> None:
    # The server caches SHA256(SHA256(pw)) and recovers SHA256(pw) from the reply.
    cached = hashlib.sha256(hashlib.sha256(password).digest()).digest()
    reply = caching_sha2_scramble(password, nonce)
    candidate = _xor(reply, hashlib.sha256(cached + nonce).digest())
    assert hashlib.sha256(candidate).digest() == cached


def test_empty_password_sends_nothing() -> None:
    assert native_password_scramble(b"", NONCE) == b""
    assert caching_sha2_scramble(b"", NONCE) == b""


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _decrypt(key: rsa.RSAPrivateKey, blob: bytes, nonce: bytes) -> bytes:
    plain = key.decrypt(
        blob, padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    )
    repeated = (nonce * (len(plain) // len(nonce) + 1))[: len(plain)]
    return _xor(plain, repeated)


def test_rsa_encryption_round_trip(rsa_key: rsa.RSAPrivateKey) -> None:
    password = b"a password longer than the twenty-byte nonce"
    blob = rsa_encrypt_password(password, NONCE, _pem(rsa_key))
    assert len(blob) == 256
    assert _decrypt(rsa_key, blob, NONCE) == password + b"\0"


def test_rsa_bad_pem_is_an_auth_error() -> None:
    with pytest.raises(AuthError, match="PEM"):
        rsa_encrypt_password(b"pw", NONCE, b"-----BEGIN NONSENSE-----")


def test_rsa_password_too_long(rsa_key: rsa.RSAPrivateKey) -> None:
    with pytest.raises(AuthError, match="too long") as info:
        rsa_encrypt_password(b"p" * 300, NONCE, _pem(rsa_key))
    assert "ppp" not in str(info.value)


def test_non_rsa_public_key_refused() -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(AuthError, match="not an RSA key"):
        rsa_encrypt_password(b"pw", NONCE, pem)


# ---------------------------------------------------------------------- ed25519


@given(st.binary(min_size=32, max_size=32), st.binary(min_size=32, max_size=32))
def test_ed25519_with_32_byte_password_is_standard_ed25519(password: bytes, nonce: bytes) -> None:
    # SHA512(password) is exactly RFC 8032's key expansion when the password is the seed.
    reference = SigningKey(password)
    assert ed25519_public_key(password) == bytes(reference.verify_key)
    assert ed25519_sign(password, nonce) == reference.sign(nonce).signature


@given(PASSWORDS.filter(lambda p: len(p) != 32), st.binary(min_size=32, max_size=32))
def test_ed25519_signature_verifies_for_any_password_length(password: bytes, nonce: bytes) -> None:
    signature = ed25519_sign(password, nonce)
    assert len(signature) == 64
    VerifyKey(ed25519_public_key(password)).verify(nonce, signature)


def test_ed25519_signature_depends_on_password_and_nonce() -> None:
    nonce = bytes(range(32))
    assert ed25519_sign(b"secret", nonce) != ed25519_sign(b"secreT", nonce)
    assert ed25519_sign(b"secret", nonce) != ed25519_sign(b"secret", bytes(32))


# ---------------------------------------------------------------------- plugins and secrets


def test_plugin_registry_and_unknown_plugin() -> None:
    assert isinstance(make_plugin("mysql_native_password", Secret("x")), NativePassword)
    assert isinstance(make_plugin("caching_sha2_password", Secret("x")), CachingSha2Password)
    assert isinstance(make_plugin("client_ed25519", Secret("x")), ClientEd25519)
    with pytest.raises(AuthError, match="auth_gssapi_client") as info:
        make_plugin("auth_gssapi_client", Secret("hunter2"), user="repl")
    assert info.value.context["plugin"] == "auth_gssapi_client"
    assert "hunter2" not in str(info.value)


def test_caching_sha2_steps() -> None:
    plugin = CachingSha2Password(Secret("pw"))
    assert plugin.start(NONCE + b"\0") == caching_sha2_scramble(b"pw", NONCE)
    assert plugin.more_data(b"\x03") is None
    plugin = CachingSha2Password(Secret("pw"))
    plugin.start(NONCE)
    assert plugin.more_data(b"\x04") == b"\x02"  # no TLS, no key: ask for it
    plugin = CachingSha2Password(Secret("pw"), secure_channel=True)
    plugin.start(NONCE)
    assert plugin.more_data(b"\x04") == b"pw\0"
    with pytest.raises(ProtocolError):
        plugin.more_data(b"\x09")


def test_short_challenges_refused() -> None:
    with pytest.raises(ProtocolError, match="20"):
        NativePassword(Secret("x")).start(b"short")
    with pytest.raises(ProtocolError, match="32"):
        ClientEd25519(Secret("x")).start(bytes(20))


def test_secret_never_shows_the_password() -> None:
    secret = Secret("hunter2")
    assert "hunter2" not in repr(secret) and "hunter2" not in str(secret)
    assert "hunter2" not in repr(CachingSha2Password(secret))
    assert secret.reveal() == b"hunter2"
    assert Secret(secret) == secret and bool(secret) and not Secret(None)
    with pytest.raises(TypeError):
        pickle.dumps(secret)


def test_public_key_file(tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    path = tmp_path / "server.pem"
    path.write_bytes(_pem(rsa_key))
    assert load_public_key(path) == _pem(rsa_key)
    with pytest.raises(AuthError, match="public key file"):
        load_public_key(tmp_path / "missing.pem")
