"""One run of the fault campaign: a fresh database and pipeline, the plan's workload and
faults, then the oracle; everything it started is gone when it returns, pass or fail."""

from __future__ import annotations

import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos_faults import Outcome, apply
from bench.chaos_oracle import Verdict, judge
from bench.chaos_plan import Plan
from bench.chaos_services import Services
from bench.chaos_workload import GatedWorkload, StepRunner, Writer, create_tables
from bench.chaos_world import World
from tests.faults.test_ha_failover import FAILOVER_TARGET_S, log_tails
from tests.faults.test_partitions import CATCH_UP_S
from tests.helpers.daemon_process import wait_for
from tests.helpers.databases import fresh_database
from tests.helpers.ha import MARIADB
from tests.helpers.kafka_run import BackgroundWriter
from tests.helpers.mariadb import connect_root

WORK_DIR = Path(tempfile.gettempdir()) / "replicad-chaos"


@dataclass
class RunResult:
    plan: Plan
    outcomes: list[Outcome] = field(default_factory=list)
    verdict: Verdict = field(default_factory=Verdict)
    seconds: float = 0.0
    logs: Path | None = None  # kept when the run failed
    # exactly-once: failed Kafka transactions the sink left to the next producer epoch
    left_to_fencing: int = 0

    @property
    def max_takeover_s(self) -> float:
        return max((o.takeover_s for o in self.outcomes if o.takeover_s is not None), default=0.0)

    @property
    def status(self) -> str:
        """FAIL: a problem the oracle found; slow: a takeover past the session + 2 s."""
        if self.verdict.problems:
            return "FAIL"
        return "slow" if self.max_takeover_s > FAILOVER_TARGET_S else "ok"


def _faults(world: World, plan: Plan, result: RunResult) -> None:
    writer = BackgroundWriter(
        world.db,
        seed=plan.writer_seed,
        pause_s=0.02,
        workload=lambda conn, seed: GatedWorkload(world.gate, conn, seed),
    )
    steps = StepRunner(world.db, plan, world.gate)
    writer.start()
    steps.start()
    try:
        world.wait_position()
        for fault in plan.faults:
            result.outcomes.append(apply(world, fault))
    finally:
        steps.finish()
        writer.stop()


def _caught_up_and_stopped(world: World) -> None:
    target = MARIADB.executed()
    wait_for(
        lambda: MARIADB.reached(world.zk_position(), target),
        CATCH_UP_S + 60,  # the 20k-row transaction may be published late in the run
        "the leader to catch up with the primary",
    )
    for worker in world.workers:
        assert worker.stop() == 0, f"{worker.name} did not stop cleanly"


def run_one(plan: Plan, services: Services) -> RunResult:
    result = RunResult(plan)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f"s{plan.seed}-r{plan.run}-", dir=_work_dir()))
    with fresh_database(connect_root) as (conn, db):
        conn.select_db(db)  # a reconnect after a primary restart goes back into it
        create_tables(conn)
        with World.open(services, db, plan.mode, tmp, plan.run) as world:
            try:
                world.start()
                try:
                    _faults(world, plan, result)
                finally:
                    world.gate.reconnected(Writer(conn))
                _caught_up_and_stopped(world)
                result.left_to_fencing = sum(
                    w.count("kafka_transaction_left_to_fencing") for w in world.workers
                )
                windows = [o.window for o in result.outcomes if o.window is not None]
                result.verdict = judge(
                    conn, services.kafka, world.prefix, db, world.pipeline, plan.mode, windows
                )
            except Exception as exc:  # the run failed: say where, keep the logs
                result.verdict.problems.append(f"{type(exc).__name__}: {exc}".strip()[:600])
                (tmp / "failure.txt").write_text(
                    traceback.format_exc() + "\n" + log_tails(world.workers)
                )
            if result.status == "FAIL":
                world.keep_topics = True
                (tmp / "topics.txt").write_text(f"{services.kafka} {world.prefix}.*\n")
    result.seconds = time.monotonic() - started
    if result.status == "FAIL":
        result.logs = tmp
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _work_dir() -> Path:
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    return WORK_DIR
