"""Schema history: column names, ENUM/SET members, signedness and primary key per table
version, for TABLE_MAPs written without them (binlog_row_metadata=MINIMAL, MySQL 5.7).

The history starts from an `information_schema` snapshot recorded at the start position
(`snapshot`) and follows the DDL seen in the stream (`apply`): events written before an ALTER
decode with the old columns, events after it with the new ones. With FULL metadata the
TABLE_MAP is authoritative and `apply_to` leaves it alone; the history is still kept up to
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
the position) — except when there is no history file at all (logged as `schema_history_missing`).

DDL is read with a small MySQL lexer and recursive descent over the statements that change
columns: CREATE TABLE (column list, LIKE), ALTER TABLE ADD/DROP/CHANGE/MODIFY/RENAME COLUMN with
FIRST/AFTER, ADD/DROP PRIMARY KEY, RENAME TO, ADD/DROP SYSTEM VERSIONING, RENAME TABLE, DROP
TABLE, DROP DATABASE. A statement it cannot read changes nothing and logs
`schema_ddl_unparsed`; a TABLE_MAP that does not fit the history keeps its `@N` names and logs
`schema_mismatch` (once per table version): never a guess.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from pathlib import Path
from typing import Any

import orjson
import structlog

from replicad.binlog.events import QueryEvent
from replicad.binlog.rows import TableMapEvent
from replicad.binlog.values import ColumnType as T
from replicad.errors import ConfigError, ReplicadError, ServerError
from replicad.source.position import Position

log = structlog.get_logger("replicad.schema")

FORMAT = "replicad-schema-history"
FORMAT_VERSION = 1
SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
NO_BACKSLASH_ESCAPES = 1 << 21  # sql_mode bit (MySQL and MariaDB)
Key = tuple[str, str]


class SchemaHistoryError(ReplicadError):
    """The schema history file cannot be read or written."""


class SchemaHistoryAheadError(SchemaHistoryError):
    """The history starts after the stored position (the position was moved back)."""


# ------------------------------------------------------------------------------- model


@dataclass(frozen=True, slots=True)
class ColumnSchema:
    name: str
    data_type: str  # lower case, as information_schema.COLUMNS.DATA_TYPE spells it
    unsigned: bool = False
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None


# MariaDB's implicit system-versioning columns, after all others in the row image.
_ROW_START = ColumnSchema("row_start", "timestamp")
_ROW_END = ColumnSchema("row_end", "timestamp")


@dataclass(frozen=True, slots=True)
class TableSchema:
    schema: str
    table: str
    columns: tuple[ColumnSchema, ...]  # in ordinal order, as in the row image
    primary_key: tuple[str, ...] = ()
    implicit_versioning: bool = False  # WITH SYSTEM VERSIONING without period columns

    @classmethod
    def build(cls, key: Key, defined: Iterable[ColumnSchema], primary_key: Iterable[str] = (),
              implicit_versioning: bool = False) -> TableSchema:  # fmt: skip
        columns = tuple(defined) + ((_ROW_START, _ROW_END) if implicit_versioning else ())
        return cls(key[0], key[1], columns, tuple(primary_key), implicit_versioning)

    @property
    def defined_columns(self) -> tuple[ColumnSchema, ...]:
        return self.columns[:-2] if self.implicit_versioning else self.columns

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def to_json(self) -> dict[str, Any]:
        columns = []
        for c in self.defined_columns:
            item: dict[str, Any] = {"name": c.name, "type": c.data_type}
            if c.unsigned:
                item["unsigned"] = True
            if c.enum_values is not None:
                item["enum"] = list(c.enum_values)
            if c.set_values is not None:
                item["set"] = list(c.set_values)
            columns.append(item)
        out = {"schema": self.schema, "table": self.table, "columns": columns,
               "primary_key": list(self.primary_key)}  # fmt: skip
        if self.implicit_versioning:
            out["implicit_versioning"] = True
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TableSchema:
        columns = [
            ColumnSchema(
                c["name"],
                c["type"],
                bool(c.get("unsigned", False)),
                tuple(c["enum"]) if "enum" in c else None,
                tuple(c["set"]) if "set" in c else None,
            )
            for c in data["columns"]
        ]
        key = (data["schema"], data["table"])
        return cls.build(key, columns, data["primary_key"], bool(data.get("implicit_versioning")))


# Type families: a TABLE_MAP column must be of its history column's family, else the history
# is stale for this table (a DDL it could not read) and the map keeps its @N names.
_FAMILIES: dict[str, frozenset[int]] = {
    "int": frozenset({T.TINY, T.SHORT, T.INT24, T.LONG, T.LONGLONG}),
    "decimal": frozenset({T.DECIMAL, T.NEWDECIMAL}),
    "float": frozenset({T.FLOAT, T.DOUBLE}),
    "string": frozenset({T.VARCHAR, T.VAR_STRING, T.STRING}),
    "blob": frozenset({T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB, T.BLOB}),
    "enum": frozenset({T.ENUM}),
    "set": frozenset({T.SET}),
    "temporal": frozenset({T.DATE, T.NEWDATE, T.TIME, T.TIME2, T.YEAR}),
    "datetime": frozenset({T.DATETIME, T.DATETIME2, T.TIMESTAMP, T.TIMESTAMP2}),
    "bit": frozenset({T.BIT}),
    "geometry": frozenset({T.GEOMETRY}),
}
_FAMILY_OF: dict[str, str] = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "bigint"), "int"),
    "decimal": "decimal", "float": "float", "double": "float",
    **dict.fromkeys(("char", "varchar", "binary", "varbinary", "uuid", "inet4", "inet6"),
                    "string"),
    **dict.fromkeys(("tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob",
                     "mediumblob", "longblob"), "blob"),
    "enum": "enum", "set": "set",
    **dict.fromkeys(("date", "time", "year"), "temporal"),
    **dict.fromkeys(("datetime", "timestamp"), "datetime"),
    "bit": "bit",
    **dict.fromkeys(("geometry", "point", "linestring", "polygon", "multipoint",
                     "multilinestring", "multipolygon", "geometrycollection"), "geometry"),
}  # fmt: skip
_NUMERIC_FAMILIES = frozenset({"int", "decimal", "float"})
_MAP_FAMILY = {code: name for name, codes in _FAMILIES.items() for code in codes}


def _type_mismatch(table: TableSchema, table_map: TableMapEvent) -> str | None:
    for source, column in zip(table.columns, table_map.columns, strict=True):
        mine = _FAMILY_OF.get(source.data_type)
        theirs = _MAP_FAMILY.get(column.type_code)
        if source.data_type == "json":  # MySQL's JSON type; MariaDB's JSON is a LONGTEXT
            mine = None if column.type_code == T.JSON else "blob"
        if mine is not None and theirs is not None and mine != theirs:
            return f"column {column.index + 1} ({source.name}) is {column.type_name} here, " \
                   f"{source.data_type} in the schema history"  # fmt: skip
    return None


# ------------------------------------------------------------------------------- lexer

_SKIP = r"\s+|#[^\n]*|--(?=\s|$)[^\n]*|/\*(?!M?!)[\s\S]*?\*/"
_STRINGS = {
    True: r"'(?:[^'\\]|\\[\s\S]|'')*'|\"(?:[^\"\\]|\\[\s\S]|\"\")*\"",
    False: r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"",
}
_LEXERS = {
    escapes: re.compile(
        rf"(?P<skip>{_SKIP})"
        r"|(?P<open>/\*M?!\d*)"  # an executable comment: the server ran its content
        r"|(?P<close>\*/)"
        r"|`(?P<quoted>(?:[^`]|``)*)`"
        rf"|(?P<string>{strings})"
        r"|(?P<word>[\w$]+)"
        r"|(?P<punct>[\s\S])"
    )
    for escapes, strings in _STRINGS.items()
}
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "%": "\\%",
            "_": "\\_"}  # fmt: skip
_HEAD = re.compile(rf"(?:{_SKIP}|/\*M?!\d*)*([A-Za-z]+)")
_DDL_VERBS = frozenset({"CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE"})

Tok = tuple[str, str]  # kind ("w" word, "q" `quoted`, "s" string, "p" punctuation), text


def _lex(sql: str, escapes: bool = True) -> list[Tok]:
    out: list[Tok] = []
    executable = 0
    for m in _LEXERS[escapes].finditer(sql):
        kind = m.lastgroup
        if kind == "skip":
            continue
        if kind == "open":
            executable += 1
        elif kind == "close" and executable:
            executable -= 1
        elif kind == "quoted":
            out.append(("q", m["quoted"].replace("``", "`")))
        elif kind == "string":
            text = m["string"]
            quote, body = text[0], text[1:-1]
            if escapes:
                body = re.sub(rf"\\([\s\S])|{quote}{quote}",
                              lambda x, q=quote: q if x[1] is None else _ESCAPES.get(x[1], x[1]),
                              body)  # fmt: skip
            else:
                body = body.replace(quote * 2, quote)
            out.append(("s", body))
        elif kind == "word":
            out.append(("w", m["word"]))
        else:
            out.append(("p", m[0]))
    return out


class _Unparsed(Exception):
    pass


class _Tokens:
    __slots__ = ("i", "items")

    def __init__(self, items: list[Tok]) -> None:
        self.items = items
        self.i = 0

    def done(self) -> bool:
        return self.i >= len(self.items)

    def word(self, k: int = 0) -> str:
        j = self.i + k
        return self.items[j][1].upper() if j < len(self.items) and self.items[j][0] == "w" else ""

    def punct(self, char: str) -> bool:
        return not self.done() and self.items[self.i] == ("p", char)

    def take(self, *words: str) -> bool:
        """Consume `words` if they come next, all of them."""
        if all(self.word(k) == w for k, w in enumerate(words)):
            self.i += len(words)
            return True
        return False

    def ident(self) -> str:
        if self.done() or self.items[self.i][0] == "p":
            raise _Unparsed(f"expected a name at token {self.i}")
        self.i += 1
        return self.items[self.i - 1][1]  # a "string" here is an ANSI_QUOTES identifier

    def group(self) -> list[Tok]:
        """The tokens inside the parenthesised group that starts here."""
        if not self.punct("("):
            raise _Unparsed(f"expected '(' at token {self.i}")
        depth, start = 0, self.i + 1
        for j in range(self.i, len(self.items)):
            if self.items[j] == ("p", "("):
                depth += 1
            elif self.items[j] == ("p", ")"):
                depth -= 1
                if depth == 0:
                    self.i = j + 1
                    return self.items[start:j]
        raise _Unparsed("unbalanced parentheses")

    def rest(self) -> list[Tok]:
        out, self.i = self.items[self.i :], len(self.items)
        return out


def _split(items: list[Tok]) -> list[list[Tok]]:
    """Split at the commas outside parentheses."""
    parts: list[list[Tok]] = [[]]
    depth = 0
    for tok in items:
        if tok == ("p", ","):
            if depth == 0:
                parts.append([])
                continue
        elif tok == ("p", "("):
            depth += 1
        elif tok == ("p", ")"):
            depth -= 1
        parts[-1].append(tok)
    return [p for p in parts if p]


# ------------------------------------------------------------------- column definitions

_SYNONYMS = {
    "integer": "int", "int1": "tinyint", "int2": "smallint", "int3": "mediumint",
    "int4": "int", "int8": "bigint", "middleint": "mediumint", "bool": "tinyint",
    "boolean": "tinyint", "dec": "decimal", "numeric": "decimal", "fixed": "decimal",
    "number": "decimal", "real": "double", "float4": "float", "float8": "double",
    "character": "char", "nchar": "char", "nvarchar": "varchar", "varchar2": "varchar",
    "serial": "bigint", "long": "mediumtext", "geomcollection": "geometrycollection",
}  # fmt: skip
_INDEX_WORDS = frozenset({"PRIMARY", "KEY", "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL",
                          "CONSTRAINT", "FOREIGN", "CHECK"})  # fmt: skip


@dataclass(slots=True)
class _ColumnDef:
    column: ColumnSchema
    first: bool = False
    after: str | None = None
    primary_key: bool = False
    period: bool = False  # GENERATED ALWAYS AS ROW START/END


def _data_type(t: _Tokens) -> tuple[str, tuple[str, ...] | None, bool]:
    """Type name (canonical, lower case), ENUM/SET members, implied UNSIGNED (SERIAL)."""
    word = t.word().lower()
    if not word:
        raise _Unparsed(f"expected a data type at token {t.i}")
    t.i += 1
    if word == "national":
        word, t.i = t.word().lower(), t.i + 1
    if word == "double":
        t.take("PRECISION")
    elif word in ("char", "character", "nchar") and (t.take("VARYING") or t.take("VARCHAR")):
        word = "varchar"
    elif word == "long":
        word = "mediumblob" if t.take("VARBINARY") else "mediumtext"
        t.take("VARCHAR") or t.take("CHAR", "VARYING")
    data_type = _SYNONYMS.get(word, word)
    members = None
    if t.punct("("):
        inner = t.group()
        if data_type in ("enum", "set"):
            members = _members(inner)
    if data_type in ("enum", "set") and members is None:
        raise _Unparsed(f"{data_type} without members")
    return data_type, members, word == "serial"


def _members(items: list[Tok]) -> tuple[str, ...]:
    """ENUM/SET members: string literals, with introducers (_utf8mb4'x', N'x'), X'hex' and
    adjacent literals concatenated; trailing spaces are dropped, as the server does."""
    members = []
    for part in _split(items):
        text, hexa = "", False
        for kind, value in part:
            if kind == "s":
                text += bytes.fromhex(value).decode("utf-8", "replace") if hexa else value
                hexa = False
            elif kind == "w" and value.upper() == "X":
                hexa = True
            elif not (kind == "w" and (value.startswith("_") or value.upper() == "N")):
                raise _Unparsed(f"ENUM/SET member {value!r} is not a string")
        members.append(text.rstrip(" "))
    return tuple(members)


def _column_def(t: _Tokens) -> _ColumnDef:
    name = t.ident()
    data_type, members, unsigned = _data_type(t)
    out = _ColumnDef(ColumnSchema(name, data_type))
    top: list[Tok] = []
    previous = ""
    while not t.done():
        if t.punct("("):
            t.group()  # DEFAULT (expr), AS (expr), CHECK (...), REFERENCES t (...)
            previous = ""
            continue
        tok = t.items[t.i]
        t.i += 1
        top.append(tok)
        word = tok[1].upper() if tok[0] == "w" else ""
        if word in ("UNSIGNED", "ZEROFILL"):
            unsigned = True
        elif word == "KEY" and previous != "UNIQUE":  # [PRIMARY] KEY
            out.primary_key = True
        elif word in ("START", "END") and previous == "ROW":
            out.period = True
        previous = word
    if len(top) >= 2 and top[-2][0] == "w" and top[-2][1].upper() == "AFTER":
        out.after = top[-1][1]
    elif top and top[-1][0] == "w" and top[-1][1].upper() == "FIRST":
        out.first = True
    out.column = ColumnSchema(
        name,
        data_type,
        unsigned and _FAMILY_OF.get(data_type) in _NUMERIC_FAMILIES,
        members if data_type == "enum" else None,
        members if data_type == "set" else None,
    )
    return out


def _index_element(t: _Tokens) -> list[str] | None:
    """For an index/constraint element (`t` at its first word): the PRIMARY KEY columns,
    [] for any other index or constraint, None when this is not one."""
    word = t.word()
    if not (word in _INDEX_WORDS or (word == "PERIOD" and t.word(1) == "FOR")):
        return None
    if t.take("CONSTRAINT") and t.word() != "PRIMARY" and t.word() not in _INDEX_WORDS:
        t.ident()  # the constraint's name
    if not t.take("PRIMARY", "KEY"):
        return []
    while not t.done() and not t.punct("("):
        t.i += 1  # USING BTREE, an index name
    return [_Tokens(part).ident() for part in _split(t.group())]


# ------------------------------------------------------------------------- statements


class _Work:
    """What one statement changes, over the history's current tables (copy on write)."""

    def __init__(self, history: SchemaHistory, default_schema: str) -> None:
        self.history = history
        self.default_schema = default_schema
        self.changes: dict[Key, TableSchema | None] = {}
        self.notes: list[tuple[str, str]] = []  # (log event, detail)
        self.unknowable: set[Key] = set()  # tables that now exist with columns we cannot know

    def name(self, t: _Tokens) -> Key:
        first = t.ident()
        if t.punct("."):
            t.i += 1
            return first, t.ident()
        if not self.default_schema:
            raise _Unparsed(f"table {first!r} without a database and no default database")
        return self.default_schema, first

    def find(self, key: Key) -> tuple[Key, TableSchema] | None:
        if key in self.changes:
            value = self.changes[key]
            return None if value is None else (key, value)
        found = self.history._find(key)
        if found is not None and found[0] in self.changes:
            value = self.changes[found[0]]
            return None if value is None else (found[0], value)
        return found

    def put(self, key: Key, table: TableSchema | None) -> None:
        self.changes[key] = table

    def unknown(self, key: Key, what: str) -> None:
        self.changes[key] = None
        self.unknowable.add(key)
        if key[0] not in SYSTEM_SCHEMAS:
            self.notes.append(("schema_ddl_unknown_table", what))


