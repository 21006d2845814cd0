"""SIGTERM/SIGINT for `replicad run`: the first one asks every pipeline to stop cleanly (set
the stop event), and starts a watchdog that ends the process with exit 75 if it is still
running `shutdown.timeout_s` later — whatever it is waiting for (a thread blocked in a client
library included). Safe because the stored position only ever covers acknowledged changes:
what was not acknowledged by then is sent again from there at the next start."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable

import structlog

from replicad.exit_codes import EXIT_TEMPFAIL

log = structlog.get_logger("replicad")


def install_stop_handlers(
    stop: asyncio.Event, timeout_s: float, on_stop: Callable[[], None] | None = None
) -> None:
    """`on_stop` runs once, at the first signal (e.g. systemd's STOPPING=1)."""
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            log.info("stop_signal_repeated", signal=sig.name, note="already stopping")
            return
        log.info("stop_signal", signal=sig.name, timeout_s=timeout_s)
        stop.set()
        if on_stop is not None:
            on_stop()
        watchdog = threading.Timer(timeout_s, _stop_overdue, args=(timeout_s,))
        watchdog.daemon = True  # a clean exit before the deadline does not wait for it
        watchdog.start()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)


def _stop_overdue(timeout_s: float) -> None:
    log.error(
        "stop_timeout_exceeded",
        timeout_s=timeout_s,
        note="exiting now; changes not acknowledged are sent again from the stored position",
    )
    sys.stderr.flush()
    os._exit(EXIT_TEMPFAIL)
