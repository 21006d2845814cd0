"""Whether a ROWS event's messages are written by the compiled writer or row by row: the
sinks-side counterpart of `binlog/decoder_choice.py`, and the one module that imports the
compiled writer (`_writer`, Cython; replicad/sinks/_writer.pyx).

The writer reads row images through the compiled row decoder's plan, so it is active
exactly when compiled decoders are built (`decoder_choice.active()`: REPLICAD_PURE_PYTHON=1
or `decoder_choice.set_enabled(False)` turn both off) and it imports. Otherwise
`event_envelope.EventEncoder` declines every event and the envelope writes each row change;
both give the same bytes. REPLICAD_REQUIRE_SPEEDUPS=1 makes `check_required()` fail when it
is missing, as `decoder_choice.check_required()` does for the decoder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from replicad.binlog import decoder_choice
from replicad.errors import CompiledDecoderMissingError

try:
    from replicad.sinks import _writer
except ImportError as exc:  # not compiled (or built without the decoder): row by row only
    _writer = None  # type: ignore[assignment]  # optional module: None when not compiled
    _import_error: ImportError | None = exc
else:
    _import_error = None

# What encode_rows returns: one bytes object of lines, or a list of (op, row, key, value)
Encoded = tuple[Any, int]


def available() -> bool:
    """Whether the compiled writer could be imported."""
    return _writer is not None


def active() -> bool:
    """Whether events are written by the compiled writer (given compiled decoders)."""
    return _writer is not None and decoder_choice.active()


def check_required() -> None:
    """Raise CompiledDecoderMissingError when the compiled modules are required
    (REPLICAD_REQUIRE_SPEEDUPS=1) but the writer is missing."""
    if decoder_choice.required() and _writer is None:
        raise CompiledDecoderMissingError(
            f"the compiled message writer is not built: {_import_error}",
            module="replicad.sinks._writer",
        )


def image_writer(
    decode: Callable[..., Any], prefixes: Sequence[bytes], fallback: Callable[[int, Any], bytes]
) -> Any:
    """The writer of one row-image layout, from its compiled decoder (`decode`, the bound
    method rows.py holds), or None when the decoder is not compiled or there is no writer.
    `prefixes` and `fallback`: see `_writer.ImageWriter`."""
    if _writer is None or not decoder_choice.is_compiled(decode):
        return None
    return _writer.ImageWriter(decode.__self__, prefixes, fallback)  # type: ignore[attr-defined]


def event_layout(
    first: Any,
    second: Any,
    split: bool,
    key_names: tuple[bytes, ...],
    key_first: tuple[int, ...],
    key_second: tuple[int, ...],
) -> Any:
    """What `encode_rows` needs of a table layout besides the event (`_writer.EventLayout`,
    whose parameters are documented there): `first`, `second` from `image_writer`."""
    if _writer is None:
        raise RuntimeError("the compiled message writer is not built")
    return _writer.EventLayout(first, second, split, key_names, key_first, key_second)


def encode_rows(
    layout: Any,
    body: bytes,
    pos: int,
    kind: int,
    head: bytes,
    tails: tuple[bytes, ...],
    row0: int,
    key_mode: int,
    const_key: bytes | None,
    lines: bool,
) -> Encoded:
    """Every message of one ROWS event, written by `_writer.encode_rows` (the parameters are
    documented there). Raises on an image that does not fit, and RuntimeError when there is
    no compiled writer."""
    if _writer is None:
        raise RuntimeError("the compiled message writer is not built")
    return _writer.encode_rows(
        layout, body, pos, kind, head, tails, row0, key_mode, const_key, lines
    )


def text_layout(
    kinds: Sequence[str],
    widths: Sequence[int],
    tables: Sequence[bytes | None],
    prefixes: Sequence[bytes],
    fallback: Callable[[int, bytes], bytes],
    key_names: tuple[bytes, ...],
    key_index: tuple[int, ...],
) -> Any:
    """A snapshot table's columns readied for `encode_text_rows` (`_writer.TextLayout`,
    whose parameters are documented there)."""
    if _writer is None:
        raise RuntimeError("the compiled message writer is not built")
    return _writer.TextLayout(kinds, widths, tables, prefixes, fallback, key_names, key_index)


def encode_text_rows(
    layout: Any,
    packets: list[bytes],
    head: bytes,
    tail: bytes,
    row0: int,
    key_mode: int,
    const_key: bytes | None,
    lines: bool,
) -> Encoded:
    """The op "r" messages of snapshot rows read as text-protocol packets, written by
    `_writer.encode_text_rows` (parameters documented there). Raises on a packet that is not
    a row of the layout, and RuntimeError when there is no compiled writer."""
    if _writer is None:
        raise RuntimeError("the compiled message writer is not built")
    return _writer.encode_text_rows(layout, packets, head, tail, row0, key_mode, const_key, lines)
