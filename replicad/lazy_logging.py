"""Loggers that import structlog when they first log.

structlog imports asyncio and its own console renderer: about 30 ms, a tenth of what
`replicad dump` spends on a 40 MB binlog, and a dump usually logs nothing. The modules on
the dump's path (the schema history) take their logger from here, and `replicad dump`
asks for its logging set-up with `configure_on_first_use`: the set-up runs, and structlog
is imported, only when something logs at or above the dump's level.

Everywhere else nothing changes: once logging is configured, a `LazyLogger` hands every
call to `structlog.get_logger(name)`, so `structlog.testing.capture_logs` and the
configured processors see its events as they see any other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

# The level of each logging method, as structlog's filtering loggers rank them.
_METHOD_LEVELS = {
    "debug": 10,
    "info": 20,
    "warning": 30,
    "warn": 30,
    "error": 40,
    "exception": 40,
    "critical": 50,
    "fatal": 50,
}

_lock = threading.Lock()
_pending: Callable[[], None] | None = None
_pending_level = 0


def configure_on_first_use(configure: Callable[[], None], level: int) -> None:
    """Run `configure` (which imports and sets up structlog) when a LazyLogger first logs at
    `level` or above; calls below it are dropped until then, as the set-up would drop them."""
    global _pending, _pending_level
    with _lock:
        _pending, _pending_level = configure, level


def drop_pending() -> None:
    """Forget a set-up asked for with `configure_on_first_use`: logging was configured
    directly since (a later set-up must not be replaced by an earlier deferred one)."""
    global _pending
    _pending = None  # one assignment, atomic under the GIL; _configured may hold the lock


def _configured() -> Any:
    global _pending
    with _lock:
        configure, _pending = _pending, None
        if configure is not None:
            configure()
    import structlog

    return structlog


def _drop(*_args: Any, **_kw: Any) -> None:
    return None


class LazyLogger:
    """`structlog.get_logger(name)`, bound on the first call."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, method: str) -> Any:
        # Only attributes the slots do not hold arrive here: the logging methods.
        if _pending is not None and _METHOD_LEVELS.get(method, 100) < _pending_level:
            return _drop
        logger = self._logger
        if _pending is not None or logger is None:
            logger = self._logger = _configured().get_logger(self._name)
        return getattr(logger, method)


def get_logger(name: str) -> LazyLogger:
    return LazyLogger(name)
