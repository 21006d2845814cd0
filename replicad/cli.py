"""`replicad` command line."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

from replicad.binlog.changes import iter_row_changes
from replicad.binlog.events import Event
from replicad.binlog.files import iter_file_events
from replicad.binlog.gtid import GtidSet
from replicad.binlog.rows import RowsEvent, TableMapEvent
from replicad.errors import ReplicadError
from replicad.sinks.envelope import change_to_dict, dumps

EXIT_OK = 0
EXIT_DATA_ERROR = 65  # EX_DATAERR: the input could not be decoded
EXIT_USAGE = 64  # EX_USAGE


def _position(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a byte offset: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a byte offset cannot be negative: {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="replicad", description="MySQL/MariaDB replica that publishes row changes."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    dump = commands.add_parser(
        "dump",
        help="decode binlog files and print JSON lines",
        description=(
            "Decode binlog files and print one JSON object per row change (the envelope the "
            "Kafka sink publishes), or per event with --events."
        ),
    )
    dump.add_argument("files", nargs="+", metavar="FILE", help="binlog files, in order")
    dump.add_argument(
        "--start-position",
        type=_position,
        help="byte offset of the first event to decode (an event boundary; first file only)",
    )
    dump.add_argument(
        "--stop-position",
        type=_position,
        help="stop before the event at or after this byte offset (last file only)",
    )
    dump.add_argument("--events", action="store_true", help="print every event, not row changes")
    dump.add_argument(
        "--no-verify-checksum",
        dest="verify_checksum",
        action="store_false",
        help="decode even when an event's CRC32 does not match",
    )
    dump.set_defaults(func=cmd_dump)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:
        return EXIT_OK


def cmd_dump(args: argparse.Namespace) -> int:
    out: BinaryIO = sys.stdout.buffer
    last = len(args.files) - 1
    for index, path in enumerate(args.files):
        start = args.start_position if index == 0 else None
        stop = args.stop_position if index == last else None
        events = iter_file_events(
            path, start=start, stop=stop, verify_checksum=args.verify_checksum
        )
        try:
            if args.events:
                for event in events:
                    out.write(dumps(event_to_dict(event)) + b"\n")
            else:
                for change in iter_row_changes(events, file=os.path.basename(path)):
                    out.write(dumps(change_to_dict(change)) + b"\n")
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                raise
            out.flush()
            print(f"replicad dump: {path}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_DATA_ERROR
        except ReplicadError as exc:
            out.flush()
            hint = ""
            if start and exc.context.get("offset") == start:
                hint = " (is --start-position the offset of an event?)"
            print(f"replicad dump: {path}: {exc}{hint}", file=sys.stderr)
            return EXIT_DATA_ERROR
    out.flush()
    return EXIT_OK


_SKIPPED_FIELDS = {"header", "body", "table_map", "_decoders", "payload", "columns"}


def event_to_dict(event: Event) -> dict[str, Any]:
    header = event.header
    out: dict[str, Any] = {
        "type": header.type_name,
        "pos": header.pos,
        "next_pos": header.next_pos,
        "timestamp": header.timestamp,
        "server_id": header.server_id,
        "log_pos": header.log_pos,
        "header_flags": header.flags,
    }
    for f in dataclasses.fields(event):
        if f.name in _SKIPPED_FIELDS:
            continue
        value = getattr(event, f.name)
        if f.name in ("present_before", "present_after"):
            value = [i for i in range(value.bit_length()) if value >> i & 1]
        elif isinstance(value, GtidSet):
            value = str(value)
        elif isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            value = [str(v) for v in value]
        out[f.name] = value
    gtid = getattr(event, "gtid", None)
    if isinstance(gtid, str):
        out["gtid"] = gtid
    if isinstance(event, TableMapEvent):
        out["columns"] = [_column_dict(c) for c in event.columns]
        out["primary_key"] = event.primary_key_names
    if isinstance(event, RowsEvent):
        out["op"] = event.op
        out["rows"] = list(_rows(event))
    return out


def _column_dict(column: Any) -> dict[str, Any]:
    data = {
        "name": column.name,
        "type": column.type_name,
        "meta": column.meta,
        "nullable": column.nullable,
        "unsigned": column.unsigned,
    }
    for key in ("collation", "enum_values", "set_values", "geometry_type", "vector_dimensions"):
        value = getattr(column, key)
        if value is not None:
            data[key] = value
    if not column.visible:
        data["visible"] = False
    return data


def _rows(event: RowsEvent) -> Iterator[dict[str, Any]]:
    for before, after in event.rows():
        yield {"before": before, "after": after}


if __name__ == "__main__":
    sys.exit(main())
