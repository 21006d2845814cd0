"""A small disk for tests of a full disk: a tmpfs mounted for the test (root only), and a
filler that takes its last byte. Shared by the full-disk tests and the fault campaign
(bench/chaos.py)."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class SmallDiskError(RuntimeError):
    """The tmpfs could not be mounted (not root, no tmpfs)."""


@contextmanager
def mounted_tmpfs(mount: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of `size` on `mount` (made if missing), unmounted afterwards whatever
    happened (lazily: a process killed on it may still hold a file open)."""
    mount.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SmallDiskError(f"cannot mount a tmpfs (needs root): {result.stderr}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Fill `disk` to the last byte; the filler is the file to delete to free it."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return filler
