"""Result tables and the statistics printed in them."""

from __future__ import annotations

from collections.abc import Sequence


def grid(head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned, a rule
    under the head."""
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]

    def fmt(row: tuple[str, ...]) -> str:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        return "  ".join(cells)

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(head), rule, *(fmt(row) for row in rows)])


def percentiles(values: list[float]) -> dict[str, float] | None:
    """Nearest-rank p50/p90/p99 and max, in ms (values in seconds)."""
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)

    def rank(p: float) -> float:
        return ordered[min(n - 1, max(0, int(-(-p * n // 100)) - 1))] * 1000

    return {
        "p50": round(rank(50), 2),
        "p90": round(rank(90), 2),
        "p99": round(rank(99), 2),
        "max": round(ordered[-1] * 1000, 2),
        "n": n,
    }
