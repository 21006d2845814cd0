"""The Redis side of the invalidator: a client for the configured topology (standalone,
Sentinel, Cluster; TLS and auth through redis-py) and one plan applied in one pipeline.

With Sentinel every pipeline ends in WAIT for `sentinel.wait_replicas` replicas: Redis
replicates asynchronously, and a failover (SENTINEL FAILOVER, or the master lost) promotes a
replica while the old master goes on taking writes until Sentinel demotes it, seconds later;
the deletes it took in between are thrown away when it resynchronises with the new master.
A batch whose deletes no replica has is not acknowledged: it is retried, on whichever master
Sentinel names by then (the connections are dropped after a failure, so the next one asks)."""

from __future__ import annotations

from typing import Any

import orjson

from replicad.config import RedisConfig
from replicad.errors import (
    AuthError,
    ConfigError,
    ReplicadError,
    TlsError,
    certificate_refused,
)
from replicad.extras import missing_extra
from replicad.invalidate.rules import Plan

try:  # the `invalidate` extra
    import redis
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.retry import Retry
    from redis.sentinel import MasterNotFoundError, Sentinel
except ImportError:
    raise missing_extra("invalidate", "replicad invalidate", "invalidate") from None

SCAN_COUNT = 1000
UNLINK_CHUNK = 500


class RedisUnavailableError(ReplicadError):
    """Redis did not take a plan (down, timed out, failing over): the batch is retried and
    its offsets stay uncommitted."""


def redis_client(config: RedisConfig) -> Any:
    password = config.resolve_password() or None
    common: dict[str, Any] = {
        "username": config.username,
        "password": password,
        "socket_timeout": config.timeout_s,
        "socket_connect_timeout": config.timeout_s,
        # No retries inside redis-py: an outage is the invalidator's to handle (partitions
        # paused, the batch retried, both logged), not hidden in a client's backoff.
        "retry": Retry(NoBackoff(), 0),
    }
    if config.url.startswith("rediss://") or config.tls_ca is not None:
        common.update(
            ssl_ca_certs=str(config.tls_ca) if config.tls_ca else None,
            ssl_certfile=str(config.tls_cert) if config.tls_cert else None,
            ssl_keyfile=str(config.tls_key) if config.tls_key else None,
        )
    if config.sentinel is not None:
        nodes = []
        for node in config.sentinel.nodes:
            host, _, port = node.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(
                    "a sentinel node is host:port", key="invalidate.redis.sentinel", value=node
                )
            nodes.append((host, int(port)))
        sentinel_password = config.sentinel.resolve_password() or None
        sentinel = Sentinel(
            nodes,
            sentinel_kwargs={
                "password": sentinel_password,
                "socket_timeout": config.timeout_s,
                "socket_connect_timeout": config.timeout_s,
            },
            **common,
        )
        return sentinel.master_for(config.sentinel.master)
    try:
        if config.cluster:
            return RedisCluster.from_url(config.url, **common)
        return redis.Redis.from_url(config.url, **common)
    except ValueError as exc:  # redis-py's URL parser: a scheme or port it cannot read
        raise ConfigError(
            f"not a Redis URL: {exc}", key="invalidate.redis.url", value=_safe(config.url)
        ) from None


def check(client: Any, config: RedisConfig) -> None:
    """PING at the start: wrong credentials are an error for an operator (exit 78)."""
    where = _where(config)
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        raise AuthError(f"Redis refused the credentials: {exc}").with_context(**where) from None
    except redis.ResponseError as exc:
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise AuthError(f"Redis refused: {exc}").with_context(**where) from None
        raise RedisUnavailableError(f"Redis answered PING with {exc}", **where) from None
    except MasterNotFoundError:
        # redis-py's message is the repr of a client; what matters is who was asked.
        raise RedisUnavailableError(
            "no Sentinel could be reached or none names a master of that name", **where
        ) from None
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        if certificate_refused(exc):
            # A CA that did not sign the server's certificate (or a name it does not carry)
            # stays wrong across restarts: exit 78, like a refused password.
            raise TlsError(
                f"Redis's TLS certificate was refused: {exc}", **where, tls_ca=config.tls_ca
            ) from None
        # Exit 75: a service manager restarts the invalidator until Redis is there.
        raise RedisUnavailableError(f"Redis is not reachable: {exc}", **where) from None


