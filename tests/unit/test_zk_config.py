"""ZooKeeper coordination without a server: the config section, paths, ACLs and credentials,
and the shapes of what the nodes hold."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path

import orjson
import pytest
from kazoo.exceptions import (
    ConnectionLoss,
    NoAuthError,
    SessionClosedRequireSaslError,
    SessionExpiredError,
)
from kazoo.security import make_digest_acl

from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.config import ZookeeperConfig, load_config
from replicad.coordination.local import PositionStoreError
from replicad.coordination.zk import (
    Command,
    CoordinationAuthError,
    CoordinationDataError,
    CoordinationUnavailableError,
    FencedError,
    LeadershipLostError,
    LeadershipSlots,
    LeaseInvalidError,
    ZkPaths,
    build_acl,
)
from replicad.coordination.zk_client import (
    auth_arguments,
    map_kazoo_error,
    parse_epoch,
    sequence_of,
    sorted_candidates,
)
from replicad.coordination.zk_ops import (
    SCHEMA_PART_BYTES,
    checkpoint_from_record,
    decode_schema_node,
    parse_position_record,
    position_record,
    schema_inline,
    schema_manifest,
    schema_part_name,
    split_blob,
)
from replicad.errors import AuthError, ConfigError

pytestmark = pytest.mark.unit


def _zk(**section: object) -> ZookeeperConfig:
    return ZookeeperConfig.model_validate({"hosts": "127.0.0.1:2181", **section})


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------ config
def test_zookeeper_is_optional_and_has_defaults(tmp_path: Path) -> None:
    assert load_config(None, {}).coordination.zookeeper is None
    config = load_config(
        _write(tmp_path, "coordination:\n  zookeeper:\n    hosts: 'a:2181,b:2181'\n"), {}
    )
    zk = config.coordination.zookeeper
    assert zk is not None
    assert (zk.hosts, zk.root, zk.cluster, zk.session_timeout_s, zk.connect_timeout_s) == (
        "a:2181,b:2181",
        "/replicad",
        "default",
        10.0,
        10.0,
    )
    assert (zk.max_pipelines, zk.worker_id, zk.auth, zk.acl) == (1, None, None, "open")
    assert config.coordination.local.path == Path("replicad-position.json")


def test_environment_overrides_reach_the_section() -> None:
    config = load_config(
        None,
        {
            "REPLICAD_COORDINATION__ZOOKEEPER__HOSTS": "zk1:2181",
            "REPLICAD_COORDINATION__ZOOKEEPER__MAX_PIPELINES": "3",
        },
    )
    assert config.coordination.zookeeper is not None
    assert config.coordination.zookeeper.max_pipelines == 3


@pytest.mark.parametrize(
    ("yaml_section", "key"),
    [
        ("{}", "coordination.zookeeper.hosts"),
        ("{hosts: h, acl: private}", "coordination.zookeeper"),
        ("{hosts: h, acl: private-readable}", "coordination.zookeeper"),
        ("{hosts: h, acl: public}", "coordination.zookeeper.acl"),
        ("{hosts: h, session_timeout_s: 0}", "coordination.zookeeper.session_timeout_s"),
        ("{hosts: h, max_pipelines: 0}", "coordination.zookeeper.max_pipelines"),
        ("{hosts: h, root: replicad}", "coordination.zookeeper.root"),
        ("{hosts: h, root: /a/}", "coordination.zookeeper.root"),
        ("{hosts: h, cluster: 'a/b'}", "coordination.zookeeper.cluster"),
        ("{hosts: h, tyop: 1}", "coordination.zookeeper.tyop"),
        ("{hosts: h, auth: {username: u}}", "coordination.zookeeper.auth"),
        (
            "{hosts: h, auth: {username: u, password: p, password_env: E}}",
            "coordination.zookeeper.auth",
        ),
        (
            "{hosts: h, auth: {scheme: kerberos, username: u, password: p}}",
            "coordination.zookeeper.auth.scheme",
        ),
    ],
)
def test_invalid_sections_name_the_key(tmp_path: Path, yaml_section: str, key: str) -> None:
    path = _write(tmp_path, f"coordination:\n  zookeeper: {yaml_section}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, {})
    assert err.value.context["key"] == key


def test_private_acl_error_says_what_is_missing(tmp_path: Path) -> None:
    path = _write(tmp_path, "coordination:\n  zookeeper: {hosts: h, acl: private}\n")
    with pytest.raises(ConfigError, match=r"needs coordination\.zookeeper\.auth"):
        load_config(path, {})


def test_password_sources_and_secrecy(tmp_path: Path) -> None:
    secret = tmp_path / "zk.pw"
    secret.write_text("from-file\n")
    by_file = _zk(acl="private", auth={"username": "u", "password_file": str(secret)})
    assert by_file.auth is not None and by_file.auth.resolve_password({}) == "from-file"
    by_env = _zk(auth={"username": "u", "password_env": "ZK_PW"})
    assert by_env.auth is not None and by_env.auth.resolve_password({"ZK_PW": "e"}) == "e"
    with pytest.raises(ConfigError) as err:
        by_env.auth.resolve_password({})
    assert err.value.context["key"] == "coordination.zookeeper.auth.password_env"
    inline = _zk(auth={"username": "u", "password": "hunter2"})
    assert "hunter2" not in repr(inline) and "hunter2" not in str(inline.model_dump())


# ------------------------------------------------------------------------------------ paths
def test_paths_follow_the_layout() -> None:
    paths = ZkPaths("/replicad", "prod", "orders")
    base = "/replicad/prod/pipelines/orders"
    assert paths.pipelines == "/replicad/prod/pipelines" and paths.base == base
    assert [
        paths.election,
        paths.epoch,
        paths.position,
        paths.schema,
        paths.commands,
        paths.status,
        paths.last_error,
    ] == [
        f"{base}/{n}"
        for n in ("election", "epoch", "position", "schema", "commands", "status", "last_error")
    ]
    assert paths.candidate("c_x_0000000001") == f"{base}/election/c_x_0000000001"
    assert paths.command("cmd-0000000002") == f"{base}/commands/cmd-0000000002"
    assert ZkPaths("/a/b", "c", "p").base == "/a/b/c/pipelines/p"


def test_candidates_sort_by_sequence_not_by_name() -> None:
    names = ["c_ffff_0000000010", "c_0000_0000000002", "junk", "c_aaaa_0000000009", "c_bad"]
    assert sorted_candidates(names) == [
        "c_0000_0000000002",
        "c_aaaa_0000000009",
        "c_ffff_0000000010",
    ]
    assert sequence_of("cmd-0000000042") == 42
    with pytest.raises(CoordinationDataError):
        sequence_of("c_nope")


def test_epoch_parsing() -> None:
    assert parse_epoch(b"", "/e") == 0 and parse_epoch(b"17", "/e") == 17
    with pytest.raises(CoordinationDataError):
        parse_epoch(b"-1", "/e")


# ------------------------------------------------------------------------------------ ACLs
def test_acl_modes() -> None:
    auth = {"username": "rep", "password": "pw"}
    assert build_acl(_zk(), None) is None
    own = make_digest_acl("rep", "pw", all=True)
    assert build_acl(_zk(acl="private", auth=auth), "pw") == [own]
    readable = build_acl(_zk(acl="private-readable", auth=auth), "pw")
    assert readable is not None and readable[0] == own
    assert (readable[1].id.scheme, readable[1].id.id, readable[1].perms) == ("world", "anyone", 1)
    sasl = build_acl(_zk(acl="private", auth={**auth, "scheme": "sasl"}), "pw")
    assert sasl is not None and (sasl[0].id.scheme, sasl[0].id.id) == ("sasl", "rep")
    expected = hashlib.sha1(b"rep:pw").digest()
    assert own.id.id.endswith(base64.b64encode(expected).decode())


def test_credentials_for_kazoo() -> None:
    config = _zk(auth={"username": "rep", "password": "pw"})
    assert auth_arguments(config, "pw") == {"auth_data": [("digest", "rep:pw")]}
    assert auth_arguments(_zk(), None) == {}


def test_kazoo_errors_become_typed_errors() -> None:
    assert isinstance(map_kazoo_error(ConnectionLoss(), "x"), CoordinationUnavailableError)
    assert isinstance(map_kazoo_error(SessionExpiredError(), "x"), CoordinationUnavailableError)
    refused = map_kazoo_error(NoAuthError(), "read", path="/p")
    assert isinstance(refused, CoordinationAuthError) and isinstance(refused, AuthError)
    assert refused.context["path"] == "/p"
    sasl_required = map_kazoo_error(SessionClosedRequireSaslError(), "read")
    assert isinstance(sasl_required, CoordinationAuthError) and "SASL" in str(sasl_required)
    assert issubclass(FencedError, LeadershipLostError)
    assert issubclass(LeaseInvalidError, CoordinationUnavailableError)
    assert issubclass(CoordinationDataError, PositionStoreError)


# ------------------------------------------------------------------------------------ shapes
def test_position_record_round_trip() -> None:
    checkpoint = Checkpoint(Position("mariadb-bin.000003", 1234, row=5), '{"queue": []}')
    record = position_record(checkpoint, 7, "host:1")
    assert set(record) == {"position", "epoch", "ts_ms", "by"}
    assert (record["epoch"], record["by"]) == (7, "host:1")
    data = orjson.dumps(record)
    parsed = parse_position_record(data, "/p")
    assert parsed is not None and checkpoint_from_record(parsed, "/p") == checkpoint
    assert parse_position_record(b"", "/p") is None
    for bad in (b"nope", b"[]", b'{"position": 1}'):
        with pytest.raises(CoordinationDataError):
            parse_position_record(bad, "/p")
    with pytest.raises(CoordinationDataError):
        checkpoint_from_record({"position": {"file": "x", "pos": 1}}, "/p")


def test_command_record_shapes() -> None:
    queued = Command("cmd-0000000001", "reset_position", {"pos": 4}, "alice", 1000)
    assert queued.node_json() == {
        "op": "reset_position",
        "args": {"pos": 4},
        "requested_by": "alice",
        "ts_ms": 1000,
        "state": "queued",
    }
    assert queued.pending
    done = Command(
        queued.id, queued.op, queued.args, "alice", 1000, "applied", {"ok": 1}, 2000, "w1", 3
    )
    data = orjson.dumps(done.node_json())
    assert Command.from_node(queued.id, data, "/c") == done
    assert done.to_json()["id"] == "cmd-0000000001" and not done.pending
    for bad in (b'{"args": {}}', b'{"op": "x", "state": "lost"}', b'{"op": "x", "args": [1]}'):
        with pytest.raises(CoordinationDataError):
            Command.from_node("cmd-0000000001", bad, "/c")


def test_schema_node_formats() -> None:
    assert decode_schema_node(b"", "/s") is None
    assert decode_schema_node(schema_inline(b"\x01abc"), "/s") == b"\x01abc"
    blob = bytes(range(256)) * 9000  # 2.3 MB
    parts = split_blob(blob)
    assert [len(p) for p in parts] == [
        SCHEMA_PART_BYTES,
        SCHEMA_PART_BYTES,
        len(blob) - 2 * SCHEMA_PART_BYTES,
    ]
    assert b"".join(parts) == blob and split_blob(b"") == [b""]
    manifest = decode_schema_node(schema_manifest("3xab", parts), "/s")
    assert manifest == {
        "generation": "3xab",
        "parts": 3,
        "size": len(blob),
        "sha256": hashlib.sha256(blob).hexdigest(),
    }
    assert schema_part_name("3xab", 2) == "part-3xab-0002"
    with pytest.raises(CoordinationDataError):
        decode_schema_node(b"\x07junk", "/s")


def test_slots_count_and_wake() -> None:
    async def scenario() -> None:
        slots = LeadershipSlots(2)
        assert slots.try_acquire() and slots.try_acquire() and not slots.try_acquire()
        waiter = asyncio.ensure_future(slots.wait_free())
        await asyncio.sleep(0)
        assert not waiter.done()
        slots.release()
        await asyncio.wait_for(waiter, 1)
        full = asyncio.ensure_future(slots.wait_full())
        await asyncio.sleep(0)
        assert not full.done()
        assert slots.try_acquire()
        await asyncio.wait_for(full, 1)
        with pytest.raises(ValueError):
            LeadershipSlots(0)

    asyncio.run(scenario())
