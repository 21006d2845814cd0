"""`replicad check`'s report from a list of findings (issue 36): the text for people (today's
columns, a remedy line under each WARN and FAIL, the verdict), the `--json` document for
automation, and the exit status (1 when anything FAILs, else 0)."""

from __future__ import annotations

import json

import pytest

from replicad.exit_codes import EXIT_CHECK_FAILED, EXIT_OK
from replicad.service.check import (
    FAIL,
    PASS,
    WARN,
    Finding,
    exit_status,
    render_json,
    render_text,
)

pytestmark = pytest.mark.unit

PRIMARY_UP = Finding(PASS, "connection", "connected to 127.0.0.1:3306 as repl (with TLS)")
ROW_IMAGE = Finding(
    WARN, "binlog_row_image", "binlog_row_image is MINIMAL", "SET GLOBAL binlog_row_image = FULL"
)
ZK_DOWN = Finding(
    FAIL,
    "zookeeper",
    "ZooKeeper not reachable after 2.0 s (hosts=127.0.0.1:1)",
    "start ZooKeeper or fix coordination.zookeeper.hosts",
)
KAFKA_DOWN = Finding(FAIL, "kafka", "cannot reach Kafka", "start Kafka")


@pytest.mark.parametrize(
    ("findings", "status"),
    [
        ([], EXIT_OK),
        ([PRIMARY_UP], EXIT_OK),
        ([PRIMARY_UP, ROW_IMAGE], EXIT_OK),  # a WARN alone does not fail the check
        ([PRIMARY_UP, ZK_DOWN], EXIT_CHECK_FAILED),
        ([ZK_DOWN, ROW_IMAGE, KAFKA_DOWN], EXIT_CHECK_FAILED),
    ],
)
def test_the_exit_status_is_1_when_anything_fails(findings: list[Finding], status: int) -> None:
    assert exit_status(findings) == status
    assert EXIT_CHECK_FAILED == 1 and EXIT_OK == 0


def test_the_text_has_a_line_per_finding_and_the_remedy_under_it() -> None:
    lines = render_text([PRIMARY_UP, ROW_IMAGE, ZK_DOWN]).splitlines()
    assert lines == [
        "PASS  connection           connected to 127.0.0.1:3306 as repl (with TLS)",
        "WARN  binlog_row_image     binlog_row_image is MINIMAL",
        "                           fix: SET GLOBAL binlog_row_image = FULL",
        "FAIL  zookeeper            ZooKeeper not reachable after 2.0 s (hosts=127.0.0.1:1)",
        "                           fix: start ZooKeeper or fix coordination.zookeeper.hosts",
        "replication would stop: fix the FAIL lines above",
    ]


@pytest.mark.parametrize(
    ("findings", "verdict"),
    [
        ([PRIMARY_UP], "ready to replicate"),
        ([PRIMARY_UP, ROW_IMAGE], "ready to replicate (see WARN lines)"),
        ([KAFKA_DOWN, ROW_IMAGE], "replication would stop: fix the FAIL lines above"),
    ],
)
def test_the_text_ends_with_the_verdict(findings: list[Finding], verdict: str) -> None:
    assert render_text(findings).splitlines()[-1] == verdict


def test_a_pass_has_no_remedy_line() -> None:
    assert render_text([PRIMARY_UP]).splitlines() == [
        "PASS  connection           connected to 127.0.0.1:3306 as repl (with TLS)",
        "ready to replicate",
    ]


def test_json_is_one_document_with_every_finding_and_ok() -> None:
    findings = [PRIMARY_UP, ROW_IMAGE, ZK_DOWN, KAFKA_DOWN]
    out = render_json(findings)
    assert "\n" not in out  # one line: `replicad check --json | jq` or a log collector
    document = json.loads(out)
    assert document == {
        "findings": [
            {
                "level": "PASS",
                "topic": "connection",
                "text": "connected to 127.0.0.1:3306 as repl (with TLS)",
                "remedy": None,
            },
            {
                "level": "WARN",
                "topic": "binlog_row_image",
                "text": "binlog_row_image is MINIMAL",
                "remedy": "SET GLOBAL binlog_row_image = FULL",
            },
            {
                "level": "FAIL",
                "topic": "zookeeper",
                "text": "ZooKeeper not reachable after 2.0 s (hosts=127.0.0.1:1)",
                "remedy": "start ZooKeeper or fix coordination.zookeeper.hosts",
            },
            {
                "level": "FAIL",
                "topic": "kafka",
                "text": "cannot reach Kafka",
                "remedy": "start Kafka",
            },
        ],
        "ok": False,
    }


@pytest.mark.parametrize(
    ("findings", "ok"),
    [([PRIMARY_UP], True), ([PRIMARY_UP, ROW_IMAGE], True), ([PRIMARY_UP, ZK_DOWN], False)],
)
def test_json_ok_is_false_exactly_when_something_fails(findings: list[Finding], ok: bool) -> None:
    assert json.loads(render_json(findings))["ok"] is ok
