"""What reaches the sinks and where it goes: table filters, column exclusion and masking,
topic names and message keys.

Every decision is per table (or per table and column set) and cached, so the per-row cost is
a dictionary lookup. Regexes are fully matched: `shop\\..*` includes `shop.orders`, not
`myshop.orders`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from replicad.binlog.changes import RowChange
from replicad.config import ColumnFiltersConfig, FiltersConfig, KafkaSinkConfig
from replicad.errors import ConfigError
from replicad.published.topics import TopicNames
from replicad.sinks.envelope import dumps
from replicad.sinks.event_envelope import KEY_COLUMNS, KEY_CONSTANT, KEY_NONE

MASK = "***"


def _compile(patterns: Iterable[str]) -> re.Pattern[str] | None:
    patterns = list(patterns)
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{p})" for p in patterns))


class ChangeFilter:
    """Table include/exclude, column exclude/mask/hash and key columns (the `filters`
    section)."""

    def __init__(self, config: FiltersConfig, environ: Mapping[str, str] | None = None) -> None:
        self._include = _compile(config.include)
        self._exclude = _compile(config.exclude)
        self._drop_columns = _compile(config.columns.exclude)
        self._mask_columns = _compile(config.columns.mask)
        self._hash_columns = _compile(config.columns.hash)
        self._hasher: Callable[[Any], str] | None = None
        if self._hash_columns is not None:
            self._hasher = _salted_hash(config.columns, os.environ if environ is None else environ)
        self._key_columns = [(re.compile(p), tuple(c)) for p, c in config.key_columns.items()]
        self._keys: dict[tuple[str, str], tuple[str, ...] | None] = {}
        self._tables: dict[tuple[str, str], bool] = {}
        # (db, table, column names) -> (columns to drop, to mask, to hash), each maybe empty
        self._columns: dict[tuple[str, str, tuple[str, ...]], tuple[frozenset[str], ...]] = {}

    def includes(self, db: str, table: str) -> bool:
        key = (db, table)
        decision = self._tables.get(key)
        if decision is None:
            name = f"{db}.{table}"
            decision = bool(
                (self._include is None or self._include.fullmatch(name))
                and not (self._exclude is not None and self._exclude.fullmatch(name))
            )
            self._tables[key] = decision
        return decision

    @property
    def rewrites_changes(self) -> bool:
        """Whether any change may come out of `prepared`, `rows` or `key_row` other than it
        went in (key columns, dropped, masked or hashed columns)."""
        return bool(self._key_columns) or self.touches_columns

    @property
    def touches_columns(self) -> bool:
        return (
            self._drop_columns is not None
            or self._mask_columns is not None
            or self._hash_columns is not None
        )

    def prepared(self, change: RowChange) -> RowChange:
        """The change as every sink should see it: `key_columns` as its key columns when a
        pattern names its table (every output then splits a change of them into a delete
        and a create), and without its statement text (`source.query`) when the table masks
        or hashes a column: the statement would show the values in clear."""
        if self._key_columns:
            change = self._keyed(change)
        if change.query is not None and self.touches_columns:
            row = change.after if change.after is not None else change.before
            if row is not None:
                _, mask, hashed = self._policy_of(change, row)
                if mask or hashed:
                    change = dataclasses.replace(change, query=None)
        return change

    def _keyed(self, change: RowChange) -> RowChange:
        table = (change.db, change.table)
        if table not in self._keys:
            name = f"{change.db}.{change.table}"
            self._keys[table] = next(
                (cols for pattern, cols in self._key_columns if pattern.fullmatch(name)), None
            )
        columns = self._keys[table]
        if columns is None or columns == change.primary_key:
            return change
        row = change.after if change.after is not None else change.before
        missing = [c for c in columns if row is not None and c not in row]
        if missing:
            raise ConfigError(
                "filters.key_columns names columns the table does not have",
                table=f"{change.db}.{change.table}",
                columns=",".join(missing),
                key="filters.key_columns",
            )
        return dataclasses.replace(change, primary_key=columns)

    def rows(self, change: RowChange) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The change's before and after images without excluded columns, with masked ones
        replaced by "***" and hashed ones by their salted hash. The change itself is left
        intact: keys are taken from it through `key_row`."""
        before, after = change.before, change.after
        row = after if after is not None else before
        if row is None or not self.touches_columns:
            return before, after
        drop, mask, hashed = self._policy_of(change, row)
        if not (drop or mask or hashed):
            return before, after
        return self._filtered(before, drop, mask, hashed), self._filtered(after, drop, mask, hashed)

    def key_row(self, change: RowChange, row: dict[str, Any] | None) -> dict[str, Any] | None:
        """The row a message key is taken from: hashed key columns hashed as in the images,
        so a hashed key never appears in clear. A "***"-masked key column is refused: the key
        would either show it or stop being unique. Without key columns (the row itself may be
        the key) the row as the images show it."""
        if row is None or not self.touches_columns:
            return row
        drop, mask, hashed = self._policy_of(change, row)
        if not (drop or mask or hashed):
            return row
        if not change.primary_key:  # the whole row may be the key (key_without_pk: row)
            return self._filtered(row, drop, mask, hashed)
        masked_keys = mask.intersection(change.primary_key)
        if masked_keys:
            raise ConfigError(
                "a key column is masked with '***'; hash it instead (filters.columns.hash)",
                table=f"{change.db}.{change.table}",
                columns=",".join(sorted(masked_keys)),
                key="filters.columns.mask",
            )
        assert self._hasher is not None or not hashed
        return {
            n: self._hasher(v) if n in hashed and v is not None and self._hasher else v
            for n, v in row.items()
        }

    def _policy_of(self, change: RowChange, row: dict[str, Any]) -> tuple[frozenset[str], ...]:
        names = tuple(row)
        cache_key = (change.db, change.table, names)
        policy = self._columns.get(cache_key)
        if policy is None:
            policy = self._columns[cache_key] = self._policy(change.db, change.table, names)
        return policy

    def _policy(self, db: str, table: str, names: tuple[str, ...]) -> tuple[frozenset[str], ...]:
        def matching(pattern: re.Pattern[str] | None) -> frozenset[str]:
            if pattern is None:
                return frozenset()
            return frozenset(n for n in names if pattern.fullmatch(f"{db}.{table}.{n}"))

        drop = matching(self._drop_columns)
        hashed = matching(self._hash_columns) - drop
        return drop, matching(self._mask_columns) - drop - hashed, hashed

    def _filtered(
        self,
        row: dict[str, Any] | None,
        drop: frozenset[str],
        mask: frozenset[str],
        hashed: frozenset[str],
    ) -> dict[str, Any] | None:
        if row is None:
            return None
        hasher = self._hasher
        out: dict[str, Any] = {}
        for name, value in row.items():
            if name in drop:
                continue
            if value is not None and name in hashed and hasher is not None:
                value = hasher(value)
            elif value is not None and name in mask:
                value = MASK
            out[name] = value
        return out


