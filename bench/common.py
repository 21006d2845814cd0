"""What the benchmarks share: child processes (run one and sample its peak RSS, the JSON result
a child prints), CPU figures from /proc, a private Apache Kafka, and the plain-text result
tables.

Imported as `common` when a script runs as `python bench/X.py` (bench/ is sys.path[0]) and as
`bench.common` when it is imported as a module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # python bench/X.py: bench/ is sys.path[0]
    sys.path.insert(0, str(ROOT))

from tests.helpers.ports import free_port_block  # noqa: E402  (needs ROOT on the path)

SERVICES_SCRIPT = ROOT / "scripts" / "services.sh"
CLK_TCK = os.sysconf("SC_CLK_TCK")
RSS_SAMPLE_SECONDS = 0.005

# --------------------------------------------------------------------------- the local MariaDB

MARIADB_PORT = 3306  # scripts/services.sh's server, root/root


def connect(database: str | None = None) -> Any:
    import pymysql  # only the benchmarks that write need it

    return pymysql.connect(host="127.0.0.1", port=MARIADB_PORT, user="root", password="root",
                           database=database, autocommit=False)  # fmt: skip


def prepare_load_database(database: str, probe_columns: str, probe_row: str) -> None:
    """`database` afresh with `load_rows` (the paced writer's) and a one-row `probe` table."""
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {database}")
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(f"USE {database}")
        cur.execute("CREATE TABLE load_rows (id BIGINT PRIMARY KEY, v INT, note VARCHAR(40))")
        cur.execute(f"CREATE TABLE probe ({probe_columns})")
        cur.execute(f"INSERT INTO probe VALUES ({probe_row})")
    conn.commit()
    conn.close()


def paced_writer(
    database: str, rate: int, stop: threading.Event, committed: list[int], first: int = 0
) -> None:
    """`rate` rows/s into load_rows in transactions of 100 on an absolute schedule, upserts
    over a bounded key range; `committed[0]` counts the rows committed."""
    conn = connect(database)
    next_id = first
    period = 100 / rate
    began = time.perf_counter()
    sent = 0
    with conn.cursor() as cur:
        while not stop.is_set():
            values = ", ".join(
                f"({(next_id + i) % 200_000}, {i}, 'n{next_id + i}')" for i in range(100)
            )
            cur.execute(f"REPLACE INTO load_rows VALUES {values}")
            conn.commit()
            next_id += 100
            sent += 1
            committed[0] += 100
            delay = began + sent * period - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    conn.close()


# --------------------------------------------------------------------------- a private Kafka


class PrivateKafka:
    """A private single-node Apache Kafka (KRaft, broker and controller in one JVM) started for
    one benchmark run by `scripts/services.sh kafka-instance` in `directory`, on a free port
    (its controller on the next one): nobody else's topics, load or restarts. Its data is on
    disk in `directory`; the JVM heap is REPLICAD_KAFKA_HEAP (default 768m)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _services(self, action: str, timeout: float) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["bash", str(SERVICES_SCRIPT), "kafka-instance", action, str(self.directory),
             str(self.port)],
            check=False, timeout=timeout,
        )  # fmt: skip

    def start(self) -> str:
        """Start it (formatting its storage); returns the bootstrap address once a metadata
        round trip lists the broker."""
        self.port = free_port_block(2)
        if self._services("up", 300).returncode != 0:
            self.stop()  # a JVM that started but never answered must not outlive the run
            raise SystemExit(
                f"the private Kafka on {self.bootstrap} did not start; see "
                f"{self.directory / 'kafka.log'}"
            )
        return self.bootstrap

    @property
    def pid(self) -> int:
        """The broker's JVM (for CPU accounting)."""
        return int((self.directory / "kafka.pid").read_text().split()[0])

    def stop(self) -> None:
        """Graceful stop (SIGTERM; the script SIGKILLs it after 30 s)."""
        if self.port:
            self._services("down", 120)


# --------------------------------------------------------------------------- processes


def vm_kb(field_name: str, pid: int | str = "self") -> int | None:
    """A memory figure (kB) of a process from /proc: VmHWM is the peak RSS of its current
    address space, so unlike ru_maxrss it does not include the parent's RSS at fork/exec."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def python_env() -> dict[str, str]:
    """This environment, with the repository first on PYTHONPATH (for bench/ and replicad in
    a child Python)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def compile_bytecode() -> dict[str, Any]:
    """Write replicad's bytecode (__pycache__) as an installation does (pip compiles it at
    install time): with PYTHONDONTWRITEBYTECODE=1 in the environment an editable checkout
    would compile ~50 modules from source at every start of `replicad dump` or `run`
    (about 70 ms), which no installed replicad pays."""
    import compileall

    started = time.perf_counter()
    ok = compileall.compile_dir(str(ROOT / "replicad"), quiet=1)
    return {
        "ok": bool(ok),
        "seconds": round(time.perf_counter() - started, 2),
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
    }


def stop_process(proc: subprocess.Popen[bytes], timeout: float, sig: int = signal.SIGTERM) -> None:
    """Signal a running process and wait for it; SIGKILL it if it outlives `timeout`."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def run_process(cmd: list[str], *, capture: bool) -> tuple[int, float, int | None, str]:
    """Run cmd: exit code, wall seconds, peak RSS in kB and stdout.

    The peak RSS is the child's VmHWM, sampled every few ms until it exits (VmHWM only
    grows). ru_maxrss (wait4, RUSAGE_CHILDREN) cannot be used: Linux carries the RSS of the
    process that forked/exec'd over into the child's maxrss, so every child would report at
    least this parent's peak."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd, stdout=out if capture else subprocess.DEVNULL, env=python_env()
        )
        peak: int | None = None
        while proc.poll() is None:
            sample = vm_kb("VmHWM", proc.pid)
            if sample is not None:
                peak = max(peak or 0, sample)
            time.sleep(RSS_SAMPLE_SECONDS)
        seconds = time.perf_counter() - started
        out.seek(0)
        return proc.returncode, seconds, peak, out.read().decode()


