"""Collation id -> character set -> Python codec.

The binlog names a column's character set only by collation id. The ids below were read from
MariaDB 10.11's information_schema.COLLATIONS; MySQL 8 reuses ids 1-247 with the same meaning and
adds 248-323 (gb18030 and the utf8mb4 *_0900_* collations), which MariaDB does not use below 1024.
"""

from __future__ import annotations

import codecs
import functools

BINARY_COLLATION = 63

_RANGES_BY_CHARSET: dict[str, tuple[tuple[int, int], ...]] = {
    "armscii8": ((32, 32), (64, 64), (1056, 1056), (1088, 1088)),
    "ascii": ((11, 11), (65, 65), (1035, 1035), (1089, 1089)),
    "big5": ((1, 1), (84, 84), (1025, 1025), (1108, 1108)),
    "binary": ((63, 63),),
    "cp1250": ((26, 26), (34, 34), (44, 44), (66, 66), (99, 99), (1050, 1050), (1090, 1090)),
    "cp1251": ((14, 14), (23, 23), (50, 52), (1074, 1075)),
    "cp1256": ((57, 57), (67, 67), (1081, 1081), (1091, 1091)),
    "cp1257": ((29, 29), (58, 59), (1082, 1083)),
    "cp850": ((4, 4), (80, 80), (1028, 1028), (1104, 1104)),
    "cp852": ((40, 40), (81, 81), (1064, 1064), (1105, 1105)),
    "cp866": ((36, 36), (68, 68), (1060, 1060), (1092, 1092)),
    "cp932": ((95, 96), (1119, 1120)),
    "dec8": ((3, 3), (69, 69), (1027, 1027), (1093, 1093)),
    "eucjpms": ((97, 98), (1121, 1122)),
    "euckr": ((19, 19), (85, 85), (1043, 1043), (1109, 1109)),
    "gb2312": ((24, 24), (86, 86), (1048, 1048), (1110, 1110)),
    "gbk": ((28, 28), (87, 87), (1052, 1052), (1111, 1111)),
    "geostd8": ((92, 93), (1116, 1117)),
    "greek": ((25, 25), (70, 70), (1049, 1049), (1094, 1094)),
    "hebrew": ((16, 16), (71, 71), (1040, 1040), (1095, 1095)),
    "hp8": ((6, 6), (72, 72), (1030, 1030), (1096, 1096)),
    "keybcs2": ((37, 37), (73, 73), (1061, 1061), (1097, 1097)),
    "koi8r": ((7, 7), (74, 74), (1031, 1031), (1098, 1098)),
    "koi8u": ((22, 22), (75, 75), (1046, 1046), (1099, 1099)),
    "latin1": ((5, 5), (8, 8), (15, 15), (31, 31), (47, 49), (94, 94), (1032, 1032), (1071, 1071)),
    "latin2": ((2, 2), (9, 9), (21, 21), (27, 27), (77, 77), (1033, 1033), (1101, 1101)),
    "latin5": ((30, 30), (78, 78), (1054, 1054), (1102, 1102)),
    "latin7": ((20, 20), (41, 42), (79, 79), (1065, 1065), (1103, 1103)),
    "macce": ((38, 38), (43, 43), (1062, 1062), (1067, 1067)),
    "macroman": ((39, 39), (53, 53), (1063, 1063), (1077, 1077)),
    "sjis": ((13, 13), (88, 88), (1037, 1037), (1112, 1112)),
    "swe7": ((10, 10), (82, 82), (1034, 1034), (1106, 1106)),
    "tis620": ((18, 18), (89, 89), (1042, 1042), (1113, 1113)),
    "ucs2": (
        (35, 35),
        (90, 90),
        (128, 151),
        (159, 159),
        (640, 642),
        (1059, 1059),
        (1114, 1114),
        (1152, 1152),
        (1174, 1174),
    ),
    "ujis": ((12, 12), (91, 91), (1036, 1036), (1115, 1115)),
    "utf16": ((54, 55), (101, 124), (672, 674), (1078, 1079), (1125, 1125), (1147, 1147)),
    "utf16le": ((56, 56), (62, 62), (1080, 1080), (1086, 1086)),
    "utf32": ((60, 61), (160, 183), (736, 738), (1084, 1085), (1184, 1184), (1206, 1206)),
    "utf8mb3": (
        (33, 33),
        (83, 83),
        (192, 215),
        (223, 223),
        (576, 578),
        (1057, 1057),
        (1107, 1107),
        (1216, 1216),
        (1238, 1238),
    ),
    "utf8mb4": ((45, 46), (224, 247), (608, 610), (1069, 1070), (1248, 1248), (1270, 1270)),
}

