"""OTLP receivers on loopback: what the gateway's exporter really sends, decoded.

``OtlpHttpReceiver`` takes OTLP/HTTP (``POST /v1/traces``, protobuf); ``OtlpGrpcReceiver``
OTLP/gRPC. Both decode each ``ExportTraceServiceRequest`` into ``ReceivedSpan`` rows.
"""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.conftest import wait_until

__all__ = ["OtlpGrpcReceiver", "OtlpHttpReceiver", "ReceivedSpan"]

# SpanKind in the OTLP protobuf.
SERVER, CLIENT, INTERNAL = 2, 3, 1


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    """One span as the collector would see it (ids as hex)."""

    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status_code: int
    resource: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(item) for item in value.array_value.values)
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


class _Spans:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self.requests = 0

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        rows = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    rows.append(
                        ReceivedSpan(
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            status_code=span.status.code,
                            resource=resource,
                        )
                    )
        with self._lock:
            self._spans.extend(rows)
            self.requests += 1

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def trace(self, trace_id: str, count: int) -> list[ReceivedSpan]:
        """The spans of ``trace_id``, once ``count`` of them have arrived."""
        found: list[ReceivedSpan] = []

        def arrived() -> bool:
            found[:] = [span for span in self.spans if span.trace_id == trace_id]
            return len(found) >= count

        wait_until(arrived)
        return found

    def server_span(self, request_id: str) -> ReceivedSpan:
        """The server span of the request with ``request_id``, once it has arrived."""
        found: list[ReceivedSpan] = []

        def arrived() -> bool:
            found[:] = [
                span
                for span in self.spans
                if span.attributes.get("localgate.request_id") == request_id
            ]
            return bool(found)

        wait_until(arrived)
        return found[0]


class OtlpHttpReceiver(_Spans):
    """OTLP/HTTP with protobuf bodies on a loopback port, in a thread."""

    def __init__(self) -> None:
        super().__init__()
        spans = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                spans.add(request)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpHttpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class OtlpGrpcReceiver(_Spans):
    """OTLP/gRPC on a loopback port."""

    def __init__(self) -> None:
        super().__init__()
        spans = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(
                self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
            ) -> trace_service_pb2.ExportTraceServiceResponse:
                spans.add(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        # The generated gRPC module has no annotations.
        add = trace_service_pb2_grpc.add_TraceServiceServicer_to_server
        add(Service(), self._server)  # type: ignore[no-untyped-call]
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{port}"

    def __enter__(self) -> OtlpGrpcReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.stop(grace=None)
