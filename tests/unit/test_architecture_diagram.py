"""docs/architecture.md's diagram of the packages and their imports is the code's: every arrow
in it is an import somewhere in the package (inside functions too), and every such import is
an arrow. When this fails, the message prints the diagram as the code has it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "replicad"
DOC = ROOT / "docs" / "architecture.md"
# Modules every layer may use, left out of the picture so that its arrows stay readable.
SHARED = set(
    "errors config exit_codes extras atomic_file process_lock lazy_logging log_limit".split()
)
BLOCK = re.compile(
    r"<!-- import-graph:start -->\n```mermaid\n(.*?)```\n<!-- import-graph:end -->", re.S
)


def _unit(path: Path) -> str:
    """The package (or top-level module) a source file belongs to."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _imported_units(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out |= {n.split(".")[1] for n in names if n.startswith("replicad.")}
    return out


def code_edges() -> set[tuple[str, str]]:
    edges = set()
    for path in PACKAGE.rglob("*.py"):
        unit = _unit(path)
        if unit in SHARED or unit == "__init__":
            continue
        edges |= {(unit, used) for used in _imported_units(path) if used not in SHARED | {unit}}
    return edges


def mermaid(edges: set[tuple[str, str]]) -> str:
    def label(unit: str) -> str:
        return f"{unit}.py" if (PACKAGE / f"{unit}.py").exists() else f"{unit}/"

    units = sorted({u for edge in edges for u in edge})
    lines = ["graph TD"]
    lines += [f'  {u}["{label(u)}"]' for u in units]
    lines += [f"  {a} --> {b}" for a, b in sorted(edges)]
    return "\n".join(lines) + "\n"


def test_the_documented_import_graph_is_the_codes() -> None:
    found = BLOCK.search(DOC.read_text())
    assert found, "docs/architecture.md has no import-graph block"
    expected = mermaid(code_edges())
    assert found.group(1) == expected, (
        f"docs/architecture.md's import graph should read:\n{expected}"
    )


def test_the_graph_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "def f():\n    from replicad.sinks.kafka import X\n    import replicad.relay\n"
    )
    assert _imported_units(source) == {"sinks", "relay"}
