"""Typed errors. Every error carries the context an operator needs to find the problem:
the file, the byte offset, the event type, the GTID or the table involved.

Every error also carries `exit_code`, the status a run it ends exits with: EXIT_TEMPFAIL (75)
unless the class says EXIT_CONFIG (78), for what a restart cannot change (docs/operations.md
has the table; systemd does not restart a 78, and under ZooKeeper a 78 ends the worker
instead of a new campaign)."""

from __future__ import annotations

import errno
from typing import ClassVar

from replicad.exit_codes import EXIT_CONFIG, EXIT_TEMPFAIL


class ReplicadError(Exception):
    """Base of every error replicad raises on purpose."""

    # Transient unless a subclass knows better: a restart resumes from the stored position.
    exit_code: ClassVar[int] = EXIT_TEMPFAIL

    def __init__(self, reason: str, **context: object) -> None:
        self.reason = reason
        self.context = {k: v for k, v in context.items() if v is not None}
        super().__init__(self._render())

    def _render(self) -> str:
        if not self.context:
            return self.reason
        where = ", ".join(f"{k}={v}" for k, v in self.context.items())
        return f"{self.reason} ({where})"

    def with_context(self, **context: object) -> ReplicadError:
        """Add context known only to an outer layer (e.g. the file name) and re-render."""
        for key, value in context.items():
            if value is not None and key not in self.context:
                self.context[key] = value
        self.args = (self._render(),)
        return self


class DiskFullError(ReplicadError):
    """A write failed because its disk (or quota) is full; names the file. Transient, unlike
    other write failures: nothing moved past the failed write (files are replaced atomically,
    the position only after a write is acknowledged), so once space is freed a restart
    resumes from the stored position."""


def write_error(
    error: type[ReplicadError], what: str, exc: OSError, **context: object
) -> ReplicadError:
    """`error` for a failed write, or DiskFullError when the disk was full."""
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return (DiskFullError if full else error)(f"{what}: {exc.strerror}", **context)


class ConfigError(ReplicadError):
    """Invalid configuration: names the key and the value."""

    exit_code = EXIT_CONFIG  # the same file gives the same error


class BinlogError(ReplicadError):
    """The binary log could not be decoded."""


class ChecksumError(BinlogError):
    """An event's CRC32 does not match its bytes."""


class TruncatedError(BinlogError):
    """The input ends inside an event or inside a value."""


class MalformedEventError(BinlogError):
    """An event's bytes contradict its own layout (bad length, bad field)."""


class UnknownEventError(BinlogError):
    """An event type this decoder does not know, without the IGNORABLE flag."""


class UnsupportedError(BinlogError):
    """A known feature this build cannot decode (e.g. an unknown compression algorithm)."""


class GtidError(ReplicadError, ValueError):
    """A GTID, GTID set or MariaDB GTID position that cannot be parsed or encoded."""


class InvalidPositionError(ReplicadError, ValueError):
    """A binlog position that cannot be: before the first event, a negative row index, a
    stored position record that is malformed. Where it came from (config, a file, ZooKeeper,
    Kafka) is added by whoever read it."""

    exit_code = EXIT_CONFIG  # a malformed position in config or a stored record


class JsonDecodeError(BinlogError):
    """MySQL binary JSON or a JSON diff that cannot be decoded."""


class ProtocolError(ReplicadError):
    """The MySQL client/server protocol was broken: bad framing, a wrong sequence id, a packet
    that contradicts its layout or arrives in the wrong state, or a misuse of the connection."""


class ServerError(ReplicadError):
    """The server answered with an ERR packet; `code` is the MySQL/MariaDB error number."""

    def __init__(self, code: int, sqlstate: str | None, message: str, **context: object) -> None:
        self.code = code
        self.sqlstate = sqlstate
        self.message = message
        state = f" ({sqlstate})" if sqlstate else ""
        super().__init__(f"server error {code}{state}: {message}", **context)


class AuthError(ReplicadError):
    """Authentication failed or cannot be attempted. Names the account, never the password.
    `code`/`sqlstate` are set when the server refused with an ERR packet."""

    exit_code = EXIT_CONFIG  # the primary's or ZooKeeper's credentials or ACLs

    def __init__(
        self,
        reason: str,
        *,
        code: int | None = None,
        sqlstate: str | None = None,
        **context: object,
    ) -> None:
        self.code = code
        self.sqlstate = sqlstate
        super().__init__(reason, code=code, **context)


class ConnectError(ReplicadError):
    """The server could not be reached (refused, unresolvable, timed out); names host:port."""


class TlsError(ReplicadError):
    """TLS was required but could not be negotiated or the server's certificate was refused."""

    exit_code = EXIT_CONFIG


class ConnectionLostError(ReplicadError):
    """The server closed the connection, or it broke, while a reply was still expected."""


class CoordinationError(ReplicadError):
    """The coordination service (ZooKeeper) refused or failed an operation."""


class CoordinationUnavailableError(CoordinationError):
    """ZooKeeper cannot be reached now, or the leadership lease is in doubt. Transient. A
    write that timed out is in doubt (it may still be applied); a later successful write of
    the same session supersedes it."""


class LeadershipLostError(CoordinationError):
    """This worker is no longer the pipeline's leader: it must stop publishing at once and
    write nothing more (another leader owns the position)."""


class FencedError(LeadershipLostError):
    """A write was refused because a newer leader bumped the epoch (the fencing token)."""


class RelayError(ReplicadError):
    """The relay log could not be written or read."""


class RelayLockedError(RelayError):
    """Another process holds the relay directory (a second daemon with the same
    `relay.directory` and pipeline on this host, or a deposed leader not yet gone)."""


class RelayCorruptError(RelayError):
    """A relay segment holds bytes that fail their checksum or framing: names the segment and
    the byte offset."""

    # relay.on_corruption: refetch recovers without an operator, by not raising this
    exit_code = EXIT_CONFIG


class RelayTornError(RelayCorruptError):
    """A segment ends inside a record or a transaction (a crash while writing it)."""


class DecoderTableError(ReplicadError):
    """The table of column decoders (replicad/binlog/column_decoders.py) and a decoding path
    disagree: the table names a routine the path does not have, or the path has one the table
    never names. A build or programming error, raised at import time."""


class CompiledDecoderMissingError(ReplicadError):
    """The compiled row decoder (replicad.binlog._speedups) was required
    (REPLICAD_REQUIRE_SPEEDUPS=1) but cannot be imported."""


def certificate_refused(exc: BaseException) -> bool:
    """Whether a connection failed on the peer certificate's verification. Client libraries
    (redis-py, aiomqtt) raise their own error inside the handler of the ssl one, so it is
    found along the cause/context chain; the message is the fallback."""
    import ssl  # here: errors is imported by every command, ssl costs ~10 ms to import

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)
