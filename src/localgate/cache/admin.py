"""What operators do with the cache outside requests: count its entries, clear it."""

from __future__ import annotations

import time
from dataclasses import dataclass

from localgate.cache.stage import CACHE_PURPOSE as _PURPOSE
from localgate.vectorstore.store import CollectionInfo, VectorStore

__all__ = ["CacheStats", "cache_stats", "clear_cache"]


@dataclass(frozen=True, slots=True)
class CacheStats:
    """One tenant's cache in one embedding space, as ``localgate cache stats`` shows it."""

    tenant: str
    embedder: str
    entries: int
    expired: int
    models: dict[str, int]


def cache_stats(store: VectorStore, tenant: str | None = None) -> list[CacheStats]:
    """Entries per tenant and embedder (call on the store's thread: ``store.sync``)."""
    now = time.time()
    found = []
    for info in store.collections(tenant=tenant, purpose=_PURPOSE):
        collection = store.collection(info.tenant, _PURPOSE, info.space, info.embedder)
        metadatas = collection.get(include=["metadatas"])["metadatas"] or []
        models: dict[str, int] = {}
        expired = 0
        for metadata in metadatas:
            model = str(metadata.get("model", "?"))
            models[model] = models.get(model, 0) + 1
            expired += float(metadata.get("expires", 0)) <= now
        found.append(CacheStats(info.tenant, info.embedder, len(metadatas), expired, models))
    return found


def clear_cache(store: VectorStore, tenant: str | None = None) -> list[CollectionInfo]:
    """Drop the cache collections (of one tenant, or all); returns what was dropped.

    Call on the store's thread (``store.sync``).
    """
    dropped = store.collections(tenant=tenant, purpose=_PURPOSE)
    for info in dropped:
        store.drop(info.name)
    return dropped
