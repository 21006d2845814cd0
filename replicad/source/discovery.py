"""The servers to stream from as a discovery command names them (`source.discovery`).

An orchestrator (Orchestrator, MHA, a Consul query, a shell script) knows which server was
promoted; replicad asks it before each (re)connect instead of trusting a fixed list. The
command prints one `host:port` per line, best first; blank lines and `#` comments are
ignored. A command that fails, hangs past its timeout or prints nothing usable does not stop
the stream: the last known list stands, with a `source_discovery_failed` warning, since the
servers it named may well still be there.
"""

from __future__ import annotations

import asyncio

import structlog

from replicad.config import DiscoveryConfig, source_candidate
from replicad.errors import ReplicadError

log = structlog.get_logger("replicad.source")

Candidates = list[tuple[str, int]]


class DiscoveryError(ReplicadError):
    """The discovery command gave no list (failed, timed out, or printed no server)."""


def parse_candidates(text: str) -> Candidates:
    """The `host:port` lines of a discovery command's output, in order, duplicates dropped."""
    found: Candidates = []
    for number, line in enumerate(text.splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            candidate = source_candidate(entry)
        except ValueError:
            raise DiscoveryError(f"line {number} is not host:port", line=entry) from None
        if candidate not in found:
            found.append(candidate)
    if not found:
        raise DiscoveryError("the command printed no host:port")
    return found


async def discover(config: DiscoveryConfig) -> Candidates:
    """Run the command and parse what it prints; DiscoveryError when that gives no list."""
    command = " ".join(config.command)
    try:
        proc = await asyncio.create_subprocess_exec(
            *config.command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
    except OSError as exc:
        raise DiscoveryError(f"cannot run it: {exc.strerror}", command=command) from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), config.timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise DiscoveryError(f"no answer in {config.timeout_s} s", command=command) from None
    if proc.returncode != 0:
        said = err.decode(errors="replace").strip()[-500:]
        raise DiscoveryError(f"it exited {proc.returncode}: {said}", command=command)
    try:
        return parse_candidates(out.decode(errors="replace"))
    except DiscoveryError as exc:
        raise exc.with_context(command=command) from None


async def discovered_or(config: DiscoveryConfig | None, known: Candidates) -> Candidates:
    """The discovered servers, or `known` (with a warning) when discovery gives none."""
    if config is None:
        return known
    try:
        found = await discover(config)
    except DiscoveryError as exc:
        log.warning("source_discovery_failed", error=str(exc), keeping=_listed(known))
        return known
    if found != known:
        log.info("source_discovered", servers=_listed(found), before=_listed(known))
    return found


def _listed(candidates: Candidates) -> list[str]:
    return [f"{host}:{port}" for host, port in candidates]
