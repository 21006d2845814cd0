"""Typed binlog events. Plain data: the parser fills them, nothing here does I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replicad.binlog.gtid import GtidSet, MariaGtid


class EventType(IntEnum):
    UNKNOWN = 0
    START_V3 = 1
    QUERY = 2
    STOP = 3
    ROTATE = 4
    INTVAR = 5
    LOAD = 6
    SLAVE = 7
    CREATE_FILE = 8
    APPEND_BLOCK = 9
    EXEC_LOAD = 10
    DELETE_FILE = 11
    NEW_LOAD = 12
    RAND = 13
    USER_VAR = 14
    FORMAT_DESCRIPTION = 15
    XID = 16
    BEGIN_LOAD_QUERY = 17
    EXECUTE_LOAD_QUERY = 18
    TABLE_MAP = 19
    PRE_GA_WRITE_ROWS = 20
    PRE_GA_UPDATE_ROWS = 21
    PRE_GA_DELETE_ROWS = 22
    WRITE_ROWS_V1 = 23
    UPDATE_ROWS_V1 = 24
    DELETE_ROWS_V1 = 25
    INCIDENT = 26
    HEARTBEAT = 27
    IGNORABLE = 28
    ROWS_QUERY = 29
    WRITE_ROWS = 30
    UPDATE_ROWS = 31
    DELETE_ROWS = 32
    GTID = 33
    ANONYMOUS_GTID = 34
    PREVIOUS_GTIDS = 35
    TRANSACTION_CONTEXT = 36
    VIEW_CHANGE = 37
    XA_PREPARE = 38
    PARTIAL_UPDATE_ROWS = 39
    TRANSACTION_PAYLOAD = 40
    HEARTBEAT_V2 = 41
    GTID_TAGGED = 42
    # MariaDB
    ANNOTATE_ROWS = 160
    BINLOG_CHECKPOINT = 161
    MARIADB_GTID = 162
    MARIADB_GTID_LIST = 163
    START_ENCRYPTION = 164
    QUERY_COMPRESSED = 165
    WRITE_ROWS_COMPRESSED_V1 = 166
    UPDATE_ROWS_COMPRESSED_V1 = 167
    DELETE_ROWS_COMPRESSED_V1 = 168
    WRITE_ROWS_COMPRESSED = 169
    UPDATE_ROWS_COMPRESSED = 170
    DELETE_ROWS_COMPRESSED = 171


KNOWN_TYPES = frozenset(int(t) for t in EventType if t != EventType.UNKNOWN)


class EventFlag:
    BINLOG_IN_USE = 0x0001
    ARTIFICIAL = 0x0020
    RELAY_LOG = 0x0040
    IGNORABLE = 0x0080


@dataclass(slots=True)
class EventHeader:
    timestamp: int
    type_code: int
    server_id: int
    event_size: int
    log_pos: int  # end offset as the server wrote it; 0 in artificial/payload/some MariaDB events
    flags: int
    pos: int | None = None  # where the event starts in its file/stream, when known

    @property
    def next_pos(self) -> int | None:
        return None if self.pos is None else self.pos + self.event_size

    @property
    def type_name(self) -> str:
        try:
            return EventType(self.type_code).name
        except ValueError:
            return f"UNKNOWN_{self.type_code}"


@dataclass(slots=True)
class Event:
    header: EventHeader


@dataclass(slots=True)
class OpaqueEvent(Event):
    """A known event type with nothing a CDC reader needs, or an unknown IGNORABLE one."""

    body: bytes = b""


@dataclass(slots=True)
class FormatDescriptionEvent(Event):
    binlog_version: int = 4
    server_version: str = ""
    create_timestamp: int = 0
    common_header_length: int = 19
    post_header_lengths: bytes = b""
    checksum_alg: int | None = None  # 0 off, 1 CRC32, None when the server predates checksums

    @property
    def is_mariadb(self) -> bool:
        return "mariadb" in self.server_version.lower()


@dataclass(slots=True)
class RotateEvent(Event):
    position: int = 4
    next_file: str = ""

    @property
    def artificial(self) -> bool:
        return bool(self.header.flags & 0x20) or self.header.log_pos == 0


@dataclass(slots=True)
class StopEvent(Event):
    pass


@dataclass(slots=True)
class QueryEvent(Event):
    thread_id: int = 0
    exec_time: int = 0
    error_code: int = 0
    schema: str = ""
    query: str = ""
    status_vars: dict[str, Any] = field(default_factory=dict)
    compressed: bool = False


@dataclass(slots=True)
class XidEvent(Event):
    xid: int = 0


@dataclass(slots=True)
class IntvarEvent(Event):
    kind: int = 0  # 1 LAST_INSERT_ID, 2 INSERT_ID
    value: int = 0

    @property
    def kind_name(self) -> str:
        return {1: "LAST_INSERT_ID", 2: "INSERT_ID"}.get(self.kind, f"INVALID_{self.kind}")


@dataclass(slots=True)
class RandEvent(Event):
    seed1: int = 0
    seed2: int = 0


@dataclass(slots=True)
class UserVarEvent(Event):
    name: str = ""
    is_null: bool = True
    value_type: int = 0  # 0 STRING, 1 REAL, 2 INT, 3 ROW, 4 DECIMAL
    charset: int = 0
    value: Any = None
    flags: int = 0  # bit 0: unsigned integer


@dataclass(slots=True)
class RowsQueryEvent(Event):
    query: str = ""


@dataclass(slots=True)
class AnnotateRowsEvent(Event):
    query: str = ""


@dataclass(slots=True)
class XaPrepareEvent(Event):
    one_phase: bool = False
    format_id: int = 0
    gtrid: bytes = b""
    bqual: bytes = b""


@dataclass(slots=True)
class IncidentEvent(Event):
    incident: int = 0
    message: str = ""


@dataclass(slots=True)
class HeartbeatEvent(Event):
    """HEARTBEAT (27) and HEARTBEAT_V2 (41): the primary's current file and position."""

    log_file: str = ""
    position: int = 0
    version: int = 1


