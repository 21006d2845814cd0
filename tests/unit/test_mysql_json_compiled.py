"""The compiled envelope's MySQL JSON writer (`_writer.mysql_json_text`) against the pure
path, `jsonb.to_mysql_json_text(jsonb.decode_json(document))`.

For every binary document the writer must either print exactly the pure path's text or
leave the document to Python (None): never a different text, never a crash. Documents come
from test_jsonb's encoder (small and large containers, signed and unsigned integer forms,
junk gaps, values stored out of order), then mutated or cut short. Documents without opaque
values (plain_documents) must be printed in C: that is what the writer is for.
"""

from __future__ import annotations

import math
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicad.binlog.codegen import CompiledColumn
from replicad.binlog.jsonb import JSON_NULL, decode_json, to_mysql_json_text
from replicad.binlog.values import ColumnSpec, ColumnType
from replicad.errors import JsonDecodeError
from replicad.sinks import writer_choice
from tests.unit.test_event_envelope import _encode, _expected
from tests.unit.test_jsonb import Encoder, documents, plain_documents

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built"),
]
CASES = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _compiled(document: bytes) -> bytes | None:
    from replicad.sinks import _writer

    return _writer.mysql_json_text(document)


def _pure(document: bytes) -> bytes | None:
    try:
        return to_mysql_json_text(decode_json(document)).encode()
    except JsonDecodeError:
        return None


@CASES
@given(plain_documents, st.randoms(use_true_random=False), st.booleans())
def test_plain_documents_are_printed_in_c(doc, rnd, junk) -> None:
    document = Encoder(rnd, junk=junk).document(doc)
    # A null document is left to Python (test_null_document_is_left_to_python).
    assert _compiled(document) == (None if doc is None else _pure(document))


@CASES
@given(documents, st.randoms(use_true_random=False), st.booleans())
def test_any_document_is_printed_as_python_does_or_left_to_it(doc, rnd, junk) -> None:
    document = Encoder(rnd, junk=junk).document(doc)
    got = _compiled(document)
    assert got is None or got == _pure(document)


@CASES
@given(
    documents,
    st.randoms(use_true_random=False),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 10**6),
)
def test_damaged_documents(doc, rnd, edits, cut) -> None:
    document = bytearray(Encoder(rnd, junk=True).document(doc))
    for position, byte in edits:
        document[position % len(document)] = byte
    for candidate in (bytes(document), bytes(document[: cut % (len(document) + 1)])):
        got = _compiled(candidate)
        # Where Python refuses a document, C must leave it to Python (which raises).
        assert got is None or got == _pure(candidate)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes(data: bytes) -> None:
    got = _compiled(data)
    assert got is None or got == _pure(data)


def test_doubles_as_mysql_prints_them() -> None:
    rng = random.Random(11)
    values = [0.0, -0.0, 1e15, 1e16, 1e-14, 1e-15, 123456789012345678.0, 0.1, -2.5]
    values += [10.0**k for k in range(-20, 25)] + [1.5 * 10.0**k for k in range(-20, 25)]
    values += [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(5000)]
    for value in values:
        if not math.isfinite(value):
            continue
        document = b"\x0b" + struct.pack("<d", value)
        assert _compiled(document) == _pure(document), value


def _object(first: bytes, second: bytes) -> bytes:
    """A small object of two one-byte keys, stored in this order, with int16 values 1, 2."""
    entries = struct.pack("<HHHH", 18, 1, 19, 1) + b"\x05\x01\x00" + b"\x05\x02\x00"
    return b"\x00" + struct.pack("<HH", 2, 20) + entries + first + second


def test_what_is_left_to_python() -> None:
    decimal = bytes([0x0F, 0xF6, 4, 5, 2, 0x81, 0x0D, 0xFB])  # opaque DECIMAL(5,2)
    bad_utf8 = b"\x0c\x02\xff\xfe"
    unsorted = _object(b"b", b"a")  # MySQL stores keys sorted; Python prints them as stored
    repeated = _object(b"a", b"a")  # Python refuses it
    for document in (decimal, bad_utf8, unsorted, repeated):
        assert _compiled(document) is None, document
    assert _pure(unsorted) == b'{"b": 1, "a": 2}'
    assert _pure(bad_utf8) is None and _pure(repeated) is None
    assert _compiled(_object(b"a", b"b")) == _pure(_object(b"a", b"b")) == b'{"a": 1, "b": 2}'


def test_null_document_is_left_to_python() -> None:
    """Empty (MySQL's NULL forced into a NOT NULL column) or the literal: JSON null, which the
    row path notes per row (docs/consumers.md, "JSON null"), so C leaves it."""
    assert _compiled(b"") is None and _compiled(b"\x04\x00") is None
    assert to_mysql_json_text(decode_json(b"")) == "null" == to_mysql_json_text(JSON_NULL)


@CASES
@given(
    st.lists(plain_documents, min_size=1, max_size=4),
    st.randoms(use_true_random=False),
    st.integers(0, 2),
)
def test_messages_with_json_columns_equal_the_pure_path(docs, rnd, kind) -> None:
    """Whole ROWS events through `encode_rows`: the messages must be the pure path's bytes."""
    columns = [
        CompiledColumn("id", ColumnSpec(ColumnType.LONG, 0)),
        CompiledColumn("doc", ColumnSpec(ColumnType.JSON, 4)),
    ]

    def image(i: int, doc: object) -> bytes:
        document = Encoder(rnd, junk=True).document(doc)
        return b"\x00" + struct.pack("<iI", i, len(document)) + document

    body = b""
    for i, doc in enumerate(docs):
        body += image(i, doc)
        if kind == 1:  # an update: the same key, the next document
            body += image(i, docs[(i + 1) % len(docs)])
    expected = _expected(columns, body, 0, kind, ("id",), False)
    messages, count = _encode(columns, body, 0, kind, ("id",), False)
    assert count == len(docs)
    assert messages == expected
