"""The table of column decoders (replicad/binlog/column_decoders.py) and the module structure
around it: every type code is decided, every path's routines match the table, and the
replicad.binlog modules import each other without cycles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from replicad.binlog import accel, codegen
from replicad.binlog.column_decoders import (
    COLUMN_DECODERS,
    UNSUPPORTED_TYPES,
    Metadata,
    check_routines,
    read_metadata,
)
from replicad.binlog.values import TYPE_NAMES, ColumnType
from replicad.errors import DecoderTableError, MalformedEventError

pytestmark = pytest.mark.unit

BINLOG = Path(__file__).resolve().parents[2] / "replicad" / "binlog"


def test_every_type_code_has_an_entry_or_is_unsupported() -> None:
    codes = set(TYPE_NAMES)
    assert set(COLUMN_DECODERS) | UNSUPPORTED_TYPES == codes
    assert not set(COLUMN_DECODERS) & UNSUPPORTED_TYPES


def test_the_paths_register_exactly_the_routines_the_table_names() -> None:
    check_routines("generated", codegen._ROUTINES)
    check_routines("compiled", accel._ROUTINES)
    with pytest.raises(DecoderTableError, match="missing=\\['integer'\\]"):
        check_routines("compiled", {k: v for k, v in accel._ROUTINES.items() if k != "integer"})
    with pytest.raises(DecoderTableError, match="unused=\\['extra'\\]"):
        check_routines("generated", {**codegen._ROUTINES, "extra": None})


def test_metadata_is_read_as_the_table_says() -> None:
    types = bytes([ColumnType.LONG, ColumnType.VARCHAR, ColumnType.STRING, ColumnType.BLOB])
    buf = b"\x2c\x01" + b"\xfe\x0a" + b"\x04"
    assert read_metadata(types, buf, 0, len(buf)) == [0, 300, 0xFE0A, 4]
    assert COLUMN_DECODERS[ColumnType.STRING].metadata is Metadata.TWO_BYTES_BIG_ENDIAN
    with pytest.raises(MalformedEventError):
        read_metadata(types, buf + b"\x00", 0, len(buf) + 1)


def _binlog_imports() -> dict[str, set[str]]:
    """Module -> the replicad.binlog modules it imports (TYPE_CHECKING imports excluded:
    they never run)."""
    modules = {path.stem for path in BINLOG.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in BINLOG.glob("*.py"):
        tree = ast.parse(path.read_text())
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        deps: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only or not isinstance(node, ast.ImportFrom):
                continue
            if node.module == "replicad.binlog":
                deps |= {alias.name for alias in node.names if alias.name in modules}
            elif node.module and node.module.startswith("replicad.binlog."):
                deps.add(node.module.split(".")[2])
        graph[path.stem] = deps - {path.stem}
    return graph


def test_binlog_modules_import_without_cycles() -> None:
    graph = _binlog_imports()
    assert "codegen" not in graph["column_decoders"] and "accel" not in graph["codegen"]
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        if module in path:
            pytest.fail("import cycle: " + " -> ".join((*path[path.index(module) :], module)))
        if module in done:
            return
        for dependency in sorted(graph.get(module, ())):
            visit(dependency, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
