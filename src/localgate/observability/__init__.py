"""Metrics and the access log."""

from localgate.observability.accesslog import AccessLog
from localgate.observability.metrics import GatewayMetrics

__all__ = ["AccessLog", "GatewayMetrics"]
