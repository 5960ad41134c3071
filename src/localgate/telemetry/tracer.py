"""The OpenTelemetry side: provider, exporter, and the spans of one request.

The only module importing OpenTelemetry, loaded only when tracing is on. Attribute names
follow the OpenTelemetry GenAI semantic conventions as shipped in
opentelemetry-semantic-conventions 0.66b2 (tests/telemetry checks them against it).

What never goes into a span: prompt or answer text (unless ``record_redacted_text``, and
then only the redacted request), keys, the request path (an unknown one is client text),
exception messages. Client trace context is accepted in W3C shape only; the upstream gets
a ``traceparent`` naming the attempt's span, never the client's ``tracestate`` (free text
a client chooses could otherwise carry data around the redactor).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import replace
from types import TracebackType
from typing import Any

import orjson
from opentelemetry import trace as otel
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import sampling as samplers
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    TraceState,
)

from localgate.errors import LocalgateError
from localgate.exchange.context import RequestContext
from localgate.exchange.replies import UpstreamCall
from localgate.gemini.routes import GeminiMethod
from localgate.telemetry.tracing import TraceConfig

__all__ = ["OtelTracing", "RequestTrace"]

# W3C Trace Context, version 00 (and later versions read as 00, as the spec asks).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_TRACESTATE_MAX = 512
_FINISH_REASON = re.compile(r"[A-Z_]{1,40}")
_INVALID_TRACE = "0" * 32
_INVALID_SPAN = "0" * 16

_OPERATIONS = {
    GeminiMethod.GENERATE_CONTENT: "generate_content",
    GeminiMethod.STREAM_GENERATE_CONTENT: "generate_content",
    GeminiMethod.EMBED_CONTENT: "embeddings",
    GeminiMethod.BATCH_EMBED_CONTENTS: "embeddings",
    GeminiMethod.COUNT_TOKENS: "count_tokens",
    GeminiMethod.LIST_MODELS: "list_models",
    GeminiMethod.GET_MODEL: "get_model",
}
PROVIDER = "gcp.gemini"


class OtelTracing:
    """A tracer provider exporting in batches, and the start of every request's trace."""

    def __init__(self, config: TraceConfig, exporter: SpanExporter | None = None) -> None:
        self.config = config
        self._provider = TracerProvider(
            sampler=_sampler(config.sampler, config.sampler_arg),
            resource=Resource.create({"service.name": config.service_name}),
        )
        # BatchSpanProcessor reads OTEL_BSP_* itself.
        processor: SpanProcessor = BatchSpanProcessor(exporter or _exporter(config))
        self._provider.add_span_processor(processor)
        self.tracer = self._provider.get_tracer("localgate")

    def begin(self, ctx: RequestContext, headers: Mapping[str, str]) -> None:
        """Start ``ctx``'s server span, continuing the client's W3C trace if it sent one."""
        parent = _client_context(headers.get("traceparent"), headers.get("tracestate"))
        span = self.tracer.start_span("request", parent, SpanKind.SERVER)
        ctx.trace = RequestTrace(self, span)
        ctx.trace_id = format(span.get_span_context().trace_id, "032x")

    def shutdown(self) -> None:
        """Export what is pending and stop."""
        self._provider.shutdown()


