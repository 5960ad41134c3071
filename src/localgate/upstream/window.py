"""Counts over a sliding time window, kept in a ring of buckets (no list of events)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["SlidingCounts"]

_BUCKETS = 10


class SlidingCounts:
    """Two counts (e.g. requests and retries, or successes and failures) over the last
    ``window_s`` seconds, at a tenth of the window's resolution."""

    __slots__ = ("_clock", "_counts", "_epochs", "_per_second")

    def __init__(self, window_s: float, clock: Callable[[], float]) -> None:
        self._per_second = _BUCKETS / window_s
        self._clock = clock
        self._epochs = [-1] * _BUCKETS
        # Both counts of a bucket side by side: bucket i holds [2i] and [2i + 1].
        self._counts = [0] * (2 * _BUCKETS)

    def add(self, which: int) -> None:
        """Count one in count ``which`` (0 or 1) now; called once or twice per request."""
        epoch = int(self._clock() * self._per_second)
        slot = epoch % _BUCKETS
        if self._epochs[slot] != epoch:
            self._epochs[slot] = epoch
            self._counts[2 * slot] = self._counts[2 * slot + 1] = 0
        self._counts[2 * slot + which] += 1

    def totals(self) -> tuple[int, int]:
        """Both counts over the window."""
        now = int(self._clock() * self._per_second)
        first = second = 0
        for slot, epoch in enumerate(self._epochs):
            if now - epoch < _BUCKETS:
                first += self._counts[2 * slot]
                second += self._counts[2 * slot + 1]
        return first, second

    def clear(self) -> None:
        """Forget everything counted."""
        self._epochs = [-1] * _BUCKETS
        self._counts = [0] * (2 * _BUCKETS)
