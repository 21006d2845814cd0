# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""Compiled row decoder: the accelerated twin of the functions `codegen.py` generates.

A layout is described once, in Python (`accel.py`), as a *plan*: one entry per present
column ``(opcode name, arg1, arg2, arg3, obj, groups)``. `ImageDecoder.decode(body, pos)`
then walks the plan with C reads and returns ``(row_dict, next_pos)`` exactly like the
generated function: same Python types, same values, same exponents, the same strings for
dates Python cannot hold. Types without a native opcode are decoded by the `values.py`
closure given in the plan (opcode "call").

Every read is checked against ``len(body)`` first: a value that would run past the end
raises IndexError (which `RowsEvent.rows()` turns into a MalformedEventError); nothing is
ever read outside `body`. Bodies that are not exactly `bytes` (memoryview, bytearray) and
negative positions go to the pure-Python decoder, which defines their behaviour.

The plan's C form, the decoder's fields and the readers are declared in _speedups.pxd: the
message writer (replicad/sinks/_writer.pyx) cimports them to write row images as JSON
without a Python call per value. This module knows nothing of messages.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.bytes cimport PyBytes_GET_SIZE
from cpython.datetime cimport date_new, datetime_new, import_datetime, timedelta_new
from cpython.dict cimport PyDict_SetItem
from cpython.float cimport PyFloat_FromDouble
from cpython.long cimport PyLong_FromLong, PyLong_FromLongLong, PyLong_FromUnsignedLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_Decode, PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8
from libc.math cimport isfinite, isinf
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

import datetime as _dt
from decimal import Context as _Context
from decimal import Decimal as _Decimal

from replicad.binlog.values import float32_shortest as _py_float32_shortest
from replicad.binlog.values import format_date as _format_date
from replicad.binlog.values import format_datetime as _format_datetime

import_datetime()

cdef extern from "Python.h":
    char* PyOS_double_to_string(double val, char format_code, int precision, int flags,
                                int *ptype) except NULL
    double PyOS_string_to_double(const char *s, char **endptr,
                                 PyObject *overflow_exception) except? -1.0
    dict _PyDict_NewPresized(Py_ssize_t minused)
    str PyUnicode_Join(object separator, object seq)
    object PyUnicode_DecodeCharmap(const char *s, Py_ssize_t size, object mapping,
                                   const char *errors)

OPCODES = {
    "call": OP_CALL,
    "i8": OP_I8,
    "u8": OP_U8,
    "i16": OP_I16,
    "u16": OP_U16,
    "i24": OP_I24,
    "u24": OP_U24,
    "i32": OP_I32,
    "u32": OP_U32,
    "i64": OP_I64,
    "u64": OP_U64,
    "double": OP_DOUBLE,
    "float": OP_FLOAT,
    "year": OP_YEAR,
    "decimal": OP_DECIMAL,
    "str": OP_STR,
    "date": OP_DATE,
    "datetime2": OP_DATETIME2,
    "timestamp2": OP_TIMESTAMP2,
    "time2": OP_TIME2,
    "enum": OP_ENUM,
    "set": OP_SET,
    "bit": OP_BIT,
    "null": OP_NULL,
    "mysqljson": OP_MYSQLJSON,
}
MODES = {
    "bytes": MODE_BYTES,
    "utf8": MODE_UTF8,
    "codec": MODE_CODEC,
    "padded": MODE_PADDED,
    "table": MODE_TABLE,
}

cdef object _UTC = _dt.UTC
cdef object _DECIMAL = _Decimal
cdef object _FORMAT_DATE = _format_date
cdef object _FORMAT_DATETIME = _format_datetime
cdef object _FLOAT32_SHORTEST = _py_float32_shortest
cdef object _DECIMAL_CONTEXT = _Context(prec=100)


cdef int overrun(Py_ssize_t pos, Py_ssize_t need, Py_ssize_t size) except -1:
    raise IndexError(f"row image value of {need} bytes at {pos} runs past {size} bytes")


