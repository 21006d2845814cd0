"""The ZooKeeper connection of one worker: paths, typed errors, ACLs and credentials, a kazoo
client whose state changes fan out to callbacks, and bounded waits on kazoo's asynchronous
results (from plain code and from asyncio). See `replicad.coordination.zk` for the design.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    OperationTimeoutError,
    SessionClosedRequireSaslError,
    SessionExpiredError,
)
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import Connect
from kazoo.protocol.states import KeeperState
from kazoo.retry import KazooRetry
from kazoo.security import ACL, Id, Permissions, make_digest_acl

from replicad.config import ZookeeperConfig
from replicad.coordination.local import PositionStoreError
from replicad.errors import (
    AuthError,
    ConfigError,
    CoordinationError,
    CoordinationUnavailableError,
)

log = structlog.get_logger("replicad.coordination.zk")

CANDIDATE_PREFIX = "c_"
COMMAND_PREFIX = "cmd-"
SEQUENCE_DIGITS = 10  # ZooKeeper appends a 10-digit, zero-padded counter to sequential nodes


# ---------------------------------------------------------------------------------- errors
# CoordinationError, CoordinationUnavailableError, LeadershipLostError and FencedError are
# defined in replicad.errors (the daemon catches them without importing kazoo); the rest are
# specific to this layer. Note on CoordinationUnavailableError raised by a *write* here: it
# means in doubt (a timed-out request may still be applied, before any later request of the
# same session: ZooKeeper keeps one session's requests in order).


class LeaseInvalidError(CoordinationUnavailableError):
    """The leadership lease is not valid right now (connection suspended, or not renewed in
    time): nothing may be published or written until `wait_valid()` returns."""


class CandidateExistsError(CoordinationError):
    """An operator action that needs a stopped pipeline found a live candidate."""


class CoordinationConflictError(CoordinationError):
    """A compare-and-set lost a race (e.g. a leader bumped the epoch during a forced
    position): nothing was written; look at the state and try again."""


class CommandError(CoordinationError):
    """An operator command cannot be completed (unknown, already completed, or timed out)."""


class CoordinationAuthError(AuthError, CoordinationError):
    """ZooKeeper refused the credentials, or a node's ACL refuses this client (missing or wrong
    password). An operator error: restarting cannot fix it."""

    def __init__(self, reason: str, **context: object) -> None:
        # ZooKeeper sends no ERR packet: AuthError's code and sqlstate (MySQL's) stay None.
        super().__init__(reason, code=None, sqlstate=None, **context)


class CoordinationDataError(PositionStoreError, CoordinationError):
    """A node holds data replicad did not write (bad JSON, bad epoch, damaged schema parts)."""


def map_kazoo_error(exc: BaseException, what: str, **context: object) -> CoordinationError:
    """Translate a kazoo exception into the typed error callers handle."""
    name = type(exc).__name__
    if isinstance(exc, NoAuthError):
        return CoordinationAuthError(
            f"{what}: the node's ACL refuses this client (missing or wrong ZooKeeper "
            "credentials, or the acl mode changed)",
            **context,
        )
    if isinstance(exc, AuthFailedError):
        return CoordinationAuthError(f"{what}: ZooKeeper rejected the credentials", **context)
    if isinstance(exc, SessionClosedRequireSaslError):
        return CoordinationAuthError(
            f"{what}: ZooKeeper requires a SASL login (coordination.zookeeper.auth scheme "
            "sasl) and closed the session",
            **context,
        )
    if isinstance(exc, (ConnectionLoss, SessionExpiredError, OperationTimeoutError)):
        return CoordinationUnavailableError(
            f"{what}: ZooKeeper connection lost ({name})", **context
        )
    return CoordinationError(f"{what}: ZooKeeper error {name}", **context)


def fresh_error(error: CoordinationError) -> CoordinationError:
    """A new instance of a remembered error (raising one instance twice chains tracebacks)."""
    return type(error)(error.reason, **error.context)


def is_op_error(result: object) -> bool:
    return isinstance(result, BaseException)


# ---------------------------------------------------------------------------------- paths
def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in ("", *parts))


@dataclass(frozen=True, slots=True)
class ZkPaths:
    """`<root>/<cluster>/pipelines/<pipeline>/...` (docs/architecture.md, "ZooKeeper layout")."""

    root: str
    cluster: str
    pipeline: str

    @classmethod
    def from_config(cls, config: ZookeeperConfig, pipeline: str) -> ZkPaths:
        return cls(config.root, config.cluster, pipeline)

    @property
    def pipelines(self) -> str:
        return _join(self.root, self.cluster, "pipelines")

    @property
    def base(self) -> str:
        return _join(self.pipelines, self.pipeline)

    @property
    def election(self) -> str:
        return _join(self.base, "election")

    @property
    def epoch(self) -> str:
        return _join(self.base, "epoch")

    @property
    def position(self) -> str:
        return _join(self.base, "position")

    @property
    def schema(self) -> str:
        return _join(self.base, "schema")

    @property
    def commands(self) -> str:
        return _join(self.base, "commands")

    @property
    def status(self) -> str:
        return _join(self.base, "status")

    @property
    def last_error(self) -> str:
        return _join(self.base, "last_error")

    def candidate(self, name: str) -> str:
        return _join(self.election, name)

    def command(self, name: str) -> str:
        return _join(self.commands, name)

    def schema_part(self, name: str) -> str:
        return _join(self.schema, name)


def sequence_of(name: str) -> int:
    """The counter ZooKeeper appended to a sequential node's name."""
    tail = name[-SEQUENCE_DIGITS:]
    if len(name) <= SEQUENCE_DIGITS or not tail.isdigit():
        raise CoordinationDataError("node name has no sequence suffix", node=name)
    return int(tail)


