# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""Compiled row-image decoder: the accelerated twin of the functions `codegen.py` generates.

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
from cpython.unicode cimport PyUnicode_Decode, PyUnicode_DecodeUTF8
from libc.math cimport isfinite, isinf
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
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

cdef extern from *:
    """
    /* DECIMAL(p,s) -> "[-]digits[E-s]" for Decimal(): groups of base-10^9 digits, each in
       1-4 big-endian bytes, sign bit flipped, all bits inverted when negative. Horner's
       rule gives the same integer as codegen's sum of group * 10^(digits after it), even
       for corrupt groups larger than their digit count. Returns the text length, or -1
       when the layout needs wider integers than C has here (the caller uses Python ints). */
    #include <stdio.h>
    #include <string.h>
    static const unsigned long long replicad_pow10[10] = {
        1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
        100000000ULL, 1000000000ULL};

    static int replicad_u64_text(unsigned long long v, char *out) {
        char tmp[24];
        int n = 0, i;
        do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
        for (i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
        return n;
    }

    #ifdef __SIZEOF_INT128__
    static int replicad_u128_text(unsigned __int128 v, char *out) {
        char tmp[48];
        int n = 0, i;
        do { tmp[n++] = (char)('0' + (int)(v % 10)); v /= 10; } while (v);
        for (i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
        return n;
    }
    #endif

    /* width: 64 or 128 = the C integer the layout's largest possible value (computed in
       accel.py from the group sizes, corrupt groups included) fits in. */
    static int replicad_decimal_text(const unsigned char *p, int size, int ngroups,
                                     const unsigned char *gbytes,
                                     const unsigned char *gdigits, int width,
                                     int scale, char *out) {
        unsigned char b[40];
        int positive, i, g, k, at = 0, len = 0;
        if (size > 40) return -1;
        positive = p[0] & 0x80;
        for (i = 0; i < size; i++) b[i] = positive ? p[i] : (unsigned char)~p[i];
        b[0] &= 0x7F;
        if (width == 64) {
            unsigned long long acc = 0;
            for (g = 0; g < ngroups; g++) {
                unsigned long long part = 0;
                for (k = 0; k < gbytes[g]; k++) part = part << 8 | b[at++];
                acc = acc * replicad_pow10[gdigits[g]] + part;
            }
            if (!positive && acc) out[len++] = '-';
            len += replicad_u64_text(acc, out + len);
        }
    #ifdef __SIZEOF_INT128__
        else if (width == 128) {
            unsigned __int128 acc = 0;
            for (g = 0; g < ngroups; g++) {
                unsigned long long part = 0;
                for (k = 0; k < gbytes[g]; k++) part = part << 8 | b[at++];
                acc = acc * replicad_pow10[gdigits[g]] + part;
            }
            if (!positive && acc) out[len++] = '-';
            len += replicad_u128_text(acc, out + len);
        }
    #endif
        else {
            return -1;
        }
        if (scale) len += sprintf(out + len, "E-%d", scale);
        return len;
    }

    /* Proleptic Gregorian date of a day count from 1970-01-01 (days >= 0). */
    static void replicad_civil(long long days, int *y, int *m, int *d) {
        long long z = days + 719468;
        long long era = z / 146097;
        long long doe = z - era * 146097;
        long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
        long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        long long mp = (5 * doy + 2) / 153;
        *d = (int)(doy - (153 * mp + 2) / 5 + 1);
        *m = (int)(mp < 10 ? mp + 3 : mp - 9);
        *y = (int)(yoe + era * 400 + (*m <= 2));
    }
    """
    int replicad_decimal_text(const unsigned char *p, int size, int ngroups,
                              const unsigned char *gbytes, const unsigned char *gdigits,
                              int width, int scale, char *out)
    void replicad_civil(long long days, int *y, int *m, int *d)


cdef enum Op:
    OP_CALL = 0
    OP_I8
    OP_U8
    OP_I16
    OP_U16
    OP_I24
    OP_U24
    OP_I32
    OP_U32
    OP_I64
    OP_U64
    OP_DOUBLE
    OP_FLOAT
    OP_YEAR
    OP_DECIMAL
    OP_STR
    OP_DATE
    OP_DATETIME2
    OP_TIMESTAMP2
    OP_TIME2
    OP_ENUM
    OP_SET
    OP_BIT
    OP_NULL

# text modes of OP_STR
cdef enum Mode:
    MODE_BYTES = 0   # the bytes as stored
    MODE_UTF8 = 1    # str if valid UTF-8, else bytes
    MODE_CODEC = 2   # str decoded with obj (codec name as bytes), else bytes
    MODE_PADDED = 3  # bytes right-padded with zero bytes to arg3 (BINARY(n))

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
}
MODES = {"bytes": MODE_BYTES, "utf8": MODE_UTF8, "codec": MODE_CODEC, "padded": MODE_PADDED}

