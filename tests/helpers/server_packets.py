"""Packets a scripted MySQL 8.0 server sends: its greeting, an OK, and the account's password."""

from __future__ import annotations

import struct

SCRAMBLE = bytes.fromhex("5d0a2b1c7e3f40516273849506a7b8c9dae0f112")

MYSQL8_CAPS = 0xDFFFFFFF

PASSWORD = "s3cret-Pässword"


def greeting(
    plugin: str = "caching_sha2_password",
    caps: int = MYSQL8_CAPS,
    version: bytes = b"8.0.36",
    scramble: bytes = SCRAMBLE,
) -> bytes:
    """Handshake v10 as MySQL 8.0 writes it."""
    return (
        b"\x0a"
        + version
        + b"\x00"
        + struct.pack("<I", 77)
        + scramble[:8]
        + b"\x00"
        + struct.pack("<HBHH", caps & 0xFFFF, 255, 2, caps >> 16)
        + bytes((len(scramble) + 1,))
        + bytes(10)
        + scramble[8:]
        + b"\x00"
        + plugin.encode()
        + b"\x00"
    )


OK = b"\x00\x00\x00\x02\x00\x00\x00"