def _where(config: RedisConfig) -> dict[str, object]:
    """What an error names: the URL (without its password), or with Sentinel the master's
    name and the sentinels (the URL is not used then)."""
    if config.sentinel is not None:
        return {
            "sentinel_master": config.sentinel.master,
            "sentinels": ",".join(config.sentinel.nodes),
        }
    return {"url": _safe(config.url)}


def replicas_to_wait_for(config: RedisConfig) -> int:
    return config.sentinel.wait_replicas if config.sentinel is not None else 0


def apply(
    client: Any, plan: Plan, deletes_only: bool = False, replicas: int = 0, wait_ms: int = 0
) -> None:
    """Every operation of `plan` (with `deletes_only`: its UNLINKs again, the redelete); with
    `replicas`, done only once that many replicas have them (WAIT, at most `wait_ms`)."""
    try:
        pipe = client.pipeline(transaction=False)
        for key in plan.delete:
            pipe.unlink(key)  # one key per command: a Cluster routes each to its slot
        if not deletes_only:
            for channel, keys in plan.notices.items():
                pipe.publish(channel, orjson.dumps({"keys": keys}))
            for event in plan.table_wide:
                if event.action == "generation":
                    pipe.incr(event.target)
        _wait(pipe, replicas, wait_ms)
        if not deletes_only:
            for event in plan.table_wide:
                if event.action == "scan":
                    _unlink_matching(client, event.target, replicas, wait_ms)
    except redis.AuthenticationError as exc:
        raise AuthError(f"Redis refused the credentials: {exc}") from None
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError, OSError) as exc:
        # ResponseError too: LOADING, READONLY after a failover, CLUSTERDOWN are transient.
        _forget_connections(client)
        raise RedisUnavailableError(f"Redis did not take the batch: {exc}") from None
    except RedisUnavailableError:
        _forget_connections(client)
        raise


def _wait(pipe: Any, replicas: int, wait_ms: int) -> None:
    """Executes the pipeline, ended by WAIT on the same connection when `replicas`."""
    if replicas:
        pipe.execute_command("WAIT", replicas, wait_ms)
    results = pipe.execute()
    if replicas and results[-1] < replicas:
        raise RedisUnavailableError(
            f"Redis took the batch, but only {results[-1]} of {replicas} replicas have it "
            f"after {wait_ms} ms (WAIT): a failover now would lose it",
        )


def _forget_connections(client: Any) -> None:
    """After a failure the next command opens a new connection: through Sentinel it goes to
    the master Sentinel names now, not to one that may have been replaced."""
    pool = getattr(client, "connection_pool", None)  # a Cluster keeps its own per node
    if pool is not None:
        pool.disconnect()


def _unlink_matching(client: Any, pattern: str, replicas: int = 0, wait_ms: int = 0) -> None:
    # On a Cluster redis-py's scan_iter runs SCAN on every primary (its routing of SCAN),
    # one cursor per node, so a pattern reaches every slot.
    chunk: list[Any] = []
    for key in client.scan_iter(match=pattern, count=SCAN_COUNT):
        chunk.append(key)
        if len(chunk) >= UNLINK_CHUNK:
            _unlink_all(client, chunk, replicas, wait_ms)
            chunk = []
    if chunk:
        _unlink_all(client, chunk, replicas, wait_ms)


def _unlink_all(client: Any, keys: list[Any], replicas: int, wait_ms: int) -> None:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.unlink(key)
    _wait(pipe, replicas, wait_ms)


def _safe(url: str) -> str:
    """A URL without its password, for errors and logs."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.split('@', 1)[1]}"
