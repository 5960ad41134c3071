"""The retry budget of one upstream: retries stay a fraction of its recent traffic."""

from __future__ import annotations

from collections.abc import Callable

from localgate.upstream.window import SlidingCounts

__all__ = ["RetryBudget"]

_REQUESTS, _RETRIES = 0, 1


class RetryBudget:
    """Allows a retry while retries over the window stay within ``ratio`` of the requests
    plus ``min_retries``: when an upstream fails for everyone, retries do not multiply
    its load."""

    def __init__(
        self, ratio: float, window_s: float, min_retries: int, clock: Callable[[], float]
    ) -> None:
        self._ratio = ratio
        self._min_retries = min_retries
        self._counts = SlidingCounts(window_s, clock)

    def record_request(self) -> None:
        """A first attempt went to the upstream."""
        self._counts.add(_REQUESTS)

    def try_spend(self) -> bool:
        """Take one retry from the budget; False if it is used up."""
        requests, retries = self._counts.totals()
        if retries >= self._min_retries + self._ratio * requests:
            return False
        self._counts.add(_RETRIES)
        return True