def child_outcome(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """In a child process: what `work` returns, or its traceback as the error (reported by
    the parent), with the child's peak RSS (`peak_rss_kb`)."""
    try:
        result = work()
    except Exception:
        result = {"error": traceback.format_exc()}
    result["peak_rss_kb"] = vm_kb("VmHWM")
    return result


def child_result(code: int, out: str) -> dict[str, Any]:
    """In the parent: the JSON result a child printed last, or an error naming its exit."""
    try:
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"error": f"child exited {code} without a result (stderr above)"}
    if code != 0 and "error" not in result:
        result["error"] = f"child exited {code}"
    return result


def peak_kb(*samples: int | None) -> int | None:
    """The largest of the peak-RSS figures that are known."""
    known = [kb for kb in samples if kb is not None]
    return max(known) if known else None


# --------------------------------------------------------------------------- CPU


def stat_fields(pid: int | str) -> list[str] | None:
    """/proc/<pid>/stat after the command name: field N of proc(5) is item N - 3 (None if
    the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", errors="replace") as stat:  # comm: any bytes
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_ticks(fields: list[str]) -> int:
    """utime + stime (fields 14 and 15 of proc(5)) of parsed stat fields."""
    return int(fields[11]) + int(fields[12])


def cpu_seconds(pid: int | str) -> float | None:
    """utime + stime of a process, from /proc/<pid>/stat (None if it is gone)."""
    fields = stat_fields(pid)
    return None if fields is None else cpu_ticks(fields) / CLK_TCK


def child_pids(pid: int | str) -> list[int]:
    """The live children of a process (/proc/<pid>/task/*/children)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue  # the thread or the process ended meanwhile
    return out


def tree_cpu_seconds(pid: int | str) -> tuple[float, float]:
    """(the process's CPU s, its live children's CPU s): replicad run with producer
    processes spends part of its CPU in them."""
    own = cpu_seconds(pid) or 0.0
    return own, sum(cpu_seconds(c) or 0.0 for c in child_pids(pid))


def machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the machine, all cores, from /proc/stat. Busy is user, nice,
    system, irq, softirq and steal (guest time is counted in user already); total adds idle
    and iowait."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = values
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


# --------------------------------------------------------------------------- tables


def grid(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned, a rule
    under the head."""
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]

    def fmt(row: tuple[str, ...]) -> str:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        return "  ".join(cells)

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(head), rule, *(fmt(row) for row in rows)])
