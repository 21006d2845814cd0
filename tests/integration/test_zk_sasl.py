"""ZooKeeper SASL (DIGEST-MD5) against real servers: private standalone instances whose JAAS
Server section knows the users `replicad` and `other` (scripts/services.sh zk-sasl), one of
them enforcing SASL logins. replicad's own client logs in with `auth.scheme: sasl`; plain
kazoo clients (as `replicad`, as `other`, anonymous) look at the nodes it made from outside.
Nothing is mocked. pure-sasl comes with the `test` extra: without it these tests fail.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, SessionClosedRequireSaslError
from kazoo.security import ACL, Id, Permissions
from structlog.testing import capture_logs

from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.config import ZookeeperConfig
from replicad.coordination.zk import (
    CoordinationAuthError,
    Leadership,
    ZkClient,
    ZkPaths,
    read_pipeline_state,
)
from tests.helpers.zk_helpers import (
    ZkSaslServer,
    raw_client,
    read_json,
    unique_root,
    within,
    zk_config,
)

pytestmark = pytest.mark.integration

# The JAAS users of the private servers (test credentials, passed to scripts/services.sh).
REPLICAD_PASSWORD = "replicad-sasl-pw-4d1f"
OTHER_PASSWORD = "other-sasl-pw-9b2e"
USERS = {"replicad": REPLICAD_PASSWORD, "other": OTHER_PASSWORD}
WRONG_PASSWORD = "not-the-password-7c3a"

OWNER_ONLY = [ACL(Permissions.ALL, Id("sasl", "replicad"))]
OWNER_AND_WORLD_READ = [*OWNER_ONLY, ACL(Permissions.READ, Id("world", "anyone"))]


def pos(n: int) -> Position:
    return Position("mariadb-bin.000001", 4 + n)


def sasl_auth(user: str, password: str) -> dict[str, str]:
    return {"scheme": "sasl", "username": user, "password": password}


@pytest.fixture(scope="module")
def sasl_zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private SASL-enabled ZooKeeper (anonymous sessions allowed); its connect string."""
    server = ZkSaslServer(tmp_path_factory.mktemp("zk-sasl"), USERS)
    try:
        server.up()
        yield server.hosts
    finally:
        server.down()


