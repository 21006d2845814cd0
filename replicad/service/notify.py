"""systemd's notify protocol (sd_notify(3)) for `Type=notify` units: one datagram per
message to the socket in $NOTIFY_SOCKET ("@" starts an abstract name). READY=1 once every
pipeline leads and streams or stands by; STATUS= lines as roles change; WATCHDOG=1 from the
event loop at half of $WATCHDOG_USEC (a blocked loop stops them, and systemd restarts the
process); STOPPING=1 on a stop signal. Without $NOTIFY_SOCKET every call does nothing.

A datagram socket needs no library: the protocol is this small.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Mapping

import structlog

from replicad.service.telemetry import PipelineView, Telemetry

log = structlog.get_logger("replicad.notify")

READY_POLL_S = 0.2


class Notifier:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        address = environ.get("NOTIFY_SOCKET") or None
        self.address = "\0" + address[1:] if address and address.startswith("@") else address
        watchdog_usec = environ.get("WATCHDOG_USEC")
        watchdog_pid = environ.get("WATCHDOG_PID")
        self.watchdog_s: float | None = None
        # WATCHDOG_PID, when set, names the process meant to send the pings.
        if watchdog_usec and (not watchdog_pid or watchdog_pid == str(os.getpid())):
            with contextlib.suppress(ValueError):
                self.watchdog_s = int(watchdog_usec) / 1_000_000 or None
        self._socket: socket.socket | None = None
        self._failed = False
        self.ready_sent = False
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> None:
        if self.address is None:
            return
        try:
            if self._socket is None:
                self._socket = socket.socket(
                    socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC
                )
                # A receiver that does not read must not block the event loop: a datagram
                # that finds its queue full is dropped (and logged once) instead.
                self._socket.setblocking(False)
            self._socket.sendto("\n".join(lines).encode(), self.address)
        except OSError as exc:
            if not self._failed:  # systemd away (e.g. being restarted): say so once
                log.warning("sd_notify_failed", socket=self.address, error=str(exc))
                self._failed = True

    def start(self, telemetry: Telemetry) -> None:
        """READY=1 once the worker's pipelines are up, STATUS= on role changes, the
        watchdog pings; call from the event loop."""
        if self.address is None:
            return
        telemetry.on_role_change(lambda view: self.send(f"STATUS={status_line(telemetry, view)}"))
        self._tasks.append(asyncio.create_task(self._ready_when_up(telemetry)))
        if self.watchdog_s:
            self._tasks.append(asyncio.create_task(self._watchdog(self.watchdog_s / 2)))

    async def _ready_when_up(self, telemetry: Telemetry) -> None:
        while not up(telemetry):
            await asyncio.sleep(READY_POLL_S)
        self.send("READY=1", f"STATUS={summary(telemetry)}")
        self.ready_sent = True
        log.info("sd_notify_ready", status=summary(telemetry))

    async def _watchdog(self, every_s: float) -> None:
        while True:
            self.send("WATCHDOG=1")
            await asyncio.sleep(every_s)

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping: finishing the transaction in flight")

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._socket is not None:
            self._socket.close()


def up(telemetry: Telemetry) -> bool:
    """Connected: every pipeline streams as leader, or stands by."""
    views = list(telemetry.pipelines.values())
    return bool(views) and all(v.role == "standby" or _streaming(v) for v in views)


def _streaming(view: PipelineView) -> bool:
    return view.role == "leading" and view.pipeline is not None and view.pipeline.streaming


def status_line(telemetry: Telemetry, view: PipelineView) -> str:
    epoch = "" if view.epoch is None else f" (epoch {view.epoch})"
    return f"{view.name}: {view.role}{epoch}; {summary(telemetry)}"


def summary(telemetry: Telemetry) -> str:
    roles: dict[str, int] = {}
    for view in telemetry.pipelines.values():
        roles[view.role] = roles.get(view.role, 0) + 1
    return ", ".join(f"{count} {role}" for role, count in sorted(roles.items())) or "starting"
