"""Initial-snapshot throughput: replicad's `snapshot.mode: initial` against
`mariadb-dump --single-transaction` of the same table, in one run, on the local MariaDB that
scripts/services.sh starts (bash scripts/services.sh up mariadb).

Both read the table inside one consistent-snapshot transaction and write text to /dev/null:
mariadb-dump its INSERT statements, replicad its JSON-lines messages (the stdout sink). For
replicad the figure is the snapshot's own time (`snapshot_done` in its log: from the first
chunk to the last acknowledged read, without process start-up), plus its wall time from
spawn to the log line; CPU and peak RSS are the replicad process's own.

    python3 bench/snapshot.py [--rows 300000] [--chunk-rows 10000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.children import python_env, stop_process
from bench.harness.mariadb import MARIADB_PORT
from bench.harness.paths import ROOT
from bench.harness.procstat import cpu_seconds, vm_kb
from bench.harness.tables import grid
from bench.workloads.ten_columns import create_table, insert_rows, recreate_database

DB = "bench_snapshot"


def prepare(rows: int) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=MARIADB_PORT, user="root", password="root")
    with conn.cursor() as cur:
        recreate_database(cur, DB)
        cur.execute(create_table())
        cur.execute(insert_rows(1, rows))
    conn.commit()
    conn.close()


def mariadb_dump() -> dict[str, float]:
    started = time.perf_counter()
    subprocess.run(
        [
            "mariadb-dump",
            "-h127.0.0.1",
            f"-P{MARIADB_PORT}",
            "-uroot",
            "-proot",
            "--single-transaction",
            DB,
            "t",
        ],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return {"seconds": time.perf_counter() - started}


def replicad(chunk_rows: int, workdir: Path) -> dict[str, float | int | None]:
    config = workdir / "config.yaml"
    config.write_text(
        "pipeline: bench\n"
        f"source: {{host: 127.0.0.1, port: {MARIADB_PORT}, user: repl, password_env: BENCH_PW, "
        "server_id: 7990}\n"
        "sinks: {stdout: {path: /dev/null}}\n"
        f"coordination: {{local: {{path: {workdir / 'position.json'}}}}}\n"
        f"filters: {{include: ['{DB}\\.t']}}\n"
        f"snapshot: {{mode: initial, chunk_rows: {chunk_rows}}}\n"
        "log: {format: json, level: info}\n"
    )
    log = workdir / "replicad.log"
    started = time.perf_counter()
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "replicad.cli", "run", "-c", str(config)],
            cwd=ROOT,
            env={**python_env(), "BENCH_PW": "repl"},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    done = None
    peak = 0
    cpu = None
    try:
        while done is None:
            if proc.poll() is not None:
                raise RuntimeError(f"replicad exited {proc.returncode}: {log.read_text()[:3000]}")
            peak = max(peak, vm_kb("VmHWM", proc.pid) or 0)
            cpu = cpu_seconds(proc.pid) or cpu
            for line in log.read_text().splitlines():
                if '"snapshot_done"' in line:
                    done = json.loads(line)
            time.sleep(0.01)
        wall = time.perf_counter() - started
    finally:
        stop_process(proc, 30)
    return {
        "seconds": done["seconds"],
        "wall": wall,
        "rows": done["rows"],
        "cpu": cpu,
        "peak_rss_kb": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--chunk-rows", type=int, default=10_000)
    args = parser.parse_args()
    prepare(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        dump = mariadb_dump()
        ours = replicad(args.chunk_rows, Path(tmp))
        dump_again = mariadb_dump()  # before and after: the page cache is warm for both
    best_dump = min(dump["seconds"], dump_again["seconds"])
    rows = args.rows
    print(
        grid(
            ("reader", "seconds", "rows/s", "vs mariadb-dump"),
            [
                (
                    "mariadb-dump --single-transaction",
                    f"{best_dump:.2f}",
                    f"{rows / best_dump:,.0f}",
                    "1.00",
                ),
                (
                    "replicad snapshot (snapshot_done)",
                    f"{ours['seconds']:.2f}",
                    f"{rows / ours['seconds']:,.0f}",
                    f"{best_dump / ours['seconds']:.2f}",
                ),
                (
                    "replicad, spawn to snapshot_done",
                    f"{ours['wall']:.2f}",
                    f"{rows / ours['wall']:,.0f}",
                    f"{best_dump / ours['wall']:.2f}",
                ),
            ],
        )
    )
    print(
        f"\nreplicad: {ours['rows']} reads, CPU {ours['cpu']:.2f} s, peak RSS "
        f"{ours['peak_rss_kb'] / 1024:.0f} MiB, chunks of {args.chunk_rows} rows; "
        f"mariadb-dump runs: {dump['seconds']:.2f} s, {dump_again['seconds']:.2f} s"
    )


if __name__ == "__main__":
    main()
