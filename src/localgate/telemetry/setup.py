"""Whether tracing is on, and how, from the ``telemetry:`` settings and ``OTEL_*`` variables.

Nothing here imports OpenTelemetry: when tracing is off, none of it is ever loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import get_args

from localgate.config import Sampler, TelemetrySettings
from localgate.errors import ConfigError
from localgate.telemetry.tracing import TraceConfig, Tracing

__all__ = ["open_tracing", "trace_config"]

_EXPORTERS = ("otlp", "console")
_PROTOCOLS = ("http/protobuf", "grpc")


def trace_config(settings: TelemetrySettings, environ: Mapping[str, str]) -> TraceConfig | None:
    """The tracing configuration, or None when tracing is off.

    On when ``telemetry.enabled`` is true or the environment asks for an exporter
    (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
    ``OTEL_TRACES_EXPORTER=otlp|console``); off, whatever else is set, with
    ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. The ``OTEL_*`` variables
    override the settings. Raises ``ConfigError`` for a value it cannot use.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    named = environ.get("OTEL_TRACES_EXPORTER", "").split(",")[0].strip().lower()
    if named == "none":
        return None
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not (settings.enabled or named or endpoint):
        return None
    exporter = named or "otlp"
    if exporter not in _EXPORTERS:
        raise _refused(
            f"OTEL_TRACES_EXPORTER: {exporter!r} is not supported; use otlp, console or none"
        )
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol not in _PROTOCOLS:
        raise _refused(
            f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not supported; use http/protobuf or grpc"
        )
    sampler = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower() or settings.sampler
    if sampler not in get_args(Sampler):
        raise _refused(
            f"OTEL_TRACES_SAMPLER: {sampler!r} is not supported; use one of "
            + ", ".join(get_args(Sampler))
        )
    sampler_arg = settings.sampler_arg
    if raw_arg := environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip():
        try:
            sampler_arg = float(raw_arg)
        except ValueError:
            sampler_arg = -1.0
        if not 0 <= sampler_arg <= 1:
            raise _refused(f"OTEL_TRACES_SAMPLER_ARG: {raw_arg!r} is not a ratio from 0 to 1")
    return TraceConfig(
        exporter=exporter,
        protocol=protocol,
        service_name=environ.get("OTEL_SERVICE_NAME") or settings.service_name,
        sampler=sampler,  # type: ignore[arg-type]  # one of Sampler's values, checked above
        sampler_arg=sampler_arg,
        record_redacted_text=settings.record_redacted_text,
    )


def open_tracing(config: TraceConfig) -> Tracing:
    """Load OpenTelemetry and start the tracer provider and its exporter."""
    # Imported here, and only here: with tracing off, OpenTelemetry is never loaded.
    from localgate.telemetry.tracer import OtelTracing

    return OtelTracing(config)


def _refused(problem: str) -> ConfigError:
    return ConfigError("environment", [problem])
