"""The OpenTelemetry side: sampler, batch processor, exporter, and one request's spans.

Loaded only when tracing is on (with ``batch`` and ``export``, the only modules
importing OpenTelemetry). Attribute names
follow the OpenTelemetry GenAI semantic conventions as shipped in
opentelemetry-semantic-conventions 0.66b2 (tests/telemetry checks them against it).

What never goes into a span: prompt or answer text (unless ``record_redacted_text``, and
then only the redacted request), keys, the request path (an unknown one is client text),
exception messages. Client trace context is accepted in W3C shape only; the upstream gets
a ``traceparent`` naming the attempt's span, never the client's ``tracestate`` (free text
a client chooses could otherwise carry data around the redactor).
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Mapping
from dataclasses import replace
from types import TracebackType
from typing import Any

import orjson
from opentelemetry import trace as otel
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import sampling as samplers
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    NonRecordingSpan,
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
from localgate.telemetry.batch import SpanBatcher
from localgate.telemetry.records import SpanRecord
from localgate.telemetry.tracing import TraceConfig

__all__ = ["OtelTracing", "RequestTrace"]

# W3C Trace Context, version 00 (and later versions read as 00, as the spec asks).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_TRACESTATE_MAX = 512
_FINISH_REASON = re.compile(r"[A-Z_]{1,40}")
_INVALID_TRACE = "0" * 32
_INVALID_SPAN = "0" * 16
# SpanRecord's kind and status: the SDK's SpanKind and StatusCode values.
_INTERNAL = SpanKind.INTERNAL.value
_SERVER = SpanKind.SERVER.value
_CLIENT = SpanKind.CLIENT.value
_UNSET_CODE = StatusCode.UNSET.value
_ERROR = StatusCode.ERROR.value

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
    """A batch span processor and its exporter, and the start of every request's trace.

    Spans are not made with the SDK's tracer: a request notes its stages' and attempts'
    times and attributes as it goes, and when it ends, its spans are built at once as
    finished ``SpanRecord`` tuples and handed to the batch processor. One sampling
    decision per request, no locks, no context objects: a fraction of the tracer's cost.
    """

    def __init__(self, config: TraceConfig, exporter: SpanExporter | None = None) -> None:
        self.config = config
        self.sampler = _sampler(config.sampler, config.sampler_arg)
        self.resource = Resource.create({"service.name": config.service_name})
        self.scope = InstrumentationScope("localgate")
        self.batcher = SpanBatcher(
            exporter or _exporter(config, self.resource, self.scope),
            os.environ,
            self.resource,
            self.scope,
        )

    def begin(self, ctx: RequestContext, headers: Mapping[str, str]) -> None:
        """Start ``ctx``'s trace, continuing the client's W3C trace if it sent one."""
        remote = _client_context(headers.get("traceparent"), headers.get("tracestate"))
        trace_id = remote.trace_id if remote is not None else _random_trace_id()
        parent = otel.set_span_in_context(NonRecordingSpan(remote)) if remote else None
        decision = self.sampler.should_sample(parent, trace_id, "request", SpanKind.SERVER)
        sampled = decision.decision is samplers.Decision.RECORD_AND_SAMPLE
        ctx.trace = RequestTrace(self, trace_id, remote, sampled)
        ctx.trace_id = format(trace_id, "032x")

    def shutdown(self) -> None:
        """Export what is pending and stop."""
        self.batcher.shutdown()


# A finished child span: name, kind, span id, start and end (ns), attributes, failed.
_Child = tuple[str, int, int, int, int, dict[str, Any], bool]


class RequestTrace:
    """One request's trace: its server span's identity, and its children as they end."""

    __slots__ = (
        "_first_chunk",
        "_provider",
        "children",
        "finish_reasons",
        "remote",
        "sampled",
        "span_id",
        "start_ns",
        "trace_id",
        "tracing",
    )

    def __init__(
        self, tracing: OtelTracing, trace_id: int, remote: SpanContext | None, sampled: bool
    ) -> None:
        self.tracing = tracing
        self.trace_id = trace_id
        self.remote = remote
        self.sampled = sampled
        self.span_id = _random_span_id()
        self.start_ns = time.time_ns()
        self.children: list[_Child] = []
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
        model = _model(route.model) if route and route.model else None
        if operation:
            attributes["gen_ai.operation.name"] = operation
        if model:
            attributes["gen_ai.request.model"] = model
        if not local:
            attributes["gen_ai.provider.name"] = self._provider = PROVIDER
        span_name = f"{operation} {model}" if model else operation or "upstream"
        return _AttemptSpan(self, span_name, attributes)

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
        """Build the server span and its children, finished, for the exporter."""
        if not self.sampled:
            return
        end_ns = time.time_ns()
        route = ctx.route
        name = "request"
        attributes: dict[str, Any] = {
            "http.response.status_code": status,
            "localgate.request_id": ctx.request_id,
        }
        if route is not None:
            operation = _OPERATIONS[route.method]
            model = _model(route.model) if route.model else None
            name = f"{operation} {model}" if model else operation
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
        state = self.remote.trace_state if self.remote is not None else None
        header = state.to_header() if state else ""
        trace_id, span_id = self.trace_id, self.span_id
        spans = [
            SpanRecord(
                child_name,
                kind,
                trace_id,
                child_id,
                span_id,
                False,
                header,
                start,
                end,
                child_attributes,
                _ERROR if failed else _UNSET_CODE,
            )
            for child_name, kind, child_id, start, end, child_attributes, failed in self.children
        ]
        remote = self.remote
        failed = status >= 500
        spans.append(
            SpanRecord(
                name,
                _SERVER,
                trace_id,
                span_id,
                remote.span_id if remote is not None else 0,
                remote is not None,
                header,
                self.start_ns,
                end_ns,
                attributes,
                _ERROR if failed else _UNSET_CODE,
                error_status if failed else None,
            )
        )
        self.tracing.batcher.add(spans)


class _StageSpan:
    __slots__ = ("_ctx", "_name", "_start", "_trace")

    def __init__(self, trace: RequestTrace, ctx: RequestContext, name: str) -> None:
        self._trace = trace
        self._ctx = ctx
        self._name = name

    def __enter__(self) -> _StageSpan:
        self._start = time.time_ns()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        trace = self._trace
        if not trace.sampled:
            return
        attributes: dict[str, Any] = {}
        failed = False
        if exc is not None:
            failed = _failed(attributes, exc)
        elif self._name == "redaction":
            self._redaction(attributes)
        elif self._name == "cache":
            _cache_attributes(self._ctx.cache_status, attributes)
        trace.children.append(
            (
                f"localgate.{self._name}",
                _INTERNAL,
                _random_span_id(),
                self._start,
                time.time_ns(),
                attributes,
                failed,
            )
        )

    def _redaction(self, attributes: dict[str, Any]) -> None:
        for (entity_type, _action), count in self._ctx.redaction_summary.items():
            key = f"localgate.redaction.{entity_type}"
            attributes[key] = attributes.get(key, 0) + count
        if self._trace.tracing.config.record_redacted_text:
            body = self._ctx.body
            contents = body.get("contents") if isinstance(body, dict) else None
            if contents is not None:
                # The request as the redactor left it: what the upstream will be sent.
                attributes["gen_ai.input.messages"] = orjson.dumps(contents).decode()


class _AttemptSpan:
    __slots__ = ("_attributes", "_name", "_span_id", "_start", "_trace")

    def __init__(self, trace: RequestTrace, name: str, attributes: dict[str, Any]) -> None:
        self._trace = trace
        self._name = name
        self._attributes = attributes
        self._span_id = _random_span_id()

    def __enter__(self) -> _AttemptSpan:
        self._start = time.time_ns()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        trace = self._trace
        if not trace.sampled:
            return
        failed = _failed(self._attributes, exc) if exc is not None else False
        trace.children.append(
            (
                self._name,
                _CLIENT,
                self._span_id,
                self._start,
                time.time_ns(),
                self._attributes,
                failed,
            )
        )

    def carry(self, call: UpstreamCall) -> UpstreamCall:
        """``call`` with this attempt's ``traceparent``."""
        trace = self._trace
        flags = "01" if trace.sampled else "00"
        traceparent = f"00-{trace.trace_id:032x}-{self._span_id:016x}-{flags}"
        return replace(call, headers=(*call.headers, ("traceparent", traceparent)))