cdef struct ColOp:
    int op
    int arg1
    int arg2
    int arg3
    int ngroups
    unsigned char gbytes[16]
    unsigned char gdigits[16]

cdef object _UTC = _dt.UTC
cdef object _DECIMAL = _Decimal
cdef object _FORMAT_DATE = _format_date
cdef object _FORMAT_DATETIME = _format_datetime
cdef object _FLOAT32_SHORTEST = _py_float32_shortest
cdef object _DECIMAL_CONTEXT = _Context(prec=100)
cdef int _DAYS_IN_MONTH[16]
_DAYS_IN_MONTH[:] = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31, 0, 0, 0]


cdef int _overrun(Py_ssize_t pos, Py_ssize_t need, Py_ssize_t size) except -1:
    raise IndexError(f"row image value of {need} bytes at {pos} runs past {size} bytes")


cdef inline uint64_t _be(const unsigned char *q, int k) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(k):
        v = v << 8 | q[i]
    return v


cdef inline uint64_t _le(const unsigned char *q, int k) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(k - 1, -1, -1):
        v = v << 8 | q[i]
    return v


cdef inline int64_t _floordiv(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t q = a / b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


cdef inline bint _valid_date(int64_t y, int64_t m, int64_t d) noexcept nogil:
    cdef int dim
    if y < 1 or y > 9999 or m < 1 or m > 12 or d < 1:
        return False
    dim = _DAYS_IN_MONTH[m]
    if m == 2 and (y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)):
        dim = 29
    return d <= dim


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


cdef object _decimal(ColOp *op, const unsigned char *q, int size):
    cdef char text[128]
    cdef int n = replicad_decimal_text(
        q, size, op.ngroups, op.gbytes, op.gdigits, op.arg3, op.arg2, text
    )
    if n >= 0:
        return _DECIMAL(text[:n].decode("ascii"))
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
        packed = <int64_t>_be(q, 6) - 0x800000000000
    else:
        intpart = <int64_t>_be(q, 3) - 0x800000
        frac = <int64_t>_be(q + 3, frac_len) if frac_len else 0
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
    days = _floordiv(total, 86400000000)
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


