"""The I/O of incremental snapshots (snapshot/incremental.py has the algorithm): a connection
of its own that writes the low and high watermarks to the signal table and reads one chunk
between them, and the checks `replicad snapshot request` runs before it queues anything.

The signal table (docs/snapshots.md) holds one row per pipeline and watermark kind; each
watermark is a REPLACE of that row with the window's id, so the table never grows. replicad
reads its changes from the binlog and never publishes them.
"""

from __future__ import annotations

import structlog

from replicad.config import SnapshotSignalConfig
from replicad.errors import ServerError
from replicad.protocol.transport import AsyncConnection
from replicad.snapshot.columns import quote_name
from replicad.snapshot.incremental import SnapshotRequest, SnapshotRequestError, Window
from replicad.snapshot.reader import (
    TablePlan,
    chunk_sql,
    key_parser,
    plan_tables,
    row_key,
    row_parser,
)
from replicad.source.stream import ServerInfo

log = structlog.get_logger("replicad.snapshot")
ER_NO_SUCH_TABLE = 1146


def signal_ddl(signal: SnapshotSignalConfig) -> str:
    return (
        f"CREATE TABLE {quote_name(signal.database)}.{quote_name(signal.table)} ("
        "id VARCHAR(128) NOT NULL PRIMARY KEY, kind VARCHAR(16) NOT NULL, "
        "window_id VARCHAR(64) NOT NULL, "
        "at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE=InnoDB"
    )


class ChunkReader:
    """Writes watermarks and reads chunks for the pipeline's incremental snapshots."""

    def __init__(
        self, conn: AsyncConnection, info: ServerInfo, signal: SnapshotSignalConfig, pipeline: str
    ) -> None:
        self.conn = conn
        self.info = info
        self.signal = signal
        self.pipeline = pipeline
        self._table = f"{quote_name(signal.database)}.{quote_name(signal.table)}"

    async def prepare(self) -> None:
        await self.conn.execute("SET SESSION time_zone = '+00:00'")
        await self.conn.execute("SET SESSION autocommit = 1")
        await self.conn.execute("SET SESSION character_set_results = binary")

    async def plan(self, request: SnapshotRequest) -> TablePlan:
        """The requested table's plan; an unknown (or invisible) table is refused."""
        target = request.db_table
        plans = await plan_tables(self.conn, self.info, lambda db, table: (db, table) == target)
        if not plans:
            raise SnapshotRequestError(
                "no such table (or the source user may not read it)", table=request.table
            )
        return plans[0]

    async def check(self, request: SnapshotRequest) -> TablePlan:
        """Everything a request needs, tried without emitting anything: the table, the
        condition, the signal table and the right to write it (inside a transaction that is
        rolled back, so nothing reaches the binlog)."""
        plan = await self.plan(request)
        source = f"{quote_name(plan.db)}.{quote_name(plan.table)}"
        if request.where:
            try:
                await self.conn.query(f"SELECT 1 FROM {source} WHERE ({request.where}) LIMIT 0")
            except ServerError as exc:
                raise SnapshotRequestError(
                    f"the condition is not valid for the table: {exc}",
                    table=request.table,
                    where=request.where,
                ) from None
        await self.check_signal(request.table)
        return plan

    async def check_signal(self, table: str | None = None) -> None:
        """The signal table exists and the source user may write it: tried inside a
        transaction that is rolled back, so nothing reaches the binlog."""
        try:
            await self.conn.execute("START TRANSACTION")
            await self._write("check", "check")
        except ServerError as exc:
            name = f"{self.signal.database}.{self.signal.table}"
            # Without the grant the server says "denied" whether or not the table exists.
            missing = exc.code == ER_NO_SUCH_TABLE or not await self._signal_exists()
            fix = (
                f"create it with: {signal_ddl(self.signal)}; and grant the source user "
                "INSERT, UPDATE, DELETE on it"
                if missing
                else "grant the source user INSERT, UPDATE, DELETE on it"
            )
            raise SnapshotRequestError(
                f"cannot write the signal table {name}: {exc.message}; {fix}",
                table=table,
            ) from None
        finally:
            try:
                await self.conn.execute("ROLLBACK")
            except ServerError:
                pass

    async def read_window(
        self,
        plan: TablePlan,
        window: Window,
        after: list[str] | None,
        where: str | None,
        chunk_rows: int | None,
    ) -> None:
        """Low watermark, the chunk, high watermark. `chunk_rows` None: the whole table in
        one read (a table with no key to order chunks by)."""
        await self._write("low", window.id)
        rows, last = await self._chunk(plan, after, where, chunk_rows)
        key_of = key_parser(plan, window.key)
        window.rows, window.keys = rows, [key_of(row) for row in rows]
        window.after = last
        window.full = chunk_rows is not None and len(rows) == chunk_rows
        await self._write("high", window.id)
        log.info(
            "snapshot_chunk_read",
            table=plan.name,
            window=window.id,
            rows=len(rows),
            after=after,
        )

    async def _chunk(
        self, plan: TablePlan, after: list[str] | None, where: str | None, limit: int | None
    ) -> tuple[list[bytes], list[str] | None]:
        """The chunk's row packets and the key literals of its last row."""
        sql = chunk_sql(plan, after=after, where=where, limit=limit)
        try:
            result = await self.conn.query(sql, packets=True)
        except ServerError as exc:
            raise SnapshotRequestError(
                f"reading a chunk failed: {exc}", table=plan.name, where=where
            ) from None
        rows = result.packets
        last = row_key(plan, row_parser(plan)(rows[-1])) if rows and plan.chunk_key else after
        return rows, last

    async def _signal_exists(self) -> bool:
        db = self.signal.database.replace("'", "''")
        table = self.signal.table.replace("'", "''")
        result = await self.conn.query(
            "SELECT 1 FROM information_schema.TABLES "
            f"WHERE TABLE_SCHEMA = '{db}' AND TABLE_NAME = '{table}'"
        )
        return bool(result.rows)

    async def _write(self, kind: str, window_id: str) -> None:
        await self.conn.execute(
            f"REPLACE INTO {self._table} (id, kind, window_id) "
            f"VALUES ('{self.pipeline}:{kind}', '{kind}', '{window_id}')"
        )
