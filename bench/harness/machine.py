"""What the machine is doing and what it runs on: load average, filesystem and block device."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

MEMORY_FILESYSTEMS = {"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"}


def mount_of(path: Path) -> dict[str, str]:
    """The mount holding `path` (longest mount point prefix in /proc/self/mountinfo)."""
    real = os.path.realpath(path)
    best: dict[str, str] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            parts = left.split()
            point = parts[4].replace("\\040", " ")
            fstype, source, *rest = right.split()
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best.get("mount", "")):
                best = {
                    "mount": point,
                    "fstype": fstype,
                    "source": source,
                    "options": parts[5],
                    "super_options": rest[0] if rest else "",
                    "dev": parts[2],
                }
    return best


def block_device(dev: str) -> dict[str, Any]:
    """rotational / scheduler / model of the block device behind major:minor `dev`."""
    out: dict[str, Any] = {}
    base = Path("/sys/dev/block") / dev
    if not base.exists():
        return out
    queue = base / "queue"
    if not queue.exists():  # a partition: the queue is the parent's
        queue = base.resolve().parent / "queue"
    for key in ("rotational", "scheduler"):
        try:
            out[key] = (queue / key).read_text().strip()
        except OSError:
            pass
    out["name"] = base.resolve().name
    return out


def machine_info(directory: Path) -> dict[str, Any]:
    mount = mount_of(directory)
    stat = os.statvfs(directory)
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), ""
            )
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "dir": str(directory),
        "filesystem": mount,
        "device": block_device(mount.get("dev", "")),
        "free_gb": round(stat.f_bavail * stat.f_frsize / 1e9, 1),
        "loadavg_start": os.getloadavg(),
        "uid": os.getuid(),
    }


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
