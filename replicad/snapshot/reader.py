"""The initial snapshot: every included table read inside one consistent-snapshot transaction
whose binlog position is known (docs/snapshots.md).

MariaDB: `START TRANSACTION WITH CONSISTENT SNAPSHOT` and, in the same session, the status
variables `binlog_snapshot_file` / `binlog_snapshot_position` name the binlog position of
exactly that read view (and `BINLOG_GTID_POS` the GTID state there). The stream then starts at
that position: every change committed after the read view is in the binlog after it, every
change before it is in the rows read. No FLUSH TABLES WITH READ LOCK, no global lock.

MySQL names no such position, so `snapshot.locking: minimal` (Debezium's default) stops commits
with FLUSH TABLES WITH READ LOCK just while the view opens and SHOW BINARY LOG STATUS names the
binlog position and executed GTID set, then UNLOCK TABLES before any row is read: nothing can
commit between the view and the position, and writers wait milliseconds, not the snapshot.

A table is read in chunks of `chunk_rows` rows in the order of its primary key (or of a unique
key over NOT NULL columns), each chunk starting after the last key of the previous one, so
memory holds one chunk and a large table is never one huge result. A table with neither is read
in chunks by LIMIT/OFFSET inside the same read view (the same rows in the same order, each
chunk costs a scan up to its offset: said in the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from replicad.binlog.changes import ReadRows
from replicad.binlog.column_types import TableDescription
from replicad.binlog.gtid import GtidSet, MariaGtidPosition
from replicad.binlog.position import Position
from replicad.config import SnapshotConfig
from replicad.errors import ReplicadError, ServerError
from replicad.protocol.commands import cell_text, parse_text_row
from replicad.protocol.transport import AsyncConnection
from replicad.snapshot.columns import (
    SnapshotColumn,
    SnapshotError,
    column_of,
    description_of,
    quote_name,
)
from replicad.source.binlog_status import binlog_status
from replicad.source.schema_model import SYSTEM_SCHEMAS
from replicad.source.stream import ServerInfo

log = structlog.get_logger("replicad.snapshot")

_EXCLUDED = ", ".join(f"'{s}'" for s in SYSTEM_SCHEMAS)
_COLUMNS_SQL = (
    "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE, "
    "c.IS_NULLABLE, c.NUMERIC_PRECISION, c.NUMERIC_SCALE, c.DATETIME_PRECISION, "
    "c.CHARACTER_OCTET_LENGTH, c.CHARACTER_SET_NAME, c.COLLATION_NAME "
    "FROM information_schema.COLUMNS c JOIN information_schema.TABLES t "
    "ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME "
    f"WHERE t.TABLE_TYPE = 'BASE TABLE' AND c.TABLE_SCHEMA NOT IN ({_EXCLUDED}) "
    "ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION"
)
_UNIQUE_KEYS_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, COLUMN_NAME, NULLABLE "
    "FROM information_schema.STATISTICS "
    f"WHERE NON_UNIQUE = 0 AND TABLE_SCHEMA NOT IN ({_EXCLUDED}) "
    "ORDER BY TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX"
)


@dataclass(frozen=True, slots=True)
class TablePlan:
    db: str
    table: str
    columns: tuple[SnapshotColumn, ...]
    primary_key: tuple[str, ...]
    chunk_key: tuple[str, ...]  # the primary key, else a unique NOT NULL key, else ()
    description: TableDescription
    # Each column's text -> value function, made once: every chunk's reads use them.
    parsers: tuple[Any, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parsers", tuple(c.parser() for c in self.columns))

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def by_name(self) -> dict[str, SnapshotColumn]:
        return {c.name: c for c in self.columns}

    @property
    def select(self) -> str:
        return ", ".join(c.select for c in self.columns)


@dataclass(slots=True)
class ReadView:
    """An open initial snapshot: its connection inside the consistent read view, the binlog
    position of the view, the tables to read, and whether an interruption can resume (the
    signal table is usable, so the rest can be read with watermarks after a restart)."""

    conn: AsyncConnection
    position: Position
    info: ServerInfo
    plans: list[TablePlan]
    resumable: bool


@dataclass(slots=True)
class TableProgress:
    table: str
    rows: int = 0
    chunks: int = 0
    done: bool = False
    started: float = 0.0

    def to_json(self) -> dict[str, Any]:
        elapsed = max(time.monotonic() - self.started, 1e-9) if self.started else 0.0
        return {
            "table": self.table,
            "rows": self.rows,
            "chunks": self.chunks,
            "done": self.done,
            "rows_per_s": round(self.rows / elapsed) if elapsed else 0,
        }


def _text(value: object) -> str | None:
    return None if value is None else cell_text(value)  # type: ignore[arg-type]


def _named(result: Any) -> list[dict[str, str | None]]:
    names = result.column_names
    return [{n: _text(v) for n, v in zip(names, row, strict=True)} for row in result.rows]


async def plan_tables(
    conn: AsyncConnection, info: ServerInfo, includes: Callable[[str, str], bool]
) -> list[TablePlan]:
    """The included base tables with their columns and chunk keys, from information_schema."""
    columns: dict[tuple[str, str], list[SnapshotColumn]] = {}
    for row in _named(await conn.query(_COLUMNS_SQL)):
        key = (str(row["TABLE_SCHEMA"]), str(row["TABLE_NAME"]))
        if includes(*key):
            columns.setdefault(key, []).append(column_of(row, info.mariadb))
    unique: dict[tuple[str, str], dict[str, list[tuple[str, bool]]]] = {}
    for row in _named(await conn.query(_UNIQUE_KEYS_SQL)):
        key = (str(row["TABLE_SCHEMA"]), str(row["TABLE_NAME"]))
        if key in columns:
            index = unique.setdefault(key, {}).setdefault(str(row["INDEX_NAME"]), [])
            index.append((str(row["COLUMN_NAME"]), row["NULLABLE"] == "YES"))
    plans = []
    for (db, table), cols in sorted(columns.items()):
        indexes = unique.get((db, table), {})
        primary = tuple(name for name, _ in indexes.get("PRIMARY", []))
        chunk_key = primary
        if not chunk_key:  # a unique key over NOT NULL columns orders the rows as well
            for _, parts in sorted(indexes.items()):
                if not any(nullable for _, nullable in parts):
                    chunk_key = tuple(name for name, _ in parts)
                    break
        for column in cols:
            column.parser()  # a column no snapshot can read exactly fails now, not mid-table
        plans.append(
            TablePlan(
                db, table, tuple(cols), primary, chunk_key, description_of(db, table, cols, primary)
            )
        )
    return plans


# Server error numbers FLUSH TABLES WITH READ LOCK fails with.
_ER_SPECIFIC_ACCESS_DENIED = 1227  # neither RELOAD nor FLUSH_TABLES
_ER_LOCK_WAIT_TIMEOUT = 1205  # not granted within lock_wait_timeout


class SnapshotLockTimeoutError(ReplicadError):
    """The global read lock was not granted within `snapshot.lock_timeout_s` (a long statement
    or a DDL waiting for a metadata lock held it off). Transient (75): the lock request is
    withdrawn, writers go on, and the next start tries again."""


async def begin(
    conn: AsyncConnection, info: ServerInfo, settings: SnapshotConfig | None = None
) -> Position:
    """Open the consistent read view and return the binlog position it corresponds to
    (`settings`: snapshot.locking and lock_timeout_s, which MySQL needs; None: no lock)."""
    await conn.execute("SET SESSION time_zone = '+00:00'")
    await conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    if info.mariadb:
        if settings is not None and settings.locking != "none":
            note = "MariaDB names the read view's binlog position: no lock is taken"
            log.info("snapshot_lock_not_needed", note=note)
        position = await _open_mariadb_view(conn)
    else:
        position = await _open_mysql_view(conn, info, settings or SnapshotConfig())
    # Values of text columns in their own character set, undecoded (snapshot/columns.py).
    await conn.execute("SET SESSION character_set_results = binary")
    return position


async def _open_mariadb_view(conn: AsyncConnection) -> Position:
    """The read view and the position MariaDB names for it (no lock)."""
    await conn.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    status = {
        cell_text(row[0]).lower(): cell_text(row[1])
        for row in (await conn.query("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")).rows
    }
    file, pos = status.get("binlog_snapshot_file", ""), status.get("binlog_snapshot_position")
    if not file or pos is None:
        raise SnapshotError(
            "the primary did not report the binlog position of the consistent snapshot "
            "(binlog_snapshot_file/position); is binary logging on?"
        )
    quoted = file.replace("\\", "\\\\").replace("'", "\\'")
    result = await conn.query(f"SELECT BINLOG_GTID_POS('{quoted}', {int(pos)})")
    gtids = result.rows[0][0] if result.rows else None
    mariadb_gtids = None if gtids is None else MariaGtidPosition.parse(cell_text(gtids))
    return Position(file, int(pos), None, mariadb_gtids)


async def _open_mysql_view(
    conn: AsyncConnection, info: ServerInfo, settings: SnapshotConfig
) -> Position:
    """The read view opened, and its position read, under FLUSH TABLES WITH READ LOCK: no
    transaction can commit in between, so the position is exactly the view's. The lock is
    released before this returns (before any row is read); the transaction stays open."""
    if settings.locking != "minimal":
        raise SnapshotError(
            "snapshot.initial_method: consistent on MySQL needs snapshot.locking: minimal: "
            "MySQL names no binlog position for a read view, so writers are stopped with "
            "FLUSH TABLES WITH READ LOCK (RELOAD privilege) for the milliseconds it takes to "
            "open one and read the position; or use initial_method: watermarks (no lock)",
            key="snapshot.locking",
            value=settings.locking,
        )
    await conn.execute(f"SET SESSION lock_wait_timeout = {int(settings.lock_timeout_s)}")
    asked = time.monotonic()
    await _global_read_lock(conn, settings.lock_timeout_s)
    locked = time.monotonic()
    try:
        await conn.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        position = await _mysql_binlog_position(conn, info)
    except BaseException:
        with contextlib.suppress(ReplicadError):  # a lost connection has released it anyway
            await conn.execute("UNLOCK TABLES")
        raise
    # UNLOCK TABLES ends no transaction that FLUSH TABLES WITH READ LOCK preceded: the read
    # view stays open, and writers go on.
    await conn.execute("UNLOCK TABLES")
    released = time.monotonic()
    # Row reads wait for metadata locks as long as the server's default says, not the lock's.
    await conn.execute("SET SESSION lock_wait_timeout = DEFAULT")
    log.info(
        "snapshot_global_lock",
        waited_ms=round((locked - asked) * 1000, 1),
        held_ms=round((released - locked) * 1000, 1),
        position=str(position),
    )
    return position


async def _global_read_lock(conn: AsyncConnection, timeout_s: int) -> None:
    """FLUSH TABLES WITH READ LOCK, its two expected refusals as errors that say what to do."""
    try:
        await conn.execute("FLUSH TABLES WITH READ LOCK")
    except ServerError as exc:
        if exc.code == _ER_SPECIFIC_ACCESS_DENIED:
            raise SnapshotError(
                "snapshot.locking: minimal takes FLUSH TABLES WITH READ LOCK, which needs the "
                "RELOAD privilege (or FLUSH_TABLES, MySQL 8.0 and later): GRANT RELOAD ON *.* TO "
                "the source user, or use snapshot.initial_method: watermarks (no lock)",
                key="snapshot.locking",
                server=exc.message,
            ) from None
        if exc.code == _ER_LOCK_WAIT_TIMEOUT:
            raise SnapshotLockTimeoutError(
                "FLUSH TABLES WITH READ LOCK was not granted within snapshot.lock_timeout_s: "
                "a long-running statement (or a DDL waiting for a transaction's metadata "
                "lock) kept it off, and writers waited behind it meanwhile; retried at the "
                "next start",
                lock_timeout_s=timeout_s,
            ) from None
        raise


async def _mysql_binlog_position(conn: AsyncConnection, info: ServerInfo) -> Position:
    """The binlog file, offset and executed GTID set now (under the lock: the view's)."""
    status = await binlog_status(conn)
    if status is None:
        raise SnapshotError("the primary has binary logging off (its binlog status is empty)")
    if not info.gtid_mode:
        return Position(status.file, status.pos)  # file:pos is all there is
    # Executed_Gtid_Set: exactly the GTIDs at file:pos, so the stream resumes by GTID.
    return Position(status.file, status.pos, GtidSet.parse(status.executed_gtids or ""), None)


async def end(conn: AsyncConnection) -> None:
    try:
        await conn.execute("ROLLBACK")
    except ServerError:
        pass


# A table's first chunk: enough rows to measure their width, few enough that wide rows fit.
FIRST_CHUNK_ROWS = 100


def next_chunk_rows(packets: list[bytes], chunk_rows: int, chunk_bytes: int) -> int:
    """The next chunk's size: as many rows of the width just read as fit `chunk_bytes`,
    at most `chunk_rows`, at least one."""
    width = max(1, sum(map(len, packets)) // max(1, len(packets)))
    return max(1, min(chunk_rows, chunk_bytes // width))


async def read_chunks(
    conn: AsyncConnection, plan: TablePlan, chunk_rows: int, chunk_bytes: int
) -> AsyncIterator[list[bytes]]:
    """The table's rows in chunks, each row its text-protocol packet (`row_parser` parses
    one; the compiled read path writes them as messages unparsed). A chunk holds at most
    `chunk_rows` rows and about `chunk_bytes` bytes of them (`next_chunk_rows`)."""
    key = plan.chunk_key
    after: list[str] | None = None
    offset = 0
    limit = min(chunk_rows, FIRST_CHUNK_ROWS)
    parse = row_parser(plan)
    if not key:
        log.warning(
            "snapshot_table_without_key",
            table=plan.name,
            note="read by LIMIT/OFFSET inside the read view: each chunk scans up to its offset",
        )
    while True:
        sql = chunk_sql(plan, after=after, limit=limit, offset=0 if key else offset)
        try:
            result = await conn.query(sql, packets=True)
        except ServerError as exc:
            raise SnapshotError(f"reading the table failed: {exc}", table=plan.name) from None
        packets = result.packets
        if len(packets) < limit:  # the table's end
            if packets:
                yield packets
            return
        if key:
            after = row_key(plan, parse(packets[-1]))
        offset += len(packets)
        limit = next_chunk_rows(packets, chunk_rows, chunk_bytes)
        yield packets


async def read_ahead(
    chunks: AsyncIterator[list[bytes]],
) -> AsyncGenerator[list[bytes], None]:
    """The chunks of `chunks`, the next one read while the caller handles the last: the
    server runs the next chunk's query while this process writes the messages of the one
    before (one more chunk in memory; the caller's work need not yield to the event loop).
    When the caller stops early, a read in flight is cancelled: the read view's connection
    is closed after it anyway."""
    queue: asyncio.Queue[list[bytes] | BaseException | None] = asyncio.Queue(maxsize=1)

    async def fill() -> None:
        try:
            async for chunk in chunks:
                await queue.put(chunk)
                await queue.join()  # taken: only then the next read starts
        except Exception as exc:  # raised where the caller takes the next chunk
            await queue.put(exc)
        else:
            await queue.put(None)

    task = asyncio.create_task(fill())
    try:
        while (item := await queue.get()) is not None:
            queue.task_done()
            if isinstance(item, BaseException):
                raise item
            await asyncio.sleep(0)  # the next read sends its query before this chunk's work
            yield item
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def chunk_sql(
    plan: TablePlan,
    *,
    after: Sequence[str] | None = None,
    where: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> str:
    """The SELECT of one chunk: the rows after the key literals `after` (and matching
    `where`), in key order, at most `limit` of them (None: all); a table without a chunk key
    is paged by `offset` instead."""
    conditions = [f"({where})"] if where else []
    if after is not None and plan.chunk_key:
        conditions.append(range_after(plan.chunk_key, after))
    sql = f"SELECT {plan.select} FROM {quote_name(plan.db)}.{quote_name(plan.table)}"
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
    if plan.chunk_key:
        sql += " ORDER BY " + ", ".join(quote_name(k) for k in plan.chunk_key)
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    if offset:
        sql += f" OFFSET {int(offset)}"
    return sql


def row_parser(plan: TablePlan) -> Callable[[bytes], dict[str, Any]]:
    """A row packet of `plan.select` -> the row as the binlog decoders give it."""
    names = tuple(plan.column_names)
    parsers = plan.parsers
    undecoded = (False,) * len(names)

    def parse(packet: bytes) -> dict[str, Any]:
        values = parse_text_row(packet, names, undecoded)
        return {
            name: None if raw is None else parse_value(raw)
            for name, parse_value, raw in zip(names, parsers, values, strict=True)
        }

    return parse


def key_parser(plan: TablePlan, key: Sequence[str]) -> Callable[[bytes], tuple[Any, ...]]:
    """A row packet of `plan.select` -> its values of the columns `key` (the others are not
    parsed), as the binlog decoders give them."""
    names = tuple(plan.column_names)
    parsers = plan.parsers
    undecoded = (False,) * len(names)
    wanted = [(names.index(k), parsers[names.index(k)]) for k in key]

    def parse(packet: bytes) -> tuple[Any, ...]:
        values = parse_text_row(packet, names, undecoded)
        return tuple(None if values[i] is None else p(values[i]) for i, p in wanted)

    return parse


def row_key(plan: TablePlan, row: dict[str, Any]) -> list[str]:
    """The chunk key of a read row as SQL literals (what progress stores)."""
    by_name = plan.by_name
    return [by_name[k].literal(row[k]) for k in plan.chunk_key]


def range_after(key: Sequence[str], literals: Sequence[str]) -> str:
    """Rows after the key `literals` in key order: (k1 > v1) OR (k1 = v1 AND k2 > v2) OR ...
    (this form, unlike a row comparison, is a range scan on MariaDB)."""
    pairs = [(quote_name(k), v) for k, v in zip(key, literals, strict=True)]
    terms = []
    for i in range(len(pairs)):
        equal = [f"{name} = {value}" for name, value in pairs[:i]]
        name, value = pairs[i]
        terms.append("(" + " AND ".join([*equal, f"{name} > {value}"]) + ")")
    return "(" + " OR ".join(terms) + ")"


def initial_marker(
    *, first_table: bool, last_table: bool, first_in_table: bool, last_in_table: bool
) -> str:
    """`source.snapshot` of an initial snapshot's read, as Debezium marks them (its
    SnapshotRecord): "last" on the last table's last row, "first" on the first table's first,
    "last_in_data_collection"/"first_in_data_collection" on the other tables' last and first
    rows, "true" between. A consumer waiting for a table's (or the whole snapshot's) end
    reads the same marks from either connector."""
    if last_in_table and last_table:
        return "last"
    if first_in_table and first_table:
        return "first"
    if last_in_table:
        return "last_in_data_collection"
    if first_in_table:
        return "first_in_data_collection"
    return "true"


def initial_reads(
    plan: TablePlan,
    packets: list[bytes],
    at: tuple[str | None, int | None],
    server_id: int,
    ts_ms: int,
    first_row: int,
    *,
    first_table: bool,
    last_table: bool,
    starts_table: bool,
    ends_table: bool,
) -> list[ReadRows]:
    """Consecutive rows of one table of the initial snapshot (coordinates and numbering as
    `read_rows`), in runs that share their marker (`initial_marker`: the table's first and
    last row have their own)."""
    count = len(packets)
    cuts = [0]
    if starts_table and count > 1:
        cuts.append(1)
    if ends_table and count - 1 > cuts[-1]:
        cuts.append(count - 1)
    cuts.append(count)
    return [
        read_rows(
            plan,
            packets[start:end],
            at,
            server_id,
            ts_ms,
            first_row + start,
            initial_marker(
                first_table=first_table,
                last_table=last_table,
                first_in_table=starts_table and start == 0,
                last_in_table=ends_table and end == count,
            ),
        )
        for start, end in itertools.pairwise(cuts)
        if end > start
    ]


def read_rows(
    plan: TablePlan,
    packets: list[bytes],
    at: tuple[str | None, int | None],
    server_id: int,
    ts_ms: int,
    first_row: int,
    marker: str = "incremental",
) -> ReadRows:
    """Row packets of `plan.select` as reads (op "r") at binlog coordinates `at` (the
    snapshot's position, or an incremental chunk's high watermark), numbered from
    `first_row`: the row counts the table's rows, so `(file, pos, row, op)` stays unique
    per table."""
    return ReadRows(
        plan.description,
        plan.primary_key,
        packets,
        row_parser(plan),
        plan.parsers,
        at[0],
        at[1],
        server_id,
        ts_ms,
        first_row,
        marker,
    )
