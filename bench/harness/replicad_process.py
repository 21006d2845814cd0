"""`replicad run` as a benchmark drives it: its config, its process, its log, and py-spy
profiling of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import children, mariadb, procstat


@dataclass(slots=True)
class Replicad:
    workdir: Path
    server: mariadb.Server
    bootstrap: str
    pipeline: str
    tls: str
    signal_database: str  # where its incremental-snapshot signal table is
    proc: subprocess.Popen[bytes] | None = None
    spawned: float = 0.0
    exit_code: int | None = None

    @property
    def config_path(self) -> Path:
        return self.workdir / "replicad.yaml"

    @property
    def log_path(self) -> Path:
        return self.workdir / "replicad.log"

    def write_config(self, start: dict[str, Any]) -> None:
        config = {
            "pipeline": self.pipeline,
            "source": {
                "host": self.server.host,
                "port": self.server.port,
                "user": self.server.repl_user,
                "password_env": "REPLICAD_E2E_PASSWORD",
                "server_id": self.server.server_id,
                "tls": {"mode": self.tls},
                "start": start,
            },
            # At-least-once defaults (tombstones on, headers on, 1 partition per topic).
            "sinks": {"kafka": {"bootstrap_servers": self.bootstrap, "prefix": self.pipeline}},
            "coordination": {"local": {"path": str(self.workdir / "position.json")}},
            "snapshot": {"signal": {"database": self.signal_database, "table": "replicad_signal"}},
            "log": {"format": "json", "level": "info"},
        }
        self.config_path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML

    def start(self) -> int:
        env = {**os.environ, "REPLICAD_E2E_PASSWORD": self.server.repl_password}
        cmd = [sys.executable, "-m", "replicad.cli", "run", "-c", str(self.config_path)]
        with open(self.log_path, "ab") as log:
            self.spawned = time.perf_counter()
            self.proc = subprocess.Popen(
                cmd, cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        return self.proc.pid

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_s(self) -> float | None:
        return procstat.cpu_seconds(self.pid) if self.alive() else None

    def peak_rss_mb(self) -> float | None:
        kb = procstat.vm_kb("VmHWM", self.pid) if self.alive() else None
        return kb / 1024 if kb is not None else None

    def exit_status(self) -> str:
        code = self.proc.poll() if self.proc is not None else None
        return "(running)" if code is None else str(code)

    def stop(self, timeout: float = 60.0) -> int | None:
        if self.proc is None:
            return None
        children.stop_process(self.proc, timeout)
        self.exit_code = self.proc.returncode
        return self.exit_code

    def log_events(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        events = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                events.append({"event": "(not JSON)", "level": "raw", "text": line})
        return events

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class ReplicadDied(RuntimeError):
    pass


@dataclass(slots=True)
class Profiler:
    """py-spy sampling a process (`record --format raw`; idle threads, e.g. the event loop
    waiting in epoll, are not sampled). py-spy pauses the target for every sample (without
    that, --nonblocking, a quarter of the stacks came out truncated), so the profiled run's
    timings are inflated (about 2x here): use it for where the time goes, not how much."""

    exe: str
    output: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, pid: int) -> None:
        cmd = [
            self.exe,
            "record",
            "--pid",
            str(pid),
            "--rate",
            "250",
            "--format",
            "raw",
            "--output",
            str(self.output),
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=open(self.output.with_suffix(".log"), "wb")
        )

    def stop(self) -> dict[str, Any]:
        if self.proc is None:
            return {}
        children.stop_process(self.proc, 60, signal.SIGINT)  # py-spy writes its output on SIGINT
        if not self.output.exists():
            log = self.output.with_suffix(".log")
            return {"error": log.read_text(errors="replace")[-2000:] if log.exists() else "?"}
        return top_frames(self.output)


def top_frames(raw: Path, top: int = 20) -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's raw (collapsed) stacks,
    `frame;frame;... count` with frames `function (file:line)`; lines are merged."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = []
        for frame in stack.split(";"):
            name, _, where = frame.partition(" (")
            path = where.rsplit(":", 1)[0]
            for marker in ("/site-packages/", "/replicad/", "/lib/python3"):
                if marker in path:
                    path = marker.strip("/") + "/" + path.split(marker, 1)[1]
                    break
            frames.append(f"{name} ({path})" if where else name)
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count

    def share(table: dict[str, int]) -> list[tuple[str, float]]:
        ranked = sorted(table.items(), key=lambda kv: -kv[1])[:top]
        return [(name, round(100 * n / total, 1)) for name, n in ranked]

    return {"samples": total, "self_pct": share(own), "inclusive_pct": share(inclusive)}
