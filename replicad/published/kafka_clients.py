"""The Kafka clients of the daemon's sink and of the readers of its topics: the settings every
client shares (`shared_settings`: security, TLS, SASL) and the one factory (`kafka_client`).

Every Kafka client replicad builds (producer, consumers, admin) comes from `kafka_client`,
so that librdkafka's own log lines (`%3|...|FAIL|rdkafka#producer-1| ...`) go through structlog
as `librdkafka_log` events instead of raw text on standard error, where they broke JSON log
streams.

With a logger set, librdkafka queues its lines and hands them over only when the client is
served: `poll`/`flush` (producer), `poll`/`consume` (consumer), `poll` (admin). Whoever holds a
client that is otherwise not polled calls `serve_logs` now and then."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TypeVar

import structlog
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from replicad.config import KafkaSinkConfig

log = structlog.get_logger("replicad.kafka")

EVENT = "librdkafka_log"
Client = TypeVar("Client", Producer, Consumer, AdminClient)


class LibrdkafkaLog:
    """What confluent-kafka accepts as `logger` (it calls `log(level, format, *args)` with
    the level already mapped from syslog's to Python's: 0-2 critical, 3 error, 4 warning,
    5-6 info, 7 debug; the args are facility, client name and message)."""

    def log(self, level: int, fmt: str, *args: Any) -> None:
        if len(args) == 3:
            facility, client, message = (str(a) for a in args)
        else:  # not the shape confluent-kafka uses today: keep the text whole
            facility, client, message = "", "", (fmt % args if args else fmt)
        if not structlog.is_configured():
            # A process that never set up logging (a Spark executor's Python worker): the
            # default structlog logger would print to standard output, which may carry data.
            print(f"librdkafka {facility} [{client}] {message}", file=sys.stderr)
            return
        log.log(level, EVENT, facility=facility, client=client, message=message)


LOGGER = LibrdkafkaLog()


def shared_settings(config: KafkaSinkConfig) -> dict[str, Any]:
    """Security and connection settings the admin and consumer clients need as well (with
    the `sasl` block's password, read now: a ConfigError names the key when it cannot be)."""
    prefixes = ("security.", "sasl.", "ssl.", "socket.", "client.dns")
    settings = {k: v for k, v in config.producer.items() if k.startswith(prefixes)}
    return {**settings, **config.client_settings()}


def kafka_client(kind: type[Client], settings: Mapping[str, Any]) -> Client:
    """A Producer, Consumer or AdminClient over `settings`, its log lines through structlog."""
    conf: dict[str, Any] = {**settings, "logger": LOGGER}  # the key works for all three kinds
    return kind(conf)


def serve_logs(client: Producer | AdminClient) -> None:
    """Hand over the log lines librdkafka queued, for a client nothing else polls (not for a
    consumer: its poll would also take messages)."""
    client.poll(0)
