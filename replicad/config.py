"""Typed configuration: a YAML file, then `REPLICAD_*` environment overrides.

Every key has a default or a clear "required" error; an unknown key is an error (a typo must
not silently fall back to a default). Errors name the key path and the offending value.
Secrets come from `password_env` / `password_file` (or inline `password`, discouraged) and are
`SecretStr`, so they never appear in reprs or logs.

Environment overrides: `REPLICAD_SOURCE__HOST=db1` sets `source.host`; nested keys are joined
by double underscores; values are read as YAML scalars (`REPLICAD_SOURCE__PORT=3307` is an int).
"""

from __future__ import annotations

import difflib
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from replicad.errors import ConfigError

ENV_PREFIX = "REPLICAD_"


class KeyedValueError(ValueError):
    """A validator's complaint about a key its model's location does not name (a check
    across sections, raised by the top-level model): errors name `key` instead."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsConfig(_Strict):
    mode: Literal["disabled", "preferred", "required", "verify-ca", "verify-identity"] = "preferred"
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    server_public_key: Path | None = None  # caching_sha2 RSA key, instead of asking the server

    @model_validator(mode="after")
    def _ca_for_verification(self) -> TlsConfig:
        if self.mode in ("verify-ca", "verify-identity") and self.ca is None:
            raise ValueError(f"tls.mode {self.mode} needs tls.ca (the CA certificate file)")
        return self


class StartConfig(_Strict):
    """Where to start when no position is stored: exactly one of the fields."""

    gtid: str | None = None
    file: str | None = None
    pos: int = Field(4, ge=4)

    @model_validator(mode="after")
    def _one_form(self) -> StartConfig:
        # `{}` used to fall through to "latest"-like surprises at connect time, and a gtid
        # with a file silently ignored the file: say so before anything connects.
        if (self.gtid is None) == (self.file is None):
            raise ValueError(
                "source.start takes exactly one of {gtid: ...} or {file: ..., pos: ...}"
                + (" (got both)" if self.gtid is not None else " (got neither)")
            )
        if self.gtid is not None and "pos" in self.model_fields_set:
            raise ValueError("source.start.pos goes with file, not with gtid")
        return self


class ReconnectConfig(_Strict):
    initial_s: float = Field(0.5, gt=0)
    max_s: float = Field(30.0, gt=0)
    jitter: float = Field(0.2, ge=0, le=1)


def check_one_secret(section: Any) -> None:
    """At most one of `password`, `password_env`, `password_file` is given."""
    given = [
        k for k in ("password", "password_env", "password_file") if getattr(section, k) is not None
    ]
    if len(given) > 1:
        raise ValueError(f"give only one of {', '.join(given)}")


def resolve_secret(section: Any, name: str, environ: Mapping[str, str] | None = None) -> str:
    """A password given as `password`, `password_env` or `password_file` of a config section
    (`name` is its key path, for errors); "" when none is given."""
    environ = os.environ if environ is None else environ
    if section.password is not None:
        return str(section.password.get_secret_value())
    if section.password_env is not None:
        if section.password_env not in environ:
            raise ConfigError(
                f"{name}.password_env names an environment variable that is not set",
                key=f"{name}.password_env",
                value=section.password_env,
            )
        return environ[section.password_env]
    if section.password_file is not None:
        try:
            return str(section.password_file.read_text().rstrip("\n"))
        except OSError as exc:
            raise ConfigError(
                f"cannot read the password file: {exc.strerror}",
                key=f"{name}.password_file",
                value=str(section.password_file),
            ) from None
    return ""


def source_candidate(entry: str) -> tuple[str, int]:
    """One `source.hosts` entry, `host:port` or `[v6]:port`, as (host, port)."""
    host, sep, port = entry.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"source.hosts entry {entry!r} is not host:port")
    return host, int(port)


class DiscoveryConfig(_Strict):
    """A command that names the servers to stream from (an orchestrator's view of who is
    primary now): run before each (re)connect, it prints one `host:port` per line in order of
    preference. Its list replaces `source.hosts` for that attempt; when it fails, the last
    list stands."""

    command: list[str] = Field(min_length=1)
    timeout_s: float = Field(5.0, gt=0)


class SourceConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535)
    # Failover candidates in order of preference (`host:port`); host and port are the first.
    hosts: list[str] | None = Field(None, min_length=1)
    discovery: DiscoveryConfig | None = None
    user: str = "repl"
    password: SecretStr | None = None
    password_env: str | None = None
    password_file: Path | None = None
    server_id: int = Field(4242, ge=1, le=2**32 - 1)
    replica_uuid: str | None = None
    tls: TlsConfig = TlsConfig()
    start: Literal["earliest", "latest"] | StartConfig = "latest"
    heartbeat_s: float = Field(5.0, gt=0, le=4294967)
    connect_timeout_s: float = Field(10.0, gt=0)
    reconnect: ReconnectConfig = ReconnectConfig()
    # A transaction larger than this (the primary's bytes) is handed on in parts: memory stays
    # bounded however large a transaction is; smaller ones travel whole.
    unit_part_bytes: int = Field(1 << 20, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _hosts_or_host(cls, data: Any) -> Any:
        # host and port are read everywhere a single server is meant (checks, snapshots,
        # labels): with `hosts` they are its first candidate, so giving both would be ambiguous.
        if not isinstance(data, dict) or data.get("hosts") is None:
            return data
        given = [key for key in ("host", "port") if key in data]
        if given:
            raise ValueError(
                "give source.hosts or source.host/source.port, not both "
                f"(also given: {', '.join(f'source.{key}' for key in given)})"
            )
        hosts = data["hosts"]
        if isinstance(hosts, list) and hosts and all(isinstance(h, str) for h in hosts):
            parsed = [source_candidate(entry) for entry in hosts]  # each one checked
            return {**data, "host": parsed[0][0], "port": parsed[0][1]}
        return data

    @model_validator(mode="after")
    def _one_password_source(self) -> SourceConfig:
        check_one_secret(self)
        return self

    @property
    def candidates(self) -> list[tuple[str, int]]:
        """The servers to stream from, in order: `hosts`, else the one `host:port`."""
        if self.hosts is None:
            return [(self.host, self.port)]
        return [source_candidate(entry) for entry in self.hosts]

    def resolve_password(self, environ: Mapping[str, str] | None = None) -> str:
        return resolve_secret(self, "source", environ)


class StdoutSinkConfig(_Strict):
    path: Path | None = None  # None: standard output; else a file appended to


class TopicsConfig(_Strict):
    """How topics the sink creates on demand look (existing topics are used as they are)."""

    create: bool = True
    partitions: int = Field(1, ge=1)
    replication_factor: int = Field(1, ge=1)
    config: dict[str, str] = {}  # topic-level settings, e.g. {"retention.ms": "604800000"}


class KafkaSinkConfig(_Strict):
    bootstrap_servers: str = Field(min_length=1)
    topic: str = "{prefix}.{db}.{table}"  # placeholders: {prefix} {db} {table} {pipeline}
    prefix: str | None = None  # default: the pipeline name
    # Tables without a primary key: "null" (Debezium's choice: no key, so partitions may
    # reorder them), "table" (one key per table: all its changes in one partition, in order),
    # "row" (every column of the row image).
    key_without_pk: Literal["null", "table", "row"] = "null"
    tombstones: bool = True  # a null-valued message after each delete (log compaction)
    # Headers on every message. "full": replicad.file/pos/row/gtid; "minimal": replicad.gtid
    # only (the coordinates are in the value's source block; the GTID lets a consumer group
    # a transaction's messages without decoding values); "none". Exactly-once adds
    # replicad.batch to "full" and "minimal". true/false (older configs) mean full/none.
    headers: Literal["none", "minimal", "full"] = "full"
    # librdkafka's compression.type for our batches (`producer:` may still set it).
    compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "lz4"
    # Debezium's provide.transaction.metadata: the envelope's "transaction" block (else null)
    # and BEGIN/END events on transaction_topic ("" keeps only the block).
    transaction_metadata: bool = False
    transaction_topic: str = "{prefix}.transaction"
    heartbeat_topic: str = "{prefix}.heartbeat"  # with heartbeat.publish
    topics: TopicsConfig = TopicsConfig()
    # Our own limit on a message value; over it: "fail" stops the pipeline at that row,
    # "route" sends it to oversized_topic (which must accept large messages).
    max_message_bytes: int = Field(1_000_000, ge=1024)
    oversized: Literal["fail", "route"] = "fail"
    oversized_topic: str = "{prefix}.oversized"
    oversized_max_bytes: int = Field(64 * 1024 * 1024, ge=1024, le=1_000_000_000)
    exactly_once: bool = False
    positions_topic: str = "{prefix}.replicad-positions"  # exactly-once: compacted, internal
    # Table schemas (before the first change naming a version) and schema-change events;
    # compacted. "" switches it off.
    schema_topic: str = "{prefix}.schema"
    # exactly-once: a Kafka transaction ends after this many binlog transactions or ms.
    batch_transactions: int = Field(500, ge=1)
    batch_ms: float = Field(100.0, gt=0)
    # Back-pressure: at most this many unacknowledged messages (librdkafka's queue).
    max_in_flight: int = Field(100_000, ge=1, le=10_000_000)
    # Processes that produce (sinks/producer_pool.py): the pipeline decodes and encodes, and
    # N > 1 child processes, messages split by key hash, each run a librdkafka producer.
    # Use more than 1 when one core is not enough; at-least-once only.
    producer_processes: int = Field(1, ge=1, le=32)
    producer: dict[str, str | int | float | bool] = {}  # librdkafka settings, passed through
    sasl: KafkaSaslConfig | None = None  # SASL credentials kept out of `producer:`

    @field_validator("headers", mode="before")
    @classmethod
    def _headers_from_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):  # the setting was a bool before the three modes
            return "full" if value else "none"
        return value

    @model_validator(mode="after")
    def _settings_agree(self) -> KafkaSinkConfig:
        if self.exactly_once and self.producer_processes > 1:
            raise ValueError(
                "sinks.kafka.producer_processes > 1 needs at-least-once delivery: a Kafka "
                "transaction belongs to one producer, so exactly_once publishes from one process"
            )
        if not self.exactly_once and str(
            self.producer.get("delivery.report.only.error", False)
        ).lower() in ("true", "1"):
            raise ValueError(
                "sinks.kafka.producer: delivery.report.only.error needs exactly_once: "
                "at-least-once moves the position on each message's delivery report"
            )
        if self.sasl is not None:
            for setting in self.sasl.settings_names():
                if setting in self.producer:
                    raise ValueError(
                        f"sinks.kafka.sasl and sinks.kafka.producer both give {setting}: "
                        "keep one (the password belongs in sasl.password_env or password_file)"
                    )
        return self

    def topic_prefix(self, pipeline: str) -> str:
        return self.prefix if self.prefix is not None else pipeline

    def client_settings(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """librdkafka settings from `sasl` (the password resolved now), for every client
        built from this sink's settings: producer, admin, consumers, Spark's options."""
        return {} if self.sasl is None else self.sasl.librdkafka(environ)


class KafkaSaslConfig(_Strict):
    """SASL credentials for Kafka, the password from a variable or a file like the
    source's (an inline `sasl.password` in `producer:` is still read, but not with this)."""

    mechanism: str | None = None  # sasl.mechanism, e.g. SCRAM-SHA-512 or PLAIN
    username: str | None = Field(None, min_length=1)  # sasl.username
    password: SecretStr | None = None  # discouraged: password_env or password_file
    password_env: str | None = None
    password_file: Path | None = None

    @model_validator(mode="after")
    def _one_password_source(self) -> KafkaSaslConfig:
        check_one_secret(self)
        if self.password is None and self.password_env is None and self.password_file is None:
            raise ValueError(
                "sinks.kafka.sasl needs one of password_env, password_file (or password)"
            )
        return self

    def settings_names(self) -> list[str]:
        """The librdkafka settings this block gives (sasl.mechanisms is mechanism's alias)."""
        names = ["sasl.password"]
        if self.username is not None:
            names.append("sasl.username")
        if self.mechanism is not None:
            names += ["sasl.mechanism", "sasl.mechanisms"]
        return names

    def librdkafka(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "sasl.password": resolve_secret(self, "sinks.kafka.sasl", environ)
        }
        if self.username is not None:
            settings["sasl.username"] = self.username
        if self.mechanism is not None:
            settings["sasl.mechanism"] = self.mechanism
        return settings


