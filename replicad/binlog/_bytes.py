"""Small readers shared by the event parsers (sans-IO, bounds-checked)."""

from __future__ import annotations

from replicad.errors import MalformedEventError


def read_lenenc(buf: bytes, pos: int) -> tuple[int, int]:
    """MySQL length-encoded integer (net_field_length): value and the position after it."""
    first = buf[pos]
    if first < 0xFB:
        return first, pos + 1
    if first == 0xFC:
        return buf[pos + 1] | buf[pos + 2] << 8, pos + 3
    if first == 0xFD:
        return int.from_bytes(buf[pos + 1 : pos + 4], "little"), pos + 4
    if first == 0xFE:
        return int.from_bytes(buf[pos + 1 : pos + 9], "little"), pos + 9
    raise MalformedEventError("invalid length-encoded integer prefix 0xFB/0xFF", at=pos)


def need(buf: bytes, pos: int, n: int, what: str) -> None:
    if pos + n > len(buf) or n < 0:
        raise MalformedEventError(
            f"{what} needs {n} bytes at body offset {pos}, only {len(buf) - pos} left"
        )


def bit_count(value: int) -> int:
    return value.bit_count()


def msb_first_bits(data: bytes, count: int) -> list[bool]:
    """Bits of a bitmap written most-significant bit first (optional metadata style)."""
    return [bool(data[i >> 3] & (0x80 >> (i & 7))) for i in range(min(count, len(data) * 8))]
