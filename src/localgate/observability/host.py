"""/metrics for the whole host when ``localgate serve --workers N`` runs several processes.

A scrape on the shared port reaches one worker, chosen by the kernel. That worker answers
with the sum over every worker: each worker hands out its own samples when a sibling asks
(``siblings.py``: a Unix socket per worker), and the one scraped asks its siblings at
scrape time and merges their samples with its own. Nothing changes per request: the metrics keep
counting in plain numbers on each worker's event loop (``metrics.py``), and the cost of a
host-wide view is paid by the scrape (a few milliseconds), not by the traffic.

Merging, per sample (same name and labels):

- counters, histograms and summaries are summed (``*_created`` takes the earliest);
- gauges are summed (requests in flight, queue lengths, records held), except those whose
  name says they are not amounts: ``*_timestamp_seconds``, ``*_info`` and ``*_state``
  take the largest value (latest time, worst circuit), ``*_successful`` the smallest
  (one worker whose reload was rejected makes the host's 0).

A worker that has died and is being restarted is missing from the sum until it is back;
its counts start again from zero, which Prometheus' ``rate`` reads as a counter reset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from localgate.observability.siblings import Siblings

__all__ = ["HostMetrics", "merge_families"]

# The question the scraped worker asks its siblings.
SAMPLES = "metrics"

_MAXIMUM_SUFFIXES = ("_timestamp_seconds", "_info", "_state")
_MINIMUM_SUFFIXES = ("_successful",)

_SampleKey = tuple[str, tuple[tuple[str, str], ...]]


class HostMetrics:
    """One worker's part: hand its own samples to its siblings, and merge theirs with its
    own when it is the one scraped."""

    def __init__(self, registry: CollectorRegistry, siblings: Siblings) -> None:
        self._registry = registry
        self._siblings = siblings
        siblings.answer(SAMPLES, lambda: _encode(self._registry.collect()))

    async def render(self) -> bytes:
        """The host's exposition: this worker's samples and every reachable sibling's."""
        own = _encode(self._registry.collect())
        theirs = await self._siblings.ask(SAMPLES)
        parts = [own, *(part for part in theirs.values() if isinstance(part, list))]
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(merge_families(parts)))
        return generate_latest(registry)


def _encode(families: Iterable[Metric]) -> list[dict[str, Any]]:
    return [
        {
            "name": family.name,
            "documentation": family.documentation,
            "type": family.type,
            "unit": family.unit,
            "samples": [[s.name, s.labels, s.value] for s in family.samples],
        }
        for family in families
    ]


def merge_families(parts: Iterable[list[dict[str, Any]]]) -> list[Metric]:
    """The families of several workers as one host's (module docstring: how)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[_SampleKey, float]] = {}
    for part in parts:
        for encoded in part:
            name = encoded["name"]
            if name not in families:
                families[name] = Metric(
                    name, encoded["documentation"], encoded["type"], encoded["unit"]
                )
                values[name] = {}
            combine = _combiner(encoded["type"], name)
            samples = values[name]
            for sample_name, labels, value in encoded["samples"]:
                key = (sample_name, tuple(sorted(labels.items())))
                earlier = samples.get(key)
                if earlier is None:
                    samples[key] = float(value)
                elif sample_name.endswith("_created"):
                    samples[key] = min(earlier, float(value))
                else:
                    samples[key] = combine(earlier, float(value))
    for name, family in families.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
    return list(families.values())


def _combiner(kind: str, name: str) -> Callable[[float, float], float]:
    if kind in ("gauge", "info", "stateset", "unknown"):
        if name.endswith(_MAXIMUM_SUFFIXES) or kind in ("info", "stateset"):
            return max
        if name.endswith(_MINIMUM_SUFFIXES):
            return min
    return _add


def _add(first: float, second: float) -> float:
    return first + second


class _Families(Collector):
    """Already merged families, for ``generate_latest``."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        """The merged families."""
        yield from self._families
