"""Type stub for the compiled row decoder (_speedups.pyx, built by setup.py with Cython)."""

from collections.abc import Callable, Sequence
from typing import Any

OPCODES: dict[str, int]
MODES: dict[str, int]

class ImageDecoder:
    """One row-image layout compiled to a plan; `decode(body, pos) -> (row, next_pos)`."""

    @property
    def plan(self) -> tuple[tuple[Any, ...], ...]: ...
    def __init__(
        self,
        names: Sequence[str],
        plan: Sequence[Sequence[Any]],
        pure_factory: Callable[[], Any] | None = None,
    ) -> None: ...
    def decode(self, body: Any, pos: int) -> tuple[dict[str, Any], int]: ...

def decode_rows(
    first: ImageDecoder, second: ImageDecoder | None, body: bytes, pos: int, insert: bool
) -> list[tuple[dict[str, Any] | None, dict[str, Any] | None]] | None:
    """A ROWS event's (before, after) pairs in one call; None if an image does not fit."""
