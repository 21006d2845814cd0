"""What a Delta lake table stores for the Spark types Delta cannot hold.

The change DataFrame types TIME as a day-time interval (docs/spark.md, "Types"): MySQL's TIME
is a signed duration up to 838:59:59, not a time of day. Delta refuses interval columns, so a
Delta lake table stores it as BIGINT microseconds (signed), and readers of the lake through
replicad (verify) turn it back into the interval. Every other type is stored as it is.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DayTimeIntervalType, LongType, StructField, StructType

_MICROS = {"DAY": 86_400_000_000, "HOUR": 3_600_000_000, "MINUTE": 60_000_000}


def stored_type(data_type: DataType) -> DataType:
    return LongType() if isinstance(data_type, DayTimeIntervalType) else data_type


def stored_struct(columns: StructType) -> StructType:
    return StructType(
        [StructField(f.name, stored_type(f.dataType), f.nullable, f.metadata) for f in columns]
    )


def to_stored(value: Column, data_type: DataType) -> Column:
    """`value` (of `data_type`) as the Delta table stores it."""
    if not isinstance(data_type, DayTimeIntervalType):
        return value.try_cast(data_type)
    whole = [F.extract(F.lit(unit), value).cast("long") * n for unit, n in _MICROS.items()]
    seconds = (F.extract(F.lit("SECOND"), value) * 1_000_000).cast("long")
    return whole[0] + whole[1] + whole[2] + seconds


def stored_images(changes: DataFrame) -> DataFrame:
    """The change DataFrame with its row images (`before`, `after`) as Delta stores them."""
    row = changes.schema["after"].dataType
    assert isinstance(row, StructType)
    if stored_struct(row) == row:
        return changes
    images = {}
    for image in ("before", "after"):
        fields = [to_stored(F.col(image)[f.name], f.dataType).alias(f.name) for f in row]
        images[image] = F.when(F.col(image).isNull(), F.lit(None)).otherwise(F.struct(*fields))
    return changes.withColumns(images)


def from_stored(value: Column, data_type: DataType) -> Column:
    """A stored column read back as `data_type`."""
    if not isinstance(data_type, DayTimeIntervalType):
        return value
    seconds = (value / F.lit(1_000_000)).cast("decimal(18,6)")
    return F.make_dt_interval(F.lit(0), F.lit(0), F.lit(0), seconds)
