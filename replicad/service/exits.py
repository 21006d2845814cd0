"""What a failure means for the worker: which errors stop it for good and which a restart (or,
under ZooKeeper, a new campaign in the same process) gets past. docs/operations.md has the
table operators read; this module is the one place the code decides.

Stops for good (exit 78, `RestartPreventExitStatus=78`): only what a restart cannot change —
bad configuration or credentials, a TLS refusal, a position the primary no longer has, a dump
the primary refuses, a damaged position, schema-history or relay file, a message Kafka
rejects (too large, not authorised). Everything else is transient (exit 75): the primary, Kafka
or ZooKeeper being away, an aborted Kafka transaction, a producer in a fatal state, and a
producer fenced by another instance (in HA the normal end of a deposed leader; outside HA a
restart resumes from the stored position, and exactly-once keeps the output free of repeats).
"""

from __future__ import annotations

from replicad.coordination.local import PositionStoreError
from replicad.errors import (
    AuthError,
    ConfigError,
    InvalidPositionError,
    RelayCorruptError,
    TlsError,
)
from replicad.sinks.base import SinkError, SinkUnavailableError
from replicad.source.schema import SchemaHistoryError
from replicad.source.stream import DumpRefusedError, PositionLostError

EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # `check` found something that would stop replication
EXIT_USAGE = 64  # EX_USAGE
EXIT_DATA_ERROR = 65  # EX_DATAERR: the input could not be decoded
EXIT_TEMPFAIL = 75  # EX_TEMPFAIL: transient failure; a restart may succeed
EXIT_CONFIG = 78  # EX_CONFIG: configuration, credentials or position need an operator

OPERATOR_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    AuthError,  # the primary's or ZooKeeper's credentials
    TlsError,
    PositionLostError,
    DumpRefusedError,
    PositionStoreError,
    InvalidPositionError,  # a malformed position in config or a stored record
    SchemaHistoryError,
    SinkError,  # a message Kafka rejects; its transient subclasses are excluded below
    RelayCorruptError,  # relay.on_corruption: refetch recovers by itself instead
)
# Subclasses of an operator error that a restart does get past.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (SinkUnavailableError,)


def needs_operator(exc: BaseException) -> bool:
    """True when restarting (or campaigning again) cannot fix `exc`."""
    return isinstance(exc, OPERATOR_ERRORS) and not isinstance(exc, TRANSIENT_ERRORS)


def exit_code(exc: BaseException) -> int:
    """The exit status for a run that ended with `exc` (a ReplicadError)."""
    return EXIT_CONFIG if needs_operator(exc) else EXIT_TEMPFAIL