_MYSQL8_RANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "utf8mb3": ((76, 76),),
    "gb18030": ((248, 250),),
    "utf8mb4": ((255, 323),),
}

# MySQL's latin1 is Windows-1252 except that the five bytes cp1252 leaves undefined map to the
# C1 control characters (U+0081, U+008D, U+008F, U+0090, U+009D); Python's cp1252 codec
# rejects them. Its decoding table: every byte defined, so a latin1 value is always text.
_MYSQL_LATIN1_TABLE = "".join(
    chr(i) if i in (0x81, 0x8D, 0x8F, 0x90, 0x9D) else bytes([i]).decode("cp1252")
    for i in range(256)
)

# Character sets Python has no codec for (armscii8, dec8, geostd8, hp8, keybcs2, swe7) are absent:
# their values stay bytes rather than being decoded wrongly.
CODEC_BY_CHARSET: dict[str, str] = {
    "ascii": "ascii",
    "big5": "big5",
    "cp1250": "cp1250",
    "cp1251": "cp1251",
    "cp1256": "cp1256",
    "cp1257": "cp1257",
    "cp850": "cp850",
    "cp852": "cp852",
    "cp866": "cp866",
    "cp932": "cp932",
    "eucjpms": "euc_jp",
    "euckr": "euc_kr",
    "gb18030": "gb18030",
    "gb2312": "gb2312",
    "gbk": "gbk",
    "greek": "iso8859_7",
    "hebrew": "iso8859_8",
    "koi8r": "koi8_r",
    "koi8u": "koi8_u",
    "latin1": "mysql_latin1",
    "latin2": "iso8859_2",
    "latin5": "iso8859_9",
    "latin7": "iso8859_13",
    "macce": "mac_latin2",
    "macroman": "mac_roman",
    "sjis": "shift_jis",
    "tis620": "tis_620",
    "ucs2": "utf_16_be",
    "ujis": "euc_jp",
    "utf16": "utf_16_be",
    "utf16le": "utf_16_le",
    "utf32": "utf_32_be",
    "utf8mb3": "utf-8",
    "utf8mb4": "utf-8",
}


def _build(ranges: dict[str, tuple[tuple[int, int], ...]]) -> dict[int, str]:
    return {i: cs for cs, spans in ranges.items() for lo, hi in spans for i in range(lo, hi + 1)}


_MARIADB_CHARSETS = _build(_RANGES_BY_CHARSET)
_MYSQL_CHARSETS = {**_MARIADB_CHARSETS, **_build(_MYSQL8_RANGES)}
_MYSQL_CHARSETS = {i: cs for i, cs in _MYSQL_CHARSETS.items() if i < 1024}


def charset_of(collation_id: int, *, mariadb: bool) -> str | None:
    """The character set name of a collation id, or None when the id is unknown."""
    return (_MARIADB_CHARSETS if mariadb else _MYSQL_CHARSETS).get(collation_id)


def codec_of(collation_id: int, *, mariadb: bool) -> str | None:
    """The Python codec for a collation id; None for binary, unknown or codec-less sets."""
    if collation_id == BINARY_COLLATION:
        return None
    charset = charset_of(collation_id, mariadb=mariadb)
    return CODEC_BY_CHARSET.get(charset) if charset else None


