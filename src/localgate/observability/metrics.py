"""Prometheus metrics of the gateway, in a registry of its own (nothing global)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from localgate.observability.quality import QualityMetrics

__all__ = [
    "CONTENT_TYPE_LATEST",
    "CertificateSource",
    "GatewayMetrics",
    "PlainCounter",
    "ServerCertificateMetrics",
]

# Gemini calls range from milliseconds (countTokens) to minutes (long streams).
# 0.8 s is the latency objective the shipped alert rules hold (deploy/prometheus/alerts.yml).
_LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.8, 1, 2.5, 5, 10, 30, 60, 120, 300,
)  # fmt: skip
# Model names come from clients; past this many distinct ones they are counted as "other",
# so a client cannot grow the metrics without bound.
_MAX_MODEL_LABELS = 100
_MAX_CACHED_SERIES = 10_000


class GatewayMetrics:
    """Request count, latency and in-flight requests by route, model and status."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # Quality signals (docs/quality.md): fed by localgate.quality.
        self.quality = QualityMetrics()
        self.registry.register(self.quality)
        self._requests = _RequestSeries(_LATENCY_BUCKETS)
        self.registry.register(self._requests)
        # Counted in a plain int, read when scraped: the gauge's lock would be taken
        # twice per request for a number nobody reads in between.
        self.in_flight = 0
        Gauge(
            "localgate_requests_in_flight",
            "Requests being processed now.",
            registry=self.registry,
        ).set_function(lambda: self.in_flight)
        self.redaction_findings = Counter(
            "localgate_redaction_findings",
            "Personal data found in requests, by type and the action taken.",
            ("type", "action"),
            registry=self.registry,
        )
        self.redaction_seconds = Histogram(
            "localgate_redaction_duration_seconds",
            "Time the redaction stage spent on one request.",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=self.registry,
        )
        self.redaction_skipped = Counter(
            "localgate_redaction_skipped",
            "Requests not redacted because every upstream they could reach is in-house with "
            "redaction: false, by the first of those upstreams.",
            ("upstream",),
            registry=self.registry,
        )
        self.restore_dangling = Counter(
            "localgate_restore_dangling_fragments",
            "Unfinished placeholder fragments emitted as they were at the end of a stream.",
            registry=self.registry,
        )
        self.cache_lookups = Counter(
            "localgate_cache_lookups",
            "Cache lookups by layer (exact, semantic) and result (hit, miss); the hit ratio "
            "is hit / (hit + miss).",
            ("layer", "result"),
            registry=self.registry,
        )
        self.cache_lookup_seconds = Histogram(
            "localgate_cache_lookup_duration_seconds",
            "Time one cache lookup took, both layers together.",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1),
            registry=self.registry,
        )
        self.cache_stores = Counter(
            "localgate_cache_stores",
            "Answers stored in the cache.",
            registry=self.registry,
        )
        self.limits_refusals = Counter(
            "localgate_limits_refusals",
            "Requests refused with 429 by the limits, by the limit that refused them.",
            ("limit",),
            registry=self.registry,
        )
        self.limits_backend_errors = Counter(
            "localgate_limits_backend_errors",
            "Limits store operations that failed (admissions, settlements).",
            registry=self.registry,
        )
        self.limits_degraded = Counter(
            "localgate_limits_degraded_admissions",
            "Requests admitted on this process's own counts because the limits store was "
            "unreachable (limits.on_backend_error: open).",
            registry=self.registry,
        )
        self.limits_queue_length = Gauge(
            "localgate_limits_queue_length",
            "Requests waiting in the admission queue for a concurrency slot.",
            registry=self.registry,
        )
        self.limits_queue_wait_seconds = Histogram(
            "localgate_limits_queue_wait_seconds",
            "Time requests waited in the admission queue (admitted or not).",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.cache_errors = Counter(
            "localgate_cache_errors",
            "Cache operations that failed, by operation: lookup (the request went on as a "
            "miss), store (answers not stored, including those dropped because too many "
            "waited), keys (a key set not loaded or refreshed; lookups ask the store).",
            ("operation",),
            registry=self.registry,
        )
        self.rag_passages = Counter(
            "localgate_rag_passages",
            "Retrieved passages added to requests as context.",
            registry=self.registry,
        )
        self.audit_completions_spooled = Counter(
            "localgate_audit_completions_spooled",
            "Completion records the audit store refused, written to the encrypted spool "
            "file instead (retried into the store).",
            registry=self.registry,
        )
        self.audit_completions_unrecorded = Counter(
            "localgate_audit_completions_unrecorded",
            "Completion records that neither the audit store nor its spool could take "
            "(disk full, database unwritable). Each is held in memory and retried; until "
            "it is written, /readyz is not ready and new requests are refused.",
            registry=self.registry,
        )
        self.audit_completions_held = Gauge(
            "localgate_audit_completions_held",
            "Completion records held in memory now, written neither to the audit store "
            "nor its spool (non-zero: the gateway refuses requests).",
            registry=self.registry,
        )
        self.audit_checkpoint_success = Gauge(
            "localgate_audit_checkpoint_last_success_timestamp_seconds",
            "When the gateway last brought every tenant's signed checkpoint up to date (Unix "
            "time; the gateway's start until the first round). 0 when the gateway does not "
            "sign (no signing key here, or audit.sign_checkpoints: false).",
            registry=self.registry,
        )
        self.config_reloads = Counter(
            "localgate_config_reloads",
            "Configuration reloads (SIGHUP, localgate reload) by result: applied, or "
            "rejected (the gateway kept its last good configuration).",
            ("result",),
            registry=self.registry,
        )
        self.config_last_reload_successful = Gauge(
            "localgate_config_last_reload_successful",
            "1 if the last configuration reload was applied (or none was tried), 0 if it was "
            "rejected.",
            registry=self.registry,
        )
        self.config_last_reload_successful.set(1)
        self.config_info = Gauge(
            "localgate_config_info",
            "Always 1; its labels say which configuration the gateway runs: the hash of the "
            "effective settings and the version (1 at start, one more per applied reload).",
            ("hash", "version"),
            registry=self.registry,
        )
        # Upstreams and routing: label values are the configured upstreams' names.
        # Counted once per request: a plain counter read when scraped (no lock).
        self.upstream_attempts = PlainCounter(
            "localgate_upstream_attempts",
            "Calls made to each upstream, by upstream and HTTP status (200: answered; a "
            "request retried or sent to a fallback makes several).",
            ("upstream", "status"),
        )
        self.registry.register(self.upstream_attempts)
        self.upstream_retries = Counter(
            "localgate_upstream_retries",
            "Further attempts after an upstream failed, by the upstream that failed and "
            "kind: retry (the same upstream again) or fallback (the next upstream).",
            ("upstream", "kind"),
            registry=self.registry,
        )
        self.upstream_circuit_state = Gauge(
            "localgate_upstream_circuit_state",
            "Each upstream's circuit breaker in this process: 0 closed, 1 half-open (one "
            "probe goes through), 2 open (the upstream is skipped).",
            ("upstream",),
            registry=self.registry,
        )
        # The server certificate (HTTPS): its reloads and expiry, once the app sets a source.
        self.server_certificate = ServerCertificateMetrics()
        self.registry.register(self.server_certificate)
        self._models: set[str] = set()
        # Label spelling costs more than the count; remember it for busy series.
        self._labels: dict[tuple[str, str | None, int], tuple[str, str, str]] = {}

    def observe(self, route: str, model: str | None, status: int, seconds: float) -> None:
        """Count one finished request."""
        key = (route, model, status)
        labels = self._labels.get(key)
        if labels is None:
            labels = (route, self._model_label(model), str(status))
            if len(self._labels) < _MAX_CACHED_SERIES:
                self._labels[key] = labels
        self._requests.observe(labels, seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)

    def _model_label(self, model: str | None) -> str:
        if not model:
            return ""
        if model in self._models:
            return model
        if len(self._models) < _MAX_MODEL_LABELS:
            self._models.add(model)
            return model
        return "other"


class CertificateSource(Protocol):
    """What the server's TLS (frontdoor/tls.py) tells about the certificate it serves."""

    reloads: int
    reload_failures: int

    @property
    def not_after_timestamp(self) -> float:
        """When the certificate served now expires (Unix time)."""
        ...


class ServerCertificateMetrics(Collector):
    """Read when scraped: certificate reloads by result, and the served one's expiry."""

    def __init__(self) -> None:
        self.source: CertificateSource | None = None

    def collect(self) -> Iterator[Metric]:
        """Both families; samples only when the gateway serves HTTPS."""
        source = self.source
        reloads = CounterMetricFamily(
            "localgate_tls_certificate_reloads",
            "Server certificate reloads after its files changed, by result (a failed one "
            "keeps the previous certificate).",
            labels=("result",),
        )
        expiry = GaugeMetricFamily(
            "localgate_tls_certificate_expiry_timestamp_seconds",
            "When the server certificate being served expires (Unix time).",
        )
        if source is not None:
            reloads.add_metric(("ok",), source.reloads)
            reloads.add_metric(("failed",), source.reload_failures)
            expiry.add_metric((), source.not_after_timestamp)
        yield reloads
        yield expiry


class PlainCounter(Collector):
    """A counter by label values, counted in plain numbers on the event loop's thread and
    read when scraped: no lock per update, unlike prometheus_client's ``Counter``."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self._name = name
        self._documentation = documentation
        self._labels = labels
        self._counts: dict[tuple[str, ...], int] = {}

    def inc(self, labels: tuple[str, ...]) -> None:
        """Count one, for these label values (in the order of ``labels``)."""
        self._counts[labels] = self._counts.get(labels, 0) + 1

    def collect(self) -> Iterator[Metric]:
        """The counter family, as Prometheus reads it."""
        family = CounterMetricFamily(self._name, self._documentation, labels=self._labels)
        for labels, count in list(self._counts.items()):
            family.add_metric(labels, count)
        yield family


class _RequestSeries(Collector):
    """``localgate_requests_total`` and ``localgate_request_duration_seconds``.

    Counted in plain numbers and turned into metric families when scraped. Both are
    updated once per request, and prometheus_client's own counter and histogram take a
    lock per update (four per request): counting is done on the event loop's thread,
    and so is the scrape, so no lock is needed.
    """

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self._bounds = buckets
        # Per label set: requests per bucket (the last one past the largest bound), then
        # the sum of their durations.
        self._series: dict[tuple[str, str, str], list[float]] = {}

    def observe(self, labels: tuple[str, str, str], seconds: float) -> None:
        """Count one request of ``seconds``."""
        counts = self._series.get(labels)
        if counts is None:
            counts = self._series[labels] = [0] * (len(self._bounds) + 2)
        counts[bisect_left(self._bounds, seconds)] += 1  # a bucket counts values <= its bound
        counts[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        """The two metric families, as Prometheus reads them."""
        names = ("route", "model", "status")
        requests = CounterMetricFamily(
            "localgate_requests",
            "Requests answered, by route, model and HTTP status.",
            labels=names,
        )
        latency = HistogramMetricFamily(
            "localgate_request_duration_seconds",
            "Time from request to the end of the answer (whole stream for streams).",
            labels=names,
        )
        for labels, counts in list(self._series.items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip((*self._bounds, float("inf")), counts[:-1], strict=True):
                cumulative += count
                buckets.append((_bound(bound), cumulative))
            requests.add_metric(labels, cumulative)
            latency.add_metric(labels, buckets, sum_value=counts[-1])
        yield requests
        yield latency


def _bound(value: float) -> str:
    """A bucket's ``le`` label as prometheus_client writes it."""
    return "+Inf" if value == float("inf") else repr(float(value))
