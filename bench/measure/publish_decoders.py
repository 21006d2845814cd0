"""publish.py's decoders on the binlog: `mariadb-binlog`, `replicad dump` (compiled and pure)
and decode.py's children, each timed in its own process."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from bench.harness import children, mariadb, procstat
from bench.harness.paths import BENCH_DIR
from bench.workloads import decode_rows

PEER_SERVER_ID = 91244  # publish.py's replicad uses 91243


def measure_tool(
    name: str, cmd: list[str], rows: int, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """A program writing its output to /dev/null; rows/s from its wall time."""
    m = children.measure_process(cmd, env)
    m.pop("stdout")
    m.update(name=name, rows=rows, seconds=m["wall_s"], rows_counted=False)
    if m["exit_code"] != 0:
        m["error"] = f"{cmd[0]} exited {m['exit_code']}"
    return m


def measure_child(name: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One of decode.py's decoder children, run as `bench/publish.py --child` (its run_child)."""
    cmd = [sys.executable, str(BENCH_DIR / "publish.py"), "--child", kind, "--spec"]
    m = children.measure_process([*cmd, json.dumps(spec)], capture=True)
    result = children.child_result(m.pop("exit_code"), m.pop("stdout"))
    counts = result.get("counts") or {}
    m.update(result, peak_rss_kb=procstat.peak_kb(result.get("peak_rss_kb"), m["peak_rss_kb"]))
    m.update(name=name, rows=sum(counts.values()), rows_counted=True)
    m["seconds"] = result.get("seconds", m["wall_s"])  # the decode loop, not start-up
    return m


def dump_command(files: list[str]) -> list[str]:
    exe = Path(sys.executable).with_name("replicad")  # the venv's entry point
    return [str(exe) if exe.exists() else "replicad", "dump", *files]


def measure_decoders(
    server: mariadb.Server, binlog: dict[str, Any], plan: decode_rows.Plan
) -> list[dict[str, Any]]:
    files, rows = binlog["files"], plan.total
    mariadb_binlog = shutil.which("mariadb-binlog") or "mariadb-binlog"
    dump = dump_command(files)
    env = children.python_env()
    out = [
        measure_tool(
            "mariadb-binlog -v --base64-output=decode-rows",
            [mariadb_binlog, "--no-defaults", "-v", "--base64-output=decode-rows", *files],
            rows,
        ),
        measure_tool("replicad dump", dump, rows, {**env, "REPLICAD_REQUIRE_SPEEDUPS": "1"}),
        measure_tool(
            "replicad dump, REPLICAD_PURE_PYTHON=1",
            dump,
            rows,
            {**env, "REPLICAD_PURE_PYTHON": "1"},
        ),
        measure_child("replicad decode only (iter_row_changes)", "decode", {"files": files}),
    ]
    peer_server = dataclasses.replace(server, server_id=PEER_SERVER_ID)
    previous = mariadb.set_net_timeouts(server, 600)  # as decode.py: the peer is slow
    try:
        peer = measure_child(
            "python-mysql-replication (from the server)",
            "peer",
            {
                "server": dataclasses.asdict(peer_server),
                "gtid": binlog["gtid_before"],
                "expected": rows,
                "last_file": binlog["names"][-1],
            },
        )
    finally:
        mariadb.restore_net_timeouts(server, previous)
    out.append(peer)
    return out
