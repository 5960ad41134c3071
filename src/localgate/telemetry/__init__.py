"""OpenTelemetry traces of requests (docs/observability.md, "Traces").

Off unless configured, and then free: no OpenTelemetry module is imported and every hook
is one ``None`` check. On, each request gets a server span, a child span per stage and
per upstream attempt, following the OpenTelemetry GenAI semantic conventions; spans carry
counts, names and statuses, never prompt or answer text nor a key.

The pipeline, the stages and the upstream dispatcher call the hooks (``hooks``) with the
request's context; ``setup`` decides from the settings and the ``OTEL_*`` environment
whether tracing is on; ``tracer`` (the spans), ``batch`` (their queue and export thread)
and ``export`` (OTLP) are the only modules importing OpenTelemetry, loaded by ``setup``
only when tracing is on.
"""

from localgate.telemetry.hooks import answer, attempt, end_request, stage
from localgate.telemetry.setup import open_tracing, trace_config
from localgate.telemetry.tracing import TraceConfig, Tracing

__all__ = [
    "TraceConfig",
    "Tracing",
    "answer",
    "attempt",
    "end_request",
    "open_tracing",
    "stage",
    "trace_config",
]
