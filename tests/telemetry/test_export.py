"""The lean OTLP encoder writes what the official one writes."""

from __future__ import annotations

from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from localgate.telemetry.export import encode

RESOURCE = Resource.create({"service.name": "localgate", "deployment.environment": "test"})
SCOPE = InstrumentationScope("localgate")
SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _spans() -> list[ReadableSpan]:
    remote = SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, True, SAMPLED)
    state = TraceState([("vendor", "opaque")])
    server = SpanContext(remote.trace_id, 0x1122334455667788, False, SAMPLED, state)
    child = SpanContext(remote.trace_id, 0xFFEEDDCCBBAA9988, False, SAMPLED, state)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "generate_content",
        "gen_ai.request.stream": False,
        "gen_ai.usage.input_tokens": 12,
        "localgate.big": 2**40,
        "localgate.negative": -3,
        "gen_ai.response.time_to_first_chunk": 0.125,
        "gen_ai.response.finish_reasons": ("STOP", "MAX_TOKENS"),
        "localgate.text": "中文 ✓",
    }
    return [
        ReadableSpan(
            "localgate.identity",
            child,
            server,
            RESOURCE,
            {},
            kind=SpanKind.INTERNAL,
            start_time=1_700_000_000_000_000_000,
            end_time=1_700_000_000_000_500_000,
            instrumentation_scope=SCOPE,
        ),
        ReadableSpan(
            "generate_content gemini-2.5-flash",
            server,
            remote,
            RESOURCE,
            attributes,
            kind=SpanKind.SERVER,
            status=Status(StatusCode.ERROR, "UNAVAILABLE"),
            start_time=1_700_000_000_000_000_000,
            end_time=1_700_000_000_900_000_000,
            instrumentation_scope=SCOPE,
        ),
        ReadableSpan(
            "generate_content gemini-2.5-flash",
            child,
            server,
            RESOURCE,
            {"localgate.upstream.attempt": 1},
            kind=SpanKind.CLIENT,
            status=Status(StatusCode.ERROR),
            start_time=1,
            end_time=2,
            instrumentation_scope=SCOPE,
        ),
    ]


def test_the_lean_encoding_is_the_official_one() -> None:
    spans = _spans()
    ours = ExportTraceServiceRequest.FromString(encode(spans, RESOURCE, SCOPE))

    assert ours == encode_spans(spans)
