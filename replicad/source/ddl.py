"""DDL for the schema history: a small MySQL lexer and recursive descent over the statements
that change columns: CREATE TABLE (column list, LIKE), ALTER TABLE ADD/DROP/CHANGE/MODIFY/RENAME
COLUMN with FIRST/AFTER, ADD/DROP PRIMARY KEY, RENAME TO, ADD/DROP SYSTEM VERSIONING, RENAME
TABLE, DROP TABLE, DROP DATABASE. Sans-IO and silent: a statement's changes and notes are
collected over the tables as they are before the statement (a `TableLookup`) and returned as
a `StatementEffect` by `apply_ddl`; `SchemaHistory.apply` (`replicad.source.schema`) commits
or logs them. A statement it cannot read is reported in `StatementEffect.unparsed`, with only
the tables it made unknowable (CREATE TABLE ... SELECT) as changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from typing import Protocol

from replicad.source.schema_model import (
    FAMILY_OF,
    NUMERIC_FAMILIES,
    SYSTEM_SCHEMAS,
    ColumnSchema,
    Key,
    TableSchema,
)


class TableLookup(Protocol):
    """The tables a statement is applied over, as they are before it."""

    def find(self, key: Key) -> tuple[Key, TableSchema] | None:
        """The table named `key` (matched case-insensitively when that is unambiguous)."""
        ...

    def keys(self) -> Iterable[Key]: ...


@dataclass(slots=True)
class StatementEffect:
    """What one statement does to the tables: each changed table's new schema (None: it is
    gone, or exists with columns nobody can know), notes to log as (event, detail), and why
    the statement could not be read, if it could not."""

    changes: dict[Key, TableSchema | None]
    notes: list[tuple[str, str]]
    unparsed: str | None = None
    verb: str = ""  # CREATE, ALTER, DROP, RENAME, TRUNCATE (upper case), or "" for others
    truncated: list[Key] = field(default_factory=list)  # TRUNCATE TABLE: rows gone, columns kept


def is_ddl(sql: str) -> bool:
    """Whether `sql` may change a table's columns (CREATE, ALTER, DROP, RENAME, TRUNCATE),
    skipping comments and the /*!...*/ version prefixes."""
    head = _HEAD.match(sql)
    return head is not None and head[1].upper() in _DDL_VERBS


def apply_ddl(
    sql: str, tables: TableLookup, default_schema: str, *, escapes: bool = True
) -> StatementEffect:
    """The effect of one statement over `tables`; never raises for a statement."""
    work = _Work(tables, default_schema)
    try:
        _execute(sql, work, escapes)
    except (_Unparsed, ValueError, IndexError) as exc:
        # CREATE TABLE ... SELECT: the table exists now, with columns we cannot know.
        unknowable: dict[Key, TableSchema | None] = dict.fromkeys(work.unknowable)
        return StatementEffect(unknowable, work.notes, str(exc) or type(exc).__name__, work.verb)
    return StatementEffect(work.changes, work.notes, None, work.verb, work.truncated)


def enum_set_members(column_type: str) -> tuple[str, ...]:
    """The members of an ENUM/SET type as information_schema spells it: `enum('a','b')`."""
    t = _Tokens(_lex(column_type))
    t.i += 1
    return _members(t.group())


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
_ESCAPES = {
    "0": "\0",
    "b": "\b",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "Z": "\x1a",
    "%": "\\%",
    "_": "\\_",
}
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
                body = re.sub(
                    rf"\\([\s\S])|{quote}{quote}",
                    lambda x, q=quote: q if x[1] is None else _ESCAPES.get(x[1], x[1]),
                    body,
                )
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
    "integer": "int",
    "int1": "tinyint",
    "int2": "smallint",
    "int3": "mediumint",
    "int4": "int",
    "int8": "bigint",
    "middleint": "mediumint",
    "bool": "tinyint",
    "boolean": "tinyint",
    "dec": "decimal",
    "numeric": "decimal",
    "fixed": "decimal",
    "number": "decimal",
    "real": "double",
    "float4": "float",
    "float8": "double",
    "character": "char",
    "nchar": "char",
    "nvarchar": "varchar",
    "varchar2": "varchar",
    "serial": "bigint",
    "long": "mediumtext",
    "geomcollection": "geometrycollection",
}
_INDEX_WORDS = frozenset(
    {"PRIMARY", "KEY", "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "CONSTRAINT", "FOREIGN", "CHECK"}
)


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
        unsigned and FAMILY_OF.get(data_type) in NUMERIC_FAMILIES,
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

    def __init__(self, tables: TableLookup, default_schema: str) -> None:
        self.tables = tables
        self.default_schema = default_schema
        self.changes: dict[Key, TableSchema | None] = {}
        self.notes: list[tuple[str, str]] = []  # (log event, detail)
        self.unknowable: set[Key] = set()  # tables that now exist with columns we cannot know
        self.verb = ""
        self.truncated: list[Key] = []

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
        found = self.tables.find(key)
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
    work.verb = verb if verb in _DDL_VERBS else ""
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
    elif verb == "TRUNCATE":
        t.take("TABLE")
        name = work.name(t)
        found = work.find(name)
        work.truncated.append(name if found is None else found[0])
    # Everything else (views, routines, users, indexes): columns unchanged.


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


_ALTER_NOOP = frozenset(
    """ALGORITHM LOCK ENGINE FORCE DEFAULT CHARACTER CHARSET COLLATE COMMENT
    AUTO_INCREMENT ROW_FORMAT KEY_BLOCK_SIZE AVG_ROW_LENGTH MAX_ROWS MIN_ROWS PACK_KEYS
    STATS_AUTO_RECALC STATS_PERSISTENT STATS_SAMPLE_PAGES CHECKSUM TABLE_CHECKSUM DELAY_KEY_WRITE
    ENCRYPTION ENCRYPTED ENCRYPTION_KEY_ID PAGE_CHECKSUM PAGE_COMPRESSED PAGE_COMPRESSION_LEVEL
    TRANSACTIONAL IETF_QUOTES DATA INDEX INSERT_METHOD UNION TABLESPACE STORAGE COMPRESSION
    SECONDARY_ENGINE SECONDARY_ENGINE_ATTRIBUTE ENGINE_ATTRIBUTE AUTOEXTEND_SIZE START_TRANSACTION
    ENABLE DISABLE DISCARD IMPORT ORDER PARTITION PARTITIONS REMOVE COALESCE REORGANIZE EXCHANGE
    ANALYZE CHECK OPTIMIZE REBUILD REPAIR TRUNCATE UPGRADE WITH WITHOUT ALTER CONVERT
    SEQUENCE""".split()
)


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
    edit = _Edit(
        key,
        list(table.defined_columns),
        list(table.primary_key),
        table.implicit_versioning,
        work=work,
    )
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
        # sorted: their DDL records come in this order (a set's follows the hash seed)
        keys = sorted(set(work.tables.keys()) | set(work.changes))
        matches = [k for k in keys if k[0] == db] or [
            k for k in keys if k[0].casefold() == db.casefold()
        ]
        for key in matches:
            work.put(key, None)
