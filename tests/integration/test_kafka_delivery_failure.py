"""A message the broker refuses fails its delivery unit even when it is not the unit's last
message and the messages after it are delivered: the pipeline stops and its position stays
before the transaction. (Guards any cheaper delivery accounting, e.g. one callback per unit.)"""

from __future__ import annotations

import os
import uuid

import pytest

from tests.helpers.binlog_helpers import binlog_position
from tests.helpers.kafka_helpers import consume_all
from tests.helpers.kafka_run import KafkaReplicad, master_gtid, wait_caught_up

pytestmark = pytest.mark.integration

BROKER_LIMIT = 4096  # the topics' max.message.bytes; replicad's own limit stays 1,000,000


@pytest.mark.parametrize("exactly_once", [False, True])
def test_a_refused_message_in_the_middle_fails_the_transaction(
    db, kafka, tmp_path, exactly_once: bool
) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v TEXT)")
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, v TEXT)")
        cur.execute("INSERT INTO a VALUES (1, 'before')")
    start = binlog_position(conn)
    prefix = f"f{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7251 + exactly_once,
        prefix=prefix,
        kafka=kafka,
        kafka_yaml=f"exactly_once: {'true' if exactly_once else 'false'}\n"
        f"topics: {{config: {{max.message.bytes: '{BROKER_LIMIT}'}}}}",
        start=f"{{file: {start[0]}, pos: {start[1]}}}",
        db=name,
    )
    replicad.start()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO a VALUES (2, 'small')")
    wait_caught_up(replicad)
    before = replicad.position()
    big = os.urandom(4 * BROKER_LIMIT).hex()  # random: no codec brings it under the limit
    conn.begin()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO a VALUES (3, 'first')")
        cur.execute("INSERT INTO a VALUES (4, %s)", (big,))  # refused by the broker
        cur.execute("INSERT INTO b VALUES (5, 'last')")  # another topic: delivered
    conn.commit()
    assert replicad.proc is not None
    assert replicad.proc.wait(timeout=60) != 0
    after = replicad.position()
    assert after == before, f"the position moved past a refused message: {before} -> {after}"
    assert after is not None and after.get("mariadb_gtid") != master_gtid()
    if not exactly_once:  # at-least-once: the last message did reach Kafka
        delivered = consume_all(kafka, [f"{prefix}.{name}.b"], idle_s=2.0)
        assert [r.json()["after"]["id"] for r in delivered if r.value] == [5]
