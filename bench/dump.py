"""`replicad dump` against `mariadb-binlog -v` on the shapes users have.

A 10-column table in latin1 (MariaDB 10.11's default character set) and the same table in
utf8mb4, rows written as client libraries send them: PyMySQL `executemany` batches (one
multi-row INSERT per batch, one transaction per batch) on the server's default settings, so
MariaDB annotates every ROWS event with the statement (`binlog_annotate_row_events=ON`), then
UPDATEs of whole batches (both row images, `binlog_row_image=FULL`). Each table's workload
goes into binlog files of its own (`FLUSH BINARY LOGS` around it), copied out of the server's
directory; then, alternating, `--repeat` times each:

- `mariadb-binlog --no-defaults -v --base64-output=decode-rows FILES > /dev/null`
- `replicad dump FILES > /dev/null` (compiled, `REPLICAD_REQUIRE_SPEEDUPS=1`)
- with `--pure`: `replicad dump` with `REPLICAD_PURE_PYTHON=1`

Each figure is the process's wall time (best of the runs) and its CPU (user+sys, wait4);
rows/s uses the workload's row count. One more `replicad dump` run is read back: its line
count must equal the rows written (the files may also hold other writers' rows on a shared
server: those are counted apart by table name), and the first line's size is reported (it
held the whole 500-row statement before `source.query` became opt-in).

    .venv/bin/python bench/dump.py                       # 100k rows + 100k updated, both tables
    .venv/bin/python bench/dump.py --rows 20000 --repeat 1 --pure
    .venv/bin/python bench/dump.py --charsets latin1 --json /tmp/dump.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import children, mariadb, tables

DATABASE = "bench_dump"
COLUMNS = "id, customer_id, name, email, city, status, amount, created, note, code"
TABLE_SQL = """CREATE TABLE {table} (
    id INT PRIMARY KEY, customer_id INT NOT NULL, name VARCHAR(64), email VARCHAR(128),
    city VARCHAR(64), status VARCHAR(16), amount DECIMAL(10,2), created DATETIME,
    note TEXT, code CHAR(8)) DEFAULT CHARSET={charset}"""
# Text a latin1 column can hold (the client sends UTF-8; the server converts): mostly ASCII
# with some Western European letters, as names and cities are.
NAMES = ["Jürgen Müller", "Anaïs Dubois", "John Smith", "Zoë García", "Ola Nordmann", "Li Wei"]
CITIES = ["Zürich", "São Paulo", "Köln", "London", "Reykjavík", "Lyon", "Oslo"]
STATUSES = ["new", "paid", "shipped", "returned"]


def row(i: int, rng: random.Random) -> tuple[Any, ...]:
    name = rng.choice(NAMES)
    return (
        i,
        rng.randrange(1, 50_000),
        f"{name} {i}",
        f"user{i}@example.com",
        rng.choice(CITIES),
        rng.choice(STATUSES),
        f"{rng.randrange(0, 10_000_000) / 100:.2f}",
        f"2024-{1 + i % 12:02d}-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}:{i % 59:02d}",
        "Lieferung an die Haustür, bitte klingeln. " * rng.randrange(0, 3) or None,
        f"C{i % 10_000_000:07d}",
    )


def write_workload(cur: Any, conn: Any, table: str, rows: int, batch: int) -> dict[str, int]:
    """Inserts by executemany (PyMySQL sends one multi-row INSERT per call), then every
    batch of rows updated by one UPDATE; a commit after each statement."""
    rng = random.Random(38)
    marks = ", ".join(["%s"] * 10)
    insert = f"INSERT INTO {table} ({COLUMNS}) VALUES ({marks})"
    done = {"c": 0, "u": 0}
    for first in range(1, rows + 1, batch):
        batch_rows = [row(i, rng) for i in range(first, min(first + batch, rows + 1))]
        done["c"] += cur.executemany(insert, batch_rows)
        conn.commit()
    for first in range(1, rows + 1, batch):
        done["u"] += cur.execute(
            f"UPDATE {table} SET status = 'archived', amount = amount + 1 "
            f"WHERE id BETWEEN {first} AND {first + batch - 1}"
        )
        conn.commit()
    return done


def make_binlog(charset: str, rows: int, batch: int, into: Path) -> dict[str, Any]:
    """The workload on a fresh table in binlog files of its own, copied into `into`."""
    table = f"t_{charset}"
    conn = mariadb.connect()  # the client's charset: PyMySQL's default, utf8mb4
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@binlog_annotate_row_events, @@binlog_row_image")
            settings = dict(zip(("annotate", "row_image"), cur.fetchone(), strict=True))
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
            cur.execute(f"USE {DATABASE}")
            cur.execute(f"DROP TABLE IF EXISTS {table}")
            cur.execute(TABLE_SQL.format(table=table, charset=charset))
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("SHOW MASTER STATUS")
            start = cur.fetchone()[0]
            started = time.perf_counter()
            counts = write_workload(cur, conn, table, rows, batch)
            seconds = time.perf_counter() - started
            cur.execute("SHOW MASTER STATUS")
            end = cur.fetchone()[0]
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("SELECT @@log_bin_basename")
            binlog_dir = Path(cur.fetchone()[0]).parent
    finally:
        conn.close()
    base, lo = start.rsplit(".", 1)
    hi = end.rsplit(".", 1)[1]
    names = [f"{base}.{i:06d}" for i in range(int(lo), int(hi) + 1)]
    into.mkdir(parents=True, exist_ok=True)
    files = [str(shutil.copy(binlog_dir / name, into / name)) for name in names]
    return {
        "table": table,
        "counts": counts,
        "server": settings,
        "write_seconds": round(seconds, 2),
        "files": files,
        "bytes": sum(os.path.getsize(f) for f in files),
    }


def timed(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """Wall and CPU (user+sys of the child alone) of cmd, its stdout to /dev/null."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{cmd[0]} … exited {proc.returncode}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}


