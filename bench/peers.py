#!/usr/bin/env python3
"""replicad beside Debezium: one run, one machine, the same MariaDB, the same Kafka.

For each contender (replicad and Debezium's MariaDB connector in Kafka Connect standalone,
bench/peers/debezium), each with its defaults and tuned, one after the other on the local
MariaDB (3306) and Apache Kafka (9092), both writing Debezium-shaped JSON (replicad with
`envelope.values: debezium`; Connect's JsonConverter; `schemas.enable` false on both) to
topics of one partition:

  1. Initial snapshot of `snap` (--snapshot-rows rows of snapshot.py's 10-column table, made
     once for all contenders): spawn -> last snapshot message consumed, and first -> last.
  2. Live streaming into the contender's own empty table `live_<n>` (captured from the
     start): --rows row changes written as fast as one client can, as client libraries
     send them: multi-row INSERTs of --batch rows, one transaction each, each followed by an
     UPDATE of those rows (both images). First commit -> last message consumed; CPU seconds
     of the process tree (Connect's JVM; replicad with its children) per 1000 rows.
  3. Latency at fixed offered rates (--rates, default 5000 and 20000 rows/s): autocommit
     INSERTs on an absolute schedule, 50 transactions/s, each row with `at = NOW(6)` (UTC
     session); per row, consume time - `at`.
  4. Restart: SIGTERM, --backlog-rows inserts committed while it is down, spawn again:
     spawn -> streaming (the contender's log), spawn -> first backlog message consumed, and
     the backlog's catch-up rows/s (first -> last backlog message).

Peak RSS: the largest sum of VmHWM over the process tree seen during the run. /proc/loadavg
is recorded before and after every phase: the machine (2 cores here) may be shared, which
makes every figure noisy. Message identity is the key's `id` and the `op`, so at-least-once
duplicates after a restart count once.

Run it as a script (bench/peers/ is a package of the same name):

    .venv/bin/python bench/peers.py --json /tmp/peers.json
    .venv/bin/python bench/peers.py --quick        # small sizes, to check the harness
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
import traceback
import uuid
from collections.abc import Callable
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from bench import common, e2e
from bench.peers.debezium.connect import (
    BINLOG_CONNECTED,
    DebeziumConnect,
    DebeziumOptions,
)
from bench.snapshot import TABLE_SQL, insert_rows

HOST, PORT = "127.0.0.1", common.MARIADB_PORT
COLUMNS = ("id", "n", "s", "d", "at", "f", "tx", "u", "day", "j")
LIVE_BASE = 10_000_000  # ids of the live phase; latency and backlog rows above it
LATENCY_BASE = 20_000_000
BACKLOG_BASE = 40_000_000
TXN_PER_S = 50  # paced writers: rows per transaction = rate / 50
IDLE_S = 60.0  # a phase fails when no awaited message arrived for this long
RSS_EVERY_S = 0.25

# --------------------------------------------------------------------------- settings

TUNED_DEBEZIUM = {
    "max.batch.size": "8192",  # default 2048
    "max.queue.size": "32768",  # default 8192
    "poll.interval.ms": "10",  # default 500: the wait for a batch when the queue is empty
}
TUNED_CONNECT_WORKER = {  # the producer Connect gives the task
    "producer.linger.ms": "10",
    "producer.batch.size": "1048576",
    "producer.compression.type": "lz4",
}
TUNED_REPLICAD_PRODUCER = {"linger.ms": 10, "batch.size": 1048576, "compression.type": "lz4"}
TUNED_REPLICAD_CHUNK_ROWS = 50_000  # snapshot.chunk_rows, default 10,000


def how_tuned() -> dict[str, Any]:
    return {
        "debezium": {"connector": TUNED_DEBEZIUM, "worker": TUNED_CONNECT_WORKER},
        "replicad": {
            "sinks.kafka.producer": TUNED_REPLICAD_PRODUCER,
            "sinks.kafka.headers": False,
            "snapshot.chunk_rows": TUNED_REPLICAD_CHUNK_ROWS,
        },
    }


# --------------------------------------------------------------------------- rows


def row_values(i: int) -> tuple[Any, ...]:
    """Row `i` of the 10-column table, the values snapshot.insert_rows gives it."""
    return (
        i,
        i % 1000,
        f"name-{i}",
        (Decimal(i) / 7).quantize(Decimal("0.01")),
        datetime(2024, 1, 2, 3, 4, 5, 123456) + timedelta(seconds=i),
        i / 3,
        "x" * 40,
        i % 256,
        date(2024, 1, 1) + timedelta(days=i % 1000),
        f'{{"k": {i}}}',
    )


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def connect_db(database: str | None = None) -> Any:
    import pymysql

    return pymysql.connect(
        host=HOST,
        port=PORT,
        user="root",
        password="root",
        database=database,
        autocommit=True,
        charset="utf8mb4",
    )


def prepare_database(database: str, snapshot_rows: int, contenders: int) -> None:
    """The database afresh: `snap` with its rows (100k-row statements, not one huge
    transaction on a shared server) and one empty `live_<n>` per contender."""
    conn = connect_db()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {database}")
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(f"USE {database}")
        cur.execute(TABLE_SQL.replace("CREATE TABLE t (", "CREATE TABLE snap ("))
        for first in range(1, snapshot_rows + 1, 100_000):
            last = min(snapshot_rows, first + 99_999)
            cur.execute(insert_rows(first, last).replace("INSERT INTO t ", "INSERT INTO snap "))
        for n in range(contenders):
            cur.execute(TABLE_SQL.replace("CREATE TABLE t (", f"CREATE TABLE live_{n} ("))
    conn.close()


def drop_database(database: str) -> None:
    conn = connect_db()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {database}")
    conn.close()


# --------------------------------------------------------------------------- writer child


def child_writer(spec: dict[str, Any]) -> dict[str, Any]:
    """`bulk`: spec["rows"] inserts as multi-row INSERTs of spec["batch"] rows (autocommit:
    one transaction each), each followed by an UPDATE of those rows when spec["updates"];
    statements rendered before the clock starts. `paced`: spec["rate"] rows/s for
    spec["seconds"], rate/50 rows per INSERT on an absolute schedule, `at = NOW(6)`."""
    conn = connect_db(spec["database"])
    table, first, batch = spec["table"], spec["first_id"], spec["batch"]
    head = f"INSERT INTO {table} ({','.join(COLUMNS)}) VALUES "
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        if spec["mode"] == "bulk":
            statements = []
            for lo in range(first, first + spec["rows"], batch):
                hi = min(first + spec["rows"], lo + batch) - 1
                values = ",".join(
                    cur.mogrify(f"({','.join(['%s'] * 10)})", row_values(i))
                    for i in range(lo, hi + 1)
                )
                statements.append(head + values)
                if spec["updates"]:
                    statements.append(
                        f"UPDATE {table} SET n = n + 1, s = CONCAT(s, 'u') "
                        f"WHERE id BETWEEN {lo} AND {hi}"
                    )
            began = time.time()
            for sql in statements:
                cur.execute(sql)
            ended = time.time()
            conn.close()
            return {"began": began, "ended": ended, "statements": len(statements)}
        # paced: the row without `at` rendered once per pool entry, NOW(6) put in per row
        pool = []
        for i in range(1000):
            parts = [conn.escape(v) for v in row_values(i)]
            pool.append((",".join(parts[1:4]), ",".join(parts[5:])))
        count = max(1, round(spec["rate"] * spec["seconds"] / batch))
        interval = batch / spec["rate"]
        next_id = first
        late = 0.0
        t0 = time.time() + 0.1
        for txn in range(count):
            due = t0 + txn * interval
            if (pause := due - time.time()) > 0:
                time.sleep(pause)
            late = max(late, time.time() - due)
            values = ",".join(
                f"({i},{pool[i % 1000][0]},NOW(6),{pool[i % 1000][1]})"
                for i in range(next_id, next_id + batch)
            )
            cur.execute(head + values)
            next_id += batch
        ended = time.time()
    conn.close()
    return {"began": t0, "ended": ended, "rows": next_id - first, "max_late_s": late}


def run_writer(spec: dict[str, Any], workdir: Path) -> subprocess.Popen[bytes]:
    out = workdir / f"writer-{uuid.uuid4().hex[:8]}.json"
    spec = {**spec, "out": str(out)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    return subprocess.Popen(cmd, env=common.python_env())


def writer_result(proc: subprocess.Popen[bytes], spec_out: str | None = None) -> dict[str, Any]:
    assert isinstance(proc.args, list)
    out = Path(json.loads(proc.args[-1])["out"]) if spec_out is None else Path(spec_out)
    proc.wait()
    result: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    if proc.returncode != 0 or "error" in result or not result:
        raise RuntimeError(f"writer failed (exit {proc.returncode}): {result.get('error', '')}")
    return result


# --------------------------------------------------------------------------- contenders


class Contender(Protocol):
    label: str

    def spawn(self) -> float: ...
    def pids(self) -> list[int]: ...
    def alive(self) -> bool: ...
    def streaming(self) -> bool: ...
    def stop(self) -> int | None: ...
    def log_tail(self) -> str: ...


class ReplicadContender:
    """`replicad run`: snapshot.mode initial, envelope.values debezium, at-least-once Kafka
    sink (its defaults, or tuned), position file in the work dir."""

    def __init__(
        self,
        label: str,
        workdir: Path,
        database: str,
        tables: list[str],
        prefix: str,
        tuned: bool,
        bootstrap: str,
    ) -> None:
        self.label, self.workdir = label, workdir
        self.log = workdir / "replicad.log"
        self.log_offset = 0
        kafka: dict[str, Any] = {"bootstrap_servers": bootstrap, "prefix": prefix}
        snapshot: dict[str, Any] = {"mode": "initial"}
        if tuned:
            kafka |= {"producer": TUNED_REPLICAD_PRODUCER, "headers": False}
            snapshot["chunk_rows"] = TUNED_REPLICAD_CHUNK_ROWS
        self.config = {
            "pipeline": prefix,
            "source": {
                "host": HOST,
                "port": PORT,
                "user": "repl",
                "password_env": "PEERS_PW",
                "server_id": random.randrange(8_000_000, 9_000_000),
            },
            "sinks": {"kafka": kafka},
            "coordination": {"local": {"path": str(workdir / "position.json")}},
            "filters": {"include": [f"{database}\\.{t}" for t in tables]},
            "snapshot": snapshot,
            "envelope": {"values": "debezium"},
            "log": {"format": "json", "level": "info"},
        }
        self.proc_: subprocess.Popen[bytes] | None = None

    def spawn(self) -> float:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "replicad.yaml"
        config.write_text(json.dumps(self.config, indent=2) + "\n")
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        env = {**common.python_env(), "PEERS_PW": "repl"}
        with self.log.open("ab") as log:
            spawned = time.time()
            self.proc_ = subprocess.Popen(
                [sys.executable, "-m", "replicad.cli", "run", "-c", str(config)],
                cwd=self.workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return spawned

    def pids(self) -> list[int]:
        if not self.alive():
            return []
        assert self.proc_ is not None
        return [self.proc_.pid, *common.child_pids(self.proc_.pid)]

    def alive(self) -> bool:
        return self.proc_ is not None and self.proc_.poll() is None

    def _events(self) -> list[str]:
        with self.log.open("rb") as f:
            f.seek(self.log_offset)
            return f.read().decode(errors="replace").splitlines()

    def streaming(self) -> bool:
        """Connected to the binlog since this spawn (after its snapshot, if any)."""
        return any('"source_connected"' in line for line in self._events())

    def stop(self) -> int | None:
        if self.proc_ is None:
            return None
        common.stop_process(self.proc_, 60)
        return self.proc_.returncode

    def log_tail(self) -> str:
        return "\n".join(self._events()[-30:])


class DebeziumContender:
    """Debezium's MariaDB connector in Connect standalone (bench/peers/debezium)."""

    def __init__(
        self,
        label: str,
        workdir: Path,
        database: str,
        tables: list[str],
        prefix: str,
        tuned: bool,
        bootstrap: str,
    ) -> None:
        self.label, self.workdir = label, workdir
        extra = {"snapshot.locking.mode": "none"}  # no FLUSH TABLES WITH READ LOCK: shared
        options = DebeziumOptions(
            server="mariadb",
            database=database,
            topic_prefix=prefix,
            server_id=random.randrange(6_000_000, 7_000_000),
            tables=tuple(tables),
            kafka=bootstrap,
            schemas_enable=False,
            extra=extra | (TUNED_DEBEZIUM if tuned else {}),
            worker_extra=TUNED_CONNECT_WORKER if tuned else {},
        )
        self.connect = DebeziumConnect(options, workdir)
        self.spawns = 0

    def spawn(self) -> float:
        if self.connect.log.exists():  # a fresh log per start: streaming() reads it
            self.connect.log.rename(self.workdir / f"connect.{self.spawns}.log")
        self.spawns += 1
        self.connect.spawn()  # runs fetch.sh first (a no-op once installed), then the JVM
        return time.time() - (time.monotonic() - self.connect.timings["spawn"])

    def pids(self) -> list[int]:
        proc = self.connect.proc
        return [proc.pid] if proc is not None and proc.poll() is None else []

    def alive(self) -> bool:
        return bool(self.pids())

    def streaming(self) -> bool:
        if self.connect.proc is not None:
            self.connect._check_alive(None)
        return BINLOG_CONNECTED in self.connect.log_text()

    def stop(self) -> int | None:
        return self.connect.stop()

    def log_tail(self) -> str:
        return "\n".join(self.connect.log_text().splitlines()[-30:])


