"""relay.py's table, ratios and report."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from bench.harness import tables
from bench.measure.relay_io import RAW_MODES
from bench.measure.relay_meters import MB, Result
from bench.workloads.relay_txns import Workload


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


VOLUME_HEAD = ("txns", "event MB", "file MB", "seconds", "MB/s", "txn/s")  # _volume_cells


def format_table(results: list[Result]) -> str:
    head = (
        "write",
        *VOLUME_HEAD,
        "lat p50 µs",
        "p99 µs",
        "max µs",
        "txn max µs",
        "syncs",
        "self CPU",
        "other CPU",
    )
    rows: list[tuple[str, ...]] = []
    for r in results:
        if r.kind != "write":
            continue
        lat = r.latency
        rows.append(
            (
                *_volume_cells(r),
                _us(lat.percentile(50) if lat else None),
                _us(lat.percentile(99) if lat else None),
                _us(lat.max / 1000 if lat else None),
                _us((r.txn_latency or lat).max / 1000 if (r.txn_latency or lat) else None),
                f"{r.syncs:,}" if r.syncs is not None else "-",
                *_cpu_cells(r),
            )
        )
    read_head = (
        "read",
        *VOLUME_HEAD,
        "cache",
        "self CPU",
        "other CPU",
    )
    read_rows: list[tuple[str, ...]] = []
    for r in results:
        if r.kind != "read":
            continue
        read_rows.append(
            (
                *_volume_cells(r),
                r.cache or "-",
                *_cpu_cells(r),
            )
        )
    return tables.grid(head, rows) + "\n\n" + tables.grid(read_head, read_rows)


def _volume_cells(r: Result) -> tuple[str, ...]:
    """The first columns of both tables: name, txns, event MB, file MB, seconds, MB/s, txn/s."""
    return (
        r.name,
        f"{r.digest.txns:,}",
        f"{r.digest.event_bytes / MB:,.1f}",
        f"{r.file_bytes / MB:,.1f}",
        f"{r.seconds:.2f}",
        f"{r.mb_s:,.0f}",
        f"{r.txn_s:,.0f}",
    )


def _cpu_cells(r: Result) -> tuple[str, str]:
    """Cores used by this process / by other processes; '-' for phases under 0.5 s (the
    kernel counts CPU time in ticks of 10 ms)."""
    if r.cpu.get("wall", 0) < 0.5:
        return "-", "-"
    return f"{r.cpu['self_cores']:.2f}", f"{r.cpu['other_cores']:.2f}"


def ratios(results: list[Result]) -> list[dict[str, Any]]:
    """Relay ÷ its raw baseline (MB/s of event bytes; the median of repeats), and the
    latency added per transaction."""
    out = []

    def pick(name: str) -> list[Result]:
        return [r for r in results if r.name == name or r.name.startswith(name + " #")]

    def median(values: list[float]) -> float:
        values = sorted(values)
        return values[len(values) // 2]

    seen: set[str] = set()
    for r in results:
        base_name = r.name.split(" #")[0]
        if not r.baseline or base_name in seen:
            continue
        seen.add(base_name)
        mine, base = pick(base_name), pick(r.baseline)
        if not mine or not base:
            continue
        entry: dict[str, Any] = {
            "relay": base_name,
            "raw": r.baseline,
            "mb_s_ratio": median([m.mb_s for m in mine]) / median([b.mb_s for b in base]),
        }
        if r.kind == "write":
            entry["vs_no_fsync"] = median([m.mb_s for m in mine]) / median(
                [b.mb_s for b in pick(RAW_MODES["none"])]
            )
            for p in (50, 99):
                got = [m.latency.percentile(p) for m in mine if m.latency]
                ref = [b.latency.percentile(p) for b in base if b.latency]
                if got and ref:
                    entry[f"added_p{p}_us"] = median(got) - median(ref)  # type: ignore[arg-type]
        out.append(entry)
    return out


def report(
    info: dict[str, Any],
    workload: Workload,
    args: argparse.Namespace,
    results: list[Result],
    problems: list[str],
    seconds: float,
) -> dict[str, Any]:
    """Print the set-up, the tables, the ratios and the verdict; the results as JSON."""
    print_setup(info, workload, args)
    print(format_table(results))
    print(
        "\nlat: relay = the commit() call (its fdatasync under `transaction`, a due one under "
        "`interval`); raw = write(+fdatasync) of the transaction. txn max: relay = first "
        "append() .. commit() returned (a segment rotation, with its fdatasync of the sealed "
        "segment, happens in the first append() of a transaction). Timed: open() .. close() "
        "(close = final fdatasync), generation excluded. syncs = fdatasync+fsync calls "
        "(manifest and rotations included). self / other CPU: cores used by this process / by "
        "other processes (kernel threads excluded) during the phase. MB = 10^6 B of event bytes."
    )
    table = ratios(results)
    print_ratios(table)
    print_disturbance(results, info["nproc"])
    print(
        f"\ntotal run time {seconds:.0f} s; load average at end "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    for problem in problems:
        print(f"!!! {problem}", file=sys.stderr)
    if not problems:
        n = len([r for r in results if r.name.startswith("relay read, cold (")])
        print(f"verified: all {n} relay directories read back exactly what was written")
    return as_json(info, workload, args, results, table, problems, seconds)


def print_setup(info: dict[str, Any], workload: Workload, args: argparse.Namespace) -> None:
    """The machine, the disk and the workload."""
    fs, dev = info["filesystem"], info["device"]
    print(
        f"machine: {info['nproc']} CPUs ({info['cpu']}), Linux {info['kernel']}, "
        f"Python {info['python']}; load average at start "
        f"{' '.join(f'{x:.2f}' for x in info['loadavg_start'])}"
    )
    print(
        f"disk: {info['dir']} on {fs.get('fstype')} ({fs.get('source')} mounted at "
        f"{fs.get('mount')}, {fs.get('options')}; {fs.get('super_options')}); device "
        f"{dev.get('name', '?')} rotational={dev.get('rotational', '?')} scheduler "
        f"{dev.get('scheduler', '?')}; "
        f"{info['free_gb']} GB free"
    )
    big = (
        f", {workload.big_fraction:.2%} big ({workload.big_mib[0]:g}-{workload.big_mib[1]:g} MiB "
        f"in {workload.big_event_bytes[0]}-{workload.big_event_bytes[1]} B events)"
        if workload.big_fraction
        else ""
    )
    print(
        f"workload: seed {workload.seed}, {workload.events[0]}-{workload.events[1]} events of "
        f"{workload.event_bytes[0]}-{workload.event_bytes[1]} B per transaction{big}; relay "
        f"segments {args.segment_mib} MiB, parts {args.part_kib} KiB, interval "
        f"{args.interval_ms} ms, manifest every 1 s; cold reads: {args.cache}\n"
    )


def print_ratios(table: list[dict[str, Any]]) -> None:
    print("\nrelay ÷ raw (event MB/s):")
    w1 = max((len(e["relay"]) for e in table), default=0)
    w2 = max((len(e["raw"]) for e in table), default=0)
    for entry in table:
        extra = ""
        if "vs_no_fsync" in entry:
            extra = f"  (÷ no fsync {entry['vs_no_fsync']:.2f})"
        if "added_p50_us" in entry:
            extra += (
                f"  added latency p50 {entry['added_p50_us']:+,.1f} µs, "
                f"p99 {entry.get('added_p99_us', 0):+,.1f} µs"
            )
        print(
            f"  {entry['relay']:<{w1}}  ÷ {entry['raw']:<{w2}}  {entry['mb_s_ratio']:5.2f}{extra}"
        )


def print_disturbance(results: list[Result], nproc: int) -> None:
    """A note when other processes or CPU pressure may have disturbed a phase."""
    timed = [r for r in results if r.cpu.get("wall", 0) >= 0.5]
    others = max((r.cpu["other_cores"] for r in timed), default=0.0)
    stall = max((r.cpu.get("cpu_stall_share", -1) for r in timed), default=-1.0)
    if others > 0.3 or stall > 0.1:
        print(
            f"\nnote: other processes used up to {others:.2f} cores during a phase (of "
            f"{nproc}), tasks waited for a CPU up to {max(stall, 0):.0%} of a phase "
            "(PSI cpu some): figures may be disturbed; compare with a re-run"
        )


def as_json(
    info: dict[str, Any],
    workload: Workload,
    args: argparse.Namespace,
    results: list[Result],
    table: list[dict[str, Any]],
    problems: list[str],
    seconds: float,
) -> dict[str, Any]:
    return {
        "machine": info,
        "workload": {
            "seed": workload.seed,
            "txns": args.txns,
            "sync_txns": args.sync_txns,
            "events": workload.events,
            "event_bytes": workload.event_bytes,
            "big_fraction": workload.big_fraction,
            "big_mib": workload.big_mib,
        },
        "options": {
            "segment_mib": args.segment_mib,
            "part_kib": args.part_kib,
            "interval_ms": args.interval_ms,
            "cache": args.cache,
            "repeat": args.repeat,
        },
        "results": [r.as_json() for r in results],
        "ratios": table,
        "problems": problems,
        "seconds": round(seconds, 1),
    }
