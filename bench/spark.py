"""The Spark archive reader against replicad's single-process decode of the same binlog files,
in one run, on the local MariaDB that scripts/services.sh starts: how `replicad-binlog` scales
with Spark's cores (local[1], local[2]) and what Spark costs over one process.

The binlog: `--rows` inserts into a 10-column table (BIGINT, INT, VARCHAR, DECIMAL,
DATETIME(6), DOUBLE, TEXT, TINYINT UNSIGNED, DATE, JSON), split over `--files` binlog files
(FLUSH BINARY LOGS between the parts), copied out of the server's directory. Measured:
- `replicad dump FILES > /dev/null`: decode and JSON lines in one process (wall time);
- `spark.read.format("replicad-binlog").load(DIR)` written to Spark's `noop` sink (every row
  produced, nothing stored) on local[1] and local[2], each in a fresh process, twice: the
  first run starts Spark's Python workers and warms the JVM, the second is the figure. The
  time counts from the read to the end of the write (the driver's TABLE_MAP scan included);
  the session's start-up is reported apart.

    python3 bench/spark.py [--rows 300000] [--files 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.children import python_env
from bench.harness.mariadb import MARIADB_PORT
from bench.harness.paths import ROOT
from bench.harness.tables import grid
from bench.workloads.ten_columns import create_table, insert_rows, recreate_database

DB = "bench_spark"


def prepare(rows: int, files: int, into: Path) -> list[Path]:
    """The binlog files holding exactly the inserts, copied into `into`."""
    conn = pymysql.connect(host="127.0.0.1", port=MARIADB_PORT, user="root", password="root")
    with conn.cursor() as cur:
        recreate_database(cur, DB)
        cur.execute(create_table())
        cur.execute("SELECT @@log_bin_basename")
        basename = Path(cur.fetchone()[0])
        names = []
        per_file = rows // files
        for part in range(files):
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("SHOW MASTER STATUS")
            names.append(cur.fetchone()[0])
            first = part * per_file + 1
            last = rows if part == files - 1 else first + per_file - 1
            cur.execute(insert_rows(first, last))
            conn.commit()
        cur.execute("FLUSH BINARY LOGS")
    conn.close()
    into.mkdir(parents=True, exist_ok=True)
    copies = []
    for name in names:
        copy = into / name
        shutil.copy(basename.parent / name, copy)
        copies.append(copy)
    return copies


def replicad_dump(files: list[Path]) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "replicad.cli", "dump", *map(str, files)],
        stdout=subprocess.DEVNULL,
        check=True,
        cwd=ROOT,
        env=python_env(),
    )
    return time.perf_counter() - started


def spark_child(master: str, directory: str) -> dict[str, float | int]:
    from replicad.spark.session import build_session

    started = time.perf_counter()
    spark = build_session(master, "bench-spark")
    spark.sparkContext.setLogLevel("ERROR")
    ready = time.perf_counter()
    times = []
    for _ in range(2):  # cold (Python workers start, JVM code warms), then warm
        began = time.perf_counter()
        frame = spark.read.format("replicad-binlog").option("table", f"{DB}.t").load(directory)
        frame.write.format("noop").mode("overwrite").save()
        times.append(time.perf_counter() - began)
    rows = frame.count()
    spark.stop()
    return {"startup_s": ready - started, "cold_s": times[0], "seconds": times[1], "rows": rows}


def spark_run(master: str, directory: Path) -> dict[str, float | int]:
    result = subprocess.run(
        [sys.executable, __file__, "--child", master, "--dir", str(directory)],
        capture_output=True,
        check=True,
        cwd=ROOT,
        env={**python_env(), "PYSPARK_PYTHON": sys.executable},
    )
    return json.loads(result.stdout.decode().strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(spark_child(args.child, args.dir)))
        return
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        directory = Path(tmp) / "binlogs"
        files = prepare(args.rows, args.files, directory)
        size = sum(f.stat().st_size for f in files)
        print(
            f"{args.rows} rows in {len(files)} binlog files, {size / 2**20:.1f} MiB; "
            f"{os.cpu_count()} CPUs",
            flush=True,
        )
        dump_s = replicad_dump(files)
        results: list[tuple[str, float, int, float | None, float | None]] = [
            ("replicad dump (1 process)", dump_s, args.rows, None, None)
        ]
        for master in ("local[1]", "local[2]"):
            run = spark_run(master, directory)
            assert run["rows"] == args.rows, run
            results.append(
                (
                    f"replicad-binlog, Spark {master}",
                    float(run["seconds"]),
                    int(run["rows"]),
                    float(run["cold_s"]),
                    float(run["startup_s"]),
                )
            )
    rows = [
        (
            name,
            f"{seconds:.2f}",
            f"{count / seconds:,.0f}",
            f"{dump_s / seconds:.2f}x",
            "" if cold is None else f"{cold:.2f}",
            "" if startup is None else f"{startup:.1f}",
        )
        for name, seconds, count, cold, startup in results
    ]
    print(
        grid(
            ("reader", "seconds (warm)", "rows/s", "vs dump", "first run s", "session start s"),
            rows,
        )
    )


if __name__ == "__main__":
    main()
