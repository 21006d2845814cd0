"""What the `replicad invalidate` tests share: private Redis instances (scripts/services.sh
redis-instance), the `users` workload whose unique column and primary keys move, read-through
readers filling a Redis from SELECT, the invalidator as a process, and the stale-cache oracle
(every cached entry equals the database row it caches, or is absent)."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pymysql
import redis
from confluent_kafka import Consumer, TopicPartition

from tests.helpers.daemon_process import ROOT, wait_for
from tests.helpers.kafka_helpers import consume_all
from tests.helpers.mariadb import connect_root

ROWS = 300
# The invalidator's second delete (redelete_after_ms); readers drop reads slower than half.
REDELETE_MS = 300
SERVICES = ROOT / "scripts" / "services.sh"
USERS_SQL = (
    "CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(64) NOT NULL UNIQUE,"
    " name VARCHAR(40), v INT NOT NULL)"
)
USERS_FILL_SQL = (
    f"INSERT INTO users SELECT seq, CONCAT('e', seq, '@x'), 'first', 0 FROM seq_1_to_{ROWS}"
)
# Ports of this suite's private instances (a cluster node's bus is port + 10000).
PORTS = range(16500, 16600)


def free_port(taken: set[int] | None = None, bus: bool = False) -> int:
    """A port of PORTS nothing listens on (nor on port + 10000 with `bus`), not in `taken`;
    it is added to `taken`. Random order: another run of the suite is unlikely to pick it
    between this check and the server's start."""
    taken = set() if taken is None else taken
    for port in random.sample(PORTS, len(PORTS)):
        if port in taken:
            continue
        try:
            for p in (port, port + 10000) if bus else (port,):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", p))
        except OSError:
            continue
        taken.add(port)
        return port
    raise AssertionError(f"no free port in {PORTS}")


class PrivateRedis:
    """A Redis of the test's own (scripts/services.sh redis-instance), restartable with its
    data (SHUTDOWN SAVE, then the RDB file is loaded again). `options` go to redis-server:
    TLS, a password, cluster mode, a replica, or a Sentinel (starting with --sentinel)."""

    def __init__(self, directory: Path, *options: str, port: int | None = None) -> None:
        if port is None:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
        self.port = port
        self.dir = directory
        self.options = list(options)

    def _run(self, action: str, *extra: str) -> None:
        subprocess.run(
            [
                "bash",
                str(SERVICES),
                "redis-instance",
                action,
                str(self.dir),
                str(self.port),
                *extra,
            ],
            check=True,
        )

    def up(self) -> None:
        self._run("up", *self.options)

    def restart_keeping_data(self) -> None:
        redis.Redis(port=self.port).shutdown(save=True)
        wait_for(
            lambda: not (self.dir / "redis.pid").exists() or not _alive(self.dir),
            20,
            "redis to stop",
        )
        time.sleep(2.0)  # an outage the invalidator must wait out
        self.up()

    def down(self) -> None:
        self._run("down")

    def pid(self) -> int:
        return int((self.dir / "redis.pid").read_text())


def _alive(directory: Path) -> bool:
    try:
        pid = int((directory / "redis.pid").read_text())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError):
        return False


def row_text(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True)


class Users:
    """Random changes on `users`: the unique email changes, primary keys move, rows go and
    come."""

    def __init__(self, conn: pymysql.connections.Connection, seed: int) -> None:
        self.conn = conn
        self.rng = random.Random(seed)
        self.statements = 0

    def transaction(self) -> None:
        rng, key = self.rng, self.rng.randrange(1, ROWS + 100)
        pick = rng.random()
        with self.conn.cursor() as cur:
            if pick < 0.35:  # the unique key moves: user:email:<old> must go
                cur.execute(
                    "UPDATE IGNORE users SET email = %s WHERE id = %s",
                    (f"e{rng.randrange(ROWS * 3)}@x", key),
                )
            elif pick < 0.6:
                cur.execute(
                    "UPDATE users SET name = %s, v = v + 1 WHERE id = %s",
                    (f"n{rng.randrange(10**6)}", key),
                )
            elif pick < 0.7:
                cur.execute("UPDATE IGNORE users SET id = id + 1000 WHERE id = %s", (key,))
            elif pick < 0.85:
                cur.execute("DELETE FROM users WHERE id = %s", (key,))
            else:
                cur.execute(
                    "INSERT IGNORE INTO users VALUES (%s, %s, 'new', 0)",
                    (key, f"e{rng.randrange(ROWS * 3)}@x"),
                )
        self.conn.commit()
        self.statements += 1


class Reader(threading.Thread):
    """A read-through cache client: GET, on a miss SELECT and SET (not when the read took
    longer than half the invalidator's redelete delay). `cache` is any redis-py client
    (standalone, a Sentinel's master, a cluster)."""

    def __init__(self, db: str, cache: Any, seed: int) -> None:
        super().__init__(daemon=True)
        self.conn = connect_root(database=db)
        self.cache = cache
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
            value: int | str = self.rng.randrange(1, ROWS + 1100)
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
            self.cache.set(key, row_text(row))
            self.fills += 1


class InvalidatorProcess:
    """`replicad invalidate` as a subprocess, its log (stderr) appended to `log`."""

    def __init__(self, config: Path, log: Path, env: dict[str, str] | None = None) -> None:
        self.config, self.log = config, log
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "replicad.cli", "invalidate", "-c", str(self.config)],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=None if self.env is None else {**os.environ, **self.env},
            )

    def alive(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]
        return True

    def stop(self) -> int | None:
        """SIGTERM and wait (None when it was not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.terminate()
        return self.proc.wait(30)

    def events(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = self.log.read_text().split("\n")[:-1]  # the last may be incomplete
        return [json.loads(x) for x in lines if x.startswith("{")]


def topic_ends(kafka: str, topic: str) -> dict[int, int]:
    """{partition: offset after its last message}."""
    ends: dict[int, int] = {}
    for record in consume_all(kafka, [topic], idle_s=2.0):
        ends[record.partition] = record.offset + 1
    return ends


def committed(kafka: str, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def stale_entries(cache: Any, conn: pymysql.connections.Connection) -> list[str]:
    """The oracle: `user:*` entries that differ from the database row they cache."""
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
            if cached is not None and (row is None or cached.decode() != row_text(row)):
                stale.append(f"{key}: cached {cached!r}, database {row}")
    conn.commit()
    return stale


def execute(conn: Any, *statements: str) -> None:
    """The statements in one transaction, committed."""
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)
    conn.commit()
