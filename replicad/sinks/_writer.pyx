# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""Compiled message writer: every Kafka message of one ROWS event, written in C at once.

`encode_rows` walks the event's row images with the decoder's plan (`ImageDecoder` of
replicad/binlog/_speedups.pyx, whose fields and readers it cimports from _speedups.pxd) and
writes each image straight as the envelope's JSON (docs/architecture.md, "Message format"):
no dict per row, no Python call per value for the common types. Values it has no writer for
go through the `fallback` of their `ImageWriter`, the envelope's own JSON of the decoded
value. The bytes must equal what the envelope's pure path (orjson with `envelope._default`)
writes for the decoded rows; tests/unit/test_event_envelope.py compares the two on every
type. MySQL JSON documents are printed here too, as MySQL prints them.

Only replicad/sinks/writer_choice.py imports this module.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.bytes cimport PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.math cimport isfinite
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

from replicad.binlog._speedups cimport (
    MODE_BYTES,
    MODE_PADDED,
    MODE_TABLE,
    MODE_UTF8,
    OP_BIT,
    OP_CALL,
    OP_DATE,
    OP_DATETIME2,
    OP_DECIMAL,
    OP_DOUBLE,
    OP_ENUM,
    OP_FLOAT,
    OP_I8,
    OP_MYSQLJSON,
    OP_NULL,
    OP_SET,
    OP_STR,
    OP_TIME2,
    OP_TIMESTAMP2,
    OP_U64,
    OP_YEAR,
    ColOp,
    ImageDecoder,
    datetime2_fields,
    decimal_value,
    int_size,
    overrun,
    read_be,
    read_le,
    replicad_civil,
    replicad_decimal_text,
    sign_extend,
    text_at,
    unsigned_int,
    valid_date,
)

cdef extern from "Python.h":
    char* PyOS_double_to_string(double val, char format_code, int precision, int flags,
                                int *ptype) except NULL
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    void *PyMem_Realloc(void *p, size_t n)
    double PyOS_string_to_double(const char *s, char **endptr, void *overflow_exception) except? -1.0


cdef extern from *:
    """
    /* repr(float) in C: the shortest decimal digits that read back as the double (the
       digits Python's dtoa gives in its mode 0), found with the Ryu method (Ulf Adams,
       PLDI 2018): the rounding interval's bounds and the value, scaled by a 125-bit
       power of five, are narrowed one decimal digit at a time. About 10x faster than
       dtoa's big-number arithmetic on 17-digit values. The power tables are filled from
       Python integers when the module loads (replicad_shortest_init). */
    #include <stdint.h>
    #include <string.h>
    #ifdef __SIZEOF_INT128__
    #define REPLICAD_SHORTEST 1
    #define REPLICAD_POW5 326
    #define REPLICAD_POW5_INV 342
    #define REPLICAD_POW5_BITS 125
    static uint64_t replicad_pow5[REPLICAD_POW5][2];          /* lo, hi */
    static uint64_t replicad_pow5_inv[REPLICAD_POW5_INV][2];  /* lo, hi */

    static void replicad_shortest_set(int inverse, int i, uint64_t lo, uint64_t hi) {
        uint64_t *slot = inverse ? replicad_pow5_inv[i] : replicad_pow5[i];
        slot[0] = lo;
        slot[1] = hi;
    }

    /* ceil(log2(5^e)) (1 for e = 0), floor(log10(2^e)), floor(log10(5^e)) */
    static inline int32_t replicad_pow5_bits(int32_t e) {
        return (int32_t)(((uint32_t)e * 1217359) >> 19) + 1;
    }
    static inline int32_t replicad_log10_pow2(int32_t e) {
        return (int32_t)(((uint32_t)e * 78913) >> 18);
    }
    static inline int32_t replicad_log10_pow5(int32_t e) {
        return (int32_t)(((uint32_t)e * 732923) >> 20);
    }
    static inline int replicad_times5(uint64_t v, int32_t p) {  /* 5^p divides v (v > 0) */
        int32_t count = 0;
        while (v % 5 == 0) { v /= 5; count++; }
        return count >= p;
    }
    static inline int replicad_times2(uint64_t v, int32_t p) {  /* 2^p divides v */
        return (v & ((1ULL << p) - 1)) == 0;
    }
    /* (m * factor) >> j, factor a 128-bit table entry, j >= 64 */
    static inline uint64_t replicad_mul_shift(uint64_t m, const uint64_t *factor, int32_t j) {
        unsigned __int128 low = (unsigned __int128)m * factor[0];
        unsigned __int128 high = (unsigned __int128)m * factor[1];
        return (uint64_t)(((low >> 64) + high) >> (j - 64));
    }

    /* A finite, non-zero double's shortest digits: *digits x 10^*exponent. */
    static void replicad_shortest(uint64_t fraction, uint32_t biased, uint64_t *digits,
                                  int32_t *exponent) {
        int32_t e2, e10, q, i, j, k, removed = 0;
        uint64_t m2, mv, vr, vp, vm, output;
        uint32_t mm_shift;
        int accept_bounds, vm_zeros = 0, vr_zeros = 0, last = 0, round_up = 0;
        if (biased == 0) {
            e2 = 1 - 1023 - 52 - 2;
            m2 = fraction;
        } else {
            e2 = (int32_t)biased - 1023 - 52 - 2;
            m2 = (1ULL << 52) | fraction;
        }
        accept_bounds = (m2 & 1) == 0;  /* an even mantissa owns its interval's ends */
        mv = 4 * m2;
        /* the lower bound is closer when the mantissa is a power of two (not subnormal) */
        mm_shift = fraction != 0 || biased <= 1;
        if (e2 >= 0) {
            q = replicad_log10_pow2(e2) - (e2 > 3);
            e10 = q;
            k = REPLICAD_POW5_BITS + replicad_pow5_bits(q) - 1;
            i = -e2 + q + k;
            vr = replicad_mul_shift(4 * m2, replicad_pow5_inv[q], i);
            vp = replicad_mul_shift(4 * m2 + 2, replicad_pow5_inv[q], i);
            vm = replicad_mul_shift(4 * m2 - 1 - mm_shift, replicad_pow5_inv[q], i);
            if (q <= 21) {  /* were the digits dropped by the scaling all zeros? */
                if (mv % 5 == 0) {
                    vr_zeros = replicad_times5(mv, q);
                } else if (accept_bounds) {
                    vm_zeros = replicad_times5(mv - 1 - mm_shift, q);
                } else {
                    vp -= replicad_times5(mv + 2, q);
                }
            }
        } else {
            q = replicad_log10_pow5(-e2) - (-e2 > 1);
            e10 = q + e2;
            i = -e2 - q;
            k = replicad_pow5_bits(i) - REPLICAD_POW5_BITS;
            j = q - k;
            vr = replicad_mul_shift(4 * m2, replicad_pow5[i], j);
            vp = replicad_mul_shift(4 * m2 + 2, replicad_pow5[i], j);
            vm = replicad_mul_shift(4 * m2 - 1 - mm_shift, replicad_pow5[i], j);
            if (q <= 1) {
                vr_zeros = 1;
                if (accept_bounds) {
                    vm_zeros = mm_shift == 1;
                } else {
                    vp--;
                }
            } else if (q < 63) {
                vr_zeros = replicad_times2(mv, q);
            }
        }
        if (vm_zeros || vr_zeros) {  /* an exact end or value: ties need care */
            while (vp / 10 > vm / 10) {
                vm_zeros &= vm % 10 == 0;
                vr_zeros &= last == 0;
                last = (int)(vr % 10);
                vr /= 10; vp /= 10; vm /= 10;
                removed++;
            }
            if (vm_zeros) {
                while (vm % 10 == 0) {
                    vr_zeros &= last == 0;
                    last = (int)(vr % 10);
                    vr /= 10; vp /= 10; vm /= 10;
                    removed++;
                }
            }
            if (vr_zeros && last == 5 && vr % 2 == 0) last = 4;  /* half way: to even */
            output = vr + ((vr == vm && (!accept_bounds || !vm_zeros)) || last >= 5);
        } else {
            while (vp / 10 > vm / 10) {
                round_up = vr % 10 >= 5;
                vr /= 10; vp /= 10; vm /= 10;
                removed++;
            }
            output = vr + (vr == vm || round_up);
        }
        *digits = output;
        *exponent = e10 + removed;
    }

    /* The shortest digits of a finite, non-zero double given by its bits, without leading
       or trailing zeros, in digits (24 bytes); |d| = 0.digits x 10^*point. Returns the
       number of digits. */
    static int replicad_double_digits(uint64_t bits, char *digits, int32_t *point) {
        uint64_t value;
        int32_t e10;
        char tmp[24];
        int n, k = 24;
        replicad_shortest(bits & ((1ULL << 52) - 1), (uint32_t)((bits >> 52) & 0x7ff),
                          &value, &e10);
        while (value % 10 == 0) { value /= 10; e10++; }
        do { tmp[--k] = (char)('0' + value % 10); value /= 10; } while (value);
        n = 24 - k;
        memcpy(digits, tmp + k, n);
        *point = n + e10;
        return n;
    }

    static char *replicad_put_exponent(char *p, int32_t x) {
        char tmp[8];
        int k = 8;
        if (x < 0) { *p++ = '-'; x = -x; }
        do { tmp[--k] = (char)('0' + x % 10); x /= 10; } while (x);
        memcpy(p, tmp + k, 8 - k);
        return p + 8 - k;
    }

    /* A double as MySQL prints it inside a JSON document (my_gcvt with its 34-character
       field, as jsonb._format_double): the shortest digits; fixed notation when the point
       is within [-14, 15] places or the digits run past a point beyond 15, else d.ddde-x
       with no '+'; ".0" after a whole number; "0.0" for what is not finite. out: 48 bytes. */
    static int replicad_double_mysql(double d, char *out) {
        uint64_t bits;
        char digits[24];
        int32_t point;
        int n;
        char *p = out;
        memcpy(&bits, &d, 8);
        if (((bits >> 52) & 0x7ff) == 0x7ff) {
            memcpy(out, "0.0", 3);
            return 3;
        }
        if (bits >> 63) *p++ = '-';
        if ((bits & ~(1ULL << 63)) == 0) {
            memcpy(p, "0.0", 3);
            return (int)(p - out) + 3;
        }
        n = replicad_double_digits(bits, digits, &point);
        if ((point >= -14 && point <= 15) || (n > point && point > 15)) {
            if (point <= 0) {
                *p++ = '0';
                *p++ = '.';
                memset(p, '0', -point);
                p += -point;
                memcpy(p, digits, n);
                p += n;
            } else if (point < n) {
                memcpy(p, digits, point);
                p += point;
                *p++ = '.';
                memcpy(p, digits + point, n - point);
                p += n - point;
            } else {
                memcpy(p, digits, n);
                p += n;
                memset(p, '0', point - n);
                p += point - n;
                *p++ = '.';
                *p++ = '0';
            }
        } else {
            *p++ = digits[0];
            if (n > 1) {
                *p++ = '.';
                memcpy(p, digits + 1, n - 1);
                p += n - 1;
            }
            *p++ = 'e';
            p = replicad_put_exponent(p, point - 1);
        }
        return (int)(p - out);
    }

    /* repr(d) for a finite d, in out (at least 32 bytes); returns the length. */
    static int replicad_double_repr(double d, char *out) {
        uint64_t bits;
        int32_t point, x;
        char digits[24];
        int n;
        char *p = out;
        memcpy(&bits, &d, 8);
        if (bits >> 63) *p++ = '-';
        if ((bits & ~(1ULL << 63)) == 0) {
            memcpy(p, "0.0", 3);
            return (int)(p - out) + 3;
        }
        n = replicad_double_digits(bits, digits, &point);
        if (point <= -4 || point > 16) {  /* float_repr_style 'short': exponent form */
            *p++ = digits[0];
            if (n > 1) {
                *p++ = '.';
                memcpy(p, digits + 1, n - 1);
                p += n - 1;
            }
            x = point - 1;
            *p++ = 'e';
            *p++ = x < 0 ? '-' : '+';
            if (x < 0) x = -x;
            if (x >= 100) *p++ = (char)('0' + x / 100);
            *p++ = (char)('0' + x / 10 % 10);
            *p++ = (char)('0' + x % 10);
        } else if (point <= 0) {
            *p++ = '0';
            *p++ = '.';
            memset(p, '0', -point);
            p += -point;
            memcpy(p, digits, n);
            p += n;
        } else if (point >= n) {
            memcpy(p, digits, n);
            p += n;
            memset(p, '0', point - n);
            p += point - n;
            *p++ = '.';
            *p++ = '0';
        } else {
            memcpy(p, digits, point);
            p += point;
            *p++ = '.';
            memcpy(p, digits + point, n - point);
            p += n - point;
        }
        return (int)(p - out);
    }
    #else
    #define REPLICAD_SHORTEST 0
    static void replicad_shortest_set(int inverse, int i, uint64_t lo, uint64_t hi) {}
    static int replicad_double_repr(double d, char *out) { return -1; }
    static int replicad_double_mysql(double d, char *out) { return -1; }
    #endif
    """
    const int REPLICAD_SHORTEST
    void replicad_shortest_set(int inverse, int i, uint64_t lo, uint64_t hi)
    int replicad_double_repr(double d, char *out)
    int replicad_double_mysql(double d, char *out)