# The codecs above that map every byte to at most one character by a fixed table (the
# compiled decoder writes these through the table, `decoding_table`); the others are
# multi-byte or UTF-16/32.
SINGLE_BYTE_CODECS = frozenset(
    {
        "ascii",
        "cp1250",
        "cp1251",
        "cp1256",
        "cp1257",
        "cp850",
        "cp852",
        "cp866",
        "iso8859_2",
        "iso8859_7",
        "iso8859_8",
        "iso8859_9",
        "iso8859_13",
        "koi8_r",
        "koi8_u",
        "mac_latin2",
        "mac_roman",
        "mysql_latin1",
        "tis_620",
    }
)
UNDEFINED = "\ufffe"  # a byte the codec rejects (as in the stdlib's charmap tables)

# Where MySQL's and MariaDB's own tables (both servers alike, read with `SELECT
# CONVERT(_cs X'..' USING utf8mb4)`) differ from Python's codec of the same name: the
# character the server gives, or UNDEFINED where the server has none (it prints '?').
_SERVER_FIXUPS: dict[str, dict[int, str]] = {
    "cp1256": dict.fromkeys((0x8A, 0x8F, 0x98, 0x9A, 0x9F, 0xAA, 0xC0, 0xFF), UNDEFINED),
    "cp866": {0xFC: "\u207f", 0xFD: "\u00b2"},
    "iso8859_7": {
        0xA1: "\u02bd",
        0xA2: "\u02bc",
        0xA4: UNDEFINED,
        0xA5: UNDEFINED,
        0xAA: UNDEFINED,
    },
    "iso8859_8": {0xAF: "\u203e"},
    "koi8_u": {0x95: "\u2022"},
    "tis_620": {0xFF: "\ufffd"},
}


@functools.cache
def decoding_table(codec: str) -> str:
    """The 256 characters the bytes 0x00-0xFF decode to under a single-byte codec, UNDEFINED
    for a byte the codec rejects (a value holding one is kept as bytes)."""
    if codec == "mysql_latin1":
        return _MYSQL_LATIN1_TABLE
    if codec not in SINGLE_BYTE_CODECS:
        raise ValueError(f"{codec} is not a single-byte codec")
    chars = []
    for i in range(256):
        try:
            char = bytes([i]).decode(codec)
        except UnicodeDecodeError:
            char = UNDEFINED
        if len(char) != 1:
            raise ValueError(f"{codec} decodes byte {i:#04x} to {len(char)} characters")
        chars.append(_SERVER_FIXUPS.get(codec, {}).get(i, char))
    return "".join(chars)


def decode_mysql_latin1(data: bytes) -> str:
    return codecs.charmap_decode(data, "strict", _MYSQL_LATIN1_TABLE)[0]


def _decode_single_byte(data: bytes, codec: str) -> str:
    return codecs.charmap_decode(data, "strict", decoding_table(codec))[0]


def decode_text(data: bytes, codec: str) -> str | bytes:
    """Decode a stored string; bytes the codec rejects are returned undecoded, never mangled."""
    try:
        if codec == "mysql_latin1":
            return decode_mysql_latin1(data)
        if codec in SINGLE_BYTE_CODECS:  # the server's table, not always Python's codec
            return _decode_single_byte(data, codec)
        return data.decode(codec)
    except UnicodeDecodeError:
        return data


@functools.cache
def _encoding_map(codec: str) -> dict[str, int]:
    return {c: i for i, c in enumerate(decoding_table(codec)) if c != UNDEFINED}


def encode_text(text: str, codec: str) -> bytes:
    """The bytes a value decoded by `decode_text` was stored as: for the single-byte
    charsets through the same table (MySQL's latin1 is not Python's latin-1 or cp1252, and
    greek, cp866 ... differ from Python's codecs in places); the codec otherwise.
    UnicodeEncodeError for a character the charset cannot hold."""
    if codec not in SINGLE_BYTE_CODECS:
        return text.encode(codec)
    table = _encoding_map(codec)
    try:
        return bytes(table[c] for c in text)
    except KeyError as missing:
        position = text.index(missing.args[0])
        raise UnicodeEncodeError(
            codec, text, position, position + 1, "not in the character set"
        ) from None
