"""Histograms counted in plain numbers and read when scraped: no lock per observation.

prometheus_client's ``Histogram`` takes a lock on every ``observe``; the metrics here are
observed several times per request (each stage, each stream chunk), always on the event
loop's thread, and the scrape runs on that thread too, so plain numbers are enough.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from functools import partial
from types import TracebackType

from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["PlainHistogram", "Timed"]


class PlainHistogram(Collector):
    """A histogram by label values, observed on one thread, read when scraped."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: tuple[str, ...],
        buckets: tuple[float, ...],
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labels = labels
        self._bounds = buckets
        # Per label set: observations per bucket (the last one past the largest bound),
        # then the sum of the observed values.
        self._series: dict[tuple[str, ...], list[float]] = {}

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        """Count one observation of ``value`` for these label values."""
        counts = self._series.get(labels)
        if counts is None:
            counts = self._counts(labels)
        counts[bisect_left(self._bounds, value)] += 1  # a bucket counts values <= its bound
        counts[-1] += value

    def timer(self, labels: tuple[str, ...]) -> Callable[[], Timed]:
        """Makes context managers observing the seconds their block took, for these labels:
        their series is looked up once, here, not per block."""
        return partial(Timed, self._bounds, self._counts(labels))

    def _counts(self, labels: tuple[str, ...]) -> list[float]:
        counts = self._series.get(labels)
        if counts is None:
            counts = self._series[labels] = [0] * (len(self._bounds) + 2)
        return counts

    def collect(self) -> Iterator[Metric]:
        """The histogram family, as Prometheus reads it."""
        family = HistogramMetricFamily(self._name, self._documentation, labels=self._labels)
        for labels, counts in list(self._series.items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip((*self._bounds, float("inf")), counts[:-1], strict=True):
                cumulative += count
                buckets.append((_bound(bound), cumulative))
            family.add_metric(labels, buckets, sum_value=counts[-1])
        yield family


class Timed:
    """Observes the seconds between entering and leaving it (also when left by an
    exception: a stage that refuses a request took its time too). Made per block by
    ``PlainHistogram.timer``; three Python calls in all, as it is used per stage."""

    __slots__ = ("_bounds", "_counts", "_started")

    def __init__(self, bounds: tuple[float, ...], counts: list[float]) -> None:
        self._bounds = bounds
        self._counts = counts
        self._started = 0.0

    def __enter__(self) -> Timed:
        self._started = time.perf_counter()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        value = time.perf_counter() - self._started
        counts = self._counts
        counts[bisect_left(self._bounds, value)] += 1
        counts[-1] += value


def _bound(value: float) -> str:
    """A bucket's ``le`` label as prometheus_client writes it."""
    return "+Inf" if value == float("inf") else repr(float(value))
