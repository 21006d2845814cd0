"""The page cache of the files a phase reads: how much of them is resident, and evicting them."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

_PROT_READ, _MAP_SHARED = mmap.PROT_READ, mmap.MAP_SHARED


try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
except (OSError, AttributeError):  # pragma: no cover - not Linux / glibc
    _libc = None


def resident_bytes(path: Path) -> int | None:
    """How much of the file is in the page cache (mincore on a mapping; no page is read)."""
    size = path.stat().st_size
    if _libc is None:
        return None
    if size == 0:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                return None
            return (pages - bytes(vec).count(0)) * mmap.PAGESIZE
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def cache_state(files: list[Path]) -> str:
    size = sum(p.stat().st_size for p in files)
    resident = [resident_bytes(p) for p in files]
    if None in resident or not size:
        return "unknown"
    share = min(sum(r for r in resident if r is not None) / size, 1.0)
    return f"{100 * share:.0f}% cached"


def evict(files: list[Path], how: str) -> None:
    """Make the next read of `files` cold: write back, then drop their pages (`evict`:
    posix_fadvise DONTNEED on these files only; `drop`: the whole page cache, root)."""
    if how == "warm":
        return
    os.sync()
    if how == "drop":
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def can_drop_caches() -> bool:
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")  # page cache only: cheap, and proves it works
        return True
    except OSError:
        return False
