"""`replicad run` as a subprocess for tests: a config file, a JSON-lines output file, the
structured log, the position file; start/stop/wait helpers. No daemon outlives its test (see
the `no_leftover_daemons` fixture in tests/conftest.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[2]
PASSWORD_ENV = "TEST_REPLICAD_PASSWORD"


def worker_server_id(server_id: int) -> int:
    """The replica server_id a test uses, made unique per pytest-xdist worker: two replicas
    registering one server_id with the same primary make it end the older one's dump, so tests
    running side by side must never share one (worker gw<N> adds N * 100000)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return server_id + 100_000 * int(worker.removeprefix("gw") or 0)


def _with_worker_server_id(source_yaml: str) -> str:
    return re.sub(
        r"(\bserver_id: )(\d+)", lambda m: m[1] + str(worker_server_id(int(m[2]))), source_yaml
    )


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class DaemonProcess:
    started: ClassVar[list[subprocess.Popen[bytes]]] = []

    def __init__(
        self,
        tmp: Path,
        *,
        pipeline: str,
        source_yaml: str,
        password: str,
        sinks_yaml: str | None = None,
        extra_yaml: str = "",
        log_level: str = "info",
    ) -> None:
        """`source_yaml`: the lines of the `source:` section, indented by two spaces;
        `sinks_yaml` likewise for `sinks:` (default: the JSON-lines file `out`);
        `extra_yaml`: further top-level sections."""
        self.tmp = tmp
        self.out = tmp / "changes.jsonl"
        self.err = tmp / "replicad.log"
        self.position_file = tmp / "position.json"
        self.config = tmp / "config.yaml"
        self.password = password
        # A `coordination:` of the test's own (ZooKeeper) replaces the local position file:
        # a YAML key given twice is refused.
        own = any(line.startswith("coordination:") for line in extra_yaml.splitlines())
        local_coordination = (
            "" if own else f"coordination:\n  local: {{path: {self.position_file}}}\n"
        )
        self.config.write_text(
            f"pipeline: {pipeline}\n"
            f"source:\n{_with_worker_server_id(source_yaml)}  password_env: {PASSWORD_ENV}\n"
            f"sinks:\n{sinks_yaml or f'  stdout: {{path: {self.out}}}'}\n"
            + local_coordination
            + f"log: {{format: json, level: {log_level}}}\n"
            + extra_yaml
        )
        self.proc: subprocess.Popen[bytes] | None = None
        # Run before the command, e.g. `ip netns exec NAME` (tests/helpers/netns.py).
        self.command_prefix: list[str] = []

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, PASSWORD_ENV: self.password}

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def count(self, event: str) -> int:
        return sum(1 for e in self.log_events() if e.get("event") == event)

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start `replicad run` without waiting for anything (its log goes to `err`)."""
        command = [sys.executable, "-m", "replicad.cli", "run", "-c", str(self.config)]
        with self.err.open("ab") as err:
            self.proc = subprocess.Popen(
                [*self.command_prefix, *command],
                cwd=ROOT,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        DaemonProcess.started.append(self.proc)
        return self.proc

    def start(self) -> None:
        """Start `replicad run` and wait until it is connected to the primary."""
        before = self.count("source_connected")
        proc = self.spawn()
        wait_for(
            lambda: self.count("source_connected") > before or proc.poll() is not None,
            20,
            "replicad to connect",
        )
        assert proc.poll() is None, f"replicad exited {proc.returncode}:\n{self.err.read_text()}"

    def run_to_exit(self, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "replicad.cli", "run", "-c", str(self.config)],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            timeout=timeout,
        )

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)

    def messages(self) -> list[dict[str, Any]]:
        """Every line of the JSON-lines sink: row changes, TRUNCATE (op "t"), DDL events."""
        if not self.out.exists():
            return []
        # The daemon may be writing: a last line without its newline is not complete yet.
        lines = self.out.read_text().split("\n")[:-1]
        return [json.loads(line) for line in lines if line]

    def changes(self) -> list[dict[str, Any]]:
        """The row-change messages (op c, u or d)."""
        return [m for m in self.messages() if m.get("op") in ("c", "u", "d")]

    def log_events(self) -> list[dict[str, Any]]:
        if not self.err.exists():
            return []
        # The daemon may be writing: a last line without its newline is not complete yet.
        lines = self.err.read_text().split("\n")[:-1]
        return [json.loads(x) for x in lines if x.startswith("{")]

    def position(self) -> dict[str, Any] | None:
        if not self.position_file.exists():
            return None
        return json.loads(self.position_file.read_text())["position"]


def kill_leftovers() -> None:
    while DaemonProcess.started:
        proc = DaemonProcess.started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
