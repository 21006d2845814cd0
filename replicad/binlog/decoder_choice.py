"""Which row-image decoder replicad builds: the compiled one or the generated Python one.

This is the one place the choice is made; everything else asks here:
- the compiled decoder (`_speedups`, Cython, planned by `accel.py`) when the extension
  imports and it is enabled;
- else the generated Python function of `codegen.py`. Both return identical rows.

REPLICAD_PURE_PYTHON=1 disables the compiled decoder at start-up, `set_enabled()` switches it
at run time (tests); decoders built before keep their kind, so callers that cache them key
the cache by `active()` (rows.py). REPLICAD_REQUIRE_SPEEDUPS=1 asks `check_required()` to
fail when the extension is missing (CI, instead of tests silently skipping).

The pure per-column decoders (`column_decoders.make_decoder`) are not a choice: partial JSON
updates need them column by column, and both whole-image decoders fall back to them.

The compiled message writer (replicad/sinks/_writer.pyx, which writes Kafka messages
straight from row images with this decoder's plan) is chosen on the sinks side, in
`replicad/sinks/writer_choice.py`: it follows `active()` here, and binlog/ never imports
sinks/.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from replicad.binlog import accel
from replicad.binlog.codegen import CompiledColumn, ImageDecoder, compile_python_decoder
from replicad.errors import CompiledDecoderMissingError

try:
    from replicad.binlog import _speedups
except ImportError as exc:  # not compiled (no compiler at install time): pure Python only
    _speedups = None  # type: ignore[assignment]  # optional module: None when not compiled
    _import_error: ImportError | None = exc
else:
    _import_error = None

_enabled = os.environ.get("REPLICAD_PURE_PYTHON", "").strip() in ("", "0")


def available() -> bool:
    """Whether the compiled extension could be imported."""
    return _speedups is not None


def enabled() -> bool:
    return _enabled


def set_enabled(value: bool) -> None:
    """Use (True) or bypass (False) the compiled decoder for decoders built from now on."""
    global _enabled
    _enabled = bool(value)


def active() -> bool:
    """Whether newly built row decoders are the compiled ones."""
    return _enabled and _speedups is not None


def required() -> bool:
    """Whether the environment demands the compiled decoder (REPLICAD_REQUIRE_SPEEDUPS=1)."""
    return os.environ.get("REPLICAD_REQUIRE_SPEEDUPS") == "1"


def check_required() -> None:
    """Raise CompiledDecoderMissingError when the compiled decoder is required but missing."""
    if required() and _speedups is None:
        raise CompiledDecoderMissingError(
            f"the Cython accelerator is not built: {_import_error}",
            module="replicad.binlog._speedups",
        )


def is_compiled(decode: Callable[..., Any]) -> bool:
    """Whether a row-image decoder is the compiled one."""
    owner = getattr(decode, "__self__", None)
    return _speedups is not None and isinstance(owner, _speedups.ImageDecoder)


def decode_event_rows(
    first: Callable[..., Any],
    second: Callable[..., Any] | None,
    body: Any,
    pos: int,
    insert: bool,
) -> list[tuple[Any, Any]] | None:
    """All (before, after) pairs of a ROWS event's images in one compiled call, when both
    decoders are compiled; None otherwise or when an image does not fit (the caller then
    decodes row by row, which raises the error that names it)."""
    if not (is_compiled(first) and (second is None or is_compiled(second))):
        return None
    return _speedups.decode_rows(
        first.__self__,  # type: ignore[attr-defined]
        None if second is None else second.__self__,  # type: ignore[attr-defined]
        body,
        pos,
        insert,
    )


def build_compiled_decoder(
    columns: Sequence[CompiledColumn], *, mariadb: bool
) -> ImageDecoder | None:
    """The compiled decoder of a layout whether enabled or not, or None when the extension
    is not available."""
    if _speedups is None:
        return None
    return accel.build_decoder(
        _speedups,
        columns,
        mariadb=mariadb,
        pure=lambda: compile_python_decoder(columns, mariadb=mariadb),
    )


def build_image_decoder(
    columns: Sequence[CompiledColumn], *, mariadb: bool, compiled: bool | None = None
) -> ImageDecoder:
    """The row-image decoder of a layout: the compiled one when it is `active()` (or
    `compiled` is True and the extension is available), else the generated function."""
    if compiled is None:
        compiled = active()
    if compiled:
        decode = build_compiled_decoder(columns, mariadb=mariadb)
        if decode is not None:
            return decode
    return compile_python_decoder(columns, mariadb=mariadb)
