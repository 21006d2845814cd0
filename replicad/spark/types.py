"""Spark types for replicad's change messages, from the schema topic alone (docs/spark.md).

A table's row struct is the union of every version of the table the schema topic holds, in the
order the columns first appear: a column added by an ALTER is a new nullable field (null in
rows written before it), a dropped one stays (null after), a column whose type changed takes
its newest type, and an older value that does not fit that type is null. Every field is
nullable: a row image may lack a column (before an ALTER, or excluded by the filters).

Values are those of the `exact` value mode (docs/consumers.md) turned into what Spark stores:
DECIMAL(p,s) as DecimalType(p,s) (p > 38 as its digits in a string: Spark stops at 38),
BIGINT UNSIGNED as DecimalType(20,0), DATE as DateType, DATETIME as TimestampNTZType and
TIMESTAMP as TimestampType (UTC), both to the microsecond, TIME as a day-time interval (it
can be negative and exceed 24 h), binary types as bytes, ENUM/SET/text as strings, MySQL
JSON as its text exactly as MySQL prints it (`{"a": 1}`, a string document with its quotes, a
`null` document as `null`; MariaDB's JSON is text), GEOMETRY as a struct of SRID and WKB bytes.
A zero or invalid date (`0000-00-00`) has no Spark value: it is null. A MySQL JSON field
carries `MYSQL_TYPE: "json"` in its metadata: a string is a JSON document there, text
elsewhere.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Collection, Iterator, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

import orjson
from pyspark.sql.types import (
    BinaryType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from replicad.binlog.jsonb import to_mysql_json_text
from replicad.consumers.typed import TypedSchema, time_value

Convert = Callable[[Any], Any]

_SMALL_INTS = frozenset({"tinyint", "smallint", "mediumint", "year"})
_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
GEOMETRY = StructType([StructField("srid", LongType()), StructField("wkb", BinaryType())])
MAX_SPARK_PRECISION = 38
MYSQL_TYPE = "mysql_type"  # field metadata: "json" on a MySQL JSON column's field
JSON_NULL_TEXT = "null"  # a JSON `null` document (not SQL NULL): MySQL's text of it


def column_type(column: dict[str, Any]) -> DataType:
    """The Spark type of one schema-topic column."""
    kind = column["type"]
    unsigned = bool(column.get("unsigned"))
    if kind in _SMALL_INTS:
        return IntegerType()
    if kind == "int":
        return LongType() if unsigned else IntegerType()
    if kind == "bigint":
        return DecimalType(20, 0) if unsigned else LongType()
    if kind == "bit":
        return DecimalType(20, 0) if int(column.get("precision") or 64) == 64 else LongType()
    if kind == "decimal":
        precision, scale = int(column["precision"]), int(column.get("scale") or 0)
        if precision > MAX_SPARK_PRECISION:
            return StringType()
        return DecimalType(precision, scale)
    if kind == "float":
        return FloatType()
    if kind == "double":
        return DoubleType()
    if kind == "date":
        return DateType()
    if kind == "datetime":
        return TimestampNTZType()
    if kind == "timestamp":
        return TimestampType()
    if kind == "time":
        return DayTimeIntervalType(DayTimeIntervalType.DAY, DayTimeIntervalType.SECOND)
    if kind in _BINARY:
        return BinaryType()
    if kind == "geometry":
        return GEOMETRY
    return StringType()  # char/varchar/text, enum, set, json, vector and anything newer


def row_struct(versions: Sequence[TypedSchema]) -> StructType:
    """The union of a table's versions (oldest first): the struct `before` and `after` have."""
    types: dict[str, DataType] = {}
    kinds: dict[str, str] = {}
    for version in versions:
        for column in version.columns:
            types[column["name"]] = column_type(column)  # the newest type wins
            kinds[column["name"]] = column["type"]
    return StructType(
        [
            StructField(name, kind, nullable=True, metadata=_metadata(kinds[name]))
            for name, kind in types.items()
        ]
    )


def _metadata(kind: str) -> dict[str, str] | None:
    # Only JSON is marked: another column's field (and so an existing lake's schema) stays.
    return {MYSQL_TYPE: "json"} if kind == "json" else None


def is_mysql_json(field: StructField) -> bool:
    return field.metadata.get(MYSQL_TYPE) == "json"


def table_struct(versions: Sequence[TypedSchema]) -> StructType:
    """The table as its newest version has it (columns in its order, with the types
    `row_struct` gives): what a lake table holds."""
    union = row_struct(versions)
    return StructType([union[name] for name in versions[-1].column_names])


def _timestamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _integer(bits: int) -> Convert:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def convert(value: Any) -> int:
        number = int(value)
        if not low <= number <= high:
            raise ValueError(f"{number} does not fit {bits} bits")
        return number

    return convert


def _decimal_of(precision: int, scale: int) -> Convert:
    """Exactly, or not at all: a value with more digits than DECIMAL(p,s) holds raises."""
    quantum = Decimal(1).scaleb(-scale)

    def convert(value: Any) -> Decimal:
        number = Decimal(str(value))
        fitted = number.quantize(quantum)
        if fitted != number or len(fitted.as_tuple().digits) > precision:
            raise ValueError(f"{value} does not fit decimal({precision},{scale})")
        return fitted

    return convert


