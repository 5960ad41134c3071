"""Percentiles of a series of timings."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Latency"]


@dataclass(frozen=True, slots=True)
class Latency:
    """Percentiles of one series of timings, in milliseconds."""

    count: int
    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        """Nearest-rank percentiles of ``seconds``, converted to ms."""
        ordered = sorted(seconds)
        if not ordered:
            return cls(0, float("nan"), float("nan"), float("nan"))
        rank = min(len(ordered) - 1, max(0, -(-len(ordered) * 99 // 100) - 1))
        return cls(
            len(ordered), statistics.median(ordered) * 1e3, ordered[rank] * 1e3, ordered[-1] * 1e3
        )
