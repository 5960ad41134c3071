"""The vector layer as the gateway opens it: store, embedder, cache, retrieval, embeddings."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from localgate.cache.stage import VectorCache
from localgate.config import Settings
from localgate.observability import GatewayMetrics
from localgate.rag.library import Library
from localgate.rag.retrieval import LocalRetrieval
from localgate.upstream.local_embeddings import LocalEmbeddings
from localgate.vectorstore.embedders import Embedder, build_embedder
from localgate.vectorstore.store import VectorStore

__all__ = ["VectorLayer", "needs_vector_layer"]

logger = logging.getLogger("localgate.vectorstore")


def needs_vector_layer(settings: Settings) -> bool:
    """Whether any tenant (or the defaults) uses the cache, retrieval or local embeddings."""
    tenants = list(settings.tenants)
    return (
        settings.cache.enabled
        or settings.rag.enabled
        or settings.local_embeddings
        or any(settings.cache_for(tenant).enabled for tenant in tenants)
        or any(settings.rag_for(tenant).enabled for tenant in tenants)
        or any(settings.local_embeddings_for(tenant) for tenant in tenants)
    )


@dataclass(frozen=True, slots=True)
class VectorLayer:
    """Everything built on the local store and embedder, opened once per gateway."""

    store: VectorStore
    embedder: Embedder
    cache: VectorCache
    retrieval: LocalRetrieval
    local_embeddings: LocalEmbeddings

    @classmethod
    def open(cls, settings: Settings, metrics: GatewayMetrics) -> VectorLayer | None:
        """The layer, or None when nothing in the configuration uses it."""
        if not needs_vector_layer(settings):
            return None
        embedder = build_embedder(settings.embeddings)
        store = VectorStore(settings, isolate=True)
        store.open_soon()
        logger.info("vector layer: store %s, embedder %s", store.where, embedder.name)
        return cls(
            store=store,
            embedder=embedder,
            cache=VectorCache(settings, store, embedder, metrics),
            retrieval=LocalRetrieval(store, Library(settings, store, embedder), metrics),
            local_embeddings=LocalEmbeddings(embedder),
        )

    async def close(self) -> None:
        """Finish pending cache writes and close the store."""
        await self.cache.close()
        self.local_embeddings.close()
        self.store.close()
