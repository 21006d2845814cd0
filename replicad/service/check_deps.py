"""`replicad check` beyond the primary: one check per dependency the config names (Kafka,
ZooKeeper, the MQTT broker, Redis, the snapshot signal table, the metrics port), each ending
in findings rather than an exception, so that one dependency down never hides another's
state (service/check.py runs them side by side and renders the report).

Each check does what the daemon (or the invalidator) would do first with that dependency,
and no more: the metadata request the Kafka sink starts with, a ZooKeeper session, an MQTT
CONNECT, a Redis PING, the signal table's watermark write (rolled back), a bind of the
metrics address. Nothing is written anywhere.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from replicad.binlog.position import Position
from replicad.config import (
    Config,
    KafkaSinkConfig,
    MqttSinkConfig,
    RedisConfig,
    ZookeeperConfig,
)
from replicad.errors import AuthError, ConfigError, ReplicadError, TlsError, certificate_refused
from replicad.protocol.transport import AsyncConnection
from replicad.source.stream import ServerInfo

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
MQTT_CONNECT_TIMEOUT_S = 5.0  # a broker that takes longer to answer CONNECT is as good as down


@dataclass(slots=True)
class Finding:
    """One line of the report. `remedy` says in one line what to change (WARN and FAIL)."""

    level: str
    topic: str
    text: str
    remedy: str | None = None


def dependency_checks(config: Config) -> list[Coroutine[Any, Any, list[Finding]]]:
    """The checks of every dependency `config` names besides the primary, in report order."""
    checks = []
    if config.sinks.kafka is not None:
        checks.append(kafka(config.sinks.kafka))
    if config.coordination.zookeeper is not None:
        checks.append(zookeeper(config.coordination.zookeeper, config.pipeline))
    if config.sinks.mqtt is not None:
        checks.append(mqtt(config.sinks.mqtt, config.pipeline))
    if config.invalidate.rules:  # an invalidator's config (without rules it refuses to run)
        checks.append(redis(config.invalidate.redis))
    if config.metrics.listen is not None:
        checks.append(metrics_port(config.metrics.listen))
    return checks


def _not_installed(topic: str, module: str, extra: str) -> list[Finding]:
    """A dependency whose client library is an extra that is not installed."""
    remedy = f"pip install 'replicad[{extra}]'"
    return [Finding(FAIL, topic, f"the Python package {module} is not installed", remedy)]


def _config_failure(topic: str, exc: ConfigError) -> list[Finding]:
    key = exc.context.get("key")
    return [Finding(FAIL, topic, str(exc), f"fix {key}" if key else "fix the configuration")]


# ------------------------------------------------------------------------------- Kafka
async def kafka(config: KafkaSinkConfig) -> list[Finding]:
    from replicad.sinks.kafka_admin import probe_kafka

    try:
        reached = Finding(PASS, "kafka", await asyncio.to_thread(probe_kafka, config))
        return [reached, *_single_replica(config)]
    except ConfigError as exc:
        return _config_failure("kafka", exc)
    except ReplicadError as exc:
        return [
            Finding(
                FAIL,
                "kafka",
                str(exc),
                "start Kafka or fix sinks.kafka.bootstrap_servers (and its security settings "
                "in sinks.kafka)",
            )
        ]


def _single_replica(config: KafkaSinkConfig) -> list[Finding]:
    """Exactly-once on topics it creates with one replica: a broker's death leaves their
    partitions without a leader, and Kafka 4.x's transaction coordinator then skips the abort
    marker of such a partition (KAFKA-20734), so an aborted transaction's messages there
    become visible with the producer's next commit (seen in bench/chaos.py --cluster)."""
    if not config.exactly_once or config.topics.replication_factor > 1:
        return []
    return [
        Finding(
            WARN,
            "kafka",
            "exactly-once with topics created at replication factor 1: a transaction aborted "
            "while a partition has no leader can become visible later (KAFKA-20734)",
            "set sinks.kafka.topics.replication_factor to 3 (min.insync.replicas 2)",
        )
    ]