cdef object _float32(const unsigned char *q):
    """values.float32_shortest(struct.unpack('<f')): %.6g..%.9g until it reads back as the
    same float32, formatted and parsed with the functions float.__format__ and float() use."""
    cdef float f
    cdef float cf
    cdef double value
    cdef double candidate
    cdef uint32_t bits
    cdef uint32_t cbits
    cdef char *text
    cdef int digits
    memcpy(&f, q, 4)
    value = f
    if not isfinite(value):
        return _FLOAT32_SHORTEST(value)
    memcpy(&bits, &f, 4)
    for digits in range(6, 10):
        text = PyOS_double_to_string(value, c'g', digits, 0, NULL)
        try:
            candidate = PyOS_string_to_double(text, NULL, NULL)
        finally:
            PyMem_Free(text)
        cf = <float>candidate
        if isinf(cf) and not isinf(candidate):
            return _FLOAT32_SHORTEST(value)  # struct.pack's OverflowError, as pure Python
        memcpy(&cbits, &cf, 4)
        if cbits == bits:
            return PyFloat_FromDouble(candidate)
    return PyFloat_FromDouble(value)


cdef object decimal_value(ColOp *op, const unsigned char *q, int size):
    cdef char text[128]
    cdef int n = replicad_decimal_text(
        q, size, op.ngroups, op.gbytes, op.gdigits, op.arg3, op.arg2, text
    )
    if n >= 0:
        return _DECIMAL(PyUnicode_DecodeASCII(text, n, NULL))
    # Wide DECIMAL: the same arithmetic as the generated code, on Python ints.
    cdef bint positive = (q[0] & 0x80) != 0
    cdef unsigned char b[40]
    cdef int i, g, k, at = 0
    cdef uint64_t part
    for i in range(size):
        b[i] = q[i] if positive else <unsigned char>(~q[i])
    b[0] &= 0x7F
    acc = 0
    for g in range(op.ngroups):
        part = 0
        for k in range(op.gbytes[g]):
            part = part << 8 | b[at]
            at += 1
        acc = acc * 10 ** op.gdigits[g] + part
    if not positive:
        acc = -acc
    if op.arg2:
        return _DECIMAL(acc).scaleb(-op.arg2, _DECIMAL_CONTEXT)
    return _DECIMAL(acc)


