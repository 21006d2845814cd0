"""publish.py's tables and summary lines."""

from __future__ import annotations

import os
from typing import Any

from bench.harness import procstat, tables
from bench.reports import e2e_report
from bench.workloads.publish_binlog import BIG_TABLE, DATABASE, ROWS_PER_TRANSACTION

TARGET_DUMP_OVER_MARIADB = 1.0


TARGET_DECODE_OVER_PEER = 25.0


# Issue 38's goals: publish CPU per row at most this many times dump's, by delivery mode.
TARGET_PUBLISH_OVER_DUMP_CPU = {"at-least-once": 3.0, "exactly-once": 3.5}


FLOOR = "librdkafka producer alone (same messages, headers, callbacks)"


FLOOR_BARE = "librdkafka producer alone, no headers, no callback"


PROCESSES_LABEL = "at-least-once, producer_processes"


TARGET_N2_ROWS_PER_S = 150_000


OTHER_CORES_WARN = 0.3  # "other processes" above this many cores: a disturbed run


def _f(value: float | None, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def _row(
    name: str,
    rows: int,
    seconds: float,
    cpu: float | None,
    rss_kb: int | None,
    dump_cpu_per_row: float | None,
) -> tuple[str, ...]:
    per_row = cpu / rows if cpu is not None and rows else None
    ratio = per_row / dump_cpu_per_row if per_row is not None and dump_cpu_per_row else None
    return (
        name,
        f"{rows:,}",
        f"{seconds:.2f}",
        f"{rows / seconds:,.0f}" if seconds > 0 else "-",
        _f(cpu),
        _f(per_row * 1e6 if per_row is not None else None, ".2f"),
        f"{rows / cpu:,.0f}" if cpu else "-",
        _f(ratio),
        _f(rss_kb / 1024 if rss_kb is not None else None, ".1f"),
    )


def other_note(cpu: dict[str, Any]) -> None:
    other = busy_elsewhere(cpu)
    if other > OTHER_CORES_WARN:
        print(
            f"    note: other processes used {other:.2f} cores during this run: "
            "its figures may be disturbed (re-run on a quiet machine)"
        )


def busy_elsewhere(cpu: dict[str, Any]) -> float:
    """Cores used by processes other than the watched ones during a phase (procstat.CpuWatch)."""
    mine = sum(v for k, v in cpu.items() if k not in ("wall_s", "machine busy", "machine total"))
    return max(cpu["machine busy"] - mine, 0.0) / cpu["wall_s"] if cpu["wall_s"] else 0.0


def report(results: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Print the tables; (summary lines, problems)."""
    problems = list(results["problems"])
    print_header(results)
    decoders = {d["name"]: d for d in results["decoders"]}
    dump = decoders["replicad dump"]
    dump_per_row = None if dump.get("error") else dump["cpu_s"] / dump["rows"]
    print(tables.grid(MAIN_HEAD, main_rows(results, dump_per_row, problems)))
    print_notes(results)
    print_latency(results, problems)
    if "big" in results:
        report_big(results, dump, problems)
    return summary(results, decoders, dump_per_row), problems


def print_header(results: dict[str, Any]) -> None:
    """The binlog, the machine and the code measured."""
    b = results["binlog"]
    c = b["counts"]
    print(
        f"binlog: {', '.join(b['names'])} ({b['bytes'] / 2**20:.1f} MiB), {b['start']['file']}:"
        f"{b['start']['pos']} -> {b['end']['file']}:{b['end']['pos']}; {c['c']:,} inserts, "
        f"{c['u']:,} updates, {c['d']:,} deletes in {ROWS_PER_TRANSACTION}-row transactions "
        f"({b['seconds']:.1f} s); {os.cpu_count()} CPUs, load average at start "
        f"{results['loadavg_start']}; compiled decoder available: {results['compiled']}; "
        f"bytecode written before the runs: {results['bytecode']['ok']} "
        f"(PYTHONDONTWRITEBYTECODE={results['bytecode']['PYTHONDONTWRITEBYTECODE']!r}); "
        f"broker: {results.get('broker', 'not started')}"
    )
    code = results["code"]
    print(
        f"code: {code['commit']}, {len(code['uncommitted'])} uncommitted file(s) under "
        f"replicad/ {[line[3:] for line in code['uncommitted']]}; compiled modules built "
        f"{code['speedups_built']}\n"
    )


MAIN_HEAD = (
    "measurement",
    "row changes",
    "seconds",
    "rows/s",
    "CPU s",
    "CPU µs/row",
    "rows/s/core",
    "CPU/row ÷ dump",
    "peak RSS MB",
)


def main_rows(
    results: dict[str, Any], dump_per_row: float | None, problems: list[str]
) -> list[tuple[str, ...]]:
    """A row per decoder, two per `replicad run` (spawn -> last, first -> last) and one per
    librdkafka floor; failures and count mismatches go to `problems`."""
    lines: list[tuple[str, ...]] = []
    for d in results["decoders"]:
        if d.get("error"):
            lines.append((d["name"], "FAILED", *[""] * 7))
            problems.append(f"{d['name']} FAILED:\n{d['error']}")
            continue
        cpu = d.get("loop_cpu_s", d["cpu_s"])
        lines.append(_row(d["name"], d["rows"], d["seconds"], cpu, d["peak_rss_kb"], dump_per_row))
    for p in results["publish"]:
        name = f"replicad run, {p['label']}"
        if p.get("error"):
            lines.append((name, "FAILED", *[""] * 7))
            problems.append(f"{name} FAILED:\n{p['error']}")
            continue
        rss = procstat.peak_kb(p["peak_rss_kb"], p.get("peak_rss_after_latency_kb"))
        lines.append(
            _row(
                f"{name}: spawn -> last consumed",
                p["rows"],
                p["wall_s"],
                p["cpu_s"],
                rss,
                dump_per_row,
            )
        )
        lines.append(
            _row(
                f"{name}: first -> last consumed",
                p["streaming_rows"],
                p["streaming_s"],
                p["streaming_cpu_s"],
                None,
                dump_per_row,
            )
        )
        if p["counts"] != p["expected"]:
            problems.append(f"{name}: consumed {p['counts']}, expected {p['expected']}")
        if p.get("exit_code") not in (0, None):
            # All its messages were consumed (read_committed: exactly-once's transactions had
            # committed), but a stop that fails is a finding (its log stays in the kept temp
            # dir).
            problems.append(f"{name}: replicad exited {p['exit_code']} when stopped")
    for f in results.get("floor", []):
        if f.get("error"):
            lines.append((f["name"], "FAILED", *[""] * 7))
            problems.append(f"{f['name']} FAILED:\n{f['error']}")
            continue
        lines.append(
            _row(f["name"], f["rows"], f["seconds"], f["cpu_s"], f["peak_rss_kb"], dump_per_row)
        )
    return lines


def print_notes(results: dict[str, Any]) -> None:
    """What the columns mean, then per process its wall, CPU and message figures."""
    print(
        "\nseconds: mariadb-binlog and replicad dump: the process's wall time (output to "
        "/dev/null); decode only and python-mysql-replication: the decode loop inside the child "
        "(the peer's includes connecting); replicad run: spawn or first message consumed -> "
        "last message consumed. CPU: user+sys of the process (wait4; /proc/<pid>/stat for "
        "replicad run, the broker excluded); for decode only and the peer, the loop's "
        "process_time. row changes: the workload's count for the tools (they count nothing); "
        "for first -> last, the rows not yet consumed at the first message. peak RSS: VmHWM "
        "(replicad run: the whole run, latency phases included)."
    )
    for d in results["decoders"]:
        if "wall_s" in d and "loop_cpu_s" in d:
            print(
                f"  {d['name']}: process wall {d['wall_s']:.2f} s, process CPU "
                f"{d['cpu_s']:.2f} s"
                + (f", {d['other_rows']:,} rows of other tables" if d.get("other_rows") else "")
            )
    for p in results["publish"]:
        if not p.get("error"):
            print(
                f"  replicad run, {p['label']}: start-up {p['startup_s']:.2f} s, {p['messages']:,} "
                f"messages ({p['counts']['tombstones']:,} tombstones), exit code "
                f"{p['exit_code']}; CPU s by thread {e2e_report.thread_split(p['threads_cpu_s'])}; "
                + e2e_report.cpu_line(p["machine_cpu"])
            )
            other_note(p["machine_cpu"])
    for f in results.get("floor", []):
        if not f.get("error"):
            n = f["messages"]
            print(
                f"  {f['name']}: {n:,} messages (the at-least-once run's, tombstones "
                f"included), {f['samples']:,} of its consumed messages cycled (key "
                f"{f['sample_key_avg']:.1f} B, value {f['sample_value_avg']:.1f} B on average; "
                f"the whole run: {f['run_key_avg']:.1f} B, {f['run_value_avg']:.1f} B); "
                f"process CPU {f['cpu_s']:.2f} s (wait4) = {f['cpu_s'] / n * 1e6:.2f} µs/message; "
                f"produce loop + flush {f['seconds']:.2f} s wall, {f['loop_cpu_s']:.2f} s CPU = "
                f"{f['loop_cpu_s'] / f['rows'] * 1e6:.2f} µs/row, "
                f"{f['loop_cpu_s'] / n * 1e6:.2f} µs/message; "
                + e2e_report.cpu_line(f["machine_cpu"])
            )
            other_note(f["machine_cpu"])


def print_latency(results: dict[str, Any], problems: list[str]) -> None:
    """The latency table of the at-least-once runs (or that it was not measured)."""
    latency_lines = []
    for p in results["publish"]:
        for lat in p.get("latency", []):
            w, ms = lat["writer"], lat["commit_to_consume_ms"] or {}
            latency_lines.append(
                (
                    str(p.get("producer_processes", 1)),
                    f"{lat['offered_rows_per_s']:,}",
                    f"{w['batch']:,}",
                    _f(lat["achieved_rows_per_s"], ",.0f"),
                    _f(ms.get("p50"), ".1f"),
                    _f(ms.get("p90"), ".1f"),
                    _f(ms.get("p99"), ".1f"),
                    _f(ms.get("max"), ".1f"),
                    f"{lat['consumed']:,} / {w['rows']:,}",
                    _f(w["max_late_s"] * 1000, ".0f"),
                    _f(lat["replicad_cpu_s"]),
                )
            )
            if lat["consumed"] != w["rows"]:
                problems.append(
                    f"latency at {lat['offered_rows_per_s']:,} rows/s: consumed "
                    f"{lat['consumed']:,} of {w['rows']:,}"
                )
    if latency_lines:
        print(
            "\nLatency commit (ts = NOW(6)) -> consumed, at-least-once replicad caught up "
            "(bench/e2e.py's writer):"
        )
        print(
            tables.grid(
                (
                    "producer processes",
                    "offered rows/s",
                    "rows/txn",
                    "achieved rows/s",
                    "p50 ms",
                    "p90 ms",
                    "p99 ms",
                    "max ms",
                    "consumed",
                    "writer max late ms",
                    "pipeline process CPU s",
                ),
                latency_lines,
            )
        )
    else:
        print("\nLatency: not measured (--skip-latency)")


def report_big(results: dict[str, Any], dump: dict[str, Any], problems: list[str]) -> None:
    """One transaction of --big-transaction rows next to the normal workload's figures."""
    big, b = results["big"], results["big"]["binlog"]
    rows, big_run = big["rows"], big["publish"]
    if b["counts"]["c"] != rows:
        problems.append(f"the big transaction inserted {b['counts']['c']:,} rows, not {rows:,}")
    print(
        f"\nOne transaction of {rows:,} inserted rows ({DATABASE}.{BIG_TABLE}, t's shape; "
        f"{b['seconds']:.1f} s to write): {', '.join(b['names'])} ({b['bytes'] / 2**20:.1f} "
        f"MiB), {b['start']['file']}:{b['start']['pos']} -> {b['end']['file']}:"
        f"{b['end']['pos']}; against the normal workload ({results['binlog']['bytes'] / 2**20:.1f}"
        f" MiB, {ROWS_PER_TRANSACTION}-row transactions):"
    )
    print(tables.grid(BIG_HEAD, big_rows(results, dump, problems)))
    for p in big.get("processes", []):
        if not p.get("error"):
            kb = [k for k in p["children_peak_rss_kb"] if k]
            print(
                f"  big, {p['producer_processes']} producer processes: each producer "
                f"process's peak RSS {', '.join(f'{k / 1024:.0f}' for k in kb)} MB (the row "
                "above is the pipeline process's)"
            )
            if p["counts"] != p["expected"]:
                problems.append(f"big, producer processes: consumed {p['counts']}")
    print(
        "peak RSS: VmHWM of the process (replicad run: at the last message consumed). "
        "seconds: wall time of the process (dump), spawn or first message consumed -> last "
        "message consumed (run)."
    )
    if not big_run.get("error"):
        ok = big_run["messages"] == rows and big_run["counts"] == big_run["expected"]
        print(
            f"  big run: {big_run['messages']:,} messages consumed, {rows:,} expected: "
            f"{'OK' if ok else 'MISMATCH'}; start-up {big_run['startup_s']:.2f} s; CPU s by "
            f"thread {e2e_report.thread_split(big_run['threads_cpu_s'])}; "
            + e2e_report.cpu_line(big_run["machine_cpu"])
        )
        other_note(big_run["machine_cpu"])
        if not ok:
            problems.append(
                f"big transaction: consumed {big_run['messages']:,} messages "
                f"({big_run['counts']}), expected {rows:,} ({big_run['expected']})"
            )


BIG_HEAD = (
    "measurement",
    "rows/txn",
    "row changes",
    "seconds",
    "rows/s",
    "CPU s",
    "CPU µs/row",
    "peak RSS MB",
)


def _big_row(
    name: str, per_txn: int, n: int, sec: float, cpu: float, kb: int | None
) -> tuple[str, ...]:
    r = _row(name, n, sec, cpu, kb, None)
    return (r[0], f"{per_txn:,}", *r[1:6], r[8])


def big_rows(
    results: dict[str, Any], dump: dict[str, Any], problems: list[str]
) -> list[tuple[str, ...]]:
    """replicad dump and replicad run, normal workload and big transaction (and with
    producer processes); failures go to `problems`."""
    big = results["big"]
    rows = big["rows"]
    normal = next(
        (p for p in results["publish"] if p["label"] == "at-least-once" and not p.get("error")),
        None,
    )
    lines: list[tuple[str, ...]] = []
    for label, per_txn, d in (("normal", ROWS_PER_TRANSACTION, dump), ("big", rows, big["dump"])):
        name = f"replicad dump, {label}"
        if d.get("error"):
            lines.append((name, "FAILED", *[""] * 6))
            problems.append(f"{name} FAILED:\n{d['error']}")
        else:
            lines.append(
                _big_row(name, per_txn, d["rows"], d["seconds"], d["cpu_s"], d["peak_rss_kb"])
            )
    big_run = big["publish"]
    runs = [("normal", ROWS_PER_TRANSACTION, normal), ("big", rows, big_run)]
    runs += [
        (f"big, {p['producer_processes']} producer processes", rows, p)
        for p in big.get("processes", [])
    ]
    for label, per_txn, p in runs:
        name = f"replicad run at-least-once, {label}"
        if p is None or p.get("error"):
            lines.append((name, "FAILED", *[""] * 6))
            if p is not None:
                problems.append(f"{name} FAILED:\n{p['error']}")
            continue
        lines.append(
            _big_row(
                f"{name}: spawn -> last",
                per_txn,
                p["rows"],
                p["wall_s"],
                p["cpu_s"],
                p["peak_rss_kb"],
            )
        )
        lines.append(
            _big_row(
                f"{name}: first -> last",
                per_txn,
                p["streaming_rows"],
                p["streaming_s"],
                p["streaming_cpu_s"],
                None,
            )
        )
    return lines


def summary(
    results: dict[str, Any], decoders: dict[str, Any], dump_per_row: float | None
) -> list[str]:
    """The summary lines: each goal met or missed, and what the figures mean."""
    runs = {p["label"]: p for p in results["publish"] if not p.get("error")}
    lines = decoder_verdicts(decoders)
    lines += publish_verdicts(runs, dump_per_row)
    lines += relay_lines(runs, results["args"]["skip_relay"])
    lines.extend(processes_summary(runs, dump_per_row))
    lines += floor_lines(results, runs, dump_per_row)
    lines += big_lines(results, decoders, runs.get("at-least-once"))
    return lines


def _verdict(label: str, value: float | None, goal: float, at_least: bool) -> str:
    if value is None:
        return f"{label}: not measured"
    ok = value >= goal if at_least else value <= goal
    sign = ">=" if at_least else "<="
    return f"{label} = {value:.2f} (goal {sign} {goal:g}): {'MET' if ok else 'MISSED'}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def decoder_verdicts(decoders: dict[str, Any]) -> list[str]:
    """replicad dump against mariadb-binlog, the decoder against python-mysql-replication."""

    def rate(name: str) -> float | None:
        d = decoders.get(name) or {}
        return None if d.get("error") or not d.get("seconds") else d["rows"] / d["seconds"]

    dump, mdb = rate("replicad dump"), rate("mariadb-binlog -v --base64-output=decode-rows")
    ours = rate("replicad decode only (iter_row_changes)")
    peer = rate("python-mysql-replication (from the server)")
    lines = [
        _verdict(
            "replicad dump rows/s ÷ mariadb-binlog rows/s",
            _ratio(dump, mdb),
            TARGET_DUMP_OVER_MARIADB,
            True,
        ),
        _verdict(
            "decode-only rows/s ÷ python-mysql-replication rows/s",
            _ratio(ours, peer),
            TARGET_DECODE_OVER_PEER,
            True,
        ),
    ]
    return lines


def publish_verdicts(runs: dict[str, Any], dump_per_row: float | None) -> list[str]:
    """Publishing CPU per row against dump's, at-least-once and exactly-once."""
    lines: list[str] = []
    for label in ("at-least-once", "exactly-once"):
        p = runs.get(label)
        whole = _ratio(_ratio(p["cpu_s"], p["rows"]), dump_per_row) if p else None
        stream = (
            _ratio(_ratio(p["streaming_cpu_s"], p["streaming_rows"]), dump_per_row) if p else None
        )
        line = _verdict(
            f"publish CPU/row ÷ dump CPU/row, {label}, spawn -> last",
            whole,
            TARGET_PUBLISH_OVER_DUMP_CPU[label],
            False,
        )
        lines.append(line + (f"; streaming only {stream:.2f}" if stream is not None else ""))
        threads = (p or {}).get("threads_cpu_s") or {}
        if threads.get("librdkafka threads") is not None:
            own = threads["librdkafka threads"] / p["rows"]
            share = _ratio(own, dump_per_row)
            lines.append(
                f"  of which librdkafka's own threads (batching, protocol, sockets): "
                f"{own * 1e6:.2f} µs/row = {_f(share)}× dump's CPU per row. The run also "
                "decodes and encodes every row as dump does, so with librdkafka this ratio "
                f"stays above 1 + {_f(share)} = {_f(None if share is None else 1 + share)} "
                "whatever the Python side costs"
            )
    return lines


def relay_lines(runs: dict[str, Any], skipped: bool) -> list[str]:
    lines: list[str] = []
    on, off = runs.get("at-least-once, relay on"), runs.get("at-least-once")
    if on and off:

        def speed(run: dict[str, Any], rows: str, seconds: str) -> str:
            return _f(_ratio(run[rows], run[seconds]), ",.0f")

        lines.append(
            f"relay log on / off, wall rows/s spawn -> last: {speed(on, 'rows', 'wall_s')} / "
            f"{speed(off, 'rows', 'wall_s')}; first -> last: "
            f"{speed(on, 'streaming_rows', 'streaming_s')} / "
            f"{speed(off, 'streaming_rows', 'streaming_s')}"
        )
    elif not skipped:
        lines.append("relay log on / off: not measured (a run failed)")
    return lines


def floor_lines(
    results: dict[str, Any], runs: dict[str, Any], dump_per_row: float | None
) -> list[str]:
    """The librdkafka floor against dump's CPU per row and the at-least-once run's."""
    lines: list[str] = []
    floors = {f["name"]: f for f in results.get("floor", []) if not f.get("error")}
    floor, bare, alo = floors.get(FLOOR), floors.get(FLOOR_BARE), runs.get("at-least-once")
    if floor:
        x = floor["cpu_s"] / floor["rows"]
        stream = _ratio(alo["streaming_cpu_s"], alo["streaming_rows"]) if alo else None
        lines.append(
            f"librdkafka floor (same messages, headers, callbacks): {x * 1e6:.2f} µs/row = "
            f"{_f(_ratio(x, dump_per_row))}× dump's CPU per row; replicad run at-least-once "
            f"streaming: {_f(stream * 1e6 if stream else None)} µs/row = "
            f"{_f(_ratio(stream, x))}× the floor"
        )
        loop = floor["loop_cpu_s"] / floor["rows"]
        lines.append(
            f"  the floor's produce loop + flush alone (no interpreter start-up or imports): "
            f"{loop * 1e6:.2f} µs/row = {_f(_ratio(loop, dump_per_row))}× dump's; replicad "
            f"streaming = {_f(_ratio(stream, loop))}× that"
        )
        if bare:
            y = bare["cpu_s"] / bare["rows"]
            lines.append(
                f"librdkafka without headers and callbacks: {y * 1e6:.2f} µs/row (the 4 "
                f"headers and the callback cost {(x - y) * 1e6:.2f} µs/row)"
            )
    elif results.get("publish"):
        lines.append("librdkafka floor: not measured (the at-least-once run or the child failed)")
    return lines


def big_lines(
    results: dict[str, Any], decoders: dict[str, Any], alo: dict[str, Any] | None
) -> list[str]:
    """Peak RSS with one big transaction against the normal workload."""
    lines: list[str] = []
    big = results.get("big")
    if big:
        d, p = big["dump"], big["publish"]
        normal_dump = decoders.get("replicad dump") or {}

        def mb(kb: int | None) -> str:
            return _f(kb / 1024 if kb is not None else None, ".0f")

        dump_mb, normal_dump_mb = mb(d.get("peak_rss_kb")), mb(normal_dump.get("peak_rss_kb"))
        run_mb, normal_run_mb = mb(p.get("peak_rss_kb")), mb(alo and alo.get("peak_rss_kb"))
        lines.append(
            f"one {big['rows']:,}-row transaction, peak RSS: replicad dump {dump_mb} MB (normal "
            f"workload {normal_dump_mb} MB), replicad run at-least-once {run_mb} MB (normal "
            f"{normal_run_mb} MB); messages {p.get('messages', 0):,} of {big['rows']:,}"
        )
    return lines


def processes_summary(runs: dict[str, Any], dump_per_row: float | None) -> list[str]:
    """End-to-end rows/s and CPU per row with N producer processes against N = 1."""
    one = runs.get("at-least-once")
    many = sorted(
        (p for label, p in runs.items() if label.startswith(PROCESSES_LABEL)),
        key=lambda p: p["producer_processes"],
    )
    if not one or not many:
        return ["producer processes: not measured"]
    lines = []
    for p in [one, *many]:
        n = p.get("producer_processes", 1)
        wall = p["rows"] / p["wall_s"]
        stream = p["streaming_rows"] / p["streaming_s"] if p["streaming_s"] else None
        cpu = p["cpu_s"] / p["rows"]
        line = (
            f"N = {n}: {wall:,.0f} rows/s spawn -> last, {_f(stream, ',.0f')} rows/s streaming; "
            f"CPU {cpu * 1e6:.2f} µs/row (producer processes {p.get('children_cpu_s', 0):.1f} "
            f"s of {p['cpu_s']:.1f} s) = {_f(cpu / dump_per_row if dump_per_row else None)}× dump"
        )
        if p["streaming_rows"]:
            line += (
                f"; streaming: the pipeline process "
                f"{p['streaming_own_cpu_s'] / p['streaming_rows'] * 1e6:.2f} µs/row, producer "
                f"processes {p['streaming_children_cpu_s'] / p['streaming_rows'] * 1e6:.2f} µs/row"
            )
        if n == 2:
            met = "MET" if wall >= TARGET_N2_ROWS_PER_S else "MISSED"
            line += f"; goal >= {TARGET_N2_ROWS_PER_S:,} rows/s spawn -> last: {met}"
        lines.append(line)
    return lines
