"""Which cache keys a change invalidates (docs/invalidate.md); sans-IO: change messages in, a
plan of Redis operations out.

A rule maps the tables its regex takes to key templates over the row images: `user:{id}` and
`user:email:{email}`. Each template is rendered from the `before` and the `after` image alike,
so an update that changes `email` invalidates the old key and the new one, a primary-key change
(a delete and a create) both ids. A placeholder is a column of the image, or `{db}`/`{table}`;
one whose column is NULL in an image renders no key from that image (nothing is cached under a
NULL). A column the image does not have (a typo, a column excluded by the filters) is an
error naming the rule, template and placeholder: an invalidator that silently rendered nothing
would leave stale keys.

Per batch of messages the keys are coalesced (each deleted once, in first-seen order) and the
notices grouped by channel. A table-level event (TRUNCATE `op: "t"`, or a DROP/RENAME from the
schema topic) takes the rule's table-wide action: `scan` (every key matching a pattern is
unlinked: a SCAN over the whole keyspace, O(keys in Redis)) or `generation` (one counter is
incremented; readers put it in their keys, so every old key is unreachable at once and expires
by its TTL: O(1)).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from replicad.errors import ConfigError

TABLE_PLACEHOLDERS = frozenset({"db", "table"})


class TemplateError(ConfigError):
    """A key template that cannot be rendered for a table's rows: it names a column the row
    image does not have. Exit 78: the rules need an operator."""


def placeholders(template: str) -> list[str]:
    """The placeholder names of a template, in order; raises ValueError on a malformed one."""
    names = []
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        if not name or spec or conversion or not re.fullmatch(r"[^{}\[\].!:]+", name):
            raise ValueError(f"placeholder {{{name}}} in {template!r}: a bare column name only")
        names.append(name)
    return names


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return str(value)


@dataclass(frozen=True)
class KeyTemplate:
    text: str
    names: tuple[str, ...]

    @classmethod
    def of(cls, text: str) -> KeyTemplate:
        return cls(text, tuple(placeholders(text)))

    def render(self, image: Mapping[str, Any], db: str, table: str, rule: int) -> str | None:
        """The key for one row image; None when a placeholder's column is NULL."""
        values: dict[str, str] = {}
        for name in self.names:
            if name in image:
                value = image[name]
            elif name in TABLE_PLACEHOLDERS:
                value = db if name == "db" else table
            else:
                raise TemplateError(
                    f"the key template names a column the row of {db}.{table} does not have",
                    key=f"invalidate.rules[{rule}].keys",
                    template=self.text,
                    placeholder=name,
                    table=f"{db}.{table}",
                    columns=sorted(image),
                )
            if value is None:
                return None
            values[name] = _text(value)
        return self.text.format_map(values)


@dataclass(frozen=True)
class Rule:
    index: int
    table: re.Pattern[str]
    keys: tuple[KeyTemplate, ...]
    delete: bool
    publish: bool
    channel: str
    table_action: str  # none | scan | generation
    table_key: str  # the scan pattern or the generation key (a template over db/table)

    def channel_for(self, db: str, table: str) -> str:
        return self.channel.format(db=db, table=table)


@dataclass(frozen=True)
class TableWide:
    """A table-level event: every key of the table under one rule goes."""

    action: str  # scan | generation
    target: str  # the pattern or the generation key
    db: str
    table: str
    reason: str  # truncate | drop | rename


@dataclass
class Plan:
    """What one batch of messages asks of Redis."""

    delete: list[str] = field(default_factory=list)
    notices: dict[str, list[str]] = field(default_factory=dict)  # channel -> keys
    table_wide: list[TableWide] = field(default_factory=list)
    changes: int = 0
    _seen: set[str] = field(default_factory=set)
    _noticed: set[tuple[str, str]] = field(default_factory=set)

    def add_delete(self, key: str) -> None:
        if key not in self._seen:
            self._seen.add(key)
            self.delete.append(key)

    def add_notice(self, channel: str, key: str) -> None:
        if (channel, key) not in self._noticed:
            self._noticed.add((channel, key))
            self.notices.setdefault(channel, []).append(key)

    def add_table_wide(self, event: TableWide) -> None:
        if event not in self.table_wide:
            self.table_wide.append(event)

    @property
    def empty(self) -> bool:
        return not (self.delete or self.notices or self.table_wide)


class RuleSet:
    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = list(rules)
        self._by_table: dict[tuple[str, str], list[Rule]] = {}

    @classmethod
    def from_config(cls, rules: Iterable[Any]) -> RuleSet:
        """From `invalidate.rules` (replicad.config.InvalidationRule)."""
        built = []
        for index, rule in enumerate(rules):
            where = f"invalidate.rules[{index}]"
            try:
                keys = tuple(KeyTemplate.of(k) for k in rule.keys)
                for name, template in (("channel", rule.channel), ("table_key", rule.table_key)):
                    unknown = set(placeholders(template or "")) - TABLE_PLACEHOLDERS
                    if unknown:
                        raise ValueError(
                            f"{name} {template!r} may name only {{db}} and {{table}}, not "
                            f"{{{sorted(unknown)[0]}}}"
                        )
            except ValueError as exc:
                raise ConfigError(str(exc), key=where) from None
            built.append(
                Rule(
                    index=index,
                    table=re.compile(rule.table),
                    keys=keys,
                    delete=rule.action in ("delete", "both"),
                    publish=rule.action in ("publish", "both"),
                    channel=rule.channel,
                    table_action=rule.table_action,
                    table_key=rule.table_key or "",
                )
            )
        return cls(built)

    def for_table(self, db: str, table: str) -> list[Rule]:
        found = self._by_table.get((db, table))
        if found is None:
            found = [r for r in self.rules if r.table.fullmatch(f"{db}.{table}")]
            self._by_table[(db, table)] = found
        return found

    def add_change(self, plan: Plan, envelope: Mapping[str, Any]) -> None:
        """One change message (the envelope of docs/consumers.md) into the plan."""
        source = envelope.get("source") or {}
        db, table = str(source.get("db")), str(source.get("table"))
        rules = self.for_table(db, table)
        if not rules:
            return
        plan.changes += 1
        if envelope.get("op") == "t":
            self._table_wide(plan, rules, db, table, "truncate")
            return
        images = [i for i in (envelope.get("before"), envelope.get("after")) if i is not None]
        for rule in rules:
            for template in rule.keys:
                for image in images:
                    key = template.render(image, db, table, rule.index)
                    if key is None:
                        continue
                    if rule.delete:
                        plan.add_delete(key)
                    if rule.publish:
                        plan.add_notice(rule.channel_for(db, table), key)

    def add_schema_event(self, plan: Plan, record: Mapping[str, Any]) -> None:
        """A schema-topic record: a DROP or RENAME of a table takes its table-wide action (a
        renamed table's keys are named after the old name, which holds no rows any more)."""
        if record.get("type") != "ddl" or record.get("kind") not in ("drop", "rename"):
            return
        if record.get("before") is None:  # the new name of a rename: nothing cached under it
            return
        db, table = str(record.get("db")), str(record.get("table"))
        rules = self.for_table(db, table)
        if rules:
            plan.changes += 1
            self._table_wide(plan, rules, db, table, str(record["kind"]))

    @staticmethod
    def _table_wide(plan: Plan, rules: list[Rule], db: str, table: str, reason: str) -> None:
        for rule in rules:
            if rule.table_action != "none":
                target = rule.table_key.format(db=db, table=table)
                plan.add_table_wide(TableWide(rule.table_action, target, db, table, reason))
            if rule.publish:
                plan.add_notice(rule.channel_for(db, table), "*")
