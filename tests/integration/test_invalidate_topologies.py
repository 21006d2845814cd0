"""`replicad invalidate` against the Redis topologies of docs/invalidate.md, each a real
redis-server of the test's own (scripts/services.sh redis-instance, ports 16500-16599):
TLS with an ACL user, Sentinel through a forced failover, a 3-master Cluster; the table-wide
actions (scan, generation) on TRUNCATE/RENAME/DROP; two invalidators sharing one consumer
group, one SIGKILLed. MariaDB → `replicad run` → the Kafka-API broker → the invalidator(s).
The stale-cache oracle (tests/helpers/invalidate.py) judges the workloads with readers."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
import redis
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from tests.helpers.daemon_process import ROOT, wait_for
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
from tests.helpers.pki import server_pki

pytestmark = pytest.mark.integration

# A SIGKILLed member is noticed after the session timeout: replicad's default, 6 s (the least
# Apache Kafka accepts, group.min.session.timeout.ms), not librdkafka's 45 s. The takeover
# test holds it to that.
TAKEOVER_S = 15.0


def _pipeline(
    tmp: Path,
    kafka: str,
    db: str,
    server_id: int,
    redis_yaml: str,
    rules_yaml: str,
    partitions: int = 1,
    invalidate_yaml: str = "",
) -> tuple[KafkaReplicad, str, str]:
    """`replicad run` into topics of a fresh prefix, with an `invalidate:` section for them;
    (the daemon, the topic prefix, the group id)."""
    prefix = f"it{uuid.uuid4().hex[:8]}"
    group = f"inv-{prefix}"
    replicad = KafkaReplicad(
        tmp / "replicad",
        server_id=server_id,
        prefix=prefix,
        kafka=kafka,
        kafka_yaml=f"topics: {{partitions: {partitions}}}",
        extra_yaml=(
            f"filters: {{include: ['{db}\\..*']}}\n"
            "invalidate:\n"
            f"  group_id: {group}\n"
            "  retry_initial_s: 0.05\n"
            "  retry_max_s: 0.5\n"
            f"  redis: {redis_yaml}\n"
            + "".join(f"  {line}\n" for line in invalidate_yaml.splitlines() if line)
            + "  rules:\n"
            + "".join(f"    {line}\n" for line in rules_yaml.splitlines() if line)
        ),
    )
    return replicad, prefix, group


def _invalidate_once(config: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "replicad.cli", "invalidate", "-c", str(config)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        env={**os.environ, **env},
    )


def _gone(cache: Any, keys: list[str]) -> Callable[[], bool]:
    return lambda: not any(cache.exists(k) for k in keys)


# ---------------------------------------------------------------------- TLS, ACL user, table-wide


def test_tls_and_an_acl_user_then_table_wide_scan_and_generation_then_wrong_ca_and_password(
    db, kafka, tmp_path
) -> None:
    """Over TLS (rediss://, the test's own CA) as an ACL user: row keys go; TRUNCATE of a
    `scan` table unlinks every key of its pattern (more than one SCAN page and UNLINK chunk)
    and nothing else; TRUNCATE, RENAME and DROP of a `generation` table bump its counter once
    each. Then a CA that did not sign the server's certificate and a wrong password: exit 78,
    the error naming the URL and not the password."""
    conn, name = db
    pki = server_pki(tmp_path / "pki")
    port = free_port()
    server = PrivateRedis(
        tmp_path / "redis",
        "--port",
        "0",
        "--tls-port",
        str(port),
        "--tls-cert-file",
        str(pki.cert),
        "--tls-key-file",
        str(pki.key),
        "--tls-ca-cert-file",
        str(pki.ca),
        "--tls-auth-clients",
        "no",
        "--user",
        "default",
        "off",
        "--user",
        "inv",
        "on",
        ">right-pw-1",
        "~*",
        "&*",
        "+@all",
        port=port,
    )
    execute(
        conn,
        "CREATE TABLE u (id INT PRIMARY KEY, email VARCHAR(40))",
        "CREATE TABLE g (id INT PRIMARY KEY)",
        "CREATE TABLE o (id INT PRIMARY KEY)",
    )
    url = f"rediss://inv@127.0.0.1:{port}/0"
    replicad, prefix, group = _pipeline(
        tmp_path,
        kafka,
        name,
        7611,
        f"{{url: '{url}', password_env: TEST_REDIS_PW, tls_ca: '{pki.ca}', timeout_s: 2}}",
        f"- {{table: '{name}\\.u', keys: ['u:{{id}}', 'u:email:{{email}}'], "
        "table_action: scan, table_key: 'u:*'}\n"
        f"- {{table: '{name}\\.(g|g2)', keys: ['g:{{id}}'], table_action: generation, "
        "table_key: 'gen:g'}\n"
        f"- {{table: '{name}\\.o', keys: ['o:{{id}}']}}\n",
    )
    server.up()
    cache = redis.Redis(
        port=port, ssl=True, ssl_ca_certs=str(pki.ca), username="inv", password="right-pw-1"
    )
    invalidator = InvalidatorProcess(
        replicad.config, tmp_path / "invalidate.log", {"TEST_REDIS_PW": "right-pw-1"}
    )
    try:
        replicad.start()
        invalidator.start()
        # o:1 too: once it is gone the insert into o is handled, and the o:* keys set below
        # as "kept" cannot be hit by it late.
        row_keys = [f"u:{i}" for i in range(1, 21)] + [f"u:email:m{i}@x" for i in range(1, 21)]
        row_keys.append("o:1")
        cache.mset(dict.fromkeys(row_keys, "cached"))
        execute(
            conn,
            "INSERT INTO u SELECT seq, CONCAT('m', seq, '@x') FROM seq_1_to_20",
            "INSERT INTO g VALUES (1)",
            "INSERT INTO o VALUES (1)",
        )
        wait_for(_gone(cache, row_keys), 60, "the rows' keys to go over TLS")

        # TRUNCATE with scan: 1500 keys of the pattern (3 UNLINK chunks, 2 SCAN pages at
        # least) go; other tables' keys and unrelated ones stay.
        pattern_keys = [f"u:{i}" for i in range(1, 21)] + [f"u:other:{i}" for i in range(1480)]
        kept = {**{f"o:{i}": "o" for i in range(50)}, "x:1": "x", "user:1": "y"}
        cache.mset({**dict.fromkeys(pattern_keys, "cached"), **kept})
        execute(conn, "TRUNCATE TABLE u")
        wait_for(lambda: not cache.keys("u:*"), 60, "TRUNCATE to unlink every u:* key")

        # generation: one INCR per TRUNCATE, RENAME (of the old name) and DROP.
        execute(conn, "TRUNCATE TABLE g", "RENAME TABLE g TO g2", "DROP TABLE g2")
        wait_for(lambda: cache.get("gen:g") == b"3", 60, "gen:g to be bumped 3 times")
        wait_caught_up(replicad, timeout=60)
        for topic in (f"{prefix}.{name}.g", f"{prefix}.schema"):
            ends = topic_ends(kafka, topic)
            if ends:  # everything read: no late fourth bump
                wait_for(
                    lambda t=topic, e=ends: committed(kafka, group, t, list(e)) == e,
                    60,
                    f"the invalidator to commit {topic}",
                )
        assert invalidator.stop() == 0
        assert cache.get("gen:g") == b"3"
        assert {k: cache.get(k) for k in kept} == {k: v.encode() for k, v in kept.items()}
        table_wide = [e for e in invalidator.events() if e["event"] == "invalidate_table_wide"]
        assert sorted((e["action"], e["reason"]) for e in table_wide) == [
            ("generation", "drop"),
            ("generation", "rename"),
            ("generation", "truncate"),
            ("scan", "truncate"),
        ]

        # A CA that did not sign the certificate: 78 at the start, naming the URL.
        wrong_ca = replicad.config.with_name("wrong-ca.yaml")
        wrong_ca.write_text(replicad.config.read_text().replace(str(pki.ca), str(pki.other_ca)))
        result = _invalidate_once(wrong_ca, {"TEST_REDIS_PW": "right-pw-1"})
        err = result.stderr.decode()
        assert result.returncode == 78, err[-2000:]
        assert "certificate" in err and f"127.0.0.1:{port}" in err, err[-2000:]
        assert "right-pw-1" not in err

        result = _invalidate_once(replicad.config, {"TEST_REDIS_PW": "s3cr3t-not-it"})
        err = result.stderr.decode()
        assert result.returncode == 78, err[-2000:]
        assert "refused" in err and f"127.0.0.1:{port}" in err, err[-2000:]
        assert "s3cr3t-not-it" not in err
    finally:
        invalidator.stop()
        if replicad.proc is not None:
            replicad.stop()
        server.down()


# ---------------------------------------------------------------------- read-through workloads


class Workload:
    """The users workload from a writer connection, with a callback between transactions
    (faults) and the invalidators checked alive."""

    def __init__(self, db: str, invalidators: list[InvalidatorProcess]) -> None:
        self.db = db
        self.invalidators = invalidators

    def run(self, seconds: float, seed: int, during: Callable[[float], None] | None = None) -> None:
        writer = connect_root(database=self.db)
        work = Users(writer, seed)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            work.transaction()
            for invalidator in self.invalidators:
                if invalidator.proc is not None and invalidator.proc.returncode is None:
                    invalidator.alive()
            if during is not None:
                during(deadline - time.monotonic())
            time.sleep(0.002)
        writer.close()


def _topic_made(replicad: KafkaReplicad, conn: pymysql.connections.Connection) -> None:
    """One change through the pipeline, so that the users topic exists before the
    invalidators subscribe (one found later waits for a metadata refresh, 5 s)."""
    execute(conn, "UPDATE users SET v = v + 1 WHERE id = 1")
    wait_caught_up(replicad)


def _wait_joined(*invalidators: InvalidatorProcess) -> None:
    """Until each instance holds partitions: a workload then runs with them consuming."""
    wait_for(
        lambda: all(
            any(e["event"] == "invalidate_assigned" and e["partitions"] for e in i.events())
            for i in invalidators
        ),
        30,
        "the invalidators to join their group",
    )


def _settled(replicad: KafkaReplicad, kafka: str, group: str, topic: str) -> None:
    """The pipeline passed the workload's end and the group committed every message."""
    wait_caught_up(replicad, timeout=120)
    ends = topic_ends(kafka, topic)
    wait_for(
        lambda: committed(kafka, group, topic, list(ends)) == ends,
        120,
        "the invalidators to commit every message",
    )


@pytest.fixture
def readers_of() -> Iterator[Callable[[str, Callable[[], Any]], list[Reader]]]:
    made: list[Reader] = []

    def start(db: str, client: Callable[[], Any]) -> list[Reader]:
        readers = [Reader(db, client(), seed) for seed in (1, 2, 3)]
        for reader in readers:
            reader.start()
        made.extend(readers)
        return readers

    yield start
    for reader in made:
        reader.halt.set()
    for reader in made:
        reader.join(5)


USERS_RULE = "- {table: '%s\\.users', keys: ['user:{id}', 'user:email:{email}']}"


def test_sentinel_failover_mid_stream_leaves_no_stale_entry(
    db, kafka, tmp_path, readers_of
) -> None:
    """A master, a replica and a Sentinel; the invalidator finds the master through the
    Sentinel. SENTINEL FAILOVER while changes flow: the invalidator logs Redis as unavailable,
    retries, goes on with the new master, and no cached entry is stale afterwards."""
    conn, name = db
    execute(conn, USERS_SQL, USERS_FILL_SQL)
    taken: set[int] = set()
    master_port, replica_port, sentinel_port = (free_port(taken) for _ in range(3))
    # A replica's full synchronisation starts at once, not after 5 s (diskless sync delay).
    sync = ("--repl-diskless-sync-delay", "0")
    master = PrivateRedis(tmp_path / "master", *sync, port=master_port)
    replica = PrivateRedis(
        tmp_path / "replica", *sync, "--replicaof", "127.0.0.1", str(master_port), port=replica_port
    )
    sentinel = PrivateRedis(
        tmp_path / "sentinel",
        "--sentinel",
        "--sentinel",
        "monitor",
        "cache",
        "127.0.0.1",
        str(master_port),
        "1",
        "--sentinel",
        "down-after-milliseconds",
        "cache",
        "2000",
        "--sentinel",
        "failover-timeout",
        "cache",
        "10000",
        port=sentinel_port,
    )
    replicad, prefix, group = _pipeline(
        tmp_path,
        kafka,
        name,
        7612,
        f"{{sentinel: {{master: cache, nodes: ['127.0.0.1:{sentinel_port}']}}, timeout_s: 1}}",
        USERS_RULE % name,
        partitions=2,
        invalidate_yaml=f"redelete_after_ms: {REDELETE_MS}",
    )
    invalidator = InvalidatorProcess(replicad.config, tmp_path / "invalidate.log")
    servers = [master, replica, sentinel]
    try:
        for server in servers:
            server.up()
        watcher = Sentinel([("127.0.0.1", sentinel_port)], socket_timeout=1)
        wait_for(
            lambda: len(watcher.discover_slaves("cache")) == 1,
            20,
            "the Sentinel to know the replica",
        )
        # After a failover the invalidator waits (WAIT) until the new master has a replica:
        # the old one, once Sentinel demoted it (4 publish periods after it saw it still
        # master, 8 s by default) and it synchronised. Shorter periods keep the test short.
        watcher.sentinels[0].execute_command(
            "SENTINEL DEBUG", "info-period", "500", "publish-period", "250"
        )
        replicad.start()
        _topic_made(replicad, conn)
        invalidator.start()
        readers = readers_of(name, lambda: watcher.master_for("cache", socket_timeout=1))
        _wait_joined(invalidator)
        topic = f"{prefix}.{name}.users"
        workload = Workload(name, [invalidator])

        failed_over: list[float] = []

        def failover(left: float) -> None:
            if left < 3.5 and not failed_over:
                failed_over.append(time.monotonic())
                watcher.sentinels[0].execute_command("SENTINEL FAILOVER", "cache")

        workload.run(6.0, seed=22, during=failover)
        wait_for(
            lambda: watcher.discover_master("cache")[1] == replica_port,
            30,
            "the Sentinel to name the replica as master",
        )
        # The old master keeps taking writes until it is demoted; only then is its data
        # replaced by the new master's, which the oracle must judge.
        old = redis.Redis(port=master_port, decode_responses=True)
        wait_for(
            lambda: old.info("replication").get("master_link_status") == "up",
            30,
            "the old master to be a synchronised replica",
        )
        _settled(replicad, kafka, group, topic)
        new_master = redis.Redis(port=replica_port)
        assert not (stale := stale_entries(new_master, conn)), stale[:10]
        assert sum(r.fills for r in readers) > 50 and new_master.dbsize() > 20
        events = [e["event"] for e in invalidator.events()]
        assert "redis_unavailable" in events and "redis_recovered" in events, events[-20:]
        assert invalidator.stop() == 0
    finally:
        invalidator.stop()
        if replicad.proc is not None:
            replicad.stop()
        for server in reversed(servers):
            server.down()


def test_cluster_row_keys_on_every_node_and_a_truncate_scan_reaching_every_primary(
    db, kafka, tmp_path
) -> None:
    """Three masters, 16384 slots split by redis-cli --cluster create: `cluster: true`
    unlinks row keys on whichever node holds their slot, and a TRUNCATE's scan action
    unlinks the pattern's keys on every primary, leaving another table's keys."""
    conn, name = db
    execute(
        conn, "CREATE TABLE c (id INT PRIMARY KEY, v INT)", "CREATE TABLE k (id INT PRIMARY KEY)"
    )
    taken: set[int] = set()
    ports = [free_port(taken, bus=True) for _ in range(3)]
    nodes = [
        PrivateRedis(
            tmp_path / f"node{p}",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(tmp_path / f"node{p}" / "nodes.conf"),
            "--cluster-node-timeout",
            "2000",
            port=p,
        )
        for p in ports
    ]
    replicad, _, _ = _pipeline(
        tmp_path,
        kafka,
        name,
        7613,
        f"{{url: 'redis://127.0.0.1:{ports[0]}/0', cluster: true, timeout_s: 2}}",
        f"- {{table: '{name}\\.c', keys: ['c:{{id}}'], table_action: scan, table_key: 'c:*'}}\n"
        f"- {{table: '{name}\\.k', keys: ['k:{{id}}']}}\n",
    )
    invalidator = InvalidatorProcess(replicad.config, tmp_path / "invalidate.log")
    try:
        for node in nodes:
            node.up()
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        singles = [redis.Redis(port=p) for p in ports]
        wait_for(
            lambda: all(s.cluster("info").get("cluster_state") == "ok" for s in singles),
            30,
            "the cluster to be ok",
        )
        cache = RedisCluster(host="127.0.0.1", port=ports[0])
        wait_for(lambda: len(cache.get_primaries()) == 3, 10, "three primaries")
        replicad.start()
        invalidator.start()

        def per_node(pattern: str) -> list[int]:
            return [len(s.keys(pattern)) for s in singles]

        row_keys = [f"c:{i}" for i in range(1, 31)]
        for key in row_keys + [f"k:{i}" for i in range(1, 31)]:
            cache.set(key, "cached")
        assert all(n > 0 for n in per_node("c:*")), per_node("c:*")  # keys on every node
        execute(
            conn,
            "INSERT INTO c SELECT seq, 0 FROM seq_1_to_30",
            "INSERT INTO k SELECT seq FROM seq_1_to_30",
        )
        wait_for(lambda: per_node("c:*") == [0, 0, 0], 60, "the rows' keys to go on every node")

        for i in range(600):
            cache.set(f"c:other:{i}", "cached")
        cache.set("k:other", "kept")
        before = per_node("c:*")
        assert all(n > 100 for n in before), before
        execute(conn, "TRUNCATE TABLE c")
        wait_for(lambda: per_node("c:*") == [0, 0, 0], 60, "TRUNCATE's scan to reach every node")
        assert sum(per_node("k:*")) == 1  # the k rows' own keys went with their inserts
        assert cache.get("k:other") == b"kept"
        assert invalidator.stop() == 0
    finally:
        invalidator.stop()
        if replicad.proc is not None:
            replicad.stop()
        for node in nodes:
            node.down()


def _assigned(invalidator: InvalidatorProcess, topic: str) -> set[int]:
    """The partitions of `topic` the instance's latest assignment holds."""
    latest: list[str] = []
    for event in invalidator.events():
        if event["event"] == "invalidate_assigned":
            latest = event["partitions"]
        elif event["event"] == "invalidate_revoked":
            latest = []
    return {int(p[len(topic) + 1 : -1]) for p in latest if p.startswith(f"{topic}[")}


def test_two_instances_share_the_partitions_and_one_takes_over_after_the_other_is_killed(
    db, kafka, tmp_path, readers_of
) -> None:
    """Two invalidators with one group id over a 4-partition topic: each gets partitions,
    the oracle holds; one SIGKILLed mid-stream, the other gets all four once the dead
    member's session expired, and the oracle holds again."""
    conn, name = db
    execute(conn, USERS_SQL, USERS_FILL_SQL)
    server = PrivateRedis(tmp_path / "redis", port=free_port())
    replicad, prefix, group = _pipeline(
        tmp_path,
        kafka,
        name,
        7614,
        f"{{url: 'redis://127.0.0.1:{server.port}/0', timeout_s: 1}}",
        USERS_RULE % name,
        partitions=4,
        invalidate_yaml=f"redelete_after_ms: {REDELETE_MS}",
    )
    first = InvalidatorProcess(replicad.config, tmp_path / "first.log")
    second = InvalidatorProcess(replicad.config, tmp_path / "second.log")
    topic = f"{prefix}.{name}.users"
    try:
        server.up()
        replicad.start()
        _topic_made(replicad, conn)
        first.start()
        second.start()
        readers_of(name, lambda: redis.Redis(port=server.port, socket_timeout=1))
        _wait_joined(first, second)
        cache = redis.Redis(port=server.port)
        workload = Workload(name, [first, second])
        workload.run(3.0, seed=31)
        assert _assigned(first, topic) and _assigned(second, topic)
        assert _assigned(first, topic) | _assigned(second, topic) == {0, 1, 2, 3}
        assert not _assigned(first, topic) & _assigned(second, topic)
        _settled(replicad, kafka, group, topic)
        assert not (stale := stale_entries(cache, conn)), stale[:10]

        killed: list[int] = []

        def kill(left: float) -> None:
            if left < 4.0 and not killed:
                assert first.proc is not None
                killed.append(time.monotonic())
                first.proc.send_signal(signal.SIGKILL)
                first.proc.wait(10)

        workload.run(6.0, seed=32, during=kill)
        assert killed
        wait_for(
            lambda: _assigned(second, topic) == {0, 1, 2, 3},
            60,
            "the survivor to take every partition",
        )
        took = time.monotonic() - killed[0]
        print(f"takeover after the SIGKILL: {took:.1f} s")
        assert took < TAKEOVER_S, f"the takeover took {took:.1f} s (session timeout default?)"
        _settled(replicad, kafka, group, topic)
        assert not (stale := stale_entries(cache, conn)), stale[:10]
        assert cache.dbsize() > 20  # the oracle had entries to judge
        assert second.stop() == 0
    finally:
        first.stop()
        second.stop()
        if replicad.proc is not None:
            replicad.stop()
        server.down()
