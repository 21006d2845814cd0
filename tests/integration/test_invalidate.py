"""`replicad invalidate` end to end: MariaDB → `replicad run` → Kafka-API broker → the
invalidator process → a real Redis, with read-through readers filling that Redis from SELECT.

The stale-cache oracle: once the invalidator has committed every message of the change topics,
each cached entry equals the database row it caches, or is absent. The workload changes the
unique column (the old `user:email:` key must go too), changes primary keys and deletes rows;
the second half SIGKILLs the invalidator and restarts Redis (its data kept) mid-stream.

The readers are the common read-through kind: on a miss, SELECT, then SET. A reader that read
the old row just before a commit and sets it just after the invalidation would leave a stale
entry whatever the invalidator does; the invalidator's `redelete_after_ms` removes it, and the
readers do not cache a read that took longer than that (docs/invalidate.md).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pymysql
import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from tests.helpers.daemon_process import ROOT, wait_for
from tests.helpers.kafka_helpers import consume_all
from tests.helpers.kafka_run import KafkaReplicad, wait_caught_up
from tests.helpers.mariadb import connect_root

pytestmark = pytest.mark.integration

ROWS = 300
REDELETE_MS = 300
SERVICES = ROOT / "scripts" / "services.sh"


class PrivateRedis:
    """A Redis of the test's own (scripts/services.sh redis-instance), restartable with its
    data (SHUTDOWN SAVE, then the RDB file is loaded again)."""

    def __init__(self, directory: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.dir = directory

    def up(self) -> None:
        subprocess.run(["bash", str(SERVICES), "redis-instance", "up", str(self.dir),
                        str(self.port)], check=True)  # fmt: skip

    def restart_keeping_data(self) -> None:
        redis.Redis(port=self.port).shutdown(save=True)
        wait_for(lambda: not (self.dir / "redis.pid").exists() or not _alive(self.dir),
                 20, "redis to stop")  # fmt: skip
        time.sleep(2.0)  # an outage the invalidator must wait out
        self.up()

    def down(self) -> None:
        subprocess.run(["bash", str(SERVICES), "redis-instance", "down", str(self.dir),
                        str(self.port)], check=True)  # fmt: skip


def _alive(directory: Path) -> bool:
    try:
        pid = int((directory / "redis.pid").read_text())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError):
        return False


def _row_text(row: dict) -> str:
    return json.dumps(row, sort_keys=True)


class Users:
    """Random changes on `users`: the unique email changes, primary keys move, rows go and
    come."""

    def __init__(self, conn, seed: int) -> None:
        self.conn = conn
        self.rng = random.Random(seed)
        self.statements = 0

    def transaction(self) -> None:
        rng, key = self.rng, self.rng.randrange(1, ROWS + 100)
        pick = rng.random()
        with self.conn.cursor() as cur:
            if pick < 0.35:  # the unique key moves: user:email:<old> must go
                cur.execute("UPDATE IGNORE users SET email = %s WHERE id = %s",
                            (f"e{rng.randrange(ROWS * 3)}@x", key))  # fmt: skip
            elif pick < 0.6:
                cur.execute("UPDATE users SET name = %s, v = v + 1 WHERE id = %s",
                            (f"n{rng.randrange(10**6)}", key))  # fmt: skip
            elif pick < 0.7:
                cur.execute("UPDATE IGNORE users SET id = id + 1000 WHERE id = %s", (key,))
            elif pick < 0.85:
                cur.execute("DELETE FROM users WHERE id = %s", (key,))
            else:
                cur.execute("INSERT IGNORE INTO users VALUES (%s, %s, 'new', 0)",
                            (key, f"e{rng.randrange(ROWS * 3)}@x"))  # fmt: skip
        self.conn.commit()
        self.statements += 1


class Reader(threading.Thread):
    """A read-through cache client: GET, on a miss SELECT and SET (not when the read took
    longer than the invalidator's redelete delay)."""

    def __init__(self, db: str, port: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.conn = connect_root(database=db)
        self.cache = redis.Redis(port=port, socket_timeout=1)
        self.rng = random.Random(seed)
        self.halt = threading.Event()
        self.fills = 0

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self._once()
            except (redis.RedisError, OSError):
                time.sleep(0.05)  # Redis away: the cache is optional
            time.sleep(self.rng.random() * 0.002)

    def _once(self) -> None:
        by_id = self.rng.random() < 0.5
        if by_id:
            value = self.rng.randrange(1, ROWS + 1100)
            key, where = f"user:{value}", "id = %s"
        else:
            value = f"e{self.rng.randrange(ROWS * 3)}@x"
            key, where = f"user:email:{value}", "email = %s"
        if self.cache.get(key) is not None:
            return
        started = time.monotonic()
        with self.conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(f"SELECT id, email, name, v FROM users WHERE {where}", (value,))
            row = cur.fetchone()
        self.conn.commit()  # a fresh read view next time
        if row is not None and time.monotonic() - started < REDELETE_MS / 2000:
            self.cache.set(key, _row_text(row))
            self.fills += 1


class InvalidatorProcess:
    def __init__(self, config: Path, log: Path) -> None:
        self.config, self.log = config, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "replicad.cli", "invalidate", "-c", str(self.config)],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip

    def alive(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]
        return True


def _ends(kafka: str, topic: str) -> dict[int, int]:
    ends: dict[int, int] = {}
    for record in consume_all(kafka, [topic], idle_s=2.0):
        ends[record.partition] = record.offset + 1
    return ends


def _committed(kafka: str, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def _stale_entries(cache: redis.Redis, conn) -> list[str]:
    stale = []
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        for raw in cache.scan_iter(match="user:*", count=1000):
            key = raw.decode()
            cached = cache.get(key)
            if key.startswith("user:email:"):
                cur.execute("SELECT id, email, name, v FROM users WHERE email = %s", (key[11:],))
            else:
                cur.execute("SELECT id, email, name, v FROM users WHERE id = %s", (int(key[5:]),))
            row = cur.fetchone()
            if cached is not None and (row is None or cached.decode() != _row_text(row)):
                stale.append(f"{key}: cached {cached!r}, database {row}")
    conn.commit()
    return stale


def test_no_cache_entry_stays_stale_through_kills_and_a_redis_restart(
    db, memory_kafka, tmp_path
) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(64) NOT NULL UNIQUE,"
                    " name VARCHAR(40), v INT NOT NULL)")  # fmt: skip
        cur.execute(f"INSERT INTO users SELECT seq, CONCAT('e', seq, '@x'), 'first', 0 "
                    f"FROM seq_1_to_{ROWS}")  # fmt: skip
    conn.commit()
    cache_server = PrivateRedis(tmp_path / "redis")
    cache_server.up()
    prefix = f"i{uuid.uuid4().hex[:8]}"
    group = f"inv-{prefix}"
    replicad = KafkaReplicad(
        tmp_path / "replicad", server_id=7401, prefix=prefix, kafka=memory_kafka,
        kafka_yaml="topics: {partitions: 3}",
        extra_yaml=(
            f"filters: {{include: ['{name}\\.users']}}\n"
            "invalidate:\n"
            f"  group_id: {group}\n"
            f"  redelete_after_ms: {REDELETE_MS}\n"
            "  retry_max_s: 0.5\n"
            "  consumer: {session.timeout.ms: 6000, heartbeat.interval.ms: 1000}\n"
            f"  redis: {{url: 'redis://127.0.0.1:{cache_server.port}/0', timeout_s: 1}}\n"
            "  rules:\n"
            f"    - table: '{name}\\.users'\n"
            "      keys: ['user:{id}', 'user:email:{email}']\n"
        ),
    )  # fmt: skip
    replicad.start()
    invalidator = InvalidatorProcess(replicad.config, tmp_path / "invalidate.log")
    invalidator.start()
    readers = [Reader(name, cache_server.port, seed) for seed in (1, 2, 3)]
    for reader in readers:
        reader.start()
    topic = f"{prefix}.{name}.users"
    cache = redis.Redis(port=cache_server.port)

    def run_workload(seconds: float, seed: int, during=None) -> None:
        writer = connect_root(database=name)
        work = Users(writer, seed)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            work.transaction()
            invalidator.alive()
            if during is not None:
                during(deadline - time.monotonic())
            time.sleep(0.002)
        writer.close()

    def settled() -> None:
        wait_caught_up(replicad, timeout=120)
        ends = _ends(memory_kafka, topic)
        wait_for(lambda: invalidator.alive() and _committed(memory_kafka, group, topic,
                 list(ends)) == ends, 120, "the invalidator to commit every message")  # fmt: skip

    try:
        run_workload(8.0, seed=11)
        settled()
        stale = _stale_entries(cache, conn)
        assert not stale, stale[:10]
        filled = sum(r.fills for r in readers)
        assert filled > 100 and cache.dbsize() > 20  # the oracle had entries to judge

        # Again, with the invalidator SIGKILLed and Redis restarted mid-stream.
        events: list[str] = []
        restart = threading.Thread(target=cache_server.restart_keeping_data, daemon=True)

        def faults(left: float) -> None:
            if left < 10.0 and "redis" not in events:
                events.append("redis")
                restart.start()  # writes go on while Redis is away
            elif left < 2.0 and "kill" not in events:
                events.append("kill")
                assert invalidator.proc is not None
                invalidator.proc.send_signal(signal.SIGKILL)
                invalidator.proc.wait(10)
                invalidator.start()  # rejoins once the dead member's session expired

        run_workload(12.0, seed=12, during=faults)
        restart.join(60)
        assert events == ["redis", "kill"]
        settled()
        stale = _stale_entries(cache, conn)
        assert not stale, stale[:10]
        log = invalidator.log.read_text()
        assert '"redis_unavailable"' in log and '"redis_recovered"' in log
    finally:
        for reader in readers:
            reader.halt.set()
        if invalidator.proc is not None and invalidator.proc.poll() is None:
            invalidator.proc.send_signal(signal.SIGTERM)
            invalidator.proc.wait(30)
        replicad.stop()
        cache_server.down()


def test_bad_rules_and_wrong_credentials_stop_with_a_clear_error_committing_nothing(
    db, memory_kafka, tmp_path
) -> None:
    """A template naming a column the rows do not have: exit 78 naming it and the message's
    offset, no offset committed. A Redis that refuses the password: exit 78 naming the URL
    (without the password)."""
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE u (id INT PRIMARY KEY, email VARCHAR(40))")
    conn.commit()
    cache_server = PrivateRedis(tmp_path / "redis")
    cache_server.up()
    prefix = f"b{uuid.uuid4().hex[:8]}"
    group = f"bad-{prefix}"

    def configured(redis_url: str, template: str) -> KafkaReplicad:
        return KafkaReplicad(
            tmp_path / f"replicad-{uuid.uuid4().hex[:4]}", server_id=7402, prefix=prefix,
            kafka=memory_kafka,
            extra_yaml=(
                f"filters: {{include: ['{name}\\.u']}}\n"
                f"invalidate:\n  group_id: {group}\n"
                "  consumer: {session.timeout.ms: 6000, heartbeat.interval.ms: 1000}\n"
                f"  redis: {{url: '{redis_url}', timeout_s: 1, password_env: TEST_REDIS_PW}}\n"
                f"  rules: [{{table: '{name}\\.u', keys: ['{template}']}}]\n"
            ),
        )  # fmt: skip

    def invalidate(replicad: KafkaReplicad, password: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "replicad.cli", "invalidate", "-c", str(replicad.config)],
            cwd=ROOT, capture_output=True, timeout=120,
            env={**os.environ, "TEST_REDIS_PW": password},
        )  # fmt: skip

    replicad = configured(f"redis://127.0.0.1:{cache_server.port}/0", "user:{mail}")
    replicad.start()
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO u VALUES (1, 'a@x'), (2, 'b@x')")
        conn.commit()
        wait_caught_up(replicad, timeout=60)
        result = invalidate(replicad, "")
        assert result.returncode == 78, result.stderr.decode()[-2000:]
        err = result.stderr.decode()
        assert "placeholder=mail" in err and "user:{mail}" in err and "offset=0" in err, err
        topic = f"{prefix}.{name}.u"
        assert _committed(memory_kafka, group, topic, [0]) == {0: -1001}  # nothing committed

        subprocess.run(["redis-cli", "-p", str(cache_server.port), "CONFIG", "SET",
                        "requirepass", "right"], check=True, capture_output=True)  # fmt: skip
        result = invalidate(configured(f"redis://127.0.0.1:{cache_server.port}/0", "user:{id}"),
                            "s3cr3t-not-it")  # fmt: skip
        assert result.returncode == 78, result.stderr.decode()[-2000:]
        err = result.stderr.decode()
        assert "refused" in err and f"127.0.0.1:{cache_server.port}" in err
        assert "s3cr3t-not-it" not in err
    finally:
        replicad.stop()
        cache_server.down()