def _execute(sql: str, work: _Work, escapes: bool) -> None:
    t = _Tokens(_lex(sql, escapes))
    verb = t.word()
    t.i += 1
    if verb == "CREATE":
        _create(t, work)
    elif verb == "ALTER":
        _alter(t, work)
    elif verb == "DROP":
        _drop(t, work)
    elif verb == "RENAME" and (t.take("TABLE") or t.take("TABLES")):
        t.take("IF", "EXISTS")
        for part in _split(t.rest()):
            p = _Tokens(part)
            old = work.name(p)
            if p.take("WAIT"):
                p.ident()  # WAIT n
            p.take("NOWAIT")
            if not p.take("TO"):
                raise _Unparsed("RENAME TABLE without TO")
            new = work.name(p)
            found = work.find(old)
            if found is None:
                if work.find(new) is None:
                    work.unknown(new, f"{old[0]}.{old[1]}")
                continue  # else: renamed already (the snapshot had it)
            work.put(found[0], None)
            work.put(new, _replace(found[1], schema=new[0], table=new[1]))
    # TRUNCATE, and everything else (views, routines, users, indexes): columns unchanged.


def _create(t: _Tokens, work: _Work) -> None:
    t.take("OR", "REPLACE")
    if t.take("TEMPORARY") or not t.take("TABLE"):
        return  # temporary tables never reach a ROW binlog; DATABASE, VIEW, INDEX...: nothing
    if_not_exists = t.take("IF", "NOT", "EXISTS")
    key = work.name(t)
    if if_not_exists and work.find(key) is not None:
        return
    like = t.take("LIKE")
    if not like and t.punct("(") and t.word(1) == "LIKE":
        t = _Tokens(t.group()[1:])  # CREATE TABLE t (LIKE s)
        like = True
    if like:
        source = work.find(work.name(t))
        if source is None:
            work.unknown(key, f"LIKE source of {key[0]}.{key[1]}")
        else:
            work.put(key, _replace(source[1], schema=key[0], table=key[1]))
        return
    if not t.punct("("):
        work.unknown(key, f"{key[0]}.{key[1]}")  # CREATE TABLE ... SELECT, no column list
        raise _Unparsed("CREATE TABLE without a column list")
    defined: list[ColumnSchema] = []
    primary_key: list[str] = []
    period = False
    for part in _split(t.group()):
        p = _Tokens(part)
        index = _index_element(p)
        if index is not None:
            primary_key = index or primary_key
            continue
        column = _column_def(p)
        defined.append(column.column)
        primary_key = [column.column.name] if column.primary_key else primary_key
        period = period or column.period
    options = [tok[1].upper() for tok in t.rest() if tok[0] == "w"]
    if "SELECT" in options:
        work.unknown(key, f"{key[0]}.{key[1]}")
        raise _Unparsed("CREATE TABLE ... SELECT adds the columns of the select")
    versioned = not period and any(
        options[i : i + 3] == ["WITH", "SYSTEM", "VERSIONING"] for i in range(len(options))
    )
    work.put(key, TableSchema.build(key, defined, primary_key, versioned))


