"""Message-by-message comparison of Debezium's topic with replicad's (`envelope.values:
debezium`, `schemas_enable` the same on both): keys, `before`, `after`, `op`, the `source`
fields, and (with schemas) the Connect schemas of keys and row images. Every difference is
one `Difference`, named by where it is (`where`: "key", "before", "after", "op", "source",
"schema.key", "schema.row", "fields", "count") and which column or field (`name`);
`differences_by_kind` folds repeats of the same (where, name) into one, with the first
example, for an allow-list and a report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.helpers.kafka_helpers import Record

# Compared where both have them. Not compared: `version` and `connector` (each product's own
# name; they must differ), `ts_ms` at the top level (when each process built the message).
SOURCE_FIELDS = (
    "name",
    "ts_ms",
    "snapshot",
    "db",
    "table",
    "server_id",
    "gtid",
    "file",
    "pos",
    "row",
    "thread",
    "query",
)
NOT_COMPARED_SOURCE = frozenset({"version", "connector"})
# Top-level fields compared for presence only: when each process built the message.
PRESENCE_ONLY_TOP = frozenset({"ts_ms", "ts_us", "ts_ns"})
# Source fields of a snapshot read (op "r") compared for presence only: each connector took
# its own snapshot, at its own moment (ts_*) and binlog position (file, pos, gtid: other
# tests write to the shared server meanwhile).
PRESENCE_ONLY_READ = frozenset({"ts_ms", "ts_us", "ts_ns", "file", "pos", "gtid"})
COMPARED_APART = frozenset({"source", "before", "after", "op"})


@dataclass(frozen=True)
class Difference:
    index: int  # the message's position in both topics
    where: str
    name: str
    debezium: Any
    replicad: Any

    @property
    def kind(self) -> tuple[str, str]:
        return self.where, self.name


def _payload(blob: bytes | None) -> Any:
    import orjson

    if blob is None:
        return None
    return orjson.loads(blob)


def _row_schemas(value: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The Connect schema of each row column, from the envelope's `after` (else `before`)."""
    if "schema" not in value:
        return {}
    fields = {f["field"]: f for f in value["schema"]["fields"]}
    row = fields.get("after") or fields.get("before") or {"fields": []}
    return {f["field"]: {k: v for k, v in f.items() if k != "field"} for f in row["fields"]}


def _compare_rows(
    i: int, where: str, dbz: dict[str, Any] | None, rep: dict[str, Any] | None
) -> list[Difference]:
    if dbz is None or rep is None:
        return [] if dbz is rep else [Difference(i, where, "*", dbz, rep)]
    out = []
    for column in dict.fromkeys([*dbz, *rep]):
        a, b = dbz.get(column, "<absent>"), rep.get(column, "<absent>")
        if a != b:
            out.append(Difference(i, where, column, a, b))
    return out


def _compare_value(
    i: int, dbz: dict[str, Any], rep: dict[str, Any], schemas: bool
) -> list[Difference]:
    out = []
    a, b = (dbz["payload"], rep["payload"]) if schemas else (dbz, rep)
    out += _compare_rows(i, "before", a["before"], b["before"])
    out += _compare_rows(i, "after", a["after"], b["after"])
    if a["op"] != b["op"]:
        out.append(Difference(i, "op", "op", a["op"], b["op"]))
    for name in dict.fromkeys([*a["source"], *b["source"]]):
        if name in NOT_COMPARED_SOURCE:
            continue
        x, y = a["source"].get(name, "<absent>"), b["source"].get(name, "<absent>")
        if a["op"] == "r" and name in PRESENCE_ONLY_READ and "<absent>" not in (x, y):
            continue
        if x != y:
            out.append(Difference(i, "source", name, x, y))
    for name in dict.fromkeys([*a, *b]):
        x, y = a.get(name, "<absent>"), b.get(name, "<absent>")
        if name in PRESENCE_ONLY_TOP and "<absent>" not in (x, y):
            continue
        if name not in COMPARED_APART and x != y:
            out.append(Difference(i, "fields", name, x, y))
    sa, sb = _row_schemas(dbz), _row_schemas(rep)
    for column in dict.fromkeys([*sa, *sb]):
        if sa.get(column) != sb.get(column):
            out.append(Difference(i, "schema.row", column, sa.get(column), sb.get(column)))
    if schemas and dbz["schema"].get("name") != rep["schema"].get("name"):
        out.append(
            Difference(
                i,
                "schema.row",
                "<envelope name>",
                dbz["schema"].get("name"),
                rep["schema"].get("name"),
            )
        )
    return out


def compare_topics(
    debezium: list[Record], replicad: list[Record], *, schemas: bool = True
) -> list[Difference]:
    """Both topics in offset order, message i against message i. `schemas`: both wrote
    Kafka Connect JSON with schemas ({"schema", "payload"}), else the bare payloads."""
    out: list[Difference] = []
    if len(debezium) != len(replicad):
        out.append(Difference(-1, "count", "messages", len(debezium), len(replicad)))
    for i, (d, r) in enumerate(zip(debezium, replicad, strict=False)):
        dk, rk = _payload(d.key), _payload(r.key)
        if not schemas:
            dk, rk = dk and {"payload": dk}, rk and {"payload": rk}
        if (dk or {}).get("payload") != (rk or {}).get("payload"):
            out.append(Difference(i, "key", "payload", dk and dk["payload"], rk and rk["payload"]))
        if schemas and (dk or {}).get("schema") != (rk or {}).get("schema"):
            out.append(
                Difference(i, "schema.key", "schema", dk and dk["schema"], rk and rk["schema"])
            )
        dv, rv = _payload(d.value), _payload(r.value)
        if dv is None or rv is None:
            if dv is not rv:
                out.append(Difference(i, "fields", "<tombstone>", dv is None, rv is None))
            continue
        out += _compare_value(i, dv, rv, schemas)
    return out


def differences_by_kind(differences: list[Difference]) -> dict[tuple[str, str], Difference]:
    """The first difference of each (where, name)."""
    out: dict[tuple[str, str], Difference] = {}
    for d in differences:
        out.setdefault(d.kind, d)
    return out


def table(differences: list[Difference], column_types: dict[str, str]) -> str:
    """A Markdown table of the differences (one row per kind) for a failure message."""
    lines = ["| where | column / field | type | Debezium | replicad |", "|---|---|---|---|---|"]
    for (where, name), d in differences_by_kind(differences).items():
        lines.append(
            f"| {where} | {name} | {column_types.get(name, '')} | {d.debezium!r} | {d.replicad!r} |"
        )
    return "\n".join(lines)
