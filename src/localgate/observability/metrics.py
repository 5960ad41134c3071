"""Prometheus metrics of the gateway, in a registry of its own (nothing global)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
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
from localgate.observability.series import PlainHistogram

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
# A stage takes from tens of microseconds (identity) to a minute (an upstream's answer).
_STAGE_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.8, 1,
    2.5, 5, 10, 30, 60,
)  # fmt: skip
_CHUNK_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
# The buckets the GenAI semantic conventions advise for these histograms
# (opentelemetry-semantic-conventions 0.66b2, docs/gen-ai/gen-ai-metrics.md).
_GENAI_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
_GENAI_FIRST_TOKEN_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
_GENAI_PER_TOKEN_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
)  # fmt: skip
_GENAI_TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
# gen_ai.operation.name of each Gemini route (as the traces name them).
_GENAI_OPERATIONS = {
    "generateContent": "generate_content",
    "streamGenerateContent": "generate_content",
    "embedContent": "embeddings",
    "batchEmbedContents": "embeddings",
    "countTokens": "count_tokens",
    "models.list": "list_models",
    "models.get": "get_model",
}
# gen_ai.provider.name when a request reached an outside upstream (as in the traces).
GENAI_PROVIDER = "gcp.gemini"


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
        self.redaction_texts = Counter(
            "localgate_redaction_texts",
            "Texts the redaction stage looked at, by how their findings were had: scanned, or "
            "remembered from an earlier request of the same tenant and user (a conversation's "
            "history).",
            ["source"],
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
        # Upstream timings, by the configured upstream's name.
        self.upstream_seconds = PlainHistogram(
            "localgate_upstream_duration_seconds",
            "Time one unary upstream attempt took, from sending to the whole answer (or "
            "its failure).",
            ("upstream",),
            _LATENCY_BUCKETS,
        )
        self.registry.register(self.upstream_seconds)
        self.upstream_first_chunk_seconds = PlainHistogram(
            "localgate_upstream_time_to_first_chunk_seconds",
            "Time one streaming upstream attempt took, from sending to its first event "
            "(or its failure): the upstream's time to first byte.",
            ("upstream",),
            _LATENCY_BUCKETS,
        )
        self.registry.register(self.upstream_first_chunk_seconds)
        self.upstream_chunk_seconds = PlainHistogram(
            "localgate_upstream_chunk_interval_seconds",
            "Time between one stream event from an upstream and the next.",
            ("upstream",),
            _CHUNK_BUCKETS,
        )
        self.registry.register(self.upstream_chunk_seconds)
        # The time each stage of the pipeline took per request (also when it refused it).
        self.stage_seconds = PlainHistogram(
            "localgate_stage_duration_seconds",
            "Time one pipeline stage took for one request: identity, limits, redaction, "
            "retrieval, cache, audit (the request record) and upstream (every attempt "
            "until the answer; for a stream, until its first event).",
            ("stage",),
            _STAGE_BUCKETS,
        )
        self.registry.register(self.stage_seconds)
        # One timer per stage, its series looked up once: ``with metrics.stages["cache"]():``.
        self.stages = {
            name: self.stage_seconds.timer((name,))
            for name in (
                "identity",
                "limits",
                "redaction",
                "retrieval",
                "cache",
                "audit",
                "upstream",
            )
        }
        self.tokens = PlainCounter(
            "localgate_tokens",
            "Tokens the upstream's answers counted (usageMetadata), by tenant (a configured "
            'tenant\'s name, else "other"), model and type: input (promptTokenCount), '
            "output (candidatesTokenCount), thoughts (thoughtsTokenCount), cached_input "
            "(cachedContentTokenCount, the part of the input read from the model's context "
            "cache). Answers from localgate's cache count nothing.",
            ("tenant", "model", "type"),
        )
        self.registry.register(self.tokens)
        self.limits_admitted = PlainCounter(
            "localgate_limits_admissions",
            "Requests the limits admitted, by whether a limit applied to them (limited) or "
            "none did (unlimited).",
            ("mode",),
        )
        self.registry.register(self.limits_admitted)
        # The audit store's writer thread observes these, once per batch (with a lock:
        # another thread than the event loop's).
        self.audit_batch_seconds = Histogram(
            "localgate_audit_batch_write_duration_seconds",
            "Time the audit writer took to write one batch of records durably (commit included).",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=self.registry,
        )
        self.audit_batch_records = Histogram(
            "localgate_audit_batch_records",
            "Records the audit writer wrote in one batch (one commit).",
            buckets=_BATCH_SIZE_BUCKETS,
            registry=self.registry,
        )
        self.audit_spool_records = Gauge(
            "localgate_audit_spool_records",
            "Completion records waiting in the encrypted spool file to be retried into the "
            "audit store (read from the file when scraped).",
            registry=self.registry,
        )
        # The GenAI semantic conventions' metrics, in their Prometheus form.
        genai = ("gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model")
        self.genai_request_seconds = PlainHistogram(
            "gen_ai_server_request_duration_seconds",
            "gen_ai.server.request.duration: time from a request's arrival to the end of its "
            "answer (a stream's last event).",
            (*genai, "error_type"),
            _GENAI_DURATION_BUCKETS,
        )
        self.registry.register(self.genai_request_seconds)
        self.genai_first_token_seconds = PlainHistogram(
            "gen_ai_server_time_to_first_token_seconds",
            "gen_ai.server.time_to_first_token: time from a streaming request's arrival to "
            "its first answer event, for successful streams.",
            genai,
            _GENAI_FIRST_TOKEN_BUCKETS,
        )
        self.registry.register(self.genai_first_token_seconds)
        self.genai_per_token_seconds = PlainHistogram(
            "gen_ai_server_time_per_output_token_seconds",
            "gen_ai.server.time_per_output_token: for a successful stream, the time after "
            "its first event divided by its output tokens after the first.",
            genai,
            _GENAI_PER_TOKEN_BUCKETS,
        )
        self.registry.register(self.genai_per_token_seconds)
        self.genai_token_usage = PlainHistogram(
            "gen_ai_client_token_usage",
            "gen_ai.client.token.usage: input and output tokens per upstream answer "
            "(gen_ai_token_type: input, output).",
            (*genai, "gen_ai_token_type"),
            _GENAI_TOKEN_BUCKETS,
        )
        self.registry.register(self.genai_token_usage)
        self._models: set[str] = set()
        self._answer_labels: dict[tuple[str, str | None, str, bool], _AnswerLabels] = {}
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

    def observe_answer(
        self,
        route: str,
        model: str | None,
        tenant: str,
        *,
        remote: bool,
        error: str | None,
        seconds: float,
        first_chunk: float | None,
        usage: tuple[int, int, int, int] | None,
    ) -> None:
        """Count an authenticated request's tokens and its GenAI metrics.

        ``tenant`` is a configured tenant's name or "other"; ``remote``, whether an outside
        upstream was called; ``error``, the Gemini status of a failure; ``first_chunk``,
        seconds to a stream's first event; ``usage``: input, output, thoughts and cached
        input tokens of the upstream's answer.
        """
        key = (route, model, tenant, remote)
        labels = self._answer_labels.get(key)
        if labels is None:
            labels = self._answer_label_set(route, model, tenant, remote)
            if len(self._answer_labels) < _MAX_CACHED_SERIES:
                self._answer_labels[key] = labels
        if not labels.genai:
            return
        genai = labels.genai
        if error is None:
            self.genai_request_seconds.observe(labels.succeeded, seconds)
            if first_chunk is not None:
                self.genai_first_token_seconds.observe(genai, first_chunk)
                if usage is not None and usage[1] > 1:
                    self.genai_per_token_seconds.observe(
                        genai, (seconds - first_chunk) / (usage[1] - 1)
                    )
        else:
            self.genai_request_seconds.observe((*genai, error), seconds)
        if usage is None:
            return
        prompt, output, thoughts, cached = usage
        self.genai_token_usage.observe(labels.input_usage, prompt)
        self.genai_token_usage.observe(labels.output_usage, output)
        tokens = self.tokens._counts  # the same module's: no call per type
        tokens[labels.input] = tokens.get(labels.input, 0) + prompt
        tokens[labels.output] = tokens.get(labels.output, 0) + output
        if thoughts:
            tokens[labels.thoughts] = tokens.get(labels.thoughts, 0) + thoughts
        if cached:
            tokens[labels.cached] = tokens.get(labels.cached, 0) + cached

    def _answer_label_set(
        self, route: str, model: str | None, tenant: str, remote: bool
    ) -> _AnswerLabels:
        operation = _GENAI_OPERATIONS.get(route)
        if operation is None:
            return _NO_ANSWER_LABELS
        model_label = self._model_label(model)
        genai = (operation, GENAI_PROVIDER if remote else "", model_label.removeprefix("models/"))
        return _AnswerLabels(
            genai=genai,
            succeeded=(*genai, ""),
            input_usage=(*genai, "input"),
            output_usage=(*genai, "output"),
            input=(tenant, model_label, "input"),
            output=(tenant, model_label, "output"),
            thoughts=(tenant, model_label, "thoughts"),
            cached=(tenant, model_label, "cached_input"),
        )

    def observe_audit_batch(self, records: int, seconds: float) -> None:
        """One batch the audit writer wrote (called on its thread)."""
        self.audit_batch_seconds.observe(seconds)
        self.audit_batch_records.observe(records)

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


@dataclass(frozen=True, slots=True)
class _AnswerLabels:
    """The label values ``observe_answer`` uses for one route, model, tenant and provider,
    spelled once."""

    genai: tuple[str, ...]
    succeeded: tuple[str, ...] = ()
    input_usage: tuple[str, ...] = ()
    output_usage: tuple[str, ...] = ()
    input: tuple[str, ...] = ()
    output: tuple[str, ...] = ()
    thoughts: tuple[str, ...] = ()
    cached: tuple[str, ...] = ()


_NO_ANSWER_LABELS = _AnswerLabels(genai=())


class PlainCounter(Collector):
    """A counter by label values, counted in plain numbers on the event loop's thread and
    read when scraped: no lock per update, unlike prometheus_client's ``Counter``."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self._name = name
        self._documentation = documentation
        self._labels = labels
        self._counts: dict[tuple[str, ...], int] = {}

    def inc(self, labels: tuple[str, ...], amount: int = 1) -> None:
        """Count ``amount``, for these label values (in the order of ``labels``)."""
        self._counts[labels] = self._counts.get(labels, 0) + amount

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