class MqttSinkConfig(_Strict):
    """MQTT notices (docs/mqtt.md): one per change, QoS 1 (or 2); the position passes a change
    only after the broker acknowledged its notice."""

    host: str = "127.0.0.1"
    port: int = Field(1883, ge=1, le=65535)
    client_id: str | None = None  # the persistent session's name; default replicad-<pipeline>
    username: str | None = None
    password: SecretStr | None = None  # discouraged: password_env or password_file
    password_env: str | None = None
    password_file: Path | None = None
    tls: bool = False  # TLS to the broker (tls_ca: its CA; tls_cert/tls_key: a client cert)
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    topic: str = "{prefix}/{db}/{table}"  # placeholders: {prefix} {db} {table} {pipeline}
    prefix: str | None = None  # default: the pipeline name
    qos: Literal[1, 2] = 1
    envelope: bool = False  # the whole change envelope instead of the short notice
    max_in_flight: int = Field(1000, ge=1, le=1_000_000)  # unacknowledged notices at most
    keepalive_s: int = Field(30, ge=5)
    reconnect_initial_s: float = Field(0.1, gt=0)
    reconnect_max_s: float = Field(5.0, gt=0)

    @model_validator(mode="after")
    def _one_password_source(self) -> MqttSinkConfig:
        check_one_secret(self)
        return self

    def resolve_password(self, environ: Mapping[str, str] | None = None) -> str:
        return resolve_secret(self, "sinks.mqtt", environ)