@pytest.fixture(scope="module")
def enforcing_zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private ZooKeeper that closes every session without a SASL login."""
    server = ZkSaslServer(tmp_path_factory.mktemp("zk-sasl-enforced"), USERS, enforce=True)
    try:
        server.up()
        yield server.hosts
    finally:
        server.down()


def tree(client: KazooClient, path: str) -> list[str]:
    """`path` and every node below it."""
    nodes = [path]
    for child in client.get_children(path):
        nodes.extend(tree(client, f"{path.rstrip('/')}/{child}"))
    return nodes


def assert_refused(client: KazooClient, paths: ZkPaths, *, may_read: bool) -> None:
    """Writes under the pipeline are refused; reads too unless `may_read`."""
    writes: list[Callable[[], Any]] = [
        lambda: client.set(paths.position, b"{}"),
        lambda: client.set(paths.epoch, b"99"),
        lambda: client.create(paths.candidate("c_intruder_"), b"", sequence=True),
        lambda: client.delete(paths.status),
        lambda: client.set_acls(paths.position, [ACL(Permissions.ALL, Id("world", "anyone"))]),
    ]
    reads: list[Callable[[], Any]] = [
        lambda: client.get(paths.position),
        lambda: client.get(paths.epoch),
        lambda: client.get_children(paths.election),
    ]
    for action in writes + ([] if may_read else reads):
        with pytest.raises(NoAuthError):
            action()
    if may_read:
        for action in reads:
            action()


async def sasl_leader(
    clients: Callable[[ZookeeperConfig], ZkClient], server: str, acl: str, table: str
) -> tuple[str, ZkPaths, Leadership]:
    """replicad logged in over SASL as `replicad` with `acl`, leading a pipeline for `table`
    under a new root: (root, paths, leadership)."""
    root = unique_root()
    paths = ZkPaths(root, "default", table)
    owner = clients(zk_config(server, root, acl=acl, auth=sasl_auth("replicad", REPLICAD_PASSWORD)))
    await owner.start_async(timeout_s=15)
    lead = Leadership(owner, paths)
    assert await within(lead.campaign(), 10, "leadership") == 1
    return root, paths, lead


# ------------------------------------------------------------------------------------------
def test_pure_sasl_is_installed() -> None:
    """CI installs the `test` extra, which carries pure-sasl: never skip for want of it."""
    assert importlib.util.find_spec("puresasl") is not None, (
        "pure-sasl is missing: pip install -e '.[test]'"
    )


@pytest.mark.asyncio
async def test_sasl_login_and_private_acl(
    sasl_zk: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """replicad logs in as `replicad` over SASL with acl=private and runs a pipeline (leader,
    position, status). Every node it made, from its root down, carries exactly the ACL
    sasl:replicad ALL; `other` (logged in over SASL) and an anonymous session are refused
    reads and writes, and replicad configured as `other` gets the typed ACL error."""
    root, paths, lead = await sasl_leader(clients, sasl_zk, "private", "orders")
    lead.save_checkpoint(Checkpoint(pos(1)))
    assert lead.publish_status({"lag_s": 0.5})
    assert lead.load_checkpoint() == Checkpoint(pos(1))

    with raw_client(sasl_zk, sasl=("replicad", REPLICAD_PASSWORD)) as kz:
        nodes = tree(kz, root)
        # the pipeline's nodes and the live candidate, all made by replicad
        for path in (paths.position, paths.epoch, paths.status, paths.commands, paths.schema):
            assert path in nodes
        assert paths.candidate(lead.candidate or "?") in nodes
        acls = {path: kz.get_acls(path)[0] for path in nodes}
        assert read_json(kz, paths.position)["position"] == pos(1).to_json()
    assert {path: acl for path, acl in acls.items() if acl != OWNER_ONLY} == {}

    with raw_client(sasl_zk, sasl=("other", OTHER_PASSWORD)) as other:
        assert_refused(other, paths, may_read=False)
    with raw_client(sasl_zk) as anonymous:
        assert_refused(anonymous, paths, may_read=False)

    intruder = clients(
        zk_config(sasl_zk, root, acl="private", auth=sasl_auth("other", OTHER_PASSWORD))
    )
    await intruder.start_async(timeout_s=15)  # a valid login: only the ACL refuses it
    with pytest.raises(CoordinationAuthError) as refused:
        await within(Leadership(intruder, paths).campaign(), 10, "a refusal")
    assert "ACL" in str(refused.value) and refused.value.context.get("path")
    with pytest.raises(CoordinationAuthError):
        read_pipeline_state(intruder, paths)
    # nothing moved
    assert lead.valid and lead.load_checkpoint() == Checkpoint(pos(1))
    with raw_client(sasl_zk, sasl=("replicad", REPLICAD_PASSWORD)) as kz:
        assert kz.get(paths.epoch)[0] == b"1"
        assert len(kz.get_children(paths.election)) == 1


@pytest.mark.asyncio
async def test_sasl_private_readable(
    sasl_zk: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """acl=private-readable: sasl:replicad ALL plus world READ. `other` and an anonymous
    session read the position and the candidates, and can write nothing."""
    root, paths, lead = await sasl_leader(clients, sasl_zk, "private-readable", "public")
    lead.save_checkpoint(Checkpoint(pos(2)))
    assert lead.publish_status({"lag_s": 0.0})

    with raw_client(sasl_zk, sasl=("replicad", REPLICAD_PASSWORD)) as kz:
        acls = {path: kz.get_acls(path)[0] for path in tree(kz, root)}
    assert paths.position in acls and len(acls) > 8
    assert {path: acl for path, acl in acls.items() if acl != OWNER_AND_WORLD_READ} == {}

    for who in (("other", OTHER_PASSWORD), None):
        with raw_client(sasl_zk, sasl=who) as kz:
            assert read_json(kz, paths.position)["position"] == pos(2).to_json()
            assert kz.get_children(paths.election) == [lead.candidate]
            assert_refused(kz, paths, may_read=True)
    # replicad's operator view works for a reader with valid SASL credentials of its own
    reader = clients(zk_config(sasl_zk, root, auth=sasl_auth("other", OTHER_PASSWORD)))
    await reader.start_async(timeout_s=15)
    state = read_pipeline_state(reader, paths)
    assert state["position"]["position"] == pos(2).to_json() and state["epoch"] == 1


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("user", "password"),
    [("replicad", WRONG_PASSWORD), ("nobody-here", WRONG_PASSWORD)],
    ids=["wrong-password", "unknown-user"],
)
async def test_sasl_refused_login_is_a_typed_error(
    sasl_zk: str, clients: Callable[[ZookeeperConfig], ZkClient], user: str, password: str
) -> None:
    """A login the server refuses ends start()/start_async() at once with
    CoordinationAuthError naming ZooKeeper authentication, the hosts, the scheme and the user
    (never the password), in the error and in the logs; not a wait until the timeout, nor a
    'not reachable'. The client stays stopped: later calls raise the same error."""
    root = unique_root()
    config = zk_config(sasl_zk, root, acl="private", auth=sasl_auth(user, password))
    with capture_logs() as logs:
        client = clients(config)
        started = time.monotonic()
        with pytest.raises(CoordinationAuthError) as refused:
            await client.start_async(timeout_s=15)
        elapsed = time.monotonic() - started
    message = str(refused.value)
    assert elapsed < 5, elapsed
    assert "ZooKeeper authentication failed" in message and "sasl" in message
    assert refused.value.context == {"hosts": sasl_zk, "scheme": "sasl", "user": user}
    assert password not in message and password not in repr(refused.value.context)
    assert password not in repr(logs)
    failed = [e for e in logs if e["event"] == "zk_auth_failed"]
    assert failed and failed[0]["user"] == user and failed[0]["log_level"] == "error"
    assert not any(e["event"] == "zk_unavailable" for e in logs)
    # nothing of replicad's was created, and the session is not retried behind our back
    with pytest.raises(CoordinationAuthError):
        await within(Leadership(client, ZkPaths(root, "default", "p")).campaign(), 10, "a refusal")
    with raw_client(sasl_zk) as kz:
        assert kz.exists(root) is None

    # the blocking start() (operator commands) behaves the same
    blocking = clients(config)
    started = time.monotonic()
    with pytest.raises(CoordinationAuthError, match="ZooKeeper authentication failed"):
        await asyncio.to_thread(blocking.start, 15)
    assert time.monotonic() - started < 5


@pytest.mark.asyncio
async def test_enforced_sasl_server(
    enforcing_zk: str, clients: Callable[[ZookeeperConfig], ZkClient]
) -> None:
    """A server that requires SASL (enforce.auth.schemes=sasl): replicad's SASL login runs
    before its first request, so it leads and writes; an anonymous kazoo session is closed;
    replicad without credentials or with digest ones gets CoordinationAuthError saying a
    SASL login is required."""
    root, paths, lead = await sasl_leader(clients, enforcing_zk, "private", "orders")
    lead.save_checkpoint(Checkpoint(pos(3)))
    with raw_client(enforcing_zk, sasl=("replicad", REPLICAD_PASSWORD)) as kz:
        assert read_json(kz, paths.position)["position"] == pos(3).to_json()
        assert kz.get_acls(paths.position)[0] == OWNER_ONLY

    with raw_client(enforcing_zk) as anonymous, pytest.raises(SessionClosedRequireSaslError):
        anonymous.exists("/")

    anonymous_replicad = clients(zk_config(enforcing_zk, root))
    await anonymous_replicad.start_async(timeout_s=15)
    with pytest.raises(CoordinationAuthError, match="requires a SASL login") as refused:
        read_pipeline_state(anonymous_replicad, paths)
    assert refused.value.context.get("hosts") == enforcing_zk

    digest = clients(
        zk_config(
            enforcing_zk,
            root,
            acl="private",
            auth={"username": "replicad", "password": REPLICAD_PASSWORD},
        )
    )
    with pytest.raises(CoordinationAuthError, match="requires a SASL login"):
        await digest.start_async(timeout_s=15)
    assert lead.valid and lead.load_checkpoint() == Checkpoint(pos(3))
