"""The compiled shortest-digit search for doubles (`_writer.double_repr`) against repr().

The compiled envelope path writes every DOUBLE column with it, so one wrong digit would be
a wrong value in every message. repr() is the oracle: its digits come from Python's dtoa,
an independent implementation. Random bit patterns cover the whole range; the lists below
cover what random patterns rarely hit: powers of two (the mantissa whose lower neighbour is
closer), powers of ten and their neighbours (where the digit count changes and repr()
switches to the exponent form), subnormals, integers, short decimals and widened floats.
"""

from __future__ import annotations

import math
import random
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replicad.sinks import writer_choice

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built"),
]


def _compiled(d: float) -> bytes:
    from replicad.sinks import _writer

    return _writer.double_repr(d)


def _mismatches(values: list[float]) -> list[tuple[str, bytes]]:
    out = []
    for d in values:
        for x in (d, -d):
            if math.isfinite(x) and _compiled(x) != repr(x).encode():
                out.append((repr(x), _compiled(x)))
    return out


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_equals_repr(d: float) -> None:
    assert _compiled(d) == repr(d).encode()


def test_random_bit_patterns() -> None:
    rng = random.Random(20261126)
    values = [
        struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(300_000)
    ]
    assert _mismatches(values) == []


def test_edges() -> None:
    rng = random.Random(7)
    values = [2.0**k for k in range(-1074, 1024)]
    for k in range(-323, 309):
        v = float(f"1e{k}")
        values += [v, math.nextafter(v, 0.0), math.nextafter(v, math.inf)]
    values += [5e-324 * i for i in range(1, 3000)]  # subnormals
    values += [math.nextafter(2.2250738585072014e-308, 0.0), 1.7976931348623157e308]
    values += [float(i) for i in range(-3000, 3000)]
    values += [float(rng.getrandbits(53)) for _ in range(20_000)]
    values += [float(2**53 + i) for i in range(-50, 50)]
    values += [i / d for i in range(1, 3000) for d in (3, 7, 10, 100, 1000, 1e6)]
    values += [round(rng.uniform(-1e6, 1e6), rng.randrange(10)) for _ in range(20_000)]
    values += [  # FLOAT columns widened to double
        struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0] for _ in range(20_000)
    ]
    values += [
        float(f"{rng.randrange(1, 10**16)}e{rng.randrange(-330, 300)}") for _ in range(20_000)
    ]
    assert _mismatches(values) == []


def test_refuses_what_is_not_finite() -> None:
    for value in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError, match="finite"):
            _compiled(value)