class SinksConfig(_Strict):
    stdout: StdoutSinkConfig | None = None
    kafka: KafkaSinkConfig | None = None
    mqtt: MqttSinkConfig | None = None


class ColumnFiltersConfig(_Strict):
    exclude: list[str] = []  # regexes matched against "db.table.column"
    mask: list[str] = []  # the value is replaced by "***" (not allowed on a key column)
    # The value, in images and keys, is replaced by the hex HMAC of its JSON text under a
    # secret salt read from the environment variable `salt_env`: equal values stay equal
    # (joins, keys), none appears in clear.
    hash: list[str] = []
    hash_algorithm: Literal["sha256", "sha512"] = "sha256"
    salt_env: str = "REPLICAD_MASK_SALT"


class FiltersConfig(_Strict):
    """Which tables reach the sinks; regexes fully matched against "db.table"."""

    include: list[str] = [".*"]
    exclude: list[str] = []
    columns: ColumnFiltersConfig = ColumnFiltersConfig()
    # The message key's columns per table (Debezium's message.key.columns): regexes fully
    # matched against "db.table" -> column names; the first match wins. Overrides the
    # primary key (a change of these columns is then a delete and a create).
    key_columns: dict[str, list[str]] = {}

    @model_validator(mode="after")
    def _valid_regexes(self) -> FiltersConfig:
        for name, patterns in (
            ("include", self.include),
            ("exclude", self.exclude),
            ("columns.exclude", self.columns.exclude),
            ("columns.mask", self.columns.mask),
            ("columns.hash", self.columns.hash),
            ("key_columns", list(self.key_columns)),
        ):
            for pattern in patterns:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ValueError(f"filters.{name}: bad regex {pattern!r}: {exc}") from None
        return self


class CheckpointConfig(_Strict):
    interval_s: float = Field(1.0, gt=0)  # how often the acknowledged position is stored
    rows: int = Field(10_000, ge=1)  # inside a huge transaction: a row-index checkpoint


class ShutdownConfig(_Strict):
    """SIGTERM/SIGINT: the process exits within `timeout_s` of the signal, whatever state it
    is in. Up to 40 % of it finishes the transaction in flight; what is left, less a few
    seconds to close connections, lets the sinks acknowledge what was published. Past the
    deadline the process exits 75 at once (the stored position only ever covers acknowledged
    changes, so nothing is lost: the rest is sent again). Keep it below systemd's
    TimeoutStopSec and docker's stop timeout."""

    timeout_s: float = Field(60.0, ge=2)


class LocalStoreConfig(_Strict):
    path: Path = Path("replicad-position.json")


