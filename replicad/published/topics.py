"""Topic names of the published stream: one definition for the daemon's Kafka sink and for the
readers of its topics, so that they cannot disagree. A template (`sinks.kafka.topic`, ...)
is expanded with the prefix (`sinks.kafka.prefix`; the pipeline's name when absent, and ""
is a prefix too), then every character Kafka refuses becomes "_" (as Debezium does)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from replicad.config import KafkaSinkConfig
from replicad.errors import ConfigError

_TOPIC_BAD = re.compile(r"[^A-Za-z0-9._-]")
_PLACEHOLDERS = "{prefix} {db} {table} {pipeline}"


def sanitize_topic(name: str) -> str:
    """Kafka topic names allow [A-Za-z0-9._-] and at most 249 characters; MySQL names allow
    far more. Over-long names are an error rather than a silent truncation that could merge
    two tables into one topic."""
    cleaned = _TOPIC_BAD.sub("_", name)
    if not cleaned or cleaned in (".", ".."):
        raise ConfigError("topic name is empty after sanitizing", value=name)
    if len(cleaned) > 249:
        raise ConfigError("topic name longer than Kafka's 249 characters", value=cleaned)
    return cleaned


@dataclass(frozen=True)
class TopicNames:
    prefix: str
    pipeline: str
    table_template: str  # sinks.kafka.topic

    @classmethod
    def of(cls, kafka: KafkaSinkConfig, pipeline: str) -> TopicNames:
        return cls(kafka.topic_prefix(pipeline), pipeline, kafka.topic)

    def expand(self, template: str, db: str = "", table: str = "") -> str:
        try:
            name = template.format(prefix=self.prefix, db=db, table=table, pipeline=self.pipeline)
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                f"bad topic template: {exc!r} (placeholders: {_PLACEHOLDERS})",
                key="sinks.kafka.topic",
                value=template,
            ) from None
        return sanitize_topic(name)

    def table(self, db: str, table: str) -> str:
        """The change topic of `db`.`table`."""
        return self.expand(self.table_template, db, table)

    def pattern(self) -> str:
        """A regex that matches every change topic (a subscription for the readers)."""
        out = []
        for part in re.split(r"(\{db\}|\{table\})", self.table_template):
            if part in ("{db}", "{table}"):
                out.append(r"[^.]+" if part == "{db}" else r".+")
            elif part:
                literal = part.format(prefix=self.prefix, pipeline=self.pipeline)
                out.append(re.escape(_TOPIC_BAD.sub("_", literal)))
        return "^" + "".join(out) + "$"


# sinks.kafka's defaults, for readers given only a prefix (the `replicad-kafka` source)
DEFAULT_TABLE_TOPIC: str = KafkaSinkConfig.model_fields["topic"].default
DEFAULT_SCHEMA_TOPIC: str = KafkaSinkConfig.model_fields["schema_topic"].default