_ALTER_NOOP = frozenset("""ALGORITHM LOCK ENGINE FORCE DEFAULT CHARACTER CHARSET COLLATE COMMENT
    AUTO_INCREMENT ROW_FORMAT KEY_BLOCK_SIZE AVG_ROW_LENGTH MAX_ROWS MIN_ROWS PACK_KEYS
    STATS_AUTO_RECALC STATS_PERSISTENT STATS_SAMPLE_PAGES CHECKSUM TABLE_CHECKSUM DELAY_KEY_WRITE
    ENCRYPTION ENCRYPTED ENCRYPTION_KEY_ID PAGE_CHECKSUM PAGE_COMPRESSED PAGE_COMPRESSION_LEVEL
    TRANSACTIONAL IETF_QUOTES DATA INDEX INSERT_METHOD UNION TABLESPACE STORAGE COMPRESSION
    SECONDARY_ENGINE SECONDARY_ENGINE_ATTRIBUTE ENGINE_ATTRIBUTE AUTOEXTEND_SIZE START_TRANSACTION
    ENABLE DISABLE DISCARD IMPORT ORDER PARTITION PARTITIONS REMOVE COALESCE REORGANIZE EXCHANGE
    ANALYZE CHECK OPTIMIZE REBUILD REPAIR TRUNCATE UPGRADE WITH WITHOUT ALTER CONVERT
    SEQUENCE""".split())  # fmt: skip