def _string(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()  # a number after an ALTER, say


def _json_text(value: Any) -> str:
    """A MySQL JSON document (the `exact` value: the JSON MySQL printed, parsed) as MySQL
    prints it. Exact but for a DECIMAL inside a document (`JSON_OBJECT('a', 1.50)`): the
    message's number was parsed as a double (`1.5`)."""
    return to_mysql_json_text(value)


def _geometry(value: dict[str, Any]) -> tuple[int, bytes]:
    return int(value["srid"]), base64.b64decode(value["wkb"])


def converter(kind: DataType) -> Convert:
    """From the `exact` JSON value to the Spark value of `kind` (raises on a value that does
    not fit, an out-of-range integer or a decimal with more digits; `row_converter` turns that
    into null)."""
    if isinstance(kind, IntegerType):
        return _integer(32)
    if isinstance(kind, LongType):
        return _integer(64)
    if isinstance(kind, DecimalType):
        return _decimal_of(kind.precision, kind.scale)
    if isinstance(kind, FloatType | DoubleType):
        return float
    if isinstance(kind, DateType):
        return dt.date.fromisoformat
    if isinstance(kind, TimestampNTZType):
        return dt.datetime.fromisoformat
    if isinstance(kind, TimestampType):
        return _timestamp
    if isinstance(kind, DayTimeIntervalType):
        return time_value
    if isinstance(kind, BinaryType):
        return base64.b64decode
    if kind == GEOMETRY:
        return _geometry
    return _string


class RowConvert(Protocol):
    def __call__(
        self, image: dict[str, Any] | None, json_null: Collection[str] = ()
    ) -> tuple | None: ...


def row_converter(struct: StructType) -> RowConvert:
    """A row image (dict of `exact` values) as a tuple in the struct's field order;
    `json_null`: the image's JSON columns whose document is `null` (the message's
    `json_null`), `null` in the image as SQL NULL is."""
    fields = [
        (f.name, _json_text if is_mysql_json(f) else converter(f.dataType)) for f in struct.fields
    ]
    json_fields = frozenset(f.name for f in struct.fields if is_mysql_json(f))

    def convert(image: dict[str, Any] | None, json_null: Collection[str] = ()) -> tuple | None:
        if image is None:
            return None
        out = []
        for name, to_spark in fields:
            value = image.get(name)
            if value is None and json_null and name in json_null and name in json_fields:
                value = JSON_NULL_TEXT
            elif value is not None:
                try:
                    value = to_spark(value)
                except (ValueError, TypeError, KeyError, InvalidOperation):
                    value = None  # a zero date, or an older value the newest type cannot hold
            out.append(value)
        return tuple(out)

    return convert


def change_schema(row: StructType) -> StructType:
    """The change DataFrame (docs/spark.md): one row per change message."""
    return StructType(
        [
            StructField("db", StringType()),
            StructField("table", StringType()),
            StructField("op", StringType()),
            StructField("key", StringType()),
            StructField("before", row),
            StructField("after", row),
            StructField("schema_version", StringType()),
            StructField("gtid", StringType()),
            StructField("file", StringType()),
            StructField("pos", LongType()),
            StructField("row", LongType()),
            StructField("server_id", LongType()),
            StructField("commit_ts", TimestampType()),
            StructField("snapshot", StringType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
        ]
    )


def change_row(
    envelope: dict[str, Any],
    key: str | None,
    convert: RowConvert,
    topic: str | None,
    partition: int | None,
    offset: int | None,
) -> tuple:
    """One change message as a row of `change_schema` (in its field order)."""
    source = envelope["source"]
    ts_ms = source.get("ts_ms")
    nulls = envelope.get("json_null") or {}
    return (
        source["db"],
        source["table"],
        envelope["op"],
        key,
        convert(envelope.get("before"), nulls.get("before", ())),
        convert(envelope.get("after"), nulls.get("after", ())),
        source.get("schema_version"),
        source.get("gtid"),
        source.get("file"),
        source.get("pos"),
        source.get("row"),
        source.get("server_id"),
        None if ts_ms is None else dt.datetime.fromtimestamp(ts_ms / 1000, dt.UTC),
        source.get("snapshot"),
        topic,
        partition,
        offset,
    )


BATCH_ROWS = 8192


def arrow_batches(rows: Iterator[tuple], schema: StructType) -> Iterator[Any]:
    """Rows of `schema` as Arrow record batches: a Python data source that yields batches
    hands them to the JVM in Arrow's columnar form, several times cheaper than one pickled
    tuple per row."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(schema, timezone="UTC")
    structs = {
        i: [f.name for f in field.type]
        for i, field in enumerate(arrow)
        if pa.types.is_struct(field.type)
    }

    def batch(chunk: list[tuple]) -> Any:
        arrays = []
        for i, column in enumerate(zip(*chunk, strict=True)):
            values: Any = column
            names = structs.get(i)
            if names is not None:  # pyarrow builds a struct from dicts
                values = [None if v is None else dict(zip(names, v, strict=True)) for v in column]
            arrays.append(pa.array(list(values), type=arrow.field(i).type))
        return pa.RecordBatch.from_arrays(arrays, schema=arrow)

    chunk: list[tuple] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= BATCH_ROWS:
            yield batch(chunk)
            chunk = []
    if chunk:
        yield batch(chunk)
