"""The cache's key sets: per tenant, the exact keys in the store, so a miss needs no trip to it.

A tenant's set is loaded on the store's background thread on its first lookup (ids only,
in pages); it then learns this gateway's writes, and every few seconds asks the store for
the entries created since the last time, so entries written by other replicas of a shared
Chroma server are found too. A full reload (every ten minutes, less often for a slow
store) forgets entries deleted elsewhere; a collection whose id has changed (``localgate
cache clear``, here or on another replica) is reported as cleared.

Only "absent" is acted on: a present key is still fetched. A key missing by mistake costs
a miss (the answer is then stored again); one kept by mistake costs a fetch, after which
it is dropped. A set that has not been refreshed lately (an idle tenant), or not loaded
yet, is not used: the store is asked. A set that cannot be loaded or refreshed is counted
as a cache error (operation ``keys``) and tried again a refresh interval later.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from localgate.observability import GatewayMetrics
from localgate.vectorstore.store import VectorStore, VectorStoreUnavailable

__all__ = ["REFRESH_S", "KeySets", "Upkeep"]

logger = logging.getLogger("localgate.cache")

# Hex digits of an exact key kept in memory (60 bits).
_SHORT_KEY_DIGITS = 15
# Ids per page when a tenant's set is loaded: Chroma sorts the whole collection for
# each page, so fewer, larger pages are faster (100,000 ids: about 1 s in all).
_PAGE = 20_000
# How often a set asks for the entries created since; it is trusted (its "absent"
# acted on) for this many refresh intervals after its last refresh started.
REFRESH_S = 5.0
_TRUSTED_FOR = 3
# An entry reaches the store after its ``created`` time (the write's linger, the queue,
# clock differences between replicas): refreshes look back this far. Later ones are
# read by the next full reload, which also forgets entries deleted elsewhere.
_LATE_S = 60.0
_RELOAD_S = 600.0
# A set's loads and refreshes keep the background thread busy 1/_REST of the time
# at most: a slower store is asked less often.
_REST = 100


def _short_key(entry: str) -> int | None:
    """An exact key as the key sets hold it: its first 60 bits (None: not a hex digest).

    An int under 2**60 takes 32 bytes; two keys sharing 60 bits only cost a store trip.
    """
    try:
        return int(entry[:_SHORT_KEY_DIGITS], 16)
    except ValueError:
        return None


def _short_keys(entries: Iterable[str]) -> set[int]:
    return {short for short in map(_short_key, entries) if short is not None}


@dataclass(slots=True)
class Upkeep:
    """When a tenant's in-memory copy of what the store holds was read, and is due again.

    Shared by the key sets and the semantic index: loaded on the tenant's first lookup,
    refreshed every ``pause_s`` (slower when the store is slow), read again whole every
    ``_RELOAD_S``, and trusted for ``_TRUSTED_FOR`` refresh intervals.
    """

    pause_s: float = REFRESH_S
    refreshed_at: float = -math.inf  # monotonic: when the last load or refresh started
    since: float = 0.0  # wall clock: the next refresh asks for entries created from here
    refresh_due: float = -math.inf  # monotonic
    reload_due: float = -math.inf  # monotonic
    task: asyncio.Task[None] | None = None

    def due(self, loaded: bool) -> Literal["load", "refresh"] | None:
        """What to start now, if anything (nothing while a load or refresh runs)."""
        if self.task is not None and not self.task.done():
            return None
        now = time.monotonic()
        if not loaded or now >= self.reload_due:
            # After a failure, no sooner than a refresh.
            return "load" if now >= self.refresh_due else None
        return "refresh" if now >= self.refresh_due else None

    def trusted(self) -> bool:
        """Refreshed lately enough that entries of other replicas are not missing."""
        return time.monotonic() - self.refreshed_at <= _TRUSTED_FOR * self.pause_s

    def loaded(self, started: float, wall: float) -> None:
        """A load that started at ``started`` (monotonic) and ``wall`` (clock) is done."""
        self.refreshed_at, self.since = started, wall - _LATE_S
        self.reload_due = started + max(_RELOAD_S, _REST * (time.monotonic() - started))
        self.refresh_due = started + self.pause_s

    def refreshed(self, started: float, wall: float, refresh_s: float) -> None:
        """A refresh that started then is done; a slow one makes the next wait longer."""
        self.refreshed_at, self.since = started, wall - _LATE_S
        self.pause_s = max(refresh_s, _REST * (time.monotonic() - started))
        self.refresh_due = started + self.pause_s

    def failed(self) -> None:
        """Try again a refresh interval from now."""
        self.refresh_due = time.monotonic() + self.pause_s


@dataclass(slots=True)
class _KeySet(Upkeep):
    """The exact keys in one tenant's cache collection, as this gateway last read them."""

    keys: set[int] | None = None  # None until the first load is complete
    collection: str = ""  # the id of the collection they were read from
    loading: set[int] | None = None  # what a load in progress has read so far

    def add(self, shorts: set[int]) -> None:
        """Note keys that are in the store."""
        if self.keys is not None:
            self.keys |= shorts
        if self.loading is not None:
            self.loading |= shorts

    def discard(self, short: int) -> None:
        """Drop a key the store turned out not to hold."""
        for keys in (self.keys, self.loading):
            if keys is not None:
                keys.discard(short)


