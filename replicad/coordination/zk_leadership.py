"""Leadership of one pipeline: election, epoch bump and the lease (the fenced writes are in
`zk_writes`). See `replicad.coordination.zk` for the design and why the lease is computed
the way it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from typing import Literal

import structlog
from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError

from replicad.coordination.zk_client import (
    CANDIDATE_PREFIX,
    LeaseInvalidError,
    ZkClient,
    ZkPaths,
    dumps,
    fresh_error,
    is_op_error,
    now_ms,
    parse_epoch,
    sorted_candidates,
)
from replicad.coordination.zk_ops import ensure_pipeline_nodes_async
from replicad.coordination.zk_writes import LeaderWrites
from replicad.errors import (
    CoordinationError,
    CoordinationUnavailableError,
    FencedError,
    LeadershipLostError,
)

log = structlog.get_logger("replicad.coordination.zk")

LEASE_FRACTION = 0.6  # of the session timeout, counted from the send time of a round trip
RENEW_FRACTION = 0.25  # renew every quarter of the session timeout

State = Literal["idle", "campaigning", "leader", "lost", "resigned"]


async def _wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait for the event at most `timeout_s`; True if it was set. (asyncio.timeout, not
    wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives as the awaited
    thing completes, and a campaign or renewal loop would then never end.)"""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True


