"""What one run of the fault campaign does, drawn from its seed alone: the mode, the faults
(kind, the quiet time before each, how long each lasts) and the workload steps beside the
continuous writer. Nothing here touches a process or a server: the same `(seed, run)` draws
the same plan, which is what makes a failing run replayable."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from tests.helpers.ha import SESSION_TIMEOUT_S

MODES = ("at-least-once", "exactly-once", "relay")
# Each fault hits the worker leading at that moment (both workers run in namespaces of their
# own, tests/helpers/netns.py, so any leader can be cut).
FAULTS = (
    "kill",  # SIGKILL; restarted as a standby (as systemd would) after the takeover
    "stop",  # SIGSTOP for longer than the session, then SIGCONT: a zombie
    "zk-cut",  # ZooKeeper link dropped both ways; healed after the takeover
    "zk-cut-to",  # only what the leader sends to ZooKeeper is dropped
    "zk-cut-from",  # only what ZooKeeper answers is dropped
    "kafka-cut",  # Kafka link dropped both ways: the leader must wait, not exit or move on
    "db-cut",  # the primary's link dropped: reconnect with backoff, resume by GTID
    "disk-full",  # the leader's relay directory (a tmpfs) filled; relay mode only
)
# With --cluster (bench/chaos_services.py: a 3-broker Kafka, a 3-member ZooKeeper ensemble and
# a MariaDB of the campaign's own), three more:
CLUSTER_FAULTS = (
    "broker-kill",  # SIGKILL of one broker, restarted after the hold: the leader keeps going
    "zk-member-kill",  # SIGKILL of one ZooKeeper member (any role), restarted after the hold
    "primary-restart",  # the primary stopped and started (writers drained): resume by GTID
)
# And one more, apart so that plans drawn from the three above stay as they were (CI's run):
CRASH_FAULTS = (
    "primary-crash",  # the primary SIGKILLed under its writers: what it rolled back is unseen
)
LEFT_OUT: dict[str, str] = {}
SHARED_LEFT_OUT = dict.fromkeys(
    CLUSTER_FAULTS + CRASH_FAULTS, "needs --cluster (services of the campaign's own)"
)
STEP_KINDS = ("all-types", "all-types", "all-types", "bulk", "alter", "truncate")
BULK_ROWS = (20_000, 24_000)


@dataclass(frozen=True)
class Fault:
    kind: str
    delay_s: float  # quiet time after the previous fault settled
    hold_s: float  # how long the cut, stop or full disk lasts past its minimum
    member: int = 0  # broker-kill, zk-member-kill: which member (1-3)


@dataclass(frozen=True)
class Step:
    kind: str
    at_s: float  # after the workload started


@dataclass(frozen=True)
class Plan:
    seed: int
    run: int
    mode: str
    faults: tuple[Fault, ...]
    steps: tuple[Step, ...]
    writer_seed: int
    bulk_rows: int

    @property
    def label(self) -> str:
        return "+".join(f.kind for f in self.faults)


def allowed_faults(mode: str, faults: Sequence[str]) -> list[str]:
    """The kinds a run in `mode` may draw: a full relay disk needs the relay."""
    return [f for f in faults if f != "disk-full" or mode == "relay"]


def _hold(kind: str, rnd: random.Random) -> float:
    if kind == "stop":  # past the session, so that the zombie's lease is gone
        return SESSION_TIMEOUT_S + rnd.uniform(0.5, 2.5)
    if kind == "kafka-cut":  # below the exactly-once transaction timeout (10 s)
        return rnd.uniform(3.0, 8.0)
    if kind == "db-cut":  # around the silence detection (5 s) and one reconnect attempt
        return rnd.uniform(4.0, 12.0)
    if kind in ("broker-kill", "zk-member-kill"):  # down for a few metadata/ping rounds
        return rnd.uniform(2.0, 8.0)
    if kind in ("primary-restart", "primary-crash"):  # around the reconnect backoff's start
        return rnd.uniform(0.0, 4.0)
    return rnd.uniform(0.0, 2.0)


def _member(kind: str, rnd: random.Random) -> int:
    """Drawn only for the kinds that hit one member: older seeds draw the same plans."""
    return rnd.randint(1, 3) if kind in ("broker-kill", "zk-member-kill") else 0


def draw(seed: int, run: int, modes: Sequence[str], faults: Sequence[str]) -> Plan:
    """Run `run` of campaign `seed`: everything from `random.Random(f"{seed}:{run}")`."""
    rnd = random.Random(f"{seed}:{run}")
    mode = rnd.choice(list(modes))
    kinds = allowed_faults(mode, faults)
    if not kinds:
        raise ValueError(f"no fault kind among {list(faults)} fits mode {mode}")
    drawn = tuple(
        Fault(kind, rnd.uniform(1.0, 3.0), _hold(kind, rnd), _member(kind, rnd))
        for kind in (rnd.choice(kinds) for _ in range(rnd.randint(2, 4)))
    )
    horizon = sum(f.delay_s + f.hold_s + 4.0 for f in drawn)
    steps = tuple(sorted((Step(k, rnd.uniform(0.5, horizon)) for k in STEP_KINDS), key=_at))
    return Plan(seed, run, mode, drawn, steps, rnd.randint(1, 999), rnd.randint(*BULK_ROWS))


def _at(step: Step) -> float:
    return step.at_s