@dataclass(slots=True)
class _Edit:
    key: Key
    columns: list[ColumnSchema]
    primary_key: list[str]
    versioned: bool
    period: bool = False
    new_key: Key | None = None
    work: _Work | None = field(default=None, repr=False)

    def index(self, name: str) -> int:
        folded = name.casefold()  # column names are case-insensitive
        return next((i for i, c in enumerate(self.columns) if c.name.casefold() == folded), -1)

    def place(self, column: ColumnSchema, d: _ColumnDef, default: int) -> None:
        at = default
        if d.first:
            at = 0
        elif d.after is not None:
            at = self.index(d.after) + 1
            if at == 0:
                raise _Unparsed(f"AFTER names an unknown column {d.after!r}")
        self.columns.insert(at, column)

    def rename_key(self, old: str, new: str) -> None:
        self.primary_key = [new if n.casefold() == old.casefold() else n for n in self.primary_key]

    def change(self, old: str, d: _ColumnDef, if_exists: bool) -> None:
        at = self.index(old)
        if at < 0:
            if if_exists or self.index(d.column.name) >= 0:
                return  # IF EXISTS, or changed already (a DDL the snapshot already had)
            raise _Unparsed(f"no column {old!r} to change")
        other = self.index(d.column.name)
        if other >= 0 and other != at:
            raise _Unparsed(f"column {d.column.name!r} exists already")
        del self.columns[at]
        self.place(d.column, d, at)
        self.rename_key(old, d.column.name)
        if d.primary_key:
            self.primary_key = [d.column.name]


