"""A consistent cut across Delta lake tables (`replicad spark cut`, docs/spark.md "A consistent
cut across tables").

Each MERGE of the Delta job records in its commit's `userMetadata` (`commit_metadata`) the
batch's lowest and highest change coordinates and `through`: a binlog position the table is
complete up to once the commit is in (every change before it is in the table), or null when
the job could not prove one. A table's version v is *at* position P when
- every change it holds is before P: the highest coordinates of every commit up to v are, and
- every change before P is in it: some version w >= v is complete through P, and no commit in
  (v, w] holds a change before P (so version w's changes before P were all in v already).
A change is before P when its `(file, pos)` is: P is where the next event starts (SHOW MASTER
STATUS, a stored position), so a cut at a transaction boundary holds whole transactions.

Pure: the commits are read from the table's `_delta_log` JSON files, no Spark needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from replicad.errors import ReplicadError
from replicad.spark import storage

# The key under which a commit's userMetadata carries replicad's record.
METADATA_KEY = "replicad"
LATEST = "latest"

Point = tuple[str, int]  # (file, pos): where the next binlog event starts


class CutError(ReplicadError):
    """No version of a table is at the asked position, or a lake cannot be read."""


def commit_metadata(through: Point | None, low: Sequence[Any], high: Sequence[Any]) -> str:
    """The userMetadata a MERGE commit records (coordinates as [file, pos, row])."""
    record = {
        "through": None if through is None else {"file": through[0], "pos": through[1]},
        "low": list(low),
        "high": list(high),
    }
    return orjson.dumps({METADATA_KEY: record}).decode()


@dataclass(frozen=True)
class Commit:
    """One Delta commit as the cut sees it; `low`/`high` None: a commit that changed no rows
    replicad wrote (the table's creation, an ADD COLUMNS, OPTIMIZE)."""

    version: int
    through: Point | None = None
    low: Point | None = None
    high: Point | None = None

    @classmethod
    def of(cls, version: int, user_metadata: str | None) -> Commit:
        try:
            record = orjson.loads(user_metadata or "null")
        except orjson.JSONDecodeError:
            return cls(version)  # another writer's free-form metadata
        mine = record.get(METADATA_KEY) if isinstance(record, dict) else None
        if not isinstance(mine, dict):
            return cls(version)
        through = mine.get("through")
        return cls(
            version,
            None if through is None else (through["file"], int(through["pos"])),
            (mine["low"][0], int(mine["low"][1])),
            (mine["high"][0], int(mine["high"][1])),
        )


def parse_position(text: str) -> Point:
    """`FILE:POS` (SHOW MASTER STATUS's File and Position) as a point."""
    file, sep, pos = text.rpartition(":")
    if not sep or not file or not pos.isdigit():
        raise CutError("a cut position is FILE:POS (e.g. mysql-bin.000003:1234) or latest", at=text)
    return file, int(pos)


def version_at(table: str, commits: Sequence[Commit], at: Point) -> int:
    """The version of `table` at `at` (module docstring); CutError naming the table when none
    is: the job has not proven it complete that far, or a batch spans the position."""
    ordered = sorted(commits, key=lambda c: c.version)
    if not ordered or ordered[0].version != 0:
        raise CutError(
            "the table's log does not start at version 0 (log cleanup): the cut needs every "
            "commit's coordinates",
            table=table,
        )
    last = None
    for index, commit in enumerate(ordered):
        if commit.high is not None and commit.high >= at:
            break
        last = index
    if last is None:  # (version 0 is the creation, without changes: never here)
        raise CutError("no version of the table is before the position", table=table)
    for commit in ordered[last:]:
        if commit.version > ordered[last].version and commit.low is not None and commit.low < at:
            raise CutError(
                "a batch of the table holds changes on both sides of the position: no version "
                "is exactly at it",
                table=table,
                at=_text(at),
                version=commit.version,
            )
        if commit.through is not None and commit.through >= at:
            return ordered[last].version
    newest = max((c.through for c in ordered if c.through is not None), default=None)
    raise CutError(
        "the lake job has not proven the table complete up to the position yet",
        table=table,
        at=_text(at),
        complete_through=None if newest is None else _text(newest),
    )


def cut(lake: Mapping[str, Sequence[Commit]], at: Point) -> dict[str, int]:
    """Every table's version at `at`."""
    if not lake:
        raise CutError("the lake has no Delta table")
    return {table: version_at(table, commits, at) for table, commits in sorted(lake.items())}


def latest(lake: Mapping[str, Sequence[Commit]]) -> tuple[Point, dict[str, int]]:
    """The newest position some commit proved complete at which every table has a version
    (only `through` positions: they are transaction boundaries), with the versions."""
    candidates = sorted(
        {c.through for commits in lake.values() for c in commits if c.through is not None},
        reverse=True,
    )
    for at in candidates:
        try:
            return at, cut(lake, at)
        except CutError:
            continue
    raise CutError("no position is proven complete for every table of the lake yet")


# ---------------------------------------------------------------------- reading a lake


def delta_tables(lake_path: str | Path) -> dict[str, Path]:
    """`db.table` -> directory, for every Delta table at `<lake_path>/<db>/<table>`."""
    root = Path(lake_path)
    return {
        f"{log.parent.parent.name}.{log.parent.name}": log.parent
        for log in sorted(root.glob("*/*/_delta_log"))
        if log.is_dir()
    }


def read_commits(path: Path) -> list[Commit]:
    """Every commit whose JSON file the table's `_delta_log` still holds."""
    commits = []
    for file in sorted((path / "_delta_log").glob("*.json")):
        if not file.stem.isdigit():
            continue
        info: dict[str, Any] = {}
        for line in file.read_bytes().splitlines():
            action = orjson.loads(line) if line.strip() else {}
            if "commitInfo" in action:
                info = action["commitInfo"]
        commits.append(Commit.of(int(file.stem), info.get("userMetadata")))
    return commits


def cut_lake(lake_path: str | Path, at: str) -> dict[str, Any]:
    """What `replicad spark cut --at AT` prints: the position and each table's version."""
    storage.local_only(str(lake_path), "spark.lake_path", "cut")
    tables = delta_tables(lake_path)
    lake = {table: read_commits(path) for table, path in tables.items()}
    if at == LATEST:
        point, versions = latest(lake)
    else:
        point = parse_position(at)
        versions = cut(lake, point)
    return {
        "position": _text(point),
        "tables": {
            table: {"version": version, "path": str(tables[table])}
            for table, version in versions.items()
        },
    }


def _text(point: Iterable[Any]) -> str:
    file, pos = point
    return f"{file}:{pos}"