# --------------------------------------------------------------------------- measuring


class Tree:
    """CPU and peak RSS of a contender's process tree, sampled."""

    def __init__(self, contender: Contender) -> None:
        self.contender = contender
        self.peak_kb = 0
        self.last_sample = 0.0

    def cpu(self) -> float:
        return sum(common.cpu_seconds(p) or 0.0 for p in self.contender.pids())

    def sample(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last_sample >= RSS_EVERY_S:
            self.last_sample = now
            kb = sum(common.vm_kb("VmHWM", p) or 0 for p in self.contender.pids())
            self.peak_kb = max(self.peak_kb, kb)


class ContenderDied(RuntimeError):
    pass


def drain(
    reader: e2e.TopicReader,
    tree: Tree,
    handle: Callable[[Any, float], bool],
    done: Callable[[], bool],
    what: str,
    one: bool = False,
    writer: subprocess.Popen[bytes] | None = None,
    tick: Callable[[float], None] | None = None,
) -> None:
    """Messages to `handle(msg, consumed_at)` (True: an awaited message) until `done()`;
    fails when the contender or the writer fails, or no awaited message came for IDLE_S."""
    last = time.monotonic()
    while not done():
        if one:
            msg = reader.one(0.05)
            batch = [] if msg is None else [msg]
        else:
            batch = reader.batch(0.02)
        now = time.time()
        if tick is not None:
            tick(now)
        for msg in batch:
            if handle(msg, now):
                last = time.monotonic()
        tree.sample()
        if writer is not None and writer.poll() is not None:
            writer_result(writer)  # raises when the writer failed
            writer = None
        if not tree.contender.alive():
            raise ContenderDied(
                f"{tree.contender.label} exited during {what}:\n{tree.contender.log_tail()}"
            )
        if time.monotonic() - last > IDLE_S:
            raise RuntimeError(f"{tree.contender.label}: nothing new for {IDLE_S} s in {what}")


def key_id(msg: Any) -> int:
    return int(orjson.loads(msg.key())["id"])


def wait_streaming(contender: Contender, tree: Tree, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not contender.streaming():
        tree.sample()
        if not contender.alive():
            raise ContenderDied(f"{contender.label} exited:\n{contender.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{contender.label} not streaming after {timeout} s")
        time.sleep(0.05)


def phase(results: dict[str, Any], name: str, work: Callable[[], dict[str, Any]]) -> None:
    before = loadavg()
    started = time.time()
    busy0, total0 = common.machine_ticks()
    out = work()
    busy1, total1 = common.machine_ticks()
    cores = os.cpu_count() or 1
    out["machine_busy_cores"] = round((busy1 - busy0) / max(1, total1 - total0) * cores, 2)
    out["load_before"], out["load_after"] = before, loadavg()
    out["wall_s"] = round(time.time() - started, 2)
    results[name] = out
    shown = {k: v for k, v in out.items() if k != "sample_messages"}
    print(f"  {name}: {json.dumps(shown)}", flush=True)


def snapshot_phase(
    contender: Contender, tree: Tree, reader: e2e.TopicReader, rows: int
) -> dict[str, Any]:
    spawned = contender.spawn()
    seen: set[int] = set()
    first: list[float] = []

    def handle(msg: Any, now: float) -> bool:
        if not first:
            first.append(now)
        n = len(seen)
        seen.add(key_id(msg))
        return len(seen) > n

    drain(reader, tree, handle, lambda: len(seen) >= rows, "the snapshot")
    last = time.time()
    cpu = tree.cpu()
    wait_streaming(contender, tree)
    return {
        "rows": len(seen),
        "spawn_to_last_s": round(last - spawned, 2),
        "first_to_last_s": round(last - first[0], 2),
        "rows_per_s": round(rows / (last - spawned)),
        "rows_per_s_first_to_last": round(rows / max(1e-6, last - first[0])),
        "cpu_s": round(cpu, 2),
        "cpu_s_per_1k_rows": round(cpu / rows * 1000, 4),
    }


def live_phase(
    contender: Contender,
    tree: Tree,
    reader: e2e.TopicReader,
    workdir: Path,
    database: str,
    table: str,
    rows: int,
    batch: int,
) -> dict[str, Any]:
    inserts = rows // 2
    spec = {
        "database": database,
        "table": table,
        "mode": "bulk",
        "rows": inserts,
        "first_id": LIVE_BASE,
        "batch": batch,
        "updates": True,
    }
    cpu0 = tree.cpu()
    writer = run_writer(spec, workdir)
    seen: set[tuple[int, str]] = set()
    sizes = {"messages": 0, "key_bytes": 0, "value_bytes": 0, "headers": 0}
    samples: dict[str, str] = {}

    def handle(msg: Any, now: float) -> bool:
        i = key_id(msg)
        value = msg.value()
        if not LIVE_BASE <= i < LATENCY_BASE or value is None:
            return False
        n = len(seen)
        op = e2e._op_of(value)
        seen.add((i, op))
        sizes["messages"] += 1
        sizes["key_bytes"] += len(msg.key())
        sizes["value_bytes"] += len(value)
        sizes["headers"] += len(msg.headers() or [])
        samples.setdefault(op, msg.key().decode() + " " + value.decode())
        return len(seen) > n

    drain(reader, tree, handle, lambda: len(seen) >= 2 * inserts, "live streaming", writer=writer)
    last = time.time()
    cpu = tree.cpu() - cpu0
    written = writer_result(writer)
    changes = 2 * inserts
    ops = sorted({op for _, op in seen})
    return {
        "row_changes": changes,
        "ops": ops,
        "commit_to_last_s": round(last - written["began"], 2),
        "rows_per_s": round(changes / (last - written["began"])),
        "writer_rows_per_s": round(changes / (written["ended"] - written["began"])),
        "last_consumed_after_last_commit_s": round(last - written["ended"], 2),
        "cpu_s": round(cpu, 2),
        "cpu_s_per_1k_rows": round(cpu / changes * 1000, 4),
        "avg_key_bytes": round(sizes["key_bytes"] / max(1, sizes["messages"]), 1),
        "avg_value_bytes": round(sizes["value_bytes"] / max(1, sizes["messages"]), 1),
        "headers_per_message": round(sizes["headers"] / max(1, sizes["messages"]), 2),
        "sample_messages": samples,
    }


def at_seconds(value: Any) -> float:
    """`at` (DATETIME(6), UTC) as Debezium's MicroTimestamp (epoch µs) or ISO text."""
    if isinstance(value, int):
        return value / 1e6
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def latency_phase(
    contender: Contender,
    tree: Tree,
    reader: e2e.TopicReader,
    workdir: Path,
    database: str,
    table: str,
    rate: int,
    seconds: float,
    first_id: int,
) -> dict[str, Any]:
    batch = max(1, rate // TXN_PER_S)
    spec = {
        "database": database,
        "table": table,
        "mode": "paced",
        "rate": rate,
        "seconds": seconds,
        "first_id": first_id,
        "batch": batch,
    }
    expected = max(1, round(rate * seconds / batch)) * batch
    cpu0 = tree.cpu()
    writer = run_writer(spec, workdir)
    lat: dict[int, float] = {}

    def handle(msg: Any, now: float) -> bool:
        i = key_id(msg)
        if not first_id <= i < first_id + expected or i in lat:
            return False
        lat[i] = now - at_seconds(orjson.loads(msg.value())["after"]["at"])
        return True

    drain(reader, tree, handle, lambda: len(lat) >= expected, f"latency {rate}/s", True, writer)
    cpu = tree.cpu() - cpu0
    written = writer_result(writer)
    span = written["ended"] - written["began"]
    return {
        "offered_rows_per_s": rate,
        "rows_per_txn": batch,
        "achieved_rows_per_s": round(written["rows"] / span) if span > 0 else None,
        "writer_max_late_s": round(written["max_late_s"], 3),
        "commit_to_consume_ms": e2e.percentiles(list(lat.values())),
        "cpu_s_per_1k_rows": round(cpu / expected * 1000, 4),
    }


def restart_phase(
    contender: Contender,
    tree: Tree,
    reader: e2e.TopicReader,
    workdir: Path,
    database: str,
    table: str,
    rows: int,
    batch: int,
) -> dict[str, Any]:
    exit_code = contender.stop()
    spec = {
        "database": database,
        "table": table,
        "mode": "bulk",
        "rows": rows,
        "first_id": BACKLOG_BASE,
        "batch": batch,
        "updates": False,
    }
    writer_result(run_writer(spec, workdir))
    spawned = contender.spawn()
    marks: dict[str, float] = {}
    seen: set[int] = set()

    def tick(now: float) -> None:
        if "streaming" not in marks and contender.streaming():
            marks["streaming"] = now

    def handle(msg: Any, now: float) -> bool:
        i = key_id(msg)
        if not BACKLOG_BASE <= i < BACKLOG_BASE + rows or i in seen:
            return False
        marks.setdefault("first", now)
        seen.add(i)
        return True

    drain(reader, tree, handle, lambda: len(seen) >= rows, "the restart", tick=tick)
    last = time.time()
    wait_streaming(contender, tree)
    marks.setdefault("streaming", time.time())  # a bound: seen only after the last message
    first = marks["first"]
    return {
        "stop_exit_code": exit_code,
        "backlog_rows": rows,
        "spawn_to_streaming_log_s": round(marks["streaming"] - spawned, 2),
        "spawn_to_first_backlog_s": round(first - spawned, 2),
        "backlog_rows_per_s": round(rows / max(1e-6, last - first)),
        "cpu_s_from_spawn": round(tree.cpu(), 2),
    }


def run_contender(
    kind: str, tuned: bool, n: int, args: argparse.Namespace, database: str, workdir: Path
) -> dict[str, Any]:
    label = f"{kind}-{'tuned' if tuned else 'default'}"
    prefix = f"peers-{uuid.uuid4().hex[:8]}"
    table = f"live_{n}"
    cls = ReplicadContender if kind == "replicad" else DebeziumContender
    contender: Contender = cls(
        label, workdir / label, database, ["snap", table], prefix, tuned, args.bootstrap
    )
    tree = Tree(contender)
    results: dict[str, Any] = {"label": label, "prefix": prefix, "table": table}
    print(f"{label} (topics {prefix}.*)", flush=True)
    snap = e2e.TopicReader(args.bootstrap, f"{prefix}.{database}.snap")
    live = e2e.TopicReader(args.bootstrap, f"{prefix}.{database}.{table}")
    try:
        phase(
            results, "snapshot", lambda: snapshot_phase(contender, tree, snap, args.snapshot_rows)
        )
        snap.close()
        phase(
            results,
            "live",
            lambda: live_phase(
                contender, tree, live, workdir, database, table, args.rows, args.batch
            ),
        )
        for k, rate in enumerate(args.rates):
            first = LATENCY_BASE + k * 5_000_000
            phase(
                results,
                f"latency_{rate}",
                lambda r=rate, f=first: latency_phase(
                    contender, tree, live, workdir, database, table, r, args.latency_seconds, f
                ),
            )
        phase(
            results,
            "restart",
            lambda: restart_phase(
                contender, tree, live, workdir, database, table, args.backlog_rows, args.batch
            ),
        )
    except Exception as exc:
        results["error"] = "".join(traceback.format_exception_only(exc)).strip()
        print(f"!!! {label}: {results['error']}\n{traceback.format_exc()}", flush=True)
    finally:
        tree.sample(force=True)
        results["peak_rss_mb"] = round(tree.peak_kb / 1024, 1)
        results["final_exit_code"] = contender.stop()
        live.close()
        results["topics_deleted"] = delete_topics(args.bootstrap, prefix)
    return results


def delete_topics(bootstrap: str, prefix: str) -> list[str]:
    """The run's topics: `<prefix>.*` and Debezium's schema-change topic `<prefix>`."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [
        t for t in admin.list_topics(timeout=10).topics if t == prefix or t.startswith(prefix + ".")
    ]
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result(60)
    return sorted(names)


# --------------------------------------------------------------------------- report

# (label, phase, field, goal for replicad/Debezium or None, higher is better)
METRICS: list[tuple[str, str, str, float | None, bool]] = [
    ("streaming rows/s (first commit -> last consumed)", "live", "rows_per_s", 2.0, True),
    ("  writer's own rows/s (the offered ceiling)", "live", "writer_rows_per_s", None, True),
    ("CPU s per 1k rows, streaming (process tree)", "live", "cpu_s_per_1k_rows", 0.5, False),
    ("  message value bytes (average, live)", "live", "avg_value_bytes", None, False),
    ("peak RSS MB (process tree, whole run)", "", "peak_rss_mb", None, False),
    ("snapshot rows/s (spawn -> last consumed)", "snapshot", "rows_per_s", 2.0, True),
    (
        "snapshot rows/s (first -> last consumed)",
        "snapshot",
        "rows_per_s_first_to_last",
        None,
        True,
    ),
    ("CPU s per 1k rows, snapshot (from spawn)", "snapshot", "cpu_s_per_1k_rows", None, False),
    ("restart: spawn -> streaming (log) s", "restart", "spawn_to_streaming_log_s", None, False),
    (
        "restart: spawn -> first backlog row consumed s",
        "restart",
        "spawn_to_first_backlog_s",
        None,
        False,
    ),
    ("backlog catch-up rows/s", "restart", "backlog_rows_per_s", None, True),
]


def metric(result: dict[str, Any], phase_name: str, key: str) -> float | None:
    where = result.get(phase_name, {}) if phase_name else result
    value = where.get(key) if isinstance(where, dict) else None
    if isinstance(value, dict):  # a percentile block
        return None
    return None if value is None else float(value)


def latency_metrics(rates: list[int]) -> list[tuple[str, str, str, float | None, bool]]:
    out: list[tuple[str, str, str, float | None, bool]] = []
    for rate in rates:
        for p in ("p50", "p99"):
            goal = 1.0 if (rate == 5000 and p == "p99") else None
            out.append((f"commit -> consume {p} ms at {rate}/s", f"latency_{rate}", p, goal, False))
        out.append(
            (
                f"  achieved rows/s at {rate}/s offered",
                f"latency_{rate}",
                "achieved_rows_per_s",
                None,
                True,
            )
        )
    return out


def value_of(result: dict[str, Any], phase_name: str, key: str) -> float | None:
    if key in ("p50", "p99"):
        block = result.get(phase_name, {}).get("commit_to_consume_ms") or {}
        return block.get(key)
    return metric(result, phase_name, key)


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def table(runs: dict[str, dict[str, Any]], rates: list[int]) -> tuple[str, list[dict[str, Any]]]:
    head = (
        "metric",
        "replicad",
        "Debezium",
        "ratio",
        "replicad tuned",
        "Debezium tuned",
        "ratio",
        "goal",
    )
    rows: list[tuple[str, ...]] = []
    records: list[dict[str, Any]] = []
    for label, phase_name, key, goal, higher in METRICS + latency_metrics(rates):
        cells = [label]
        record: dict[str, Any] = {"metric": label.strip()}
        for mode in ("default", "tuned"):
            ours = value_of(runs.get(f"replicad-{mode}", {}), phase_name, key)
            theirs = value_of(runs.get(f"debezium-{mode}", {}), phase_name, key)
            ratio = ours / theirs if ours is not None and theirs else None
            cells += [fmt(ours), fmt(theirs), f"{ratio:.2f}" if ratio is not None else "-"]
            record[mode] = {"replicad": ours, "debezium": theirs, "ratio": ratio}
        sign = ">=" if higher else "<="
        cells.append(f"{sign} {goal:g}" if goal is not None else "")
        record["goal"] = None if goal is None else f"{sign} {goal:g}"
        rows.append(tuple(cells))
        records.append(record)
    return common.grid(head, rows), records


def code_state() -> dict[str, Any]:
    def git(*cmd: str) -> str:
        return subprocess.run(
            ["git", *cmd], cwd=common.ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": git("status", "--short", "--untracked-files=no", "replicad").splitlines(),
    }


# --------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> int:
    e2e.ensure_kafka(args.bootstrap)
    database = f"bench_peers_{uuid.uuid4().hex[:6]}"
    order = [(kind, tuned) for tuned in (False, True) for kind in ("replicad", "debezium")]
    order = [(k, t) for k, t in order if f"{k}-{'tuned' if t else 'default'}" in args.only]
    workdir = Path(tempfile.mkdtemp(prefix="peers-"))
    results: dict[str, Any] = {
        "started": datetime.now().astimezone().isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "code": code_state(),
        "settings": vars(args) | {},
        "tuned": how_tuned(),
        "database": database,
        "runs": {},
        "format": "Debezium JSON, schemas.enable=false (JsonConverter / envelope.values: "
        "debezium), one partition per topic",
    }
    print(f"load average at start: {loadavg()}; database {database}; work dir {workdir}")
    failed = False
    try:
        started = time.time()
        prepare_database(database, args.snapshot_rows, len(order))
        results["prepare"] = {"seconds": round(time.time() - started, 1), "load": loadavg()}
        for n, (kind, tuned) in enumerate(order):
            run_result = run_contender(kind, tuned, n, args, database, workdir)
            results["runs"][run_result["label"]] = run_result
            failed = failed or "error" in run_result
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
            try:
                drop_database(database)
            except Exception as exc:  # the server may be what failed: say so, keep the cause
                print(f"!!! could not drop {database}: {exc}", flush=True)
    results["load_at_end"] = loadavg()
    text, records = table(results["runs"], args.rates)
    results["table"] = records
    print()
    print(text)
    print(f"\nload average at end: {results['load_at_end']} (1, 5, 15 min)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 1 if failed else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--snapshot-rows", type=int, default=1_000_000)
    p.add_argument("--rows", type=int, default=200_000, help="live row changes (half updates)")
    p.add_argument("--batch", type=int, default=500, help="rows per multi-row INSERT")
    p.add_argument("--backlog-rows", type=int, default=100_000)
    p.add_argument("--rates", default="5000,20000")
    p.add_argument("--latency-seconds", type=float, default=20.0)
    p.add_argument(
        "--only",
        default="replicad-default,debezium-default,replicad-tuned,debezium-tuned",
        help="which of the four runs",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="20k snapshot rows, 20k changes, 10k backlog, 5 s latency phases",
    )
    p.add_argument("--json", help="write the results here")
    p.add_argument("--keep", action="store_true", help="keep the database and the work dir")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.rates = [int(r) for r in str(args.rates).split(",") if r]
    args.only = [s for s in str(args.only).split(",") if s]
    if args.quick:
        args.snapshot_rows, args.rows, args.backlog_rows = 20_000, 20_000, 10_000
        args.latency_seconds = 5.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        result = common.child_outcome(lambda: child_writer(spec))
        Path(spec["out"]).write_text(json.dumps(result))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
