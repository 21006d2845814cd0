"""Operator requests a running pipeline takes without stopping (snapshot requests and
cancellations): queued by `replicad snapshot ...`, picked up by the pipeline's ticker, and
completed once their effect is stored with the position (so a crash before that leaves them
queued for the next leader, never lost).

Two inboxes with one interface: files beside the local position file
(`<position stem>.requests/<id>.json`), or the pipeline's ZooKeeper command queue (commands
with a snapshot op; `position set` keeps its own handling).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from replicad.atomic_file import write_atomically
from replicad.errors import ReplicadError
from replicad.exit_codes import EXIT_CONFIG

SNAPSHOT_OPS = ("snapshot", "snapshot-cancel")


class RequestQueueError(ReplicadError):
    exit_code = EXIT_CONFIG


@dataclass(frozen=True, slots=True)
class OperatorRequest:
    id: str
    op: str
    args: dict[str, Any]


class RequestInbox(Protocol):
    def pending(self) -> list[OperatorRequest]:
        """Requests not completed yet, oldest first (may repeat until completed)."""

    def complete(self, request_id: str, state: str, result: dict[str, Any]) -> None:
        """`state`: applied | rejected."""


def requests_dir(position_path: str | os.PathLike[str]) -> Path:
    path = Path(position_path)
    return path.with_name(f"{path.stem}.requests")


class LocalRequests:
    """The file inbox: one JSON file per request; completing one removes it and records the
    outcome in `done.json` (the last few, for `replicad snapshot status`)."""

    KEEP_DONE = 20

    def __init__(self, position_path: str | os.PathLike[str]) -> None:
        self.dir = requests_dir(position_path)

    def submit(self, op: str, args: dict[str, Any]) -> str:
        request_id = f"req-{time.time_ns()}"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            body = {"op": op, "args": args, "ts_ms": int(time.time() * 1000)}
            write_atomically(self.dir / f"{request_id}.json", json.dumps(body).encode())
        except OSError as exc:
            raise RequestQueueError(
                f"cannot queue the request: {exc.strerror or exc}", directory=str(self.dir)
            ) from None
        return request_id

    def pending(self) -> list[OperatorRequest]:
        try:
            names = sorted(p for p in self.dir.glob("req-*.json"))
        except OSError:
            return []
        out = []
        for path in names:
            try:
                data = json.loads(path.read_text())
                out.append(
                    OperatorRequest(path.stem, str(data["op"]), dict(data.get("args") or {}))
                )
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being written, or not ours: a torn file cannot exist (atomic)
        return out

    def complete(self, request_id: str, state: str, result: dict[str, Any]) -> None:
        done = self.done()
        done.append(
            {
                "id": request_id,
                "state": state,
                "result": result,
                "completed_ms": int(time.time() * 1000),
            }
        )
        try:
            write_atomically(self.dir / "done.json", json.dumps(done[-self.KEEP_DONE :]).encode())
            (self.dir / f"{request_id}.json").unlink(missing_ok=True)
        except OSError:
            pass  # best effort: the request is seen again and completed again

    def done(self) -> list[dict[str, Any]]:
        try:
            data = json.loads((self.dir / "done.json").read_text())
        except (OSError, ValueError):
            return []
        return data if isinstance(data, list) else []
