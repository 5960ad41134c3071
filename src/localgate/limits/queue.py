"""The admission queue: requests waiting for a concurrency slot, higher classes first.

One queue per tenant, bounded (``limits.max_queue``). A waiter is woken when a request
of its tenant ends in this process, and also retries every ``poll_s`` (another replica
may have freed a slot); within a class, first come first served. A new request of a
class no higher than a waiter's for the same concurrency limit queues behind it rather
than trying the backend first; one of the same class may still take a slot just freed
before the woken waiter runs (the waiter then stays at the head of its class). With the
Redis backend, waiters are registered in Redis too, so a slot freed on one replica is not
given to a lower class on another while a higher class waits anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

__all__ = ["PRIORITY_RANK", "AdmissionQueue", "QueueFull"]

PRIORITY_RANK = {"low": 0, "normal": 1, "high": 2}


class QueueFull(Exception):
    """The tenant's queue holds ``max_queue`` waiters already."""


@dataclass(order=True, slots=True)
class _Waiter:
    rank: int  # negated class: the heap pops the highest class first
    order: int
    # The scopes whose concurrency limit it waits for.
    scopes: frozenset[str] = field(compare=False, default=frozenset())
    wake: asyncio.Event = field(compare=False, default_factory=asyncio.Event)


class AdmissionQueue:
    """Per-tenant heaps of waiters."""

    def __init__(self, max_queue: int, poll_s: float) -> None:
        self._max = max_queue
        self._poll_s = poll_s
        self._heaps: dict[str, list[_Waiter]] = {}
        self._order = itertools.count()

    def __len__(self) -> int:
        return sum(len(heap) for heap in self._heaps.values())

    def outranks(self, tenant: str, rank: int, scopes: frozenset[str]) -> bool:
        """Whether a request of a class above ``rank`` waits in ``tenant``'s queue for the
        concurrency limit of one of ``scopes``."""
        heap = self._heaps.get(tenant)
        if not heap or -heap[0].rank <= rank:
            return False
        return any(-waiter.rank > rank and waiter.scopes & scopes for waiter in heap)

    async def wait_for_slot(
        self,
        tenant: str,
        rank: int,
        scopes: frozenset[str],
        timeout_s: float,
        clock: Callable[[], float],
        try_admit: Callable[[], Awaitable[bool]],
    ) -> bool:
        """Wait in line until ``try_admit`` succeeds at the head of the queue, or until
        ``timeout_s`` has passed (False). Raises ``QueueFull``."""
        heap = self._heaps.setdefault(tenant, [])
        if len(heap) >= self._max:
            raise QueueFull
        waiter = _Waiter(-rank, next(self._order), scopes)
        heapq.heappush(heap, waiter)
        deadline = clock() + timeout_s
        try:
            while True:
                left = deadline - clock()
                if left <= 0:
                    return False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.wake.wait(), min(left, self._poll_s))
                waiter.wake.clear()
                if heap and heap[0] is waiter and await try_admit():
                    return True
        finally:
            heap.remove(waiter)
            heapq.heapify(heap)
            if heap:
                heap[0].wake.set()  # the next in line tries the slot this one did not take
            else:
                self._heaps.pop(tenant, None)

    def slot_freed(self, tenant: str) -> None:
        """A request of ``tenant`` ended here: the head of its queue tries again."""
        heap = self._heaps.get(tenant)
        if heap:
            heap[0].wake.set()