# --------------------------------------------------------------------------- ZooKeeper
async def zookeeper(config: ZookeeperConfig, pipeline: str) -> list[Finding]:
    """A session within `connect_timeout_s`, and the pipeline's stored position (under
    ZooKeeper the position lives there, not in the local file)."""
    from replicad.coordination.zk_client import ZkClient, ZkPaths
    from replicad.coordination.zk_ops import read_position_record

    def probe() -> Position | None:
        client = ZkClient(config)
        try:
            client.start(timeout_s=config.connect_timeout_s)
            record = read_position_record(client, ZkPaths.from_config(config, pipeline))
        finally:
            client.stop()
        stored = record.get("position") if record else None
        return Position.from_json(stored) if stored else None

    try:
        position = await asyncio.to_thread(probe)
    except ConfigError as exc:
        return _config_failure("zookeeper", exc)
    except AuthError as exc:
        return [
            Finding(
                FAIL, "zookeeper", str(exc), "fix coordination.zookeeper.auth (user and password)"
            )
        ]
    except ReplicadError as exc:
        return [
            Finding(
                FAIL, "zookeeper", str(exc), "start ZooKeeper or fix coordination.zookeeper.hosts"
            )
        ]
    return [
        Finding(PASS, "zookeeper", f"connected to {config.hosts}"),
        Finding(
            PASS,
            "position",
            f"stored position {position} (in ZooKeeper)"
            if position
            else "no stored position in ZooKeeper yet",
        ),
    ]


# -------------------------------------------------------------------------------- MQTT
async def mqtt(config: MqttSinkConfig, pipeline: str) -> list[Finding]:
    """An MQTT CONNECT with the sink's credentials and TLS, under a client id of its own: the
    daemon's (a persistent session) would take over a running daemon's connection."""
    try:
        import aiomqtt
    except ImportError:
        return _not_installed("mqtt", "aiomqtt", "mqtt")
    where = f"{config.host}:{config.port}"
    tls = None
    if config.tls:
        tls = aiomqtt.TLSParameters(
            ca_certs=str(config.tls_ca) if config.tls_ca else None,
            certfile=str(config.tls_cert) if config.tls_cert else None,
            keyfile=str(config.tls_key) if config.tls_key else None,
        )
    try:
        client = aiomqtt.Client(
            config.host,
            config.port,
            identifier=f"replicad-check-{pipeline}-{os.getpid()}",
            clean_session=True,
            username=config.username,
            password=config.resolve_password() or None,
            tls_params=tls,
            timeout=MQTT_CONNECT_TIMEOUT_S,
        )
        async with client:
            pass
    except ConfigError as exc:
        return _config_failure("mqtt", exc)
    except aiomqtt.MqttCodeError as exc:  # the broker answered CONNECT with a refusal
        return [
            Finding(
                FAIL,
                "mqtt",
                f"the MQTT broker at {where} refused the connection: {exc}",
                "fix sinks.mqtt.username and its password",
            )
        ]
    except aiomqtt.MqttError as exc:
        if certificate_refused(exc):
            return [
                Finding(
                    FAIL,
                    "mqtt",
                    f"the MQTT broker's TLS certificate was refused: {exc}",
                    "fix sinks.mqtt.tls_ca",
                )
            ]
        return [
            Finding(
                FAIL,
                "mqtt",
                f"cannot reach the MQTT broker at {where}: {exc}",
                "start the broker or fix sinks.mqtt.host and sinks.mqtt.port",
            )
        ]
    tls_text = "with TLS" if config.tls else "without TLS"
    return [Finding(PASS, "mqtt", f"MQTT broker at {where} accepted a connection ({tls_text})")]


