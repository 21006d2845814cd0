"""Schema history: column names, ENUM/SET members, signedness and primary key per table
version, for TABLE_MAPs written without them (binlog_row_metadata=MINIMAL, MySQL 5.7).

The history starts from an `information_schema` snapshot recorded at the start position
(`snapshot`) and follows the DDL seen in the stream (`apply`): events written before an ALTER
decode with the old columns, events after it with the new ones. With FULL metadata the
TABLE_MAP is authoritative and `resolve` returns it as it is; the history is still kept up to
date from DDL (cheap: only DDL statements are parsed), so switching metadata modes is safe.

Sans-IO apart from `snapshot`. Versioning and persistence:
- DDL is applied when its QUERY event is seen (a MariaDB CREATE ... SELECT puts the CREATE and
  the rows in one transaction, so the rows need it at once), *staged* until `commit(position)`
  stamps it with the position after its transaction; `rollback()` drops staged DDL when a
  reconnect re-sends the transaction.
- The file holds a base (the snapshot, with later entries folded in once the position store
  has moved past them) and entries `{position, statements, tables}`. It is replaced atomically
  and saved *before* the position, so after a crash it may be ahead of the stored position,
  never behind: `load` drops the entries after the stored position (their DDL is read again).
- Positions are ordered by MariaDB GTID position (per domain), MySQL GTID set (subset), else
  binlog file index and offset.

The snapshot race: for `start: latest` the snapshot is read right after SHOW MASTER STATUS
gave the start position and before the dump starts; DDL committed between the two is both in
the snapshot and in the stream. SHOW MASTER STATUS is read again after the snapshot: if the
binlog moved, DDL up to that point may already be in the snapshot (`schema_ddl_in_snapshot_window`
is logged). Applying DDL is idempotent where the statement allows it (ADD of an existing
column, DROP/CHANGE/RENAME of a column already gone), which absorbs such repeats. On resume the
persisted history is used, never a new snapshot (that would be today's schema, not the one at
the position) — except when there is none and `snapshot.mode` is `recovery` (logged as
`schema_history_missing`; without it the start fails: service/daemon.py).

DDL is read by `replicad.source.ddl` (the model is in `replicad.source.schema_model`). A
statement it cannot read changes nothing and logs `schema_ddl_unparsed`; a TABLE_MAP that does
not fit the history keeps its `@N` names and logs `schema_mismatch` (once per table version):
never a guess.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from replicad import lazy_logging
from replicad.atomic_file import write_atomically as replace_file
from replicad.binlog.changes import TableChange
from replicad.binlog.events import QueryEvent
from replicad.binlog.position import Position
from replicad.binlog.rows import TableMapEvent
from replicad.errors import ReplicadError, write_error
from replicad.exit_codes import EXIT_CONFIG
from replicad.source.binlog_status import binlog_status
from replicad.source.ddl import apply_ddl, enum_set_members, is_ddl
from replicad.source.schema_model import (
    FAMILY_OF,
    NUMERIC_FAMILIES,
    SYSTEM_SCHEMAS,
    ColumnSchema,
    Key,
    TableSchema,
    type_mismatch,
)

log = lazy_logging.get_logger("replicad.schema")  # `replicad dump` imports this module

_NAMED_MAPS_MAX = 1024  # named TABLE_MAP copies kept (one per table layout and version)

FORMAT = "replicad-schema-history"
FORMAT_VERSION = 1
NO_BACKSLASH_ESCAPES = 1 << 21  # sql_mode bit (MySQL and MariaDB)


@dataclass(slots=True)
class StatementOutcome:
    """What one statement did: its verb (CREATE, ALTER, DROP, RENAME, TRUNCATE; "" when it
    changes no table), each changed table as (key, before, after) (None: absent or with
    columns nobody can know), and the tables TRUNCATE emptied."""

    sql: str
    verb: str
    changes: list[tuple[Key, TableSchema | None, TableSchema | None]]
    truncated: list[Key]


def table_changes(
    outcome: StatementOutcome, event: QueryEvent, file: str | None, gtid: str | None
) -> list[TableChange]:
    """The table-level changes a statement makes, for the sinks: one per truncated table,
    one per table whose columns it changed (a RENAME: the old name dropped, the new one
    created, both with kind "rename")."""
    header = event.header

    def change(kind: str, key: Key, before: Any, after: Any) -> TableChange:
        ts_ms = header.timestamp * 1000
        return TableChange(
            kind,
            key[0],
            key[1],
            outcome.sql,
            before,
            after,
            file,
            header.pos,
            gtid,
            header.server_id,
            ts_ms,
            event.thread_id,
        )

    out = [change("truncate", key, None, None) for key in outcome.truncated]
    kind = outcome.verb.lower()
    for key, before, after in outcome.changes:
        out.append(change(kind, key, _schema_json(before), _schema_json(after)))
    return out


def _schema_json(table: TableSchema | None) -> dict[str, Any] | None:
    return None if table is None else table.to_json()


class SchemaHistoryError(ReplicadError):
    """The schema history file cannot be read or written."""

    exit_code = EXIT_CONFIG  # a damaged history stays so on a restart


class SchemaHistoryAheadError(SchemaHistoryError):
    """The history starts after the stored position (the position was moved back)."""


# --------------------------------------------------------------------------- positions


def _binlog_index(file: str) -> tuple[str, int] | None:
    stem, _, number = file.rpartition(".")
    return (stem, int(number)) if number.isdigit() else None


def at_or_before(a: Position, b: Position) -> bool | None:
    """Whether the point `a` is at or before `b` in the stream; None when they cannot be
    compared (different binlog names and no common GTID kind)."""
    if a.mariadb_gtids is not None and b.mariadb_gtids is not None:
        return all(b.mariadb_gtids.covers(gtid) for gtid in a.mariadb_gtids)
    if a.mysql_gtids is not None and b.mysql_gtids is not None:
        return a.mysql_gtids.issubset(b.mysql_gtids)
    if a.file == b.file:
        return a.pos <= b.pos
    fa, fb = _binlog_index(a.file), _binlog_index(b.file)
    if fa is None or fb is None or fa[0] != fb[0]:
        return None
    return (fa[1], a.pos) <= (fb[1], b.pos)


# ----------------------------------------------------------------------------- history


@dataclass(frozen=True, slots=True)
class _Entry:
    position: Position  # after the transaction that held the DDL
    statements: tuple[str, ...]
    tables: tuple[tuple[Key, TableSchema | None], ...]  # None: the table is gone


def _short(sql: str, limit: int = 2000) -> str:
    return sql if len(sql) <= limit else sql[:limit] + "…"


class SchemaHistory:
    def __init__(
        self,
        tables: Iterable[TableSchema] = (),
        position: Position | None = None,
        *,
        window_end: Position | None = None,
    ) -> None:
        self._base: dict[Key, TableSchema] = {(t.schema, t.table): t for t in tables}
        self.base_position = position
        self.window_end = window_end  # the binlog end when the snapshot was read
        self._entries: list[_Entry] = []
        self._tables = dict(self._base)  # current: base + entries + staged DDL
        self._staged_from: dict[Key, TableSchema] | None = None
        self._staged_keys: set[Key] = set()
        self._staged_statements: list[str] = []
        self._folded_index: dict[Key, list[Key]] | None = None
        self._warned: set[tuple[Key, TableSchema | None]] = set()
        self._named: dict[tuple[bytes, bool, TableSchema], TableMapEvent] = {}
        self.dirty = False  # committed changes not saved yet

    def __len__(self) -> int:
        return len(self._tables)

    @property
    def entries(self) -> int:
        return len(self._entries)

    # ----------------------------------------------------------------- lookups

    def find(self, key: Key) -> tuple[Key, TableSchema] | None:
        """The table named `key`; on lower_case_table_names servers, the one table whose
        name matches it case-insensitively (DDL may spell a name differently from the map)."""
        table = self._tables.get(key)
        if table is not None:
            return key, table
        if self._folded_index is None:
            self._folded_index = {}
            for k in self._tables:
                self._folded_index.setdefault((k[0].casefold(), k[1].casefold()), []).append(k)
        keys = self._folded_index.get((key[0].casefold(), key[1].casefold()), [])
        return (keys[0], self._tables[keys[0]]) if len(keys) == 1 else None

    def keys(self) -> Iterator[Key]:
        return iter(self._tables)

    def columns(self, db: str, table: str) -> TableSchema | None:
        found = self.find((db, table))
        return None if found is None else found[1]

    def tables(self) -> Iterator[TableSchema]:
        return iter(self._tables.values())

    # ------------------------------------------------------------------- DDL

    def apply(
        self,
        statement: QueryEvent | str,
        default_schema: str | None = None,
        position: Position | None = None,
    ) -> list[Key]:
        """Follow one statement; returns the tables it changed. Without `position` the change
        is staged until `commit(position)` (the daemon applies a QUERY when it is read); with
        it, the change is committed at `position` at once. Never raises for a statement."""
        outcome = self.follow(statement, default_schema)
        if position is not None:
            self.commit(position)
        return [key for key, _, _ in outcome.changes]

    def follow(
        self, statement: QueryEvent | str, default_schema: str | None = None
    ) -> StatementOutcome:
        """Stage one statement (see `apply`) and say what it did to which tables."""
        if isinstance(statement, QueryEvent):
            sql = statement.query
            default = statement.schema if default_schema is None else default_schema
            sql_mode = statement.status_vars.get("sql_mode", 0)
            escapes = not (isinstance(sql_mode, int) and sql_mode & NO_BACKSLASH_ESCAPES)
        else:
            sql, default, escapes = statement, default_schema or "", True
        if not is_ddl(sql):
            return StatementOutcome(sql, "", [], [])
        return self._execute(sql, default, escapes)

    def _execute(self, sql: str, default: str, escapes: bool) -> StatementOutcome:
        effect = apply_ddl(sql, self, default, escapes=escapes)
        if effect.unparsed is not None:
            log.warning(
                "schema_ddl_unparsed",
                statement=_short(sql),
                schema=default,
                reason=effect.unparsed,
                tables_now_unknown=[".".join(k) for k in effect.changes],
            )
        for event, detail in effect.notes:
            log.warning(event, table=detail, statement=_short(sql))
        changes = {k: v for k, v in effect.changes.items() if self._tables.get(k) != v}
        outcome = StatementOutcome(sql, effect.verb, [], effect.truncated)
        if not changes:
            return outcome
        if self._staged_from is None:
            self._staged_from = dict(self._tables)
        for key, table in changes.items():
            outcome.changes.append((key, self._tables.get(key), table))
            if table is None:
                self._tables.pop(key, None)
            else:
                self._tables[key] = table
        self._folded_index = None
        self._staged_keys.update(changes)
        self._staged_statements.append(sql)
        log.info(
            "schema_ddl_applied",
            statement=_short(sql, 500),
            tables={".".join(k): None if v is None else v.column_names for k, v in changes.items()},
        )
        return outcome

    def commit(self, position: Position) -> None:
        """Stamp the staged DDL with the position after its transaction."""
        if self._staged_from is None:
            return
        tables = tuple((k, self._tables.get(k)) for k in sorted(self._staged_keys))
        self._entries.append(_Entry(position, tuple(self._staged_statements), tables))
        if self.window_end is not None:
            if at_or_before(position, self.window_end):
                log.warning(
                    "schema_ddl_in_snapshot_window",
                    position=str(position),
                    snapshot_end=str(self.window_end),
                    statements=[_short(s, 500) for s in self._staged_statements],
                    note="the snapshot may hold it; applied idempotently",
                )
            else:
                self.window_end = None
        self._staged_from = None
        self._staged_keys.clear()
        self._staged_statements.clear()
        self.dirty = True

    def rollback(self) -> None:
        """Forget staged DDL (its transaction will be read again)."""
        if self._staged_from is not None:
            self._tables = self._staged_from
            self._folded_index = None
        self._staged_from = None
        self._staged_keys.clear()
        self._staged_statements.clear()

    # ------------------------------------------------------------- TABLE_MAPs

    def resolve(self, table_map: TableMapEvent) -> TableMapEvent:
        """The TABLE_MAP to decode rows with. A map with COLUMN_NAME metadata (FULL) is
        authoritative and comes back as it is; one without gets a copy named from the history
        (`TableMapEvent.named`; the event itself is never changed). When the history does not
        know the table or disagrees with the map, the map comes back as it is: its columns
        stay @1, @2, ... (warned once per table version), never a guess."""
        if table_map.has_names:
            return table_map
        key = (table_map.schema, table_map.table)
        table = self.columns(*key)
        reason = None
        if table is None:
            reason = "the schema history does not know this table"
        elif len(table.columns) == len(table_map.columns):
            reason = type_mismatch(table, table_map)
        if reason is None:
            assert table is not None
            # Every transaction repeats its TABLE_MAPs: one named copy serves them all (its
            # compiled row decoders with it) while layout and table version stay the same.
            cache_key = (table_map.layout_key, table_map.mariadb, table)
            cached = self._named.get(cache_key)
            if cached is not None:
                return cached
            named = table_map.named(table)
            if not isinstance(named, str):
                if len(self._named) >= _NAMED_MAPS_MAX:
                    del self._named[next(iter(self._named))]
                self._named[cache_key] = named
                return named
            reason = named
        if (key, table) not in self._warned:  # once per table version, not per transaction
            self._warned.add((key, table))
            log.warning(
                "schema_mismatch",
                db=key[0],
                table=key[1],
                reason=reason,
                history_columns=None if table is None else table.column_names,
                note="its columns stay @1, @2, ...",
            )
        return table_map

    # ------------------------------------------------------------- persistence

    def _fold(self, durable: Position) -> None:
        """Entries at or before the stored position can never be trimmed: fold them into the
        base, so that the file does not grow with every DDL."""
        while self._entries and at_or_before(self._entries[0].position, durable):
            entry = self._entries.pop(0)
            for key, table in entry.tables:
                if table is None:
                    self._base.pop(key, None)
                else:
                    self._base[key] = table
            self.base_position = entry.position

    def to_json(self) -> dict[str, Any]:
        def position(p: Position | None) -> dict[str, Any] | None:
            return None if p is None else p.to_json()

        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "base": {
                "position": position(self.base_position),
                "window_end": position(self.window_end),
                "tables": [self._base[k].to_json() for k in sorted(self._base)],
            },
            "entries": [
                {
                    "position": e.position.to_json(),
                    "statements": list(e.statements),
                    "tables": [
                        {
                            "schema": k[0],
                            "table": k[1],
                            "definition": None if t is None else t.to_json(),
                        }
                        for k, t in e.tables
                    ],
                }
                for e in self._entries
            ],
        }

    def serialize(self, *, durable: Position | None = None) -> bytes:
        """The persisted form. `durable`: the position the store holds now; entries at or
        before it are folded into the base. Staged DDL is not included."""
        if durable is not None:
            self._fold(durable)
        return orjson.dumps(self.to_json())

    def save(self, path: str | os.PathLike[str], *, durable: Position | None = None) -> None:
        """Replace the file atomically (see `serialize`)."""
        write_atomically(Path(path), self.serialize(durable=durable))
        self.dirty = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any], position: Position) -> SchemaHistory:
        """The history as it was at `position`: later entries are dropped."""
        base = data["base"]
        base_position = None if base["position"] is None else Position.from_json(base["position"])
        window = None if base.get("window_end") is None else Position.from_json(base["window_end"])
        history = cls(
            [TableSchema.from_json(t) for t in base["tables"]], base_position, window_end=window
        )
        if base_position is not None and at_or_before(base_position, position) is False:
            raise SchemaHistoryAheadError(
                "the schema history starts after the stored position (was the position moved "
                "back?), so it cannot describe the tables there",
                base=str(base_position),
                position=str(position),
            )
        dropped = 0
        for raw in data["entries"]:
            entry_position = Position.from_json(raw["position"])
            order = at_or_before(entry_position, position)
            if order is False or dropped:
                dropped += 1  # after the stored position: the stream will bring it again
                continue
            if order is None:
                log.warning(
                    "schema_history_position_incomparable",
                    entry=str(entry_position),
                    position=str(position),
                )
            tables = tuple(
                (
                    (t["schema"], t["table"]),
                    None if t["definition"] is None else TableSchema.from_json(t["definition"]),
                )
                for t in raw["tables"]
            )
            history._entries.append(_Entry(entry_position, tuple(raw["statements"]), tables))
            for key, table in tables:
                if table is None:
                    history._tables.pop(key, None)
                else:
                    history._tables[key] = table
        history.dirty = dropped > 0
        log.info(
            "schema_history_loaded",
            tables=len(history),
            entries=history.entries,
            dropped_after_position=dropped,
            position=str(position),
        )
        return history

    @classmethod
    def load(cls, path: str | os.PathLike[str], position: Position) -> SchemaHistory | None:
        """The persisted history trimmed to `position`; None when there is no file."""
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SchemaHistoryError(
                f"cannot read the schema history: {exc.strerror}", file=str(path)
            ) from None
        return cls.parse(raw, position, file=str(path))

    @classmethod
    def parse(cls, raw: bytes, position: Position, **where: object) -> SchemaHistory:
        """`serialize`'s output, trimmed to `position`; `where` names the source in errors."""
        try:
            data = orjson.loads(raw)
            if data.get("format") != FORMAT or data.get("version") != FORMAT_VERSION:
                raise SchemaHistoryError(
                    f"schema history has an unknown format (expected {FORMAT} "
                    f"version {FORMAT_VERSION})",
                    **where,
                )
            return cls.from_json(data, position)
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError) as exc:
            raise SchemaHistoryError(
                f"schema history is damaged: {type(exc).__name__}: {exc}", **where
            ) from None


