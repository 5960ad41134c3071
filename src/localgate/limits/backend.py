"""What a limits backend does, and the values it works with.

A request's demand names every scope whose limits apply to it (its tenant, and its key
if the key has limits of its own); the backend admits it against all of them at once or
not at all, reserving its estimated tokens, and later settles the reservation.

Windows are fixed and opened by use: a scope's minute (or day) starts with the first
request it counts and lasts sixty seconds (a day); when it has passed, the next request
opens a new one at zero. ``Retry-After`` is the time left in the window that refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

__all__ = [
    "Admission",
    "Limit",
    "LimitBackend",
    "LimitsUnavailable",
    "Quota",
    "ScopeLimits",
    "ScopeUsage",
    "Waiting",
    "WindowUsage",
]

MINUTE_S = 60.0
DAY_S = 86_400.0


class Limit(Enum):
    """A kind of limit; the value is the setting's name (and the refusal's wording)."""

    REQUESTS_PER_MINUTE = "requests_per_minute"
    TOKENS_PER_MINUTE = "tokens_per_minute"
    TOKENS_PER_DAY = "tokens_per_day"
    CONCURRENT_REQUESTS = "concurrent_requests"

    @property
    def wording(self) -> str:
        """How a refusal names it: "requests per minute"."""
        return self.value.replace("_", " ")


# The order the Lua scripts number them in (1-based there).
LIMIT_ORDER = (
    Limit.REQUESTS_PER_MINUTE,
    Limit.TOKENS_PER_MINUTE,
    Limit.TOKENS_PER_DAY,
    Limit.CONCURRENT_REQUESTS,
)


@dataclass(frozen=True, slots=True)
class ScopeLimits:
    """The limits of one scope (``tenant:acme``, ``key:k_12ab``); None: no such limit."""

    scope: str
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None
    concurrent_requests: int | None = None

    def values(self) -> tuple[int | None, int | None, int | None, int | None]:
        """The limits in ``LIMIT_ORDER``."""
        return (
            self.requests_per_minute,
            self.tokens_per_minute,
            self.tokens_per_day,
            self.concurrent_requests,
        )

    @property
    def counts_tokens(self) -> bool:
        """Whether a token limit applies (else the estimate is not needed)."""
        return self.tokens_per_minute is not None or self.tokens_per_day is not None


# Quota and Admission are built for every request: plain slotted classes, since a frozen
# dataclass's __init__ costs several times more.
@dataclass(slots=True)
class Quota:
    """What the headers say of one kind (requests, tokens): the tightest scope's limit,
    what is left of it after this request, and the seconds until its window resets."""

    limit: int
    remaining: int
    reset_s: float


@dataclass(slots=True)
class Admission:
    """A backend's answer: admitted (``refused`` None) or the limit that refused, and the
    scope it belongs to, with the seconds until it could fit."""

    refused: Limit | None = None
    refused_scope: str = ""
    retry_after_s: float = 0.0
    requests: Quota | None = None
    tokens: Quota | None = None
    # The request alone is larger than a token limit: no wait will make it fit.
    never_fits: bool = False


@dataclass(frozen=True, slots=True)
class Waiting:
    """A request's place in the admission order across replicas: its class (0 low, 1
    normal, 2 high) and, if it will wait for a concurrency slot, how long (ms)."""

    rank: int
    hold_ms: int = 0


@dataclass(frozen=True, slots=True)
class WindowUsage:
    """What one window of a scope has counted; ``resets_in_s`` None: no window is open
    (nothing counted yet, or it has passed), so ``used`` is 0."""

    used: int
    resets_in_s: float | None


@dataclass(frozen=True, slots=True)
class ScopeUsage:
    """What a backend has counted for one scope now: its windows (requests per minute,
    tokens per minute, tokens per day) and its requests in flight."""

    requests_per_minute: WindowUsage
    tokens_per_minute: WindowUsage
    tokens_per_day: WindowUsage
    in_flight: int


class LimitsUnavailable(Exception):
    """The backend's counters cannot be reached (the Redis adapter raises it)."""


class LimitBackend(Protocol):
    """Counts requests, tokens and concurrency per scope, atomically across scopes."""

    async def admit(
        self,
        scopes: tuple[ScopeLimits, ...],
        tokens: int,
        reservation: str,
        waiting: Waiting | None = None,
    ) -> Admission:
        """Check every limit of every scope; if all fit, count the request, reserve
        ``tokens`` and hold a concurrency slot under ``reservation``; else change nothing.

        A backend shared by replicas also keeps the classes in order across them: a
        concurrency slot is not given to a request while one of a higher class (``waiting``)
        waits for one on any replica; refused for concurrency with ``hold_ms``, the request
        is registered as waiting that long (renewed by each try)."""
        ...

    async def stop_waiting(
        self, scopes: tuple[ScopeLimits, ...], reservation: str, waiting: Waiting
    ) -> None:
        """The request registered by ``admit`` gave up waiting (timed out, went away)."""
        ...

    async def usage(self, scope: str) -> ScopeUsage:
        """What has been counted for ``scope`` (read only: nothing is opened or purged)."""
        ...

    async def settle(
        self,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
        tokens: int | None,
        refund_request: bool,
    ) -> None:
        """Free the slot and settle the reserved tokens to ``tokens`` (None: keep the
        reservation as spent); ``refund_request`` takes the request back out of its
        minute. A reservation already settled, or expired, is left alone."""
        ...

    def settle_soon(
        self,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
        tokens: int | None,
        refund_request: bool,
        done: Callable[[Exception | None], None],
    ) -> None:
        """``settle`` without waiting for it: ``done`` is told once it is written (None)
        or could not be (the error; the reservation's lease runs out instead)."""
        ...

    async def close(self) -> None:
        """Write the settlements not yet written, stop background work and close
        connections."""
        ...