class KeySets:
    """Per tenant, the exact keys in the store, loaded and kept up to date in the background.

    ``collection`` opens a tenant's cache collection (on the store's threads);
    ``cleared`` is called with a tenant whose collection was dropped and made again.
    """

    def __init__(
        self,
        store: VectorStore,
        collection: Callable[[str], Any],
        metrics: GatewayMetrics,
        cleared: Callable[[str], None],
        refresh_s: float,
    ) -> None:
        self._store = store
        self._collection = collection
        self._metrics = metrics
        self._cleared = cleared
        self._refresh_s = refresh_s
        self._sets: dict[str, _KeySet] = {}

    def maintain(self, tenant: str) -> None:
        """Start loading or refreshing the tenant's set, when that is due (on its lookups)."""
        keys = self._sets.get(tenant)
        if keys is None:
            keys = self._sets[tenant] = _KeySet(pause_s=self._refresh_s)
        step = keys.due(loaded=keys.keys is not None)
        if step is not None:
            work = self._load if step == "load" else self._refresh
            keys.task = asyncio.get_running_loop().create_task(work(tenant, keys))

    def holds(self, tenant: str, entry: str) -> bool | None:
        """Whether the tenant's store may hold ``entry``; None when the set cannot tell."""
        keys = self._sets.get(tenant)
        if keys is None or keys.keys is None:
            return None
        if not keys.trusted():
            return None  # not refreshed lately: entries of other replicas may be missing
        return _short_key(entry) in keys.keys

    def add(self, tenant: str, entries: Iterable[str]) -> None:
        """Note entries this gateway wrote."""
        keys = self._sets.get(tenant)
        if keys is not None:  # else its load will read them
            keys.add(_short_keys(entries))

    def discard(self, tenant: str, entry: str) -> None:
        """Drop an entry the store turned out not to hold."""
        keys, short = self._sets.get(tenant), _short_key(entry)
        if keys is not None and short is not None:
            keys.discard(short)

    def size(self, tenant: str) -> int | None:
        """How many keys the tenant's set holds; None until it is loaded."""
        keys = self._sets.get(tenant)
        return None if keys is None or keys.keys is None else len(keys.keys)

    def refresh_soon(self) -> None:
        """Another process changed the store: refresh every set on its next lookup."""
        for keys in self._sets.values():
            keys.refresh_due = -math.inf

    async def load(self, tenant: str) -> int:
        """Load the tenant's set now, after any load or refresh under way; its size."""
        keys = self._sets.setdefault(tenant, _KeySet(pause_s=self._refresh_s))
        if keys.task is not None and not keys.task.done():
            await asyncio.shield(keys.task)
        keys.task = asyncio.get_running_loop().create_task(self._load(tenant, keys))
        await asyncio.shield(keys.task)
        return len(keys.keys or ())

    async def close(self) -> None:
        """Stop loading and refreshing."""
        tasks = [keys.task for keys in self._sets.values() if keys.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _load(self, tenant: str, keys: _KeySet) -> None:
        """Read every id of the tenant's collection, then use the new set."""
        started, wall = time.monotonic(), time.time()
        found: set[int] = set()
        keys.loading = found  # this gateway's writes meanwhile are added to it
        try:
            collection = await self._read_all(tenant, found)
        except VectorStoreUnavailable as exc:
            self._failed(keys, "be loaded", exc.reason)
            return
        finally:
            keys.loading = None
        if keys.collection and collection != keys.collection:
            self._cleared(tenant)
        keys.keys, keys.collection = found, collection
        keys.loaded(started, wall)

    async def _read_all(self, tenant: str, found: set[int]) -> str:
        """Read the ids of the tenant's collection into ``found``, page by page; its id."""
        collection, offset = "", 0
        while True:
            ident, entries = await self._store.background(self._ids, tenant, offset)
            if offset and ident != collection:
                # Dropped and made again between two pages: start again on the new one.
                found.clear()
                collection, offset = ident, 0
                continue
            collection = ident
            found |= _short_keys(entries)
            if len(entries) < _PAGE:
                return collection
            offset += _PAGE

    async def _refresh(self, tenant: str, keys: _KeySet) -> None:
        """Add the entries created since the last refresh; notice a cleared collection."""
        started, wall = time.monotonic(), time.time()
        try:
            collection, entries = await self._store.background(
                self._created_since, tenant, keys.since
            )
        except VectorStoreUnavailable as exc:
            self._failed(keys, "be refreshed", exc.reason)
            return
        if collection != keys.collection:
            # Dropped and made again since the last refresh (``localgate cache clear``, here
            # or on another replica): what it holds was created since, and has just been read.
            keys.keys, keys.collection = set(), collection
            self._cleared(tenant)
        keys.add(_short_keys(entries))
        keys.refreshed(started, wall, self._refresh_s)

    def _failed(self, keys: _KeySet, what: str, reason: str) -> None:
        """Count and log a failure, and try again a refresh interval later."""
        logger.warning("cache: a key set could not %s: %s", what, reason)
        self._metrics.cache_errors.labels("keys").inc()
        keys.failed()

    # -- on the store's background thread -------------------------------------

    def _ids(self, tenant: str, offset: int) -> tuple[str, list[str]]:
        """One page of the collection's ids, and the collection's id."""
        collection = self._collection(tenant)
        found = collection.get(include=[], limit=_PAGE, offset=offset)
        return str(collection.id), list(found["ids"])

    def _created_since(self, tenant: str, since: float) -> tuple[str, list[str]]:
        """The ids of the entries created at ``since`` or later, and the collection's id."""
        collection = self._collection(tenant)
        found = collection.get(where={"created": {"$gte": since}}, include=[])
        return str(collection.id), list(found["ids"])
