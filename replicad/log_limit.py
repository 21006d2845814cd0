"""At most one log line per key and interval, counting what was held back.

A dependency that is away makes its client say so many times a second (librdkafka: a FAIL
line per connection attempt, ~19 a second with Kafka down); an operator needs the first
line, then a reminder now and then with how many were held back. Used by the logging set-up
(replicad/service/logging.py, for librdkafka's own lines) and by `replicad invalidate`'s
`kafka_unavailable`; it has no logging of its own, so any layer may use it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable


class EveryInterval:
    """`allow(key)` allows a key's first call, then one once `interval_s` has passed since
    the last allowed one, and says how many were refused in between. Thread-safe:
    librdkafka's callbacks and the loop's own lines may come from different threads."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[Hashable, float] = {}
        self._refused: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def allow(self, key: Hashable) -> tuple[bool, int]:
        """(whether to log now, how many were held back since the last line for `key`)."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                self._refused[key] = self._refused.get(key, 0) + 1
                return False, 0
            self._last[key] = now
            return True, self._refused.pop(key, 0)
