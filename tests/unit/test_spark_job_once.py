"""`--once` jobs end when every query has ended, and a query that failed fails the job
(exit 75), even when it ends between the job's look at it and its "all done" check: the CI
rehearsal of 2026-11-29 saw `materialize --once` exit 0 after its query had failed on
records removed by retention (test_spark_open_lake.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from replicad.errors import ReplicadError
from replicad.spark.jobs import TableJob

pytestmark = pytest.mark.unit


class _EndsWhileLookedAt:
    """Active at the first look, ended (with an error) from the second on."""

    def __init__(self) -> None:
        self.looks = 0

    @property
    def isActive(self) -> bool:  # Spark's name
        self.looks += 1
        return self.looks == 1

    def exception(self) -> Any:
        return RuntimeError("OffsetOutOfRangeException: Some data may have been lost")


class _Ended:
    isActive = False

    def exception(self) -> Any:
        return None


def _job(queries: dict[str, Any]) -> TableJob:
    job = TableJob.__new__(TableJob)
    job.once = True
    job.queries = queries
    job.skipped = set()
    job.stopping = threading.Event()
    job._reported = time.monotonic()
    job._discover = lambda: None  # type: ignore[method-assign]
    return job


def test_a_query_that_fails_while_the_job_looks_fails_the_job() -> None:
    job = _job({"shop.r": _EndsWhileLookedAt()})
    with pytest.raises(ReplicadError, match="Some data may have been lost"):
        job.run()


def test_queries_that_ended_without_error_end_the_job() -> None:
    _job({"shop.a": _Ended(), "shop.b": _Ended()}).run()
