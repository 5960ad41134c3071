"""The cache's writes: answers queued, then stored in batches on the store's writing thread.

A Chroma write holds up reads, so answers are not written one by one: the first answer
queued starts a short linger (``WRITE_LINGER_S``), and every answer queued meanwhile is
written with it, one upsert per tenant. Entries whose last turn the semantic layer may
use carry its embedding (computed here when the lookup did not); the others carry one
fixed unit vector. What was written is told to the tenant's key set and semantic index at
once. Every ``_PURGE_EVERY`` answers stored for a tenant, its expired entries are deleted.
A store that cannot keep up does not grow the gateway's memory: past ``_MAX_QUEUED``
waiting answers, further ones are not stored, and count as store errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from localgate.cache.key_sets import KeySets
from localgate.cache.keys import CacheKey
from localgate.cache.semantic_index import SemanticIndex
from localgate.observability import GatewayMetrics
from localgate.vectorstore.embedders import Embedder, Vectors
from localgate.vectorstore.store import VectorStore

__all__ = ["WRITE_LINGER_S", "CacheWriter", "QueuedAnswer"]

logger = logging.getLogger("localgate.cache")

_PURGE_EVERY = 1000
# Answers waiting to be stored beyond this are not stored (a store that cannot keep up
# must not grow the gateway's memory); counted as store errors.
_MAX_QUEUED = 10_000
_CLOSE_WAIT_S = 5.0
WRITE_LINGER_S = 0.25


@dataclass(frozen=True, slots=True)
class QueuedAnswer:
    """An answer on its way into the store."""

    tenant: str
    key: CacheKey
    document: str
    metadata: dict[str, Any]


class CacheWriter:
    """Stores queued answers in batches; ``collection`` opens a tenant's cache collection."""

    def __init__(
        self,
        store: VectorStore,
        embedder: Embedder,
        metrics: GatewayMetrics,
        collection: Callable[[str], Any],
        key_sets: KeySets,
        semantic_index: SemanticIndex,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._metrics = metrics
        self._collection = collection
        self._key_sets = key_sets
        self._semantic_index = semantic_index
        self._queue: list[QueuedAnswer] = []
        self._draining: asyncio.Task[None] | None = None
        self._stored: dict[str, int] = {}

    def put(self, answer: QueuedAnswer) -> bool:
        """Queue an answer to be stored; False (counted) when the queue is full."""
        if len(self._queue) >= _MAX_QUEUED:
            self._metrics.cache_errors.labels("store").inc()
            return False
        self._queue.append(answer)
        if self._draining is None or self._draining.done():
            self._draining = asyncio.get_running_loop().create_task(self._drain())
        return True

    async def close(self) -> None:
        """Give answers still queued a moment to be stored."""
        if self._draining is not None and not self._draining.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._draining), _CLOSE_WAIT_S)

    async def _drain(self) -> None:
        # A write holds up reads in Chroma: gather answers for a moment, write them
        # together, so a burst of misses costs the lookups one pause, not one each.
        await asyncio.sleep(WRITE_LINGER_S)
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                await self._store.write(self._write, batch)
            except Exception:
                logger.exception("cache: %d answers could not be stored", len(batch))
                self._metrics.cache_errors.labels("store").inc(len(batch))
            else:
                self._metrics.cache_stores.inc(len(batch))
                for answer in batch:
                    self._key_sets.add(answer.tenant, (answer.key.exact,))

    # -- on the store's writing thread -----------------------------------------

    def _write(self, batch: list[QueuedAnswer]) -> None:
        """Store a batch: one upsert per tenant."""
        by_tenant: dict[str, dict[str, QueuedAnswer]] = {}
        for answer in batch:  # the same request twice: the later answer wins
            by_tenant.setdefault(answer.tenant, {})[answer.key.exact] = answer
        now = time.time()
        for tenant, items in by_tenant.items():
            answers = list(items.values())
            collection = self._collection(tenant)
            ids = [answer.key.exact for answer in answers]
            vectors = self._vectors([answer.key for answer in answers])
            metadatas = [answer.metadata for answer in answers]
            collection.upsert(
                ids=ids,
                embeddings=vectors,
                documents=[answer.document for answer in answers],
                metadatas=metadatas,
            )
            self._semantic_index.add(tenant, ids, vectors, metadatas)
            stored = self._stored.get(tenant, 0)
            self._stored[tenant] = stored + len(answers)
            if stored // _PURGE_EVERY != self._stored[tenant] // _PURGE_EVERY:
                collection.delete(where={"expires": {"$lt": now}})

    def _vectors(self, keys: list[CacheKey]) -> Vectors:
        """The entries' vectors: the last turn's embedding where the semantic layer may
        use it; elsewhere one fixed unit vector (Chroma needs one; embedding is wasted)."""
        vectors = np.zeros((len(keys), self._embedder.dimensions), dtype=np.float32)
        vectors[:, 0] = 1.0
        missing = [i for i, key in enumerate(keys) if key.semantic and key.vector is None]
        if missing:
            embedded = self._embedder.embed([keys[i].last_turn for i in missing])
            for row, i in enumerate(missing):
                keys[i].vector = embedded[row]
        for i, key in enumerate(keys):
            if key.semantic and key.vector is not None:
                vectors[i] = key.vector
        return vectors
