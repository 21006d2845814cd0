"""structlog set-up: JSON or console lines on standard error (standard output carries the
change events when the stdout sink is used), stable event names, no secrets. Records of
libraries that use the standard `logging` module (kazoo) go through the same renderer and the
same locked writer, so that each line is one whole record whatever thread wrote it."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from replicad import lazy_logging
from replicad.log_limit import EveryInterval

if TYPE_CHECKING:
    import structlog

# librdkafka repeats a line per connection attempt while a broker is away (~19 a second for a
# consumer whose only broker is down): the first one, then one per interval with the count.
LIBRDKAFKA_REPEAT_S = 30.0
_librdkafka_lines = EveryInterval(LIBRDKAFKA_REPEAT_S)

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging_on_first_use(fmt: str = "console", level: str = "info") -> None:
    """`configure_logging(fmt, level)` when a `lazy_logging` logger first logs at `level` or
    above: for `replicad dump`, which usually logs nothing and should not wait for structlog's
    import. Nothing else may log through structlog before that (it would be unconfigured)."""
    lazy_logging.configure_on_first_use(lambda: configure_logging(fmt, level), _LEVELS[level])


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    import structlog

    lazy_logging.drop_pending()
    renderer: structlog.types.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            _limit_librdkafka_repeats,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        # One write per line (message and newline together) under structlog's per-file lock.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _StructlogHandler)]:
        root.removeHandler(handler)
    root.addHandler(_StructlogHandler())
    # Libraries' own records from WARNING up (kazoo's INFO is chatty), all of them at debug.
    root.setLevel(logging.DEBUG if level == "debug" else logging.WARNING)


def _limit_librdkafka_repeats(
    _logger: object, _method: str, event: structlog.types.EventDict
) -> structlog.types.EventDict:
    """A `librdkafka_log` line of a client and facility at most once per LIBRDKAFKA_REPEAT_S;
    the next one says how many were dropped (`repeated`)."""
    import structlog

    if event.get("event") != "librdkafka_log":
        return event
    allowed, dropped = _librdkafka_lines.allow((event.get("client"), event.get("facility")))
    if not allowed:
        raise structlog.DropEvent
    if dropped:
        event["repeated"] = dropped
    return event


class _StructlogHandler(logging.Handler):
    """Hands a standard-library record to structlog: the event is the library's message,
    `logger` names the library."""

    def emit(self, record: logging.LogRecord) -> None:
        import structlog

        try:
            message = record.getMessage()
            extra = {"logger": record.name}
            if record.exc_info:
                extra["exc_info"] = record.exc_info  # type: ignore[assignment]
            structlog.get_logger().log(record.levelno, message, **extra)
        except Exception:
            self.handleError(record)