@dataclass(slots=True)
class GtidEvent(Event):
    """MySQL GTID (33) / ANONYMOUS_GTID (34) / GTID_TAGGED (42)."""

    flags: int = 0  # bit 0: may have DDL that cannot be rolled back
    uuid: str = ""
    gno: int = 0
    tag: str = ""
    logical_timestamps: bool = False
    last_committed: int | None = None
    sequence_number: int | None = None
    immediate_commit_ts_us: int | None = None
    original_commit_ts_us: int | None = None
    transaction_length: int | None = None
    immediate_server_version: int | None = None
    original_server_version: int | None = None
    commit_group_ticket: int | None = None

    @property
    def anonymous(self) -> bool:
        return self.header.type_code == EventType.ANONYMOUS_GTID

    @property
    def gtid(self) -> str | None:
        if self.anonymous:
            return None
        return f"{self.uuid}:{self.tag}:{self.gno}" if self.tag else f"{self.uuid}:{self.gno}"


@dataclass(slots=True)
class PreviousGtidsEvent(Event):
    gtid_set: GtidSet | None = None


@dataclass(slots=True)
class TransactionPayloadEvent(Event):
    compression: int = 0  # 0 zstd, 255 none
    payload_size: int = 0
    uncompressed_size: int = 0
    payload: bytes = b""

    @property
    def compression_name(self) -> str:
        return {0: "ZSTD", 255: "NONE"}.get(self.compression, f"UNKNOWN_{self.compression}")


@dataclass(slots=True)
class MariaGtidEvent(Event):
    seq_no: int = 0
    domain_id: int = 0
    flags: int = 0
    commit_id: int | None = None
    xa_format_id: int | None = None
    xa_gtrid: bytes | None = None
    xa_bqual: bytes | None = None
    flags_extra: int | None = None
    extra_engines: int | None = None
    sa_seq_no: tuple[int, ...] = ()

    STANDALONE = 0x01
    GROUP_COMMIT_ID = 0x02
    TRANSACTIONAL = 0x04
    ALLOW_PARALLEL = 0x08
    WAITED = 0x10
    DDL = 0x20
    PREPARED_XA = 0x40
    COMPLETED_XA = 0x80

    @property
    def gtid(self) -> str:
        return f"{self.domain_id}-{self.header.server_id}-{self.seq_no}"

    @property
    def standalone(self) -> bool:
        return bool(self.flags & self.STANDALONE)


@dataclass(slots=True)
class MariaGtidListEvent(Event):
    flags: int = 0
    gtids: list[MariaGtid] = field(default_factory=list)


@dataclass(slots=True)
class BinlogCheckpointEvent(Event):
    log_file: str = ""
