"""What a failure means for the worker: which errors stop it for good and which a restart (or,
under ZooKeeper, a new campaign in the same process) gets past. Each error class says so
itself (`ReplicadError.exit_code`); docs/operations.md has the table operators read.

Stops for good (exit 78, `RestartPreventExitStatus=78`): only what a restart cannot change —
bad configuration or credentials, a TLS refusal, a position the primary no longer has, a dump
the primary refuses, a damaged position, schema-history or relay file, a message Kafka
rejects (too large, not authorised). Everything else is transient (exit 75): the primary, Kafka
or ZooKeeper being away, an aborted Kafka transaction, a producer in a fatal state, and a
producer fenced by another instance (in HA the normal end of a deposed leader; outside HA a
restart resumes from the stored position, and exactly-once keeps the output free of repeats).
"""

from __future__ import annotations

from replicad.errors import ReplicadError
from replicad.exit_codes import EXIT_CONFIG, EXIT_TEMPFAIL


def exit_code(exc: BaseException) -> int:
    """The exit status for a run that ended with `exc`. Anything that is not a ReplicadError
    (a bug, a library's own exception) is transient: a restart may get past it."""
    if isinstance(exc, ReplicadError):
        return exc.exit_code
    return EXIT_TEMPFAIL


def needs_operator(exc: BaseException) -> bool:
    """True when restarting (or campaigning again) cannot fix `exc`."""
    return exit_code(exc) == EXIT_CONFIG
