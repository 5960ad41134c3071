"""Counts over a sliding time window, kept in a ring of buckets (no list of events)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["SlidingCounts"]

_BUCKETS = 10


class SlidingCounts:
    """Two counts (e.g. requests and retries, or successes and failures) over the last
    ``window_s`` seconds, at a tenth of the window's resolution."""

    __slots__ = ("_clock", "_counts", "_epochs", "_width")

    def __init__(self, window_s: float, clock: Callable[[], float]) -> None:
        self._width = window_s / _BUCKETS
        self._clock = clock
        self._epochs = [-1] * _BUCKETS
        self._counts = [[0, 0] for _ in range(_BUCKETS)]

    def add(self, which: int, amount: int = 1) -> None:
        """Count ``amount`` in count ``which`` (0 or 1) now."""
        epoch = int(self._clock() / self._width)
        slot = epoch % _BUCKETS
        if self._epochs[slot] != epoch:
            self._epochs[slot] = epoch
            self._counts[slot] = [0, 0]
        self._counts[slot][which] += amount

    def totals(self) -> tuple[int, int]:
        """Both counts over the window."""
        now = int(self._clock() / self._width)
        first = second = 0
        for epoch, (a, b) in zip(self._epochs, self._counts, strict=True):
            if now - epoch < _BUCKETS:
                first += a
                second += b
        return first, second

    def clear(self) -> None:
        """Forget everything counted."""
        self._epochs = [-1] * _BUCKETS
        self._counts = [[0, 0] for _ in range(_BUCKETS)]
