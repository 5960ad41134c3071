"""OTLP export of localgate's spans (``SpanRecord``), with a lean encoder.

The OTLP exporters' own encoder builds a protobuf object per span, attribute and value in
Python (and hashes the resource per span): on a loaded gateway that was most of what
tracing cost. Every span here has the same resource and scope and only a few plain
attributes, so ``encode`` writes the ``ExportTraceServiceRequest`` wire format directly;
the exporters keep their transport (endpoint, headers, TLS, compression, retries, all
from the ``OTEL_EXPORTER_OTLP_*`` variables). tests/telemetry checks the bytes against
the official encoder's.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, cast

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from localgate.telemetry.records import SpanRecord

__all__ = ["LeanGrpcExporter", "LeanHttpExporter", "encode"]

_FIXED64 = struct.Struct("<Q")
_FIXED32 = struct.Struct("<I")
_DOUBLE = struct.Struct("<d")
# Span.flags: the "has is_remote" bit, and the "is_remote" bit for a remote parent.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _SMALL[value]
    if value < 0:
        value += 1 << 64  # int64 as protobuf writes it: ten bytes of two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes((value,)) for value in range(0x80)]
# Length-delimited field tags (wire type 2) of the field numbers used, all below 16.
_TAG = [bytes(((number << 3) | 2,)) for number in range(16)]
# Attribute names are few and fixed: each one's encoded KeyValue.key, made once.
_KEYS: dict[str, bytes] = {}


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _TAG[number] + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    if isinstance(value, str):
        return _field(1, value.encode())
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, tuple | list):
        return _field(5, b"".join([_field(1, _any_value(item)) for item in value]))
    return _field(1, str(value).encode())


def _attributes(number: int, attributes: Mapping[str, Any] | None) -> bytes:
    if not attributes:
        return b""
    tag = _TAG[number]
    out = []
    for key, value in attributes.items():
        # Most values are a few strings (operation, model, tenant, upstream): each
        # key-value pair is encoded once, while the cache has room.
        if value.__class__ is str:
            encoded = _PAIRS.get((number, key, value))
            if encoded is not None:
                out.append(encoded)
                continue
        name = _KEYS.get(key)
        if name is None:
            name = _field(1, key.encode())
            if len(_KEYS) < 1024:  # bounded, whatever redaction types a configuration names
                _KEYS[key] = name
        pair = name + _field(2, _any_value(value))
        encoded = tag + _varint(len(pair)) + pair
        if value.__class__ is str and len(_PAIRS) < _MAX_PAIRS:
            _PAIRS[(number, key, value)] = encoded
        out.append(encoded)
    return b"".join(out)


# Encoded attribute pairs and span names, made once: bounded, since values come from
# configuration and from clients (model names, request ids do not repeat and fill it).
_PAIRS: dict[tuple[int, str, str], bytes] = {}
_MAX_PAIRS = 4096
_NAMES: dict[str, bytes] = {}
# Span.kind (field 6), by the SDK's kind: the SDK's kinds start at 0, OTLP's at 1.
_KINDS = [b"\x30" + _varint(value + 1) for value in range(5)]
_UNSET_STATUS = _field(15, b"")
# Span.flags (field 16, fixed32).
_LOCAL_FLAGS = b"\x85\x01" + _FIXED32.pack(_HAS_IS_REMOTE)
_REMOTE_FLAGS = b"\x85\x01" + _FIXED32.pack(_HAS_IS_REMOTE | _IS_REMOTE)


def _span(record: SpanRecord) -> bytes:
    (name, kind, trace_id, span_id, parent_id, parent_remote, state) = record[:7]
    (start, end, attributes, code, description) = record[7:]
    encoded_name = _NAMES.get(name)
    if encoded_name is None:
        encoded_name = _field(5, name.encode())
        if len(_NAMES) < 1024:
            _NAMES[name] = encoded_name
    if code or description:
        body = _field(2, description.encode()) if description else b""
        status = _field(15, body + (b"\x18" + _varint(code) if code else b""))
    else:
        status = _UNSET_STATUS
    return b"".join(
        (
            b"\x0a\x10",
            trace_id.to_bytes(16, "big"),
            b"\x12\x08",
            span_id.to_bytes(8, "big"),
            _field(3, state.encode()) if state else b"",
            b"\x22\x08" + parent_id.to_bytes(8, "big") if parent_id else b"",
            encoded_name,
            _KINDS[kind],
            b"\x39",
            _FIXED64.pack(start),
            b"\x41",
            _FIXED64.pack(end),
            _attributes(9, attributes),
            status,
            _REMOTE_FLAGS if parent_id and parent_remote else _LOCAL_FLAGS,
        )
    )


def encode(records: Sequence[SpanRecord], resource: Resource, scope: InstrumentationScope) -> bytes:
    """``records`` (all of ``resource`` and ``scope``) as a serialized
    ExportTraceServiceRequest."""
    scope_body = _field(1, scope.name.encode())
    if scope.version:
        scope_body += _field(2, scope.version.encode())
    scope_spans = _field(1, scope_body) + b"".join([_field(2, _span(r)) for r in records])
    resource_spans = _field(1, _attributes(1, resource.attributes)) + _field(2, scope_spans)
    if resource.schema_url:
        resource_spans += _field(3, resource.schema_url.encode())
    return _field(1, resource_spans)


class LeanHttpExporter(HttpSpanExporter):
    """OTLP/HTTP (protobuf) with the lean encoder; the transport is the exporter's own."""

    def __init__(self, resource: Resource, scope: InstrumentationScope) -> None:
        super().__init__()
        self._resource = resource
        self._scope = scope

    def export_records(self, records: Sequence[SpanRecord]) -> SpanExportResult:
        """Send ``records`` in one request."""
        if self._shutdown:
            return SpanExportResult.FAILURE
        result = self._client.export(encode(records, self._resource, self._scope))
        return SpanExportResult.SUCCESS if result.success else SpanExportResult.FAILURE


class LeanGrpcExporter(GrpcSpanExporter):
    """OTLP/gRPC with the lean encoder (parsed back into the request message in C)."""

    def __init__(self, resource: Resource, scope: InstrumentationScope) -> None:
        super().__init__()
        self._resource = resource
        self._scope = scope

    def export_records(self, records: Sequence[SpanRecord]) -> SpanExportResult:
        """Send ``records`` in one call: the base exporter hands them, untouched, to
        ``_translate_data`` below (its retries and timeouts apply as to any export)."""
        return self.export(cast("Sequence[ReadableSpan]", records))

    def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
        records = cast("Sequence[SpanRecord]", data)
        request: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(
            encode(records, self._resource, self._scope)
        )
        return request
