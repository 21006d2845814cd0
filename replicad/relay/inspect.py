"""`replicad relay inspect`: what a relay directory holds and whether it is healthy.

Without `verify`, only the MANIFEST and the segment files' sizes are looked at (what the
writer checks at open). With `verify`, every segment is read (SegmentScan): record CRCs and
framing, the transaction grammar, headers against the MANIFEST, footers against the records.

Findings are of two kinds:
- problems (the relay is damaged: exit non-zero): a missing or short segment, bytes that
  fail their CRC or framing, a segment that is not the one the MANIFEST names, a footer that
  contradicts its records, a segment the MANIFEST does not list (the writer refuses those);
- warnings: a summary in the MANIFEST that is stale, a gap between segments, a durable offset
  that is not where a transaction ends. The data is intact and the writer repairs or ignores
  them.
A torn tail of the current segment (a transaction being written, or cut by a crash) is
neither: it is reported, and the writer cuts it at its next open.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from replicad.binlog.position import Position
from replicad.errors import InvalidPositionError, RelayCorruptError, RelayError, ReplicadError
from replicad.relay.files import SegmentScan
from replicad.relay.manifest import (
    MANIFEST,
    Manifest,
    SegmentInfo,
    load_manifest,
    segment_number,
)


def read_manifest(directory: Path) -> Manifest | None:
    """`load_manifest`, with a malformed position inside the MANIFEST (an
    InvalidPositionError) reported like any other unreadable MANIFEST: naming the file."""
    try:
        return load_manifest(directory)
    except InvalidPositionError as exc:
        raise RelayCorruptError(
            f"the relay manifest is unreadable ({exc.reason})", file=str(directory / MANIFEST)
        ) from None


def load(directory: Path) -> Manifest:
    """The relay's MANIFEST, or a RelayError naming the file: no directory, no MANIFEST (with
    or without segments), or one that cannot be read."""
    path = directory / MANIFEST
    if not directory.is_dir():
        reason = "not a directory" if directory.exists() else "no such directory"
        raise RelayError(f"not a relay directory: {reason}", directory=str(directory))
    manifest = read_manifest(directory)
    if manifest is None:
        strays = _segment_files(directory)
        if strays:
            raise RelayCorruptError(
                f"no relay MANIFEST, but {len(strays)} segment(s) "
                f"({', '.join(p.name for p in strays[:3])}{', …' if len(strays) > 3 else ''}): "
                "the writer refuses to open it",
                file=str(path),
            )
        raise RelayCorruptError("no relay MANIFEST: not a relay directory", file=str(path))
    return manifest


def inspect_relay(directory: Path, *, verify: bool = False) -> dict[str, Any]:
    """The report (JSON-ready). Raises RelayError when there is no readable MANIFEST."""
    manifest = load(directory)
    report = _Report()
    segments = manifest.segments
    previous_end: Position | None = None  # where the previous segment ended (scanned)
    entries = []
    for index, info in enumerate(segments):
        current = index == len(segments) - 1
        entry = _segment(directory, info, manifest, current, verify, report)
        scanned = entry.get("scan")
        if scanned is not None and scanned["header"] and not scanned["error"]:
            start = info.start
            if index and previous_end is not None and start != previous_end:
                report.warn(
                    info.name,
                    f"starts at {_text(start)}, the previous segment ends at "
                    f"{_text(previous_end)} (a gap or an overlap)",
                )
            last = scanned["last"]
            previous_end = Position.from_json(last) if last else start
        else:
            previous_end = None
        entries.append(entry)
    _strays(directory, manifest, report)
    current_segment = manifest.current
    return {
        "directory": str(directory),
        "manifest": str(directory / MANIFEST),
        "segments": entries,
        "durable": {
            "segment": None if current_segment is None else current_segment.name,
            "offset": manifest.durable_offset,
            "position": _json(manifest.durable_position),
        },
        "total_bytes": sum(e["file_size"] or 0 for e in entries),
        "transactions": sum(e["scan"]["transactions"] for e in entries if e.get("scan"))
        if verify
        else None,
        "verified": verify,
        "healthy": not report.problems,
        "problems": report.problems,
        "warnings": report.warnings,
        "notes": report.notes,
    }


@dataclass
class _Report:
    problems: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)

    def damage(self, segment: str, error: str, offset: int | None = None) -> None:
        self.problems.append({"segment": segment, "offset": offset, "error": error})

    def warn(self, segment: str, text: str) -> None:
        self.warnings.append({"segment": segment, "warning": text})

    def note(self, segment: str, text: str) -> None:
        self.notes.append({"segment": segment, "note": text})


def _segment(
    directory: Path,
    info: SegmentInfo,
    manifest: Manifest,
    current: bool,
    verify: bool,
    report: _Report,
) -> dict[str, Any]:
    path = directory / info.name
    try:
        file_size: int | None = os.stat(path).st_size
    except FileNotFoundError:
        file_size = None
    summary = info.sealed  # the manifest summarises a segment when it seals it
    entry: dict[str, Any] = {
        "name": info.name,
        "number": info.number,
        "sealed": info.sealed,
        "current": current,
        "size": info.size,
        "file_size": file_size,
        "start": _json(info.start),
        "first": _json(info.first) if summary else None,
        "last": _json(info.last) if summary else None,
        "transactions": info.transactions if summary else None,
        "max_commit_ts": info.max_commit_ts if summary else None,
        "max_commit_time": _iso(info.max_commit_ts) if summary else None,
        "status": "ok",
    }
    problems = len(report.problems)
    if file_size is None:
        report.damage(info.name, "the segment file is missing")
    elif current and file_size < manifest.durable_offset:
        report.damage(
            info.name,
            f"shorter ({file_size} bytes) than the data the MANIFEST recorded as durable "
            f"({manifest.durable_offset} bytes)",
            file_size,
        )
    elif info.sealed and not current and file_size < info.size:
        report.damage(
            info.name,
            f"shorter ({file_size} bytes) than the MANIFEST says ({info.size} bytes)",
            file_size,
        )
    elif info.sealed and not current and file_size != info.size:
        report.warn(info.name, f"holds {file_size} bytes, the MANIFEST says {info.size}")
    if verify and file_size is not None:
        entry["scan"] = _verify(path, info, manifest, current, report)
    if len(report.problems) > problems:
        entry["status"] = "damaged"
    elif entry.get("scan", {}).get("tail"):
        entry["status"] = "tail"
    return entry


def _verify(
    path: Path, info: SegmentInfo, manifest: Manifest, current: bool, report: _Report
) -> dict[str, Any]:
    """Read the whole segment; record what it holds and what is wrong with it."""
    name = info.name
    scan = SegmentScan(path)
    durable: Position | None = None  # the position at the MANIFEST's durable offset
    at_boundary = False
    error: ReplicadError | None = None
    try:
        start = scan.read_header().start
        if current and manifest.durable_offset == scan.header_end:
            durable, at_boundary = start, True
        for chunk in scan.chunks():
            if current and chunk.commit is not None and chunk.end == manifest.durable_offset:
                durable, at_boundary = chunk.commit.position, True
    except ReplicadError as exc:  # RelayCorruptError; an InvalidPositionError
        error = exc
    header = scan.header
    result: dict[str, Any] = {
        "header": header is not None,
        "footer": scan.footer is not None,
        "transactions": scan.transactions,
        "events": scan.events,
        "first": _json(scan.first.position) if scan.first else None,
        "last": _json(scan.last.position) if scan.last else None,
        "max_commit_ts": scan.max_commit_ts,
        "max_commit_time": _iso(scan.max_commit_ts),
        "end": scan.end,
        "error": None,
        "tail": None,
    }
    if error is not None:
        offset = error.context.get("offset")
        offset = offset if isinstance(offset, int) else None
        result["error"] = {"offset": offset, "reason": error.reason}
        if current and header is not None and scan.end >= manifest.durable_offset:
            size = os.stat(path).st_size
            result["tail"] = {"offset": scan.end, "bytes": size - scan.end, "reason": error.reason}
            report.note(
                name,
                f"{size - scan.end} bytes after offset {scan.end} are not a whole transaction "
                f"({error.reason}): being written, or torn by a crash; the writer cuts them "
                "at its next open",
            )
        else:
            report.damage(name, error.reason, offset)
        return result
    assert header is not None
    if header.number != info.number:
        report.damage(name, f"its header says segment {header.number}", 0)
    if header.start != info.start:
        report.damage(
            name,
            f"its header starts at {_text(header.start)}, the MANIFEST says {_text(info.start)}",
            0,
        )
    footer = scan.footer
    if footer is None and info.sealed and not current:
        report.damage(name, "a sealed segment without a footer", scan.end)
    if footer is not None:
        if current and not info.sealed:
            report.note(name, "sealed on disk, not yet in the MANIFEST (the writer records it)")
        held = (
            scan.transactions,
            scan.events,
            _pos(scan.first),
            _pos(scan.last),
            scan.max_commit_ts,
        )
        said = (footer.transactions, footer.events, footer.first, footer.last, footer.max_commit_ts)
        if held != said:
            report.damage(
                name,
                f"the footer contradicts the records (footer: {_counts(*said)}; records: "
                f"{_counts(*held)})",
                scan.end,
            )
        if info.sealed:
            manifest_said = (info.transactions, info.first, info.last, info.max_commit_ts)
            if (
                manifest_said
                != (footer.transactions, footer.first, footer.last, footer.max_commit_ts)
                or info.size != scan.end
            ):
                report.warn(
                    name,
                    "the MANIFEST's summary of this sealed segment is stale (MANIFEST: "
                    f"{info.transactions} transactions, last {_text(info.last)}, "
                    f"{info.size} bytes; segment: {scan.transactions} transactions, last "
                    f"{_text(_pos(scan.last))}, {scan.end} bytes)",
                )
    if current:
        if not at_boundary and footer is not None and scan.end == manifest.durable_offset:
            durable, at_boundary = _pos(scan.last) or header.start, True
        if not at_boundary:
            report.warn(
                name,
                f"the MANIFEST's durable offset {manifest.durable_offset} is not where a "
                "transaction ends",
            )
        elif durable != manifest.durable_position:
            report.warn(
                name,
                f"the MANIFEST's durable position {_text(manifest.durable_position)} is not "
                f"that of offset {manifest.durable_offset} ({_text(durable)})",
            )
    return result


def _strays(directory: Path, manifest: Manifest, report: _Report) -> None:
    """Segment files the MANIFEST does not list: the next one is adopted by the writer (a
    rotation that crashed before the MANIFEST named it); any other is refused."""
    known = {s.number for s in manifest.segments}
    current = manifest.current
    after = (current.number if current else 0) + 1
    for path in _segment_files(directory):
        number = segment_number(path.name)
        if number is None or number in known:
            continue
        if number == after:
            report.note(path.name, "not in the MANIFEST yet: the writer adopts it at open")
        else:
            report.damage(path.name, "a relay segment the MANIFEST does not list")


def _segment_files(directory: Path) -> list[Path]:
    found = [(segment_number(p.name), p) for p in directory.glob("relay-*.log")]
    return [p for n, p in sorted((n, p) for n, p in found if n is not None)]


# ---------------------------------------------------------------------------- text
def render_report(report: dict[str, Any]) -> str:
    segments = report["segments"]
    lines = [
        f"relay {report['directory']}  ({len(segments)} segment(s), "
        f"{report['total_bytes']} bytes on disk)"
    ]
    for s in segments:
        state = "sealed" if s["sealed"] else "open"
        if s["current"]:
            state += ", current"
        size = "missing" if s["file_size"] is None else f"{s['file_size']} bytes"
        lines.append(f"{s['name']}  #{s['number']}  {state}  {size}  {s['status'].upper()}")
        lines.append(f"  start         {_describe(s['start'], 'the beginning of the relay')}")
        if s["transactions"] is not None:
            lines.append(f"  first         {_describe(s['first'], '-')}")
            lines.append(f"  last          {_describe(s['last'], '-')}")
            lines.append(
                f"  transactions  {s['transactions']}, max commit {s['max_commit_time'] or '-'}"
            )
        else:
            lines.append("  transactions  (open segment: --verify counts them)")
        scan = s.get("scan")
        if scan is not None:
            text = (
                f"{scan['transactions']} transactions, {scan['events']} events, "
                f"last {_describe(scan['last'], '-')}, max commit "
                f"{scan['max_commit_time'] or '-'}, ends at {scan['end']}"
            )
            if scan["error"]:
                text += f"; then at offset {scan['error']['offset']}: {scan['error']['reason']}"
            lines.append(f"  read          {text}")
    durable = report["durable"]
    lines.append(
        f"durable  {durable['segment'] or '-'} offset {durable['offset']}: "
        f"{_describe(durable['position'], 'the beginning of the relay')}"
    )
    if report["verified"]:
        lines.append(f"total    {report['transactions']} transactions")
    for p in report["problems"]:
        where = f" offset {p['offset']}" if p["offset"] is not None else ""
        lines.append(f"DAMAGED  {p['segment']}{where}: {p['error']}")
    for w in report["warnings"]:
        lines.append(f"warning  {w['segment']}: {w['warning']}")
    for n in report["notes"]:
        lines.append(f"note     {n['segment']}: {n['note']}")
    if report["problems"]:
        health = f"DAMAGED ({len(report['problems'])} problem(s))"
    elif report["verified"]:
        health = f"OK: {len(segments)} segment(s) read, every record checked"
    else:
        health = "OK as far as the MANIFEST and file sizes go (--verify reads every segment)"
    lines.append(f"health   {health}")
    return "\n".join(lines)


def _describe(position: dict[str, Any] | None, none: str) -> str:
    return none if position is None else str(Position.from_json(position))


def _text(position: Position | None) -> str:
    return "the beginning of the relay" if position is None else str(position)


def _json(position: Position | None) -> dict[str, Any] | None:
    return None if position is None else position.to_json()


def _pos(commit: Any) -> Position | None:
    return None if commit is None else commit.position


def _counts(txns: int, events: int, first: Any, last: Any, max_ts: int) -> str:
    return f"{txns} transactions, {events} events, last {_text(last)}, max commit {max_ts}"


def _iso(ts: int) -> str | None:
    if not ts:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
