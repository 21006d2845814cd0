"""`replicad` commands a benchmark runs beside its load (`run`, `invalidate`, `spark
materialize`): their common config and their processes, each logging to a file."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness.children import python_env, stop_process
from bench.harness.mariadb import MARIADB_PORT, paced_writer
from bench.harness.paths import ROOT


def config_head(pipeline: str, server_id: int, bootstrap: str, work: Path, database: str) -> str:
    """The config (YAML flow style) of a pipeline named `pipeline` that streams `database`
    from `latest` into the Kafka at `bootstrap` under the prefix `pipeline`, its position in
    `work`; the command's own sections follow it."""
    return (
        f"pipeline: {pipeline}\n"
        f"source: {{host: 127.0.0.1, port: {MARIADB_PORT}, user: repl, password_env: BENCH_PW, "
        f"server_id: {server_id}, start: latest}}\n"
        f"sinks: {{kafka: {{bootstrap_servers: '{bootstrap}', prefix: {pipeline}}}}}\n"
        f"coordination: {{local: {{path: {work / 'position.json'}}}}}\n"
        f"filters: {{include: ['{database}\\..*']}}\n"
    )


class Daemons:
    """`python -m replicad.cli ARGS` processes by name, each appending to `<work>/<name>.log`,
    with the repl user's password in BENCH_PW."""

    def __init__(self, work: Path, env: dict[str, str] | None = None) -> None:
        self.work = work
        self.env = {**python_env(), "BENCH_PW": "repl", **(env or {})}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, args: list[str]) -> None:
        with (self.work / f"{name}.log").open("ab") as log:
            command = [sys.executable, "-m", "replicad.cli", *args]
            self.procs[name] = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=log, stderr=log
            )

    def stop(self, name: str, timeout: float) -> None:
        stop_process(self.procs.pop(name), timeout)

    def stop_all(self, timeout: float) -> None:
        for proc in self.procs.values():
            stop_process(proc, timeout)


def start_load(
    database: str,
    rate: int,
    stop: threading.Event,
    committed: list[int],
    prober: Callable[..., None],
    prober_args: tuple[Any, ...],
) -> list[threading.Thread]:
    """The paced writer at `rate` rows/s and a prober, each in a daemon thread, until `stop`."""
    threads = [
        threading.Thread(target=paced_writer, args=(database, rate, stop, committed), daemon=True),
        threading.Thread(target=prober, args=prober_args, daemon=True),
    ]
    for thread in threads:
        thread.start()
    return threads
