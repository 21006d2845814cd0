"""The relay's MANIFEST: which segments exist, which one is written, and how far its data is
known to be durable. Replaced atomically (temp, fsync, rename, directory fsync), and written
only after the data it describes was fsynced, so it is never ahead of the data."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from replicad.atomic_file import write_atomically
from replicad.binlog.position import Position
from replicad.errors import RelayCorruptError, RelayError, write_error

MANIFEST = "MANIFEST"
MANIFEST_VERSION = 1


def segment_name(number: int) -> str:
    return f"relay-{number:06d}.log"


def segment_number(name: str) -> int | None:
    if name.startswith("relay-") and name.endswith(".log"):
        digits = name[len("relay-") : -len(".log")]
        if digits.isdigit():
            return int(digits)
    return None


@dataclass(slots=True)
class SegmentInfo:
    number: int
    start: Position | None  # before its first transaction
    sealed: bool = False
    first: Position | None = None  # after its first transaction (sealed segments)
    last: Position | None = None  # after its last transaction (sealed segments)
    max_commit_ts: int = 0
    transactions: int = 0
    size: int = 0

    @property
    def name(self) -> str:
        return segment_name(self.number)

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "start": _pos_json(self.start),
            "sealed": self.sealed,
            "first": _pos_json(self.first),
            "last": _pos_json(self.last),
            "max_commit_ts": self.max_commit_ts,
            "transactions": self.transactions,
            "size": self.size,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SegmentInfo:
        return cls(
            number=int(data["number"]),
            start=_pos(data.get("start")),
            sealed=bool(data.get("sealed", False)),
            first=_pos(data.get("first")),
            last=_pos(data.get("last")),
            max_commit_ts=int(data.get("max_commit_ts", 0)),
            transactions=int(data.get("transactions", 0)),
            size=int(data.get("size", 0)),
        )


@dataclass(slots=True)
class Manifest:
    segments: list[SegmentInfo] = field(default_factory=list)  # oldest first; last = current
    durable_offset: int = 0  # in the current segment: a transaction boundary, fsynced
    durable_position: Position | None = None  # after the last transaction before that offset

    @property
    def current(self) -> SegmentInfo | None:
        return self.segments[-1] if self.segments else None

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "version": MANIFEST_VERSION,
                "segments": [s.to_json() for s in self.segments],
                "durable": {
                    "offset": self.durable_offset,
                    "position": _pos_json(self.durable_position),
                },
            },
            option=orjson.OPT_INDENT_2,
        )


def load_manifest(directory: Path) -> Manifest | None:
    """The manifest, None if there is none (a new relay). A manifest that cannot be read
    is a RelayCorruptError naming the file: the relay is not guessed at."""
    path = directory / MANIFEST
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        reason = f"cannot read the relay manifest: {exc.strerror}"
        raise RelayError(reason, file=str(path)) from None
    try:
        data = orjson.loads(raw)
        if data.get("version") != MANIFEST_VERSION:
            raise ValueError(f"version {data.get('version')!r} is not {MANIFEST_VERSION}")
        durable = data["durable"]
        manifest = Manifest(
            [SegmentInfo.from_json(s) for s in data["segments"]],
            int(durable["offset"]),
            _pos(durable.get("position")),
        )
    except (
        orjson.JSONDecodeError,
        AttributeError,
        KeyError,
        TypeError,
        ValueError,  # InvalidPositionError among them
    ) as exc:
        raise RelayCorruptError(
            f"the relay manifest is unreadable ({exc})", file=str(path)
        ) from None
    numbers = [s.number for s in manifest.segments]
    if numbers != sorted(set(numbers)):
        raise RelayCorruptError("the relay manifest lists segments out of order", file=str(path))
    return manifest


def save_manifest(directory: Path, manifest: Manifest) -> None:
    path = directory / MANIFEST
    try:
        write_atomically(path, manifest.to_bytes())
    except OSError as exc:
        what = "cannot write the relay manifest"
        raise write_error(RelayError, what, exc, file=str(path)) from None


def _pos(value: Any) -> Position | None:
    return None if value is None else Position.from_json(value)


def _pos_json(position: Position | None) -> dict[str, Any] | None:
    return None if position is None else position.to_json()
