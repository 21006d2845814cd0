"""CPU and memory figures from /proc: a process's CPU seconds (per thread kind too), its
peak RSS, its children, the machine's busy ticks and the service processes."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness.paths import SERVICES_DIR

CLK_TCK = os.sysconf("SC_CLK_TCK")


def vm_kb(field_name: str, pid: int | str = "self") -> int | None:
    """A memory figure (kB) of a process from /proc: VmHWM is the peak RSS of its current
    address space, so unlike ru_maxrss it does not include the parent's RSS at fork/exec."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_kb(*samples: int | None) -> int | None:
    """The largest of the peak-RSS figures that are known."""
    known = [kb for kb in samples if kb is not None]
    return max(known) if known else None


def stat_fields(pid: int | str) -> list[str] | None:
    """/proc/<pid>/stat after the command name: field N of proc(5) is item N - 3 (None if
    the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", errors="replace") as stat:  # comm: any bytes
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_ticks(fields: list[str]) -> int:
    """utime + stime (fields 14 and 15 of proc(5)) of parsed stat fields."""
    return int(fields[11]) + int(fields[12])


def cpu_seconds(pid: int | str) -> float | None:
    """utime + stime of a process, from /proc/<pid>/stat (None if it is gone)."""
    fields = stat_fields(pid)
    return None if fields is None else cpu_ticks(fields) / CLK_TCK


def child_pids(pid: int | str) -> list[int]:
    """The live children of a process (/proc/<pid>/task/*/children)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue  # the thread or the process ended meanwhile
    return out


def tree_cpu_seconds(pid: int | str) -> tuple[float, float]:
    """(the process's CPU s, its live children's CPU s): replicad run with producer
    processes spends part of its CPU in them."""
    own = cpu_seconds(pid) or 0.0
    return own, sum(cpu_seconds(c) or 0.0 for c in child_pids(pid))


def machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the machine, all cores, from /proc/stat. Busy is user, nice,
    system, irq, softirq and steal (guest time is counted in user already); total adds idle
    and iowait."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = values
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of a process's threads grouped by kind: the Python threads (named after
    the interpreter) and librdkafka's (named rdk:*), from /proc/<pid>/task/*/stat."""
    groups: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        seconds = cpu_seconds(f"{pid}/task/{task.name}")
        if seconds is not None:
            kind = "librdkafka threads" if comm.startswith("rdk:") else "Python threads"
            groups[kind] = groups.get(kind, 0.0) + seconds
    return groups


def thread_cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 2) for k, v in after.items()}


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the machine, all cores, from /proc/stat."""
    busy, total = machine_ticks()
    return busy / CLK_TCK, total / CLK_TCK


def service_pids() -> dict[str, int]:
    """The pids of scripts/services.sh's servers (best effort: a stale pid file is skipped)."""
    wanted = {
        "kafka": (SERVICES_DIR / "kafka" / "kafka.pid", "java"),
        "mariadbd": (SERVICES_DIR / "mariadb" / "mariadb.pid", "mariadbd"),
    }
    pids: dict[str, int] = {}
    for name, (pid_file, comm) in wanted.items():
        try:
            pid = int(pid_file.read_text().split()[0])
            if comm in Path(f"/proc/{pid}/comm").read_text():
                pids[name] = pid
        except (OSError, ValueError, IndexError):
            continue
    return pids


@dataclass(slots=True)
class CpuWatch:
    """CPU seconds of named processes and of the whole machine between start and stop."""

    pids: dict[str, int]
    started: dict[str, float] = field(default_factory=dict)
    wall_started: float = 0.0
    machine_started: tuple[float, float] = (0.0, 0.0)

    def start(self) -> CpuWatch:
        self.started = {n: s for n, p in self.pids.items() if (s := cpu_seconds(p)) is not None}
        self.started["this script"] = time.process_time()
        self.machine_started = machine_cpu()
        self.wall_started = time.perf_counter()
        return self

    def stop(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.wall_started
        busy, total = machine_cpu()
        out: dict[str, Any] = {"wall_s": round(wall, 3)}
        for name, pid in self.pids.items():
            now = cpu_seconds(pid)
            if now is not None and name in self.started:
                out[name] = round(now - self.started[name], 2)
        out["this script"] = round(time.process_time() - self.started["this script"], 2)
        out["machine busy"] = round(busy - self.machine_started[0], 2)
        out["machine total"] = round(total - self.machine_started[1], 2)
        return out