def _model(name: str) -> str:
    """``models/gemini-2.5-flash`` as ``gemini-2.5-flash``."""
    return name.removeprefix("models/")


def _failed(attributes: dict[str, Any], exc: BaseException) -> bool:
    """Note why a span failed (the error's kind and status, never its message); whether
    it counts as an error (a 5xx or a defect, not a refusal)."""
    if isinstance(exc, LocalgateError):
        attributes["error.type"] = exc.status_name
        attributes["http.response.status_code"] = exc.code
        return exc.code >= 500
    attributes["error.type"] = type(exc).__qualname__
    return True


def _cache_attributes(cache_status: str | None, attributes: dict[str, Any]) -> None:
    """``hit; layer=exact`` as localgate.cache.status and localgate.cache.layer."""
    if not cache_status:
        return
    status, _, rest = cache_status.partition(";")
    attributes["localgate.cache.status"] = status.strip()
    name, _, layer = rest.strip().partition("=")
    if name == "layer" and layer:
        attributes["localgate.cache.layer"] = layer


def _client_context(traceparent: str | None, tracestate: str | None) -> SpanContext | None:
    """The client's W3C trace context, if it has the right shape; else None."""
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
    return SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(flags, 16) & TraceFlags.SAMPLED),
        trace_state=state,
    )


def _random_trace_id() -> int:
    return random.getrandbits(128) or 1


def _random_span_id() -> int:
    return random.getrandbits(64) or 1


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


def _exporter(config: TraceConfig, resource: Resource, scope: InstrumentationScope) -> SpanExporter:
    """The configured exporter; each reads its OTEL_EXPORTER_OTLP_* variables itself."""
    if config.exporter == "console":
        return ConsoleSpanExporter()
    # Loaded only for OTLP: its exporters pull in protobuf, and gRPC for that protocol.
    from localgate.telemetry.export import LeanGrpcExporter, LeanHttpExporter

    if config.protocol == "grpc":
        return LeanGrpcExporter(resource, scope)
    return LeanHttpExporter(resource, scope)
