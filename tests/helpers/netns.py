"""Real network partitions for tests: a `replicad run` worker in a network namespace of its
own, whose links to MariaDB, ZooKeeper and Kafka a test can cut and heal one at a time.

Inside the namespace the services keep their addresses (127.0.0.1:<port>: Kafka advertises
127.0.0.1:9092, so the worker must reach the broker there): a forwarder process in the
namespace listens on 127.0.0.1:<port> and connects across a veth pair (host side
10.231.N.1/30, inside 10.231.N.2) to a forwarder in the host namespace, which connects to
127.0.0.1:<port>. A cut is a kernel drop of the link's packets on that veth, not a reset: a
policy-routing rule inside the namespace (`ip rule ... blackhole`, matching the link's port),
so both ends see silence, as in a real partition. The machine has neither iptables nor nft
nor netem; `ip rule` with ipproto/dport/sport (Linux 4.17+) is what exists. Forwarders keep
the worker's side open and silent while their own upstream cannot be reached.

Everything made here (namespace, veth pair, rules, processes inside the namespace) is
removed by `NetNs.close()`, which the `netns` fixture calls whatever the test did. Names
carry the pytest process id and a free index, so parallel runs do not collide.

`python -m tests.helpers.netns forward LISTEN_HOST TARGET_HOST PORT...` is the forwarder."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import pytest

from tests.helpers.daemon_process import ROOT

Link = Literal["mariadb", "zookeeper", "kafka"]
# Each link's ports: one for the shared services, three consecutive ones for a private Kafka
# cluster or ZooKeeper ensemble (a cut drops the whole range: the worker loses every member).
Links = dict[Link, tuple[int, ...]]
LINKS: Links = {
    "mariadb": (int(os.environ.get("REPLICAD_MARIADB_PORT", "3306")),),
    "zookeeper": (int(os.environ.get("REPLICAD_ZK_PORT", "2181")),),
    "kafka": (int(os.environ.get("REPLICAD_KAFKA_PORT", "9092")),),
}
# to_service: what the worker sends is dropped; from_service: what it would receive.
Direction = Literal["both", "to_service", "from_service"]
# Each link's pair of rule priorities (to the service, from it), before the `local` table,
# which moves to LOCAL_PREF inside the namespace: else a packet to the namespace's own address
# would be delivered by the local table before any blackhole rule saw it.
RULE_PREF = {"mariadb": 110, "zookeeper": 120, "kafka": 130}
LOCAL_PREF = 1000
NAME_PREFIX = "rdpart"
CONNECT_RETRY_S = 120.0  # about Linux's own SYN retry budget: a partition makes connects hang
READY = "ready"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class NetNsError(RuntimeError):
    """A namespace, veth or rule could not be made."""


@dataclass
class NetNs:
    """One namespace and its veth pair, index `index` (the third octet of its addresses)."""

    index: int
    name: str
    forwarders: list[subprocess.Popen[bytes]] = field(default_factory=list)
    rules: set[int] = field(default_factory=set)
    links: Links = field(default_factory=lambda: dict(LINKS))
    made_link: bool = False  # the veth pair is ours to delete (its name may be another run's)

    @property
    def host_if(self) -> str:
        return f"{NAME_PREFIX}{self.index}h"

    @property
    def ns_if(self) -> str:
        return f"{NAME_PREFIX}{self.index}n"

    @property
    def host_ip(self) -> str:
        return f"10.231.{self.index}.1"

    @property
    def ns_ip(self) -> str:
        return f"10.231.{self.index}.2"

    @property
    def prefix(self) -> list[str]:
        """What runs a command inside (`ip netns exec` sets the namespace, then execs it: the
        process id is the command's own)."""
        return ["ip", "netns", "exec", self.name]

    @classmethod
    def create(cls, links: Links | None = None) -> NetNs:
        """`links`: the services' ports (default: the shared services, LINKS)."""
        _forget_stale_namespaces()
        start = (os.getpid() * 7) % 240
        for attempt in range(240):
            index = 1 + (start + attempt) % 240
            ns = cls(index, f"{NAME_PREFIX}-{os.getpid()}-{index}", links=dict(links or LINKS))
            # The host-side veth name is the lock: another run holding this index has it.
            if _ip("link", "show", ns.host_if, check=False).returncode == 0:
                continue
            try:
                ns._build()
            except (subprocess.CalledProcessError, NetNsError) as exc:
                ns.close()
                if attempt > 5:
                    raise NetNsError(f"cannot build {ns.name}: {exc}") from exc
                continue
            return ns
        raise NetNsError("no free namespace index")

    def _build(self) -> None:
        _ip("netns", "add", self.name)
        _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        self.made_link = True
        _ip("link", "set", self.ns_if, "netns", self.name)
        _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        _ip("link", "set", self.host_if, "up")
        inside = ["-n", self.name]
        _ip(*inside, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
        _ip(*inside, "link", "set", self.ns_if, "up")
        _ip(*inside, "link", "set", "lo", "up")
        _ip(*inside, "rule", "add", "pref", str(LOCAL_PREF), "lookup", "local")
        _ip(*inside, "rule", "del", "pref", "0", "lookup", "local")
        ports = [str(p) for link in self.links.values() for p in link]
        self._forward([], self.host_ip, "127.0.0.1", ports)
        self._forward(self.prefix, "127.0.0.1", self.host_ip, ports)

    def _forward(self, prefix: list[str], listen: str, target: str, ports: list[str]) -> None:
        command = [sys.executable, "-m", "tests.helpers.netns", "forward", listen, target]
        proc = subprocess.Popen(
            [*prefix, *command, *ports],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        self.forwarders.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()
        if line != READY:
            raise NetNsError(f"forwarder {listen} -> {target} did not start (exit {proc.poll()})")

    def cut(self, link: Link, direction: Direction = "both") -> None:
        """Drop the link's packets (in one direction or both) from now until `heal`."""
        pref = RULE_PREF[link]
        port = _port_range(self.links[link])
        if direction in ("both", "to_service"):
            self._rule(pref, "to", self.host_ip, "ipproto", "tcp", "dport", port)
        if direction in ("both", "from_service"):
            self._rule(pref + 1, "iif", self.ns_if, "ipproto", "tcp", "sport", port)

    def _rule(self, pref: int, *match: str) -> None:
        if pref not in self.rules:
            _ip("-n", self.name, "rule", "add", "pref", str(pref), *match, "blackhole")
            self.rules.add(pref)

    def heal(self, link: Link) -> None:
        for pref in (RULE_PREF[link], RULE_PREF[link] + 1):
            if pref in self.rules:
                _ip("-n", self.name, "rule", "del", "pref", str(pref))
                self.rules.discard(pref)

    def close(self) -> None:
        """Kill every process inside (workers, the inner forwarder), stop the host forwarder,
        delete the veth pair and the namespace. Safe to call on a half-built one."""
        pids = _ip("netns", "pids", self.name, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        for proc in self.forwarders:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        _wait_until_empty(self.name)
        if self.made_link:
            _ip("link", "del", self.host_if, check=False)
        _ip("netns", "del", self.name, check=False)


def _port_range(ports: tuple[int, ...]) -> str:
    """What `ip rule` matches for a link: one port, or a range of consecutive ones."""
    low, high = min(ports), max(ports)
    if high - low + 1 != len(ports):
        raise NetNsError(f"a link's ports must be consecutive to be cut together: {ports}")
    return str(low) if low == high else f"{low}-{high}"


def _wait_until_empty(name: str) -> None:
    deadline = time.monotonic() + 10
    while _ip("netns", "pids", name, check=False).stdout.split():
        if time.monotonic() > deadline:
            raise NetNsError(f"processes still in {name}")
        time.sleep(0.05)


def _forget_stale_namespaces() -> None:
    """Delete the names of this helper's namespaces whose pytest process is gone (a run killed
    before its teardown), so their indexes do not pile up: a namespace nothing runs in any
    more goes with its name, and its veth pair with it."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split(" ")[0]
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != NAME_PREFIX:
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            _ip("netns", "del", name, check=False)
        except (PermissionError, ValueError):
            continue


@pytest.fixture
def netns() -> Iterator[Callable[[], NetNs]]:
    """Makes namespaces for the test; all of them are removed afterwards, pass or fail.
    Skips where they cannot be made (not root, no iproute2)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2 (`ip netns`)")
    made: list[NetNs] = []

    def make() -> NetNs:
        ns = NetNs.create()
        made.append(ns)
        return ns

    try:
        yield make
    finally:
        for ns in made:
            ns.close()


# --- the forwarder process ---------------------------------------------------------------


async def _connect_while_waiting(
    target: str, port: int, client: asyncio.StreamReader
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """Connect upstream, retrying while the link is cut (the blackhole fails a connect at
    once, a one-way cut makes it hang): the client meanwhile sees silence, not a refusal.
    None if the client went away or the retry budget ran out."""
    deadline = time.monotonic() + CONNECT_RETRY_S
    while time.monotonic() < deadline and not client.at_eof():
        try:
            return await asyncio.wait_for(asyncio.open_connection(target, port), 2.0)
        except (OSError, TimeoutError):
            await asyncio.sleep(0.2)
    return None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


async def _serve(
    target: str, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    upstream = await _connect_while_waiting(target, port, reader)
    if upstream is None:
        writer.close()
        return
    up_reader, up_writer = upstream
    pipes = [
        asyncio.ensure_future(_pipe(reader, up_writer)),
        asyncio.ensure_future(_pipe(up_reader, writer)),
    ]
    await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
    for task in pipes:
        task.cancel()
    for w in (writer, up_writer):
        w.close()


async def _forward(listen: str, target: str, ports: list[int]) -> None:
    servers = [
        await asyncio.start_server(
            lambda r, w, p=port: _serve(target, p, r, w), listen, port, reuse_address=True
        )
        for port in ports
    ]
    print(READY, flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[0] != "forward":
        raise SystemExit("usage: python -m tests.helpers.netns forward LISTEN TARGET PORT...")
    asyncio.run(_forward(argv[1], argv[2], [int(p) for p in argv[3:]]))


if __name__ == "__main__":
    main(sys.argv[1:])
