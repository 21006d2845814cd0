"""The package rules of docs/architecture.md, from the source (every import, inside functions
too): data flows one way, and the readers of the published stream reach the daemon only
through `published/`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "replicad"


def _imports(path: Path) -> set[str]:
    """The replicad modules `path` imports, as dotted names."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            out |= {n for n in names if n.startswith("replicad")}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("replicad")}
    return out


def _modules(package: str) -> list[Path]:
    return sorted((PACKAGE / package).rglob("*.py"))


def _violations(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in paths
        for name in sorted(_imports(path))
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


def test_only_the_daemon_and_the_command_line_import_service() -> None:
    outside = [
        path
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] != "service" and path.name != "cli.py"
    ]
    assert _violations(outside, ("replicad.service",)) == []


@pytest.mark.parametrize("package", ["protocol", "binlog"])
def test_the_sans_io_layers_import_nothing_downstream(package: str) -> None:
    downstream = (
        "replicad.sinks",
        "replicad.service",
        "replicad.spark",
        "replicad.invalidate",
        "replicad.relay",
        "replicad.source",
        "replicad.coordination",
    )
    assert _violations(_modules(package), downstream) == []


def test_what_the_stream_readers_share_depends_on_config_and_errors_only() -> None:
    allowed = ("replicad.config", "replicad.errors", "replicad.exit_codes", "replicad.published")
    found = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in _modules("published")
        for name in sorted(_imports(path))
        if not any(name == a or name.startswith(a + ".") for a in allowed) and name != "replicad"
    ]
    assert found == []


# The one exception: spark/archive.py reads binlog files and relay directories, where nothing
# was published yet, so it writes each change with the sink's own message writer
# (EnvelopeLines): that is what makes its rows the ones the Kafka reader gets.
ARCHIVE_WRITES_THE_MESSAGES = [
    "replicad/spark/archive.py imports replicad.sinks.envelope",
    "replicad/spark/archive.py imports replicad.sinks.envelope.EnvelopeLines",
]


def test_the_stream_readers_reach_the_sinks_only_to_write_archived_changes() -> None:
    readers = _modules("spark") + _modules("invalidate")
    assert _violations(readers, ("replicad.sinks",)) == ARCHIVE_WRITES_THE_MESSAGES


_CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import\b|c?import\s+([\w.]+))", re.M)


def _cython_imports(path: Path) -> set[str]:
    """The replicad modules a .pyx/.pxd file imports or cimports (a text scan of its import
    lines: Cython is not Python, ast cannot read it)."""
    found = {a or b for a, b in _CYTHON_IMPORT.findall(path.read_text())}
    return {name for name in found if name.startswith("replicad")}


def test_binlog_imports_nothing_from_sinks_in_python_or_cython() -> None:
    """The row decoder stays below the message writer: sinks/_writer.pyx cimports
    binlog/_speedups.pxd, never the other way round."""
    cython = sorted((PACKAGE / "binlog").rglob("*.pyx")) + sorted(
        (PACKAGE / "binlog").rglob("*.pxd")
    )
    assert cython, "binlog/ has no Cython sources: this test scans nothing"
    found = _violations(_modules("binlog"), ("replicad.sinks",)) + [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in cython
        for name in sorted(_cython_imports(path))
        if name == "replicad.sinks" or name.startswith("replicad.sinks.")
    ]
    assert found == []


def test_the_cython_scan_sees_cimports() -> None:
    """The scan above can fail: it finds the writer's cimport of the decoder."""
    assert "replicad.binlog._speedups" in _cython_imports(PACKAGE / "sinks" / "_writer.pyx")