def sorted_candidates(children: list[str]) -> list[str]:
    """Election children in election order (lowest sequence first); strangers ignored."""
    names = [
        c for c in children if c.startswith(CANDIDATE_PREFIX) and c[-SEQUENCE_DIGITS:].isdigit()
    ]
    return sorted(names, key=sequence_of)


# ---------------------------------------------------------------------------------- JSON
def dumps(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def loads(data: bytes, path: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CoordinationDataError(f"node does not hold valid JSON: {exc}", path=path) from None


def parse_epoch(data: bytes, path: str) -> int:
    text = data.decode("ascii", "replace").strip()
    if text == "":
        return 0
    if not text.isdigit():
        raise CoordinationDataError(
            "epoch node does not hold a decimal integer", path=path, value=text[:40]
        )
    return int(text)


def now_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------------- identity
@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    worker_id: str
    host: str
    pid: int

    @classmethod
    def current(cls, worker_id: str | None = None) -> WorkerIdentity:
        host, pid = socket.gethostname(), os.getpid()
        return cls(worker_id or f"{host}:{pid}", host, pid)

    def to_json(self) -> dict[str, Any]:
        return {"worker": self.worker_id, "host": self.host, "pid": self.pid}


# ---------------------------------------------------------------------------------- ACLs
def build_acl(config: ZookeeperConfig, password: str | None) -> list[ACL] | None:
    """The ACL of every node this client creates (None: kazoo's open ACL)."""
    if config.acl == "open":
        return None
    if config.auth is None:  # the config validator refuses this; keep the guard explicit
        raise ConfigError("a private acl needs auth", key="coordination.zookeeper.acl")
    if config.auth.scheme == "digest":
        own = make_digest_acl(config.auth.username, password or "", all=True)
    else:
        own = ACL(Permissions.ALL, Id("sasl", config.auth.username))
    acl = [own]
    if config.acl == "private-readable":
        acl.append(ACL(Permissions.READ, Id("world", "anyone")))
    return acl


def auth_arguments(config: ZookeeperConfig, password: str | None) -> dict[str, Any]:
    """KazooClient keyword arguments carrying the credentials."""
    if config.auth is None:
        return {}
    if config.auth.scheme == "digest":
        return {"auth_data": [("digest", f"{config.auth.username}:{password or ''}")]}
    try:
        import puresasl  # noqa: F401
    except ImportError:
        raise ConfigError(
            "ZooKeeper SASL needs the pure-sasl package (pip install pure-sasl)",
            key="coordination.zookeeper.auth.scheme",
            value="sasl",
        ) from None
    return {
        "sasl_options": {
            "mechanism": config.auth.sasl_mechanism,
            "username": config.auth.username,
            "password": password or "",
        }
    }


# ---------------------------------------------------------------------------------- client
class _TimeoutRecordingConnection(ConnectionHandler):
    """kazoo's connection handler, remembering the session timeout the server granted (the
    server clamps the requested one to [2, 20] ticks; kazoo does not expose the result)."""

    negotiated_ms: int | None = None

    def _invoke(self, timeout: float, request: Any, xid: int | None = None) -> Any:
        result = super()._invoke(timeout, request, xid)
        if isinstance(request, Connect):
            self.negotiated_ms = int(result[0].time_out)
        return result


StateCallback = Callable[[str], None]


class ZkClient:
    """One kazoo client (one ZooKeeper session at a time) for the whole worker.

    Connection states (kazoo's CONNECTED / SUSPENDED / LOST) are logged and passed to every
    registered callback, from kazoo's connection thread: callbacks must not block.
    """

    def __init__(
        self,
        config: ZookeeperConfig,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        password = config.auth.resolve_password(environ) if config.auth is not None else None
        self.identity = WorkerIdentity.current(config.worker_id)
        self.default_acl = build_acl(config, password)
        self.kazoo = KazooClient(
            hosts=config.hosts,
            timeout=config.session_timeout_s,
            default_acl=self.default_acl,
            # Retry connecting forever, at most a second apart: ZooKeeper being down is
            # transient, and a session survives only if we are back within its timeout.
            connection_retry=KazooRetry(
                max_tries=-1, delay=0.1, backoff=2, max_delay=1.0, max_jitter=0.1
            ),
            command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
            **auth_arguments(config, password),
        )
        self._probe: _TimeoutRecordingConnection | None = None
        try:  # kazoo internals (pinned <3); without them the requested timeout is used
            old = self.kazoo._connection
            self._probe = _TimeoutRecordingConnection(
                self.kazoo,
                self.kazoo._conn_retry.copy(),
                logger=self.kazoo.logger,
                sasl_options=old.sasl_options,
            )
            self.kazoo._connection = self._probe
        except AttributeError:  # pragma: no cover - a kazoo whose internals moved
            log.warning("zk_negotiated_timeout_unknown", hosts=config.hosts)
        self._callbacks: list[StateCallback] = []
        self._lock = threading.Lock()
        self._last_state: str | None = None
        self._session_seen: int | None = None
        self._closed = False
        # Set (for good: kazoo stops connecting) when the server refused the login. kazoo's
        # AUTH_FAILED state lasts only until its connection thread ends (then CLOSED), so
        # the listener records it; every later wait raises CoordinationAuthError.
        self._auth_failed = False
        self._log = log.bind(worker=self.identity.worker_id)
        self.kazoo.add_listener(self._on_state)

    # -------------------------------------------------------------- properties
    @property
    def connected(self) -> bool:
        return bool(self.kazoo.connected)

    @property
    def state(self) -> str:
        """kazoo's simplified state: "CONNECTED", "SUSPENDED" or "LOST"."""
        return str(self.kazoo.state)

    @property
    def session_id(self) -> int | None:
        client_id = self.kazoo.client_id
        return int(client_id[0]) if client_id else None

    @property
    def session_timeout_s(self) -> float:
        """The session timeout in force: the one the server granted if it was lower than
        asked for (a lease computed from the asked-for timeout would then be unsafe)."""
        asked = self.config.session_timeout_s
        granted = self._probe.negotiated_ms if self._probe is not None else None
        return min(asked, granted / 1000.0) if granted else asked

    @property
    def op_timeout_s(self) -> float:
        """How long one request may take before it counts as ZooKeeper being unavailable."""
        return min(self.config.connect_timeout_s, self.session_timeout_s / 2)

    # -------------------------------------------------------------- callbacks
    def add_listener(self, callback: StateCallback) -> None:
        with self._lock:
            if callback not in self._callbacks:
                self._callbacks.append(callback)

    def remove_listener(self, callback: StateCallback) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def _on_state(self, state: KazooState) -> None:
        name = str(state)
        if name == KazooState.CONNECTED:
            self._session_seen = self.session_id
            self._log.info(
                "zk_connected",
                session=f"{self.session_id or 0:#x}",
                session_timeout_s=self.session_timeout_s,
            )
        elif name == KazooState.SUSPENDED:
            self._log.warning("zk_suspended", session=f"{self._session_seen or 0:#x}")
        elif self.kazoo.client_state == KeeperState.AUTH_FAILED:
            self._auth_failed = True
            self._log.error(
                "zk_auth_failed",
                hosts=self.config.hosts,
                scheme=self.config.auth.scheme if self.config.auth else None,
                user=self.config.auth.username if self.config.auth else None,
            )
        elif self._last_state is not None:
            self._log.warning("zk_lost")
        self._last_state = name
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(name)
            except Exception as exc:  # one broken callback must not starve the others
                self._log.error("zk_listener_failed", error=str(exc), kind=type(exc).__name__)
        return None

    # -------------------------------------------------------------- start / stop
    def _auth_error(self, what: str | None = None, **context: object) -> CoordinationAuthError:
        """The operator error for a refused login: hosts, scheme and user, never the password."""
        auth = self.config.auth
        scheme = auth.scheme if auth is not None else None
        reason = (
            f"ZooKeeper authentication failed: the server rejected the {scheme} login "
            "(wrong user or password, or a user the server does not know)"
            if auth is not None
            else "ZooKeeper authentication failed: the server refused this client"
        )
        where = {
            **context,
            "hosts": self.config.hosts,
            "scheme": scheme,
            "user": auth.username if auth is not None else None,
        }
        return CoordinationAuthError(f"{what}: {reason}" if what else reason, **where)

    def _check_auth_failed(self) -> None:
        if self._auth_failed or self.kazoo.client_state == KeeperState.AUTH_FAILED:
            self._auth_failed = True
            self.kazoo.stop()
            raise self._auth_error()

    def _login_probe(self) -> IAsyncResult | None:
        """kazoo reports CONNECTED before it sends the credentials (SASL exchange, digest
        auth packets): a request queued now is answered only once the server accepted them,
        and fails with AuthFailedError if it refused them. None without credentials."""
        if self.config.auth is None:
            return None
        return self.kazoo.exists_async("/")

    def start(self, timeout_s: float | None = None) -> None:
        """Connect, waiting as long as it takes (or `timeout_s`): ZooKeeper being down is
        logged (`zk_unavailable`, every connect_timeout_s) and waited out, never a crash.
        Raises CoordinationAuthError if the server refuses the credentials."""
        started = time.monotonic()
        live = self.kazoo.start_async()
        next_log = started + self.config.connect_timeout_s
        while not live.wait(0.05):
            self._check_auth_failed()
            now = time.monotonic()
            if timeout_s is not None and now - started >= timeout_s:
                self.kazoo.stop()  # give up connecting: start() may be called again
                raise CoordinationUnavailableError(
                    f"ZooKeeper not reachable after {timeout_s} s", hosts=self.config.hosts
                )
            if now >= next_log:
                self._log.warning(
                    "zk_unavailable", hosts=self.config.hosts, waited_s=round(now - started, 1)
                )
                next_log = now + self.config.connect_timeout_s
        self._check_auth_failed()
        probe = self._login_probe()
        if probe is not None:
            try:
                self.wait(probe, what="confirm the ZooKeeper login")
            except CoordinationAuthError:
                self.kazoo.stop()
                raise
            except CoordinationError:
                pass  # the connection dropped meanwhile: waited out like any outage later

    async def start_async(self, timeout_s: float | None = None) -> None:
        """`start()` for asyncio code: polls instead of blocking the loop."""
        started = time.monotonic()
        self.kazoo.start_async()
        try:
            await self.wait_connected(timeout_s, started=started)
        except CoordinationUnavailableError:
            self.kazoo.stop()  # give up connecting: start_async() may be called again
            raise
        probe = self._login_probe()
        if probe is not None:
            try:
                await self.wait_async(probe, what="confirm the ZooKeeper login")
            except CoordinationAuthError:
                self.kazoo.stop()
                raise
            except CoordinationError:
                pass  # the connection dropped meanwhile: waited out like any outage later

    async def wait_connected(
        self, timeout_s: float | None = None, *, started: float | None = None
    ) -> None:
        """Return once connected; log `zk_unavailable` while not (every connect_timeout_s)."""
        started = time.monotonic() if started is None else started
        next_log = started + self.config.connect_timeout_s
        while not self.connected:
            self._check_auth_failed()
            now = time.monotonic()
            if timeout_s is not None and now - started >= timeout_s:
                raise CoordinationUnavailableError(
                    f"ZooKeeper not reachable after {timeout_s} s", hosts=self.config.hosts
                )
            if now >= next_log:
                self._log.warning(
                    "zk_unavailable", hosts=self.config.hosts, waited_s=round(now - started, 1)
                )
                next_log = now + self.config.connect_timeout_s
            await asyncio.sleep(0.05)
        self._check_auth_failed()

    def stop(self) -> None:
        """Close the session: its ephemeral nodes (candidates, status) go at once. Idempotent;
        the client cannot be started again."""
        if self._closed:
            return
        self._closed = True
        try:
            self.kazoo.stop()
        finally:
            self.kazoo.close()
        self._log.info("zk_stopped")

    # -------------------------------------------------------------- bounded waits
    def wait(
        self,
        result: IAsyncResult,
        *,
        what: str,
        timeout_s: float | None = None,
        allow: tuple[type[BaseException], ...] = (),
        **context: object,
    ) -> Any:
        """The value of a kazoo asynchronous result, waiting at most `timeout_s` (default:
        op_timeout_s). Timeouts and connection loss raise CoordinationUnavailableError, other
        kazoo errors their typed counterpart, except those in `allow` (re-raised as they
        are, for the caller to handle: e.g. NoNodeError)."""
        timeout = self.op_timeout_s if timeout_s is None else timeout_s
        try:
            return result.get(timeout=timeout)
        except self.kazoo.handler.timeout_exception:
            raise CoordinationUnavailableError(
                f"{what}: ZooKeeper did not answer within {timeout:g} s", **context
            ) from None
        except allow:
            raise
        except KazooException as exc:
            raise self._map_error(exc, what, **context) from None

    def _map_error(self, exc: BaseException, what: str, **context: object) -> CoordinationError:
        """map_kazoo_error, except after a refused login: then whatever kazoo raises (auth
        failed, connection closed) is that operator error, naming hosts and user."""
        if self._auth_failed and not isinstance(exc, NoAuthError):
            return self._auth_error(what, **context)
        error = map_kazoo_error(exc, what, **context)
        if isinstance(error, CoordinationAuthError):
            error.with_context(hosts=self.config.hosts)
        return error

    async def wait_async(
        self,
        result: IAsyncResult,
        *,
        what: str,
        timeout_s: float | None = None,
        allow: tuple[type[BaseException], ...] = (),
        **context: object,
    ) -> Any:
        """`wait()` for asyncio code: the loop is not blocked while ZooKeeper answers."""
        timeout = self.op_timeout_s if timeout_s is None else timeout_s
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def transfer(done: IAsyncResult) -> None:
            if future.done():
                return
            try:
                future.set_result(done.get(block=False))
            except BaseException as exc:
                future.set_exception(exc)

        def completed(done: IAsyncResult) -> None:  # kazoo's callback thread
            try:
                loop.call_soon_threadsafe(transfer, done)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        result.rawlink(completed)
        try:
            async with asyncio.timeout(timeout):  # not wait_for: see zk_leadership._wait_event
                return await future
        except TimeoutError:
            raise CoordinationUnavailableError(
                f"{what}: ZooKeeper did not answer within {timeout:g} s", **context
            ) from None
        except allow:
            raise
        except KazooException as exc:
            raise self._map_error(exc, what, **context) from None