class Leadership(LeaderWrites):
    """This worker's candidacy for, and leadership of, one pipeline.

    One object per pipeline per worker, reusable: after a loss (`lost`) or `resign()`, call
    `campaign()` again; it joins the election with a new candidate node.

    Thread model: kazoo reports connection states from its own thread; they only flip flags
    and wake the asyncio side (call_soon_threadsafe). `valid` may be read from any thread.
    """

    def __init__(self, client: ZkClient, paths: ZkPaths) -> None:
        self.client = client
        self.paths = paths
        self._log = log.bind(pipeline=paths.pipeline, worker=client.identity.worker_id)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self._renew_now: asyncio.Event | None = None
        self._renewal: asyncio.Task[None] | None = None
        self._attached = False
        self._reset("idle")

    def _reset(self, state: State) -> None:
        self._state: State = state
        self._candidate: str | None = None  # node name under election/
        self._session: int | None = None  # the session that owns the candidate node
        self._epoch: int | None = None
        self._epoch_version: int | None = None
        self._since_ms: int | None = None
        self._lost_error: LeadershipLostError | None = None
        # The lease: valid while monotonic() < _valid_until and no connection state change
        # happened since the round trip that set it (_validated_gen == _gen).
        self._gen = 0
        self._validated_gen = -1
        self._valid_until = 0.0
        self._position_exists: bool | None = None
        self._status_mine = False  # the status node was created by this leadership

    # -------------------------------------------------------------- what callers read
    @property
    def epoch(self) -> int | None:
        return self._epoch

    @property
    def candidate(self) -> str | None:
        return self._candidate

    @property
    def is_leader(self) -> bool:
        """Won the election and not known to have lost it (the lease may still be invalid)."""
        return self._state == "leader"

    @property
    def lost(self) -> bool:
        return self._lost_error is not None

    @property
    def lease_s(self) -> float:
        return LEASE_FRACTION * self.client.session_timeout_s

    @property
    def renew_interval_s(self) -> float:
        return RENEW_FRACTION * self.client.session_timeout_s

    @property
    def valid(self) -> bool:
        """May this worker publish right now? Cheap; check it before every publish."""
        return (
            self._state == "leader"
            and self._validated_gen == self._gen
            and self.client.kazoo.state == KazooState.CONNECTED
            and time.monotonic() < self._valid_until
        )

    @property
    def valid_for_s(self) -> float:
        return max(0.0, self._valid_until - time.monotonic()) if self.valid else 0.0

    @property
    def lease_expires_in_s(self) -> float:
        """Seconds until the lease runs out by the clock alone (negative: it has), whatever
        the connection state says (for metrics and tests)."""
        return self._valid_until - time.monotonic()

    # -------------------------------------------------------------- connection states
    def _on_state(self, state: str) -> None:  # kazoo's connection thread
        self._gen += 1  # any change needs a new round trip before the lease is valid again
        if self._state == "leader":
            if state == KazooState.SUSPENDED:
                self._log.warning("zk_lease_suspended", epoch=self._epoch)
            elif state == KazooState.LOST:
                self._mark_lost(
                    LeadershipLostError(
                        "the ZooKeeper session was lost",
                        pipeline=self.paths.pipeline,
                        epoch=self._epoch,
                    )
                )
        if state == KazooState.CONNECTED:
            self._wake(self._renew_now)
        self._wake(self._changed)

    def _wake(self, event: asyncio.Event | None) -> None:
        loop = self._loop
        if event is None or loop is None:
            return
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # the loop is closed
            pass

    def _mark_lost(self, error: LeadershipLostError) -> None:
        with self._lock:
            if self._state != "leader":
                return
            self._state = "lost"
            self._lost_error = error
        self._valid_until = 0.0
        fenced = isinstance(error, FencedError)
        self._log.warning(
            "zk_leadership_lost", epoch=self._epoch, reason=error.reason, fenced=fenced
        )
        # Leave the queue, so that a campaign after this one gets a new place. Fire and
        # forget: the session may be gone already. The status node is left alone: the next
        # leader replaces it, or it goes with our session (deleting it here could delete the
        # next leader's).
        if self._candidate is not None:
            self.client.kazoo.delete_async(self.paths.candidate(self._candidate))
            self._candidate = None
        self._wake(self._changed)

    # -------------------------------------------------------------- election
    async def campaign(self) -> int:
        """Join the election and return once this worker leads, with the new epoch.

        Waits out ZooKeeper outages; raises CoordinationAuthError / CoordinationDataError
        (operator errors). Cancelling it withdraws the candidacy.
        """
        if self._state == "leader":
            return self._epoch  # type: ignore[return-value]
        if self._state == "campaigning":
            raise RuntimeError("this Leadership is already campaigning")
        await self._stop_renewal()
        self._loop = asyncio.get_running_loop()
        self._changed, self._renew_now = asyncio.Event(), asyncio.Event()
        self._reset("campaigning")
        if not self._attached:
            self.client.add_listener(self._on_state)
            self._attached = True
        nonce = uuid.uuid4().hex[:12]
        try:
            while True:
                try:
                    await ensure_pipeline_nodes_async(self.client, self.paths)
                    await self._ensure_candidate(nonce)
                    if await self._wait_until_lowest() and await self._bump_epoch():
                        break
                except CoordinationUnavailableError as exc:
                    self._log.warning("zk_unavailable", step="campaign", error=str(exc))
                    await self.client.wait_connected()
        except BaseException:
            self._withdraw_quietly()
            self._state = "idle"
            raise
        self._state = "leader"
        self._since_ms = now_ms()
        self._renewal = asyncio.ensure_future(self._renew_loop())
        self._log.info(
            "zk_leader_elected",
            epoch=self._epoch,
            candidate=self._candidate,
            lease_s=round(self.lease_s, 3),
        )
        return self._epoch  # type: ignore[return-value]

    def _withdraw_quietly(self) -> None:
        if self._candidate is not None:
            self.client.kazoo.delete_async(self.paths.candidate(self._candidate))
            self._candidate = None

    async def _ensure_candidate(self, nonce: str) -> None:
        """Make sure this worker has a candidate node in the current session. The nonce in
        its name finds a node whose creation reply was lost with a connection."""
        session = self.client.session_id
        if self._candidate is not None and self._session == session:
            return
        self._candidate = None
        prefix = f"{CANDIDATE_PREFIX}{nonce}_"
        children = await self.client.wait_async(
            self.client.kazoo.get_children_async(self.paths.election),
            what="list the candidates",
            path=self.paths.election,
        )
        for name in children:
            if name.startswith(prefix):
                stat = await self.client.wait_async(
                    self.client.kazoo.exists_async(self.paths.candidate(name)),
                    what="adopt a candidate node",
                    path=self.paths.candidate(name),
                )
                if stat is not None and stat.ephemeralOwner == session:
                    self._candidate, self._session = name, session
                    return
        data = dumps(self.client.identity.to_json())
        path, stat = await self.client.wait_async(
            self.client.kazoo.create_async(
                self.paths.candidate(prefix), data, ephemeral=True, sequence=True, include_data=True
            ),
            what="create a candidate node",
            path=self.paths.election,
        )
        self._candidate, self._session = str(path).rsplit("/", 1)[-1], stat.ephemeralOwner
        self._log.info("zk_candidate_created", candidate=self._candidate)

    async def _wait_until_lowest(self) -> bool:
        """Wait, watching only the candidate just ahead (no herd effect), until ours is the
        lowest. False: our node is gone (its session ended), campaign with a new one."""
        assert self._changed is not None
        logged_wait = False
        while True:
            self._changed.clear()
            children = await self.client.wait_async(
                self.client.kazoo.get_children_async(self.paths.election),
                what="list the candidates",
                path=self.paths.election,
            )
            order = sorted_candidates(list(children))
            if self._candidate not in order or self.client.session_id != self._session:
                self._candidate = None
                return False
            index = order.index(self._candidate)
            if index == 0:
                return True
            ahead = order[index - 1]
            stat = await self.client.wait_async(
                self.client.kazoo.exists_async(
                    self.paths.candidate(ahead), watch=lambda _event: self._wake(self._changed)
                ),
                what="watch the candidate ahead",
                path=self.paths.candidate(ahead),
            )
            if stat is None:
                continue
            if not logged_wait:
                self._log.info("zk_candidate_waiting", candidate=self._candidate, ahead=ahead)
                logged_wait = True
            # Watches do not survive a suspended connection in kazoo: connection state
            # changes wake us too, and a periodic look guards against anything missed.
            await _wait_event(self._changed, self.client.session_timeout_s)

    async def _bump_epoch(self) -> bool:
        """Compare-and-set the epoch to one more, in one multi-op with a check that our
        candidate node still exists. False: lost the race or our node; look again."""
        assert self._candidate is not None
        candidate_path = self.paths.candidate(self._candidate)
        data, stat = await self.client.wait_async(
            self.client.kazoo.get_async(self.paths.epoch),
            what="read the epoch",
            path=self.paths.epoch,
        )
        current = parse_epoch(data, self.paths.epoch)
        gen, sent = self._gen, time.monotonic()
        txn = self.client.kazoo.transaction()
        txn.check(candidate_path, 0)
        txn.set_data(self.paths.epoch, str(current + 1).encode(), version=stat.version)
        results = await self.client.wait_async(
            txn.commit_async(), what="bump the epoch", path=self.paths.epoch
        )
        if is_op_error(results[0]) and not isinstance(results[0], RolledBackError):
            self._candidate = None  # our node is gone
            return False
        if is_op_error(results[1]):
            if isinstance(results[1], BadVersionError):
                self._log.info("zk_epoch_cas_lost", epoch=current)
                return False
            raise CoordinationError(
                f"bumping the epoch failed: {type(results[1]).__name__}", path=self.paths.epoch
            )
        self._epoch, self._epoch_version = current + 1, results[1].version
        self._validated_gen, self._valid_until = gen, sent + self.lease_s
        self._log.info("zk_epoch_bumped", epoch=self._epoch, version=self._epoch_version)
        return True

    # -------------------------------------------------------------- the lease
    async def _renew_loop(self) -> None:
        assert self._renew_now is not None
        while self._state == "leader":
            await _wait_event(self._renew_now, self.renew_interval_s)
            self._renew_now.clear()
            if self._state != "leader":
                break
            if self.client.connected:
                await self._check_lease()

    async def _check_lease(self) -> None:
        """One round trip: the epoch node still has our version and our candidate node still
        belongs to our session. Success extends the lease from the *send* time."""
        candidate = self._candidate
        if candidate is None:  # lost meanwhile (kazoo's thread)
            return
        gen, sent = self._gen, time.monotonic()
        epoch_stat = self.client.kazoo.exists_async(self.paths.epoch)
        candidate_stat = self.client.kazoo.exists_async(self.paths.candidate(candidate))
        try:
            estat = await self.client.wait_async(
                epoch_stat, what="renew the lease", path=self.paths.epoch
            )
            cstat = await self.client.wait_async(
                candidate_stat, what="renew the lease", path=self.paths.election
            )
        except CoordinationUnavailableError as exc:
            self._log.debug("zk_lease_renewal_failed", error=str(exc))
            return
        except CoordinationError as exc:
            self._log.warning("zk_lease_renewal_failed", error=str(exc), kind=type(exc).__name__)
            return
        context = {"pipeline": self.paths.pipeline, "epoch": self._epoch}
        if self.client.session_id != self._session:
            self._mark_lost(LeadershipLostError("the ZooKeeper session changed", **context))
        elif estat is None or estat.version != self._epoch_version:
            self._mark_lost(
                FencedError(
                    "the epoch moved on: another worker leads", path=self.paths.epoch, **context
                )
            )
        elif cstat is None or cstat.ephemeralOwner != self._session:
            self._mark_lost(
                FencedError("our candidate node was removed", path=self.paths.election, **context)
            )
        elif gen == self._gen and self._state == "leader":
            was_valid = self.valid
            self._validated_gen, self._valid_until = gen, sent + self.lease_s
            if not was_valid:
                self._log.info("zk_lease_valid", epoch=self._epoch)
                assert self._changed is not None
                self._changed.set()

    async def wait_valid(self, timeout_s: float | None = None) -> None:
        """Return once the lease is valid; LeadershipLostError if leadership is gone;
        LeaseInvalidError if `timeout_s` passes first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self._lost_error is not None:
                raise fresh_error(self._lost_error)
            if self._state != "leader":
                raise LeadershipLostError(
                    "not the leader", pipeline=self.paths.pipeline, state=self._state
                )
            if self.valid:
                return
            assert self._changed is not None and self._renew_now is not None
            self._changed.clear()
            self._renew_now.set()  # an expired lease on a healthy connection: renew now
            wait = self.renew_interval_s
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    raise LeaseInvalidError(
                        f"the lease is still not valid after {timeout_s:g} s",
                        pipeline=self.paths.pipeline,
                        epoch=self._epoch,
                    )
            await _wait_event(self._changed, wait)

    async def wait_lost(self) -> LeadershipLostError:
        """Return (not raise) the reason once leadership is gone."""
        while self._lost_error is None and self._state == "leader":
            assert self._changed is not None
            self._changed.clear()
            await _wait_event(self._changed, self.renew_interval_s)
        if self._lost_error is not None:
            return fresh_error(self._lost_error)  # type: ignore[return-value]
        return LeadershipLostError("not the leader", pipeline=self.paths.pipeline)

    async def _stop_renewal(self) -> None:
        task, self._renewal = self._renewal, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def resign(self) -> None:
        """Step down: stop renewing, delete the status and the candidate node. (To abandon
        a campaign still waiting in line, cancel its task: that withdraws the candidacy.)"""
        was_leader = self._state == "leader"
        with self._lock:
            self._lost_error = self._lost_error or LeadershipLostError(
                "resigned", pipeline=self.paths.pipeline, epoch=self._epoch
            )
            self._state = "resigned"
        self._valid_until = 0.0
        await self._stop_renewal()
        pending = []
        if was_leader and self._status_mine:
            with contextlib.suppress(CoordinationError):
                stat = await self.client.wait_async(
                    self.client.kazoo.exists_async(self.paths.status),
                    what="resign",
                    path=self.paths.status,
                )
                if stat is not None and stat.ephemeralOwner == self.client.session_id:
                    delete = self.client.kazoo.delete_async(self.paths.status, stat.version)
                    pending.append((self.paths.status, delete))
        if self._candidate is not None:
            path = self.paths.candidate(self._candidate)
            pending.append((path, self.client.kazoo.delete_async(path)))
        for path, result in pending:
            try:
                await self.client.wait_async(
                    result, what="resign", path=path, allow=(NoNodeError, BadVersionError)
                )
            except (NoNodeError, BadVersionError):
                pass
            except CoordinationError as exc:  # the ephemeral goes with the session anyway
                self._log.warning("zk_resign_incomplete", path=path, error=str(exc))
        self._candidate = None
        self._status_mine = False
        if self._changed is not None:
            self._changed.set()
        self._log.info("zk_resigned", epoch=self._epoch)

    def detach(self) -> None:
        """Stop listening to the client's connection states (once done with this object)."""
        self.client.remove_listener(self._on_state)
        self._attached = False
