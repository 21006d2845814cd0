"""`charsets.encode_text` inverts `decode_text` for the single-byte charsets (a snapshot
writes a decoded key back as `_charset X'..'`): every defined byte of each charset round-trips,
and a character the charset cannot hold raises UnicodeEncodeError."""

from __future__ import annotations

import pytest

from replicad.binlog.charsets import SINGLE_BYTE_CODECS, decode_text, encode_text

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("codec", sorted(SINGLE_BYTE_CODECS))
def test_every_defined_byte_round_trips(codec: str) -> None:
    defined = bytes(b for b in range(256) if isinstance(decode_text(bytes([b]), codec), str))
    text = decode_text(defined, codec)
    assert isinstance(text, str) and len(text) == len(defined)
    assert encode_text(text, codec) == defined


def test_latin1_is_mysqls_not_pythons() -> None:
    assert encode_text("€\x81Ÿ", "mysql_latin1") == b"\x80\x81\x9f"
    assert encode_text("ʽ", "iso8859_7") == b"\xa1"  # the servers' greek, not Python's
    with pytest.raises(UnicodeEncodeError):
        encode_text("日", "mysql_latin1")
    assert encode_text("日", "utf-8") == "日".encode()
