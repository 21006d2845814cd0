"""The position a Delta job's micro-batch makes its table complete through (docs/spark.md
"A consistent cut across tables"), recorded in each MERGE commit for `replicad spark cut`.

The daemon stores a position only once Kafka acknowledged every message before it (acks=all;
in exactly-once mode once their transaction committed), so a sample (S, H) — the stored
position S, then the topic's read_committed end offsets H read after it — says: every change
of the table before S is at an offset below H. A batch whose end offsets reach H in every
partition therefore leaves the table complete through S (earlier batches hold everything
below its start offsets).

The batch's end offsets come from the query's offset log (`<checkpoint>/offsets/<batch id>`),
which Spark writes before it runs the batch: they are fixed before foreachBatch runs, and not
necessarily the topic's end when they were fixed (maxOffsetsPerTrigger, availableNow's target
fixed at the query's start, a batch re-run after a restart with the offsets of the previous
run). Comparing offsets holds in all these cases; comparing times would not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from replicad.config import Config
from replicad.coordination.stored import stored_position
from replicad.spark.cut import Point
from replicad.spark.kafka_source import Settings, partition_bounds

log = structlog.get_logger("replicad.spark")

Offsets = dict[int, int]  # partition -> offset


@dataclass(frozen=True)
class Sample:
    through: Point
    ends: Offsets  # the topic's end offsets, read after `through`


def reaches(end: Offsets, sample: Sample) -> bool:
    """Whether a batch ending at `end` holds every offset below the sample's ends."""
    return all(end.get(p, 0) >= offset for p, offset in sample.ends.items())


def offset_log(checkpoint: str, batch_id: int) -> str:
    """The file of a query's offset log with a batch's offsets."""
    return f"{checkpoint.rstrip('/')}/offsets/{batch_id}"


def batch_end(offset_log_text: str | None, topic: str) -> Offsets | None:
    """The end offsets of a batch from its offset log file's text (None: no file, or an
    offset log of another shape)."""
    if offset_log_text is None:
        return None
    for line in offset_log_text.splitlines()[
        2:
    ]:  # "v1", the batch's metadata, then one line per source
        try:
            offsets = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(offsets, dict) and isinstance(offsets.get(topic), dict):
            return {int(p): int(o) for p, o in offsets[topic].items()}
    return None


class Completeness:
    """Samples taken on the driver (before the query starts, and at the start of each batch)
    and the newest one each batch reaches."""

    def __init__(self, position: Callable[[], Point | None], ends: Callable[[], Offsets]) -> None:
        self._position = position
        self._ends = ends
        self._samples: list[Sample] = []

    def sample(self) -> None:
        """Take a sample: the stored position first, the end offsets after it."""
        through = self._position()
        if through is not None:
            self._samples.append(Sample(through, self._ends()))

    def through(self, end: Offsets | None) -> Point | None:
        """The newest sampled position a batch ending at `end` is complete through; older
        samples are dropped (a later batch ends at or beyond this one)."""
        if end is None:
            return None
        reached = [i for i, s in enumerate(self._samples) if reaches(end, s)]
        if not reached:
            return None
        best = max((self._samples[i] for i in reached), key=lambda s: s.through)
        self._samples = self._samples[max(reached) + 1 :]
        return best.through

    @classmethod
    def of(cls, config: Config, options: dict[str, str]) -> Completeness:
        """For a table's query: the pipeline's stored position, its topic's end offsets."""
        settings = Settings.of(options)
        return cls(lambda: _stored(config), lambda: _topic_ends(settings))


def _stored(config: Config) -> Point | None:
    try:
        position: dict[str, Any] | None = stored_position(config)
    except Exception as exc:  # a commit without `through` is sound, a stopped job is not
        log.warning("stored_position_unreadable", error=str(exc))
        return None
    if not position or not position.get("file"):
        return None
    return position["file"], int(position["pos"])


def _topic_ends(settings: Settings) -> Offsets:
    consumer = settings.open()
    try:
        topic = consumer.list_topics(settings.topic, timeout=30).topics[settings.topic]
        return {p: partition_bounds(consumer, settings.topic, p)[1] for p in topic.partitions}
    finally:
        consumer.close()
