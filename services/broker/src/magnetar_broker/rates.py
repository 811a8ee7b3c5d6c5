"""Message and byte rates over a sliding window, as Pulsar's topic stats report them
(``msgRateIn``, ``msgThroughputIn``, ...).  Pure: the caller passes the clock.

Counts go into one-second buckets; a rate is what the last ``window_s`` whole seconds'
buckets and the current second's hold, divided by the time they cover (less while the
counter is younger than that, so a new topic's first second is not diluted over the
whole window).
Pulsar computes its rates over the stats interval (60 s by default); the window here is
shorter so that a dashboard and an operator see a change within seconds.
"""

from __future__ import annotations

from collections import deque

DEFAULT_WINDOW_S = 10


class Rate:
    __slots__ = ("window_s", "_buckets", "_started")

    def __init__(self, now: float, window_s: int = DEFAULT_WINDOW_S):
        self.window_s = window_s
        self._buckets: deque[list[int]] = deque()  # [second, messages, bytes], oldest first
        self._started = now

    def add(self, now: float, messages: int, nbytes: int) -> None:
        second = int(now)
        if self._buckets and self._buckets[-1][0] == second:
            bucket = self._buckets[-1]
            bucket[1] += messages
            bucket[2] += nbytes
        else:
            self._buckets.append([second, messages, nbytes])
        self._expire(second)

    def _expire(self, second: int) -> None:
        while self._buckets and self._buckets[0][0] < second - self.window_s:
            self._buckets.popleft()

    def rates(self, now: float) -> tuple[float, float]:
        """(messages per second, bytes per second) over the window ending ``now``."""
        second = int(now)
        self._expire(second)
        span = min(self.window_s + (now - second), max(now - self._started, 1.0))
        messages = sum(b[1] for b in self._buckets)
        nbytes = sum(b[2] for b in self._buckets)
        return messages / span, nbytes / span
