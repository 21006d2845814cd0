"""The randomized fault campaign (bench/chaos.py) in CI: run 0 of two seeds, chosen so that
together they cover the relay and exactly-once modes with a kill, a full relay disk, a
ZooKeeper partition and a zombie (seed 15: relay, kill + disk-full; seed 18: exactly-once,
zk-cut + stop). A failing run names its problems and the command that replays it; the long
campaign (100 runs and more) is `bench/chaos.py --runs N` (docs/operations.md, "The fault
campaign"). And one run with services of the campaign's own (`--cluster`: 3 brokers, 3
ZooKeeper members, a MariaDB) drawing the faults only they allow: seed 32, exactly-once, a
ZooKeeper member killed, the primary crashed under its writers, a broker killed, the primary
restarted."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from bench.chaos import replay_command
from bench.chaos_plan import CLUSTER_FAULTS, CRASH_FAULTS, FAULTS, MODES, draw
from bench.chaos_run import run_one
from bench.chaos_services import Services
from tests.helpers.daemon_process import ROOT
from tests.helpers.netns import LINKS

pytestmark = [pytest.mark.faults, pytest.mark.serial]
CI_SEEDS = (15, 18)
CLUSTER_SEED = 32
CLUSTER_KINDS = CLUSTER_FAULTS + CRASH_FAULTS
CLUSTER_RUN_TIMEOUT_S = 600  # six JVMs and a MariaDB to start, then a run of about 40 s


def _needs_namespaces() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        # A failure, not a skip: a skipped campaign would pass CI without running a fault.
        pytest.fail("the fault campaign needs root and iproute2 (network namespaces, tmpfs)")


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_a_campaign_run_loses_nothing_and_a_leader_takes_over(
    seed: int, kafka: str, zookeeper: str
) -> None:
    _needs_namespaces()
    plan = draw(seed, 0, MODES, FAULTS)
    result = run_one(plan, Services(kafka, zookeeper, dict(LINKS)))
    replay = replay_command(seed, 0)
    assert result.status != "FAIL", (
        f"{plan.mode} {plan.label}: {'; '.join(result.verdict.problems)}; "
        f"logs in {result.logs}; replay: {replay}"
    )
    assert result.verdict.lost == 0 and result.verdict.changes > 20_000, result.verdict


def test_a_cluster_run_loses_nothing_when_a_broker_a_zookeeper_member_and_the_primary_go() -> None:
    """A process of its own: the campaign's private primary must be chosen before the test
    helpers are imported (bench/chaos.py), and this process has imported them already."""
    _needs_namespaces()
    plan = draw(CLUSTER_SEED, 0, MODES, CLUSTER_KINDS)
    assert plan.mode == "exactly-once" and set(plan.label.split("+")) == set(CLUSTER_KINDS)
    command = [
        sys.executable,
        "bench/chaos.py",
        "--cluster",
        *("--seed", str(CLUSTER_SEED), "--run", "0", "--faults", ",".join(CLUSTER_KINDS)),
    ]
    env = {k: v for k, v in os.environ.items() if k != "REPLICAD_MARIADB_PORT"}
    done = subprocess.run(
        command,
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=CLUSTER_RUN_TIMEOUT_S,
    )
    run = re.search(rf"^seed={CLUSTER_SEED} run=0 .*$", done.stdout, re.MULTILINE)
    assert done.returncode == 0 and run, done.stdout[-4000:] + done.stderr[-4000:]
    assert "verdict=FAIL" not in run[0] and " lost=0 " in run[0], run[0]
    rows = re.search(r" rows=(\d+) ", run[0])
    assert rows and int(rows[1]) > 20_000, run[0]