cdef void _shortest_tables():
    """The 125-bit scaled powers of five the shortest-digit search multiplies by: the top
    125 bits of 5^i, and 2^(bitlength(5^i) - 1 + 125) // 5^i + 1 (rounded up so that the
    truncated product never falls below the exact quotient)."""
    mask = (1 << 64) - 1
    power = 1  # a Python int: 5^i
    for i in range(342):
        length = power.bit_length()
        if i < 326:
            top = power >> (length - 125) if length > 125 else power << (125 - length)
            replicad_shortest_set(0, i, top & mask, top >> 64)
        inverse = (1 << (length - 1 + 125)) // power + 1
        replicad_shortest_set(1, i, inverse & mask, inverse >> 64)
        power *= 5


if REPLICAD_SHORTEST:
    _shortest_tables()


def double_repr(double d) -> bytes:
    """repr(d) as bytes, from the compiled shortest-digit search (for the tests: it must
    equal repr() for every finite double)."""
    cdef char text[40]
    if not isfinite(d):
        raise ValueError("not a finite double")
    if not REPLICAD_SHORTEST:
        return repr(d).encode()
    return text[:replicad_double_repr(d, text)]


# ---------------------------------------------------------------------- JSON text writers
# What `encode_rows` writes must be byte-for-byte what the envelope's pure path (orjson with
# `envelope._default`) writes for the decoded values; tests compare the two on every type.

cdef struct Buf:
    char *data
    Py_ssize_t len
    Py_ssize_t cap


cdef const char *_HEX = b"0123456789abcdef"
cdef const char *_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


cdef int _reserve(Buf *b, Py_ssize_t need) except -1:
    cdef Py_ssize_t cap
    cdef char *data
    if b.len + need <= b.cap:
        return 0
    cap = b.cap * 2 if b.cap else 4096
    while cap < b.len + need:
        cap *= 2
    data = <char *>PyMem_Realloc(b.data, cap)
    if data == NULL:
        raise MemoryError()
    b.data = data
    b.cap = cap
    return 0


cdef inline int _put(Buf *b, const char *s, Py_ssize_t n) except -1:
    if b.len + n > b.cap:
        _reserve(b, n)
    memcpy(b.data + b.len, s, n)
    b.len += n
    return 0


cdef inline int _put_bytes(Buf *b, bytes s) except -1:
    return _put(b, PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s))


cdef int _put_u64(Buf *b, uint64_t v) except -1:
    cdef char tmp[24]
    cdef int n = 0
    while True:
        tmp[23 - n] = <char>(48 + v % 10)
        n += 1
        v //= 10
        if not v:
            break
    return _put(b, tmp + 24 - n, n)


cdef int _put_i64(Buf *b, int64_t v) except -1:
    if v < 0:
        _put(b, b"-", 1)
        return _put_u64(b, <uint64_t>0 - <uint64_t>v)
    return _put_u64(b, <uint64_t>v)