cdef class ImageDecoder:
    """One row-image layout compiled to a plan; `decode(body, pos) -> (row, next_pos)`."""

    cdef ColOp *ops
    cdef Py_ssize_t ncols
    cdef Py_ssize_t null_bytes
    cdef tuple names
    cdef tuple objs
    cdef object pure_factory
    cdef object pure
    cdef readonly tuple plan

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
            elif op.op == OP_CALL:
                if not callable(obj):
                    raise TypeError("call needs a decoder")
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

    cdef tuple _decode(self, bytes body, Py_ssize_t pos):
        cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(body)
        cdef Py_ssize_t size = PyBytes_GET_SIZE(body)
        cdef const unsigned char *nulls
        cdef const unsigned char *q
        cdef ColOp *op
        cdef Py_ssize_t i, n, need
        cdef int k
        cdef uint64_t u
        cdef int64_t x, ymd, ym, hms, year, month, day
        cdef long long us
        cdef double d
        cdef int yy, mm, dd
        cdef tuple names = self.names
        cdef dict row
        cdef object value
        cdef object obj
        if self.null_bytes > size - pos:
            _overrun(pos, self.null_bytes, size)
        nulls = p + pos
        pos += self.null_bytes
        row = _PyDict_NewPresized(self.ncols)
        for i in range(self.ncols):
            if nulls[i >> 3] >> (i & 7) & 1:
                PyDict_SetItem(row, <object>PyTuple_GET_ITEM(names, i), None)
                continue
            op = &self.ops[i]
            q = p + (pos if pos <= size else size)  # never dereferenced before a length check
            k = op.op
            if k == OP_STR:
                need = op.arg1
                if need > size - pos:
                    _overrun(pos, need, size)
                n = <Py_ssize_t>_le(q, op.arg1)
                pos += need
                if n > size - pos:
                    _overrun(pos, n, size)
                q = p + pos
                pos += n
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
                else:
                    obj = <object>PyTuple_GET_ITEM(self.objs, i)
                    try:
                        value = PyUnicode_Decode(<char *>q, n, PyBytes_AS_STRING(obj), NULL)
                    except UnicodeDecodeError:
                        value = PyBytes_FromStringAndSize(<char *>q, n)
            elif k == OP_I32 or k == OP_U32:
                if 4 > size - pos:
                    _overrun(pos, 4, size)
                u = _le(q, 4)
                if k == OP_I32:
                    value = PyLong_FromLong(<long>(<int32_t>u))
                else:
                    value = PyLong_FromUnsignedLongLong(u)
                pos += 4
            elif k == OP_I64 or k == OP_U64:
                if 8 > size - pos:
                    _overrun(pos, 8, size)
                u = _le(q, 8)
                if k == OP_I64:
                    value = PyLong_FromLongLong(<int64_t>u)
                else:
                    value = PyLong_FromUnsignedLongLong(u)
                pos += 8
            elif k == OP_I8 or k == OP_U8:
                if 1 > size - pos:
                    _overrun(pos, 1, size)
                if k == OP_I8:
                    value = PyLong_FromLong(<long>(<signed char>q[0]))
                else:
                    value = PyLong_FromLong(<long>q[0])
                pos += 1
            elif k == OP_I16 or k == OP_U16:
                if 2 > size - pos:
                    _overrun(pos, 2, size)
                u = _le(q, 2)
                if k == OP_I16:
                    value = PyLong_FromLong(<long>(<short>u))
                else:
                    value = PyLong_FromLong(<long>u)
                pos += 2
            elif k == OP_I24 or k == OP_U24:
                if 3 > size - pos:
                    _overrun(pos, 3, size)
                u = _le(q, 3)
                if k == OP_I24 and u & 0x800000:
                    value = PyLong_FromLongLong(<int64_t>u - 0x1000000)
                else:
                    value = PyLong_FromLongLong(<int64_t>u)
                pos += 3
            elif k == OP_DOUBLE:
                if 8 > size - pos:
                    _overrun(pos, 8, size)
                memcpy(&d, q, 8)
                value = PyFloat_FromDouble(d)
                pos += 8
            elif k == OP_DECIMAL:
                need = op.arg1
                if need > size - pos:
                    _overrun(pos, need, size)
                value = _decimal(op, q, op.arg1)
                pos += need
            elif k == OP_DATETIME2:
                need = 5 + op.arg1
                if need > size - pos:
                    _overrun(pos, need, size)
                x = <int64_t>_be(q, 5) - 0x8000000000
                us = <long long>_be(q + 5, op.arg1) * op.arg2
                pos += need
                ymd = x >> 17
                ym = ymd >> 5
                hms = x & 0x1FFFF
                year = _floordiv(ym, 13)
                month = ym - year * 13
                day = ymd & 31
                if (
                    _valid_date(year, month, day)
                    and (hms >> 12) < 24
                    and ((hms >> 6) & 63) < 60
                    and (hms & 63) < 60
                    and us <= 999999
                ):
                    value = datetime_new(
                        <int>year, <int>month, <int>day, <int>(hms >> 12), <int>((hms >> 6) & 63),
                        <int>(hms & 63), <int>us, None
                    )
                else:
                    value = _FORMAT_DATETIME(
                        year, month, day, hms >> 12, (hms >> 6) & 63, hms & 63, us, op.arg3
                    )
            elif k == OP_TIMESTAMP2:
                need = 4 + op.arg1
                if need > size - pos:
                    _overrun(pos, need, size)
                u = _be(q, 4)
                us = <long long>_be(q + 4, op.arg1) * op.arg2
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
                    _overrun(pos, 3, size)
                u = _le(q, 3)
                pos += 3
                year, month, day = u >> 9, (u >> 5) & 15, u & 31
                if _valid_date(year, month, day):
                    value = date_new(<int>year, <int>month, <int>day)
                else:
                    value = _FORMAT_DATE(year, month, day)
            elif k == OP_ENUM:
                need = op.arg1
                if need > size - pos:
                    _overrun(pos, need, size)
                u = _le(q, op.arg1)
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
            elif k == OP_CALL:
                obj = <object>PyTuple_GET_ITEM(self.objs, i)
                value, pos = obj(body, pos)
            elif k == OP_FLOAT:
                if 4 > size - pos:
                    _overrun(pos, 4, size)
                value = _float32(q)
                pos += 4
            elif k == OP_TIME2:
                need = 3 + op.arg1
                if need > size - pos:
                    _overrun(pos, need, size)
                value = _time2(op.arg1, op.arg2, q)
                pos += need
            elif k == OP_YEAR:
                if 1 > size - pos:
                    _overrun(pos, 1, size)
                value = PyLong_FromLong(q[0] + 1900 if q[0] else 0)
                pos += 1
            elif k == OP_SET:
                need = op.arg1
                if need > size - pos:
                    _overrun(pos, need, size)
                u = _le(q, op.arg1)
                pos += need
                obj = <object>PyTuple_GET_ITEM(self.objs, i)
                if obj is None:
                    value = PyLong_FromUnsignedLongLong(u)
                else:
                    value = _set_members(u, obj)
            elif k == OP_BIT:
                need = op.arg1
                if need > size - pos:
                    _overrun(pos, need, size)
                value = PyLong_FromUnsignedLongLong(_be(q, op.arg1))
                pos += need
            elif k == OP_NULL:
                value = None
            else:
                raise SystemError(f"unknown opcode {k}")
            PyDict_SetItem(row, <object>PyTuple_GET_ITEM(names, i), value)
        return row, pos
