"""Fail unless a directory holds exactly one replicad wheel and it carries the three compiled
modules: the row decoder (replicad/binlog/_speedups), the message writer
(replicad/sinks/_writer) and the row-packet scan (replicad/protocol/_rows), Cython. setup.py
builds them optionally, so a missing compiler gives a pure-Python wheel without an error: the
image build runs this to turn that into a failed build (deploy/Dockerfile), and so does
tests/integration/test_deploy_image.py.

    python check_wheel.py /wheels
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

EXTENSION_PREFIXES = (
    "replicad/binlog/_speedups.",
    "replicad/sinks/_writer.",
    "replicad/protocol/_rows.",
)


def check(directory: Path) -> str:
    """The wheel's name and its extensions, or raise SystemExit naming what is wrong."""
    wheels = sorted(directory.glob("replicad-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one replicad wheel in {directory}, found {len(wheels)}")
    wheel = wheels[0]
    # name-version-pythontag-abitag-platformtag.whl: a compiled wheel is not py3-none-any
    tags = wheel.stem.split("-")[-3:]
    if tags[1] == "none" or tags[2] == "any":
        raise SystemExit(f"{wheel.name} is a pure-Python wheel: the extensions were not compiled")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    found = []
    for prefix in EXTENSION_PREFIXES:
        binaries = [n for n in names if n.startswith(prefix) and n.endswith((".so", ".pyd"))]
        if not binaries:
            raise SystemExit(f"{wheel.name} has no compiled {prefix}* extension")
        found.append(binaries[0])
    return f"{wheel.name}: {' '.join(found)}"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(check(Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
