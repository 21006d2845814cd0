# cython: language_level=3
# What the message writer (replicad/sinks/_writer.pyx) shares with the row decoder at C level:
# the plan of a layout (ColOp, its opcodes and text modes), the decoder's fields and its
# per-column reader, and the readers both walk a row image with. Inline functions are
# compiled into each extension; `overrun` and `decimal_value` are called through the
# extension's C API (cimport), never as Python calls.

cimport cython
from libc.stdint cimport int64_t, uint64_t

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
        if (size < 1 || size > 40) return -1;  /* a DECIMAL has 1-40 bytes */
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
        if (scale) {  /* "E-<scale>", scale < 100 (MySQL allows 30) */
            out[len++] = 'E';
            out[len++] = '-';
            if (scale >= 10) out[len++] = (char)('0' + scale / 10 % 10);
            out[len++] = (char)('0' + scale % 10);
        }
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
    OP_MYSQLJSON

# text modes of OP_STR
cdef enum Mode:
    MODE_BYTES = 0   # the bytes as stored
    MODE_UTF8 = 1    # str if valid UTF-8, else bytes
    MODE_CODEC = 2   # str decoded with obj (codec name as bytes), else bytes
    MODE_PADDED = 3  # bytes right-padded with zero bytes to arg3 (BINARY(n))
    MODE_TABLE = 4   # a single-byte charset: obj = (decoding table str, JSON table bytes)

cdef struct ColOp:
    int op
    int arg1
    int arg2
    int arg3
    int ngroups
    unsigned char gbytes[16]
    unsigned char gdigits[16]
    const unsigned char *table  # MODE_TABLE: 256 entries of 8 bytes (accel.json_table)


cdef class ImageDecoder:
    cdef ColOp *ops
    cdef Py_ssize_t ncols
    cdef Py_ssize_t null_bytes
    cdef tuple names
    cdef tuple objs
    cdef object pure_factory
    cdef object pure
    cdef readonly tuple plan

    cdef object _pure_decode(self, body, pos)
    cdef object _value(self, Py_ssize_t i, bytes body, const unsigned char *p,
                       Py_ssize_t size, Py_ssize_t *ppos)
    cdef tuple _decode(self, bytes body, Py_ssize_t pos)
    cdef dict _row_at(self, bytes body, Py_ssize_t *ppos)


cdef int overrun(Py_ssize_t pos, Py_ssize_t need, Py_ssize_t size) except -1
cdef object decimal_value(ColOp *op, const unsigned char *q, int size)


# ---------------------------------------------------------------------- shared readers
# What `ImageDecoder._value` (Python values) and the writer's `_json` (JSON text) both read
# from a row image.

cdef inline uint64_t read_be(const unsigned char *q, int k) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(k):
        v = v << 8 | q[i]
    return v


cdef inline uint64_t read_le(const unsigned char *q, int k) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(k - 1, -1, -1):
        v = v << 8 | q[i]
    return v


@cython.cdivision(True)
cdef inline int64_t floordiv(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t q = a // b  # C's division truncates towards zero: round down below
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


@cython.cdivision(True)
cdef inline bint valid_date(int64_t y, int64_t m, int64_t d) noexcept nogil:
    """Whether Python's date can hold it (proleptic Gregorian, years 1-9999)."""
    cdef int dim
    if y < 1 or y > 9999 or m < 1 or m > 12 or d < 1:
        return False
    if m == 2:
        dim = 29 if (y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)) else 28
    elif m == 4 or m == 6 or m == 9 or m == 11:
        dim = 30
    else:
        dim = 31
    return d <= dim


cdef extern from *:
    """
    /* By opcode (OP_I8 = 1 .. OP_U64 = 10, each signed then unsigned): an integer's bytes,
       and whether it is unsigned. One static copy in each extension that includes them. */
    static const int replicad_int_size[11] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 8, 8};
    static const int replicad_int_unsigned[11] = {0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
    """
    const int replicad_int_size[11]
    const int replicad_int_unsigned[11]


cdef inline int int_size(int op) noexcept nogil:
    """Bytes of an integer opcode (OP_I8 .. OP_U64)."""
    return replicad_int_size[op]


cdef inline bint unsigned_int(int op) noexcept nogil:
    """Whether an integer opcode is an unsigned one."""
    return replicad_int_unsigned[op]


cdef inline int64_t sign_extend(uint64_t u, int nbytes) noexcept nogil:
    cdef int shift = 64 - 8 * nbytes
    return (<int64_t>(u << shift)) >> shift


cdef inline const unsigned char *text_at(ColOp *op, const unsigned char *p, Py_ssize_t size,
                                         Py_ssize_t *ppos, Py_ssize_t *length) except NULL:
    """A length-prefixed value (arg1 bytes of length) at ppos[0]: its bytes; ppos[0] moves
    past it, length[0] is its size."""
    cdef Py_ssize_t pos = ppos[0]
    cdef Py_ssize_t need = op.arg1
    cdef Py_ssize_t n
    if need > size - pos:
        overrun(pos, need, size)
    n = <Py_ssize_t>read_le(p + pos, op.arg1)
    pos += need
    if n > size - pos:
        overrun(pos, n, size)
    ppos[0] = pos + n
    length[0] = n
    return p + pos


cdef inline bint datetime2_fields(ColOp *op, const unsigned char *q, int64_t *f) noexcept:
    """DATETIME2 (5 bytes + arg1 of fraction) into f = year, month, day, hour, minute,
    second, microsecond; whether Python's datetime can hold it."""
    cdef int64_t x = <int64_t>read_be(q, 5) - 0x8000000000
    cdef int64_t ymd = x >> 17
    cdef int64_t ym = ymd >> 5
    cdef int64_t hms = x & 0x1FFFF
    f[0] = floordiv(ym, 13)
    f[1] = ym - f[0] * 13
    f[2] = ymd & 31
    f[3] = hms >> 12
    f[4] = (hms >> 6) & 63
    f[5] = hms & 63
    f[6] = <int64_t>read_be(q + 5, op.arg1) * op.arg2
    return (
        valid_date(f[0], f[1], f[2]) and f[3] < 24 and f[4] < 60 and f[5] < 60 and f[6] <= 999999
    )