cdef int _put_double(Buf *b, double d) except -1:
    """orjson's text of a float: Python's repr, except that an exponent of -5 is written out
    in full (1e-05 -> 0.00001) and other negative exponents lose their leading zero."""
    cdef char *text
    cdef char fast[40]
    if not isfinite(d):
        return _put(b, b"null", 4)
    if REPLICAD_SHORTEST:
        return _put_repr_as_orjson(b, fast, replicad_double_repr(d, fast))
    text = PyOS_double_to_string(d, c'r', 0, 2, NULL)  # 2: Py_DTSF_ADD_DOT_0, as repr()
    try:
        return _put_repr_as_orjson(b, text, len(text))
    finally:
        PyMem_Free(text)


cdef int _put_repr_as_orjson(Buf *b, const char *text, Py_ssize_t n) except -1:
    cdef const char *e = NULL
    cdef Py_ssize_t i
    cdef int exponent = 0
    for i in range(n):
        if text[i] == c'e':
            e = text + i
            break
    if e == NULL or e[1] != c'-':
        return _put(b, text, n)
    for i in range(e - text + 2, n):
        exponent = exponent * 10 + (text[i] - 48)
    if exponent != 5:
        _put(b, text, e - text + 2)
        return _put_u64(b, <uint64_t>exponent)
    if text[0] == c'-':
        _put(b, b"-0.0000", 7)
    else:
        _put(b, b"0.0000", 6)
    for i in range(e - text):
        if text[i] != c'.' and text[i] != c'-':
            _put(b, text + i, 1)
    return 0


# ------------------------------------------------------------------ MySQL JSON documents
# A MySQL JSON column's binary document (json_binary.cc) written as the text MySQL prints,
# as jsonb.decode_json + jsonb.to_mysql_json_text do on the pure path: ", " and ": "
# separators, keys in stored order, strings escaped as orjson and json.encoder do, integers,
# doubles as my_gcvt prints them, null/true/false. Anything else - opaque values (DECIMAL,
# dates and times, other MySQL types), strings or keys that are not UTF-8, objects whose keys
# are not in MySQL's strictly increasing order (so no duplicates pass unseen), nesting past
# jsonb.MAX_JSON_DEPTH, any offset or length out of bounds - returns 0 with the buffer as it
# was: the column then goes through the Python decoder, which prints it or raises the error
# that names it.

cdef enum:
    JSONB_MAX_DEPTH = 100  # jsonb.MAX_JSON_DEPTH


cdef inline uint32_t _jsonb_u(const unsigned char *q, int width) noexcept:
    return <uint32_t>read_le(q, width)


cdef bint _put_mysql_json_column(Buf *out, int length_bytes, const unsigned char *q,
                                 Py_ssize_t room) except -1:
    """The column at q (its length, then the document), `room` bytes left in the event."""
    cdef Py_ssize_t n, start = out.len
    cdef bint ok
    if length_bytes > room:
        return 0
    n = <Py_ssize_t>read_le(q, length_bytes)
    if n > room - length_bytes:
        return 0
    q += length_bytes
    # A document that is JSON null (empty: what MySQL stores for a NULL forced into a NOT
    # NULL column; or the literal) is left to Python: it is not SQL NULL, and the envelope
    # says so per row (docs/consumers.md, "JSON null"), which only the row path writes.
    if n == 0 or (q[0] == 4 and n >= 2 and q[1] == 0):
        return 0
    if q[0] <= 3:
        ok = _jsonb_container(out, q, 1, n, q[0] & 1, q[0] <= 1, 1)
    else:
        ok = _jsonb_scalar(out, q, q[0], 1, n)
    if not ok:
        out.len = start
    return ok


cdef bint _jsonb_container(Buf *out, const unsigned char *d, Py_ssize_t pos, Py_ssize_t end,
                           bint large, bint is_object, int depth) except -1:
    cdef int width = 4 if large else 2
    cdef Py_ssize_t count, size, entries_at, values_at, header_end, first_data, i
    cdef Py_ssize_t key_at, key_length, previous_at = 0, previous_length = -1, entry
    cdef Py_ssize_t raw, container_end
    cdef int t, c
    if depth > JSONB_MAX_DEPTH or end - pos < 2 * width:
        return 0
    count = _jsonb_u(d + pos, width)
    size = _jsonb_u(d + pos + width, width)
    if size > end - pos:
        return 0
    entries_at = pos + 2 * width
    values_at = entries_at + count * (width + 2) if is_object else entries_at
    header_end = values_at + count * (1 + width)
    if header_end - pos > size:
        return 0
    container_end = pos + size
    first_data = header_end - pos
    _put(out, b"{" if is_object else b"[", 1)
    for i in range(count):
        if i:
            _put(out, b", ", 2)
        if is_object:
            entry = entries_at + i * (width + 2)
            key_at = _jsonb_u(d + entry, width)
            key_length = _jsonb_u(d + entry + width, 2)
            if key_at < first_data or key_at + key_length > size:
                return 0
            if previous_length >= 0:  # MySQL's order: shorter keys first, then bytewise
                if key_length < previous_length:
                    return 0
                if key_length == previous_length:
                    c = memcmp(d + pos + previous_at, d + pos + key_at, key_length)
                    if c >= 0:
                        return 0
            previous_at, previous_length = key_at, key_length
            if not (_ascii(d + pos + key_at, key_length)
                    or _valid_utf8(d + pos + key_at, key_length)):
                return 0
            _put_json_text(out, d + pos + key_at, key_length)
            _put(out, b": ", 2)
        entry = values_at + i * (1 + width)
        t = d[entry]
        raw = _jsonb_u(d + entry + 1, width)
        if t == 0x04:  # literal
            if not _jsonb_literal(out, raw & 0xFF):
                return 0
        elif t == 0x05:  # int16
            _put_i64(out, <int16_t>(raw & 0xFFFF))
        elif t == 0x06:  # uint16
            _put_u64(out, raw & 0xFFFF)
        elif large and t == 0x07:  # int32
            _put_i64(out, <int32_t><uint32_t>raw)
        elif large and t == 0x08:  # uint32
            _put_u64(out, <uint32_t>raw)
        else:
            if raw < first_data or raw >= size:
                return 0
            if t <= 3:
                if not _jsonb_container(out, d, pos + raw, container_end, t & 1, t <= 1,
                                        depth + 1):
                    return 0
            elif not _jsonb_scalar(out, d, t, pos + raw, container_end):
                return 0
    _put(out, b"}" if is_object else b"]", 1)
    return 1


cdef bint _jsonb_literal(Buf *out, Py_ssize_t literal) except -1:
    if literal == 0:
        _put(out, b"null", 4)
    elif literal == 1:
        _put(out, b"true", 4)
    elif literal == 2:
        _put(out, b"false", 5)
    else:
        return 0
    return 1


cdef bint _jsonb_scalar(Buf *out, const unsigned char *d, int t, Py_ssize_t pos,
                        Py_ssize_t end) except -1:
    cdef Py_ssize_t length, start, i
    cdef int need
    cdef double value
    cdef char text[48]
    cdef unsigned char byte
    if t == 0x0C:  # string: a 7-bits-per-byte length (at most 5 bytes, 32 bits), UTF-8
        if pos >= end:
            return 0
        length = 0
        i = 0
        while True:
            if pos + i >= end or i == 5:
                return 0
            byte = d[pos + i]
            length |= <Py_ssize_t>(byte & 0x7F) << (7 * i)
            i += 1
            if not byte & 0x80:
                break
        if length > 0xFFFFFFFF:
            return 0
        start = pos + i
        if length > end - start:
            return 0
        if not (_ascii(d + start, length) or _valid_utf8(d + start, length)):
            return 0
        _put_json_text(out, d + start, length)
        return 1
    if t == 0x04:
        return pos < end and _jsonb_literal(out, d[pos])
    need = (2 if t <= 0x06 else 4 if t <= 0x08 else 8) if 0x05 <= t <= 0x0B else 0
    if need == 0 or need > end - pos:
        return 0  # opaque values and unknown types: Python's
    if t == 0x05:
        _put_i64(out, <int16_t>read_le(d + pos, 2))
    elif t == 0x06:
        _put_u64(out, read_le(d + pos, 2))
    elif t == 0x07:
        _put_i64(out, <int32_t>read_le(d + pos, 4))
    elif t == 0x08:
        _put_u64(out, read_le(d + pos, 4))
    elif t == 0x09:
        _put_i64(out, <int64_t>read_le(d + pos, 8))
    elif t == 0x0A:
        _put_u64(out, read_le(d + pos, 8))
    else:
        if not REPLICAD_SHORTEST:
            return 0
        memcpy(&value, d + pos, 8)
        _put(out, text, replicad_double_mysql(value, text))
    return 1


