"""What a running tracer offers, and how it was configured: no OpenTelemetry here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from localgate.config import Sampler
from localgate.exchange.context import RequestContext

__all__ = ["TraceConfig", "Tracing"]


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """How traces are made and where they go, once the environment has had its say."""

    exporter: str  # otlp, console
    protocol: str  # http/protobuf, grpc (otlp only)
    service_name: str
    sampler: Sampler
    sampler_arg: float
    record_redacted_text: bool


class Tracing(Protocol):
    """A running tracer: starts each request's trace, and flushes spans at shutdown."""

    def begin(self, ctx: RequestContext, headers: Mapping[str, str]) -> None:
        """Start ``ctx``'s server span, continuing the client's W3C trace if it sent one."""
        ...

    def shutdown(self) -> None:
        """Export what is pending and stop (blocking: call it off the event loop)."""
        ...
