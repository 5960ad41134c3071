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

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from localgate.cache.mirror import REFRESH_S, TenantMirror, Upkeep
from localgate.observability import GatewayMetrics
from localgate.vectorstore.store import VectorStore

__all__ = ["KeySets"]

# Hex digits of an exact key kept in memory (60 bits).
_SHORT_KEY_DIGITS = 15
# Ids per page when a tenant's set is loaded: Chroma sorts the whole collection for
# each page, so fewer, larger pages are faster (100,000 ids: about 1 s in all).
_PAGE = 20_000


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


class KeySets(TenantMirror[_KeySet]):
    """Per tenant, the exact keys in the store, loaded and kept up to date in the background.

    ``collection`` opens a tenant's cache collection (on the store's threads);
    ``cleared`` is called with a tenant whose collection was dropped and made again.
    """

    _what = "a key set"

    def __init__(
        self,
        store: VectorStore,
        collection: Callable[[str], Any],
        metrics: GatewayMetrics,
        cleared: Callable[[str], None],
        refresh_s: float = REFRESH_S,
    ) -> None:
        super().__init__(store, metrics, _KeySet, refresh_s)
        self._collection = collection
        self._cleared = cleared

    def holds(self, tenant: str, entry: str) -> bool | None:
        """Whether the tenant's store may hold ``entry``; None when the set cannot tell."""
        keys = self._tenants.get(tenant)
        if keys is None or keys.keys is None:
            return None
        if not keys.trusted():
            return None  # not refreshed lately: entries of other replicas may be missing
        return _short_key(entry) in keys.keys

    def add(self, tenant: str, entries: Iterable[str]) -> None:
        """Note entries this gateway wrote."""
        keys = self._tenants.get(tenant)
        if keys is not None:  # else its load will read them
            keys.add(_short_keys(entries))

    def discard(self, tenant: str, entry: str) -> None:
        """Drop an entry the store turned out not to hold."""
        keys, short = self._tenants.get(tenant), _short_key(entry)
        if keys is not None and short is not None:
            keys.discard(short)

    def size(self, tenant: str) -> int | None:
        """How many keys the tenant's set holds; None until it is loaded."""
        keys = self._tenants.get(tenant)
        return None if keys is None or keys.keys is None else len(keys.keys)

    # -- the mirror's hooks ---------------------------------------------------------

    def _is_loaded(self, state: _KeySet) -> bool:
        return state.keys is not None

    def _size(self, state: _KeySet) -> int:
        return len(state.keys or ())

    async def _read_all(self, tenant: str, state: _KeySet) -> None:
        """Read every id of the tenant's collection, then use the new set."""
        found: set[int] = set()
        state.loading = found  # this gateway's writes meanwhile are added to it
        try:
            collection = await self._read_pages(tenant, found)
        finally:
            state.loading = None
        if state.collection and collection != state.collection:
            self._cleared(tenant)
        state.keys, state.collection = found, collection

    async def _read_pages(self, tenant: str, found: set[int]) -> str:
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

    async def _read_since(self, tenant: str, state: _KeySet) -> None:
        """Add the entries created since the last refresh; notice a cleared collection."""
        collection, entries = await self._store.background(self._created_since, tenant, state.since)
        if collection != state.collection:
            # Dropped and made again since the last refresh (``localgate cache clear``, here
            # or on another replica): what it holds was created since, and has just been read.
            state.keys, state.collection = set(), collection
            self._cleared(tenant)
        state.add(_short_keys(entries))

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
