"""Type stub for the compiled message writer (_writer.pyx, built by setup.py with Cython)."""

from collections.abc import Callable, Sequence
from typing import Any

from replicad.binlog._speedups import ImageDecoder

class ImageWriter:
    """A compiled row decoder readied for `encode_rows`: the JSON text before each column's
    value, and the JSON of the values the C writers leave to Python."""

    @property
    def decoder(self) -> ImageDecoder: ...
    def __init__(
        self,
        decoder: ImageDecoder,
        prefixes: Sequence[bytes],
        fallback: Callable[[int, Any], bytes],
    ) -> None: ...

class EventLayout:
    """What `encode_rows` needs of a table layout besides the event: the image writers,
    whether an update of the key is split, the key columns' texts and indexes."""

    @property
    def first(self) -> ImageWriter: ...
    @property
    def second(self) -> ImageWriter | None: ...
    def __init__(
        self,
        first: ImageWriter,
        second: ImageWriter | None,
        split: bool,
        key_names: tuple[bytes, ...],
        key_first: tuple[int, ...],
        key_second: tuple[int, ...],
    ) -> None: ...

def encode_rows(
    layout: EventLayout,
    body: bytes,
    pos: int,
    kind: int,
    head: bytes,
    tails: tuple[bytes, ...],
    row0: int,
    key_mode: int,
    const_key: bytes | None,
    lines: bool,
) -> tuple[Any, int]: ...

class TextLayout:
    """A snapshot table's columns readied for `encode_text_rows`: per column a kind (see
    TEXT_KINDS), a padded BINARY's width, a single-byte charset's JSON table, the JSON text
    before its value, the JSON of the values left to Python; the key columns."""

    def __init__(
        self,
        kinds: Sequence[str],
        widths: Sequence[int],
        tables: Sequence[bytes | None],
        prefixes: Sequence[bytes],
        fallback: Callable[[int, bytes], bytes],
        key_names: tuple[bytes, ...],
        key_index: tuple[int, ...],
    ) -> None: ...

TEXT_KINDS: dict[str, int]

def encode_text_rows(
    layout: TextLayout,
    packets: list[bytes],
    head: bytes,
    tail: bytes,
    row0: int,
    key_mode: int,
    const_key: bytes | None,
    lines: bool,
) -> tuple[Any, int]: ...
def double_repr(d: float) -> bytes:
    """repr(d) as bytes from the compiled shortest-digit search; ValueError if not finite."""

def mysql_json_text(document: bytes) -> bytes | None:
    """A binary JSON document as MySQL prints it, or None where Python must print it."""
