"""The lean OTLP encoder writes what the official one writes."""

from __future__ import annotations

from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind, StatusCode

from localgate.telemetry.batch import SpanBatcher
from localgate.telemetry.export import encode
from localgate.telemetry.records import SpanRecord, to_readable

RESOURCE = Resource.create({"service.name": "localgate", "deployment.environment": "test"})
SCOPE = InstrumentationScope("localgate")


def _records() -> list[SpanRecord]:
    remote_trace, remote_span = 0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7
    server, child = 0x1122334455667788, 0xFFEEDDCCBBAA9988
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
    state = "vendor=opaque"
    start = 1_700_000_000_000_000_000
    return [
        SpanRecord(
            "localgate.identity", SpanKind.INTERNAL.value, remote_trace, child, server, False,
            state, start, start + 500_000, {},
        ),
        SpanRecord(
            "generate_content gemini-2.5-flash", SpanKind.SERVER.value, remote_trace, server,
            remote_span, True, state, start, start + 900_000_000, attributes,
            StatusCode.ERROR.value, "UNAVAILABLE",
        ),
        SpanRecord(
            "generate_content gemini-2.5-flash", SpanKind.CLIENT.value, remote_trace, child,
            server, False, state, 1, 2, {"localgate.upstream.attempt": 1},
            StatusCode.ERROR.value,
        ),
        # A new trace (no client context): a root span, no trace state.
        SpanRecord("count_tokens", SpanKind.SERVER.value, 7, 8, 0, False, "", 3, 4, {}),
    ]  # fmt: skip


def test_the_lean_encoding_is_the_official_one() -> None:
    records = _records()
    ours = ExportTraceServiceRequest.FromString(encode(records, RESOURCE, SCOPE))

    assert ours == encode_spans(to_readable(records, RESOURCE, SCOPE))


def test_repeated_values_encode_as_the_first_time() -> None:
    records = _records() * 3  # the second and third time, from the caches

    ours = ExportTraceServiceRequest.FromString(encode(records, RESOURCE, SCOPE))

    assert ours == encode_spans(to_readable(records, RESOURCE, SCOPE))


def test_an_exporter_of_sdk_spans_gets_them_made_from_the_records() -> None:
    memory = InMemorySpanExporter()
    batcher = SpanBatcher(memory, {}, RESOURCE, SCOPE)
    batcher.add(_records())
    batcher.shutdown()

    identity, server, attempt, root = memory.get_finished_spans()
    assert (identity.name, identity.kind, identity.attributes) == (
        "localgate.identity",
        SpanKind.INTERNAL,
        {},
    )
    assert server.parent is not None
    assert server.parent.is_remote
    assert server.context is not None
    assert server.context.trace_state.to_header() == "vendor=opaque"
    assert (server.status.status_code, server.status.description) == (
        StatusCode.ERROR,
        "UNAVAILABLE",
    )
    assert (server.attributes or {})["gen_ai.response.finish_reasons"] == ("STOP", "MAX_TOKENS")
    assert attempt.parent is not None
    assert not attempt.parent.is_remote
    assert attempt.parent.span_id == server.context.span_id
    assert root.parent is None
    assert server.resource is RESOURCE
    assert server.instrumentation_scope is SCOPE