class RequestTrace:
    """One request's server span and what its child spans need."""

    __slots__ = ("_first_chunk", "_provider", "finish_reasons", "parent", "span", "tracing")

    def __init__(self, tracing: OtelTracing, span: Span) -> None:
        self.tracing = tracing
        self.span = span
        self.parent = otel.set_span_in_context(span)
        self.finish_reasons: list[str] = []
        self._first_chunk: float | None = None
        self._provider: str | None = None

    def stage(self, ctx: RequestContext, name: str) -> _StageSpan:
        """A child span around stage ``name``."""
        return _StageSpan(self, ctx, name)

    def attempt(self, ctx: RequestContext, name: str, local: bool, number: int) -> _AttemptSpan:
        """A client span around one upstream attempt."""
        attributes: dict[str, Any] = {
            "localgate.upstream.name": name,
            "localgate.upstream.attempt": number,
        }
        route = ctx.route
        operation = _OPERATIONS.get(route.method, "") if route else ""
        if route is not None:
            attributes["gen_ai.operation.name"] = operation
            if route.model:
                attributes["gen_ai.request.model"] = _model(route.model)
        if not local:
            attributes["gen_ai.provider.name"] = self._provider = PROVIDER
        model = _model(route.model) if route and route.model else None
        span = self.tracing.tracer.start_span(
            f"{operation} {model}" if model else operation or "upstream",
            self.parent,
            SpanKind.CLIENT,
            attributes,
        )
        return _AttemptSpan(span)

    def answer(self, event: Any) -> None:
        """Time to the first answer or chunk; the finish reasons it gives."""
        if self._first_chunk is None:
            self._first_chunk = time.perf_counter()
        if not isinstance(event, dict):
            return
        candidates = event.get("candidates")
        if not isinstance(candidates, list):
            return
        for candidate in candidates:
            reason = candidate.get("finishReason") if isinstance(candidate, dict) else None
            if (
                isinstance(reason, str)
                and reason not in self.finish_reasons
                and _FINISH_REASON.fullmatch(reason)
            ):
                self.finish_reasons.append(reason)

    def end(self, ctx: RequestContext, status: int, error_status: str | None) -> None:
        """Name the span after the request's operation, annotate it and end it."""
        span = self.span
        route = ctx.route
        attributes: dict[str, Any] = {
            "http.response.status_code": status,
            "localgate.request_id": ctx.request_id,
        }
        if route is not None:
            operation = _OPERATIONS[route.method]
            model = _model(route.model) if route.model else None
            span.update_name(f"{operation} {model}" if model else operation)
            attributes["gen_ai.operation.name"] = operation
            attributes["http.request.method"] = route.method.http_method
            if model:
                attributes["gen_ai.request.model"] = model
            attributes["gen_ai.request.stream"] = route.method.streams
            if route.method.streams and self._first_chunk is not None:
                attributes["gen_ai.response.time_to_first_chunk"] = round(
                    self._first_chunk - ctx.started, 6
                )
        if ctx.outcome is not None:
            attributes["localgate.outcome"] = ctx.outcome.value
        if ctx.principal is not None:
            attributes["localgate.tenant"] = ctx.principal.tenant
        if self._provider is not None:
            attributes["gen_ai.provider.name"] = self._provider
        if ctx.upstream:
            attributes["localgate.upstream.name"] = ctx.upstream
            attributes["localgate.upstream.attempts"] = ctx.attempt
        if ctx.model_version:
            attributes["gen_ai.response.model"] = ctx.model_version
        if self.finish_reasons:
            attributes["gen_ai.response.finish_reasons"] = tuple(self.finish_reasons)
        usage = ctx.usage
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = usage.prompt
            attributes["gen_ai.usage.output_tokens"] = usage.candidates
        _cache_attributes(ctx.cache_status, attributes)
        if error_status:
            attributes["error.type"] = error_status
        span.set_attributes(attributes)
        if status >= 500:
            span.set_status(StatusCode.ERROR, error_status)
        span.end()


