#!/usr/bin/env python3
"""A randomized fault campaign against HA `replicad run` workers (issue 37, item 4).

Each run draws from `random.Random(f"{seed}:{run}")` a mode (at-least-once, exactly-once,
relay), 2-4 faults at random moments (bench/chaos_plan.py: SIGKILL and SIGSTOP of the leader,
its ZooKeeper link cut both ways or one way, its Kafka or primary link cut, its relay disk
full) and a workload (bench/chaos_workload.py), then judges what consumers read
(bench/chaos_oracle.py). One line per run, a summary, exit 1 when a run failed; each failing
run's line ends with the command that replays it.

Needs root (network namespaces, tmpfs), the shared MariaDB, Kafka and ZooKeeper
(scripts/services.sh), and PYTHONPATH at the checkout.

Usage: .venv/bin/python bench/chaos.py --runs 20 --seed 1
       .venv/bin/python bench/chaos.py --seed 1 --run 7          # replay run 7 of seed 1
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.chaos_plan import FAULTS, LEFT_OUT, MODES, draw
from bench.chaos_run import RunResult, run_one

KAFKA = f"127.0.0.1:{os.environ.get('REPLICAD_KAFKA_PORT', '9092')}"
ZOOKEEPER = f"127.0.0.1:{os.environ.get('REPLICAD_ZK_PORT', '2181')}"


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
    parser.add_argument("--modes", type=lambda t: _names(t, MODES), default=list(MODES))
    parser.add_argument("--faults", type=lambda t: _names(t, FAULTS), default=list(FAULTS))
    return parser.parse_args(argv)


def replay_command(
    seed: int, run: int, modes: Sequence[str] = MODES, faults: Sequence[str] = FAULTS
) -> str:
    """The command that runs `run` of `seed` again, drawing the same plan."""
    command = f"PYTHONPATH=. .venv/bin/python bench/chaos.py --seed {seed} --run {run}"
    if list(modes) != list(MODES):
        command += f" --modes {','.join(modes)}"
    if list(faults) != list(FAULTS):
        command += f" --faults {','.join(faults)}"
    return command


def line(result: RunResult, replay: str) -> str:
    plan, verdict = result.plan, result.verdict
    text = (
        f"seed={plan.seed} run={plan.run} mode={plan.mode} faults={plan.label} "
        f"rows={verdict.changes} lost={verdict.lost} duplicates={verdict.duplicates} "
        f"max_takeover_s={result.max_takeover_s:.2f} took_s={result.seconds:.0f} "
        f"verdict={result.status}"
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
        f"max takeover {worst} s"
    )


def main(argv: list[str]) -> int:
    args = parse(argv)
    runs = [args.run] if args.run is not None else list(range(args.runs))
    print("left out: " + "; ".join(f"{k} ({why})" for k, why in LEFT_OUT.items()), flush=True)
    results: list[RunResult] = []
    try:
        for run in runs:
            result = run_one(draw(args.seed, run, args.modes, args.faults), KAFKA, ZOOKEEPER)
            results.append(result)
            print(line(result, replay_command(args.seed, run, args.modes, args.faults)), flush=True)
    except KeyboardInterrupt:  # SIGINT ends the campaign early: the run under way is cleaned
        print(f"interrupted after {len(results)} runs", flush=True)
    print(summary(results), flush=True)
    return 1 if any(r.status == "FAIL" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