def write_atomically(path: Path, data: bytes) -> None:
    try:
        replace_file(path, data)
    except OSError as exc:
        what = "cannot write the schema history"
        raise write_error(SchemaHistoryError, what, exc, file=str(path)) from None


def default_history_path(position_path: str | os.PathLike[str]) -> Path:
    """Beside the position file: position.json -> position.schema-history.json."""
    path = Path(position_path)
    return path.with_name(f"{path.stem}.schema-history.json")


# ---------------------------------------------------------------------------- snapshot

_EXCLUDED = ", ".join(f"'{s}'" for s in SYSTEM_SCHEMAS)
COLUMNS_SQL = (
    "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.ORDINAL_POSITION, c.DATA_TYPE, "
    "c.COLUMN_TYPE, t.TABLE_TYPE, c.GENERATION_EXPRESSION "
    "FROM information_schema.COLUMNS c JOIN information_schema.TABLES t "
    "ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME "
    f"WHERE c.TABLE_SCHEMA NOT IN ({_EXCLUDED}) "
    "AND t.TABLE_TYPE NOT IN ('VIEW', 'SYSTEM VIEW', 'TEMPORARY')"
)
PRIMARY_KEYS_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, SEQ_IN_INDEX "
    "FROM information_schema.STATISTICS "
    f"WHERE INDEX_NAME = 'PRIMARY' AND TABLE_SCHEMA NOT IN ({_EXCLUDED})"
)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def tables_from_information_schema(
    columns: Iterable[tuple[object, ...]], primary_keys: Iterable[tuple[object, ...]]
) -> list[TableSchema]:
    """Tables from the rows of COLUMNS_SQL and PRIMARY_KEYS_SQL."""
    by_table: dict[Key, list[tuple[int, ColumnSchema]]] = {}
    versioned: dict[Key, bool] = {}  # key -> implicit row_start/row_end
    for row in columns:
        schema, table, name, ordinal, data_type, column_type, table_type, generation = map(
            _text, row
        )
        key = (schema, table)
        data_type = data_type.lower()
        words = column_type.lower().split()
        members = None
        if data_type in ("enum", "set"):
            members = enum_set_members(column_type)
        column = ColumnSchema(
            name,
            data_type,
            "unsigned" in words and FAMILY_OF.get(data_type) in NUMERIC_FAMILIES,
            members if data_type == "enum" else None,
            members if data_type == "set" else None,
        )
        by_table.setdefault(key, []).append((int(ordinal), column))
        if table_type.upper() == "SYSTEM VERSIONED":
            explicit = generation.upper() in ("ROW START", "ROW END")
            versioned[key] = versioned.get(key, True) and not explicit
    keys: dict[Key, list[tuple[int, str]]] = {}
    for schema, table, name, seq in (tuple(map(_text, r)) for r in primary_keys):
        keys.setdefault((schema, table), []).append((int(seq), name))
    return [
        TableSchema.build(
            key,
            [c for _, c in sorted(cols, key=lambda x: x[0])],
            [n for _, n in sorted(keys.get(key, []))],
            versioned.get(key, False),
        )
        for key, cols in by_table.items()
    ]


async def binlog_end(conn: Any) -> Position | None:
    """The binlog's end now (file:pos); None when binary logging is off."""
    status = await binlog_status(conn)
    return None if status is None else Position(status.file, status.pos)


async def snapshot(conn: Any, position: Position) -> SchemaHistory:
    """The schema from information_schema, recorded as the schema at `position`.

    Read it right after `position` was read from the server (start: latest) and before the
    dump starts. The binlog end is read again afterwards: DDL between the two may be in the
    snapshot already (see the module docstring). Tables the source user cannot see (no
    privilege on them) are missing: their TABLE_MAPs keep @N names until a CREATE is seen."""
    columns = await conn.query(COLUMNS_SQL)
    primary_keys = await conn.query(PRIMARY_KEYS_SQL)
    end = await binlog_end(conn)
    window_end = None
    if end is not None and (end.file, end.pos) != (position.file, position.pos):
        window_end = end
    history = SchemaHistory(
        tables_from_information_schema(columns.rows, primary_keys.rows),
        position,
        window_end=window_end,
    )
    history.dirty = True
    log.info(
        "schema_snapshot",
        tables=len(history),
        position=str(position),
        binlog_moved_to=None if window_end is None else str(window_end),
    )
    return history
