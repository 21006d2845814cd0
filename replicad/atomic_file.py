"""Crash-safe file replacement, shared by the position store, the schema history and the
relay manifest; and the directory fsync that makes a new or renamed entry durable."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Write a temporary file, fsync it, rename it over `path`, fsync the directory: after a
    crash `path` holds the old or the new content, never a torn one. Raises OSError (the
    temporary file is removed); callers turn it into their own typed error."""
    directory = path.parent if str(path.parent) else Path(".")
    temp = directory / f".{path.name}.tmp"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
        fsync_directory(directory)
    except OSError:
        try:
            temp.unlink(missing_ok=True)
        except OSError:
            pass
        raise


def fsync_directory(directory: Path) -> None:
    """Make the entries of `directory` (a file created or renamed in it) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
