"""ZooKeeper helpers for tests: private servers, a private ensemble and a private SASL server
(scripts/services.sh zk-instance / zk-ensemble / zk-sasl), unique roots deleted afterwards, a
raw kazoo client to look at nodes from outside replicad, a forced session expiry, polling with
deadlines, and a leader that runs as a subprocess so that a test can SIGSTOP it
(`python -m tests.helpers.zk_helpers zombie`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from replicad.checkpoint_record import Checkpoint
from replicad.config import ZookeeperConfig
from tests.helpers.ports import free_port_block

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "scripts/services.sh"
TEST_USER = "replicad-test"
TEST_PASSWORD = "zk-test-secret"
DIGEST = ("digest", f"{TEST_USER}:{TEST_PASSWORD}")


# ---------------------------------------------------------------------------------- waiting
def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


async def poll_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)


async def within(awaitable: Awaitable[Any], timeout_s: float, what: str) -> Any:
    try:
        async with asyncio.timeout(timeout_s):
            return await awaitable
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}") from None


# ---------------------------------------------------------------------------------- servers
def _services(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run(
        ["bash", str(SERVICES), *args],
        check=True,
        timeout=120,
        env={**os.environ, **env} if env else None,
    )


class ZkServer:
    """A private standalone ZooKeeper (its own dataDir and port), for outages and restarts."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.dir = directory
        self.port = port or free_port_block(1)

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def up(self) -> None:
        _services("zk-instance", "up", str(self.dir), str(self.port))

    def kill(self) -> None:
        _services("zk-instance", "kill", str(self.dir))

    def down(self) -> None:
        _services("zk-instance", "down", str(self.dir))


class ZkSaslServer(ZkServer):
    """A private standalone ZooKeeper whose clients log in with SASL DIGEST-MD5 as one of
    `users` (name -> password, the JAAS Server section); `enforce`: sessions without a SASL
    login are closed at their first request."""

    def __init__(
        self,
        directory: Path,
        users: dict[str, str],
        *,
        enforce: bool = False,
        port: int | None = None,
    ) -> None:
        super().__init__(directory, port)
        self.users = dict(users)
        self.enforce = enforce

    def up(self) -> None:
        users = " ".join(f"{name}:{password}" for name, password in self.users.items())
        mode = ["enforce"] if self.enforce else []
        _services(
            "zk-sasl",
            "up",
            str(self.dir),
            str(self.port),
            *mode,
            env={"REPLICAD_ZK_SASL_USERS": users},
        )

    def kill(self) -> None:
        _services("zk-sasl", "kill", str(self.dir))

    def down(self) -> None:
        _services("zk-sasl", "down", str(self.dir))


class ZkEnsemble:
    """A private 3-node ensemble; member N serves clients on base + N - 1."""

    def __init__(self, directory: Path, base: int | None = None) -> None:
        self.dir = directory
        self.base = base or free_port_block(30)

    def port(self, member: int) -> int:
        return self.base + member - 1

    @property
    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{self.port(n)}" for n in (1, 2, 3))

    def up(self) -> None:
        _services("zk-ensemble", "up", str(self.dir), str(self.base))

    def down(self) -> None:
        _services("zk-ensemble", "down", str(self.dir), str(self.base))

    def kill(self, member: int) -> None:
        _services("zk-ensemble", "kill", str(self.dir), str(self.base), str(member))

    def start(self, member: int) -> None:
        """Start a member and wait until it has joined the quorum."""
        _services("zk-ensemble", "start", str(self.dir), str(self.base), str(member))

    def mode(self, member: int) -> str:
        try:
            with socket.create_connection(("127.0.0.1", self.port(member)), timeout=2) as sock:
                sock.sendall(b"srvr")
                data = b""
                while chunk := sock.recv(4096):
                    data += chunk
        except OSError:
            return ""
        for line in data.decode(errors="replace").splitlines():
            if line.startswith("Mode: "):
                return line[6:].strip()
        return ""


# ---------------------------------------------------------------------------------- nodes
def unique_root() -> str:
    return f"/replicad-test-{uuid.uuid4().hex[:12]}"


def zk_config(hosts: str, root: str, **overrides: Any) -> ZookeeperConfig:
    return ZookeeperConfig.model_validate({"hosts": hosts, "root": root, **overrides})


