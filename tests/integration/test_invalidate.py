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

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
import redis

from tests.helpers.daemon_process import ROOT, wait_for
from tests.helpers.http import http_get, sample
from tests.helpers.invalidate import (
    REDELETE_MS,
    USERS_FILL_SQL,
    USERS_SQL,
    InvalidatorProcess,
    PrivateRedis,
    Reader,
    Users,
    committed,
    execute,
    free_port,
    stale_entries,
    topic_ends,
)
from tests.helpers.kafka_run import KafkaReplicad, wait_caught_up
from tests.helpers.mariadb import connect_root

pytestmark = pytest.mark.integration


def test_no_cache_entry_stays_stale_through_kills_and_a_redis_restart(db, kafka, tmp_path) -> None:
    conn, name = db
    execute(conn, USERS_SQL, USERS_FILL_SQL)
    cache_server = PrivateRedis(tmp_path / "redis")
    cache_server.up()
    prefix = f"i{uuid.uuid4().hex[:8]}"
    group = f"inv-{prefix}"
    replicad = KafkaReplicad(
        tmp_path / "replicad",
        server_id=7401,
        prefix=prefix,
        kafka=kafka,
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
    )
    replicad.start()
    invalidator = InvalidatorProcess(replicad.config, tmp_path / "invalidate.log")
    invalidator.start()
    readers = [
        Reader(name, redis.Redis(port=cache_server.port, socket_timeout=1), seed)
        for seed in (1, 2, 3)
    ]
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
        ends = topic_ends(kafka, topic)
        wait_for(
            lambda: invalidator.alive() and committed(kafka, group, topic, list(ends)) == ends,
            120,
            "the invalidator to commit every message",
        )

    try:
        run_workload(8.0, seed=11)
        settled()
        stale = stale_entries(cache, conn)
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
        stale = stale_entries(cache, conn)
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
    db, kafka, tmp_path
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
            tmp_path / f"replicad-{uuid.uuid4().hex[:4]}",
            server_id=7402,
            prefix=prefix,
            kafka=kafka,
            extra_yaml=(
                f"filters: {{include: ['{name}\\.u']}}\n"
                f"invalidate:\n  group_id: {group}\n"
                "  consumer: {session.timeout.ms: 6000, heartbeat.interval.ms: 1000}\n"
                f"  redis: {{url: '{redis_url}', timeout_s: 1, password_env: TEST_REDIS_PW}}\n"
                f"  rules: [{{table: '{name}\\.u', keys: ['{template}']}}]\n"
            ),
        )

    def invalidate(replicad: KafkaReplicad, password: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "replicad.cli", "invalidate", "-c", str(replicad.config)],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            env={**os.environ, "TEST_REDIS_PW": password},
        )

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
        assert committed(kafka, group, topic, [0]) == {0: -1001}  # nothing committed

        subprocess.run(
            ["redis-cli", "-p", str(cache_server.port), "CONFIG", "SET", "requirepass", "right"],
            check=True,
            capture_output=True,
        )
        result = invalidate(
            configured(f"redis://127.0.0.1:{cache_server.port}/0", "user:{id}"), "s3cr3t-not-it"
        )
        assert result.returncode == 78, result.stderr.decode()[-2000:]
        err = result.stderr.decode()
        assert "refused" in err and f"127.0.0.1:{cache_server.port}" in err
        assert "s3cr3t-not-it" not in err
    finally:
        replicad.stop()
        cache_server.down()


def test_metrics_and_readiness_follow_redis(db, kafka, tmp_path) -> None:
    """invalidate.metrics_listen: the counters match what was written, and /readyz says 503
    (with /healthz still 200: waiting is not hanging) while Redis is down, 200 once back."""
    conn, name = db
    execute(conn, USERS_SQL, USERS_FILL_SQL)
    cache_server = PrivateRedis(tmp_path / "redis")
    cache_server.up()
    prefix = f"i{uuid.uuid4().hex[:8]}"
    port = free_port()
    replicad = KafkaReplicad(
        tmp_path / "replicad",
        server_id=7403,
        prefix=prefix,
        kafka=kafka,
        extra_yaml=(
            f"filters: {{include: ['{name}\\.users']}}\n"
            "invalidate:\n"
            f"  group_id: inv-{prefix}\n"
            f"  metrics_listen: '127.0.0.1:{port}'\n"
            "  retry_max_s: 0.5\n"
            "  consumer: {session.timeout.ms: 6000, heartbeat.interval.ms: 1000}\n"
            f"  redis: {{url: 'redis://127.0.0.1:{cache_server.port}/0', timeout_s: 1}}\n"
            "  rules:\n"
            f"    - table: '{name}\\.users'\n"
            "      keys: ['user:{id}']\n"
        ),
    )
    replicad.start()
    invalidator = InvalidatorProcess(replicad.config, tmp_path / "invalidate.log")
    invalidator.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_get(base + "/readyz")[0] == 200, 30, "/readyz 200")
        execute(conn, "UPDATE users SET v = v + 1 WHERE id <= 40")

        def deleted() -> float | None:
            return sample(http_get(base + "/metrics")[1], "replicad_invalidate_keys_deleted_total")

        wait_for(lambda: deleted() == 40, 60, "40 keys deleted in the metrics")
        metrics = http_get(base + "/metrics")[1]
        assert sample(metrics, "replicad_invalidate_changes_total") == 40
        assert sample(metrics, "replicad_invalidate_commit_to_apply_seconds_count") >= 1
        # the users topic and the schema topic, one partition each
        assert sample(metrics, "replicad_invalidate_assigned_partitions") == 2
        assert sample(metrics, "process_resident_memory_bytes") is not None  # standard series

        cache_server.down()
        execute(conn, "UPDATE users SET v = v + 1 WHERE id = 41")
        wait_for(lambda: http_get(base + "/readyz")[0] == 503, 30, "/readyz 503 without Redis")
        assert "Redis has not taken a batch" in http_get(base + "/readyz")[1]
        metrics = http_get(base + "/metrics")[1]
        assert sample(metrics, "replicad_invalidate_redis_up") == 0
        assert sample(metrics, "replicad_invalidate_redis_errors_total") >= 1
        assert http_get(base + "/healthz")[0] == 200
        cache_server.up()
        wait_for(lambda: http_get(base + "/readyz")[0] == 200, 30, "/readyz 200 with Redis back")
        wait_for(lambda: deleted() == 41, 30, "the held batch applied")
        assert invalidator.stop() == 0
    finally:
        invalidator.stop()
        replicad.stop()
        cache_server.down()
