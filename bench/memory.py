"""Resident memory of a process tree, and the judgement of a soak run: flat, or growing.

A long-running gateway's resident set grows at first (imports finishing, caches and
pools filling, the allocator's arenas reaching their working size) and should then
stay put. ``judge`` compares every sample taken after the warm-up with the one taken
where the warm-up ended, and fits a line through them, and another through their later
half: a process that is settling climbs less and less, a leaking one climbs steadily
with the number of requests served.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FLAT_TOLERANCE",
    "MemorySample",
    "Verdict",
    "children",
    "judge",
    "rss_kib",
]

# The target: after the warm-up, resident memory stays within 10% of where it was.
FLAT_TOLERANCE = 0.10


@dataclass(frozen=True, slots=True)
class MemorySample:
    """Resident memory after ``requests`` requests; ``children_kib`` is the sum over the
    gateway's child processes (the embedded vector store's, when it runs)."""

    requests: int
    elapsed_s: float
    rss_kib: int
    children_kib: int

    @property
    def total_kib(self) -> int:
        """The gateway and its children together: what the machine has to give it."""
        return self.rss_kib + self.children_kib


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the samples after the warm-up say."""

    baseline: MemorySample  # where the warm-up ended
    end: MemorySample
    peak: MemorySample  # the largest total after the warm-up
    samples_after_warmup: int
    slope_kib_per_100k: float  # least-squares growth of the total per 100,000 requests
    late_slope_kib_per_100k: float  # the same over the later half of those samples
    tolerance: float

    @property
    def end_growth(self) -> float:
        """Growth from the warm-up's end to the last sample, as a fraction."""
        return self.end.total_kib / self.baseline.total_kib - 1

    @property
    def peak_growth(self) -> float:
        """Growth from the warm-up's end to the largest sample after it, as a fraction."""
        return self.peak.total_kib / self.baseline.total_kib - 1

    @property
    def flat(self) -> bool:
        """No sample after the warm-up is more than ``tolerance`` above its end."""
        limit = self.baseline.total_kib * (1 + self.tolerance)
        return self.samples_after_warmup >= 2 and self.peak.total_kib <= limit


def judge(
    samples: Sequence[MemorySample], warmup_requests: int, tolerance: float = FLAT_TOLERANCE
) -> Verdict:
    """Judge ``samples`` (in the order taken): the baseline is the first one taken after at
    least ``warmup_requests`` requests. Raises ``ValueError`` if there is none."""
    after = [sample for sample in samples if sample.requests >= warmup_requests]
    if not after:
        served = samples[-1].requests if samples else 0
        raise ValueError(
            f"no sample after the warm-up of {warmup_requests:,} requests "
            f"(the run served {served:,}); run longer or shorten the warm-up"
        )
    baseline = after[0]
    if baseline.total_kib <= 0:
        raise ValueError("the baseline sample has no resident memory")
    return Verdict(
        baseline=baseline,
        end=after[-1],
        peak=max(after, key=lambda sample: sample.total_kib),
        samples_after_warmup=len(after),
        slope_kib_per_100k=_slope(after) * 100_000,
        late_slope_kib_per_100k=_slope(after[len(after) // 2 :]) * 100_000,
        tolerance=tolerance,
    )


def _slope(samples: Sequence[MemorySample]) -> float:
    """KiB per request of the least-squares line through the samples (0 with fewer than 2)."""
    xs = [float(sample.requests) for sample in samples]
    if len(set(xs)) < 2:
        return 0.0
    ys = [float(sample.total_kib) for sample in samples]
    return statistics.linear_regression(xs, ys).slope


def rss_kib(pid: int) -> int:
    """The resident set of process ``pid`` in KiB (``VmRSS`` of ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise ValueError(f"process {pid} has no VmRSS (a zombie or a kernel thread)")


def children(pid: int) -> list[int]:
    """Every descendant of process ``pid`` (children, their children, …) alive now."""
    found: list[int] = []
    pending = [pid]
    while pending:
        parent = pending.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                listed = (task / "children").read_text().split()
            except OSError:
                continue  # the thread or the process ended meanwhile
            for child in map(int, listed):
                found.append(child)
                pending.append(child)
    return found
