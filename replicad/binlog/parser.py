"""Event framing and dispatch: common header, checksum, FORMAT_DESCRIPTION state.

`BinlogParser.parse(data, pos)` takes the complete bytes of one event (checksum included, as
read from a file or a dump stream) and returns a typed event. The parser keeps the state
that later events depend on: the FDE in force (post-header lengths, checksum algorithm,
table-id width, server flavour) and the TABLE_MAPs of the current statement.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import replace

from replicad.binlog import gtid as gtid_mod
from replicad.binlog._bytes import need, read_lenenc
from replicad.binlog.events import (
    KNOWN_TYPES,
    AnnotateRowsEvent,
    BinlogCheckpointEvent,
    Event,
    EventFlag,
    EventHeader,
    EventType,
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatEvent,
    IncidentEvent,
    IntvarEvent,
    MariaGtidEvent,
    MariaGtidListEvent,
    OpaqueEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RandEvent,
    RotateEvent,
    RowsQueryEvent,
    StopEvent,
    TransactionPayloadEvent,
    UserVarEvent,
    XaPrepareEvent,
    XidEvent,
)
from replicad.binlog.payload import decompress_mariadb, iter_payload_events, parse_payload_header
from replicad.binlog.query_status import parse_status_vars
from replicad.binlog.rows import (
    ROWS_TYPES,
    RowsEvent,
    TableMapEvent,
    parse_rows,
    parse_table_map,
    year_has_signedness_bit,
)
from replicad.errors import (
    BinlogError,
    ChecksumError,
    GtidError,
    MalformedEventError,
    TruncatedError,
    UnknownEventError,
    UnsupportedError,
)

HEADER_LENGTH = 19
CHECKSUM_LENGTH = 4
BINLOG_MAGIC = b"\xfebin"
CHECKSUM_OFF = 0
CHECKSUM_CRC32 = 1

_header = struct.Struct("<IBIIIH")

# Post-header lengths of a MySQL 5.6+/MariaDB binlog v4, used until an FDE says otherwise
# (a dump stream sends a ROTATE before its FDE).
_DEFAULT_POST_HEADERS: dict[int, int] = {
    EventType.QUERY: 13,
    EventType.ROTATE: 8,
    EventType.TABLE_MAP: 8,
    EventType.FORMAT_DESCRIPTION: 84,
}


def parse_header(data: bytes, pos: int | None = None) -> EventHeader:
    if len(data) < HEADER_LENGTH:
        raise TruncatedError(
            f"event header needs {HEADER_LENGTH} bytes, only {len(data)} present", offset=pos
        )
    ts, type_code, server_id, size, log_pos, flags = _header.unpack_from(data, 0)
    return EventHeader(ts, type_code, server_id, size, log_pos, flags, pos)


def version_tuple(version: str) -> tuple[int, int, int]:
    numbers = []
    for part in version.split("-", 1)[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        numbers.append(int(digits) if digits else 0)
    while len(numbers) < 3:
        numbers.append(0)
    return numbers[0], numbers[1], numbers[2]


def _checksum_aware(version: str) -> bool:
    """Servers from MySQL 5.6.1 / MariaDB 5.3 on end their FDE with a checksum-algorithm byte."""
    numbers = version_tuple(version)
    if "mariadb" in version.lower():
        return numbers >= (5, 3, 0)
    return numbers >= (5, 6, 1)


PARSED_MAPS_MAX = 4096  # distinct TABLE_MAP bodies kept parsed (tables x layouts x table ids)


class BinlogParser:
    """Turns the bytes of one event at a time into typed events.

    verify_checksum: check each event's CRC32 when the FDE says checksums are on.
    checksums: force the checksum presence (a dump stream negotiates it up front);
    None follows the FDE.
    """

    def __init__(
        self,
        *,
        verify_checksum: bool = True,
        checksums: bool | None = None,
        source: str | None = None,
    ) -> None:
        self.verify_checksum = verify_checksum
        self._forced_checksums = checksums
        self.source = source
        self.fde: FormatDescriptionEvent | None = None
        self.checksum_alg: int | None = None
        self.post_header_lengths: bytes = b""
        self.table_id_size = 6
        self.mariadb = False
        # Until a FORMAT_DESCRIPTION says otherwise: a current server (MySQL 8.0.21+, MariaDB).
        self.year_signedness = True
        self.table_maps: dict[int, TableMapEvent] = {}
        self._parsed_maps: dict[bytes, TableMapEvent] = {}  # by body, until the next FDE
        self._dispatch: dict[int, Callable[[EventHeader, bytes], Event]] = {
            EventType.FORMAT_DESCRIPTION: self._fde,
            EventType.START_V3: self._start_v3,
            EventType.ROTATE: self._rotate,
            EventType.QUERY: self._query,
            EventType.QUERY_COMPRESSED: self._query,
            EventType.STOP: lambda h, b: StopEvent(h),
            EventType.XID: self._xid,
            EventType.INTVAR: self._intvar,
            EventType.RAND: self._rand,
            EventType.USER_VAR: self._user_var,
            EventType.ROWS_QUERY: self._rows_query,
            EventType.ANNOTATE_ROWS: self._annotate,
            EventType.XA_PREPARE: self._xa_prepare,
            EventType.INCIDENT: self._incident,
            EventType.HEARTBEAT: self._heartbeat,
            EventType.HEARTBEAT_V2: self._heartbeat_v2,
            EventType.GTID: self._gtid,
            EventType.ANONYMOUS_GTID: self._gtid,
            EventType.GTID_TAGGED: self._gtid_tagged,
            EventType.PREVIOUS_GTIDS: self._previous_gtids,
            EventType.TABLE_MAP: self._table_map,
            EventType.TRANSACTION_PAYLOAD: self._payload,
            EventType.MARIADB_GTID: self._maria_gtid,
            EventType.MARIADB_GTID_LIST: self._maria_gtid_list,
            EventType.BINLOG_CHECKPOINT: self._checkpoint,
            EventType.START_ENCRYPTION: self._start_encryption,
        }
        for code in ROWS_TYPES:
            self._dispatch[code] = self._rows

    # ------------------------------------------------------------------ framing

    @property
    def checksums_on(self) -> bool:
        if self._forced_checksums is not None:
            return self._forced_checksums
        return self.checksum_alg == CHECKSUM_CRC32

    def parse(self, data: bytes | memoryview, pos: int | None = None) -> Event:
        """Decode one complete event. `pos` (its offset) is only used in errors and output."""
        if not isinstance(data, bytes):
            data = bytes(data)
        header = parse_header(data, pos)
        try:
            return self._parse(header, data)
        except BinlogError as exc:
            raise exc.with_context(
                source=self.source, offset=pos, event_type=header.type_name
            ) from None
        except GtidError as exc:
            raise MalformedEventError(
                exc.reason, source=self.source, offset=pos, event_type=header.type_name
            ) from exc
        except (IndexError, struct.error, ValueError, UnicodeDecodeError, OverflowError) as exc:
            raise MalformedEventError(
                f"event body does not match its layout: {exc}",
                source=self.source,
                offset=pos,
                event_type=header.type_name,
            ) from exc

    def decode(self, data: bytes | memoryview, pos: int | None = None) -> Iterator[Event]:
        """One event as any reader meets it (a binlog file, the dump stream, a relay segment),
        then the events inside it if it is a TRANSACTION_PAYLOAD. Its offset is `pos` when the
        reader knows it (a file), else the end offset the event carries (`log_pos`) minus its
        size, as the primary wrote it; inner events carry the payload's offset."""
        if not isinstance(data, bytes):
            data = bytes(data)
        if pos is None and len(data) >= HEADER_LENGTH:
            size = int.from_bytes(data[9:13], "little")
            end = int.from_bytes(data[13:17], "little")
            if end and end >= size:
                pos = end - size
        event = self.parse(data, pos)
        yield event
        if isinstance(event, TransactionPayloadEvent):
            yield from self.payload_events(event)

    def _parse(self, header: EventHeader, data: bytes) -> Event:
        if header.event_size != len(data):
            raise MalformedEventError(
                f"event size field says {header.event_size} bytes, got {len(data)}"
            )
        type_code = header.type_code
        if type_code == EventType.FORMAT_DESCRIPTION:
            return self._fde(header, data)
        end = len(data)
        if self.checksums_on:
            if end < HEADER_LENGTH + CHECKSUM_LENGTH:
                raise MalformedEventError("event too short to carry its checksum")
            end -= CHECKSUM_LENGTH
            if self.verify_checksum:
                self._verify(data, end)
        body = data[HEADER_LENGTH:end]
        handler = self._dispatch.get(type_code)
        if handler is not None:
            return handler(header, body)
        if type_code in KNOWN_TYPES:
            return OpaqueEvent(header, body)
        if header.flags & EventFlag.IGNORABLE:
            return OpaqueEvent(header, body)
        raise UnknownEventError(
            f"unknown event type {type_code} without the IGNORABLE flag; refusing to skip it",
            type_code=type_code,
        )

    @staticmethod
    def _verify(data: bytes, end: int) -> None:
        stored = int.from_bytes(data[end : end + CHECKSUM_LENGTH], "little")
        computed = zlib.crc32(data[:end]) & 0xFFFFFFFF
        if stored != computed:
            raise ChecksumError(f"CRC32 mismatch: stored {stored:#010x}, computed {computed:#010x}")

    def _post_header_len(self, type_code: int) -> int:
        lengths = self.post_header_lengths
        if 0 < type_code <= len(lengths):
            return lengths[type_code - 1]
        return _DEFAULT_POST_HEADERS.get(type_code, 0)

    # ------------------------------------------------------------------ control events

    def _fde(self, header: EventHeader, data: bytes) -> FormatDescriptionEvent:
        body = data[HEADER_LENGTH:]
        need(body, 0, 57, "FORMAT_DESCRIPTION fixed part")
        binlog_version = struct.unpack_from("<H", body, 0)[0]
        server_version = body[2:52].split(b"\0", 1)[0].decode("ascii", "replace")
        created = struct.unpack_from("<I", body, 52)[0]
        header_len = body[56]
        rest = body[57:]
        alg = None
        if _checksum_aware(server_version):
            # The FDE always ends with the algorithm byte and a 4-byte checksum slot.
            need(rest, 0, 5, "FORMAT_DESCRIPTION checksum tail")
            alg = rest[-5]
            post_headers = bytes(rest[:-5])
            if alg == CHECKSUM_CRC32 and self.verify_checksum:
                # The server checksums the FDE before it sets the "file in use" flag, which it
                # clears again on close; verify against the bytes as they were summed.
                if header.flags & EventFlag.BINLOG_IN_USE:
                    data = data[:17] + bytes([data[17] & ~EventFlag.BINLOG_IN_USE]) + data[18:]
                self._verify(data, len(data) - CHECKSUM_LENGTH)
        else:
            post_headers = bytes(rest)
        if header_len != HEADER_LENGTH:
            raise UnsupportedError(f"common header length {header_len} (only 19 is supported)")
        if alg not in (None, CHECKSUM_OFF, CHECKSUM_CRC32):
            raise UnsupportedError(f"checksum algorithm {alg} is unknown")
        event = FormatDescriptionEvent(
            header,
            binlog_version=binlog_version,
            server_version=server_version,
            create_timestamp=created,
            common_header_length=header_len,
            post_header_lengths=post_headers,
            checksum_alg=alg,
        )
        self.fde = event
        self.checksum_alg = alg
        self.post_header_lengths = post_headers
        self.mariadb = event.is_mariadb
        self.year_signedness = year_has_signedness_bit(version_tuple(server_version), self.mariadb)
        table_map_post = self._post_header_len(EventType.TABLE_MAP)
        self.table_id_size = 4 if table_map_post == 6 else 6
        self.table_maps.clear()
        self._parsed_maps.clear()  # parsed under the old table id size and YEAR rule
        return event

    def _start_v3(self, header: EventHeader, body: bytes) -> Event:
        return OpaqueEvent(header, body)

    def _rotate(self, header: EventHeader, body: bytes) -> RotateEvent:
        need(body, 0, 8, "ROTATE position")
        position = struct.unpack_from("<Q", body, 0)[0]
        name = body[8:].split(b"\0", 1)[0].decode("utf-8", "replace")
        return RotateEvent(header, position=position, next_file=name)

    def _query(self, header: EventHeader, body: bytes) -> QueryEvent:
        need(body, 0, 13, "QUERY post-header")
        thread_id, exec_time, db_len, error_code, status_len = struct.unpack_from("<IIBHH", body, 0)
        pos = max(self._post_header_len(EventType.QUERY), 13)
        need(body, pos, status_len, "QUERY status variables")
        status = parse_status_vars(body[pos : pos + status_len])
        pos += status_len
        need(body, pos, db_len + 1, "QUERY schema name")
        schema = body[pos : pos + db_len].decode("utf-8", "replace")
        pos += db_len + 1
        raw_query = body[pos:]
        compressed = header.type_code == EventType.QUERY_COMPRESSED
        if compressed:
            raw_query = decompress_mariadb(raw_query)
        return QueryEvent(
            header,
            thread_id=thread_id,
            exec_time=exec_time,
            error_code=error_code,
            schema=schema,
            query=raw_query.decode("utf-8", "replace"),
            status_vars=status,
            compressed=compressed,
        )

    def _xid(self, header: EventHeader, body: bytes) -> XidEvent:
        need(body, 0, 8, "XID")
        return XidEvent(header, xid=struct.unpack_from("<Q", body, 0)[0])

    def _intvar(self, header: EventHeader, body: bytes) -> IntvarEvent:
        need(body, 0, 9, "INTVAR")
        return IntvarEvent(header, kind=body[0], value=struct.unpack_from("<Q", body, 1)[0])

    def _rand(self, header: EventHeader, body: bytes) -> RandEvent:
        need(body, 0, 16, "RAND")
        seed1, seed2 = struct.unpack_from("<QQ", body, 0)
        return RandEvent(header, seed1=seed1, seed2=seed2)

    def _user_var(self, header: EventHeader, body: bytes) -> UserVarEvent:
        from replicad.binlog.query_status import parse_user_var

        return parse_user_var(header, body)

    def _rows_query(self, header: EventHeader, body: bytes) -> RowsQueryEvent:
        # The first byte is a length that overflows for long statements; the server itself
        # ignores it and takes the rest of the event.
        return RowsQueryEvent(header, query=body[1:].decode("utf-8", "replace"))

    def _annotate(self, header: EventHeader, body: bytes) -> AnnotateRowsEvent:
        return AnnotateRowsEvent(header, query=body.decode("utf-8", "replace"))

    def _xa_prepare(self, header: EventHeader, body: bytes) -> XaPrepareEvent:
        need(body, 0, 13, "XA_PREPARE")
        one_phase = bool(body[0])
        format_id, gtrid_len, bqual_len = struct.unpack_from("<iii", body, 1)
        if not (0 <= gtrid_len <= 64 and 0 <= bqual_len <= 64):
            raise MalformedEventError(f"XA id lengths {gtrid_len}/{bqual_len} out of range")
        need(body, 13, gtrid_len + bqual_len, "XA_PREPARE id")
        data = bytes(body[13 : 13 + gtrid_len + bqual_len])
        return XaPrepareEvent(
            header,
            one_phase=one_phase,
            format_id=format_id,
            gtrid=data[:gtrid_len],
            bqual=data[gtrid_len:],
        )

    def _incident(self, header: EventHeader, body: bytes) -> IncidentEvent:
        need(body, 0, 3, "INCIDENT")
        incident = struct.unpack_from("<H", body, 0)[0]
        length = body[2]
        return IncidentEvent(
            header, incident=incident, message=body[3 : 3 + length].decode("utf-8", "replace")
        )

    def _heartbeat(self, header: EventHeader, body: bytes) -> HeartbeatEvent:
        position = header.log_pos
        name = body
        if self.mariadb and header.log_pos == 0 and len(body) >= 8:
            # MariaDB past 4 GiB: the real position is a u64 in front of the file name.
            position = struct.unpack_from("<Q", body, 0)[0]
            name = body[8:]
        return HeartbeatEvent(
            header, log_file=name.decode("utf-8", "replace"), position=position, version=1
        )

    def _heartbeat_v2(self, header: EventHeader, body: bytes) -> HeartbeatEvent:
        pos, end = 0, len(body)
        name, position = "", header.log_pos
        while pos < end:
            kind, pos = read_lenenc(body, pos)
            if kind == 0:
                break
            length, pos = read_lenenc(body, pos)
            need(body, pos, length, f"heartbeat field {kind}")
            if kind == 1:
                name = body[pos : pos + length].decode("utf-8", "replace")
            elif kind == 2:
                position = read_lenenc(body, pos)[0]
            pos += length
        return HeartbeatEvent(header, log_file=name, position=position, version=2)

    def _gtid(self, header: EventHeader, body: bytes) -> GtidEvent:
        need(body, 0, 25, "GTID")
        event = GtidEvent(header, flags=body[0])
        event.uuid = _uuid_text(body[1:17])
        event.gno = struct.unpack_from("<q", body, 17)[0]
        pos = 25
        end = len(body)
        if pos < end and body[pos] == 2 and end - pos >= 17:
            event.logical_timestamps = True
            event.last_committed, event.sequence_number = struct.unpack_from("<qq", body, pos + 1)
            pos += 17
        if end - pos >= 7:
            immediate = int.from_bytes(body[pos : pos + 7], "little")
            pos += 7
            if immediate & (1 << 55):
                immediate &= ~(1 << 55)
                need(body, pos, 7, "GTID original commit timestamp")
                event.original_commit_ts_us = int.from_bytes(body[pos : pos + 7], "little")
                pos += 7
            else:
                event.original_commit_ts_us = immediate
            event.immediate_commit_ts_us = immediate
        if pos < end:
            event.transaction_length, pos = read_lenenc(body, pos)
        if end - pos >= 4:
            immediate_version = struct.unpack_from("<I", body, pos)[0]
            pos += 4
            if immediate_version & (1 << 31):
                immediate_version &= ~(1 << 31)
                need(body, pos, 4, "GTID original server version")
                event.original_server_version = struct.unpack_from("<I", body, pos)[0]
                pos += 4
            else:
                event.original_server_version = immediate_version
            event.immediate_server_version = immediate_version
        if end - pos >= 8:
            event.commit_group_ticket = struct.unpack_from("<Q", body, pos)[0]
        return event

    def _gtid_tagged(self, header: EventHeader, body: bytes) -> GtidEvent:
        info = gtid_mod.decode_gtid_tagged(body)
        return GtidEvent(
            header,
            flags=info.flags,
            uuid=str(info.uuid),
            gno=info.gno,
            tag=info.tag,
            logical_timestamps=True,
            last_committed=info.last_committed,
            sequence_number=info.sequence_number,
            immediate_commit_ts_us=info.immediate_commit_ts_us,
            original_commit_ts_us=info.original_commit_ts_us,
            transaction_length=info.transaction_length,
            immediate_server_version=info.immediate_server_version,
            original_server_version=info.original_server_version,
            commit_group_ticket=info.commit_group_ticket,
        )

    def _previous_gtids(self, header: EventHeader, body: bytes) -> PreviousGtidsEvent:
        return PreviousGtidsEvent(header, gtid_set=gtid_mod.GtidSet.decode(body))

    def _maria_gtid(self, header: EventHeader, body: bytes) -> MariaGtidEvent:
        need(body, 0, 13, "MariaDB GTID")
        seq_no, domain_id, flags = struct.unpack_from("<QIB", body, 0)
        event = MariaGtidEvent(header, seq_no=seq_no, domain_id=domain_id, flags=flags)
        pos = 13
        if flags & MariaGtidEvent.GROUP_COMMIT_ID:
            need(body, pos, 8, "MariaDB GTID commit id")
            event.commit_id = struct.unpack_from("<Q", body, pos)[0]
            pos += 8
        if flags & (MariaGtidEvent.PREPARED_XA | MariaGtidEvent.COMPLETED_XA):
            need(body, pos, 6, "MariaDB GTID XID")
            event.xa_format_id = struct.unpack_from("<i", body, pos)[0]
            gtrid_len, bqual_len = body[pos + 4], body[pos + 5]
            pos += 6
            need(body, pos, gtrid_len + bqual_len, "MariaDB GTID XID data")
            event.xa_gtrid = bytes(body[pos : pos + gtrid_len])
            event.xa_bqual = bytes(body[pos + gtrid_len : pos + gtrid_len + bqual_len])
            pos += gtrid_len + bqual_len
        if pos < len(body):
            # flags_extra (MariaDB 10.8+) and what it announces. The fields above are packed;
            # a body shorter than 19 bytes is zero-padded, which reads as "no extra flags".
            extra = body[pos]
            event.flags_extra = extra
            pos += 1
            if extra & 0x01 and pos < len(body):  # FL_EXTRA_MULTI_ENGINE
                event.extra_engines = body[pos]
                pos += 1
            if extra & 0x06 and len(body) - pos >= 8:  # FL_COMMIT_ALTER / FL_ROLLBACK_ALTER
                event.sa_seq_no = (struct.unpack_from("<Q", body, pos)[0],)
        return event

    def _maria_gtid_list(self, header: EventHeader, body: bytes) -> MariaGtidListEvent:
        info = gtid_mod.decode_gtid_list(body)
        return MariaGtidListEvent(header, flags=info.flags, gtids=list(info.gtids))

    def _checkpoint(self, header: EventHeader, body: bytes) -> BinlogCheckpointEvent:
        need(body, 0, 4, "BINLOG_CHECKPOINT")
        length = struct.unpack_from("<I", body, 0)[0]
        need(body, 4, length, "BINLOG_CHECKPOINT file name")
        return BinlogCheckpointEvent(
            header, log_file=body[4 : 4 + length].decode("utf-8", "replace")
        )

    def _start_encryption(self, header: EventHeader, body: bytes) -> Event:
        raise UnsupportedError(
            "binlog is encrypted (START_ENCRYPTION); read it through the server instead"
        )

    # ------------------------------------------------------------------ rows

    def _table_map(self, header: EventHeader, body: bytes) -> TableMapEvent:
        # Every transaction repeats its tables' TABLE_MAPs byte for byte: a body parsed once
        # serves again under the new header (a map is never changed after parsing; a named
        # copy is a copy). Small transactions spent half of `dump` parsing them.
        key = body if isinstance(body, bytes) else bytes(body)
        parsed = self._parsed_maps.get(key)
        if parsed is None:
            event = parse_table_map(
                header, body, self.table_id_size, self.mariadb, year_signedness=self.year_signedness
            )
            if len(self._parsed_maps) >= PARSED_MAPS_MAX:
                del self._parsed_maps[next(iter(self._parsed_maps))]
            self._parsed_maps[key] = event
        else:
            event = replace(parsed, header=header)
        self.table_maps[event.table_id] = event
        return event

    def _rows(self, header: EventHeader, body: bytes) -> RowsEvent:
        event = parse_rows(
            header,
            body,
            self.table_id_size,
            self._post_header_len(header.type_code),
            self.table_maps,
        )
        return event

    # ------------------------------------------------------------------ payload

    def _payload(self, header: EventHeader, body: bytes) -> TransactionPayloadEvent:
        compression, size, uncompressed, start = parse_payload_header(body)
        return TransactionPayloadEvent(
            header,
            compression=compression,
            payload_size=size,
            uncompressed_size=uncompressed,
            payload=bytes(body[start : start + size]),
        )

    def payload_events(self, event: TransactionPayloadEvent) -> Iterator[Event]:
        """Decode the events inside a TRANSACTION_PAYLOAD. They carry no checksum and share
        this parser's FDE and table maps."""
        saved = self._forced_checksums
        self._forced_checksums = False
        try:
            for raw in iter_payload_events(
                event.compression, event.payload, event.uncompressed_size
            ):
                inner = parse_header(raw, event.header.pos)
                try:
                    yield self._parse(inner, raw)
                except BinlogError as exc:
                    raise exc.with_context(
                        source=self.source,
                        offset=event.header.pos,
                        event_type=f"TRANSACTION_PAYLOAD/{inner.type_name}",
                    ) from None
        except BinlogError as exc:
            raise exc.with_context(source=self.source, offset=event.header.pos) from None
        finally:
            self._forced_checksums = saved


def _uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
