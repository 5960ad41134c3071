"""1. Lookup latency: ``VectorCache.lookup`` timed in this process, over a filled store.

An embedded Chroma store is filled in bulk with entries shaped as the cache writes
them, for a tenant with 1,000 and one with 100,000 entries, per embedder; the cache's
key set and semantic index of each tenant are loaded (as a gateway's first lookup of a
tenant starts them); a second cache without a semantic index answers the semantic cases
as before it (Chroma's nearest-neighbour query); then every lookup, every store call a
lookup makes, and every embedding is timed in one shuffled sequence, so background load
falls on all of them alike.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench.cache.corpus import Question, filler_questions
from bench.cache.options import BUILTIN, MINILM, Options, embedders
from bench.cache.progress import progress
from bench.cache.prompts import MODEL, ROUTE, Redactor, ask, default_settings
from bench.servers import BenchError
from localgate.cache.keys import cache_key
from localgate.cache.stage import VectorCache
from localgate.config import CacheSettings, EmbeddingSettings
from localgate.exchange.context import RequestContext
from localgate.identity import Principal
from localgate.observability import GatewayMetrics
from localgate.policy import TenantPolicy
from localgate.vectorstore.embedders import Embedder, Vectors, build_embedder
from localgate.vectorstore.store import VectorStore

__all__ = [
    "EXACT_CASES",
    "FALLBACK_CASES",
    "LOOKUP_CASES",
    "LOOKUP_THRESHOLD",
    "MISS_CASES",
    "STORE_CALLS",
    "LookupBench",
    "LookupResults",
]

MODEL_VERSION = "gemini-2.5-flash"  # what the fake upstream says in its answers
LOOKUP_THRESHOLD = 0.90
BULK_TIMEOUT_S = 600.0
LOOKUP_CASES = (
    "exact hit, semantic-eligible",
    "exact hit, non-semantic",
    "semantic hit",
    "semantic-eligible miss",
    "non-semantic miss",
)
# The semantic cases answered without the in-memory index (before it is loaded), by a
# cache whose ``cache.semantic.max_index_entries`` is 0: the same probes.
FALLBACK_CASES = {
    "semantic hit, no index (Chroma query)": "semantic hit",
    "semantic-eligible miss, no index (Chroma query)": "semantic-eligible miss",
}
STORE_CALLS = (
    "get by id",
    "query, 8 nearest",
    "the same, distances only",
    "ids created in the last minute",
    "upsert one entry",
)
# The cases the exact layer alone (the default) meets: no embedding, no nearest neighbours.
EXACT_CASES = ("exact hit, semantic-eligible", "exact hit, non-semantic", "non-semantic miss")
# What a lookup adds to a request it cannot answer, which then goes upstream: the "adds"
# target's cases. A hit replaces the upstream's call; the speed-up rows judge those.
MISS_CASES = ("semantic-eligible miss", "non-semantic miss")
_BATCH = 5000  # below the embedded Chroma's limit of 5,461 records per call


@dataclass(slots=True)
class LookupResults:
    """Timings of the lookup benchmark (seconds), keyed by (embedder, entries, case)."""

    sizes: tuple[int, int]
    lookups: dict[tuple[str, int, str], list[float]] = field(default_factory=dict)
    outcomes: dict[tuple[str, int, str], dict[str, int]] = field(default_factory=dict)
    store_calls: dict[tuple[str, int, str], list[float]] = field(default_factory=dict)
    embedding: dict[str, list[float]] = field(default_factory=dict)
    fill_s: dict[tuple[str, int], float] = field(default_factory=dict)
    keys_s: dict[tuple[str, int], float] = field(default_factory=dict)  # loading a key set
    index_s: dict[tuple[str, int], float] = field(default_factory=dict)  # a semantic index
    index_bytes: dict[tuple[str, int], int] = field(default_factory=dict)
    mixed: dict[str, int] = field(default_factory=dict)  # entries given mixed vectors


@dataclass(frozen=True, slots=True)
class _Call:
    """One call to time: a lookup, a store call, or an embedding."""

    embedder: str
    size: int  # 0 for an embedding
    case: str
    body: dict[str, Any] | None = None
    text: str = ""
    entry: str = ""
    vector: Vectors | None = None


class LookupBench:
    """``VectorCache.lookup`` on a tenant with 1,000 and 100,000 entries, per embedder."""

    def __init__(
        self, folder: Path, options: Options, groups: Sequence[Sequence[Question]]
    ) -> None:
        self.options = options
        self.settings = default_settings(
            folder / "lookup",
            "cache:\n  enabled: true\n"
            f"  semantic: {{enabled: true, threshold: {LOOKUP_THRESHOLD}}}\n",
        )
        self.unindexed = default_settings(
            folder / "lookup-unindexed",
            "cache:\n  enabled: true\n"
            f"  semantic: {{enabled: true, threshold: {LOOKUP_THRESHOLD}, "
            "max_index_entries: 0}\n",
        )
        # Bulk inserts take seconds: a budget far beyond the lookups' own. The store in a
        # process of its own, as the gateway opens it.
        self.store = VectorStore(self.settings, timeout_s=BULK_TIMEOUT_S, isolate=True)
        self.metrics = GatewayMetrics()
        self.redactor = Redactor(self.settings)
        self.groups = groups
        self.results = LookupResults(sizes=(options.small, options.entries))
        self._embedders: dict[str, Embedder] = {}
        self._caches: dict[str, VectorCache] = {}
        self._unindexed: dict[str, VectorCache] = {}
        self._collections: dict[tuple[str, int], Any] = {}

    def run(self) -> LookupResults:
        """Fill the collections, then time every call in one shuffled sequence."""
        try:
            return asyncio.run(self._run())
        finally:
            self.store.close()

    async def _run(self) -> LookupResults:
        options = self.options
        texts = filler_questions(options.entries)
        # One entry in five was asked without a temperature: exact layer only.
        bodies = [ask(text, temperature=0 if i % 5 else None) for i, text in enumerate(texts)]
        rng = random.Random(11)
        # Probes come from the first entries: both sizes hold them, with their real vectors.
        head = range(min(options.small, options.pool))
        eligible = [i for i in head if i % 5]
        exact = [bodies[i] for i in rng.sample(eligible, min(options.probes, len(eligible)))]
        plain = [i for i in head if not i % 5]
        exact_plain = [bodies[i] for i in rng.sample(plain, min(options.probes, len(plain)))]
        chosen = rng.sample(eligible, min(options.probes, len(eligible)))
        novel = [self.redactor.text(q.text) for group in self.groups for q in group]
        novel = rng.sample(novel, min(options.probes, len(novel)))
        probes = {
            "exact hit, semantic-eligible": exact,
            "exact hit, non-semantic": exact_plain,
            "semantic hit": [ask(_loosened(texts[i])) for i in chosen],
            "semantic-eligible miss": [ask(text) for text in novel],
            "non-semantic miss": [ask(text, temperature=None) for text in novel],
        }
        calls: list[_Call] = []
        for name in embedders(options):
            embedder = self._embedder(name)
            self._caches[name] = VectorCache(self.settings, self.store, embedder, self.metrics)
            self._unindexed[name] = VectorCache(self.unindexed, self.store, embedder, self.metrics)
            vectors = self._vectors(name, embedder, texts)
            query_vectors = embedder.embed(novel)
            for size in self.results.sizes:
                await self._fill(name, size, embedder, bodies[:size], texts[:size], vectors[:size])
                for case, bodies_of_case in probes.items():
                    calls += [_Call(name, size, case, body=body) for body in bodies_of_case]
                for case, indexed in FALLBACK_CASES.items():
                    calls += [_Call(name, size, case, body=body) for body in probes[indexed]]
                for index, vector in enumerate(query_vectors):
                    stored = cache_key(exact[index % len(exact)], MODEL, self._policy).exact
                    new = cache_key(ask(f"{novel[index]} ({index})"), MODEL, self._policy).exact
                    calls += [
                        _Call(name, size, "get by id", entry=stored),
                        _Call(name, size, "query, 8 nearest", vector=vector),
                        _Call(name, size, "the same, distances only", vector=vector),
                        _Call(name, size, "ids created in the last minute"),
                        _Call(
                            name,
                            size,
                            "upsert one entry",
                            text=novel[index],
                            entry=new,
                            vector=vector,
                        ),
                    ]
            calls += [_Call(name, 0, "embedding", text=text) for text in novel]
        for name in embedders(options):  # last, so that no set has gone stale meanwhile
            for size in self.results.sizes:
                await self._load_keys(name, size)
                await self._load_index(name, size)
        random.Random(13).shuffle(calls)
        progress(f"lookup: timing {len(calls):,} calls in one shuffled sequence")
        for call in calls:
            await self._time(call)
        for cache in (*self._caches.values(), *self._unindexed.values()):
            await cache.close()
        return self.results

    @property
    def _policy(self) -> CacheSettings:
        return self.settings.cache_for("bench")

    def _embedder(self, name: str) -> Embedder:
        if name == MINILM:
            model = EmbeddingSettings(
                provider="sentence-transformers", model_path=self.options.minilm
            )
            embedder = build_embedder(model)
        else:
            embedder = build_embedder(EmbeddingSettings())
        self._embedders[name] = embedder
        return embedder

    def _vectors(self, name: str, embedder: Embedder, texts: Sequence[str]) -> Vectors:
        """Real vectors for the first ``pool`` texts; the builtin embedder's for all of them.

        MiniLM embeds a few hundred texts a second here: beyond the pool, an entry gets a
        mixture of two real vectors (plus a little noise), so the index holds 100,000
        vectors spread like MiniLM's without embedding 100,000 texts.
        """
        started = time.perf_counter()
        if name == BUILTIN:
            vectors = embedder.embed(texts)
        else:
            pool = min(self.options.pool, len(texts))
            real = embedder.embed(texts[:pool])
            rng = np.random.default_rng(5)
            count = len(texts) - pool
            first, second = rng.integers(0, pool, count), rng.integers(0, pool, count)
            weight = rng.uniform(0.5, 1.0, (count, 1)).astype(np.float32)
            noise = rng.normal(0.0, 0.01, (count, real.shape[1])).astype(np.float32)
            mixed = weight * real[first] + (1 - weight) * real[second] + noise
            mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
            vectors = np.concatenate([real, mixed]).astype(np.float32)
            self.results.mixed[name] = count
        elapsed = time.perf_counter() - started
        progress(f"lookup: {name}: {len(texts):,} vectors in {elapsed:.0f} s")
        return vectors

    async def _fill(
        self,
        name: str,
        size: int,
        embedder: Embedder,
        bodies: Sequence[dict[str, Any]],
        texts: Sequence[str],
        vectors: Vectors,
    ) -> None:
        """Bulk insert entries with the ids, metadata and documents ``VectorCache`` writes."""
        started = time.perf_counter()
        tenant = _tenant(name, size)
        store = self.store
        collection = await store.run(
            store.collection, tenant, "cache", embedder.space, embedder.name
        )
        self._collections[(name, size)] = collection
        policy = self._policy
        now = time.time()
        for start in range(0, len(bodies), _BATCH):
            keys = [cache_key(body, MODEL, policy) for body in bodies[start : start + _BATCH]]
            documents = [
                orjson.dumps(_fake_answer(t)).decode() for t in texts[start : start + _BATCH]
            ]
            metadatas = [
                {
                    "fingerprint": key.fingerprint,
                    "semantic": key.semantic,
                    "model": key.model,
                    "version": MODEL_VERSION,
                    "created": now,
                    "expires": now + policy.ttl_s,
                }
                for key in keys
            ]
            chunk = vectors[start : start + _BATCH]
            await store.write(
                _add, collection, [key.exact for key in keys], chunk, documents, metadatas
            )
        stored = await store.run(_cache_size, store, tenant)
        if stored != len(bodies):
            raise BenchError(f"{tenant}: {stored} cache entries stored, {len(bodies)} expected")
        elapsed = time.perf_counter() - started
        self.results.fill_s[(name, size)] = elapsed
        progress(f"lookup: {name}: {size:,} entries inserted in {elapsed:.0f} s")

    async def _load_keys(self, name: str, size: int) -> None:
        """Load the tenant's key set, as a gateway does in the background on its first lookup."""
        started = time.perf_counter()
        known = await self._caches[name].key_sets.load(_tenant(name, size))
        await self._unindexed[name].key_sets.load(_tenant(name, size))
        if known != size:
            raise BenchError(f"{_tenant(name, size)}: {known} keys loaded, {size} expected")
        elapsed = time.perf_counter() - started
        self.results.keys_s[(name, size)] = elapsed
        progress(f"lookup: {name}: {size:,} keys loaded in {elapsed:.1f} s")

    async def _load_index(self, name: str, size: int) -> None:
        """Load the tenant's semantic index, as a gateway does on its first semantic lookup."""
        tenant = _tenant(name, size)
        cache = self._caches[name]
        started = time.perf_counter()
        known = await cache.semantic_index.load(tenant)
        elapsed = time.perf_counter() - started
        semantic = size - len(range(0, size, 5))  # one entry in five is exact-only
        if known != semantic:
            raise BenchError(f"{tenant}: {known} semantic entries loaded, {semantic} expected")
        self.results.index_s[(name, size)] = elapsed
        self.results.index_bytes[(name, size)] = cache.semantic_index.memory_bytes(tenant) or 0
        progress(f"lookup: {name}: semantic index of {known:,} entries loaded in {elapsed:.1f} s")

    async def _time(self, call: _Call) -> None:
        results = self.results
        key = (call.embedder, call.size, call.case)
        if call.case == "embedding":
            embedder = self._embedders[call.embedder]
            elapsed = await self.store.run(_timed, embedder.embed, [call.text])
            results.embedding.setdefault(call.embedder, []).append(elapsed)
        elif call.case in STORE_CALLS:
            collection = self._collections[(call.embedder, call.size)]
            if call.case == "get by id":
                elapsed = await self.store.run(_timed, _get, collection, call.entry)
            elif call.case == "query, 8 nearest":
                elapsed = await self.store.run(_timed, _query, collection, call.vector)
            elif call.case == "the same, distances only":
                elapsed = await self.store.run(_timed, _distances, collection, call.vector)
            elif call.case == "ids created in the last minute":
                elapsed = await self.store.background(_timed, _created_lately, collection)
            else:
                entry = (call.entry, call.vector, call.text, self._policy.ttl_s)
                elapsed = await self.store.write(_timed, _upsert, collection, *entry)
            results.store_calls.setdefault(key, []).append(elapsed)
        else:
            ctx = RequestContext(
                request_id=f"{len(results.lookups):016x}",
                route=ROUTE,
                principal=Principal(_tenant(call.embedder, call.size), "bench"),
                body=call.body,
            )
            fallback = call.case in FALLBACK_CASES
            caches = self._unindexed if fallback else self._caches
            ctx.policy = TenantPolicy.resolve(self.unindexed if fallback else self.settings, None)
            started = time.perf_counter()
            await caches[call.embedder].lookup(ctx)
            results.lookups.setdefault(key, []).append(time.perf_counter() - started)
            outcome = results.outcomes.setdefault(key, {})
            status = ctx.cache_status or "none"
            outcome[status] = outcome.get(status, 0) + 1


