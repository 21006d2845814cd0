"""The position a pipeline stored, read from outside the daemon (`spark verify`): from
ZooKeeper or the local file, as `coordination` configures. Read only; no daemon needed."""

from __future__ import annotations

from typing import Any

from replicad.config import Config
from replicad.coordination.local import LocalPositionStore
from replicad.coordination.zk_client import ZkClient, ZkPaths
from replicad.coordination.zk_ops import read_position_record


def stored_position(config: Config) -> dict[str, Any] | None:
    """The stored position as `Position.to_json` writes it (file, pos, gtid, ...); None when
    the pipeline stored none yet."""
    zk = config.coordination.zookeeper
    if zk is None:
        position = LocalPositionStore(config.coordination.local.path, config.pipeline).load()
        return None if position is None else position.to_json()
    client = ZkClient(zk)
    client.start(timeout_s=zk.connect_timeout_s)
    try:
        record = read_position_record(client, ZkPaths.from_config(zk, config.pipeline))
    finally:
        client.stop()
    return None if record is None else record.get("position")
