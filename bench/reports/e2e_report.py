"""e2e.py's report: the throughput and latency tables, the CPU lines and the verdicts."""

from __future__ import annotations

import os
from typing import Any

from bench.harness import tables
from bench.workloads.e2e_load import DATABASE, OPS, ROWS_PER_TRANSACTION, TABLE

TARGET_RATIO = 2.0  # e2e time <= 2x decode-only time


TARGET_P99_MS = 100.0  # p99 commit -> ack at 5k rows/s


def _mb(kb: int | None) -> str:
    return f"{kb / 1024:.1f}" if kb is not None else "-"


def _rate(n: float, seconds: float | None) -> str:
    return f"{n / seconds:,.0f}" if seconds else "-"


def thread_split(groups: dict[str, float] | None) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted((groups or {}).items())) or "-"


def cpu_line(cpu: dict[str, Any]) -> str:
    """The processes' CPU seconds, and what the rest of the machine used meanwhile (another
    test run, for instance, which makes the phase's figures unreliable)."""
    procs = {k: v for k, v in cpu.items() if k not in ("wall_s", "machine busy", "machine total")}
    other = cpu["machine busy"] - sum(procs.values())
    return (
        f"CPU s over {cpu['wall_s']:.2f} s: "
        + ", ".join(f"{k} {v:.2f}" for k, v in procs.items())
        + f", other processes {max(other, 0.0):.2f}; machine busy {cpu['machine busy']:.2f} "
        f"of {cpu['machine total']:.2f}"
    )


def _pct_row(label: str, p: dict[str, float] | None) -> tuple[str, ...]:
    if p is None:
        return (label, "-", "-", "-", "-", "0")
    return (label, *(f"{p[k]:.1f}" for k in ("p50", "p90", "p99", "max")), f"{p['n']:,}")


def report_throughput(results: dict[str, Any], verdicts: list[str]) -> None:
    t = results["throughput"]
    rows = sum(t["expected"][op] for op in OPS)
    print(
        f"\nThroughput: {rows:,} row changes = {t['messages']:,} messages (tombstones on: one "
        f"more per delete), {t['message_bytes'] / 2**20:.1f} MiB of keys and values"
    )
    head = ("", "seconds", "rows/s", "msgs/s", "CPU s", "peak RSS MB")
    lines = decoder_rows(results, rows) + end_to_end_rows(t, rows)
    ceiling = results.get("ceiling")
    if ceiling:
        lines.append(ceiling_row(ceiling))
    print(tables.grid(head, lines))
    print(
        "CPU s and peak RSS (VmHWM): the decoding child's; for end to end, the replicad process "
        "(utime+stime); for the ceiling, the producing process"
    )
    print("e2e phase " + cpu_line(t["cpu"]))
    print(f"replicad's CPU s by thread: {thread_split(t.get('replicad_threads_cpu_s'))}")
    if ceiling:
        print("ceiling phase " + cpu_line(ceiling["cpu"]))
    ratio_verdict(results, verdicts)
    print_profile(t.get("profile"))


def decoder_rows(results: dict[str, Any], rows: int) -> list[tuple[str, ...]]:
    """The decode-only and decode + encode children's rows of the throughput table."""
    lines: list[tuple[str, ...]] = []
    for label, name in (
        ("decode only (replicad decoder, from disk)", "decode_only"),
        ("decode + KafkaSink.publish, null producer", "decode_encode"),
    ):
        d = results.get(name) or {}
        if d.get("error") or "seconds" not in d:
            lines.append((label, "FAILED", "", "", "", ""))
            continue
        msgs = d.get("messages_by_topic", {}).get(f"{results['pipeline']}.{DATABASE}.{TABLE}")
        lines.append(
            (
                label,
                f"{d['seconds']:.2f}",
                _rate(rows, d["seconds"]),
                _rate(msgs, d["seconds"]) if msgs else "-",
                f"{d['cpu_s']:.2f}",
                _mb(d.get("peak_rss_kb")),
            )
        )
    return lines


def end_to_end_rows(t: dict[str, Any], rows: int) -> list[tuple[str, ...]]:
    """End to end, split into start-up and streaming."""
    lines: list[tuple[str, ...]] = []
    rss, cpu_s = t["replicad_peak_rss_mb"], t["replicad_cpu_s"]
    lines.append(
        (
            "end to end (spawn -> last message consumed)",
            f"{t['e2e_s']:.2f}",
            _rate(rows, t["e2e_s"]),
            _rate(t["messages"], t["e2e_s"]),
            f"{cpu_s:.2f}" if cpu_s is not None else "-",
            f"{rss:.1f}" if rss is not None else "-",
        )
    )
    lines.append(("  start-up (spawn -> first message)", f"{t['startup_s']:.2f}", *[""] * 4))
    lines.append(
        (
            "  streaming (first -> last message)",
            f"{t['streaming_s']:.2f}",
            _rate(rows, t["streaming_s"]),
            _rate(t["messages"], t["streaming_s"]),
            "",
            "",
        )
    )
    return lines


def ceiling_row(ceiling: dict[str, Any]) -> tuple[str, ...]:
    return (
        "broker ceiling: same messages, producer only",
        f"{ceiling['seconds']:.2f}",
        "",
        _rate(ceiling["messages"], ceiling["seconds"]),
        f"{ceiling['cpu']['this script']:.2f}",
        "",
    )