class _StageSpan:
    __slots__ = ("_ctx", "_name", "_span", "_trace")

    def __init__(self, trace: RequestTrace, ctx: RequestContext, name: str) -> None:
        self._trace = trace
        self._ctx = ctx
        self._name = name

    def __enter__(self) -> _StageSpan:
        self._span = self._trace.tracing.tracer.start_span(
            f"localgate.{self._name}", self._trace.parent
        )
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        span = self._span
        if exc is not None:
            _failed(span, exc)
        elif self._name == "redaction":
            self._redaction(span)
        elif self._name == "cache":
            attributes: dict[str, Any] = {}
            _cache_attributes(self._ctx.cache_status, attributes)
            span.set_attributes(attributes)
        span.end()

    def _redaction(self, span: Span) -> None:
        counts: dict[str, int] = {}
        for (entity_type, _action), count in self._ctx.redaction_summary.items():
            counts[entity_type] = counts.get(entity_type, 0) + count
        for entity_type, count in counts.items():
            span.set_attribute(f"localgate.redaction.{entity_type}", count)
        if self._trace.tracing.config.record_redacted_text:
            body = self._ctx.body
            contents = body.get("contents") if isinstance(body, dict) else None
            if contents is not None:
                # The request as the redactor left it: what the upstream will be sent.
                span.set_attribute("gen_ai.input.messages", orjson.dumps(contents).decode())


class _AttemptSpan:
    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def __enter__(self) -> _AttemptSpan:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None:
            _failed(self._span, exc)
        self._span.end()

    def carry(self, call: UpstreamCall) -> UpstreamCall:
        """``call`` with this attempt's ``traceparent``."""
        context = self._span.get_span_context()
        traceparent = (
            f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
        )
        return replace(call, headers=(*call.headers, ("traceparent", traceparent)))


def _model(name: str) -> str:
    """``models/gemini-2.5-flash`` as ``gemini-2.5-flash``."""
    return name.removeprefix("models/")


def _failed(span: Span, exc: BaseException) -> None:
    """Mark ``span`` failed: the error's kind and status, never its message."""
    if isinstance(exc, LocalgateError):
        span.set_attribute("error.type", exc.status_name)
        span.set_attribute("http.response.status_code", exc.code)
        if exc.code >= 500:
            span.set_status(StatusCode.ERROR, exc.status_name)
    else:
        span.set_attribute("error.type", type(exc).__qualname__)
        span.set_status(StatusCode.ERROR, type(exc).__qualname__)


def _cache_attributes(cache_status: str | None, attributes: dict[str, Any]) -> None:
    """``hit; layer=exact`` as localgate.cache.status and localgate.cache.layer."""
    if not cache_status:
        return
    status, _, rest = cache_status.partition(";")
    attributes["localgate.cache.status"] = status.strip()
    name, _, layer = rest.strip().partition("=")
    if name == "layer" and layer:
        attributes["localgate.cache.layer"] = layer


def _client_context(traceparent: str | None, tracestate: str | None) -> Context | None:
    """The client's W3C trace context as a parent, if it has the right shape; else None."""
    if traceparent is None or len(traceparent) > 256:
        return None
    match = _TRACEPARENT.fullmatch(traceparent.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == _INVALID_TRACE:
        return None
    if span_id == _INVALID_SPAN:
        return None
    state = TraceState()
    if tracestate and len(tracestate) <= _TRACESTATE_MAX:
        state = TraceState.from_header([tracestate])
    remote = SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(flags, 16) & TraceFlags.SAMPLED),
        trace_state=state,
    )
    return otel.set_span_in_context(NonRecordingSpan(remote))


def _sampler(name: str, arg: float) -> samplers.Sampler:
    ratio = samplers.TraceIdRatioBased(arg)
    return {
        "always_on": samplers.ALWAYS_ON,
        "always_off": samplers.ALWAYS_OFF,
        "traceidratio": ratio,
        "parentbased_always_on": samplers.ParentBased(samplers.ALWAYS_ON),
        "parentbased_always_off": samplers.ParentBased(samplers.ALWAYS_OFF),
        "parentbased_traceidratio": samplers.ParentBased(ratio),
    }[name]


def _exporter(config: TraceConfig) -> SpanExporter:
    """The configured exporter; each reads its OTEL_EXPORTER_OTLP_* variables itself."""
    if config.exporter == "console":
        return ConsoleSpanExporter()
    if config.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()