def dump_cmd(files: list[str]) -> list[str]:
    return [sys.executable, "-m", "replicad.cli", "dump", *files]


def read_back(files: list[str], table: str) -> dict[str, Any]:
    """One compiled `replicad dump` read back: lines of this table, lines of others, the
    first line's size and the largest line's."""
    env = {**children.python_env(), "REPLICAD_REQUIRE_SPEEDUPS": "1"}
    ours = others = 0
    first = largest = 0
    tag = f'"table":"{table}"'.encode()
    with subprocess.Popen(dump_cmd(files), stdout=subprocess.PIPE, env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            size = len(line) - 1
            first = first or size
            largest = max(largest, size)
            if tag in line:
                ours += 1
            else:
                others += 1
    if proc.returncode:
        raise RuntimeError(f"replicad dump exited {proc.returncode}")
    return {
        "rows": ours,
        "other_rows": others,
        "first_line_bytes": first,
        "largest_line_bytes": largest,
    }


def measure(binlog: dict[str, Any], repeat: int, pure: bool) -> dict[str, dict[str, float]]:
    env = children.python_env()
    tools = {
        "mariadb-binlog -v": (
            [
                shutil.which("mariadb-binlog") or "mariadb-binlog",
                "--no-defaults",
                "-v",
                "--base64-output=decode-rows",
                *binlog["files"],
            ],
            env,
        ),
        "replicad dump": (dump_cmd(binlog["files"]), {**env, "REPLICAD_REQUIRE_SPEEDUPS": "1"}),
    }
    if pure:
        tools["replicad dump, pure Python"] = (
            dump_cmd(binlog["files"]),
            {**env, "REPLICAD_PURE_PYTHON": "1"},
        )
    best: dict[str, dict[str, float]] = {}
    for _ in range(repeat):  # alternating, so a burst of other load hits every tool alike
        for name, (cmd, tool_env) in tools.items():
            m = timed(cmd, tool_env)
            if name not in best or m["wall_s"] < best[name]["wall_s"]:
                best[name] = m
    return best


def report(charset: str, binlog: dict[str, Any], best: dict[str, Any], back: dict[str, Any]):
    rows = sum(binlog["counts"].values())
    peer = best["mariadb-binlog -v"]["wall_s"]
    lines = []
    for name, m in best.items():
        lines.append(
            (
                name,
                f"{m['wall_s']:.2f}",
                f"{m['cpu_s']:.2f}",
                f"{rows / m['wall_s']:,.0f}",
                f"{peer / m['wall_s']:.2f}",
            )
        )
    print(
        f"\n== {charset}: {binlog['table']}, {binlog['counts']['c']:,} inserted + "
        f"{binlog['counts']['u']:,} updated, {binlog['bytes'] / 1e6:.1f} MB in "
        f"{len(binlog['files'])} file(s); server {binlog['server']}"
    )
    print(tables.grid(("tool", "wall s", "CPU s", "rows/s", "× mariadb-binlog"), lines))
    print(
        f"read back: {back['rows']:,} lines of {binlog['table']} (+{back['other_rows']} "
        f"of other writers), first line {back['first_line_bytes']:,} B, largest "
        f"{back['largest_line_bytes']:,} B"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows inserted (then updated)")
    parser.add_argument("--batch", type=int, default=500, help="rows per executemany / UPDATE")
    parser.add_argument("--charsets", default="latin1,utf8mb4")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool (best kept)")
    parser.add_argument("--pure", action="store_true", help="also REPLICAD_PURE_PYTHON=1")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--keep", action="store_true", help="keep the database")
    args = parser.parse_args(argv)
    children.compile_bytecode()
    print(f"load average at start: {os.getloadavg()}; cpus: {os.cpu_count()}")
    results: dict[str, Any] = {}
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for charset in args.charsets.split(","):
            binlog = make_binlog(charset, args.rows, args.batch, Path(tmp) / charset)
            best = measure(binlog, args.repeat, args.pure)
            back = read_back(binlog["files"], binlog["table"])
            if back["rows"] != sum(binlog["counts"].values()):
                problems.append(
                    f"{charset}: dump gave {back['rows']} rows of "
                    f"{binlog['table']}, {binlog['counts']} written"
                )
            report(charset, binlog, best, back)
            results[charset] = {
                "binlog": {k: v for k, v in binlog.items() if k != "files"},
                "tools": best,
                "read_back": back,
            }
    print(f"load average at end: {os.getloadavg()}")
    if not args.keep:
        conn = mariadb.connect()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        conn.close()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    for problem in problems:
        print(f"!!! {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
