"""QUERY event status variables and USER_VAR events.

Status variables are `code u8 | value` with a fixed layout per code (MySQL codes 0-20,
MariaDB 128-131). Like the server, we stop at the first code we do not know: its length is
unknowable, and everything after it in the block is skipped.
"""

from __future__ import annotations

import struct
from typing import Any

from replicad.binlog._bytes import need
from replicad.binlog.events import EventHeader, UserVarEvent
from replicad.errors import MalformedEventError

_FIXED: dict[int, tuple[str, str]] = {
    0: ("flags2", "<I"),
    1: ("sql_mode", "<Q"),
    3: ("auto_increment", "<HH"),
    4: ("charset", "<HHH"),
    7: ("lc_time_names", "<H"),
    8: ("charset_database", "<H"),
    9: ("table_map_for_update", "<Q"),
    10: ("master_data_written", "<I"),
    16: ("explicit_defaults_for_timestamp", "<B"),
    17: ("ddl_logged_with_xid", "<Q"),
    18: ("default_collation_for_utf8mb4", "<H"),
    19: ("sql_require_primary_key", "<B"),
    20: ("default_table_encryption", "<B"),
    129: ("xid", "<Q"),
    130: ("gtid_flags3", "<B"),
}
_MAX_DBS_WITH_NAMES = 16  # MAX_DBS_IN_EVENT_MTS; the server writes 254 when there are more


def parse_status_vars(block: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pos, end = 0, len(block)
    while pos < end:
        code = block[pos]
        pos += 1
        if code in _FIXED:
            name, fmt = _FIXED[code]
            size = struct.calcsize(fmt)
            need(block, pos, size, f"status variable {name}")
            values = struct.unpack_from(fmt, block, pos)
            out[name] = values[0] if len(values) == 1 else list(values)
            pos += size
        elif code == 2:  # catalog (5.0.0-5.0.3): length, name, terminating zero
            n = block[pos]
            out["catalog"] = block[pos + 1 : pos + 1 + n].decode("utf-8", "replace")
            pos += n + 2
        elif code in (5, 6):  # time_zone, catalog_nz: length-prefixed strings
            n = block[pos]
            need(block, pos + 1, n, "status variable string")
            key = "time_zone" if code == 5 else "catalog"
            out[key] = block[pos + 1 : pos + 1 + n].decode("utf-8", "replace")
            pos += 1 + n
        elif code == 11:  # invoker: user and host, each length-prefixed
            n = block[pos]
            user = block[pos + 1 : pos + 1 + n].decode("utf-8", "replace")
            pos += 1 + n
            m = block[pos]
            host = block[pos + 1 : pos + 1 + m].decode("utf-8", "replace")
            pos += 1 + m
            out["invoker"] = {"user": user, "host": host}
        elif code == 12:  # updated_db_names: count, then zero-terminated names
            count = block[pos]
            pos += 1
            names: list[str] = []
            if count <= _MAX_DBS_WITH_NAMES:  # larger counts mean "names omitted", as 254
                for _ in range(count):
                    stop = block.index(b"\0", pos)
                    names.append(block[pos:stop].decode("utf-8", "replace"))
                    pos = stop + 1
            out["updated_db_names"] = names
        elif code in (13, 128):  # microseconds (MySQL) / hrnow (MariaDB): 3 bytes
            need(block, pos, 3, "status variable microseconds")
            out["microseconds"] = int.from_bytes(block[pos : pos + 3], "little")
            pos += 3
        elif code == 131:  # MariaDB character_set_collations: count, (charset u16, coll u16)*
            count = block[pos]
            pos += 1
            need(block, pos, 4 * count, "status variable character_set_collations")
            out["character_set_collations"] = [
                list(struct.unpack_from("<HH", block, pos + 4 * i)) for i in range(count)
            ]
            pos += 4 * count
        else:
            out["unknown_status_code"] = code
            break
    if pos > end:
        raise MalformedEventError("QUERY status variables overrun their block")
    return out


_STRING, _REAL, _INT, _ROW, _DECIMAL = 0, 1, 2, 3, 4


def parse_user_var(header: EventHeader, body: bytes) -> UserVarEvent:
    need(body, 0, 4, "USER_VAR name length")
    name_len = struct.unpack_from("<I", body, 0)[0]
    need(body, 4, name_len + 1, "USER_VAR name")
    name = body[4 : 4 + name_len].decode("utf-8", "replace")
    pos = 4 + name_len
    is_null = bool(body[pos])
    pos += 1
    event = UserVarEvent(header, name=name, is_null=is_null)
    if is_null:
        return event
    need(body, pos, 9, "USER_VAR value header")
    value_type, charset, value_len = struct.unpack_from("<BII", body, pos)
    pos += 9
    need(body, pos, value_len, "USER_VAR value")
    raw = body[pos : pos + value_len]
    pos += value_len
    flags = body[pos] if pos < len(body) else 0
    value: Any
    if value_type == _REAL:
        value = struct.unpack_from("<d", raw, 0)[0]
    elif value_type == _INT:
        value = int.from_bytes(raw[:8], "little", signed=not flags & 1)
    elif value_type == _DECIMAL:
        from replicad.binlog.jsonb import decode_decimal_bin

        precision, scale = raw[0], raw[1]
        value = decode_decimal_bin(raw, 2, precision, scale)[0]
    else:
        value = bytes(raw)
    event.value_type, event.charset, event.value, event.flags = value_type, charset, value, flags
    return event
