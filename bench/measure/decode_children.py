"""decode.py's measured children: replicad's decoder (rows, or events only) and
python-mysql-replication, each run in its own process and printing a JSON result."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

from bench.harness import children, procstat
from bench.harness.mariadb import Server, binlog_index, server_of
from bench.harness.paths import ROOT
from bench.workloads.decode_rows import DATABASE, OPS, TABLE

PEER_HEARTBEAT_SECONDS = 2  # the peer leaves the stream at a heartbeat (nothing left)


def child_replicad(
    paths: list[str], stop: int | None, table: tuple[str, str] = (DATABASE, TABLE)
) -> dict[str, Any]:
    """Full decode through the public API: every row image becomes before/after dicts.
    Rows of other tables than `table` (database, name): concurrent writers on a shared
    server, counted apart."""
    from replicad.binlog.changes import iter_row_changes
    from replicad.binlog.files import iter_file_events

    counts = dict.fromkeys(OPS, 0)
    other = 0
    base = procstat.vm_kb("VmHWM")
    started = time.perf_counter()
    for path in paths:
        events = iter_file_events(path, stop=stop)
        for change in iter_row_changes(events, file=os.path.basename(path)):
            if (change.db, change.table) == table:
                counts[change.op] += 1
            else:
                other += 1
    seconds = time.perf_counter() - started
    return {"counts": counts, "other_rows": other, "seconds": seconds, "base_rss_kb": base}


def child_replicad_events(paths: list[str], stop: int | None) -> dict[str, Any]:
    """Events only: framing, CRC32, headers, TABLE_MAPs and ROWS post-headers are parsed,
    but `RowsEvent.rows()` is never called, so no row image is decoded."""
    from replicad.binlog.files import iter_file_events
    from replicad.binlog.rows import RowsEvent

    events = rows_events = 0
    base = procstat.vm_kb("VmHWM")
    started = time.perf_counter()
    for path in paths:
        for event in iter_file_events(path, stop=stop):
            events += 1
            if isinstance(event, RowsEvent):
                rows_events += 1
    seconds = time.perf_counter() - started
    return {"events": events, "rows_events": rows_events, "seconds": seconds, "base_rss_kb": base}


class _ReconnectCounter(logging.Handler):
    """python-mysql-replication reconnects silently (from the start GTID again) after a
    dropped connection; count those so a reset is reported instead of double counting."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reconnects = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "Re-request the connection" in record.getMessage():
            self.reconnects += 1


def child_peer(
    server: Server,
    gtid_start: str,
    expected: int,
    last_file: str,
    table: tuple[str, str] = (DATABASE, TABLE),
) -> dict[str, Any]:
    """Stream the range from the server and decode every row (`event.rows` decodes).

    blocking=True: with blocking=False, python-mysql-replication 1.x announces its MariaDB
    COM_BINLOG_DUMP as 14 bytes but sends 15; when the non-blocking dump ends the server
    closes the socket with that byte unread, the kernel answers with a RST, and the client
    loses the tail of the stream and silently restarts from the start GTID. Blocking, the
    server never closes: the stream is left once the expected rows are in, at the ROTATE past
    the last benchmark file, or at a heartbeat (nothing left to send)."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import HeartbeatLogEvent, RotateEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    reconnects = _ReconnectCounter()
    logging.getLogger("pymysqlreplication").addHandler(reconnects)
    op_of = {WriteRowsEvent: "c", UpdateRowsEvent: "u", DeleteRowsEvent: "d"}
    counts = dict.fromkeys(OPS, 0)
    total = 0
    last_index = binlog_index(last_file)
    ended = "stream ended"
    base = procstat.vm_kb("VmHWM")
    started = time.perf_counter()
    stream = BinLogStreamReader(
        connection_settings={
            "host": server.host,
            "port": server.port,
            "user": server.repl_user,
            "passwd": server.repl_password,
        },
        server_id=server.server_id,
        is_mariadb=True,
        auto_position=gtid_start,  # MariaDB: sent as @slave_connect_state
        blocking=True,
        resume_stream=True,
        slave_heartbeat=PEER_HEARTBEAT_SECONDS,
        only_events=[
            WriteRowsEvent,
            UpdateRowsEvent,
            DeleteRowsEvent,
            RotateEvent,
            HeartbeatLogEvent,
        ],
        only_schemas=[table[0]],
        only_tables=[table[1]],
    )
    try:
        for event in stream:
            kind = type(event)
            if kind is RotateEvent:
                if binlog_index(event.next_binlog) > last_index:
                    ended = f"passed {last_file}"
                    break
                continue
            if kind is HeartbeatLogEvent:
                if total:
                    ended = "idle (heartbeat)"
                    break
                continue
            n = len(event.rows)  # `rows` decodes every row image into Python values
            counts[op_of[kind]] += n
            total += n
            if total >= expected:
                ended = "expected count reached"
                break
    finally:
        stream.close()
    seconds = time.perf_counter() - started
    return {
        "counts": counts,
        "seconds": seconds,
        "base_rss_kb": base,
        "ended": ended,
        "reconnects": reconnects.reconnects,
    }


def run_child(args: argparse.Namespace) -> int:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))

    def work() -> dict[str, Any]:
        if args.child == "replicad":
            return child_replicad(args.files, args.stop)
        if args.child == "replicad-events":
            return child_replicad_events(args.files, args.stop)
        return child_peer(server_of(args), args.gtid_start, args.expected, args.last_file)

    print(json.dumps(children.child_outcome(work), default=str))
    return 0
