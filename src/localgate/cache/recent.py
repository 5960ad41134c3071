"""The cache's recent answers: entries this gateway stored or read lately, in memory.

An exact hit among them needs no trip to the store: no thread hop, and no wait behind a
Chroma write (which holds reads up for tens of milliseconds). They are bounded in number
(the least recently used are forgotten first) and in age, so that a ``cache clear`` made
through another gateway of a shared server reaches this one within ``max_age_s`` (an
embedded store's clear, at once: the cache stage forgets them all when it sees one).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

__all__ = ["RecentAnswers"]


class RecentAnswers:
    """Entries this gateway stored or read lately, per tenant and exact key, for exact hits."""

    def __init__(self, size: int = 2048, max_age_s: float = 60.0) -> None:
        self._size = size
        self._max_age_s = max_age_s
        self._entries: OrderedDict[tuple[str, str], tuple[float, dict[str, Any], str]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()  # filled from the store's threads, read on the loop

    def get(self, tenant: str, entry: str) -> tuple[dict[str, Any], str] | None:
        """The entry's metadata and answer (JSON), if remembered and not too old."""
        with self._lock:
            found = self._entries.get((tenant, entry))
            if found is None:
                return None
            if time.monotonic() - found[0] > self._max_age_s:
                del self._entries[(tenant, entry)]
                return None
            self._entries.move_to_end((tenant, entry))
            return found[1], found[2]

    def put(self, tenant: str, entry: str, metadata: dict[str, Any], document: str) -> None:
        """Remember an entry, forgetting the least recently used beyond the size."""
        with self._lock:
            self._entries[(tenant, entry)] = (time.monotonic(), metadata, document)
            self._entries.move_to_end((tenant, entry))
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._entries.clear()

    def forget(self, tenant: str) -> None:
        """Forget one tenant's entries (its cache was cleared)."""
        with self._lock:
            for remembered in [key for key in self._entries if key[0] == tenant]:
                del self._entries[remembered]