def mysql_json_text(bytes document) -> bytes:
    """A binary JSON document as the compiled writer prints it, or None where it leaves the
    document to Python (for the tests: it must equal jsonb.to_mysql_json_text)."""
    cdef Buf out
    out.data = NULL
    out.len = out.cap = 0
    cdef Py_ssize_t n = PyBytes_GET_SIZE(document)
    cdef bytes column = bytes((n & 0xFF, n >> 8 & 0xFF, n >> 16 & 0xFF, n >> 24 & 0xFF)) + document
    try:
        if not _put_mysql_json_column(&out, 4, <const unsigned char *>PyBytes_AS_STRING(column),
                                      PyBytes_GET_SIZE(column)):
            return None
        return PyBytes_FromStringAndSize(out.data, out.len)
    finally:
        PyMem_Free(out.data)


cdef int _put_decimal(Buf *b, ColOp *op, const unsigned char *q) except -2:
    """values.decimal_text in quotes (plain digits with the column's scale, as MySQL prints
    them) for a DECIMAL with a C-sized coefficient; -1 (nothing written) for a wider one."""
    cdef char text[64]
    cdef int n = replicad_decimal_text(q, op.arg1, op.ngroups, op.gbytes, op.gdigits, op.arg3,
                                       0, text)
    cdef int scale = op.arg2
    cdef int sign = 1 if text[0] == c'-' else 0
    cdef int digits = n - sign
    cdef int i
    if n < 0:
        return -1
    _put(b, b'"', 1)
    if sign:
        _put(b, b"-", 1)
    if scale == 0:
        _put(b, text + sign, digits)
    elif digits > scale:
        _put(b, text + sign, digits - scale)
        _put(b, b".", 1)
        _put(b, text + sign + digits - scale, scale)
    else:
        _put(b, b"0.", 2)
        for i in range(scale - digits):
            _put(b, b"0", 1)
        _put(b, text + sign, digits)
    _put(b, b'"', 1)
    return 0


cdef inline void _digits(char *at, int v, int width) noexcept:
    cdef int i
    for i in range(width - 1, -1, -1):
        at[i] = <char>(48 + v % 10)
        v //= 10


cdef int _put_date(Buf *b, int y, int m, int d, bint close) except -1:
    cdef char t[12]
    t[0] = c'"'
    _digits(t + 1, y, 4)
    t[5] = c'-'
    _digits(t + 6, m, 2)
    t[8] = c'-'
    _digits(t + 9, d, 2)
    t[11] = c'"'
    return _put(b, t, 12 if close else 11)


cdef int _put_datetime(Buf *b, int y, int mo, int d, int h, int mi, int s, int us,
                       bint utc) except -1:
    """orjson's datetime: the microseconds only when not 0, 'Z' for UTC (OPT_UTC_Z)."""
    cdef char t[20]
    _put_date(b, y, mo, d, False)
    t[0] = c'T'
    _digits(t + 1, h, 2)
    t[3] = c':'
    _digits(t + 4, mi, 2)
    t[6] = c':'
    _digits(t + 7, s, 2)
    n = 9
    if us:
        t[9] = c'.'
        _digits(t + 10, us, 6)
        n = 16
    if utc:
        t[n] = c'Z'
        n += 1
    t[n] = c'"'
    return _put(b, t, n + 1)


