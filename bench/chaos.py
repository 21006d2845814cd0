#!/usr/bin/env python3
"""A randomized fault campaign against HA `replicad run` workers (issue 37, item 4).

Each run draws from `random.Random(f"{seed}:{run}")` a mode (at-least-once, exactly-once,
relay), 2-4 faults at random moments (bench/chaos_plan.py: SIGKILL and SIGSTOP of the leader,
its ZooKeeper link cut both ways or one way, its Kafka or primary link cut, its relay disk
full) and a workload (bench/chaos_workload.py), then judges what consumers read
(bench/chaos_oracle.py). One line per run, a summary, exit 1 when a run failed; each failing
run's line ends with the command that replays it.

Needs root (network namespaces, tmpfs), the shared MariaDB, Kafka and ZooKeeper
(scripts/services.sh), and PYTHONPATH at the checkout. With --cluster it starts services of
its own instead (bench/chaos_services.py) and also draws a broker kill, a ZooKeeper member
kill and a primary restart.

Usage: .venv/bin/python bench/chaos.py --runs 20 --seed 1
       .venv/bin/python bench/chaos.py --seed 1 --run 7          # replay run 7 of seed 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.ports import free_port_block


def _private_primary_port() -> None:
    """With --cluster the campaign's primary is a MariaDB of its own; the test helpers read
    its port (REPLICAD_MARIADB_PORT) when first imported, so it is chosen before they are."""
    if "--cluster" in sys.argv[1:] and os.environ.get("REPLICAD_TEST_CHAOS_PRIVATE_PRIMARY") != "1":
        # Below the ephemeral range: the primary restarts on this port (tests/helpers/ports.py)
        os.environ["REPLICAD_MARIADB_PORT"] = str(free_port_block(1))
        os.environ["REPLICAD_TEST_CHAOS_PRIVATE_PRIMARY"] = "1"


_private_primary_port()

from bench import chaos_services  # noqa: E402  (after the port above)
from bench.chaos_plan import (  # noqa: E402
    CLUSTER_FAULTS,
    CRASH_FAULTS,
    FAULTS,
    LEFT_OUT,
    MODES,
    SHARED_LEFT_OUT,
    draw,
)
from bench.chaos_run import RunResult, run_one  # noqa: E402

ALL_FAULTS = FAULTS + CLUSTER_FAULTS + CRASH_FAULTS


def _names(text: str, allowed: tuple[str, ...]) -> list[str]:
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"choose among {', '.join(allowed)}; not {unknown}")
    return names


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--runs", type=int, default=1, help="runs 0..N-1 of the seed")
    parser.add_argument("--run", type=int, help="only this run (a replay)")
    parser.add_argument(
        "--minutes", type=float, help="start no run after this many minutes (the summary follows)"
    )
    parser.add_argument("--modes", type=lambda t: _names(t, MODES), default=list(MODES))
    parser.add_argument("--faults", type=lambda t: _names(t, ALL_FAULTS))
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="services of the campaign's own (3 brokers, 3 ZooKeeper members, a MariaDB); "
        f"adds the faults {', '.join(CLUSTER_FAULTS + CRASH_FAULTS)}",
    )
    args = parser.parse_args(argv)
    allowed = ALL_FAULTS if args.cluster else FAULTS
    if args.faults is None:
        args.faults = list(allowed)
    elif not set(args.faults) <= set(allowed):
        parser.error(f"{sorted(set(args.faults) - set(allowed))} need --cluster")
    return args


def replay_command(
    seed: int,
    run: int,
    modes: Sequence[str] = MODES,
    faults: Sequence[str] = FAULTS,
    cluster: bool = False,
) -> str:
    """The command that runs `run` of `seed` again, drawing the same plan."""
    command = f"PYTHONPATH=. .venv/bin/python bench/chaos.py --seed {seed} --run {run}"
    if cluster:
        command += " --cluster"
    if list(modes) != list(MODES):
        command += f" --modes {','.join(modes)}"
    if list(faults) != list(ALL_FAULTS if cluster else FAULTS):
        command += f" --faults {','.join(faults)}"
    return command


def line(result: RunResult, replay: str) -> str:
    plan, verdict = result.plan, result.verdict
    text = (
        f"seed={plan.seed} run={plan.run} mode={plan.mode} faults={plan.label} "
        f"rows={verdict.changes} lost={verdict.lost} duplicates={verdict.duplicates} "
        f"max_takeover_s={result.max_takeover_s:.2f} took_s={result.seconds:.0f} "
        f"left_to_fencing={result.left_to_fencing} verdict={result.status}"
    )
    if result.status == "FAIL":
        text += f" | {'; '.join(verdict.problems)} | logs {result.logs} | replay: {replay}"
    return text


def summary(results: list[RunResult]) -> str:
    statuses = Counter(r.status for r in results)
    faults = Counter(o.kind for r in results for o in r.outcomes)
    takeovers = sorted(o.takeover_s for r in results for o in r.outcomes if o.takeover_s)
    worst = f"{takeovers[-1]:.2f}" if takeovers else "-"
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(faults.items()))
    return (
        f"summary: {len(results)} runs, {statuses['ok']} ok, {statuses['slow']} slow, "
        f"{statuses['FAIL']} failed; {sum(r.verdict.changes for r in results)} changes, "
        f"{sum(r.verdict.lost for r in results)} lost, "
        f"{sum(r.verdict.duplicates for r in results)} duplicates; "
        f"{sum(faults.values())} faults ({kinds}); "
        f"max takeover {worst} s; "
        f"{sum(r.left_to_fencing for r in results)} transactions left to fencing"
    )


@contextmanager
def _services(cluster: bool) -> Iterator[chaos_services.Services]:
    if not cluster:
        yield chaos_services.shared()
        return
    with chaos_services.private() as services:
        yield services


def main(argv: list[str]) -> int:
    args = parse(argv)
    runs = [args.run] if args.run is not None else list(range(args.runs))
    left_out = LEFT_OUT if args.cluster else {**SHARED_LEFT_OUT, **LEFT_OUT}
    if left_out:
        print("left out: " + "; ".join(f"{k} ({why})" for k, why in left_out.items()), flush=True)
    results: list[RunResult] = []
    deadline = None if args.minutes is None else time.monotonic() + args.minutes * 60
    try:
        with _services(args.cluster) as services:
            for run in runs:
                if deadline is not None and time.monotonic() > deadline:
                    print(f"time is up after {len(results)} runs", flush=True)
                    break
                result = run_one(draw(args.seed, run, args.modes, args.faults), services)
                results.append(result)
                replay = replay_command(args.seed, run, args.modes, args.faults, args.cluster)
                print(line(result, replay), flush=True)
    except KeyboardInterrupt:  # SIGINT ends the campaign early: the run under way is cleaned
        print(f"interrupted after {len(results)} runs", flush=True)
    print(summary(results), flush=True)
    return 1 if any(r.status == "FAIL" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
