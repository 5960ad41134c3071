"""Traffic limits: per tenant and key, requests, tokens (reserved, then settled) and
concurrency, counted in this process or in Redis (docs/traffic.md)."""

from localgate.limits.backend import (
    Admission,
    Limit,
    LimitBackend,
    LimitsUnavailable,
    ScopeLimits,
    ScopeUsage,
    Waiting,
    WindowUsage,
)
from localgate.limits.estimate import estimate_tokens, text_tokens
from localgate.limits.memory import MemoryBackend
from localgate.limits.stage import PRIORITY_HEADER, TenantLimiter

__all__ = [
    "PRIORITY_HEADER",
    "Admission",
    "Limit",
    "LimitBackend",
    "LimitsUnavailable",
    "MemoryBackend",
    "ScopeLimits",
    "ScopeUsage",
    "TenantLimiter",
    "Waiting",
    "WindowUsage",
    "estimate_tokens",
    "text_tokens",
]
