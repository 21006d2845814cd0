"""Invalidation rules (replicad/invalidate/rules.py): which keys a change message invalidates."""

from __future__ import annotations

import re
import socket

import pytest

from replicad.config import InvalidationRule
from replicad.errors import ConfigError
from replicad.invalidate.rules import Plan, RuleSet, TableWide, TemplateError
from replicad.published.topics import TopicNames

pytestmark = pytest.mark.unit


def _rules(*rules: dict) -> RuleSet:
    return RuleSet.from_config([InvalidationRule(**r) for r in rules])


USERS = {"table": r"shop\.users", "keys": ["user:{id}", "user:email:{email}"]}


def _change(op: str, before: dict | None, after: dict | None, table: str = "users") -> dict:
    source = {"db": "shop", "table": table, "file": "b.000001", "pos": 4, "row": 0}
    return {"op": op, "before": before, "after": after, "source": source}


def _plan(rules: RuleSet, *messages: dict) -> Plan:
    plan = Plan()
    for message in messages:
        rules.add_change(plan, message)
    return plan


def test_an_update_of_a_unique_column_invalidates_the_old_and_the_new_key() -> None:
    plan = _plan(
        _rules(USERS),
        _change("u", {"id": 1, "email": "a@x"}, {"id": 1, "email": "b@x"}),
    )
    assert plan.delete == ["user:1", "user:email:a@x", "user:email:b@x"]
    assert plan.changes == 1


def test_a_primary_key_change_invalidates_both_ids_and_keys_are_coalesced() -> None:
    plan = _plan(
        _rules(USERS),
        _change("d", {"id": 1, "email": "a@x"}, None),
        _change("c", None, {"id": 2, "email": "a@x"}),
        _change("u", {"id": 2, "email": "a@x"}, {"id": 2, "email": "a@x"}),
        _change("r", None, {"id": 3, "email": None}),  # a snapshot read repairs too
    )
    assert plan.delete == ["user:1", "user:email:a@x", "user:2", "user:3"]


def test_values_render_as_text_and_a_null_column_renders_no_key() -> None:
    rules = _rules({"table": r"shop\..*", "keys": ["{db}:{table}:{k}:{d}"]})
    plan = _plan(
        rules,
        _change("c", None, {"k": 10, "d": "1.50"}, table="prices"),
        _change("c", None, {"k": None, "d": "2"}, table="prices"),
    )
    assert plan.delete == ["shop:prices:10:1.50"]


def test_a_placeholder_the_row_does_not_have_is_an_error_naming_it() -> None:
    rules = _rules({"table": r"shop\.users", "keys": ["user:{id}", "user:mail:{mail}"]})
    with pytest.raises(TemplateError) as error:
        _plan(rules, _change("c", None, {"id": 1, "email": "a@x"}))
    text = str(error.value)
    assert "mail" in text and "user:mail:{mail}" in text and "shop.users" in text
    assert error.value.exit_code == 78


@pytest.mark.parametrize(
    ("rule", "named"),
    [
        ({"table": "t", "keys": ["user:{id!r}"]}, "invalidate.rules[0]"),
        ({"table": "t", "keys": ["user:{id"]}, "invalidate.rules[0]"),
        ({"table": "t", "keys": ["k"], "channel": "c:{id}"}, "invalidate.rules[0]"),
    ],
)
def test_malformed_templates_fail_at_the_start_naming_the_rule(rule: dict, named: str) -> None:
    with pytest.raises(ConfigError) as error:
        _rules(rule)
    assert named in str(error.value)


def test_publish_groups_keys_by_channel_and_delete_is_separate() -> None:
    rules = _rules({**USERS, "action": "publish"})
    plan = _plan(
        rules,
        _change("u", {"id": 1, "email": "a"}, {"id": 1, "email": "b"}),
        _change("d", {"id": 1, "email": "b"}, None),
    )
    assert plan.delete == []
    assert plan.notices == {"replicad:shop.users": ["user:1", "user:email:a", "user:email:b"]}


def test_truncate_and_drop_take_the_table_wide_action() -> None:
    rules = _rules(
        {**USERS, "action": "both", "table_action": "scan", "table_key": "user:*"},
        {"table": r"shop\.users", "table_action": "generation", "table_key": "gen:{db}.{table}"},
    )
    plan = _plan(
        rules,
        {"op": "t", "before": None, "after": None, "source": {"db": "shop", "table": "users"}},
    )
    assert plan.table_wide == [
        TableWide("scan", "user:*", "shop", "users", "truncate"),
        TableWide("generation", "gen:shop.users", "shop", "users", "truncate"),
    ]
    assert plan.notices == {"replicad:shop.users": ["*"]}
    dropped = Plan()
    rules.add_schema_event(
        dropped,
        {
            "type": "ddl",
            "kind": "drop",
            "db": "shop",
            "table": "users",
            "before": {},
            "after": None,
        },
    )
    assert [e.reason for e in dropped.table_wide] == ["drop", "drop"]
    renamed_to = Plan()  # the new name's half of a RENAME: nothing was cached under it
    rules.add_schema_event(
        renamed_to,
        {
            "type": "ddl",
            "kind": "rename",
            "db": "shop",
            "table": "users",
            "before": None,
            "after": {},
        },
    )
    altered = Plan()
    rules.add_schema_event(
        altered,
        {"type": "ddl", "kind": "alter", "db": "shop", "table": "users", "before": {}, "after": {}},
    )
    assert renamed_to.empty and altered.empty


def test_tables_no_rule_takes_are_ignored() -> None:
    plan = _plan(_rules(USERS), _change("c", None, {"id": 1}, table="orders"))
    assert plan.empty and plan.changes == 0


def test_the_subscription_pattern_takes_change_topics_only() -> None:
    pattern = re.compile(TopicNames("shop.p", "p", "{prefix}.{db}.{table}").pattern())
    assert pattern.match("shop.p.db1.users")
    assert pattern.match("shop.p.db1.odd.name")
    for other in ("shop.p.schema", "shop.p.replicad-positions", "shopXp.db1.users"):
        assert not pattern.match(other), other


def test_an_unreachable_redis_at_the_start_is_a_transient_error_naming_it() -> None:
    from replicad.config import RedisConfig
    from replicad.invalidate.redis_target import RedisUnavailableError, check, redis_client

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = RedisConfig(url=f"redis://:secret@127.0.0.1:{port}/0", timeout_s=0.5)
    with pytest.raises(RedisUnavailableError) as error:
        check(redis_client(config), config)
    assert f"127.0.0.1:{port}" in str(error.value) and "secret" not in str(error.value)
    assert error.value.exit_code == 75
