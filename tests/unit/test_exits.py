"""Which errors stop a worker for good (78: systemd must not restart it, HA must not campaign
again) and which a restart or a new campaign gets past (75). docs/operations.md has the table
these follow."""

from __future__ import annotations

import pytest

from replicad.coordination.local import PositionStoreError
from replicad.coordination.zk_client import CoordinationAuthError, CoordinationDataError
from replicad.errors import (
    AuthError,
    ConfigError,
    ConnectError,
    ConnectionLostError,
    CoordinationUnavailableError,
    FencedError,
    LeadershipLostError,
    RelayCorruptError,
    RelayLockedError,
    ServerError,
    TlsError,
)
from replicad.published.exits import EXIT_CONFIG, EXIT_TEMPFAIL, exit_code, needs_operator
from replicad.sinks.base import ProducerFencedError, SinkError, SinkUnavailableError
from replicad.source.schema import SchemaHistoryError
from replicad.source.stream import DumpRefusedError, PositionLostError

pytestmark = pytest.mark.unit

FOR_GOOD = [
    ConfigError("bad option", key="source.port"),
    AuthError("access denied", user="repl"),
    CoordinationAuthError("ZooKeeper rejected the credentials"),
    CoordinationDataError("not our JSON", path="/x"),
    TlsError("certificate refused"),
    PositionLostError("purged", position="mariadb-bin.000001:4"),
    DumpRefusedError("event too large"),
    PositionStoreError("damaged position file"),
    SchemaHistoryError("damaged history"),
    SinkError("message too large", topic="t"),
    RelayCorruptError("bad CRC", segment="000001", offset=64),
]
TRANSIENT = [
    ProducerFencedError("fenced by another instance"),  # was 78: stranded HA pipelines
    SinkUnavailableError("aborted Kafka transaction"),
    ConnectError("refused", host="127.0.0.1", port=3306),
    ConnectionLostError("closed"),
    ServerError(1040, "08004", "Too many connections"),
    CoordinationUnavailableError("ZooKeeper away"),
    LeadershipLostError("session lost"),
    FencedError("epoch moved"),
    RelayLockedError("held", holder_pid=1),
]


@pytest.mark.parametrize("error", FOR_GOOD, ids=lambda e: type(e).__name__)
def test_operator_errors_stop_the_worker(error: Exception) -> None:
    assert needs_operator(error)
    assert exit_code(error) == EXIT_CONFIG


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda e: type(e).__name__)
def test_transient_errors_are_restartable(error: Exception) -> None:
    assert not needs_operator(error)
    assert exit_code(error) == EXIT_TEMPFAIL
