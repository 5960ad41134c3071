"""The in-process limits backend: counters in this process's memory (one replica).

Admission and settlement run without an await in between their checks and updates, so
on the event loop each is atomic, as the Redis backend's scripts are on the server.
Reservations need no lease here: they die with the process that holds them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from localgate.limits.backend import (
    DAY_S,
    LIMIT_ORDER,
    MINUTE_S,
    Admission,
    Limit,
    Quota,
    ScopeLimits,
    ScopeUsage,
    Waiting,
    WindowUsage,
)

__all__ = ["MemoryBackend"]

_LENGTHS = (MINUTE_S, MINUTE_S, DAY_S)


@dataclass(slots=True)
class _Window:
    start: float = -math.inf
    used: int = 0


@dataclass(slots=True)
class _Reservation:
    tokens: int
    # Start of each window it was counted in (requests, tokens/min, tokens/day).
    starts: tuple[float, float, float]


@dataclass(slots=True)
class _Scope:
    windows: tuple[_Window, _Window, _Window] = field(
        default_factory=lambda: (_Window(), _Window(), _Window())
    )
    in_flight: dict[str, _Reservation] = field(default_factory=dict)


class MemoryBackend:
    """Fixed windows opened by use, per scope, in a dict; ``clock`` is injectable."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._scopes: dict[str, _Scope] = {}

    async def admit(
        self,
        scopes: tuple[ScopeLimits, ...],
        tokens: int,
        reservation: str,
        waiting: Waiting | None = None,
    ) -> Admission:
        """All limits of all scopes, checked and counted at once. One process: the
        admission queue keeps the classes in order, ``waiting`` is not needed here."""
        return self.admit_now(scopes, tokens, reservation)

    async def stop_waiting(
        self, scopes: tuple[ScopeLimits, ...], reservation: str, waiting: Waiting
    ) -> None:
        """Nothing to do: no waiter is registered outside the process's queue."""

    def admit_now(
        self, scopes: tuple[ScopeLimits, ...], tokens: int, reservation: str
    ) -> Admission:
        """``admit`` without the coroutine (the Redis backend's local fallback uses it)."""
        now = self._clock()
        requests: Quota | None = None
        token_quota: Quota | None = None
        asks = (1, tokens, tokens)
        plans: list[tuple[_Scope, list[tuple[float, int]]]] = []
        for limits in scopes:
            state = self._scopes.get(limits.scope)
            if state is None:
                state = self._scopes[limits.scope] = _Scope()
            current = []
            for index, limit in enumerate(limits.values()):
                if index == 3:
                    if limit is not None and len(state.in_flight) >= limit:
                        return Admission(
                            refused=Limit.CONCURRENT_REQUESTS,
                            refused_scope=limits.scope,
                            retry_after_s=1.0,
                        )
                    break
                length = _LENGTHS[index]
                window = state.windows[index]
                start = window.start
                if now >= start + length:
                    start, used = now, 0  # that window has passed: a new one opens now
                else:
                    used = window.used
                current.append((start, used))
                if limit is None:
                    continue
                ask = asks[index]
                reset = start + length - now
                if used + ask > limit:
                    return Admission(
                        refused=LIMIT_ORDER[index],
                        refused_scope=limits.scope,
                        retry_after_s=reset,
                        never_fits=ask > limit,
                    )
                remaining = limit - used - ask
                if index == 0:
                    if requests is None or remaining < requests.remaining:
                        requests = Quota(limit, remaining, reset)
                elif token_quota is None or remaining < token_quota.remaining:
                    token_quota = Quota(limit, remaining, reset)
            plans.append((state, current))
        for state, current in plans:
            for window, (start, used), ask in zip(state.windows, current, asks, strict=True):
                window.start, window.used = start, used + ask
            state.in_flight[reservation] = _Reservation(
                tokens, (current[0][0], current[1][0], current[2][0])
            )
        return Admission(requests=requests, tokens=token_quota)

    async def settle(
        self,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
        tokens: int | None,
        refund_request: bool,
    ) -> None:
        """Refund or debit the difference in the windows it was counted in, if still open."""
        self.settle_now(scopes, reservation, tokens, refund_request)

    def settle_soon(
        self,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
        tokens: int | None,
        refund_request: bool,
        done: Callable[[Exception | None], None],
    ) -> None:
        """``settle``, done at once."""
        self.settle_now(scopes, reservation, tokens, refund_request)
        done(None)

    def settle_now(
        self,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
        tokens: int | None,
        refund_request: bool,
    ) -> None:
        """``settle`` without the coroutine."""
        for limits in scopes:
            state = self._scopes.get(limits.scope)
            if state is None:
                continue
            held = state.in_flight.pop(reservation, None)
            if held is None:
                continue
            delta = 0 if tokens is None else tokens - held.tokens
            changes = (-1 if refund_request else 0, delta, delta)
            for window, start, change in zip(state.windows, held.starts, changes, strict=True):
                # A window that has closed meanwhile is not reopened to settle into.
                if change and window.start == start:
                    window.used = max(0, window.used + change)

    async def usage(self, scope: str) -> ScopeUsage:
        """See ``LimitBackend.usage``."""
        state = self._scopes.get(scope)
        if state is None:
            empty = WindowUsage(0, None)
            return ScopeUsage(empty, empty, empty, 0)
        now = self._clock()
        requests, tokens, day = (
            WindowUsage(window.used, window.start + length - now)
            if now < window.start + length
            else WindowUsage(0, None)
            for window, length in zip(state.windows, _LENGTHS, strict=True)
        )
        return ScopeUsage(requests, tokens, day, len(state.in_flight))

    async def close(self) -> None:
        """Nothing to close."""
