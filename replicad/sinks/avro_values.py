"""Change events in the form fastavro writes for the Avro schemas of `avro_schema`: the
payload the JSON path builds (Debezium's envelope with `debezium` values, in Kafka Connect
JSON's forms) turned into each field's Avro form. Sans-IO: dicts in, dicts out.

Only the fields whose JSON form is not already the Avro one change (docs/consumers.md,
"Avro"):
- Connect Decimal (DECIMAL in `precise` mode, BIGINT UNSIGNED in `precise` mode): the base64
  of the unscaled two's-complement bytes -> `decimal.Decimal` with the schema's scale
  (fastavro writes it as the bytes/decimal logical type);
- any other bytes field (binary columns in `bytes` mode, BIT(>1) as io.debezium.data.Bits,
  a GEOMETRY's `wkb`): base64 -> bytes;
- row field names: as `avro_schema.avro_name` adjusts them.
Connect's Date/Time/Timestamp stay the ints the JSON holds (days, milliseconds of the day,
epoch milliseconds): fastavro writes ints of those logical types as they are.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from replicad.binlog.column_types import TableDescription
from replicad.sinks.avro_schema import avro_name
from replicad.sinks.debezium_values import DECIMAL, DebeziumOptions, connect_field

Convert = Callable[[Any], Any]
Row = dict[str, Any] | None


def _bytes(value: str) -> bytes:
    return binascii.a2b_base64(value)


def _decimal(scale: int) -> Convert:
    def as_decimal(value: str) -> Decimal:
        unscaled = int.from_bytes(_bytes(value), "big", signed=True)
        # From text, so the digits stay exact past the context's 28 (DECIMAL(65,30)).
        return Decimal(f"{unscaled}E-{scale}")

    return as_decimal


def field_converter(connect: Mapping[str, Any]) -> Convert | None:
    """The JSON value -> Avro value function of one Connect field schema; None where the
    two forms are the same. Never called with None (null stays null)."""
    if connect.get("name") == DECIMAL:
        return _decimal(int(connect["parameters"]["scale"]))
    kind = connect.get("type")
    if kind == "bytes":
        return _bytes
    if kind == "struct":
        return StructConverter(connect["fields"])
    return None


class StructConverter:
    """A Connect struct's JSON object -> the dict of its Avro record: field names adjusted,
    each value converted."""

    __slots__ = ("_fields",)

    def __init__(self, fields: list[Mapping[str, Any]]) -> None:
        self._fields = {f["field"]: (avro_name(f["field"]), field_converter(f)) for f in fields}

    def __call__(self, value: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        fields = self._fields
        for name, item in value.items():
            target, convert = fields.get(name, (name, None))
            out[target] = item if convert is None or item is None else convert(item)
        return out


def row_converter(description: TableDescription, options: DebeziumOptions) -> StructConverter:
    """The converter of one table version's row images (and of keys: their columns are
    row columns)."""
    return StructConverter(
        [connect_field(c.name, c.type, c.nullable, options) for c in description.columns]
    )


def avro_envelope(payload: Mapping[str, Any], row: StructConverter) -> dict[str, Any]:
    """The change envelope (`envelope.change_envelope`'s dict) as the Avro Envelope record
    takes it. Fields of the JSON envelope that the record has not (the notes: `absent`,
    `json_null`, `json_diffs`) are left for fastavro to skip."""
    before, after = payload["before"], payload["after"]
    return {
        **payload,
        "before": None if before is None else row(before),
        "after": None if after is None else row(after),
    }
