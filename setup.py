"""Build hook for the optional compiled row decoder (replicad/binlog/_speedups.pyx).

Everything else lives in pyproject.toml. The extension is optional: when Cython or a C
compiler is missing, or compiling fails, the package installs without it and decodes rows
with the pure-Python generated decoders (see replicad/binlog/decoder_choice.py).
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup

SOURCE = os.path.join("replicad", "binlog", "_speedups.pyx")


def _extensions() -> list[Extension]:
    if os.environ.get("REPLICAD_NO_EXTENSIONS", "").strip() not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("replicad: Cython not available, building without _speedups", file=sys.stderr)
        return []
    extension = Extension(
        "replicad.binlog._speedups",
        [SOURCE],
        optional=True,  # a failed C build leaves the pure-Python decoders in place
        extra_compile_args=["-O2"] if os.name == "posix" else [],
    )
    try:
        extensions = cythonize([extension], language_level=3, quiet=True)
    except Exception as exc:  # a Cython error must not break the installation
        print(f"replicad: cannot cythonize {SOURCE} ({exc}), building without it", file=sys.stderr)
        return []
    for ext in extensions:
        ext.optional = True  # cythonize() does not carry `optional` over to its extensions
    return extensions


setup(ext_modules=_extensions())
