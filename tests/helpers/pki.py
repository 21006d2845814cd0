"""Certificates for the TLS tests of real servers (Redis, mosquitto): a CA, a server
certificate it signed for localhost and 127.0.0.1, and a second CA that signed nothing (a
client trusting it must refuse the server). Made with `cryptography`, as the unit tests of
replicad's own TLS do, in a directory of the test's own."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class ServerPki:
    ca: Path  # the CA that signed `cert`
    cert: Path  # the server's certificate (localhost, 127.0.0.1)
    key: Path
    other_ca: Path  # a CA that signed nothing here


def _builder(
    subject: str, issuer: x509.Name, public: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=2))
    )


def _authority(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    cert = (
        _builder(cn, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def server_pki(directory: Path) -> ServerPki:
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _authority("replicad test CA")
    other, _ = _authority("an unrelated CA")
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        _builder("localhost", ca.subject, key.public_key())
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    out = ServerPki(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server-key.pem",
        directory / "other-ca.pem",
    )
    out.ca.write_bytes(ca.public_bytes(pem))
    out.other_ca.write_bytes(other.public_bytes(pem))
    out.cert.write_bytes(cert.public_bytes(pem))
    out.key.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    out.key.chmod(0o600)
    return out