# ------------------------------------------------------------------------------- Redis
async def redis(config: RedisConfig) -> list[Finding]:
    """PING through the invalidator's own client (its topology, TLS and credentials)."""
    if importlib.util.find_spec("redis") is None:  # redis_target's client library
        return _not_installed("redis", "redis", "invalidate")
    from replicad.invalidate import redis_target

    def ping() -> None:
        client = redis_target.redis_client(config)
        try:
            redis_target.check(client, config)
        finally:
            client.close()

    try:
        await asyncio.to_thread(ping)
    except ConfigError as exc:
        return _config_failure("redis", exc)
    except AuthError as exc:
        return [
            Finding(
                FAIL,
                "redis",
                str(exc),
                "fix invalidate.redis.username and its password (or the URL's user)",
            )
        ]
    except TlsError as exc:
        return [Finding(FAIL, "redis", str(exc), "fix invalidate.redis.tls_ca")]
    except ReplicadError as exc:
        fix = "invalidate.redis.sentinel" if config.sentinel else "invalidate.redis.url"
        return [Finding(FAIL, "redis", str(exc), f"start Redis or fix {fix}")]
    where = f"Sentinel master {config.sentinel.master}" if config.sentinel else "Redis"
    return [Finding(PASS, "redis", f"{where} answered PING")]


# ----------------------------------------------------------------------------- metrics
async def metrics_port(listen: str) -> list[Finding]:
    """Binds the address as the daemon's HTTP server would (SO_REUSEADDR): a failure means
    something listens there already (or the address is not this host's), and the daemon
    would stop at start (ConfigError, exit 78)."""
    from replicad.published.http import parse_listen

    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return [
                Finding(
                    WARN,
                    "metrics",
                    f"cannot listen on {listen}: {exc.strerror} "
                    "(the daemon could not serve /metrics, /healthz, /readyz there)",
                    "stop what listens there or change metrics.listen",
                )
            ]
    return [Finding(PASS, "metrics", f"{listen} is free for /metrics, /healthz and /readyz")]


# ------------------------------------------------------------------------ signal table
def signal_level(config: Config, info: ServerInfo) -> str | None:
    """How much a signal table that cannot be written matters: FAIL when snapshots are
    configured to use it (`snapshot.signal` named, or an initial snapshot through
    watermarks, which cannot start without it), WARN when it only makes an interrupted
    consistent snapshot resumable; None when nothing configured needs it (not checked)."""
    snapshot = config.snapshot
    if "signal" in snapshot.model_fields_set:
        return FAIL
    if snapshot.mode in ("never", "no_data", "recovery"):  # modes that read no rows
        return None
    method = snapshot.initial_method
    watermarks = method == "watermarks" or (method == "auto" and not info.mariadb)
    return FAIL if watermarks else WARN


async def signal_table(
    conn: AsyncConnection, info: ServerInfo, config: Config, level: str
) -> list[Finding]:
    """The daemon's own check (ChunkReader.check_signal: a watermark REPLACE, rolled back)."""
    from replicad.snapshot.columns import quote_name
    from replicad.snapshot.incremental import SnapshotRequestError
    from replicad.snapshot.watermarks import ChunkReader, signal_ddl

    signal = config.snapshot.signal
    name = f"{quote_name(signal.database)}.{quote_name(signal.table)}"
    try:
        await ChunkReader(conn, info, signal, config.pipeline).check_signal()
    except SnapshotRequestError as exc:
        user, _, host = (await _scalar(conn, "SELECT CURRENT_USER()")).rpartition("@")
        grant = f"GRANT INSERT, UPDATE, DELETE ON {name} TO '{user}'@'{host}'"
        db, table = _literal(signal.database), _literal(signal.table)
        exists = await _scalar(
            conn,
            "SELECT COUNT(*) FROM information_schema.TABLES "
            f"WHERE TABLE_SCHEMA = {db} AND TABLE_NAME = {table}",
        )
        remedy = grant if exists != "0" else f"create it: {signal_ddl(signal)}; then {grant}"
        refusal = exc.reason.split("; ", 1)[0]  # the server's words; the fix is the remedy
        return [Finding(level, "signal_table", refusal, remedy)]
    return [
        Finding(
            PASS,
            "signal_table",
            f"{signal.database}.{signal.table}: the source user may write watermarks",
        )
    ]


async def _scalar(conn: AsyncConnection, sql: str) -> str:
    value = (await conn.query(sql)).rows[0][0]
    return value.decode() if isinstance(value, bytes) else str(value)


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
