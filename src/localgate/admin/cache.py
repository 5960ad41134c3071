"""The answer cache: what it holds, and clearing it."""

from __future__ import annotations

from localgate.admin.closing import ClosingService
from localgate.cache.admin import CacheStats, cache_stats, clear_cache
from localgate.config import Settings
from localgate.vectorstore.store import CollectionInfo, VectorStore

__all__ = ["CacheAdmin", "CacheStats", "CollectionInfo"]


class CacheAdmin(ClosingService):
    """Reads and clears the cache's collections in the vector store.

    A running gateway sees a clear before its next lookup (an embedded store is told
    through its generation file, a shared server's replicas within seconds).
    """

    def __init__(self, store: VectorStore, *, owns_store: bool = False) -> None:
        """On ``store``; ``owns_store``: ``close`` closes it too."""
        self._store = store
        self._owns_store = owns_store

    @classmethod
    def open(cls, settings: Settings) -> CacheAdmin:
        """On the configured store, opened for this admin alone; close it after."""
        return cls(VectorStore(settings), owns_store=True)

    def close(self) -> None:
        """Close the store, if this admin opened it."""
        if self._owns_store:
            self._store.close()

    def stats(self, tenant: str | None = None) -> list[CacheStats]:
        """Entries per tenant and embedder, how many expired, and for which models.

        Hits and misses are not here: the gateway counts them (``/metrics``).
        """
        return self._store.sync(cache_stats, self._store, tenant)

    def clear(self, tenant: str | None = None) -> list[CollectionInfo]:
        """Drop the cached answers of ``tenant`` (of every tenant if None); the collections
        dropped."""
        return self._store.sync(clear_cache, self._store, tenant)
