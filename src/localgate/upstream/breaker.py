"""The circuit breaker of one upstream.

Closed: calls go through and their results are counted over a window. When at least
``min_requests`` calls in the window were made and ``failure_ratio`` of them failed, the
breaker opens: the upstream is skipped for ``open_s``. Then one call goes through as a
probe (half-open): its success closes the breaker, its failure opens it again. A
failure is what would make the dispatcher try elsewhere (unreachable, timeout, 429,
5xx); an answer judging the request (400, 404) is the upstream working.

Per process by default. With ``limits.backend: redis`` the replicas share their breakers
through ``upstream.shared_breakers``: the calls each counted since the last sync go to a
window kept in Redis, an opening is seen by every replica, and one probe at a time is let
through over all of them; the methods below marked for it are its side of that.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum

from localgate.upstream.window import SlidingCounts

__all__ = ["BreakerState", "CircuitBreaker"]

logger = logging.getLogger("localgate")

_OK, _FAILED = 0, 1


class BreakerState(Enum):
    """The breaker's state; the value is the metric's number."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class CircuitBreaker:
    """Decides whether the next call may go to one upstream."""

    def __init__(
        self,
        upstream: str,
        *,
        failure_ratio: float,
        window_s: float,
        min_requests: int,
        open_s: float,
        clock: Callable[[], float],
        on_change: Callable[[str, BreakerState], None] | None = None,
        enabled: bool = True,
    ) -> None:
        self.upstream = upstream
        self._enabled = enabled
        self._failure_ratio = failure_ratio
        self._min_requests = min_requests
        self._open_s = open_s
        self._clock = clock
        self._counts = SlidingCounts(window_s, clock)
        self._state = BreakerState.CLOSED
        self._opened_at = 0.0
        self._probing = False
        self._on_change = on_change
        # Calls counted since the shared window last took them (ok, failed).
        self._unsynced = [0, 0]

    @property
    def state(self) -> BreakerState:
        """The state now (an open breaker whose interval is over shows half-open)."""
        if self._state is BreakerState.OPEN and self._clock() >= self._opened_at + self._open_s:
            return BreakerState.HALF_OPEN
        return self._state

    def retry_in(self) -> float:
        """Seconds until an open breaker lets a probe through (0 if not open)."""
        if self._state is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self._opened_at + self._open_s - self._clock())

    @property
    def probing(self) -> bool:
        """Whether the call ``allow`` just let through is the half-open probe."""
        return self._probing

    def allow(self) -> bool:
        """Whether a call may go now; a half-open breaker lets exactly one through."""
        if self._state is BreakerState.CLOSED or not self._enabled:
            return True
        if self._state is BreakerState.OPEN:
            if self._clock() < self._opened_at + self._open_s:
                return False
            self._change(BreakerState.HALF_OPEN)
        if self._probing:
            return False
        self._probing = True
        return True

    def record(self, *, ok: bool) -> None:
        """The result of a call ``allow`` let through."""
        if not self._enabled:
            return
        if self._state is BreakerState.HALF_OPEN:
            self._probing = False
            if ok:
                self._counts.clear()
                self._change(BreakerState.CLOSED)
            else:
                self._open()
            return
        if self._state is BreakerState.OPEN:
            return  # a call from before it opened: the window has judged already
        self._counts.add(_OK if ok else _FAILED)
        self._unsynced[_OK if ok else _FAILED] += 1
        if ok:
            return
        succeeded, failed = self._counts.totals()
        total = succeeded + failed
        if total >= self._min_requests and failed >= self._failure_ratio * total:
            self._open()

    def abandon(self) -> None:
        """A call ``allow`` let through ended without a result (cancelled)."""
        if self._state is BreakerState.HALF_OPEN:
            self._probing = False

    def take_unsynced(self) -> tuple[int, int]:
        """The calls (succeeded, failed) counted since the last call, for the shared window."""
        succeeded, failed = self._unsynced
        self._unsynced = [0, 0]
        return succeeded, failed

    def open_for(self, seconds: float) -> None:
        """Another replica opened the breaker (or the shared window did): skip the upstream
        for ``seconds`` from now, unless this probe is already under way."""
        if not self._enabled or self._probing or seconds <= 0:
            return
        until = self._clock() + seconds
        if self._state is BreakerState.OPEN and self._opened_at + self._open_s >= until:
            return
        self._opened_at = until - self._open_s
        self._counts.clear()
        self._change(BreakerState.OPEN)

    def _open(self) -> None:
        self._opened_at = self._clock()
        self._counts.clear()
        self._change(BreakerState.OPEN)

    def _change(self, state: BreakerState) -> None:
        if state is self._state:
            return
        self._state = state
        level = logging.INFO if state is BreakerState.CLOSED else logging.WARNING
        logger.log(level, "upstream '%s': circuit breaker %s", self.upstream, state.name.lower())
        if self._on_change is not None:
            self._on_change(self.upstream, state)
