"""A finished span as the tracer makes it: a plain tuple, cheap to build and to read.

The OTLP exporters encode these directly (``export``); any other exporter (the console's,
one a test passes) gets the SDK's ``ReadableSpan`` objects made from them on the export
thread (``to_readable``). Building and reading SDK span objects per span was most of
what encoding cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

__all__ = ["SpanRecord", "to_readable"]

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class SpanRecord(NamedTuple):
    """One finished, sampled span. ``kind`` is the SDK's ``SpanKind`` value (0 internal, 1
    server, 2 client, ...); ``parent_id`` 0 for a root span; ``trace_state`` the W3C
    ``tracestate`` header it carries ("" for none); ``status`` the ``StatusCode`` value."""

    name: str
    kind: int
    trace_id: int
    span_id: int
    parent_id: int
    parent_remote: bool
    trace_state: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    status: int = 0
    description: str | None = None


def to_readable(
    records: Sequence[SpanRecord], resource: Resource, scope: InstrumentationScope
) -> list[ReadableSpan]:
    """The SDK's span objects for ``records``, for exporters that take those."""
    spans = []
    states: dict[str, TraceState] = {}
    for record in records:
        state = states.get(record.trace_state)
        if state is None:
            state = states[record.trace_state] = (
                TraceState.from_header([record.trace_state]) if record.trace_state else TraceState()
            )
        context = SpanContext(record.trace_id, record.span_id, False, _SAMPLED, state)
        parent = (
            SpanContext(record.trace_id, record.parent_id, record.parent_remote, _SAMPLED, state)
            if record.parent_id
            else None
        )
        spans.append(
            ReadableSpan(
                record.name,
                context,
                parent,
                resource,
                record.attributes,
                kind=SpanKind(record.kind),
                status=Status(StatusCode(record.status), record.description),
                start_time=record.start_ns,
                end_time=record.end_ns,
                instrumentation_scope=scope,
            )
        )
    return spans
