"""The contenders of peers.py: replicad and Debezium in Kafka Connect, each started with its
defaults or tuned, and the process tree whose CPU and RSS are measured."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from bench.harness import children, procstat
from bench.peers.debezium.connect import BINLOG_CONNECTED, DebeziumConnect, DebeziumOptions
from bench.workloads.peer_rows import HOST, PORT

RSS_EVERY_S = 0.25

TUNED_DEBEZIUM = {
    "max.batch.size": "8192",  # default 2048
    "max.queue.size": "32768",  # default 8192
    "poll.interval.ms": "10",  # default 500: the wait for a batch when the queue is empty
}


TUNED_CONNECT_WORKER = {  # the producer Connect gives the task
    "producer.linger.ms": "10",
    "producer.batch.size": "1048576",
    "producer.compression.type": "lz4",
}


TUNED_REPLICAD_PRODUCER = {"linger.ms": 10, "batch.size": 1048576, "compression.type": "lz4"}


TUNED_REPLICAD_CHUNK_ROWS = 50_000  # snapshot.chunk_rows, default 10,000


def how_tuned() -> dict[str, Any]:
    return {
        "debezium": {"connector": TUNED_DEBEZIUM, "worker": TUNED_CONNECT_WORKER},
        "replicad": {
            "sinks.kafka.producer": TUNED_REPLICAD_PRODUCER,
            "sinks.kafka.headers": False,
            "snapshot.chunk_rows": TUNED_REPLICAD_CHUNK_ROWS,
        },
    }


class Contender(Protocol):
    label: str

    def spawn(self) -> float: ...
    def pids(self) -> list[int]: ...
    def alive(self) -> bool: ...
    def streaming(self) -> bool: ...
    def stop(self) -> int | None: ...
    def log_tail(self) -> str: ...


class ReplicadContender:
    """`replicad run`: snapshot.mode initial, envelope.values debezium, at-least-once Kafka
    sink (its defaults, or tuned), position file in the work dir."""

    def __init__(
        self,
        label: str,
        workdir: Path,
        database: str,
        tables: list[str],
        prefix: str,
        tuned: bool,
        bootstrap: str,
    ) -> None:
        self.label, self.workdir = label, workdir
        self.log = workdir / "replicad.log"
        self.log_offset = 0
        kafka: dict[str, Any] = {"bootstrap_servers": bootstrap, "prefix": prefix}
        snapshot: dict[str, Any] = {"mode": "initial"}
        if tuned:
            kafka |= {"producer": TUNED_REPLICAD_PRODUCER, "headers": False}
            snapshot["chunk_rows"] = TUNED_REPLICAD_CHUNK_ROWS
        self.config = {
            "pipeline": prefix,
            "source": {
                "host": HOST,
                "port": PORT,
                "user": "repl",
                "password_env": "PEERS_PW",
                "server_id": random.randrange(8_000_000, 9_000_000),
            },
            "sinks": {"kafka": kafka},
            "coordination": {"local": {"path": str(workdir / "position.json")}},
            "filters": {"include": [f"{database}\\.{t}" for t in tables]},
            "snapshot": snapshot,
            "envelope": {"values": "debezium"},
            "log": {"format": "json", "level": "info"},
        }
        self.proc_: subprocess.Popen[bytes] | None = None

    def spawn(self) -> float:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "replicad.yaml"
        config.write_text(json.dumps(self.config, indent=2) + "\n")
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        env = {**children.python_env(), "PEERS_PW": "repl"}
        with self.log.open("ab") as log:
            spawned = time.time()
            self.proc_ = subprocess.Popen(
                [sys.executable, "-m", "replicad.cli", "run", "-c", str(config)],
                cwd=self.workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return spawned

    def pids(self) -> list[int]:
        if not self.alive():
            return []
        assert self.proc_ is not None
        return [self.proc_.pid, *procstat.child_pids(self.proc_.pid)]

    def alive(self) -> bool:
        return self.proc_ is not None and self.proc_.poll() is None

    def _events(self) -> list[str]:
        with self.log.open("rb") as f:
            f.seek(self.log_offset)
            return f.read().decode(errors="replace").splitlines()

    def streaming(self) -> bool:
        """Connected to the binlog since this spawn (after its snapshot, if any)."""
        return any('"source_connected"' in line for line in self._events())

    def stop(self) -> int | None:
        if self.proc_ is None:
            return None
        children.stop_process(self.proc_, 60)
        return self.proc_.returncode

    def log_tail(self) -> str:
        return "\n".join(self._events()[-30:])


class DebeziumContender:
    """Debezium's MariaDB connector in Connect standalone (bench/peers/debezium)."""

    def __init__(
        self,
        label: str,
        workdir: Path,
        database: str,
        tables: list[str],
        prefix: str,
        tuned: bool,
        bootstrap: str,
    ) -> None:
        self.label, self.workdir = label, workdir
        extra = {"snapshot.locking.mode": "none"}  # no FLUSH TABLES WITH READ LOCK: shared
        options = DebeziumOptions(
            server="mariadb",
            database=database,
            topic_prefix=prefix,
            server_id=random.randrange(6_000_000, 7_000_000),
            tables=tuple(tables),
            kafka=bootstrap,
            schemas_enable=False,
            extra=extra | (TUNED_DEBEZIUM if tuned else {}),
            worker_extra=TUNED_CONNECT_WORKER if tuned else {},
        )
        self.connect = DebeziumConnect(options, workdir)
        self.spawns = 0

    def spawn(self) -> float:
        if self.connect.log.exists():  # a fresh log per start: streaming() reads it
            self.connect.log.rename(self.workdir / f"connect.{self.spawns}.log")
        self.spawns += 1
        self.connect.spawn()  # runs fetch.sh first (a no-op once installed), then the JVM
        return time.time() - (time.monotonic() - self.connect.timings["spawn"])

    def pids(self) -> list[int]:
        proc = self.connect.proc
        return [proc.pid] if proc is not None and proc.poll() is None else []

    def alive(self) -> bool:
        return bool(self.pids())

    def streaming(self) -> bool:
        if self.connect.proc is not None:
            self.connect._check_alive(None)
        return BINLOG_CONNECTED in self.connect.log_text()

    def stop(self) -> int | None:
        return self.connect.stop()

    def log_tail(self) -> str:
        return "\n".join(self.connect.log_text().splitlines()[-30:])


class Tree:
    """CPU and peak RSS of a contender's process tree, sampled."""

    def __init__(self, contender: Contender) -> None:
        self.contender = contender
        self.peak_kb = 0
        self.last_sample = 0.0

    def cpu(self) -> float:
        return sum(procstat.cpu_seconds(p) or 0.0 for p in self.contender.pids())

    def sample(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last_sample >= RSS_EVERY_S:
            self.last_sample = now
            kb = sum(procstat.vm_kb("VmHWM", p) or 0 for p in self.contender.pids())
            self.peak_kb = max(self.peak_kb, kb)


class ContenderDied(RuntimeError):
    pass
