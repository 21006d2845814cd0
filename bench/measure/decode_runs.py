"""decode.py's measurements: each decoder in its own process (decode loop seconds, peak RSS)
and `mariadb-binlog -v`, on the same binlog."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.harness import children, procstat
from bench.harness.mariadb import Server, restore_net_timeouts, server_args, set_net_timeouts
from bench.harness.paths import BENCH_DIR


@dataclass(slots=True)
class Measured:
    decoder: str
    rows: int
    seconds: float
    peak_rss_mb: float | None
    base_rss_mb: float | None = None
    rows_counted: bool = True  # False: the workload's count is used for rows/s
    counts: dict[str, int] | None = None
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "rows_per_s": round(self.rows_per_s, 1)}


def measure_python(name: str, child_args: list[str]) -> tuple[Measured, dict[str, Any]]:
    cmd = [sys.executable, str(BENCH_DIR / "decode.py"), "--child", *child_args]
    code, wall, sampled_kb, out = children.run_process(cmd, capture=True)
    result = children.child_result(code, out)
    counts = result.get("counts")
    peak = procstat.peak_kb(result.get("peak_rss_kb"), sampled_kb)
    measured = Measured(
        decoder=name,
        rows=sum(counts.values()) if counts else 0,
        seconds=result.get("seconds", wall),  # the decode loop, not interpreter start-up
        peak_rss_mb=megabytes(peak),
        base_rss_mb=megabytes(result.get("base_rss_kb")),
        counts=counts,
        error=result.get("error"),
    )
    return measured, result


def measure_mariadb_binlog(paths: list[str], rows: int) -> Measured:
    exe = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")
    if exe is None:
        return Measured("mariadb-binlog", rows, 0.0, None, error="mariadb-binlog not found")
    cmd = [exe, "--no-defaults", "-v", "--base64-output=decode-rows", *paths]
    code, seconds, peak, _ = children.run_process(cmd, capture=False)
    error = f"exited {code}" if code != 0 else None
    return Measured(
        "mariadb-binlog -v",
        rows,
        seconds,
        megabytes(peak),
        rows_counted=False,
        error=error,
    )


def run_benchmark(server: Server, marker: dict[str, Any]) -> tuple[list[Measured], list[str]]:
    paths = [os.path.join(marker["binlog_dir"], name) for name in marker["files"]]
    expected = marker["counts"]
    expected_total = sum(expected.values())
    problems: list[str] = []
    results: list[Measured] = []

    replicad, raw = measure_python("replicad", ["replicad", "--files", *paths])
    replicad.detail = {"other_rows": raw.get("other_rows", 0)}
    results.append(replicad)

    events, raw = measure_python("replicad events only", ["replicad-events", "--files", *paths])
    events.rows, events.rows_counted = expected_total, False
    events.detail = {k: raw[k] for k in ("events", "rows_events") if k in raw}
    results.append(events)

    # Memory flatness: the first 10% of the largest file vs. the whole file (with one file,
    # the whole file is the full run above).
    name = max(marker["files"], key=lambda n: marker["sizes"][n])
    path = os.path.join(marker["binlog_dir"], name)
    tenth = marker["sizes"][name] // 10
    partial, _ = measure_python(
        f"replicad first 10% of {name}", ["replicad", "--files", path, "--stop", str(tenth)]
    )
    partial.detail = {"file": name, "stop": tenth}
    results.append(partial)
    if len(paths) > 1:
        whole, _ = measure_python(f"replicad whole {name}", ["replicad", "--files", path])
        whole.detail = {"file": name}
        results.append(whole)

    previous = set_net_timeouts(server, 600)
    try:
        peer, raw = measure_python(
            "python-mysql-replication",
            [
                "peer",
                "--gtid-start",
                marker["gtid_before"],
                "--expected",
                str(expected_total),
                "--last-file",
                marker["files"][-1],
                *server_args(server),
            ],
        )
    finally:
        restore_net_timeouts(server, previous)
    peer.detail = {k: raw[k] for k in ("ended", "reconnects") if k in raw}
    results.append(peer)

    results.append(measure_mariadb_binlog(paths, expected_total))

    for m in results:
        if m.error:
            problems.append(f"{m.decoder} FAILED:\n{m.error}")
    if not replicad.error and replicad.counts != expected:
        problems.append(f"replicad counted {replicad.counts}, the workload made {expected}")
    if not peer.error:
        if peer.counts != expected:
            problems.append(
                f"python-mysql-replication counted {peer.counts} ({peer.detail.get('ended')}), "
                f"the workload made {expected}"
            )
        if peer.detail.get("reconnects"):
            problems.append(
                f"python-mysql-replication reconnected {peer.detail['reconnects']} time(s) "
                "(connection reset by the server); its figures are not comparable"
            )
    if not replicad.error and not peer.error and replicad.rows != peer.rows:
        problems.append(
            f"ROW COUNT MISMATCH: replicad {replicad.rows} vs python-mysql-replication {peer.rows}"
        )
    return results, problems


def megabytes(kb: int | None) -> float | None:
    return kb / 1024 if kb is not None else None