def ratio_verdict(results: dict[str, Any], verdicts: list[str]) -> None:
    """e2e time over decode-only time against TARGET_RATIO, printed and kept as a verdict."""
    t = results["throughput"]
    dec = results.get("decode_only") or {}
    if dec.get("seconds"):
        ratio = t["e2e_s"] / dec["seconds"]
        stream_ratio = t["streaming_s"] / dec["seconds"]
        ok = "MET" if ratio <= TARGET_RATIO else "MISSED"
        verdict = (
            f"e2e time / decode-only time = {ratio:.2f} (streaming only: {stream_ratio:.2f}); "
            f"target <= {TARGET_RATIO:.0f}: {ok}"
        )
        print(verdict)
        verdicts.append(verdict)


def print_profile(profile: dict[str, Any] | None) -> None:
    """py-spy's top functions, when it sampled the e2e phase."""
    if profile:
        if profile.get("error"):
            print(f"py-spy failed: {profile['error']}")
        else:
            print(
                f"\npy-spy on replicad during the e2e phase: {profile['samples']:,} samples "
                "(the timings above are inflated by the sampling)"
            )
            for title, key in (("self", "self_pct"), ("inclusive", "inclusive_pct")):
                print(f"  top {title} %:")
                for name, pct in profile[key]:
                    print(f"    {pct:5.1f}  {name}")


def report_latency(results: dict[str, Any], verdicts: list[str]) -> None:
    lat = results["latency"]
    wr = lat["writer"]
    args = results["args"]
    print(
        f"\nLatency: {wr['rows']:,} rows in {wr['transactions']:,} autocommit INSERTs of "
        f"{wr['batch']} rows, target {args['rate']:,} rows/s for {args['seconds']:g} s: achieved "
        f"{lat['achieved_rows_per_s']:,.0f} rows/s, max start lateness "
        f"{wr['max_late_s'] * 1000:.1f} ms; consumed {lat['consumed']:,}; Kafka timestamps: "
        f"{lat['kafka_timestamp_type']}"
    )
    head = ("ms", "p50", "p90", "p99", "max", "n")
    lines = [
        _pct_row("commit (ts=NOW(6)) -> consumed", lat["commit_to_consume_ms"]),
        _pct_row("commit (ts=NOW(6)) -> produce() timestamp", lat["commit_to_produce_ts_ms"]),
        _pct_row("COMMIT returned to client -> consumed", lat["commit_ok_to_consume_ms"]),
    ]
    base = results.get("broker_latency")
    if base:
        lines.append(
            _pct_row("broker alone: produce() -> delivery report", base["produce_to_ack_ms"])
        )
        lines.append(_pct_row("broker alone: produce() -> consumed", base["produce_to_consume_ms"]))
    during = results.get("latency_snapshot")
    if during:
        lines.append(
            _pct_row(
                "commit -> consumed, incremental snapshot running", during["commit_to_consume_ms"]
            )
        )
    print(tables.grid(head, lines))
    if during:
        snap = during["snapshot"]
        print(
            f"during the second phase the snapshot emitted {snap['rows_emitted']:,} reads in "
            f"{snap['chunks']} chunks of {snap['chunk_rows']:,} rows (finished: "
            f"{snap['done_during_phase']}); achieved {during['achieved_rows_per_s']:,.0f} rows/s, "
            f"consumed {during['consumed']:,} of {during['writer']['rows']:,}"
        )
    print("latency phase " + cpu_line(lat["cpu"]))
    print(f"replicad's CPU s by thread: {thread_split(lat.get('replicad_threads_cpu_s'))}")
    if base:
        print("broker-alone phase " + cpu_line(base["cpu"]))
    p99 = (lat["commit_to_consume_ms"] or {}).get("p99")
    if p99 is not None:
        ok = "MET" if p99 <= TARGET_P99_MS else "MISSED"
        verdict = (
            f"p99 commit -> consume {p99:.1f} ms (an upper bound of commit -> ack); target p99 "
            f"commit -> ack <= {TARGET_P99_MS:.0f} ms at {args['rate']:,} rows/s: {ok}"
        )
        print(verdict)
        verdicts.append(verdict)


def report(results: dict[str, Any]) -> list[str]:
    """Print the report; returns the verdict lines (also kept in the JSON)."""
    verdicts: list[str] = []
    w = results["workload"]
    print(
        f"MariaDB {w['server_version']} -> replicad run (Kafka sink, at-least-once defaults) -> "
        f"Kafka API at {results['bootstrap']} ({results['broker']}); {os.cpu_count()} CPUs, "
        f"load average at start {results['loadavg_start']}"
    )
    c = w["counts"]
    print(
        f"load: {c['c']:,} inserts, {c['u']:,} updates, {c['d']:,} deletes in "
        f"{ROWS_PER_TRANSACTION}-row transactions, {w['seconds']:.1f} s "
        f"({_rate(sum(c.values()), w['seconds'])} rows/s) with replicad stopped; binlog "
        f"{w['start']['file']}:{w['start']['pos']} -> {w['end']['file']}:{w['end']['pos']} "
        f"({w['bytes'] / 2**20:.1f} MiB)"
    )
    if results.get("throughput"):
        report_throughput(results, verdicts)
    if results.get("latency"):
        report_latency(results, verdicts)
    r = results.get("replicad", {})
    if r:
        print(
            f"\nreplicad: exit code {r.get('exit_code')} after SIGTERM; log lines by level "
            f"{r.get('log_levels')}; warnings/errors: {r.get('notable') or 'none'}"
        )
    return verdicts
