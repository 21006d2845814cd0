"""The randomized fault campaign (bench/chaos.py) in CI: run 0 of two seeds, chosen so that
together they cover the relay and exactly-once modes with a kill, a full relay disk, a
ZooKeeper partition and a zombie (seed 15: relay, kill + disk-full; seed 18: exactly-once,
zk-cut + stop). A failing run names its problems and the command that replays it; the long
campaign (100 runs and more) is `bench/chaos.py --runs N` (docs/operations.md, "The fault
campaign")."""

from __future__ import annotations

import os
import shutil

import pytest

from bench.chaos import replay_command
from bench.chaos_plan import FAULTS, MODES, draw
from bench.chaos_run import run_one

pytestmark = [pytest.mark.faults, pytest.mark.serial]
CI_SEEDS = (15, 18)


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_a_campaign_run_loses_nothing_and_a_leader_takes_over(
    seed: int, kafka: str, zookeeper: str
) -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        # A failure, not a skip: a skipped campaign would pass CI without running a fault.
        pytest.fail("the fault campaign needs root and iproute2 (network namespaces, tmpfs)")
    plan = draw(seed, 0, MODES, FAULTS)
    result = run_one(plan, kafka, zookeeper)
    replay = replay_command(seed, 0)
    assert result.status != "FAIL", (
        f"{plan.mode} {plan.label}: {'; '.join(result.verdict.problems)}; "
        f"logs in {result.logs}; replay: {replay}"
    )
    assert result.verdict.lost == 0 and result.verdict.changes > 20_000, result.verdict
