"""Typed errors. Every error carries the context an operator needs to find the problem:
the file, the byte offset, the event type, the GTID or the table involved."""

from __future__ import annotations


class ReplicadError(Exception):
    """Base of every error replicad raises on purpose."""

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


class ConfigError(ReplicadError):
    """Invalid configuration: names the key and the value."""


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


class JsonDecodeError(BinlogError):
    """MySQL binary JSON or a JSON diff that cannot be decoded."""