cdef object _time2(int frac_len, int scale, const unsigned char *q):
    """values._time2_decoder, including the borrow of negative values with 1-4 digits."""
    cdef int64_t packed, intpart, frac
    cdef int64_t hms, hours, minutes, seconds, micros, total, days, rest
    cdef bint negative
    if frac_len == 3:
        packed = <int64_t>read_be(q, 6) - 0x800000000000
    else:
        intpart = <int64_t>read_be(q, 3) - 0x800000
        frac = <int64_t>read_be(q + 3, frac_len) if frac_len else 0
        if intpart < 0 and frac:
            intpart += 1
            frac -= (<int64_t>1) << (8 * frac_len)
        packed = intpart * 16777216 + frac * scale
    negative = packed < 0
    if negative:
        packed = -packed
    hms = packed >> 24
    hours = (hms >> 12) % 1024
    minutes = (hms >> 6) % 64
    seconds = hms % 64
    micros = packed % 16777216
    total = ((hours * 60 + minutes) * 60 + seconds) * 1000000 + micros
    if negative:
        total = -total
    days = floordiv(total, 86400000000)
    rest = total - days * 86400000000
    return timedelta_new(<int>days, <int>(rest // 1000000), <int>(rest % 1000000))


cdef object _set_members(uint64_t mask, object names):
    cdef Py_ssize_t count = len(names)
    cdef Py_ssize_t j
    if count > 64:
        count = 64
    members = []
    for j in range(count):
        if mask >> j & 1:
            members.append(names[j])
    return PyUnicode_Join(",", members)


cdef _check_tables(object obj):
    """A MODE_TABLE column's (decoding table, JSON table): 256 characters (U+FFFE for an
    undefined byte), and 256 entries of at most 7 bytes of text and their length."""
    if not (isinstance(obj, tuple) and len(obj) == 2 and type(obj[0]) is str
            and len(obj[0]) == 256 and type(obj[1]) is bytes and len(obj[1]) == 2048):
        raise TypeError("table mode needs (str of 256, bytes of 2048)")
    for c in range(256):
        if obj[1][8 * c + 7] > 7 or (obj[1][8 * c + 7] == 0) != (obj[0][c] == "\ufffe"):
            raise ValueError(f"bad table entry for byte {c}")


cdef class ImageDecoder:
    """One row-image layout compiled to a plan; `decode(body, pos) -> (row, next_pos)`.
    Its fields are declared in _speedups.pxd, which the message writer cimports."""

    def __cinit__(self, names, plan, pure_factory=None):
        cdef Py_ssize_t i
        cdef ColOp *op
        self.names = tuple(names)
        self.plan = tuple(tuple(entry) for entry in plan)
        if len(self.names) != len(self.plan):
            raise ValueError("one plan entry per column")
        self.ncols = len(self.names)
        self.null_bytes = (self.ncols + 7) // 8
        self.pure_factory = pure_factory
        self.pure = None
        self.ops = <ColOp *>PyMem_Malloc(sizeof(ColOp) * (self.ncols or 1))
        if self.ops == NULL:
            raise MemoryError()
        memset(self.ops, 0, sizeof(ColOp) * (self.ncols or 1))
        objs = []
        for i in range(self.ncols):
            name, arg1, arg2, arg3, obj, groups = self.plan[i]
            op = &self.ops[i]
            op.op = OPCODES[name]
            op.arg1, op.arg3 = arg1, arg3
            op.arg2 = MODES[arg2] if op.op == OP_STR else arg2
            if op.op == OP_STR:
                if not 1 <= arg1 <= 4:
                    raise ValueError(f"length prefix of {arg1} bytes")
                if op.arg2 == MODE_CODEC and not isinstance(obj, bytes):
                    raise TypeError("codec name must be bytes")
                if op.arg2 == MODE_TABLE:
                    _check_tables(obj)
                    op.table = <const unsigned char *>PyBytes_AS_STRING(obj[1])
            elif op.op == OP_DECIMAL:
                if arg3 not in (0, 64, 128):
                    raise ValueError(f"DECIMAL integer width {arg3}")
                if len(groups) > 16 or sum(b for b, _ in groups) != arg1 or arg1 > 40:
                    raise ValueError(f"bad DECIMAL groups {groups!r}")
                op.ngroups = len(groups)
                for g, (nbytes, digits) in enumerate(groups):
                    if not (1 <= nbytes <= 4 and 1 <= digits <= 9):
                        raise ValueError(f"bad DECIMAL group {(nbytes, digits)!r}")
                    op.gbytes[g] = nbytes
                    op.gdigits[g] = digits
            elif op.op in (OP_DATETIME2, OP_TIMESTAMP2, OP_TIME2):
                if arg1 not in (0, 1, 2, 3):
                    raise ValueError(f"fraction of {arg1} bytes")
            elif op.op == OP_ENUM:
                if arg1 not in (1, 2):
                    raise ValueError(f"ENUM of {arg1} bytes")
            elif op.op in (OP_SET, OP_BIT):
                if not 0 <= arg1 <= 8:
                    raise ValueError(f"SET/BIT of {arg1} bytes")
            elif op.op == OP_CALL or op.op == OP_MYSQLJSON:
                if not callable(obj):
                    raise TypeError("call needs a decoder")
                if op.op == OP_MYSQLJSON and arg1 not in (1, 2, 3, 4):
                    raise ValueError(f"JSON length of {arg1} bytes")
            objs.append(obj)
        self.objs = tuple(objs)

    def __dealloc__(self):
        PyMem_Free(self.ops)

    def __reduce__(self):
        raise TypeError("ImageDecoder cannot be pickled")  # nor can a generated decoder

    def __copy__(self):
        return self  # immutable, and copied as the generated functions are: not at all

    def __deepcopy__(self, memo):
        return self

    cdef object _pure_decode(self, body, pos):
        if self.pure is None:
            if self.pure_factory is None:
                raise TypeError(f"body must be bytes, not {type(body).__name__}")
            self.pure = self.pure_factory()
        return self.pure(body, pos)

    def decode(self, body, Py_ssize_t pos):
        """Decode the row image at `pos` of `body`: (dict of column name -> value, next pos)."""
        if not PyBytes_CheckExact(body) or pos < 0:
            return self._pure_decode(body, pos)
        return self._decode(<bytes>body, pos)

    cdef object _value(self, Py_ssize_t i, bytes body, const unsigned char *p,
                       Py_ssize_t size, Py_ssize_t *ppos):
        """Column `i` (not NULL) at ppos[0]: its Python value; ppos[0] moves past it."""
        cdef Py_ssize_t pos = ppos[0]
        cdef const unsigned char *q
        cdef ColOp *op
        cdef Py_ssize_t n, need
        cdef int k
        cdef uint64_t u
        cdef int64_t year, month, day
        cdef int64_t f[7]
        cdef long long us
        cdef double d
        cdef int yy, mm, dd
        cdef object value
        cdef object obj
        op = &self.ops[i]
        q = p + (pos if pos <= size else size)  # never dereferenced before a length check
        k = op.op
        if k == OP_STR:
            q = text_at(op, p, size, &pos, &n)
            if op.arg2 == MODE_UTF8:
                try:
                    value = PyUnicode_DecodeUTF8(<char *>q, n, NULL)
                except UnicodeDecodeError:
                    value = PyBytes_FromStringAndSize(<char *>q, n)
            elif op.arg2 == MODE_BYTES:
                value = PyBytes_FromStringAndSize(<char *>q, n)
            elif op.arg2 == MODE_PADDED:
                if n < op.arg3:
                    value = PyBytes_FromStringAndSize(NULL, op.arg3)
                    memcpy(PyBytes_AS_STRING(value), q, n)
                    memset(PyBytes_AS_STRING(value) + n, 0, op.arg3 - n)
                else:
                    value = PyBytes_FromStringAndSize(<char *>q, n)
            elif op.arg2 == MODE_TABLE:
                obj = <object>PyTuple_GET_ITEM(<object>PyTuple_GET_ITEM(self.objs, i), 0)
                try:
                    value = PyUnicode_DecodeCharmap(<char *>q, n, obj, NULL)
                except UnicodeDecodeError:
                    value = PyBytes_FromStringAndSize(<char *>q, n)
            else:
                obj = <object>PyTuple_GET_ITEM(self.objs, i)
                try:
                    value = PyUnicode_Decode(<char *>q, n, PyBytes_AS_STRING(obj), NULL)
                except UnicodeDecodeError:
                    value = PyBytes_FromStringAndSize(<char *>q, n)
        elif k >= OP_I8 and k <= OP_U64:
            need = int_size(k)
            if need > size - pos:
                overrun(pos, need, size)
            u = read_le(q, <int>need)
            pos += need
            if unsigned_int(k):
                value = PyLong_FromUnsignedLongLong(u)
            else:
                value = PyLong_FromLongLong(sign_extend(u, <int>need))
        elif k == OP_DOUBLE:
            if 8 > size - pos:
                overrun(pos, 8, size)
            memcpy(&d, q, 8)
            value = PyFloat_FromDouble(d)
            pos += 8
        elif k == OP_DECIMAL:
            need = op.arg1
            if need > size - pos:
                overrun(pos, need, size)
            value = decimal_value(op, q, op.arg1)
            pos += need
        elif k == OP_DATETIME2:
            need = 5 + op.arg1
            if need > size - pos:
                overrun(pos, need, size)
            pos += need
            if datetime2_fields(op, q, f):
                value = datetime_new(
                    <int>f[0], <int>f[1], <int>f[2], <int>f[3], <int>f[4], <int>f[5], <int>f[6], None
                )
            else:
                value = _FORMAT_DATETIME(f[0], f[1], f[2], f[3], f[4], f[5], f[6], op.arg3)
        elif k == OP_TIMESTAMP2:
            need = 4 + op.arg1
            if need > size - pos:
                overrun(pos, need, size)
            u = read_be(q, 4)
            us = <long long>read_be(q + 4, op.arg1) * op.arg2
            pos += need
            if u or us:
                if us > 999999:
                    raise ValueError("microsecond must be in 0..999999")
                replicad_civil(<long long>(u // 86400), &yy, &mm, &dd)
                u = u % 86400
                value = datetime_new(
                    yy, mm, dd, <int>(u // 3600), <int>(u // 60 % 60), <int>(u % 60),
                    <int>us, _UTC
                )
            else:
                value = <object>PyTuple_GET_ITEM(self.objs, i)
        elif k == OP_DATE:
            if 3 > size - pos:
                overrun(pos, 3, size)
            u = read_le(q, 3)
            pos += 3
            year, month, day = u >> 9, (u >> 5) & 15, u & 31
            if valid_date(year, month, day):
                value = date_new(<int>year, <int>month, <int>day)
            else:
                value = _FORMAT_DATE(year, month, day)
        elif k == OP_ENUM:
            need = op.arg1
            if need > size - pos:
                overrun(pos, need, size)
            u = read_le(q, op.arg1)
            pos += need
            obj = <object>PyTuple_GET_ITEM(self.objs, i)
            if obj is None:
                value = PyLong_FromUnsignedLongLong(u)
            elif u == 0:
                value = ""
            elif <Py_ssize_t>u <= PyTuple_GET_SIZE(obj):
                value = <object>PyTuple_GET_ITEM(obj, <Py_ssize_t>u - 1)
            else:
                value = PyLong_FromUnsignedLongLong(u)
        elif k == OP_CALL or k == OP_MYSQLJSON:
            obj = <object>PyTuple_GET_ITEM(self.objs, i)
            value, pos = obj(body, pos)
        elif k == OP_FLOAT:
            if 4 > size - pos:
                overrun(pos, 4, size)
            value = _float32(q)
            pos += 4
        elif k == OP_TIME2:
            need = 3 + op.arg1
            if need > size - pos:
                overrun(pos, need, size)
            value = _time2(op.arg1, op.arg2, q)
            pos += need
        elif k == OP_YEAR:
            if 1 > size - pos:
                overrun(pos, 1, size)
            value = PyLong_FromLong(q[0] + 1900 if q[0] else 0)
            pos += 1
        elif k == OP_SET:
            need = op.arg1
            if need > size - pos:
                overrun(pos, need, size)
            u = read_le(q, op.arg1)
            pos += need
            obj = <object>PyTuple_GET_ITEM(self.objs, i)
            if obj is None:
                value = PyLong_FromUnsignedLongLong(u)
            else:
                value = _set_members(u, obj)
        elif k == OP_BIT:
            need = op.arg1
            if need > size - pos:
                overrun(pos, need, size)
            value = PyLong_FromUnsignedLongLong(read_be(q, op.arg1))
            pos += need
        elif k == OP_NULL:
            value = None
        else:
            raise SystemError(f"unknown opcode {k}")
        ppos[0] = pos
        return value

    cdef tuple _decode(self, bytes body, Py_ssize_t pos):
        cdef dict row = self._row_at(body, &pos)
        return row, pos

    cdef dict _row_at(self, bytes body, Py_ssize_t *ppos):
        """The image at ppos[0] as a dict; ppos[0] moves past it."""
        cdef Py_ssize_t pos = ppos[0]
        cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(body)
        cdef Py_ssize_t size = PyBytes_GET_SIZE(body)
        cdef const unsigned char *nulls
        cdef Py_ssize_t i
        cdef tuple names = self.names
        cdef dict row
        if self.null_bytes > size - pos:
            overrun(pos, self.null_bytes, size)
        nulls = p + pos
        pos += self.null_bytes
        row = _PyDict_NewPresized(self.ncols)
        for i in range(self.ncols):
            if nulls[i >> 3] >> (i & 7) & 1:
                PyDict_SetItem(row, <object>PyTuple_GET_ITEM(names, i), None)
                continue
            PyDict_SetItem(
                row, <object>PyTuple_GET_ITEM(names, i), self._value(i, body, p, size, &pos)
            )
        ppos[0] = pos
        return row


def decode_rows(ImageDecoder first not None, ImageDecoder second, object body, Py_ssize_t pos,
                bint insert):
    """Every row image of a ROWS event from `pos` to the end of `body`, as the list of
    (before, after) pairs `RowsEvent.rows()` yields: one call per event instead of a Python
    loop step per row. `second`: the after images' decoder of an update (None otherwise);
    `insert`: single images are after images. None when an image does not fit or the images
    do not end exactly at the end: the caller's row-by-row loop then hands out the rows
    before the faulty one and raises the error that names it."""
    cdef Py_ssize_t end
    cdef list out = []
    cdef dict row
    if not PyBytes_CheckExact(body) or pos < 0:
        return None  # the pure decoder defines what other buffers do
    end = PyBytes_GET_SIZE(body)
    try:
        while pos < end:
            row = first._row_at(<bytes>body, &pos)
            if second is not None:
                out.append((row, second._row_at(<bytes>body, &pos)))
            elif insert:
                out.append((None, row))
            else:
                out.append((row, None))
    except Exception:
        return None
    return out if pos == end else None
