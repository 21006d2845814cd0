"""Position store in a local file, for a single replicad without ZooKeeper.

The file is replaced atomically (write a temporary file, fsync it, rename it over the old one,
fsync the directory), so after a crash it holds either the old or the new position, never a
torn one. The JSON also carries the schema-history pointer and a format version.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

import structlog

from replicad.atomic_file import write_atomically
from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.errors import InvalidPositionError, ReplicadError, write_error
from replicad.exit_codes import EXIT_CONFIG
from replicad.process_lock import ProcessLock, holder_pid
from replicad.source.schema import SchemaHistory

log = structlog.get_logger("replicad.coordination.local")

FORMAT_VERSION = 1


class PositionStoreError(ReplicadError):
    """The position store cannot be read or written."""

    exit_code = EXIT_CONFIG  # a damaged or unreadable position file stays so on a restart


class LocalPositionStore:
    def __init__(self, path: str | os.PathLike[str], pipeline: str) -> None:
        self.path = Path(path)
        self.pipeline = pipeline

    def load(self) -> Checkpoint | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PositionStoreError(
                f"cannot read the position file: {exc.strerror}", file=str(self.path)
            ) from None
        try:
            data: dict[str, Any] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PositionStoreError(
                f"position file is not valid JSON ({exc.msg} at {exc.pos})", file=str(self.path)
            ) from None
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise PositionStoreError(
                f"position file has an unknown format (expected version {FORMAT_VERSION})",
                file=str(self.path),
            )
        if data.get("pipeline") != self.pipeline:
            raise PositionStoreError(
                f"position file belongs to pipeline {data.get('pipeline')!r}, "
                f"not {self.pipeline!r}",
                file=str(self.path),
            )
        try:
            return Checkpoint.from_json(data["position"])
        except (KeyError, InvalidPositionError) as exc:
            raise PositionStoreError(
                f"position file holds no valid position: {exc}", file=str(self.path)
            ) from None

    def save(self, checkpoint: Checkpoint) -> None:
        record = {
            "version": FORMAT_VERSION,
            "pipeline": self.pipeline,
            "position": checkpoint.to_json(),
        }
        data = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
        try:
            write_atomically(self.path, data)
        except OSError as exc:
            what = "cannot write the position file"
            raise write_error(PositionStoreError, what, exc, file=str(self.path)) from None


def status_path(position_path: str | os.PathLike[str]) -> Path:
    """Beside the position file: position.json -> position.status.json."""
    path = Path(position_path)
    return path.with_name(f"{path.stem}.status.json")


def lock_path(position_path: str | os.PathLike[str]) -> Path:
    path = Path(position_path)
    return path.with_name(f"{path.name}.lock")


class DaemonRunningError(PositionStoreError):
    """Another `replicad run` holds this position file."""


class PositionFileLock:
    """An exclusive lock (flock) beside the position file, held while a daemon runs: two
    daemons on one position file would overwrite each other, and the CLI must not move a
    position under a running daemon. The lock dies with the process (no stale lock)."""

    def __init__(self, position_path: str | os.PathLike[str]) -> None:
        self.path = lock_path(position_path)
        self._lock = ProcessLock(self.path)

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self._lock.try_acquire():
            raise DaemonRunningError(
                "another replicad process uses this position file",
                file=str(self.path),
                pid=holder_pid(self.path),
            )

    def release(self) -> None:
        self._lock.release()


def running_pid(position_path: str | os.PathLike[str]) -> int | None:
    """The pid of the daemon holding the position file's lock; None when none runs."""
    path = lock_path(position_path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return holder_pid(path) or -1
    finally:
        os.close(fd)  # also releases a lock taken just now
    return None


class LocalPipelineStore:
    """The embedded default without ZooKeeper: position, schema history and status in files
    next to each other."""

    def __init__(
        self,
        position_path: str | os.PathLike[str],
        history_path: str | os.PathLike[str],
        pipeline: str,
    ) -> None:
        self.positions = LocalPositionStore(position_path, pipeline)
        self.history_path = Path(history_path)
        self.status_path = status_path(position_path)
        self.pipeline = pipeline
        self._last_error: dict[str, Any] | None = None

    def describe(self) -> str:
        return f"file {self.positions.path}"

    def load_checkpoint(self) -> Checkpoint | None:
        return self.positions.load()

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.positions.save(checkpoint)

    def load_history(self, position: Position) -> SchemaHistory | None:
        return SchemaHistory.load(self.history_path, position)

    def save_history(self, history: SchemaHistory, durable: Position | None) -> None:
        history.save(self.history_path, durable=durable)

    def publish_status(self, status: dict[str, Any]) -> None:
        record = {"pipeline": self.pipeline, "pid": os.getpid(), **status}
        if self._last_error is not None:
            record["last_error"] = self._last_error
        try:  # advisory: replaced atomically, not fsynced
            temp = self.status_path.with_name(f".{self.status_path.name}.tmp")
            temp.write_text(json.dumps(record, sort_keys=True) + "\n")
            os.replace(temp, self.status_path)
        except OSError as exc:
            log.warning("status_write_failed", file=str(self.status_path), error=exc.strerror)

    def record_error(self, error: str, kind: str) -> None:
        self._last_error = {"error": error, "kind": kind, "ts_ms": int(time.time() * 1000)}
        previous = read_status(self.status_path) or {}
        previous.update({"last_error": self._last_error, "state": "failed"})
        try:
            self.status_path.write_text(json.dumps(previous, sort_keys=True) + "\n")
        except OSError as exc:
            log.warning("status_write_failed", file=str(self.status_path), error=exc.strerror)


def read_status(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
