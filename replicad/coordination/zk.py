"""ZooKeeper coordination: leader election, fencing epochs, the leadership lease, and the
pipeline's state for operators (docs/architecture.md, "ZooKeeper layout"). This module is
the public face; the code is in `zk_client` (connection, paths, errors), `zk_leadership`
(election, lease), `zk_writes` (the leader's fenced writes, status), `zk_slots` (how many
pipelines a worker leads) and `zk_ops` (node formats, commands, operator helpers).

Layout, per pipeline, under `<root>/<cluster>/pipelines/<pipeline>/`:

    election/c_<nonce>_NNNNNNNNNN   EPHEMERAL_SEQUENTIAL, {worker, host, pid}; lowest leads
    epoch                           decimal integer; each new leader compare-and-sets +1
    position                        {position, epoch, ts_ms, by}; fenced multi-op writes only
    schema                          schema-history blob: 0x00 + blob, or 0x01 + a manifest
    schema/part-<gen>-NNNN          of parts when the blob is over SCHEMA_PART_BYTES
    commands/cmd-NNNNNNNNNN         PERSISTENT_SEQUENTIAL operator requests
    status                          EPHEMERAL, the leader's {worker, epoch, position, lag ...}
    last_error                      {error, kind, worker, ts_ms}

Election: a candidate watches only the candidate just ahead of it (no herd effect); when it is
the lowest it bumps `epoch` in one multi-op (check: my candidate node still exists; set: epoch
+ 1 with the version I read). The epoch and the node version that bump produced are the
fencing token: every write of the leader (`position`, `schema`, command results) is a
multi-op `check(epoch, version) + write`, so a deposed leader's write fails in ZooKeeper.

The lease. ZooKeeper fences its own nodes, but not Kafka: a leader must know, before each
publish, that it still leads. kazoo's state alone is not enough. A leader that was stopped
(SIGSTOP, a VM pause, a long GC or swap stall) for longer than the session timeout has lost
its session and a standby may already publish, yet on waking its kazoo client still says
CONNECTED until it reads the closed socket, reconnects and is told the session expired: the
zombie would publish in between. So leadership is a lease on the local monotonic clock:

    valid  ==  leader  and  no connection-state change since the last successful round trip
               and  monotonic() < send_time_of_that_round_trip + 0.6 * session_timeout

A renewal task does the round trip every session_timeout / 4 (exists() on the epoch node and
on our candidate node: the epoch must still have our version, the candidate must still be
ours). A successful round trip proves the session was alive when the server handled it,
after send_time; the server cannot expire the session before session_timeout passes without
hearing from us, and a standby bumps the epoch only after that. 0.6 leaves room for clock
rate differences and scheduling. The monotonic clock keeps running while the process is
stopped, so a zombie's first look at `valid` after waking is False, before kazoo noticed
anything. SUSPENDED makes the lease invalid at once (the connection-state counter moves);
after a reconnect in the same session one fresh round trip makes it valid again; LOST, a moved
epoch or a removed candidate node make leadership lost for good (campaign again). The
timeout used is the one the server granted if it was lower than the one asked for.

Size limit: one ZooKeeper request, a multi-op included, must fit the server's jute.maxbuffer
(1 MiB - 1 by default). A schema blob up to SCHEMA_PART_BYTES (900 KiB) is stored inline in
one fenced multi-op; a larger one is written as parts (one fenced multi-op each, under a new
generation name) and switched to by a last fenced multi-op that also deletes the previous
generation, so readers see the old blob or the new one. Positions and commands are small.

Reads: a leader reads `position` in its own session after its epoch bump, so it sees every
write the previous leaders made (their fenced writes were ordered before the bump). Writes
that time out raise CoordinationUnavailableError and are *in doubt*: ZooKeeper applies a
session's requests in order, so a later successful write supersedes them.
"""

from __future__ import annotations

from replicad.coordination.zk_client import (
    CandidateExistsError,
    CommandError,
    CoordinationAuthError,
    CoordinationConflictError,
    CoordinationDataError,
    LeaseInvalidError,
    WorkerIdentity,
    ZkClient,
    ZkPaths,
    build_acl,
)
from replicad.coordination.zk_leadership import LEASE_FRACTION, RENEW_FRACTION, Leadership
from replicad.coordination.zk_ops import (
    SCHEMA_PART_BYTES,
    Command,
    ensure_pipeline_nodes,
    force_set_position,
    get_command,
    list_candidates,
    list_commands,
    list_pipelines,
    prune_commands,
    read_epoch,
    read_pipeline_state,
    read_position_record,
    read_schema,
    record_error,
    submit_command,
    wait_command,
)
from replicad.coordination.zk_slots import LeadershipSlots, campaign_with_slot
from replicad.errors import (
    CoordinationError,
    CoordinationUnavailableError,
    FencedError,
    LeadershipLostError,
)

__all__ = [
    "LEASE_FRACTION",
    "RENEW_FRACTION",
    "SCHEMA_PART_BYTES",
    "CandidateExistsError",
    "Command",
    "CommandError",
    "CoordinationAuthError",
    "CoordinationConflictError",
    "CoordinationDataError",
    "CoordinationError",
    "CoordinationUnavailableError",
    "FencedError",
    "Leadership",
    "LeadershipLostError",
    "LeadershipSlots",
    "LeaseInvalidError",
    "WorkerIdentity",
    "ZkClient",
    "ZkPaths",
    "build_acl",
    "campaign_with_slot",
    "ensure_pipeline_nodes",
    "force_set_position",
    "get_command",
    "list_candidates",
    "list_commands",
    "list_pipelines",
    "prune_commands",
    "read_epoch",
    "read_pipeline_state",
    "read_position_record",
    "read_schema",
    "record_error",
    "submit_command",
    "wait_command",
]