cdef int _put_base64(Buf *b, const unsigned char *q, Py_ssize_t n) except -1:
    cdef Py_ssize_t i
    cdef char *o
    cdef uint32_t v
    _reserve(b, (n + 2) // 3 * 4 + 2)
    o = b.data + b.len
    o[0] = c'"'
    o += 1
    i = 0
    while i + 3 <= n:
        v = (<uint32_t>q[i] << 16) | (<uint32_t>q[i + 1] << 8) | q[i + 2]
        o[0] = _B64[v >> 18]
        o[1] = _B64[(v >> 12) & 63]
        o[2] = _B64[(v >> 6) & 63]
        o[3] = _B64[v & 63]
        o += 4
        i += 3
    if n - i == 1:
        v = <uint32_t>q[i] << 16
        o[0] = _B64[v >> 18]
        o[1] = _B64[(v >> 12) & 63]
        o[2] = c'='
        o[3] = c'='
        o += 4
    elif n - i == 2:
        v = (<uint32_t>q[i] << 16) | (<uint32_t>q[i + 1] << 8)
        o[0] = _B64[v >> 18]
        o[1] = _B64[(v >> 12) & 63]
        o[2] = _B64[(v >> 6) & 63]
        o[3] = c'='
        o += 4
    o[0] = c'"'
    b.len = o + 1 - b.data
    return 0


# Eight bytes at a time (SWAR): a text value is mostly bytes that are copied as they are.
cdef uint64_t _ONES = 0x0101010101010101
cdef uint64_t _HIGHS = 0x8080808080808080
cdef uint64_t _SPACES = 0x2020202020202020
cdef uint64_t _QUOTES = 0x2222222222222222
cdef uint64_t _BACKSLASHES = 0x5C5C5C5C5C5C5C5C


cdef inline uint64_t _load8(const unsigned char *q) noexcept:
    cdef uint64_t word
    memcpy(&word, q, 8)
    return word


cdef inline bint _plain8(uint64_t x) noexcept:
    """Whether none of the eight bytes in x is below 0x20, a quote or a backslash (the
    bytes JSON escapes). Each term has a byte's high bit set where that byte is one of them
    (the classic "has a byte less than n" and "has a zero byte" tests; a borrow can mark
    bytes after a real one, never where there is none): exact as a whole."""
    cdef uint64_t quote = x ^ _QUOTES
    cdef uint64_t backslash = x ^ _BACKSLASHES
    cdef uint64_t found = ((x - _SPACES) & ~x) | ((quote - _ONES) & ~quote)
    found |= (backslash - _ONES) & ~backslash
    return (found & _HIGHS) == 0


cdef int _put_json_text(Buf *b, const unsigned char *q, Py_ssize_t n) except -1:
    """Valid UTF-8 as a JSON string the way orjson escapes it: quote, backslash, and the
    control characters below 0x20 (short forms where JSON has them); nothing else."""
    cdef Py_ssize_t i = 0
    cdef unsigned char c
    cdef char *o
    _reserve(b, 6 * n + 2)
    o = b.data + b.len
    o[0] = c'"'
    o += 1
    while i < n:
        if i + 8 <= n and _plain8(_load8(q + i)):
            memcpy(o, q + i, 8)
            o += 8
            i += 8
            continue
        c = q[i]
        i += 1
        if c >= 0x20 and c != 0x22 and c != 0x5C:
            o[0] = <char>c
            o += 1
            continue
        o[0] = c'\\'
        if c == 0x22 or c == 0x5C:
            o[1] = <char>c
        elif c == 0x0A:
            o[1] = c'n'
        elif c == 0x09:
            o[1] = c't'
        elif c == 0x0D:
            o[1] = c'r'
        elif c == 0x08:
            o[1] = c'b'
        elif c == 0x0C:
            o[1] = c'f'
        else:
            o[1] = c'u'
            o[2] = c'0'
            o[3] = c'0'
            o[4] = _HEX[c >> 4]
            o[5] = _HEX[c & 15]
            o += 4
        o += 2
    o[0] = c'"'
    b.len = o + 1 - b.data
    return 0


cdef bint _put_table_text(Buf *b, const unsigned char *table, const unsigned char *q,
                          Py_ssize_t n) except -1:
    """Single-byte text as a JSON string through its charset's table (accel.json_table:
    per byte, the character's JSON text as orjson escapes it, then its length); False with
    nothing written when a byte is undefined in the charset (the value is bytes then)."""
    cdef Py_ssize_t i, start = b.len
    cdef const unsigned char *e
    cdef char *o
    _reserve(b, 7 * n + 2 + 8)  # each entry is copied whole (8 bytes), its length kept
    o = b.data + b.len
    o[0] = c'"'
    o += 1
    for i in range(n):
        e = table + 8 * q[i]
        if e[7] == 0:
            b.len = start
            return False
        memcpy(o, e, 8)
        o += e[7]
    o[0] = c'"'
    b.len = o + 1 - b.data
    return True


cdef inline bint _ascii(const unsigned char *q, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i = 0
    while i + 8 <= n:
        if _load8(q + i) & _HIGHS:
            return False
        i += 8
    while i < n:
        if q[i] & 0x80:
            return False
        i += 1
    return True


cdef bint _valid_utf8(const unsigned char *q, Py_ssize_t n) noexcept:
    """Exactly the strings Python's strict UTF-8 decoder accepts (the pure path's test):
    shortest forms only, no surrogates (U+D800-DFFF), nothing above U+10FFFF. Checked here
    rather than by decoding into a str that is thrown away."""
    cdef Py_ssize_t i = 0
    cdef unsigned char c, lo, hi
    cdef int more, k
    while i < n:
        c = q[i]
        if c < 0x80:
            if i + 8 <= n and not (_load8(q + i) & _HIGHS):
                i += 8  # eight ASCII bytes
            else:
                i += 1
            continue
        lo, hi = 0x80, 0xBF  # the range of the byte after the lead
        if 0xC2 <= c <= 0xDF:
            more = 1
        elif 0xE0 <= c <= 0xEF:
            more = 2
            if c == 0xE0:
                lo = 0xA0  # no overlong three-byte forms
            elif c == 0xED:
                hi = 0x9F  # no surrogates
        elif 0xF0 <= c <= 0xF4:
            more = 3
            if c == 0xF0:
                lo = 0x90  # no overlong four-byte forms
            elif c == 0xF4:
                hi = 0x8F  # nothing above U+10FFFF
        else:
            return False
        if more > n - i - 1 or not (lo <= q[i + 1] <= hi):
            return False
        for k in range(2, more + 1):
            if q[i + k] & 0xC0 != 0x80:
                return False
        i += more + 1
    return True


cdef int _put_str(Buf *b, str s) except -1:
    cdef Py_ssize_t n
    cdef const char *q = PyUnicode_AsUTF8AndSize(s, &n)
    return _put_json_text(b, <const unsigned char *>q, n)


cdef int _put_fallback(Buf *b, object fallback, Py_ssize_t i, object value) except -1:
    cdef object text = fallback(i, value)
    if not PyBytes_CheckExact(text):
        raise TypeError("the JSON fallback must return bytes")
    return _put_bytes(b, <bytes>text)


@cython.final
cdef class ImageWriter:
    """One row-image layout's decoder readied for `encode_rows`: `prefixes[i]` is the JSON
    text before column i's value (``{"name":`` for the first, ``,"name":`` after);
    `fallback(i, value)` gives the JSON bytes of a value the native writers do not cover
    (TIME, SET, FLOAT, zero dates, wide DECIMALs, text in other charsets, the MySQL JSON
    documents the C printer leaves to Python), exactly as the envelope's pure path writes
    it."""

    cdef readonly ImageDecoder decoder
    cdef ColOp *ops  # the decoder's plan: it lives as long as the decoder
    cdef Py_ssize_t ncols
    cdef Py_ssize_t null_bytes
    cdef tuple prefixes
    cdef object fallback

    def __cinit__(self, ImageDecoder decoder not None, prefixes, fallback):
        if len(prefixes) != decoder.ncols:
            raise ValueError("one prefix per column")
        if not all(type(prefix) is bytes for prefix in prefixes):
            raise TypeError("the prefixes must be bytes")
        self.decoder = decoder
        self.ops = decoder.ops
        self.ncols = decoder.ncols
        self.null_bytes = decoder.null_bytes
        self.prefixes = tuple(prefixes)
        self.fallback = fallback

    def __reduce__(self):
        raise TypeError("ImageWriter cannot be pickled")

    cdef int _json(self, bytes body, const unsigned char *p, Py_ssize_t size, Py_ssize_t *ppos,
                   Buf *out, Py_ssize_t *spans, unsigned char *kinds) except -1:
        """Append the row image at ppos[0] as a JSON object to `out` (the bytes orjson writes
        for the decoded row); spans[2i], spans[2i+1]: where column i's value text lies in
        `out`; kinds[i]: 1 when a text column came out as base64 (not valid in its charset),
        so that equal texts of different Python types never compare equal."""
        cdef const unsigned char *nulls
        cdef const unsigned char *q
        cdef ColOp *op
        cdef Py_ssize_t i, n, need
        cdef Py_ssize_t pos = ppos[0]
        cdef int k
        cdef uint64_t u
        cdef int64_t year, month, day
        cdef int64_t f[7]
        cdef long long us
        cdef double d
        cdef int yy, mm, dd
        cdef bytes prefix
        cdef object value
        if self.ncols == 0:
            _put(out, b"{}", 2)
            return 0
        if self.null_bytes > size - pos:
            overrun(pos, self.null_bytes, size)
        nulls = p + pos
        pos += self.null_bytes
        for i in range(self.ncols):
            prefix = <bytes>PyTuple_GET_ITEM(self.prefixes, i)
            _put(out, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix))
            spans[2 * i] = out.len
            kinds[i] = 0
            if nulls[i >> 3] >> (i & 7) & 1:
                _put(out, b"null", 4)
                spans[2 * i + 1] = out.len
                continue
            op = &self.ops[i]
            q = p + (pos if pos <= size else size)  # never dereferenced before a length check
            k = op.op
            if k == OP_STR and op.arg2 == MODE_UTF8:
                q = text_at(op, p, size, &pos, &n)
                if _ascii(q, n) or _valid_utf8(q, n):
                    _put_json_text(out, q, n)
                else:
                    kinds[i] = 1
                    _put_base64(out, q, n)
            elif k == OP_STR and op.arg2 == MODE_TABLE:
                q = text_at(op, p, size, &pos, &n)
                if not _put_table_text(out, op.table, q, n):
                    kinds[i] = 1
                    _put_base64(out, q, n)
            elif k == OP_STR and (op.arg2 == MODE_BYTES or op.arg2 == MODE_PADDED):
                q = text_at(op, p, size, &pos, &n)
                if op.arg2 == MODE_PADDED and n < op.arg3:
                    value = PyBytes_FromStringAndSize(NULL, op.arg3)
                    memcpy(PyBytes_AS_STRING(value), q, n)
                    memset(PyBytes_AS_STRING(value) + n, 0, op.arg3 - n)
                    _put_base64(out, <const unsigned char *>PyBytes_AS_STRING(value), op.arg3)
                else:
                    _put_base64(out, q, n)
            elif k >= OP_I8 and k <= OP_U64:
                need = int_size(k)
                if need > size - pos:
                    overrun(pos, need, size)
                u = read_le(q, <int>need)
                pos += need
                if unsigned_int(k):
                    _put_u64(out, u)
                else:
                    _put_i64(out, sign_extend(u, <int>need))
            elif k == OP_DOUBLE:
                if 8 > size - pos:
                    overrun(pos, 8, size)
                memcpy(&d, q, 8)
                pos += 8
                _put_double(out, d)
            elif k == OP_DECIMAL and op.arg3:
                need = op.arg1
                if need > size - pos:
                    overrun(pos, need, size)
                if _put_decimal(out, op, q) < 0:
                    value = decimal_value(op, q, op.arg1)
                    _put_fallback(out, self.fallback, i, value)
                pos += need
            elif k == OP_DATETIME2:
                need = 5 + op.arg1
                if need > size - pos:
                    overrun(pos, need, size)
                if datetime2_fields(op, q, f):
                    pos += need
                    _put_datetime(out, <int>f[0], <int>f[1], <int>f[2], <int>f[3], <int>f[4],
                                  <int>f[5], <int>f[6], False)
                else:
                    _put_fallback(out, self.fallback, i, self.decoder._value(i, body, p, size, &pos))
            elif k == OP_TIMESTAMP2:
                need = 4 + op.arg1
                if need > size - pos:
                    overrun(pos, need, size)
                u = read_be(q, 4)
                us = <long long>read_be(q + 4, op.arg1) * op.arg2
                if (u or us) and us <= 999999:
                    pos += need
                    replicad_civil(<long long>(u // 86400), &yy, &mm, &dd)
                    u = u % 86400
                    _put_datetime(out, yy, mm, dd, <int>(u // 3600), <int>(u // 60 % 60),
                                  <int>(u % 60), <int>us, True)
                else:
                    _put_fallback(out, self.fallback, i, self.decoder._value(i, body, p, size, &pos))
            elif k == OP_DATE:
                if 3 > size - pos:
                    overrun(pos, 3, size)
                u = read_le(q, 3)
                year, month, day = u >> 9, (u >> 5) & 15, u & 31
                if valid_date(year, month, day):
                    pos += 3
                    _put_date(out, <int>year, <int>month, <int>day, True)
                else:
                    _put_fallback(out, self.fallback, i, self.decoder._value(i, body, p, size, &pos))
            elif k == OP_YEAR or k == OP_BIT or k == OP_NULL:
                # small integers (or null): orjson's text of the decoded value
                value = self.decoder._value(i, body, p, size, &pos)
                if value is None:
                    _put(out, b"null", 4)
                else:
                    _put_u64(out, <uint64_t>value)
            elif k == OP_ENUM or k == OP_STR:
                # ENUM members, text in other charsets: str, else bytes (base64)
                value = self.decoder._value(i, body, p, size, &pos)
                if type(value) is str:
                    _put_str(out, <str>value)
                else:
                    kinds[i] = k == OP_STR
                    _put_fallback(out, self.fallback, i, value)
            elif k == OP_MYSQLJSON and _put_mysql_json_column(out, op.arg1, q, size - pos):
                pos += op.arg1 + <Py_ssize_t>read_le(q, op.arg1)
            elif (k == OP_CALL or k == OP_FLOAT or k == OP_TIME2 or k == OP_SET
                  or k == OP_DECIMAL or k == OP_MYSQLJSON):
                # No native writer (or this value is beyond it: a wide DECIMAL, a JSON
                # document the C printer leaves to Python): the pure path's JSON text.
                _put_fallback(out, self.fallback, i, self.decoder._value(i, body, p, size, &pos))
            else:
                raise SystemError(f"opcode {k} has no JSON writer")
            spans[2 * i + 1] = out.len
        _put(out, b"}", 1)
        ppos[0] = pos
        return 0


cdef struct Image:
    Buf text  # the image as a JSON object
    Py_ssize_t *spans  # spans[2i], spans[2i+1]: where column i's value lies in text
    unsigned char *kinds  # kinds[i]: 1 when text column i was written as base64


cdef int _image_init(Image *image, Py_ssize_t ncols) except -1:
    memset(image, 0, sizeof(Image))
    image.spans = <Py_ssize_t *>PyMem_Malloc(sizeof(Py_ssize_t) * (2 * ncols + 2))
    image.kinds = <unsigned char *>PyMem_Malloc(ncols + 1)
    if image.spans == NULL or image.kinds == NULL:
        raise MemoryError()
    return 0


cdef void _image_free(Image *image) noexcept:
    PyMem_Free(image.text.data)
    PyMem_Free(image.spans)
    PyMem_Free(image.kinds)


cdef int _read_image(ImageWriter writer, bytes body, const unsigned char *p, Py_ssize_t size,
                     Py_ssize_t *ppos, Image *image) except -1:
    image.text.len = 0
    return writer._json(body, p, size, ppos, &image.text, image.spans, image.kinds)


cdef bint _same_value(Image *a, Py_ssize_t ia, Image *b, Py_ssize_t ib) noexcept:
    """Whether key column ia of image a and ib of image b have equal values: equal JSON text
    of the same kind (-1: the column is not in the image, i.e. None)."""
    cdef const char *ta = b"null"
    cdef const char *tb = b"null"
    cdef Py_ssize_t na = 4, nb = 4
    cdef unsigned char kinda = 0, kindb = 0
    if ia >= 0:
        ta, na, kinda = a.text.data + a.spans[2 * ia], a.spans[2 * ia + 1] - a.spans[2 * ia], a.kinds[ia]
    if ib >= 0:
        tb, nb, kindb = b.text.data + b.spans[2 * ib], b.spans[2 * ib + 1] - b.spans[2 * ib], b.kinds[ib]
    return na == nb and kinda == kindb and memcmp(ta, tb, na) == 0


@cython.final
cdef class EventLayout:
    """What `encode_rows` needs of a table layout besides the event: the writers of its
    images (`second`: the after images of an update, else None), whether an update that
    changes the key columns is a delete and a create (`split`), and the key columns:
    `key_names[j]` the text before column j (``{"name":`` then ``,"name":``),
    `key_first`/`key_second` its index in each image (-1 when absent)."""

    cdef readonly ImageWriter first
    cdef readonly ImageWriter second
    cdef bint split
    cdef tuple key_names
    cdef tuple key_first
    cdef tuple key_second

    def __cinit__(self, ImageWriter first not None, ImageWriter second, bint split,
                  tuple key_names not None, tuple key_first not None, tuple key_second not None):
        if len(key_first) != len(key_names) or (
            second is not None and len(key_second) != len(key_names)
        ):
            raise ValueError("one index per key column")
        if not all(type(name) is bytes for name in key_names):
            raise TypeError("the key names must be bytes")
        self.first = first
        self.second = second
        self.split = split
        self.key_names = key_names
        self.key_first = tuple(int(i) for i in key_first)
        self.key_second = tuple(int(i) for i in key_second)

    def __reduce__(self):
        raise TypeError("EventLayout cannot be pickled")

    cdef bint _key_changed(self, Image *before, Image *after) noexcept:
        cdef Py_ssize_t j
        for j in range(PyTuple_GET_SIZE(self.key_names)):
            if not _same_value(
                before, <Py_ssize_t>(<object>PyTuple_GET_ITEM(self.key_first, j)),
                after, <Py_ssize_t>(<object>PyTuple_GET_ITEM(self.key_second, j)),
            ):
                return True
        return False


@cython.final
cdef class _Messages:
    """The messages of one `encode_rows` call, as they are written."""

    cdef Buf out
    cdef Buf key
    cdef tuple key_names  # the key columns' texts (EventLayout.key_names)
    cdef bytes head
    cdef int key_mode
    cdef object const_key
    cdef bint lines
    cdef list written

    def __cinit__(self):
        memset(&self.out, 0, sizeof(Buf))
        memset(&self.key, 0, sizeof(Buf))

    def __dealloc__(self):
        PyMem_Free(self.out.data)
        PyMem_Free(self.key.data)

    cdef int add(self, str op, Py_ssize_t row, bytes tail, Image *before, Image *after,
                 Image *keyed, tuple index) except -1:
        """``{"before":B,"after":A`` + head + row + tail; its key from `keyed` (the image
        the key columns are read from, at `index`)."""
        cdef Buf *out = &self.out
        _put(out, b'{"before":', 10)
        if before == NULL:
            _put(out, b"null", 4)
        else:
            _put(out, before.text.data, before.text.len)
        _put(out, b',"after":', 9)
        if after == NULL:
            _put(out, b"null", 4)
        else:
            _put(out, after.text.data, after.text.len)
        _put_bytes(out, self.head)
        _put_u64(out, <uint64_t>row)
        _put_bytes(out, tail)
        if self.lines:
            return _put(out, b"\n", 1)
        self.written.append(
            (op, row, self._key(keyed, index), PyBytes_FromStringAndSize(out.data, out.len))
        )
        out.len = 0
        return 0

    cdef bytes _key(self, Image *image, tuple index):
        """key_mode 0: none; 1: the constant; 2: the key columns; 3: the whole image."""
        cdef Py_ssize_t j, i
        cdef tuple names = self.key_names
        cdef Buf *k = &self.key
        if self.key_mode == 0:
            return None
        if self.key_mode == 1:
            return self.const_key
        if self.key_mode == 3:
            return PyBytes_FromStringAndSize(image.text.data, image.text.len)
        k.len = 0
        for j in range(PyTuple_GET_SIZE(names)):
            _put_bytes(k, <bytes>PyTuple_GET_ITEM(names, j))
            i = <Py_ssize_t>(<object>PyTuple_GET_ITEM(index, j))
            if i < 0:
                _put(k, b"null", 4)
            else:
                _put(k, image.text.data + image.spans[2 * i], image.spans[2 * i + 1] - image.spans[2 * i])
        if PyTuple_GET_SIZE(names) == 0:
            _put(k, b"{", 1)
        _put(k, b"}", 1)
        return PyBytes_FromStringAndSize(k.data, k.len)

    cdef object result(self):
        if self.lines:
            return PyBytes_FromStringAndSize(self.out.data, self.out.len)
        return self.written


def encode_rows(EventLayout layout not None, bytes body, Py_ssize_t pos, int kind,
                bytes head not None, tuple tails not None, Py_ssize_t row0, int key_mode,
                object const_key, bint lines):
    """Every message of one ROWS event's row images (from `pos` to the end of `body`), as
    the envelope writes them: ``{"before":B,"after":A`` + `head` + the row number +
    ``tails[op]`` (op 0 "c", 1 "u", 2 "d").

    kind: 0 insert (`layout.first` writes the after image), 1 update (`first` before,
    `second` after), 2 delete. key_mode: 0 no key, 1 `const_key`, 2 the layout's key
    columns, 3 the whole row image. Returns (messages, rows decoded): with `lines`, one
    bytes object of every message followed by a newline; else a list of
    (op, row, key, value).
    Raises on any image that does not fit (the caller decodes the event the slow way, which
    names the problem)."""
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(body)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(body)
    cdef ImageWriter first = layout.first
    cdef ImageWriter second = layout.second
    cdef Image one, two
    cdef Py_ssize_t row = row0
    cdef _Messages messages = _Messages()
    cdef bytes t_c, t_u, t_d
    if kind == 1 and second is None:
        raise ValueError("an update needs the after images' writer")
    if pos < 0 or pos > size:
        raise IndexError("rows start outside the event")
    if first.ncols == 0 and pos < size:
        raise ValueError("a row image without columns")  # it would never advance
    t_c, t_u, t_d = tails
    messages.key_names, messages.head, messages.lines = layout.key_names, head, lines
    messages.key_mode, messages.const_key, messages.written = key_mode, const_key, []
    memset(&one, 0, sizeof(Image))
    memset(&two, 0, sizeof(Image))
    try:
        _image_init(&one, first.ncols)
        if kind == 1:
            _image_init(&two, second.ncols)
        while pos < size:
            _read_image(first, body, p, size, &pos, &one)
            if kind == 1:
                _read_image(second, body, p, size, &pos, &two)
            if pos > size:
                raise IndexError("a row image runs past the event")
            if kind == 0:
                messages.add("c", row, t_c, NULL, &one, &one, layout.key_first)
            elif kind == 2:
                messages.add("d", row, t_d, &one, NULL, &one, layout.key_first)
            elif layout.split and layout._key_changed(&one, &two):
                messages.add("d", row, t_d, &one, NULL, &one, layout.key_first)
                messages.add("c", row, t_c, NULL, &two, &two, layout.key_second)
            else:
                messages.add("u", row, t_u, &one, &two, &two, layout.key_second)
            row += 1
        return messages.result(), row - row0
    finally:
        _image_free(&one)
        _image_free(&two)


# ------------------------------------------------------------- snapshot rows (text protocol)
# A snapshot reads rows with SELECT; the server sends each row as one text-protocol packet
# (every value NULL or a length-encoded string of its text, text columns in their own
# charset). `encode_text_rows` writes such packets straight as the messages of op "r", with
# the writers above, so that a read and the same row decoded from a ROWS event give the same
# bytes; what these kinds do not cover goes through the column's fallback (the snapshot's
# Python parser, then the envelope's JSON of its value).

cdef enum TextKind:
    TK_FALLBACK = 0
    TK_SIGNED = 1     # integers as the server prints them (ZEROFILL included)
    TK_UNSIGNED = 2   # unsigned integers, YEAR
    TK_DOUBLE = 3
    TK_DECIMAL = 4    # the server's text is MySQL's: digits with the column's scale
    TK_DATE = 5
    TK_DATETIME = 6
    TK_TIMESTAMP = 7  # the session time zone is UTC: the text is UTC
    TK_UTF8 = 8
    TK_TABLE = 9      # a single-byte charset, through its JSON table
    TK_BYTES = 10
    TK_PADDED = 11    # BINARY(n): the stored value is n bytes

TEXT_KINDS = {
    "fallback": TK_FALLBACK, "signed": TK_SIGNED, "unsigned": TK_UNSIGNED,
    "double": TK_DOUBLE, "decimal": TK_DECIMAL, "date": TK_DATE, "datetime": TK_DATETIME,
    "timestamp": TK_TIMESTAMP, "utf8": TK_UTF8, "table": TK_TABLE, "bytes": TK_BYTES,
    "padded": TK_PADDED,
}


cdef struct TextColumn:
    int kind
    Py_ssize_t width  # TK_PADDED: the column's length
    const unsigned char *table  # TK_TABLE: accel.json_table of its charset


cdef inline bint _lenenc(const unsigned char *p, Py_ssize_t size, Py_ssize_t *ppos,
                         Py_ssize_t *start, Py_ssize_t *n) except -1:
    """The value at ppos[0]: False for NULL, else its bytes at start[0], n[0] long."""
    cdef Py_ssize_t pos = ppos[0]
    cdef unsigned char first
    cdef int width
    cdef uint64_t length
    if pos >= size:
        raise ValueError("a text row ends before its last value")
    first = p[pos]
    if first == 0xFB:
        ppos[0] = pos + 1
        return False
    if first < 0xFB:
        width, length = 0, first
    elif first == 0xFC:
        width = 2
    elif first == 0xFD:
        width = 3
    elif first == 0xFE:
        width = 8
    else:
        raise ValueError("a text row holds an invalid length")
    if width:
        if width > size - pos - 1:
            raise ValueError("a text row's length runs past the row")
        length = read_le(p + pos + 1, width)
    if length > <uint64_t>(size - pos - 1 - width):
        raise ValueError("a text value runs past its row")
    start[0] = pos + 1 + width
    n[0] = <Py_ssize_t>length
    ppos[0] = start[0] + n[0]
    return True


cdef bint _digits_u64(const unsigned char *q, Py_ssize_t n, uint64_t *out) noexcept:
    """Decimal digits only (leading zeros allowed), fitting 64 bits."""
    cdef uint64_t v = 0
    cdef Py_ssize_t i
    cdef unsigned int c
    if n == 0 or n > 20:
        return False
    for i in range(n):
        c = q[i] - 48
        if c > 9 or v > (0xFFFFFFFFFFFFFFFFULL - c) // 10:
            return False
        v = v * 10 + c
    out[0] = v
    return True


cdef bint _put_text_int(Buf *b, const unsigned char *q, Py_ssize_t n, bint signed) except -1:
    cdef uint64_t v
    cdef bint negative = signed and n > 0 and q[0] == c'-'
    if not _digits_u64(q + negative, n - negative, &v):
        return False
    if not signed:
        _put_u64(b, v)
    elif negative:
        if v > 9223372036854775808ULL:
            return False
        if v == 0:
            _put(b, b"0", 1)
        else:
            _put(b, b"-", 1)
            _put_u64(b, v)
    else:
        if v > 9223372036854775807ULL:
            return False
        _put_u64(b, v)
    return True


cdef bint _put_text_double(Buf *b, const unsigned char *q, Py_ssize_t n) except -1:
    cdef char text[64]
    cdef char *end
    cdef double d
    if n == 0 or n >= 64:
        return False
    memcpy(text, q, n)
    text[n] = 0
    try:
        d = PyOS_string_to_double(text, &end, NULL)
    except ValueError:
        return False
    if end != text + n:
        return False
    _put_double(b, d)
    return True


cdef bint _put_text_decimal(Buf *b, const unsigned char *q, Py_ssize_t n) except -1:
    """The server's DECIMAL text is what values.decimal_text writes: copied in quotes once it
    is plain digits with at most one point."""
    cdef Py_ssize_t i = 1 if n and q[0] == c'-' else 0
    cdef Py_ssize_t start = i
    cdef bint point = False
    if n == i:
        return False
    for i in range(i, n):
        if q[i] == c'.' and not point and i > start and i < n - 1:
            point = True
        elif q[i] < c'0' or q[i] > c'9':
            return False
    _put(b, b'"', 1)
    _put(b, <const char *>q, n)
    _put(b, b'"', 1)
    return True


cdef inline int _two(const unsigned char *q) noexcept:
    cdef unsigned int hi = q[0] - 48, lo = q[1] - 48
    if hi > 9 or lo > 9:
        return -1
    return <int>(hi * 10 + lo)


cdef bint _date_fields(const unsigned char *q, int *f) noexcept:
    """YYYY-MM-DD, a date Python can hold."""
    cdef int hi = _two(q), lo = _two(q + 2)
    if hi < 0 or lo < 0 or q[4] != c'-' or q[7] != c'-':
        return False
    f[0], f[1], f[2] = hi * 100 + lo, _two(q + 5), _two(q + 8)
    return valid_date(f[0], f[1], f[2])


cdef bint _put_text_datetime(Buf *b, const unsigned char *q, Py_ssize_t n, bint utc) except -1:
    """YYYY-MM-DD HH:MM:SS[.f...] with a valid date and clock (else: the fallback's text)."""
    cdef int f[7]
    cdef Py_ssize_t i
    cdef int us = 0, scale = 100000
    if n < 19 or n == 20 or n > 26 or q[10] != c' ' or q[13] != c':' or q[16] != c':':
        return False
    if not _date_fields(q, f):
        return False
    f[3], f[4], f[5] = _two(q + 11), _two(q + 14), _two(q + 17)
    if not (0 <= f[3] < 24 and 0 <= f[4] < 60 and 0 <= f[5] < 60):
        return False
    if n > 19:
        if q[19] != c'.':
            return False
        for i in range(20, n):
            if q[i] < c'0' or q[i] > c'9':
                return False
            us += (q[i] - 48) * scale
            scale //= 10
    _put_datetime(b, f[0], f[1], f[2], f[3], f[4], f[5], us, utc)
    return True


cdef bint _put_text_date(Buf *b, const unsigned char *q, Py_ssize_t n) except -1:
    cdef int f[3]
    if n != 10 or not _date_fields(q, f):
        return False
    _put_date(b, f[0], f[1], f[2], True)
    return True


@cython.final
cdef class TextLayout:
    """A snapshot table's columns readied for `encode_text_rows`: per column its kind (a
    TEXT_KINDS name), the width of a padded BINARY, the JSON table of a single-byte charset;
    `prefixes` as `ImageWriter`'s; `fallback(i, raw)` the JSON bytes of column i's value
    from its text; `key_names`/`key_index` the key columns' texts and indexes."""

    cdef TextColumn *columns
    cdef Py_ssize_t ncols
    cdef tuple prefixes
    cdef tuple tables  # keeps the JSON tables alive
    cdef object fallback
    cdef tuple key_names
    cdef tuple key_index

    def __cinit__(self, kinds, widths, tables, prefixes, fallback, tuple key_names not None,
                  tuple key_index not None):
        cdef Py_ssize_t i
        self.ncols = len(kinds)
        if not (len(widths) == len(tables) == len(prefixes) == self.ncols):
            raise ValueError("one kind, width, table and prefix per column")
        if len(key_names) != len(key_index):
            raise ValueError("one index per key column")
        if not all(type(prefix) is bytes for prefix in prefixes):
            raise TypeError("the prefixes must be bytes")
        self.columns = <TextColumn *>PyMem_Malloc(sizeof(TextColumn) * (self.ncols + 1))
        if self.columns == NULL:
            raise MemoryError()
        self.tables = tuple(tables)
        for i in range(self.ncols):
            self.columns[i].kind = TEXT_KINDS[kinds[i]]
            self.columns[i].width = widths[i]
            self.columns[i].table = NULL
            if self.columns[i].kind == TK_TABLE:
                if type(self.tables[i]) is not bytes or len(self.tables[i]) != 256 * 8:
                    raise ValueError("a single-byte charset needs its 2048-byte JSON table")
                self.columns[i].table = <const unsigned char *>PyBytes_AS_STRING(self.tables[i])
        self.prefixes = tuple(prefixes)
        self.fallback = fallback
        self.key_names = key_names
        self.key_index = tuple(int(i) for i in key_index)

    def __dealloc__(self):
        PyMem_Free(self.columns)

    def __reduce__(self):
        raise TypeError("TextLayout cannot be pickled")

    cdef int _json(self, bytes packet, Image *image) except -1:
        """Append the row's packet as a JSON object to image.text, with its value spans."""
        cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(packet)
        cdef Py_ssize_t size = PyBytes_GET_SIZE(packet)
        cdef Py_ssize_t pos = 0, start = 0, n = 0, i
        cdef Buf *out = &image.text
        cdef TextColumn *column
        cdef const unsigned char *q
        cdef bytes prefix
        cdef bint done
        cdef int k
        out.len = 0
        if self.ncols == 0:
            _put(out, b"{}", 2)
            return 0
        for i in range(self.ncols):
            prefix = <bytes>PyTuple_GET_ITEM(self.prefixes, i)
            _put(out, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix))
            image.spans[2 * i] = out.len
            image.kinds[i] = 0
            if not _lenenc(p, size, &pos, &start, &n):
                _put(out, b"null", 4)
                image.spans[2 * i + 1] = out.len
                continue
            column = &self.columns[i]
            q = p + start
            k = column.kind
            done = True
            if k == TK_UTF8:
                if _ascii(q, n) or _valid_utf8(q, n):
                    _put_json_text(out, q, n)
                else:
                    image.kinds[i] = 1
                    _put_base64(out, q, n)
            elif k == TK_TABLE:
                if not _put_table_text(out, column.table, q, n):
                    image.kinds[i] = 1
                    _put_base64(out, q, n)
            elif k == TK_SIGNED or k == TK_UNSIGNED:
                done = _put_text_int(out, q, n, k == TK_SIGNED)
            elif k == TK_DOUBLE:
                done = _put_text_double(out, q, n)
            elif k == TK_DECIMAL:
                done = _put_text_decimal(out, q, n)
            elif k == TK_DATETIME or k == TK_TIMESTAMP:
                done = _put_text_datetime(out, q, n, k == TK_TIMESTAMP)
            elif k == TK_DATE:
                done = _put_text_date(out, q, n)
            elif k == TK_BYTES or (k == TK_PADDED and n >= column.width):
                _put_base64(out, q, n)
            else:
                done = False
            if not done:  # TK_FALLBACK, a short BINARY, or text these writers leave alone
                _put_fallback(out, self.fallback, i, PyBytes_FromStringAndSize(<const char *>q, n))
            image.spans[2 * i + 1] = out.len
        if pos != size:
            raise ValueError("a text row holds more values than the table has columns")
        _put(out, b"}", 1)
        return 0


def encode_text_rows(TextLayout layout not None, list packets not None, bytes head not None,
                     bytes tail not None, Py_ssize_t row0, int key_mode, object const_key,
                     bint lines):
    """The op "r" messages of snapshot rows, one text-protocol row packet each:
    ``{"before":null,"after":A`` + `head` + the row number (from `row0`) + `tail`. key_mode
    and the result as `encode_rows` (key_mode 2: the layout's key columns). Raises on a
    packet that is not a row of the layout (the caller reads the rows the slow way, which
    names the problem)."""
    cdef Image image
    cdef Py_ssize_t row = row0
    cdef _Messages messages = _Messages()
    cdef object packet
    messages.key_names, messages.head, messages.lines = layout.key_names, head, lines
    messages.key_mode, messages.const_key, messages.written = key_mode, const_key, []
    memset(&image, 0, sizeof(Image))
    try:
        _image_init(&image, layout.ncols)
        for packet in packets:
            if not PyBytes_CheckExact(packet):
                raise TypeError("a row packet must be bytes")
            layout._json(<bytes>packet, &image)
            messages.add("r", row, tail, NULL, &image, &image, layout.key_index)
            row += 1
        return messages.result(), row - row0
    finally:
        _image_free(&image)