def _salted_hash(config: ColumnFiltersConfig, environ: Mapping[str, str]) -> Callable[[Any], str]:
    """HMAC of a value's JSON text (the exact mapping, so equal values hash equal across
    restarts and instances) under the salt in `salt_env`."""
    salt = environ.get(config.salt_env, "")
    if not salt:
        raise ConfigError(
            "filters.columns.hash needs a secret salt in an environment variable",
            variable=config.salt_env,
            key="filters.columns.salt_env",
        )
    key = salt.encode()
    digest = getattr(hashlib, config.hash_algorithm)

    def hashed(value: Any) -> str:
        return hmac.new(key, dumps(value), digest).hexdigest()

    return hashed


class KafkaRouting:
    """Topic names and keys for the Kafka sink."""

    def __init__(self, config: KafkaSinkConfig, pipeline: str) -> None:
        self.names = TopicNames.of(config, pipeline)
        self._key_without_pk = config.key_without_pk
        self._topics: dict[tuple[str, str], str] = {}
        self.oversized_topic = self.names.expand(config.oversized_topic)
        self.positions_topic = self.names.expand(config.positions_topic)
        self.schema_topic = self.names.expand(config.schema_topic) if config.schema_topic else ""
        self.transaction_topic = (
            self.names.expand(config.transaction_topic) if config.transaction_topic else ""
        )
        self.heartbeat_topic = self.names.expand(config.heartbeat_topic)
        self.topic("db", "table")  # a bad template fails at start, not at the first row

    def topic(self, db: str, table: str) -> str:
        key = (db, table)
        name = self._topics.get(key)
        if name is None:
            name = self._topics[key] = self.names.table(db, table)
        return name

    def event_key(
        self, db: str, table: str, primary_key: tuple[str, ...]
    ) -> tuple[int, Any] | None:
        """How the compiled path (`event_envelope`) makes the keys `key` gives for a table's
        rows: (KEY_COLUMNS, None), (KEY_CONSTANT, the key's bytes), (KEY_NONE, None); None
        for the whole row as the key (row by row only)."""
        if primary_key:
            return (KEY_COLUMNS, None)
        if self._key_without_pk == "table":
            return (KEY_CONSTANT, dumps({"db": db, "table": table}))
        if self._key_without_pk == "row":
            return None
        return (KEY_NONE, None)

    def key(self, change: RowChange, row: dict[str, Any] | None) -> dict[str, Any] | None:
        """The message key as a JSON object: the primary-key columns, else the fallback."""
        if row is None:
            return None
        if change.primary_key:
            return {name: row.get(name) for name in change.primary_key}
        if self._key_without_pk == "table":
            return {"db": change.db, "table": change.table}
        if self._key_without_pk == "row":
            return row
        return None
