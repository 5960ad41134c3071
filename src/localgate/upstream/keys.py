"""A pool of an upstream's API keys, rotated round-robin; a throttled key cools down."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from localgate.secret import Secret

__all__ = ["KeyPool"]


class KeyPool:
    """The keys of one upstream: each call takes the next key not cooling down.

    A key the upstream answered 429 sits out for the upstream's ``Retry-After`` (or
    ``default_cooldown_s``) while the others carry on. Only the event loop's thread uses it.
    """

    def __init__(
        self,
        keys: Sequence[Secret],
        *,
        default_cooldown_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._keys = tuple(keys)
        self._until = [0.0] * len(self._keys)
        self._next = 0
        self._default_cooldown_s = default_cooldown_s
        self._clock = clock

    def __len__(self) -> int:
        return len(self._keys)

    def take(self) -> tuple[int, Secret] | None:
        """The next key not cooling down and its index; with every key cooling, the one
        that is ready soonest (the upstream decides, the gateway invents no refusal);
        None only for an empty pool."""
        count = len(self._keys)
        if not count:
            return None
        now = self._clock()
        for step in range(count):
            index = (self._next + step) % count
            if self._until[index] <= now:
                self._next = index + 1
                return index, self._keys[index]
        index = min(range(count), key=self._until.__getitem__)
        return index, self._keys[index]

    def cool_down(self, index: int, seconds: float | None) -> None:
        """Leave key ``index`` out for ``seconds`` (None: the default cool-down)."""
        wait = self._default_cooldown_s if seconds is None else seconds
        self._until[index] = max(self._until[index], self._clock() + wait)

    def wait_s(self) -> float:
        """Seconds until some key is usable again (0 if one is now)."""
        if not self._keys:
            return 0.0
        return max(0.0, min(self._until) - self._clock())
