"""An exclusive per-process lock on a file (flock), for what one process at a time may use:
a position file, a relay directory. The file names the holder's pid for the next one's error
message; the kernel drops the lock with the process, so no lock is ever stale, and the file
is never deleted (unlinking a lock file races with the next process opening it)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class ProcessLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock (True), or find another process holding it (False)."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None


def holder_pid(path: Path) -> int | None:
    """The pid the lock file names (its holder, or the last one)."""
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None
