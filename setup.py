"""Build hook for the three optional compiled modules: the row decoder
(replicad/binlog/_speedups.pyx), the message writer (replicad/sinks/_writer.pyx), which
cimports the decoder's plan and readers from replicad/binlog/_speedups.pxd, and the scan of
result-set row packets (replicad/protocol/_rows.pyx).

Everything else lives in pyproject.toml. The extensions are optional: when Cython or a C
compiler is missing, or compiling fails, the package installs without them and decodes rows
with the pure-Python generated decoders, writes messages row by row and scans row packets
in Python (see replicad/binlog/decoder_choice.py, replicad/sinks/writer_choice.py and
replicad/protocol/packets.py).
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup

SOURCES = {
    "replicad.binlog._speedups": os.path.join("replicad", "binlog", "_speedups.pyx"),
    "replicad.sinks._writer": os.path.join("replicad", "sinks", "_writer.pyx"),
    "replicad.protocol._rows": os.path.join("replicad", "protocol", "_rows.pyx"),
}


def _extensions() -> list[Extension]:
    if os.environ.get("REPLICAD_NO_EXTENSIONS", "").strip() not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("replicad: Cython not available, building without extensions", file=sys.stderr)
        return []
    extensions = [
        Extension(
            name,
            [source],
            optional=True,  # a failed C build leaves the pure-Python paths in place
            extra_compile_args=["-O2"] if os.name == "posix" else [],
        )
        for name, source in SOURCES.items()
    ]
    try:
        extensions = cythonize(extensions, language_level=3, quiet=True)
    except Exception as exc:  # a Cython error must not break the installation
        print(f"replicad: cannot cythonize ({exc}), building without extensions", file=sys.stderr)
        return []
    for ext in extensions:
        ext.optional = True  # cythonize() does not carry `optional` over to its extensions
    return extensions


setup(ext_modules=_extensions())