@contextmanager
def raw_client(
    hosts: str,
    *,
    auth: tuple[str, str] | None = None,
    sasl: tuple[str, str] | None = None,
) -> Iterator[KazooClient]:
    """A plain kazoo client (no replicad code), to look at or meddle with nodes; `auth` is
    (scheme, credential) auth data, `sasl` a (user, password) DIGEST-MD5 login."""
    sasl_options = (
        {"mechanism": "DIGEST-MD5", "username": sasl[0], "password": sasl[1]} if sasl else None
    )
    client = KazooClient(
        hosts=hosts, timeout=10, auth_data=[auth] if auth else None, sasl_options=sasl_options
    )
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def delete_tree(hosts: str, root: str) -> None:
    """Remove a test's root (with the test credentials, in case its nodes are private)."""
    with raw_client(hosts, auth=DIGEST) as client, suppress(NoNodeError):
        client.delete(root, recursive=True)


def read_json(client: KazooClient, path: str) -> Any:
    data, _ = client.get(path)
    return json.loads(data) if data else None


def expire_session(hosts: str, victim: KazooClient) -> None:
    """Really expire a client's session: a second client takes over the same session id and
    closes it; the victim sees SUSPENDED then LOST, and its ephemeral nodes are gone."""
    session_id, password = victim.client_id
    thief = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=10)
    thief.start(timeout=15)
    thief.stop()
    thief.close()


# ---------------------------------------------------------------------------------- zombie
def _emit(**fields: Any) -> None:
    print(json.dumps({"mono": time.monotonic(), **fields}), flush=True)


async def _zombie(hosts: str, root: str, pipeline: str, session_timeout_s: float) -> None:
    """Lead, then print the lease every 50 ms. After a pause (SIGSTOP/SIGCONT) try to save a
    position at once and again after wait_valid(), and report what happened."""
    from replicad.binlog.position import Position
    from replicad.coordination.zk import (
        CoordinationError,
        Leadership,
        ZkClient,
        ZkPaths,
    )
    from replicad.service.logging import configure_logging

    configure_logging("json", "info")  # on standard error: standard output is the report
    client = ZkClient(
        zk_config(hosts, root, session_timeout_s=session_timeout_s, worker_id="zombie")
    )
    await client.start_async(timeout_s=15)
    leadership = Leadership(client, ZkPaths(root, "default", pipeline))
    epoch = await leadership.campaign()
    leadership.save_checkpoint(Checkpoint(Position("zombie-bin.000001", 4)))
    _emit(event="leader", epoch=epoch, lease_s=leadership.lease_s)
    last = time.monotonic()
    woke: float | None = None
    try:
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            _emit(
                event="tick",
                valid=leadership.valid,
                lost=leadership.lost,
                expires_in=leadership.lease_expires_in_s,
                kazoo=client.state,
            )
            if woke is None and now - last > 1.0:
                woke = now
                _emit(event="woke", stopped_s=round(now - last, 3))
                try:
                    leadership.save_checkpoint(Checkpoint(Position("zombie-bin.000002", 4)))
                    _emit(event="save_at_wake", result="ok")
                except CoordinationError as exc:
                    _emit(event="save_at_wake", result=type(exc).__name__)
            last = now
            if woke is not None and leadership.lost:
                try:
                    await leadership.wait_valid(timeout_s=5)
                    _emit(event="wait_valid", result="ok")
                except CoordinationError as exc:
                    _emit(event="wait_valid", result=type(exc).__name__)
                try:
                    leadership.save_checkpoint(Checkpoint(Position("zombie-bin.000003", 4)))
                    _emit(event="save_after_loss", result="ok")
                except CoordinationError as exc:
                    _emit(event="save_after_loss", result=type(exc).__name__)
                return
            if woke is not None and now - woke > 15:
                _emit(event="gave_up")
                return
    finally:
        client.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.zk_helpers")
    sub = parser.add_subparsers(dest="command", required=True)
    zombie = sub.add_parser("zombie", help="a leader that reports its lease every 50 ms")
    zombie.add_argument("--hosts", required=True)
    zombie.add_argument("--root", required=True)
    zombie.add_argument("--pipeline", required=True)
    zombie.add_argument("--session-timeout", type=float, default=2.0)
    args = parser.parse_args(argv)
    asyncio.run(_zombie(args.hosts, args.root, args.pipeline, args.session_timeout))


if __name__ == "__main__":
    sys.exit(main())
