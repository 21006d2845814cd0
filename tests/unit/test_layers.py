"""The package rules of docs/architecture.md, from the source (every import, inside functions
too): data flows one way, and the readers of the published stream reach the daemon only
through `published/`."""

from __future__ import annotations

import ast
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
    downstream = ("replicad.sinks", "replicad.service", "replicad.spark", "replicad.invalidate",
                  "replicad.relay", "replicad.source", "replicad.coordination")  # fmt: skip
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
