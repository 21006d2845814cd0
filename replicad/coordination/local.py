"""Position store in a local file, for a single replicad without ZooKeeper.

The file is replaced atomically (write a temporary file, fsync it, rename it over the old one,
fsync the directory), so after a crash it holds either the old or the new position, never a
torn one. The JSON also carries the schema-history pointer and a format version.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from replicad.atomic_file import write_atomically
from replicad.errors import ConfigError, ReplicadError
from replicad.source.position import Position

FORMAT_VERSION = 1


class PositionStoreError(ReplicadError):
    """The position store cannot be read or written."""


class LocalPositionStore:
    def __init__(self, path: str | os.PathLike[str], pipeline: str) -> None:
        self.path = Path(path)
        self.pipeline = pipeline

    def load(self) -> Position | None:
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
            return Position.from_json(data["position"])
        except (KeyError, ConfigError) as exc:
            raise PositionStoreError(
                f"position file holds no valid position: {exc}", file=str(self.path)
            ) from None

    def save(self, position: Position) -> None:
        record = {"version": FORMAT_VERSION, "pipeline": self.pipeline,
                  "position": position.to_json()}  # fmt: skip
        data = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
        try:
            write_atomically(self.path, data)
        except OSError as exc:
            raise PositionStoreError(
                f"cannot write the position file: {exc.strerror}", file=str(self.path)
            ) from None