def _alter(t: _Tokens, work: _Work) -> None:
    t.take("ONLINE")
    t.take("IGNORE")
    if not t.take("TABLE"):
        return  # ALTER DATABASE, VIEW, USER, EVENT, SEQUENCE...
    t.take("IF", "EXISTS")
    key = work.name(t)
    if t.take("WAIT"):
        t.i += 1
    t.take("NOWAIT")
    found = work.find(key)
    if found is None:
        if key[0] not in SYSTEM_SCHEMAS:
            work.notes.append(("schema_ddl_unknown_table", f"{key[0]}.{key[1]}"))
        return
    key, table = found
    edit = _Edit(key, list(table.defined_columns), list(table.primary_key),
                 table.implicit_versioning, work=work)  # fmt: skip
    for part in _split(t.rest()):
        _alter_spec(_Tokens(part), edit)
    result = TableSchema.build(edit.new_key or key, edit.columns, edit.primary_key, edit.versioned)
    if edit.new_key is not None and edit.new_key != key:
        work.put(key, None)
    work.put(edit.new_key or key, result)


def _alter_spec(s: _Tokens, edit: _Edit) -> None:
    verb = s.word()
    s.i += 1
    if verb == "ADD":
        column_word = s.take("COLUMN")
        s.take("IF", "NOT", "EXISTS")
        if not column_word:
            index = _index_element(s)
            if index is not None:
                edit.primary_key = index or edit.primary_key
                return
            if s.take("SYSTEM", "VERSIONING"):
                edit.versioned = not edit.period
                return
        definitions = [_Tokens(p) for p in _split(s.group())] if s.punct("(") else [s]
        for p in definitions:
            if _index_element(p) is not None:
                continue  # ADD (a INT, INDEX (a))
            d = _column_def(p)
            edit.period = edit.period or d.period
            if edit.index(d.column.name) < 0:  # else: IF NOT EXISTS, or added already
                edit.place(d.column, d, len(edit.columns))
                if d.primary_key:
                    edit.primary_key = [d.column.name]
    elif verb == "DROP":
        if not s.take("COLUMN"):
            if s.take("PRIMARY", "KEY"):
                edit.primary_key = []
                return
            if s.take("SYSTEM", "VERSIONING"):
                if not edit.versioned:
                    raise _Unparsed("DROP SYSTEM VERSIONING of explicit period columns")
                edit.versioned = False
                return
            if s.word() in _INDEX_WORDS | {"PARTITION", "DEFAULT"} or s.take("PERIOD", "FOR"):
                return
        s.take("IF", "EXISTS")
        name = s.ident()
        at = edit.index(name)
        if at >= 0:  # else IF EXISTS, or dropped already
            del edit.columns[at]
            edit.primary_key = [n for n in edit.primary_key if n.casefold() != name.casefold()]
    elif verb in ("CHANGE", "MODIFY"):
        s.take("COLUMN")
        if_exists = s.take("IF", "EXISTS")
        old = s.ident() if verb == "CHANGE" else None
        d = _column_def(s)
        edit.change(old or d.column.name, d, if_exists)
    elif verb == "RENAME":
        if s.take("COLUMN"):
            s.take("IF", "EXISTS")
            old = s.ident()
            if not s.take("TO"):
                raise _Unparsed("RENAME COLUMN without TO")
            new = s.ident()
            at = edit.index(old)
            if at >= 0:
                edit.columns[at] = _replace(edit.columns[at], name=new)
                edit.rename_key(old, new)
            elif edit.index(new) < 0:
                raise _Unparsed(f"no column {old!r} to rename")
        elif s.word() not in ("INDEX", "KEY"):
            s.take("TO") or s.take("AS")
            assert edit.work is not None
            edit.new_key = edit.work.name(s)
    elif verb not in _ALTER_NOOP:
        raise _Unparsed(f"unknown ALTER TABLE clause {verb or s.items[s.i - 1][1]!r}")


