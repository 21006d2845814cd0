"""relay.py's meters: latency histograms, CPU (process, kernel threads, stalls), fsync counts,
and one phase's result."""

from __future__ import annotations

import os
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.harness import procstat
from bench.workloads.relay_txns import Digest

MB = 1e6  # throughput in MB/s (10^6 bytes); sizes in the table too


class Histogram:
    """Latencies in ns, bounded memory: buckets of < 1/64 relative width."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0
        self.max = 0

    def add_all(self, samples: array) -> None:
        counts = self.counts
        for ns in samples:
            shift = max(ns.bit_length() - 7, 0)
            key = (shift << 8) | (ns >> shift)
            counts[key] = counts.get(key, 0) + 1
        if samples:
            self.n += len(samples)
            self.max = max(self.max, max(samples))

    def percentile(self, p: float) -> float | None:
        if not self.n:
            return None
        rank = max(1, int(p / 100 * self.n + 0.999999))
        seen = 0
        for key in sorted(self.counts):
            seen += self.counts[key]
            if seen >= rank:
                shift, mantissa = key >> 8, key & 0xFF
                return ((mantissa << shift) + ((1 << shift) >> 1)) / 1000  # µs, bucket middle
        return self.max / 1000

    def as_json(self) -> dict[str, Any] | None:
        if not self.n:
            return None
        return {
            "n": self.n,
            "p50_us": self.percentile(50),
            "p99_us": self.percentile(99),
            "p99_9_us": self.percentile(99.9),
            "max_us": self.max / 1000,
        }


def _kthread_cpu_ticks() -> int:
    """CPU ticks of kernel threads (writeback workers, ...), children of kthreadd (pid 2)."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = procstat.stat_fields(name)
        if fields is None:
            continue
        if name == "2" or fields[1] == "2":  # ppid
            total += procstat.cpu_ticks(fields)
    return total


def _cpu_stall_us() -> int | None:
    """PSI: microseconds in which some runnable task waited for a CPU."""
    try:
        with open("/proc/pressure/cpu") as f:
            some = f.readline().split()
    except OSError:
        return None
    return int(some[-1].split("=")[1])


class CpuMeter:
    """CPU used during a phase: by this process, by kernel threads, and by everything else
    on the machine (another test run makes the phase's figures unreliable)."""

    TICK = procstat.CLK_TCK

    def __init__(self) -> None:
        self.wall = time.monotonic()
        self.self_cpu = sum(os.times()[:2])
        self.machine = procstat.machine_ticks()[0]
        self.kthreads = _kthread_cpu_ticks()
        self.stall = _cpu_stall_us()

    def stop(self) -> dict[str, float]:
        wall = max(time.monotonic() - self.wall, 1e-9)
        stall = _cpu_stall_us()
        own = sum(os.times()[:2]) - self.self_cpu
        machine = (procstat.machine_ticks()[0] - self.machine) / self.TICK
        kthreads = (_kthread_cpu_ticks() - self.kthreads) / self.TICK
        return {
            "self_cores": own / wall,
            "kernel_threads_cores": kthreads / wall,
            "other_cores": max(machine - own - kthreads, 0.0) / wall,
            "cpu_stall_share": (
                (stall - self.stall) / 1e6 / wall
                if stall is not None and self.stall is not None
                else -1.0
            ),
            "wall": wall,
        }


class SyncCounter:
    """Counts fdatasync / fsync calls (the relay's own included) while installed."""

    def __init__(self) -> None:
        self.calls = 0
        self._saved: dict[str, Callable[[int], None]] = {}

    def __enter__(self) -> SyncCounter:
        for name in ("fdatasync", "fsync"):
            original = getattr(os, name)
            self._saved[name] = original

            def counted(fd: int, _original: Callable[[int], None] = original) -> None:
                self.calls += 1
                _original(fd)

            setattr(os, name, counted)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._saved.items():
            setattr(os, name, original)


@dataclass(slots=True)
class Result:
    name: str
    kind: str  # write | read
    seconds: float
    digest: Digest
    file_bytes: int = 0
    latency: Histogram | None = None  # relay: commit(); raw: write(+fdatasync) per txn
    txn_latency: Histogram | None = None  # relay: first append() to commit() returned
    syncs: int | None = None
    cpu: dict[str, float] = field(default_factory=dict)
    cache: str | None = None  # reads: how much of the files was in the page cache
    baseline: str | None = None  # the raw row this one is compared with
    note: str = ""

    @property
    def mb_s(self) -> float:
        return self.digest.event_bytes / MB / self.seconds

    @property
    def txn_s(self) -> float:
        return self.digest.txns / self.seconds

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "seconds": round(self.seconds, 4),
            "event_mb_s": round(self.mb_s, 2),
            "txn_s": round(self.txn_s, 1),
            "file_bytes": self.file_bytes,
            "digest": self.digest.as_json(),
            "latency": self.latency.as_json() if self.latency else None,
            "txn_latency": self.txn_latency.as_json() if self.txn_latency else None,
            "syncs": self.syncs,
            "cpu": {k: round(v, 3) for k, v in self.cpu.items()},
            "cache": self.cache,
            "baseline": self.baseline,
            "note": self.note,
        }
