"""`replicad-binlog`: archived binlog files and relay directories as the same typed change
DataFrame `replicad-kafka` gives (docs/spark.md), for backfills and audits from files.

    spark.read.format("replicad-binlog").option("table", "db.t").load(path)

`path`: a binlog file, a directory of binlog files (every file whose name ends in a number:
`mariadb-bin.000042`), or a relay directory (replicad's own relay log). One partition per
binlog file; a relay directory is one partition (its segments are read in order). The row
struct comes from the files' TABLE_MAPs (names and types need `binlog_row_metadata=FULL`),
each layout a schema version exactly as the schema topic names it, so both readers give the
same rows, column by column. Each file is decoded on its own: a TRUNCATE in it is an `op: "t"`
row; the Kafka columns (`topic`, `partition`, `offset`) are null.

Options: `table` (required, `db.table`), `skipCorrupt` (default false): a file that fails to
decode fails the read with its name and offset; with `true` the rest of that file is skipped
and logged (`archive_file_skipped`, with file and offset), the rows decoded before the damage
kept.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from replicad.binlog.changes import RowChange, TableChange, iter_changes
from replicad.binlog.column_types import TableDescription, describe
from replicad.binlog.files import iter_file_events
from replicad.binlog.rows import TableMapEvent
from replicad.consumers.typed import TypedSchema
from replicad.dump_view import DumpHistory
from replicad.errors import ReplicadError
from replicad.relay.decode import input_kind, iter_relay, relay_changes
from replicad.sinks.envelope import EnvelopeLines
from replicad.spark.types import (
    arrow_batches,
    change_row,
    change_schema,
    row_converter,
    row_struct,
)

log = structlog.get_logger("replicad.spark")
_NUMBERED = re.compile(r".*\.\d+$")


class ArchiveError(ReplicadError):
    """An archive that cannot be read as asked: no such path, no file, no TABLE_MAP of the
    table, or a file that fails to decode (named with its offset)."""


@dataclass(frozen=True)
class ArchiveFile(InputPartition):
    path: str
    kind: str  # "binlog" | "relay-directory" | "relay-segment"


def archive_files(path: str) -> list[ArchiveFile]:
    """The inputs under `path`, in order: a file; a directory's numbered binlog files; or a
    relay directory (one input)."""
    root = Path(path)
    if not root.exists():
        raise ArchiveError("no such archive path", path=path)
    if not root.is_dir():
        return [ArchiveFile(str(root), input_kind(root))]
    numbered = sorted(p for p in root.iterdir() if p.is_file() and _NUMBERED.match(p.name))
    if numbered:
        return [ArchiveFile(str(p), input_kind(p)) for p in numbered]
    return [ArchiveFile(str(root), "relay-directory")]


def _changes(part: ArchiveFile) -> Iterator[RowChange | TableChange]:
    history = DumpHistory()
    if part.kind == "binlog":
        events = iter_file_events(part.path)
        return iter_changes(events, file=os.path.basename(part.path), table_changes=history)
    return relay_changes(iter_relay(Path(part.path)), history)


def _descriptions(part: ArchiveFile, db: str, table: str) -> Iterator[TableDescription]:
    """The layouts of the table in one input: from its TABLE_MAPs (a binlog file: no row is
    decoded), or from its row changes (a relay)."""
    if part.kind != "binlog":
        for change in _changes(part):
            if isinstance(change, RowChange) and (change.db, change.table) == (db, table):
                if change.schema is not None:
                    yield change.schema
        return
    for event in iter_file_events(part.path):
        if isinstance(event, TableMapEvent) and (event.schema, event.table) == (db, table):
            if any(c.name is None for c in event.columns):
                raise ArchiveError(
                    "the TABLE_MAP has no column names (binlog_row_metadata=FULL is needed "
                    "to read archives)",
                    file=part.path,
                    pos=event.header.pos,
                    table=f"{db}.{table}",
                )
            yield describe(event)


def table_versions(
    files: list[ArchiveFile], db: str, table: str, skip_corrupt: bool = False
) -> list[TypedSchema]:
    """The table's layouts in the files, in the order they first appear (with
    `skip_corrupt`, those before the damage of a damaged file, as the read keeps its rows)."""
    records: dict[str, dict[str, Any]] = {}
    for part in files:
        try:
            for description in _descriptions(part, db, table):
                records.setdefault(description.version, description.to_json())
        except ArchiveError:
            raise
        except ReplicadError as exc:
            if not skip_corrupt:
                raise ArchiveError(
                    f"the archive file cannot be read: {exc}", file=part.path
                ) from None
    return [TypedSchema.from_record(r) for r in records.values()]


class ReplicadBinlogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "replicad-binlog"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        given = {k.lower(): v for k, v in dict(options).items()}  # Spark's options ignore case
        table = given.get("table") or ""
        path = given.get("path")
        if "." not in table or not path:
            raise ArchiveError("replicad-binlog needs a path (load(path)) and the option table")
        self.db, _, self.table = table.partition(".")
        self.skip_corrupt = given.get("skipcorrupt", "false").lower() == "true"
        self.files = archive_files(path)
        self.versions = table_versions(self.files, self.db, self.table, self.skip_corrupt)
        if not self.versions:
            raise ArchiveError("no TABLE_MAP of the table in the archive", table=table, path=path)

    def schema(self) -> StructType:
        return change_schema(row_struct(self.versions))

    def reader(self, schema: StructType) -> DataSourceReader:
        return _ArchiveReader(self, schema)


class _ArchiveReader(DataSourceReader):
    def __init__(self, source: ReplicadBinlogSource, schema: StructType) -> None:
        after = schema["after"].dataType
        assert isinstance(after, StructType)
        self.schema = schema
        self.row = after
        self.db = source.db
        self.table = source.table
        self.files = source.files
        self.skip_corrupt = source.skip_corrupt
        self.keys = {v.version: v.primary_key for v in source.versions}

    def partitions(self) -> list[ArchiveFile]:
        return self.files

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ArchiveFile)
        return arrow_batches(self._rows(partition), self.schema)

    def _rows(self, partition: ArchiveFile) -> Iterator[tuple]:
        convert = row_converter(self.row)
        lines = EnvelopeLines("replicad", replay=True)
        changes = _changes(partition)
        while True:
            try:
                change = next(changes)
            except StopIteration:
                return
            except ReplicadError as exc:
                if not self.skip_corrupt:
                    raise ArchiveError(
                        f"the archive file cannot be read: {exc}", file=partition.path
                    ) from None
                log.error("archive_file_skipped", file=partition.path, error=str(exc))
                return
            if (change.db, change.table) != (self.db, self.table):
                continue
            if isinstance(change, TableChange):
                if change.kind != "truncate":
                    continue
                envelope = orjson.loads(lines.table(change))
                yield change_row(envelope, None, convert, None, None, None)
                continue
            # A primary-key change is two messages (a delete and a create), as on Kafka.
            for line in lines.row(change).splitlines():
                envelope = orjson.loads(line)
                yield change_row(envelope, self._key(envelope), convert, None, None, None)

    def _key(self, envelope: dict[str, Any]) -> str | None:
        key = self.keys.get(envelope["source"].get("schema_version"), ())
        image = envelope.get("after") if envelope["op"] != "d" else envelope.get("before")
        if not key or image is None:
            return None
        return orjson.dumps({k: image.get(k) for k in key}).decode()
