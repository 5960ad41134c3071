"""Quality signals as Prometheus series: low-confidence counts, and the drift gauges a
quality monitor computes when scraped (docs/quality.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["GAUGES", "QualityMetrics", "Reading"]

# One gauge sample: the family's name, its label values (in the family's order), the value.
Reading = tuple[str, tuple[str, ...], float]

_SERIES = ("model", "model_version")
# The gauges, their help and labels; a monitor's readings name one of these families.
GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "localgate_quality_drift": (
        "Jensen-Shannon divergence (bits, 0 = same, 1 = disjoint) between a model version's "
        "recent answers and a reference, by signal (output_length, finish_reason, refusal) "
        "and against (reference: its own; previous_version: the version before it). Shown "
        "once both windows hold quality.drift.min_answers answers.",
        (*_SERIES, "signal", "against"),
    ),
    "localgate_quality_window_answers": (
        "Answers in a model version's reference window (fixed once full) and recent "
        "(sliding) window.",
        (*_SERIES, "window"),
    ),
    "localgate_quality_refusal_ratio": (
        "Share of a window's answers refused or blocked for safety (finish reason SAFETY, "
        "RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII, IMAGE_SAFETY, or a blocked prompt).",
        (*_SERIES, "window"),
    ),
    "localgate_quality_avg_logprob": (
        "Mean of the answers' average log-probability per token in a window (answers that "
        "carried avgLogprobs or logprobs).",
        (*_SERIES, "window"),
    ),
    "localgate_quality_avg_logprob_shift": (
        "Recent mean average log-probability minus the reference's (negative: the model is "
        "less sure of its answers than it was); against reference or previous_version.",
        (*_SERIES, "against"),
    ),
    "localgate_quality_prompt_similarity": (
        "Mean cosine similarity of a tenant's sampled (redacted) prompts to its reference "
        "prompts' centroid: window reference (the reference prompts themselves) and recent.",
        ("tenant", "window"),
    ),
    "localgate_quality_prompt_samples": (
        "Prompts sampled and embedded per tenant and window.",
        ("tenant", "window"),
    ),
}
# Model names come from clients: past this many, they are counted as "other".
_MAX_MODEL_LABELS = 100


class QualityMetrics(Collector):
    """Counters of scored and low-confidence answers and of retries on a stronger model,
    counted on the event loop's thread; and the gauges of every registered source,
    computed when scraped."""

    def __init__(self) -> None:
        self._sources: list[Callable[[], Iterable[Reading]]] = []
        self._scored: dict[str, int] = {}
        self._low: dict[str, int] = {}
        self._retries: dict[tuple[str, str], int] = {}
        self._models: set[str] = set()

    def add_source(self, source: Callable[[], Iterable[Reading]]) -> None:
        """Read ``source`` for gauge samples at every scrape."""
        self._sources.append(source)

    def scored(self, model: str, *, low: bool) -> None:
        """Count one answer checked against a confidence threshold (and whether it fell below)."""
        label = self._model_label(model)
        self._scored[label] = self._scored.get(label, 0) + 1
        if low:
            self._low[label] = self._low.get(label, 0) + 1

    def retried(self, model: str, result: str) -> None:
        """Count one low-confidence answer of ``model`` asked again on a stronger model;
        ``result``: confident, low (still below) or failed (the first answer was sent)."""
        key = (self._model_label(model), result)
        self._retries[key] = self._retries.get(key, 0) + 1

    def collect(self) -> Iterator[Metric]:
        """The counter and gauge families, as Prometheus reads them."""
        scored = CounterMetricFamily(
            "localgate_quality_answers_scored",
            "Answers checked against a low-confidence threshold (they carried avgLogprobs or "
            "logprobs and a threshold applies), by model.",
            labels=("model",),
        )
        low = CounterMetricFamily(
            "localgate_quality_low_confidence_answers",
            "Answers whose average log-probability per token was below the threshold, by model.",
            labels=("model",),
        )
        retries = CounterMetricFamily(
            "localgate_quality_low_confidence_retries",
            "Low-confidence unary answers asked again on the route's stronger model, by the "
            "first model and result: confident, low (the stronger one was below too) or "
            "failed (its call failed; the first answer was sent).",
            labels=("model", "result"),
        )
        for model, count in list(self._scored.items()):
            scored.add_metric((model,), count)
        for model, count in list(self._low.items()):
            low.add_metric((model,), count)
        for (model, result), count in list(self._retries.items()):
            retries.add_metric((model, result), count)
        yield scored
        yield low
        yield retries
        families = {
            name: GaugeMetricFamily(name, documentation, labels=labels)
            for name, (documentation, labels) in GAUGES.items()
        }
        for source in self._sources:
            for name, labels, value in source():
                families[name].add_metric(labels, value)
        yield from families.values()

    def _model_label(self, model: str) -> str:
        if model in self._models:
            return model
        if len(self._models) < _MAX_MODEL_LABELS:
            self._models.add(model)
            return model
        return "other"