def _drop(t: _Tokens, work: _Work) -> None:
    temporary = t.take("TEMPORARY")
    if t.take("TABLE") or t.take("TABLES"):
        t.take("IF", "EXISTS")
        for part in [] if temporary else _split(t.rest()):
            found = work.find(work.name(_Tokens(part)))  # RESTRICT, WAIT n... ignored
            if found is not None:
                work.put(found[0], None)
    elif t.take("DATABASE") or t.take("SCHEMA"):
        t.take("IF", "EXISTS")
        db = t.ident()
        keys = set(work.history._tables) | set(work.changes)
        matches = [k for k in keys if k[0] == db] or [
            k for k in keys if k[0].casefold() == db.casefold()
        ]
        for key in matches:
            work.put(key, None)


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
    def __init__(self, tables: Iterable[TableSchema] = (), position: Position | None = None,
                 *, window_end: Position | None = None) -> None:  # fmt: skip
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
        self.dirty = False  # committed changes not saved yet

    def __len__(self) -> int:
        return len(self._tables)

    @property
    def entries(self) -> int:
        return len(self._entries)

    # ----------------------------------------------------------------- lookups

    def _find(self, key: Key) -> tuple[Key, TableSchema] | None:
        table = self._tables.get(key)
        if table is not None:
            return key, table
        # lower_case_table_names=1/2 servers: DDL may spell a name differently from the map.
        if self._folded_index is None:
            self._folded_index = {}
            for k in self._tables:
                self._folded_index.setdefault((k[0].casefold(), k[1].casefold()), []).append(k)
        keys = self._folded_index.get((key[0].casefold(), key[1].casefold()), [])
        return (keys[0], self._tables[keys[0]]) if len(keys) == 1 else None

    def columns(self, db: str, table: str) -> TableSchema | None:
        found = self._find((db, table))
        return None if found is None else found[1]

    def tables(self) -> Iterator[TableSchema]:
        return iter(self._tables.values())

    # ------------------------------------------------------------------- DDL

    def apply(self, statement: QueryEvent | str, default_schema: str | None = None,
              position: Position | None = None) -> list[Key]:  # fmt: skip
        """Follow one statement; returns the tables it changed. Without `position` the change
        is staged until `commit(position)` (the daemon applies a QUERY when it is read); with
        it, the change is committed at `position` at once. Never raises for a statement."""
        if isinstance(statement, QueryEvent):
            sql = statement.query
            default = statement.schema if default_schema is None else default_schema
            sql_mode = statement.status_vars.get("sql_mode", 0)
            escapes = not (isinstance(sql_mode, int) and sql_mode & NO_BACKSLASH_ESCAPES)
        else:
            sql, default, escapes = statement, default_schema or "", True
        changed: list[Key] = []
        head = _HEAD.match(sql)
        if head is not None and head[1].upper() in _DDL_VERBS:
            changed = self._execute(sql, default, escapes)
        if position is not None:
            self.commit(position)
        return changed

    def _execute(self, sql: str, default: str, escapes: bool) -> list[Key]:
        work = _Work(self, default)
        try:
            _execute(sql, work, escapes)
        except (_Unparsed, ValueError, IndexError) as exc:
            # CREATE TABLE ... SELECT: the table exists now, with columns we cannot know.
            unknowable = dict.fromkeys(work.unknowable)
            log.warning("schema_ddl_unparsed", statement=_short(sql), schema=default,
                        reason=str(exc) or type(exc).__name__,
                        tables_now_unknown=[".".join(k) for k in unknowable])  # fmt: skip
            work.changes = unknowable
        for event, detail in work.notes:
            log.warning(event, table=detail, statement=_short(sql))
        changes = {k: v for k, v in work.changes.items() if self._tables.get(k) != v}
        if not changes:
            return []
        if self._staged_from is None:
            self._staged_from = dict(self._tables)
        for key, table in changes.items():
            if table is None:
                self._tables.pop(key, None)
            else:
                self._tables[key] = table
        self._folded_index = None
        self._staged_keys.update(changes)
        self._staged_statements.append(sql)
        log.info("schema_ddl_applied", statement=_short(sql, 500),
                 tables={".".join(k): None if v is None else v.column_names
                         for k, v in changes.items()})  # fmt: skip
        return list(changes)

    def commit(self, position: Position) -> None:
        """Stamp the staged DDL with the position after its transaction."""
        if self._staged_from is None:
            return
        tables = tuple((k, self._tables.get(k)) for k in sorted(self._staged_keys))
        self._entries.append(_Entry(position, tuple(self._staged_statements), tables))
        if self.window_end is not None:
            if at_or_before(position, self.window_end):
                log.warning("schema_ddl_in_snapshot_window", position=str(position),
                            snapshot_end=str(self.window_end),
                            statements=[_short(s, 500) for s in self._staged_statements],
                            note="the snapshot may hold it; applied idempotently")  # fmt: skip
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

    def apply_to(self, table_map: TableMapEvent) -> bool:
        """Name a TABLE_MAP's columns from the history (only maps without COLUMN_NAME
        metadata). False leaves it as it was: FULL metadata, an unknown table or a mismatch."""
        if table_map.has_names:
            return False
        key = (table_map.schema, table_map.table)
        table = self.columns(*key)
        reason = None
        if table is None:
            reason = "the schema history does not know this table"
        elif len(table.columns) == len(table_map.columns):
            reason = _type_mismatch(table, table_map)
        reason = reason or table_map.apply_schema(table)
        if reason is None:
            return True
        if (key, table) not in self._warned:  # once per table version, not per transaction
            self._warned.add((key, table))
            log.warning("schema_mismatch", db=key[0], table=key[1], reason=reason,
                        history_columns=None if table is None else table.column_names,
                        note="its columns stay @1, @2, ...")  # fmt: skip
        return False

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

    def save(self, path: str | os.PathLike[str], *, durable: Position | None = None) -> None:
        """Replace the file atomically. `durable`: the position the store holds now; entries
        at or before it are folded into the base. Staged DDL is not saved."""
        if durable is not None:
            self._fold(durable)
        write_atomically(Path(path), orjson.dumps(self.to_json()))
        self.dirty = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any], position: Position) -> SchemaHistory:
        """The history as it was at `position`: later entries are dropped."""
        base = data["base"]
        base_position = None if base["position"] is None else Position.from_json(base["position"])
        window = None if base.get("window_end") is None else Position.from_json(base["window_end"])
        history = cls([TableSchema.from_json(t) for t in base["tables"]], base_position,
                      window_end=window)  # fmt: skip
        if base_position is not None and at_or_before(base_position, position) is False:
            raise SchemaHistoryAheadError(
                "the schema history starts after the stored position (was the position moved "
                "back?), so it cannot describe the tables there",
                base=str(base_position), position=str(position),
            )  # fmt: skip
        dropped = 0
        for raw in data["entries"]:
            entry_position = Position.from_json(raw["position"])
            order = at_or_before(entry_position, position)
            if order is False or dropped:
                dropped += 1  # after the stored position: the stream will bring it again
                continue
            if order is None:
                log.warning("schema_history_position_incomparable", entry=str(entry_position),
                            position=str(position))  # fmt: skip
            tables = tuple(
                ((t["schema"], t["table"]),
                 None if t["definition"] is None else TableSchema.from_json(t["definition"]))
                for t in raw["tables"]
            )  # fmt: skip
            history._entries.append(_Entry(entry_position, tuple(raw["statements"]), tables))
            for key, table in tables:
                if table is None:
                    history._tables.pop(key, None)
                else:
                    history._tables[key] = table
        history.dirty = dropped > 0
        log.info("schema_history_loaded", tables=len(history), entries=history.entries,
                 dropped_after_position=dropped, position=str(position))  # fmt: skip
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
        try:
            data = orjson.loads(raw)
            if data.get("format") != FORMAT or data.get("version") != FORMAT_VERSION:
                raise SchemaHistoryError(
                    f"schema history has an unknown format (expected {FORMAT} "
                    f"version {FORMAT_VERSION})", file=str(path)
                )  # fmt: skip
            return cls.from_json(data, position)
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, ConfigError) as exc:
            raise SchemaHistoryError(
                f"schema history is damaged: {type(exc).__name__}: {exc}", file=str(path)
            ) from None


