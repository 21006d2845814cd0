"""peers.py's side-by-side table."""

from __future__ import annotations

from typing import Any

from bench.harness import tables

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
    return tables.grid(head, rows), records
