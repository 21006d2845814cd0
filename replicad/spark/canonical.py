"""One text form per column value, computed by the server in SQL and by Spark over a lake table
(docs/spark.md, "verify"), so that a row hashes the same on both sides when, and only when, its
values are equal.

The form per type (NULL stays NULL; so does a zero date, which a lake table holds as null):
- integers, YEAR, BIT: the decimal digits; DECIMAL: its digits with the column's scale;
- FLOAT and DOUBLE: the double (a FLOAT widened exactly) as the shortest digits that read back
  to the same double, in the notation the server's own lossless conversion gives: MariaDB's
  `CAST(double AS CHAR)` (`mariadb_double_text`), MySQL's JSON text of the double
  (`mysql_double_text`: MySQL's `CAST(double AS CHAR)` rounds a text longer than 22
  characters, its JSON printer keeps every digit). Spark has no such function, so that one
  column type goes through a Python UDF;
- DATE `YYYY-MM-DD`; DATETIME `YYYY-MM-DD HH:MM:SS.ffffff`; TIMESTAMP microseconds since the
  epoch (no time zone involved on either side); TIME signed microseconds;
- binary types their bytes in upper-case hex; GEOMETRY `<srid>:<hex of the WKB>`;
- text, ENUM, SET: the characters as UTF-8; MySQL JSON its text as MySQL prints it (the lake
  keeps that text, replicad/spark/types.py); MariaDB's JSON is text.
A row's hash is the SHA2-256 of its values, each as `V<byte length>:<text>` or `N` for NULL
(the length prefix keeps `("a", "bc")` and `("ab", "c")` apart), in column order: MariaDB and
MySQL both have SHA2 (MySQL 9.7 has no MD5() nor SHA1(): a call is taken for a stored function
of the current database, "No database selected").

`mariadb` (keyword) says whose SQL and text: the server's kind, not the JDBC driver's (MySQL
Connector/J reads MariaDB too).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from replicad.binlog.jsonb import to_mysql_json_text

_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
MAX_POSITIONAL_EXPONENT = 15  # MariaDB writes a double positionally from 1e-15 to below 1e16


def mariadb_double_text(value: float | None) -> str | None:
    """A double as MariaDB's `CAST(double AS CHAR)` writes it (shortest round-trip digits;
    exponent form outside 1e-15 .. 1e16 unless the digits reach past the point; -0 as 0)."""
    if value is None:
        return None
    if value == 0:
        return "0"  # -0 too
    sign = "-" if value < 0 else ""
    _, digit_tuple, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    assert isinstance(exponent, int)  # finite: MySQL stores no NaN or infinity
    point = len(digits) + exponent  # digits before the decimal point
    if point >= 1 - MAX_POSITIONAL_EXPONENT and (
        point <= MAX_POSITIONAL_EXPONENT or len(digits) > point
    ):
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point < len(digits):
            return f"{sign}{digits[:point]}.{digits[point:]}"
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{point - 1}"


def mysql_double_text(value: float | None) -> str | None:
    """A double as MySQL prints it in JSON (`JSON_ARRAY(d)`'s element): the shortest
    round-trip digits, `1.0` for an integral value, `-0.0`, `1e300` (jsonb.py's my_gcvt)."""
    return None if value is None else to_mysql_json_text(float(value))


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _zero_date_is_null(column: str, text: str) -> str:
    return f"IF(MONTH({column}) = 0 OR DAYOFMONTH({column}) = 0, NULL, {text})"


def _double_sql(name: str, *, mariadb: bool) -> str:
    double = f"CAST({name} AS DOUBLE)"
    if mariadb:
        return f"CAST({double} AS CHAR)"
    # JSON_ARRAY(NULL) is `[null]`, whose element prints `null`: NULL stays NULL by the IF.
    element = f"JSON_EXTRACT(JSON_ARRAY({double}), '$[0]')"
    return f"IF({name} IS NULL, NULL, CAST({element} AS CHAR))"


def mysql_text(column: dict[str, Any], *, mariadb: bool) -> str:
    """SQL for the canonical text of one column (a schema-topic column description)."""
    kind = column["type"]
    name = quote_name(column["name"])
    if kind in _INTEGERS or kind == "decimal":
        text = f"CAST({name} AS CHAR)"
    elif kind in ("year", "bit"):
        text = f"CAST({name} + 0 AS CHAR)"  # YEAR 0 as 0, BIT as its number
    elif kind in ("float", "double"):
        text = _double_sql(name, mariadb=mariadb)
    elif kind == "date":
        text = _zero_date_is_null(name, f"DATE_FORMAT({name}, '%Y-%m-%d')")
    elif kind == "datetime":
        text = _zero_date_is_null(name, f"DATE_FORMAT({name}, '%Y-%m-%d %H:%i:%s.%f')")
    elif kind == "timestamp":
        micros = f"CAST(UNIX_TIMESTAMP({name}) * 1000000 AS SIGNED)"
        text = f"IF(UNIX_TIMESTAMP({name}) = 0, NULL, CAST({micros} AS CHAR))"
    elif kind == "time":
        magnitude = (
            f"(HOUR({name}) * 3600 + MINUTE({name}) * 60 + SECOND({name})) * 1000000"
            f" + MICROSECOND({name})"
        )
        text = f"CAST(IF({name} < 0, -1, 1) * ({magnitude}) AS CHAR)"
    elif kind in _BINARY:
        text = f"HEX({name})"
    elif kind == "geometry":  # stored as the SRID (4 bytes, little-endian) and the WKB
        srid = f"CONV(HEX(REVERSE(SUBSTRING({name}, 1, 4))), 16, 10)"
        text = f"CONCAT({srid}, ':', HEX(SUBSTRING({name}, 5)))"
    else:
        text = name  # MySQL JSON too: its own text (`{"a": 1}`), what the lake keeps
    return f"CONVERT({text} USING utf8mb4)"


# (lambdas: PySpark warns when it cannot read an eval type from a typed function's hints)
_mariadb_double = F.udf(lambda value: mariadb_double_text(value), StringType())
_mysql_double = F.udf(lambda value: mysql_double_text(value), StringType())


def spark_text(column: dict[str, Any], value: Column, *, mariadb: bool) -> Column:
    """The same canonical text, from the lake table's value of the column (replicad/spark/
    types.py gives its Spark type)."""
    kind = column["type"]
    if kind in ("float", "double"):
        return (_mariadb_double if mariadb else _mysql_double)(value.cast("double"))
    if kind == "date":
        return F.date_format(value, "yyyy-MM-dd")
    if kind == "datetime":
        return F.date_format(value, "yyyy-MM-dd HH:mm:ss.SSSSSS")
    if kind == "timestamp":
        return F.unix_micros(value).cast("string")
    if kind == "time":
        epoch = F.lit("1970-01-01 00:00:00").cast("timestamp")
        return F.unix_micros(epoch + value).cast("string")
    if kind in _BINARY:
        return F.hex(value)
    if kind == "geometry":
        return F.concat(value["srid"].cast("string"), F.lit(":"), F.hex(value["wkb"]))
    return value.cast("string")


def mysql_token(column: dict[str, Any], *, mariadb: bool) -> str:
    text = mysql_text(column, mariadb=mariadb)
    return f"IFNULL(CONCAT('V', OCTET_LENGTH({text}), ':', {text}), 'N')"


def spark_token(column: dict[str, Any], value: Column, *, mariadb: bool) -> Column:
    text = spark_text(column, value, mariadb=mariadb)
    return F.coalesce(F.concat(F.lit("V"), F.octet_length(text), F.lit(":"), text), F.lit("N"))


def mysql_row_hash(columns: Sequence[dict[str, Any]], *, mariadb: bool) -> str:
    """SQL for a row's hash over its columns' tokens (SHA2-256, hex)."""
    tokens = ", ".join(mysql_token(c, mariadb=mariadb) for c in columns)
    return f"SHA2(CONCAT({tokens}), 256)"


def spark_row_hash(tokens: Sequence[Column]) -> Column:
    """The same hash from the columns' `spark_token`s, in column order."""
    return F.sha2(F.concat(*tokens), 256)


def mysql_hash_number(row_hash: str) -> str:
    """60 bits of a hash as a number: summed over a range, the range's checksum."""
    return f"CAST(CONV(LEFT({row_hash}, 15), 16, 10) AS UNSIGNED)"


def spark_hash_number(row_hash: Column) -> Column:
    return F.conv(F.substring(row_hash, 1, 15), 16, 10).cast("decimal(20,0)")