def write_atomically(path: Path, data: bytes) -> None:
    """Write a temporary file, fsync it, rename it over `path`, fsync the directory: after a
    crash `path` holds the old or the new content, never a torn one."""
    directory = path.parent if str(path.parent) else Path(".")
    temp = directory / f".{path.name}.tmp"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        try:
            temp.unlink(missing_ok=True)
        except OSError:
            pass
        raise SchemaHistoryError(
            f"cannot write the schema history: {exc.strerror}", file=str(path)
        ) from None


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
            t = _Tokens(_lex(column_type))
            t.i += 1
            members = _members(t.group())
        column = ColumnSchema(
            name,
            data_type,
            "unsigned" in words and _FAMILY_OF.get(data_type) in _NUMERIC_FAMILIES,
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


async def _binlog_end(conn: Any) -> Position | None:
    for sql in ("SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"):  # MySQL 8.4 renamed it
        try:
            result = await conn.query(sql)
        except ServerError:
            continue
        if result.rows:
            return Position(_text(result.rows[0][0]), int(_text(result.rows[0][1])))
    return None


async def snapshot(conn: Any, position: Position) -> SchemaHistory:
    """The schema from information_schema, recorded as the schema at `position`.

    Read it right after `position` was read from the server (start: latest) and before the
    dump starts. The binlog end is read again afterwards: DDL between the two may be in the
    snapshot already (see the module docstring). Tables the source user cannot see (no
    privilege on them) are missing: their TABLE_MAPs keep @N names until a CREATE is seen."""
    columns = await conn.query(COLUMNS_SQL)
    primary_keys = await conn.query(PRIMARY_KEYS_SQL)
    end = await _binlog_end(conn)
    window_end = None
    if end is not None and (end.file, end.pos) != (position.file, position.pos):
        window_end = end
    history = SchemaHistory(
        tables_from_information_schema(columns.rows, primary_keys.rows),
        position,
        window_end=window_end,
    )
    history.dirty = True
    log.info("schema_snapshot", tables=len(history), position=str(position),
             binlog_moved_to=None if window_end is None else str(window_end))  # fmt: skip
    return history
