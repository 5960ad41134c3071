"""Traffic limits (docs/traffic.md)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from localgate.config.base import Section

__all__ = ["LIMIT_FALLBACKS", "LimitSettings", "LimitsSettings", "Priority", "TenantLimitSettings"]


Priority = Literal["low", "normal", "high"]


class LimitSettings(Section):
    """Limits of one tenant or key; an unset field inherits (a key's from its tenant's
    own limits only for the class and queue fields: a key's counters are its own)."""

    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)
    tokens_per_day: int | None = Field(None, ge=1)
    concurrent_requests: int | None = Field(None, ge=1)
    # The class of the request in the admission queue, and whether the client may pick
    # one with the x-localgate-priority header.
    priority: Priority | None = None
    allow_priority_header: bool | None = None
    # How long a request waits for a concurrency slot before 429 (0: refused at once).
    queue_timeout_s: float | None = Field(None, ge=0, le=600)
    # The output tokens reserved for a request that sets no generationConfig.maxOutputTokens.
    default_output_tokens: int | None = Field(None, ge=0)


class TenantLimitSettings(LimitSettings):
    """A tenant's limits, and those of some of its keys (by key id) on top of them."""

    keys: dict[str, LimitSettings] = Field(default_factory=dict)


# What a tenant gets for the class and queue fields that neither it nor limits.default set.
LIMIT_FALLBACKS = LimitSettings(
    priority="normal", allow_priority_header=False, queue_timeout_s=0, default_output_tokens=2048
)


class LimitsSettings(Section):
    """Per-tenant request, token and concurrency limits, and where they are counted."""

    # memory: counted in this process; redis: shared by every replica on one Redis.
    backend: Literal["memory", "redis"] = "memory"
    redis_url: str | None = None
    # Every Redis key of this gateway (limits, shared circuit breakers) starts with it:
    # deployments sharing one Redis each need their own.
    key_prefix: str = Field("localgate:", pattern=r"^[A-Za-z0-9_.:{}-]{1,64}$")
    # Redis unreachable: closed refuses with 503; open admits, counting in this process.
    on_backend_error: Literal["closed", "open"] = "closed"
    # How long a replica's reservation outlives it if it dies (renewed while in flight).
    lease_s: float = Field(30.0, ge=1, le=3600)
    # Requests waiting for a concurrency slot, per tenant; beyond it, 429 at once.
    max_queue: int = Field(100, ge=0)
    default: LimitSettings = LIMIT_FALLBACKS

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("redis", "rediss", "unix") or not (parts.hostname or parts.path):
            raise ValueError(
                "must be a redis://, rediss:// or unix:// URL, e.g. redis://redis:6379/0"
            )
        return value

    @model_validator(mode="after")
    def _redis_needs_a_url(self) -> LimitsSettings:
        if self.backend == "redis" and not self.redis_url:
            raise ValueError(
                "limits.redis_url: required when limits.backend is redis "
                "(or set LOCALGATE_REDIS_URL)"
            )
        return self