def _tenant(embedder: str, size: int) -> str:
    return f"bench-{embedder.lower()}-{size}"


def _add(
    collection: Any, ids: list[str], vectors: Vectors, documents: list[str], metadatas: Any
) -> None:
    collection.add(ids=ids, embeddings=vectors, documents=documents, metadatas=metadatas)


def _cache_size(store: VectorStore, tenant: str) -> int:
    return sum(info.count for info in store.collections(tenant=tenant, purpose="cache"))


def _get(collection: Any, entry: str) -> None:
    collection.get(ids=[entry], include=["metadatas", "documents"])


def _upsert(collection: Any, entry: str, vector: Vectors, text: str, ttl_s: float) -> None:
    """One entry written as ``CacheWriter._write`` writes it (a semantic one)."""
    now = time.time()
    collection.upsert(
        ids=[entry],
        embeddings=[vector],
        documents=[orjson.dumps(_fake_answer(text)).decode()],
        metadatas=[
            {
                "fingerprint": entry,
                "semantic": True,
                "model": MODEL,
                "version": MODEL_VERSION,
                "created": now,
                "expires": now + ttl_s,
            }
        ],
    )


def _distances(collection: Any, vector: Vectors) -> None:
    """The nearest-neighbour query as the semantic layer makes it."""
    collection.query(query_embeddings=[vector], n_results=8, include=["distances"])


def _query(collection: Any, vector: Vectors) -> None:
    """The same with the candidates' metadata (as the semantic layer made it before)."""
    collection.query(query_embeddings=[vector], n_results=8, include=["metadatas", "distances"])


def _created_lately(collection: Any) -> None:
    """A key set's refresh: the ids of the entries created in the last minute."""
    collection.get(where={"created": {"$gte": time.time() - 60}}, include=[])


def _timed(call: Any, *args: Any) -> float:
    """Seconds ``call(*args)`` took (timed on the store's thread, not the hop to it)."""
    started = time.perf_counter()
    call(*args)
    return time.perf_counter() - started


def _loosened(text: str) -> str:
    """The same question without its closing punctuation: a semantic hit for both embedders."""
    return text.rstrip("?？.。")


def _fake_answer(text: str) -> dict[str, Any]:
    """An answer shaped like the fake upstream's to ``text``."""
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": f"echo: {text}"}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 5, "totalTokenCount": 13},
        "modelVersion": MODEL_VERSION,
        "responseId": "fake-response",
    }
