"""What reaches the sinks and where it goes: table filters, column exclusion and masking,
topic names and message keys.

Every decision is per table (or per table and column set) and cached, so the per-row cost is
a dictionary lookup. Regexes are fully matched: `shop\\..*` includes `shop.orders`, not
`myshop.orders`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from replicad.binlog.changes import RowChange
from replicad.config import FiltersConfig, KafkaSinkConfig
from replicad.errors import ConfigError

MASK = "***"


def _compile(patterns: Iterable[str]) -> re.Pattern[str] | None:
    patterns = list(patterns)
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{p})" for p in patterns))


class ChangeFilter:
    """Table include/exclude and column exclude/mask (the `filters` section)."""

    def __init__(self, config: FiltersConfig) -> None:
        self._include = _compile(config.include)
        self._exclude = _compile(config.exclude)
        self._drop_columns = _compile(config.columns.exclude)
        self._mask_columns = _compile(config.columns.mask)
        self._tables: dict[tuple[str, str], bool] = {}
        # (db, table, column names) -> (columns to drop, columns to mask), both maybe empty
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
    def touches_columns(self) -> bool:
        return self._drop_columns is not None or self._mask_columns is not None

    def rows(self, change: RowChange) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The change's before and after images without excluded columns and with masked
        ones replaced by "***". The change itself is left intact: sinks take the message key
        from the real values first, so keys stay unique."""
        before, after = change.before, change.after
        row = after if after is not None else before
        if row is None or not self.touches_columns:
            return before, after
        names = tuple(row)
        cache_key = (change.db, change.table, names)
        policy = self._columns.get(cache_key)
        if policy is None:
            policy = self._columns[cache_key] = self._policy(change.db, change.table, names)
        drop, mask = policy
        if not (drop or mask):
            return before, after
        return _filtered(before, drop, mask), _filtered(after, drop, mask)

    def _policy(self, db: str, table: str, names: tuple[str, ...]) -> tuple[frozenset[str], ...]:
        def matching(pattern: re.Pattern[str] | None) -> frozenset[str]:
            if pattern is None:
                return frozenset()
            return frozenset(n for n in names if pattern.fullmatch(f"{db}.{table}.{n}"))

        return matching(self._drop_columns), matching(self._mask_columns)


def _filtered(
    row: dict[str, Any] | None, drop: frozenset[str], mask: frozenset[str]
) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        name: (MASK if name in mask and value is not None else value)
        for name, value in row.items()
        if name not in drop
    }


class KafkaRouting:
    """Topic names and keys for the Kafka sink."""

    def __init__(self, config: KafkaSinkConfig, pipeline: str) -> None:
        self.prefix = config.topic_prefix(pipeline)
        self.pipeline = pipeline
        self._template = config.topic
        self._key_without_pk = config.key_without_pk
        self._topics: dict[tuple[str, str], str] = {}
        self.oversized_topic = self.expand(config.oversized_topic, "", "")
        self.positions_topic = self.expand(config.positions_topic, "", "")
        self.schema_topic = self.expand(config.schema_topic, "", "") if config.schema_topic else ""
        self.topic("db", "table")  # a bad template fails at start, not at the first row

    def expand(self, template: str, db: str, table: str) -> str:
        try:
            name = template.format(prefix=self.prefix, db=db, table=table, pipeline=self.pipeline)
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                f"bad topic template: {exc!r} (placeholders: {{prefix}} {{db}} {{table}} "
                "{pipeline})",
                key="sinks.kafka.topic",
                value=template,
            ) from None
        return sanitize_topic(name)

    def topic(self, db: str, table: str) -> str:
        key = (db, table)
        name = self._topics.get(key)
        if name is None:
            name = self._topics[key] = self.expand(self._template, db, table)
        return name

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


_TOPIC_BAD = re.compile(r"[^A-Za-z0-9._-]")


def sanitize_topic(name: str) -> str:
    """Kafka topic names allow [A-Za-z0-9._-] and at most 249 characters; MySQL names allow
    far more. Other characters become '_' (as Debezium does); over-long names are an error
    rather than a silent truncation that could merge two tables into one topic."""
    cleaned = _TOPIC_BAD.sub("_", name)
    if not cleaned or cleaned in (".", ".."):
        raise ConfigError("topic name is empty after sanitizing", value=name)
    if len(cleaned) > 249:
        raise ConfigError("topic name longer than Kafka's 249 characters", value=cleaned)
    return cleaned
