"""decode.py's result table and summary lines."""

from __future__ import annotations

import json
import sys
from typing import Any

from bench.harness import tables
from bench.measure.decode_runs import Measured


def format_table(results: list[Measured]) -> str:
    head = ("decoder", "row changes", "seconds", "rows/s", "peak RSS MB", "base RSS MB")
    lines = []
    for m in results:
        if m.error:
            lines.append((m.decoder, "FAILED", "", "", "", ""))
            continue
        lines.append(
            (
                m.decoder,
                f"{m.rows:,}" + ("" if m.rows_counted else "*"),
                f"{m.seconds:.2f}",
                f"{m.rows_per_s:,.0f}",
                f"{m.peak_rss_mb:.1f}" if m.peak_rss_mb is not None else "-",
                f"{m.base_rss_mb:.1f}" if m.base_rss_mb is not None else "-",
            )
        )
    return tables.grid(head, lines)


def speedup(results: list[Measured]) -> float | None:
    by_name = {m.decoder: m for m in results}
    ours, peer = by_name.get("replicad"), by_name.get("python-mysql-replication")
    if not ours or not peer or ours.error or peer.error or not peer.rows_per_s:
        return None
    return ours.rows_per_s / peer.rows_per_s


def report(
    marker: dict[str, Any], built: bool, results: list[Measured], problems: list[str], as_json: bool
) -> None:
    counts = marker["counts"]
    print(
        f"binlog: {', '.join(marker['files'])} in {marker['binlog_dir']} "
        f"({sum(marker['sizes'].values()) / 2**20:.1f} MiB), GTID {marker['gtid_before']} -> "
        f"{marker['gtid_after']}; {counts['c']:,} inserts, {counts['u']:,} updates, "
        f"{counts['d']:,} deletes"
    )
    state = "built now" if built else f"reused, built {marker['built_at']}"
    print(f"build: {marker['build_seconds']} s ({state})\n")
    print(format_table(results))
    ratio = speedup(results)
    print(
        "\n* not counted by this decoder (no row decoding, or output discarded): "
        "rows/s uses the workload's row count"
    )
    print("base RSS: the child's peak RSS after imports, before decoding")
    by_name = {m.decoder: m for m in results}
    peer = by_name.get("python-mysql-replication")
    if peer and peer.detail:
        print(
            f"python-mysql-replication: {peer.detail.get('ended')}, "
            f"{peer.detail.get('reconnects')} reconnect(s)"
        )
    other = by_name["replicad"].detail.get("other_rows") if "replicad" in by_name else 0
    if other:
        print(
            f"note: the files also hold {other:,} row changes of other tables (concurrent "
            "writers); replicad decoded them but they are not in its count"
        )
    if ratio is not None:
        print(f"replicad rows/s / python-mysql-replication rows/s = {ratio:.2f}")
    for problem in problems:
        print(f"\n!!! {problem}", file=sys.stderr)
    if as_json:
        print(
            json.dumps(
                {
                    "binlog": {k: v for k, v in marker.items() if k != "params"},
                    "params": marker["params"],
                    "built_now": built,
                    "results": [m.as_json() for m in results],
                    "replicad_over_peer": round(ratio, 3) if ratio is not None else None,
                    "problems": problems,
                },
                indent=2,
            )
        )