class ZookeeperAuthConfig(_Strict):
    """Credentials for ZooKeeper: `digest` (auth_data user:password) or `sasl` (DIGEST-MD5;
    needs the pure-sasl package and a server with a SASL JAAS section)."""

    scheme: Literal["digest", "sasl"] = "digest"
    username: str = Field(min_length=1)
    password: SecretStr | None = None
    password_env: str | None = None
    password_file: Path | None = None
    sasl_mechanism: Literal["DIGEST-MD5"] = "DIGEST-MD5"

    @model_validator(mode="after")
    def _one_password_source(self) -> ZookeeperAuthConfig:
        given = [
            k for k in ("password", "password_env", "password_file") if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of password, password_env, password_file"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if ":" in self.username and self.scheme == "digest":
            raise ValueError("a digest username cannot contain ':'")
        return self

    def resolve_password(self, environ: Mapping[str, str] | None = None) -> str:
        environ = os.environ if environ is None else environ
        key = "coordination.zookeeper.auth"
        if self.password is not None:
            return self.password.get_secret_value()
        if self.password_env is not None:
            if self.password_env not in environ:
                raise ConfigError(
                    f"{key}.password_env names an environment variable that is not set",
                    key=f"{key}.password_env",
                    value=self.password_env,
                )
            return environ[self.password_env]
        assert self.password_file is not None  # the validator guarantees one source
        try:
            return self.password_file.read_text().rstrip("\n")
        except OSError as exc:
            raise ConfigError(
                f"cannot read the password file: {exc.strerror}",
                key=f"{key}.password_file",
                value=str(self.password_file),
            ) from None


def zookeeper_hosts(connect: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a kazoo connect string `host[:port],...[/chroot]`, read as
    kazoo.hosts.collect_hosts reads it (port 2181 when left out); ValueError naming the part
    that is not one."""
    from urllib.parse import urlsplit

    pairs = []
    for part in connect.partition("/")[0].split(","):
        try:
            parsed = urlsplit("xxx://" + part.strip())
            host, port = parsed.hostname, parsed.port
        except ValueError as exc:
            raise ValueError(f"not host:port: {part.strip()!r} ({exc})") from None
        if not host:
            raise ValueError(f"not host:port: {part.strip()!r} (no host)")
        if port == 0:
            raise ValueError(f"not host:port: {part.strip()!r} (port 0)")
        pairs.append((host, port or 2181))
    return pairs


class ZookeeperConfig(_Strict):
    """Leader election, fencing and the position copy in ZooKeeper (docs/architecture.md,
    "ZooKeeper layout")."""

    hosts: str = Field(min_length=1)  # "host:port,host:port" (kazoo connect string)
    root: str = Field("/replicad", pattern=r"^(/[^/]+)+$")
    cluster: str = Field("default", pattern=r"^[A-Za-z0-9_.-]{1,100}$")
    session_timeout_s: float = Field(10.0, gt=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    max_pipelines: int = Field(1, ge=1)  # how many pipelines one worker may lead at once
    worker_id: str | None = Field(None, min_length=1)  # default: host:pid
    auth: ZookeeperAuthConfig | None = None
    # open: world ALL; private: the configured user only (ALL); private-readable: that plus
    # world READ (dashboards, `replicad status` without credentials).
    acl: Literal["open", "private", "private-readable"] = "open"

    @field_validator("hosts")
    @classmethod
    def _hosts_parse(cls, value: str) -> str:
        # kazoo would raise a bare ValueError (a traceback) when the client is built
        zookeeper_hosts(value)
        return value

    @model_validator(mode="after")
    def _private_acl_needs_auth(self) -> ZookeeperConfig:
        if self.acl != "open" and self.auth is None:
            raise ValueError(
                f"coordination.zookeeper.acl {self.acl} needs coordination.zookeeper.auth "
                "(the user the ACL grants access to)"
            )
        return self


class CoordinationConfig(_Strict):
    local: LocalStoreConfig = LocalStoreConfig()
    zookeeper: ZookeeperConfig | None = None


class SchemaConfig(_Strict):
    history_path: Path | None = None  # default: next to the position file


class LogConfig(_Strict):
    format: Literal["json", "console"] = "console"
    level: Literal["debug", "info", "warning", "error"] = "info"


# host:port, [v6]:port or :port (every interface)
LISTEN_PATTERN = r"^(\[[0-9A-Fa-f:.]+\]|[^:\s]*):[0-9]{1,5}$"


class MetricsConfig(_Strict):
    """Prometheus metrics (/metrics) and health (/healthz, /readyz) over HTTP; off unless
    `listen` is set."""

    listen: str | None = Field(None, pattern=LISTEN_PATTERN)
    # /healthz fails when the event loop has not run for this long (a hung process)
    loop_stall_s: float = Field(10.0, gt=0)
    # /readyz fails when transactions wait this long without any acknowledgement (a sink away)
    ready_ack_stall_s: float = Field(30.0, gt=0)


class HeartbeatConfig(_Strict):
    """Every `interval_s`: a write to the primary (`query`, off unless set), so the position
    moves while the tables replicad publishes are idle or filtered out (and lag is
    measurable); and a message on the Kafka sink's `heartbeat_topic` (`publish`, off by
    default, like Debezium's heartbeat.interval.ms) with the position read so far, so
    consumers see the pipeline alive and their offsets move."""

    query: str | None = Field(None, min_length=1)  # e.g. REPLACE INTO replicad.heartbeat ...
    publish: bool = False
    interval_s: float = Field(10.0, gt=0)
    # warn (log and metric) when the stored position's binlog file is within this many files
    # of the primary's oldest one (SHOW BINARY LOGS): it is about to be purged
    retention_warn_files: int = Field(2, ge=0)
    retention_check_s: float = Field(60.0, gt=0)


class KafkaSignalsConfig(_Strict):
    """Signals through a Kafka topic (Debezium's `signal.kafka.topic`, docs/snapshots.md):
    read by the leader with the Kafka sink's brokers and security settings; a message counts
    when its key is the topic prefix (`sinks.kafka.prefix`, the pipeline name by default)."""

    topic: str = Field(min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$")


class SignalsConfig(_Strict):
    kafka: KafkaSignalsConfig | None = None


class RelayRetentionConfig(_Strict):
    """When a sealed segment that every checkpoint has passed may go: once older than
    `keep_s` (kept as an archive for the Spark pipeline meanwhile), or at once while the
    relay is over `max_bytes`. Nothing a checkpoint still needs is ever deleted."""

    keep_s: float = Field(0.0, ge=0)


class RelayConfig(_Strict):
    """The local relay log (docs/relay-format.md). Durability of `fsync`: `transaction` -
    every transaction on disk before it is published; `interval` - at most
    `fsync_interval_ms` of transactions lost on power loss (re-fetched from the primary);
    `os` - the page cache decides. A process crash loses nothing under any policy."""

    enabled: bool = False
    directory: Path = Path("relay")  # the relay of pipeline P is in <directory>/P
    segment_bytes: int = Field(128 << 20, ge=1 << 16)
    max_bytes: int = Field(8 << 30, ge=1 << 20)  # reading pauses beyond (back-pressure)
    fsync: Literal["transaction", "interval", "os"] = "interval"
    fsync_interval_ms: int = Field(200, ge=1)
    memory_bytes: int = Field(64 << 20, ge=0)  # recent transactions kept for readers that keep up
    retention: RelayRetentionConfig = RelayRetentionConfig()
    # A damaged relay (bad CRC before the durable end, missing segment, garbage manifest):
    # fail (exit 78, the operator looks) or refetch (drop the relay, read the primary again
    # from the stored position; needs the primary to still have those binlogs).
    on_corruption: Literal["fail", "refetch"] = "fail"


class SchemaRegistryConfig(_Strict):
    """The schema registry of `envelope.format: avro` (Confluent's REST API: Confluent Schema
    Registry, Apicurio's ccompat API, Karapace). Basic auth: `username` with the password
    from a variable or a file, as the source's."""

    url: str = Field(min_length=1)  # e.g. http://registry:8081 (Apicurio: .../apis/ccompat/v7)
    username: str | None = Field(None, min_length=1)
    password: SecretStr | None = None  # discouraged: password_env or password_file
    password_env: str | None = None
    password_file: Path | None = None
    timeout_s: float = Field(10.0, gt=0, le=300)  # one HTTP request

    @model_validator(mode="after")
    def _auth(self) -> SchemaRegistryConfig:
        check_one_secret(self)
        has_password = any(
            v is not None for v in (self.password, self.password_env, self.password_file)
        )
        if has_password != (self.username is not None):
            raise ValueError(
                "envelope.schema_registry: basic auth needs both username and a password"
            )
        return self

    def client_settings(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The settings of confluent-kafka's SchemaRegistryClient."""
        settings: dict[str, Any] = {"url": self.url, "timeout": self.timeout_s}
        if self.username is not None:
            password = resolve_secret(self, "envelope.schema_registry", environ)
            settings["basic.auth.user.info"] = f"{self.username}:{password}"
        return settings


class EnvelopeConfig(_Strict):
    """How column values are written in every output (Kafka, JSON lines): `exact` (DECIMAL as
    a string, temporal as ISO-8601; docs/consumers.md) or `debezium` (Debezium's MySQL
    connector encodings under its options, checked when the sinks start). `schemas_enable`
    wraps keys and values in Kafka Connect JSON's {"schema", "payload"} (Debezium mode)."""

    values: Literal["exact", "debezium"] = "exact"
    decimal_handling_mode: str = "precise"  # precise | string | double
    time_precision_mode: str = "adaptive_time_microseconds"  # | connect
    binary_handling_mode: str = "bytes"  # bytes | base64 | base64-url-safe | hex
    bigint_unsigned_handling_mode: str = "long"  # long | precise
    enable_time_adjuster: bool = True
    schemas_enable: bool = False
    # source.query: the statement logged with the rows (MariaDB's ANNOTATE_ROWS, then asked
    # of the primary; MySQL's ROWS_QUERY with binlog_rows_query_log_events). Off by default,
    # as Debezium's include.query: every row of a multi-row INSERT would carry it.
    include_query: bool = False
    # The Kafka sink's keys and values: `json`, or `avro` (Confluent's wire format, schemas
    # in `schema_registry` under the topic-name strategy; docs/consumers.md, "Avro").
    format: Literal["json", "avro"] = "json"
    schema_registry: SchemaRegistryConfig | None = None

    @model_validator(mode="after")
    def _schemas_need_debezium(self) -> EnvelopeConfig:
        if self.schemas_enable and self.values != "debezium":
            raise ValueError("envelope.schemas_enable needs envelope.values: debezium")
        return self

    @model_validator(mode="after")
    def _avro_needs_debezium_and_registry(self) -> EnvelopeConfig:
        if self.format != "avro":
            return self
        if self.values != "debezium":
            raise ValueError("envelope.format: avro needs envelope.values: debezium")
        if self.schema_registry is None:
            raise ValueError("envelope.format: avro needs envelope.schema_registry.url")
        if self.schemas_enable:
            raise ValueError(
                "envelope.format: avro carries its schemas in the registry: "
                "envelope.schemas_enable must stay false"
            )
        return self


class SnapshotSignalConfig(_Strict):
    """The table incremental snapshots write their watermarks to (docs/snapshots.md)."""

    database: str = Field("replicad", min_length=1, max_length=64)
    table: str = Field("replicad_signal", min_length=1, max_length=64)


class SnapshotConfig(_Strict):
    """The rows that exist before the stream starts (docs/snapshots.md has a table of the
    modes, with Debezium's names). With nothing stored: `initial`, `when_needed`, `always`
    read the included tables in one consistent snapshot, then stream from its binlog
    position; `initial_only` reads them and exits 0; `no_data` takes the schema at the
    current position and streams from there; `never` and `recovery` stream from
    `source.start`. With a stored position: `when_needed` snapshots again when its binlog
    file is gone, `always` every time, `initial_only` exits 0 at once; the others resume.
    Only `recovery` resumes without the stored schema history (rebuilt from today's DDL)."""

    mode: Literal[
        "never", "initial", "initial_only", "no_data", "when_needed", "always", "recovery"
    ] = "never"
    # How the initial snapshot reads: `consistent` (one read view at a known binlog position;
    # MySQL needs `locking: minimal` for it), `watermarks` (stream from now, every table as an
    # incremental snapshot; needs the signal table), `auto` (consistent on MariaDB,
    # watermarks on MySQL).
    initial_method: Literal["auto", "consistent", "watermarks"] = "auto"
    # Debezium's snapshot.locking.mode names. `minimal`: on MySQL, a consistent snapshot holds
    # FLUSH TABLES WITH READ LOCK (RELOAD or FLUSH_TABLES privilege) only while it opens the
    # read view and reads the binlog position, writers blocked for milliseconds. `none`: no
    # global lock, ever (MariaDB's consistent snapshot needs none). Opt-in: it blocks writers.
    locking: Literal["none", "minimal"] = "none"
    # lock_wait_timeout for that lock: the longest writers can wait behind it when a long
    # statement keeps it from being granted (then the start fails, exit 75, and is retried).
    lock_timeout_s: int = Field(10, ge=1, le=3600)
    chunk_rows: int = Field(10_000, ge=1, le=1_000_000)  # rows per SELECT (memory holds one)
    # A consistent initial snapshot's chunks hold at most about this many bytes of rows: wide
    # rows are read fewer at a time (a table's first chunk measures them), narrow ones
    # `chunk_rows` (watermarked chunks take `chunk_rows`, or a request's --chunk-rows).
    chunk_bytes: int = Field(8 * 1024 * 1024, ge=1024, le=1 << 30)
    signal: SnapshotSignalConfig = SnapshotSignalConfig()

    @field_validator("mode", mode="before")
    @classmethod
    def _schema_only_is_no_data(cls, value: Any) -> Any:
        # Debezium's name before 2.6 (removed in 3.3): accepted, with a warning that the
        # CLI shows on standard error (FutureWarning is the category meant for end users).
        if value == "schema_only":
            warnings.warn(
                "snapshot.mode schema_only is Debezium's old name for no_data; write no_data",
                FutureWarning,
                stacklevel=2,
            )
            return "no_data"
        return value

    @model_validator(mode="after")
    def _initial_only_reads_one_view(self) -> SnapshotConfig:
        # With watermarks the tables are read while the stream runs: there is no moment at
        # which "the snapshot is done, stop" holds without streaming.
        if self.mode == "initial_only" and self.initial_method == "watermarks":
            raise ValueError(
                "snapshot.mode initial_only reads one consistent snapshot and stops; "
                "initial_method watermarks streams while it reads: use consistent (or auto "
                "on MariaDB)"
            )
        return self

    @model_validator(mode="after")
    def _locking_needs_consistent(self) -> SnapshotConfig:
        # `auto` means watermarks on MySQL: a lock asked for there would silently do nothing.
        if self.locking != "none" and self.initial_method != "consistent":
            raise ValueError(
                "snapshot.locking: minimal applies to snapshot.initial_method: consistent only "
                f"(initial_method is {self.initial_method}); set both, or drop locking"
            )
        return self


# A schema registry's base URL for the readers of Avro topics (Apicurio's ends in
# /apis/ccompat/v7)
REGISTRY_URL_PATTERN = r"^https?://\S+$"


class SparkS3Config(_Strict):
    """S3 for `s3a://` lake, changes and checkpoint paths (Hadoop's S3A; docs/spark.md,
    "Object storage"). Credentials: the AWS chain S3A reads (AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY, a profile, an instance role), never this file."""

    endpoint: str | None = None  # e.g. http://127.0.0.1:9010; None: AWS's for the region
    region: str | None = None
    path_style_access: bool = False  # bucket in the path, not the host (most S3 look-alikes)


class SparkConfig(_Strict):
    """The Spark jobs (`replicad spark <job>`, docs/spark.md); they read the change topics of
    `sinks.kafka`."""

    master: str = "local[*]"  # `--master` overrides; under spark-submit its own is used
    lake_path: str = "lake"  # lake tables: <lake_path>/<db>/<table>
    changes_path: str = "changes"  # the changes job: <changes_path>/db=<db>/table=<table>/date=
    checkpoint_path: str = "spark-checkpoints"  # streaming offsets: <checkpoint_path>/<job>/...
    tables: str = ".*"  # a regex on db.table: which tables the jobs take
    trigger_s: float = Field(5.0, gt=0)  # a micro-batch every so many seconds
    max_offsets_per_trigger: int | None = Field(None, ge=1)  # records per micro-batch
    discover_s: float = Field(30.0, gt=0)  # how often new tables are looked for
    # Lake tables are Delta Lake tables, read from Kafka by Spark's own source; the jobs load
    # the jars of scripts/spark/pom.xml from `lake_jars` (`bash scripts/services.sh
    # spark-jars` prints the directory; no default: where they live is the installation's).
    lake_format: Literal["delta"] = "delta"
    lake_jars: str | None = None
    # Spark session settings over replicad's (session.lake_conf), e.g. a larger
    # spark.databricks.delta.snapshotPartitions for lake tables of very many files on a cluster
    session_conf: dict[str, str] = {}
    s3: SparkS3Config = SparkS3Config()
    # verify: the source's tables through Spark's JDBC source, as the source's user, with
    # MariaDB Connector/J or MySQL Connector/J; `auto`: the one of the server's kind.
    jdbc_driver: Literal["auto", "mariadb", "mysql"] = "auto"
    jdbc_driver_jar: str = "/usr/share/java/mariadb-java-client.jar"  # MariaDB Connector/J
    # (Debian libmariadb-java); MySQL Connector/J (Maven Central com.mysql:mysql-connector-j,
    # not packaged by Debian): no default, a verify that needs it says so
    mysql_jdbc_driver_jar: str | None = None
    verify_jdbc_properties: dict[str, str] = {}  # more driver properties, over the derived
    verify_ranges: int = Field(16, ge=1, le=100000)  # key ranges checksummed side by side
    verify_rounds: int = Field(3, ge=1)  # re-reads of keys still changing before "unsettled"
    verify_timeout_s: float = Field(300.0, gt=0)  # the longest wait for the lake to catch up
    verify_max_keys: int = Field(1000, ge=0)  # keys listed per kind of difference and table
    # The schema registry of Avro change topics (`envelope.format: avro`), e.g.
    # http://registry:8081; JSON topics need none (published/message_values.py)
    schema_registry_url: str | None = Field(None, pattern=REGISTRY_URL_PATTERN)

    @model_validator(mode="before")
    @classmethod
    def _former_lake_format(cls, data: Any) -> Any:
        # replicad's own lake format (Parquet buckets and a manifest) was removed: a config
        # written for it names a lake that must be rebuilt, which its operator must be told.
        if isinstance(data, dict) and (data.get("lake_format") == "replicad" or "buckets" in data):
            raise KeyedValueError(
                "spark.lake_format" if "buckets" not in data else "spark.buckets",
                "replicad's own lake format (and its spark.buckets) was removed: lake tables "
                "are Delta tables; drop the key and rebuild the lake as docs/spark.md "
                '("Migrating from replicad\'s former lake format") says',
            )
        return data

    @field_validator("tables")
    @classmethod
    def _tables_is_a_regex(cls, value: str) -> str:
        # here, not when a job starts: a bad one then cost a JVM start and exited 75, which
        # systemd and compose restart for ever
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regex: {exc}") from None
        return value


class RedisSentinelConfig(_Strict):
    master: str = Field(min_length=1)  # the monitored master's name
    nodes: list[str] = Field(min_length=1)  # host:port of the sentinels
    # The sentinels' own password, if they have one (as for the master: env or file).
    password: SecretStr | None = None  # discouraged: password_env or password_file
    password_env: str | None = None
    password_file: Path | None = None
    # Offsets are committed only once this many replicas have the batch's deletes (WAIT):
    # an unreplicated delete on a master that a failover replaces is lost, its key stale.
    wait_replicas: int = Field(1, ge=0)

    @model_validator(mode="after")
    def _one_password_source(self) -> RedisSentinelConfig:
        check_one_secret(self)
        return self

    def resolve_password(self, environ: Mapping[str, str] | None = None) -> str:
        return resolve_secret(self, "invalidate.redis.sentinel", environ)


class RedisConfig(_Strict):
    """The Redis the invalidator works on (redis-py): standalone from `url`, or through
    Sentinel, or a Cluster."""

    url: str = "redis://127.0.0.1:6379/0"  # rediss:// for TLS; a user name may be in it
    username: str | None = None
    password: SecretStr | None = None  # discouraged: password_env or password_file
    password_env: str | None = None
    password_file: Path | None = None
    sentinel: RedisSentinelConfig | None = None
    cluster: bool = False
    tls_ca: Path | None = None  # with rediss://: the CA file, and a client certificate
    tls_cert: Path | None = None
    tls_key: Path | None = None
    timeout_s: float = Field(5.0, gt=0)  # connect and command timeout

    @model_validator(mode="after")
    def _one_topology(self) -> RedisConfig:
        if self.sentinel is not None and self.cluster:
            raise ValueError("give either sentinel or cluster, not both")
        check_one_secret(self)
        return self

    def resolve_password(self, environ: Mapping[str, str] | None = None) -> str:
        return resolve_secret(self, "invalidate.redis", environ)


class InvalidationRule(_Strict):
    """Tables (a regex on db.table) and the cache keys their rows map to."""

    table: str = Field(min_length=1)
    keys: list[str] = []  # templates over the row's columns, {db} and {table}: "user:{id}"
    action: Literal["delete", "publish", "both"] = "delete"  # UNLINK, PUBLISH, or both
    channel: str = "replicad:{db}.{table}"  # the PUBLISH channel (a template over db/table)
    # TRUNCATE, DROP, RENAME: "scan" unlinks every key matching table_key (a pattern);
    # "generation" increments the counter table_key; "none" does nothing table-wide.
    table_action: Literal["none", "scan", "generation"] = "none"
    table_key: str | None = None

    @model_validator(mode="after")
    def _well_formed(self) -> InvalidationRule:
        # (the templates' syntax is checked where they are parsed: replicad/invalidate/rules.py)
        try:
            re.compile(self.table)
        except re.error as exc:
            raise ValueError(f"table: not a regex: {exc}") from None
        if self.table_action != "none" and not self.table_key:
            raise ValueError(f"table_action {self.table_action} needs table_key")
        if not self.keys and self.table_action == "none":
            raise ValueError("a rule needs keys, a table_action, or both")
        return self


class InvalidateConfig(_Strict):
    """`replicad invalidate` (docs/invalidate.md): a consumer group over the change topics of
    sinks.kafka that invalidates cache keys in Redis."""

    group_id: str | None = None  # default: replicad-invalidate-<pipeline>
    consumer: dict[str, str | int | float | bool] = {}  # librdkafka settings, passed through
    redis: RedisConfig = RedisConfig()
    rules: list[InvalidationRule] = []
    batch_max: int = Field(1000, ge=1)  # messages per poll batch (keys coalesced within it)
    poll_s: float = Field(0.05, gt=0)  # the longest wait for a batch to fill
    # A second UNLINK of each deleted key this long after the first (0: none), for read-through
    # caches: a reader that read the old row just before the commit and fills the cache just
    # after the first delete is undone by the second. Offsets wait for it.
    redelete_after_ms: float = Field(0.0, ge=0)
    retry_initial_s: float = Field(0.1, gt=0)  # Redis away: first retry after this, doubling
    retry_max_s: float = Field(5.0, gt=0)
    # /metrics, /healthz, /readyz of `replicad invalidate` (off unless set); not
    # metrics.listen: `replicad run` may read the same file on the same host
    metrics_listen: str | None = Field(None, pattern=LISTEN_PATTERN)
    # The schema registry of Avro change topics (`envelope.format: avro`), e.g.
    # http://registry:8081; JSON topics need none (published/message_values.py)
    schema_registry_url: str | None = Field(None, pattern=REGISTRY_URL_PATTERN)


class Config(_Strict):
    pipeline: str = Field("default", pattern=r"^[A-Za-z0-9_.-]{1,100}$")
    source: SourceConfig = SourceConfig()
    filters: FiltersConfig = FiltersConfig()
    sinks: SinksConfig = SinksConfig()
    envelope: EnvelopeConfig = EnvelopeConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    shutdown: ShutdownConfig = ShutdownConfig()
    coordination: CoordinationConfig = CoordinationConfig()
    schema_: SchemaConfig = Field(SchemaConfig(), alias="schema")
    log: LogConfig = LogConfig()
    metrics: MetricsConfig = MetricsConfig()
    heartbeat: HeartbeatConfig = HeartbeatConfig()
    signals: SignalsConfig = SignalsConfig()
    relay: RelayConfig = RelayConfig()
    snapshot: SnapshotConfig = SnapshotConfig()
    spark: SparkConfig = SparkConfig()
    invalidate: InvalidateConfig = InvalidateConfig()

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _snapshot_starts_the_stream(self) -> Config:
        # `recovery` snapshots nothing: with nothing stored it starts as `never` does.
        if self.snapshot.mode not in ("never", "recovery") and self.source.start != "latest":
            raise KeyedValueError(
                "source.start",
                "snapshot.mode initial/when_needed streams from the snapshot's own position; "
                "source.start must stay latest",
            )
        return self

    @model_validator(mode="after")
    def _kafka_signals_need_kafka(self) -> Config:
        if self.signals.kafka is not None and self.sinks.kafka is None:
            raise KeyedValueError(
                "signals.kafka",
                "signals through Kafka are read from the Kafka sink's brokers: configure "
                "sinks.kafka or remove signals.kafka",
            )
        return self

    @model_validator(mode="after")
    def _heartbeat_messages_need_kafka(self) -> Config:
        if self.heartbeat.publish and self.sinks.kafka is None:
            raise KeyedValueError(
                "heartbeat.publish",
                "heartbeat messages go to the Kafka sink's heartbeat_topic: configure "
                "sinks.kafka or set heartbeat.publish: false",
            )
        return self


# `REPLICAD_` variables that are not overrides. The program's own switches, and the test
# suite's and CI's knobs (tests/, .ci/, scripts/): the daemons the tests start inherit them.
ENV_NOT_OVERRIDES = frozenset(
    {
        "REPLICAD_CONFIG",  # cli: the config file of a command given no -c
        "REPLICAD_PURE_PYTHON",  # replicad.binlog: the pure-Python decoders
        "REPLICAD_REQUIRE_SPEEDUPS",  # replicad.binlog: fail without the compiled decoder
        "REPLICAD_MASK_SALT",  # filters.columns.salt_env's default
        "REPLICAD_SOURCE_PASSWORD",  # config.example.yaml's source.password_env
        "REPLICAD_HA_ITERATIONS",
        "REPLICAD_HA_MYSQL_ITERATIONS",
        "REPLICAD_HA_REPEAT",
        "REPLICAD_HA_REPORT",
        "REPLICAD_HA_STRICT_FAILOVER",
        "REPLICAD_RELAY_CRASH_ITERATIONS",
        "REPLICAD_RELAY_OUTAGE_S",
        "REPLICAD_SERVICES_DIR",
        "REPLICAD_ZK_SASL_USERS",
        "REPLICAD_KAFKA_PORT",
        "REPLICAD_MARIADB_PORT",
        "REPLICAD_MARIADB_SERVER_ID",
        "REPLICAD_MARIADB_LOG_SLAVE_UPDATES",
        "REPLICAD_MQTT_PORT",
        "REPLICAD_REDIS_PORT",
        "REPLICAD_MYSQL_PORT",
        "REPLICAD_REGISTRY_PORT",
        "REPLICAD_S3_PORT",
        "REPLICAD_DEBIAN_MIRROR",
        "REPLICAD_KAFKA_CONTROLLER_PORT",
        "REPLICAD_KAFKA_HEAP",
        "REPLICAD_MAVEN_ARGS",
        "REPLICAD_DEBEZIUM_DIST",  # bench/peers/debezium: where Debezium and Connect go
        "REPLICAD_TEST_WORKERS",
        "REPLICAD_ZK_PORT",
    }
)
ENV_TEST_PREFIX = "REPLICAD_TEST_"  # free for tests: never an override, never warned about


def _sections() -> list[str]:
    return [field.alias or name for name, field in Config.model_fields.items()]


def _env_path(name: str) -> list[str] | None:
    """The key path a variable overrides; None when it is not an override. The rule: a
    `REPLICAD_` name with a double underscore, or naming a top-level key by itself, is an
    override (and must name a section: a misspelt one is refused); any other is not."""
    if not name.startswith(ENV_PREFIX) or name.startswith(ENV_TEST_PREFIX):
        return None
    path = name[len(ENV_PREFIX) :].lower().split("__")
    if len(path) == 1 and path[0] not in _sections():
        return None
    if path[0] not in _sections():
        close = difflib.get_close_matches(path[0], _sections(), n=1)
        raise ConfigError(
            f"environment variable {name} overrides no config section {path[0]!r}"
            + (f" (did you mean {ENV_PREFIX}{close[0].upper()}__...?)" if close else ""),
            key=path[0],
            env=name,
        )
    if "" in path:
        raise ConfigError(f"environment variable {name} has an empty key part", env=name)
    return path


def _env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, tuple[str, ...]]]:
    """The override tree, and which variable set which key path (for errors)."""
    tree: dict[str, Any] = {}
    origins: dict[str, tuple[str, ...]] = {}
    for name, raw in sorted(environ.items()):
        path = _env_path(name)
        if path is None:
            continue
        origins[name] = tuple(path)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {name} conflicts with another", env=name)
        node[path[-1]] = value
    return tree, origins


def unknown_env_names(*configs: Config, environ: Mapping[str, str] | None = None) -> list[str]:
    """`REPLICAD_` variables that are neither overrides, nor in ENV_NOT_OVERRIDES, nor named
    by one of the configs (a `*_env` key): likely a misspelt override (single underscores)."""
    environ = os.environ if environ is None else environ
    named = {name for config in configs for name in _env_names_in(config)}
    return sorted(
        name
        for name in environ
        if name.startswith(ENV_PREFIX)
        and not name.startswith(ENV_TEST_PREFIX)
        and name not in ENV_NOT_OVERRIDES
        and name not in named
        and _env_path(name) is None
    )


def _env_names_in(model: BaseModel) -> list[str]:
    names: list[str] = []
    for field in type(model).model_fields:
        value = getattr(model, field)
        if field.endswith("_env") and isinstance(value, str):
            names.append(value)
        elif isinstance(value, BaseModel):
            names += _env_names_in(value)
        elif isinstance(value, list):
            names += [
                n for item in value if isinstance(item, BaseModel) for n in _env_names_in(item)
            ]
    return names


def _env_source(loc: tuple[str, ...], origins: Mapping[str, tuple[str, ...]]) -> str | None:
    """The variable behind an error at `loc` (its path in order within the error's location,
    which also holds union member tags)."""
    for name, path in origins.items():
        parts = iter(loc)
        if all(part in parts for part in path):
            return name
    return None


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load_config(
    path: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> Config:
    """Read the YAML file (None: defaults only), apply environment overrides, validate."""
    environ = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    if path is not None:
        data = _read_yaml(path)
    overrides, origins = _env_overrides(environ)
    data = _merge(data, overrides)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        errors = _readable(exc.errors())
        first = errors[0]
        loc = tuple(str(p) for p in first["loc"])
        key = _error_key(first)
        value = "***" if "password" in key else _redact(first.get("input"))
        if not loc:  # a check across sections: its input is the whole config
            value = None
        problems = "; ".join(f"{_error_key(e)}: {_error_text(e)}" for e in errors)
        raise ConfigError(
            f"invalid configuration: {problems}",
            file=None if path is None else str(path),
            key=key,
            value=None if value is None else _short(value),
            env=_env_source(loc, origins),
        ) from None


def _read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The file's top-level mapping. Not UTF-8, not YAML, a key given twice in one mapping
    (YAML would silently keep the last), or not a mapping: a ConfigError naming the file."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror}", file=str(path)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"config file is not UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {exc.start} "
            f"(line {line}); save it as UTF-8",
            file=str(path),
            offset=exc.start,
        ) from None
    try:
        loaded = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except _DuplicateKeyError as exc:
        raise ConfigError(str(exc), file=str(path), key=exc.key) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file is not valid YAML: {exc}", file=str(path)) from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ConfigError("config file must hold a mapping at the top", file=str(path))
    return loaded


class _DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: str, first_line: int, second_line: int) -> None:
        self.key = key
        super().__init__(
            f"key {key} is given twice, on lines {first_line} and {second_line} "
            "(YAML would keep only the last): keep one"
        )


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping, naming the key's path
    and both lines; YAML itself keeps the last one silently. Merge keys (`<<: *anchor`) still
    override as YAML says: only keys written in the same mapping are compared."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _refuse_duplicates(node, [], set())
        return self.construct_document(node)


def _refuse_duplicates(node: yaml.Node, path: list[str], seen_nodes: set[int]) -> None:
    if id(node) in seen_nodes:  # an alias met again (or a recursive anchor)
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(
                key_node, yaml.ScalarNode
            ):
                continue
            key, line = str(key_node.value), key_node.start_mark.line + 1
            if key in lines:
                raise _DuplicateKeyError(".".join([*path, key]), lines[key], line)
            lines[key] = line
            _refuse_duplicates(value_node, [*path, key], seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _refuse_duplicates(item, [*path, str(index)], seen_nodes)


def _key_parts(loc: Any) -> list[str]:
    # pydantic's union member tags (literal[...], function-after[...], the class name of a
    # member) are no key an operator can write
    return [str(p) for p in loc if "[" not in str(p) and not _member_tag(str(p))]


def _error_key(error: Any) -> str:
    """The key path an error is about: its location, or the key a validator of a section
    names (KeyedValueError), or the keys such a validator checks; never empty."""
    raised = (error.get("ctx") or {}).get("error")
    if isinstance(raised, KeyedValueError):
        return raised.key
    return ".".join(_key_parts(error["loc"])) or "(top level)"


def _error_text(error: Any) -> str:
    """pydantic's wording made an operator's: an unknown key with the closest known one."""
    kind = error["type"]
    if kind == "extra_forbidden":
        parts = _key_parts(error["loc"])
        unknown = parts[-1] if parts else "?"
        known = _known_keys(error["loc"][:-1])
        close = difflib.get_close_matches(unknown, known, n=1, cutoff=0.6)
        return f"unknown key `{unknown}`" + (f" (did you mean `{close[0]}`?)" if close else "")
    if kind == "missing":
        return "required, not given"
    message = str(error["msg"])
    return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def _known_keys(loc: Any) -> list[str]:
    """The keys the section at `loc` (a pydantic error location) takes."""
    models: list[type[BaseModel]] = [Config]
    for part in (str(p) for p in loc):
        found: list[type[BaseModel]] = []
        for model in models:
            for name, field in model.model_fields.items():
                if part in (name, field.alias):
                    found += _models_in(field.annotation)
        if found:
            models = found
        # else: a list index, a dict key or a union member's tag: the models stay those of
        # the list, dict or union (a union of sections offers the keys of all of them)
    return sorted({field.alias or name for m in models for name, field in m.model_fields.items()})


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models_in(arg)]


def _member_tag(part: str) -> bool:
    return part[:1].isupper() and part.endswith("Config")


def _readable(errors: list[Any]) -> list[Any]:
    """A mapping given for a key that takes a word or a mapping (source.start) fails as the
    mapping; the word's complaint beside it is noise."""
    kept = [
        e for e in errors if not (e["type"] == "literal_error" and isinstance(e.get("input"), dict))
    ]
    return kept or errors


def _redact(value: object) -> object:
    """Hide secrets in a value quoted by an error message."""
    if isinstance(value, dict):
        return {
            k: "***" if "password" in str(k) and k != "password_env" else _redact(v)
            for k, v in value.items()
        }
    return value


def _short(value: object) -> object:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
