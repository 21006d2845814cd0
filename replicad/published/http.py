"""The metrics and health endpoints on `metrics.listen` (off unless set):

- `/metrics`: Prometheus text format (service/telemetry.py);
- `/healthz`: 200 while the process's event loop runs (a loop blocked for longer than
  `metrics.loop_stall_s` answers 503: a hung process, for a liveness probe);
- `/readyz`: 200 when every pipeline leads and publishes, or stands by with a live
  ZooKeeper session; 503 otherwise, with the reason per pipeline in the JSON body.

Served by a thread (wsgiref), so that a blocked event loop is still reported as such
instead of leaving the probe without an answer. Used by `replicad run` (service/telemetry.py)
and by `replicad invalidate` (invalidate/metrics.py): anything `Observed`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
import structlog
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)

from replicad.errors import ConfigError

log = structlog.get_logger("replicad.http")

LOOP_BEAT_S = 0.5  # how often the event loop proves it runs

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class Observed(Protocol):
    registry: CollectorRegistry
    loop_tick: float  # time.monotonic() of the main loop's latest turn
    serving: bool  # set while the endpoints are up (keep readiness figures current)

    def ready(self) -> tuple[bool, dict[str, Any]]: ...


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow client never holds up the exit


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None  # every scrape would be a log line otherwise


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class Endpoints:
    def __init__(
        self, observed: Observed, listen: str, loop_stall_s: float, key: str = "metrics.listen"
    ) -> None:
        self.observed = observed
        self.listen = listen
        self.loop_stall_s = loop_stall_s
        self.key = key  # the setting named by errors
        self._metrics = make_wsgi_app(observed.registry)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def start(self) -> None:
        host, port = parse_listen(self.listen)
        try:
            server_class = _Server6 if ":" in host else _Server
            server = make_server(host, port, self._app, server_class, _QuietHandler)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen for metrics: {exc.strerror}", key=self.key, value=self.listen
            ) from None
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="replicad-metrics", daemon=True
        )
        self._thread.start()
        self.observed.serving = True
        self.observed.loop_tick = time.monotonic()
        log.info("metrics_listening", listen=f"{host}:{self.port}")

    def stop(self) -> None:
        """Blocks for up to half a second (the server's poll interval)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.observed.serving = False

    # ------------------------------------------------------------------ WSGI
    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            stalled = time.monotonic() - self.observed.loop_tick
            ok = stalled <= self.loop_stall_s
            body = {"status": "ok" if ok else "stalled", "loop_stalled_s": round(stalled, 3)}
            return _json(start_response, ok, body)
        if path == "/readyz":
            ready, report = self.observed.ready()
            return _json(start_response, ready, {"ready": ready, "pipelines": report})
        if path in ("/metrics", "/"):
            return self._metrics(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: /metrics, /healthz, /readyz\n"]


async def beat(observed: Observed) -> None:
    """For an asyncio program: prove the event loop runs, until cancelled."""
    while True:
        observed.loop_tick = time.monotonic()
        await asyncio.sleep(LOOP_BEAT_S)


def _json(start_response: StartResponse, ok: bool, body: dict[str, Any]) -> list[bytes]:
    status = "200 OK" if ok else "503 Service Unavailable"
    start_response(status, [("Content-Type", "application/json")])
    return [orjson.dumps(body) + b"\n"]


def register_process_collectors(registry: CollectorRegistry) -> None:
    """The standard `process_*` (CPU, memory, open files), `python_gc_*` and `python_info`
    series that prometheus-client's default registry carries; each process has its own
    registry, so they are added here."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
