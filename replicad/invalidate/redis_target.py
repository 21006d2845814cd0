"""The Redis side of the invalidator: a client for the configured topology (standalone,
Sentinel, Cluster; TLS and auth through redis-py) and one plan applied in one pipeline."""

from __future__ import annotations

from typing import Any

import orjson
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

from replicad.config import RedisConfig
from replicad.errors import AuthError, ConfigError, ReplicadError
from replicad.invalidate.rules import Plan

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
                raise ConfigError("a sentinel node is host:port", key="invalidate.redis.sentinel",
                                  value=node)  # fmt: skip
            nodes.append((host, int(port)))
        sentinel_password = None
        if config.sentinel.password_env:
            import os

            sentinel_password = os.environ.get(config.sentinel.password_env)
        sentinel = Sentinel(nodes, sentinel_kwargs={"password": sentinel_password,
                            "socket_timeout": config.timeout_s}, **common)  # fmt: skip
        return sentinel.master_for(config.sentinel.master)
    if config.cluster:
        return RedisCluster.from_url(config.url, **common)
    return redis.Redis.from_url(config.url, **common)


def check(client: Any, config: RedisConfig) -> None:
    """PING at the start: wrong credentials are an error for an operator (exit 78)."""
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        raise AuthError(f"Redis refused the credentials: {exc}", url=_safe(config.url)) from None
    except redis.ResponseError as exc:
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise AuthError(f"Redis refused: {exc}", url=_safe(config.url)) from None
        raise RedisUnavailableError(
            f"Redis answered PING with {exc}", url=_safe(config.url)
        ) from None
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        # Exit 75: a service manager restarts the invalidator until Redis is there.
        raise RedisUnavailableError(
            f"Redis is not reachable: {exc}", url=_safe(config.url)
        ) from None


def apply(client: Any, plan: Plan, deletes_only: bool = False) -> None:
    """Every operation of `plan` (with `deletes_only`: its UNLINKs again, the redelete)."""
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
        pipe.execute()
        if not deletes_only:
            for event in plan.table_wide:
                if event.action == "scan":
                    _unlink_matching(client, event.target)
    except redis.AuthenticationError as exc:
        raise AuthError(f"Redis refused the credentials: {exc}") from None
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError, OSError) as exc:
        # ResponseError too: LOADING, READONLY after a failover, CLUSTERDOWN are transient.
        raise RedisUnavailableError(f"Redis did not take the batch: {exc}") from None


def _unlink_matching(client: Any, pattern: str) -> None:
    chunk: list[Any] = []
    for key in client.scan_iter(match=pattern, count=SCAN_COUNT):
        chunk.append(key)
        if len(chunk) >= UNLINK_CHUNK:
            _unlink_all(client, chunk)
            chunk = []
    if chunk:
        _unlink_all(client, chunk)


def _unlink_all(client: Any, keys: list[Any]) -> None:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.unlink(key)
    pipe.execute()


def _safe(url: str) -> str:
    """A URL without its password, for errors and logs."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.split('@', 1)[1]}"
