# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Compiled scan of result-set row packets: `PacketReader.take_rows`'s loop in C.

A snapshot receives its rows by the million, and the Python loop (header, checks, a copy per
row) cost about 0.4 us a row, a third of the snapshot's CPU. This is the same loop over the
receive buffer; replicad/protocol/packets.py falls back to its own when this module is not
built, and tests/unit/test_protocol_rows_scan.py holds the two equal.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.list cimport PyList_Append


def scan_rows(bytearray buffer, Py_ssize_t pos, int sequence, list rows):
    """Append the payloads of `buffer` from `pos` to `rows` while they are complete one-chunk
    packets with the expected sequence ids whose payload does not start with 0xFE or 0xFF;
    returns (the offset of the first packet left, the sequence id it must carry)."""
    cdef const unsigned char* data = <const unsigned char*>PyByteArray_AS_STRING(buffer)
    cdef Py_ssize_t size = PyByteArray_GET_SIZE(buffer)
    cdef Py_ssize_t length, end
    cdef object row
    if pos < 0 or sequence < 0 or sequence > 255:
        raise ValueError("scan_rows: offset or sequence id out of range")
    while size - pos >= 4:
        length = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
        end = pos + 4 + length
        if (
            end > size
            or length == 0
            or length == 0xFFFFFF
            or data[pos + 3] != sequence
            or data[pos + 4] >= 0xFE
        ):
            break
        row = PyBytes_FromStringAndSize(<const char*>data + pos + 4, length)
        PyList_Append(rows, row)
        sequence = (sequence + 1) & 0xFF
        pos = end
    return pos, sequence
