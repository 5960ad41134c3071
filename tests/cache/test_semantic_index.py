"""The semantic layer's in-memory index, on a real embedded ChromaDB: no nearest-neighbour
query once it is loaded, and never an answer the store's checks would refuse."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from localgate.cache.admin import clear_cache
from localgate.cache.semantic_index import _Entries
from localgate.cache.stage import VectorCache
from localgate.config import Settings
from localgate.vectorstore.store import VectorStore
from tests.cache import helpers as cache_helpers
from tests.cache.helpers import QUICK, ask, look_up, new_cache, poll, settings_from

PARKING = "What is the parking policy for visitors on weekends?"
CONFIG = "cache:\n  enabled: true\n  semantic: {enabled: true, threshold: 0.9%s}\n"


class _CountingCollection:
    """A Chroma collection that counts nearest-neighbour queries and reads."""

    def __init__(self, collection: Any, counts: dict[str, int]) -> None:
        self._collection = collection
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._collection, name)
        if name in ("query", "get"):
            self._counts[name] += 1
        return attribute


class CountingStore(VectorStore):
    """The real store, counting the queries and reads made on the cache's collections."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.counts = {"query": 0, "get": 0}

    def collection(self, tenant: str, purpose: str, *args: Any, **kwargs: Any) -> Any:
        """The real collection, wrapped."""
        found = super().collection(tenant, purpose, *args, **kwargs)
        return _CountingCollection(found, self.counts) if found is not None else None


def _settings(tmp_path: Path, extra: str = "") -> Settings:
    return settings_from(tmp_path, CONFIG % extra)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return _settings(tmp_path)


@pytest.fixture
def store(settings: Settings) -> Iterator[CountingStore]:
    store = CountingStore(settings)
    yield store
    store.close()


async def store_answer(
    cache: VectorCache, store: VectorStore, text: str, tenant: str = "acme"
) -> None:
    """Ask at temperature 0 (semantic-eligible), answer, and wait until it is stored."""
    await cache_helpers.store_answer(cache, store, text, tenant, temperature=0)


async def semantic(cache: VectorCache, text: str, tenant: str = "acme") -> str:
    """A semantic-eligible lookup's outcome: ``miss`` or ``hit; layer=...``."""
    ctx = ask(text, tenant, temperature=0)
    await look_up(cache, ctx)
    return str(ctx.cache_status)


async def loaded(cache: VectorCache, tenant: str = "acme") -> int:
    """Load both of the tenant's indexes, as its first lookups do in the background."""
    await cache.key_sets.load(tenant)
    return await cache.semantic_index.load(tenant)


def test_a_semantic_hit_needs_no_nearest_neighbour_query_once_loaded(
    settings: Settings, store: CountingStore
) -> None:
    async def scenario() -> None:
        writer = new_cache(settings, store)
        await store_answer(writer, store, PARKING)
        await writer.close()
        cache = new_cache(settings, store)

        # Not loaded yet: Chroma is asked for the nearest entries, as without an index.
        queries = store.counts["query"]
        assert await semantic(cache, PARKING.rstrip("?")) == "hit; layer=semantic"
        assert store.counts["query"] == queries + 1

        assert await loaded(cache) == 1
        queries, gets = store.counts["query"], store.counts["get"]
        assert await semantic(cache, PARKING.rstrip("?")) == "hit; layer=semantic"
        assert await semantic(cache, "Which rivers flow through Paris?") == "miss"
        assert store.counts["query"] == queries
        assert store.counts["get"] == gets + 1  # the hit's answer, read by id
        await cache.close()

    asyncio.run(scenario())


def test_own_writes_join_the_index(settings: Settings, store: CountingStore) -> None:
    async def scenario() -> None:
        cache = new_cache(settings, store)
        assert await loaded(cache) == 0
        await store_answer(cache, store, PARKING)
        store.touch()  # the gateway forgets the answers it remembers

        queries = store.counts["query"]
        assert cache.semantic_index.size("acme") == 1
        assert await semantic(cache, PARKING.rstrip("?")) == "hit; layer=semantic"
        assert store.counts["query"] == queries
        await cache.close()

    asyncio.run(scenario())


def test_an_entry_written_by_another_replica_is_a_hit_after_a_refresh(
    settings: Settings, store: CountingStore
) -> None:
    async def scenario() -> None:
        cache = new_cache(settings, store, refresh_s=QUICK)
        assert await loaded(cache) == 0
        other_store = VectorStore(settings)
        other = new_cache(settings, other_store)
        await store_answer(other, other_store, PARKING)

        async def known() -> int | None:
            await semantic(cache, "Never asked before")  # keeps the index refreshed
            return cache.semantic_index.size("acme")

        await poll(known, lambda size: size == 1)
        queries = store.counts["query"]
        assert await semantic(cache, PARKING.rstrip("?")) == "hit; layer=semantic"
        assert store.counts["query"] == queries
        await other.close()
        other_store.close()
        await cache.close()

    asyncio.run(scenario())


def test_a_near_miss_with_another_number_or_placeholder_still_misses(
    settings: Settings, store: CountingStore
) -> None:
    async def scenario() -> None:
        cache = new_cache(settings, store)
        await store_answer(cache, store, "Show the orders of customer 1024 over 100 yuan.")
        await store_answer(cache, store, "What is the phone number of [PERSON_1] at work?")
        assert await loaded(cache) == 2
        store.touch()

        queries = store.counts["query"]
        outcomes = [
            await semantic(cache, "Show the orders of customer 1024 over 500 yuan."),
            await semantic(cache, "What is the phone number of [PERSON_2] at work?"),
            await semantic(cache, "Show the orders of customer 1024 over 100 yuan"),
            await semantic(cache, "What is the phone number of [PERSON_1] at work"),
        ]
        assert outcomes == ["miss", "miss", "hit; layer=semantic", "hit; layer=semantic"]
        assert store.counts["query"] == queries
        await cache.close()

    asyncio.run(scenario())


def test_a_tenant_never_hits_another_tenants_entries(
    settings: Settings, store: CountingStore
) -> None:
    async def scenario() -> None:
        cache = new_cache(settings, store)
        await store_answer(cache, store, PARKING, tenant="acme")
        assert await loaded(cache, "acme") == 1
        assert await loaded(cache, "globex") == 0
        store.touch()

        gets = store.counts["get"]
        assert await semantic(cache, PARKING.rstrip("?"), tenant="globex") == "miss"
        assert store.counts["get"] == gets  # nothing of acme's was even read
        assert await semantic(cache, PARKING.rstrip("?"), tenant="acme") == "hit; layer=semantic"
        await cache.close()

    asyncio.run(scenario())


def test_the_index_keeps_the_newest_entries_up_to_its_cap(tmp_path: Path) -> None:
    settings = _settings(tmp_path, ", max_index_entries: 2")
    store = CountingStore(settings)
    questions = [
        PARKING,
        "Which floor is the canteen on, and when does it open?",
        "How do I reset my VPN password when working from home?",
        "Where can I find the travel expense claim form?",
    ]

    async def scenario() -> None:
        cache = new_cache(settings, store)
        for question in questions[:3]:
            await store_answer(cache, store, question)
        assert await loaded(cache) == 2  # the oldest was left out
        store.touch()

        assert await semantic(cache, questions[0].rstrip("?")) == "miss"
        assert await semantic(cache, questions[2].rstrip("?")) == "hit; layer=semantic"
        await store_answer(cache, store, questions[3])  # drops the oldest it holds
        store.touch()
        assert cache.semantic_index.size("acme") == 2
        assert await semantic(cache, questions[1].rstrip("?")) == "miss"
        assert await semantic(cache, questions[3].rstrip("?")) == "hit; layer=semantic"
        await cache.close()

    try:
        asyncio.run(scenario())
    finally:
        store.close()


def test_a_cleared_cache_empties_the_index(settings: Settings, store: CountingStore) -> None:
    async def scenario() -> None:
        cache = new_cache(settings, store, refresh_s=QUICK)
        await store_answer(cache, store, PARKING)
        assert await loaded(cache) == 1
        cli = VectorStore(settings)
        cli.sync(clear_cache, cli, "acme")
        cli.close()

        async def known() -> int | None:
            await semantic(cache, "Never asked before")
            return cache.semantic_index.size("acme")

        await poll(known, lambda size: size == 0)
        assert await semantic(cache, PARKING.rstrip("?")) == "miss"
        await cache.close()

    asyncio.run(scenario())


def test_an_entry_gone_from_the_store_costs_a_miss(
    settings: Settings, store: CountingStore
) -> None:
    async def scenario() -> None:
        cache = new_cache(settings, store)
        await store_answer(cache, store, PARKING)
        assert await loaded(cache) == 1

        def delete_all() -> None:
            collection = store.collection("acme", "cache", "terms512", "builtin")
            collection.delete(ids=collection.get(include=[])["ids"])

        await store.write(delete_all)  # behind the index's back (another replica, say)
        gets = store.counts["get"]
        assert cache.semantic_index.size("acme") == 1
        assert await semantic(cache, PARKING.rstrip("?")) == "miss"
        assert store.counts["get"] == gets + 1  # the candidate was looked for, not found
        await cache.close()

    asyncio.run(scenario())


def _entry(number: int) -> str:
    return hashlib.sha256(str(number).encode()).hexdigest()


def test_entries_keep_the_newest_and_forget_replaced_vectors() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(300, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    fingerprint = "f" * 64

    def metadata(created: float) -> dict[str, Any]:
        return {"fingerprint": fingerprint, "semantic": True, "created": created, "expires": 1e12}

    entries = _Entries(16, "collection", capacity=100)
    for start in range(0, 300, 50):  # as pages are read while loading
        rows = range(start, start + 50)
        ids, metadatas = [_entry(i) for i in rows], [metadata(i) for i in rows]
        entries.add(ids, vectors[start : start + 50], metadatas)
    while not entries.seal_step():
        pass

    def nearest(vector: Any) -> str | None:
        found = entries.nearest(vector, 1, 0.99, fingerprint, now=0.0)
        return found[0].entry if found else None

    assert len(entries) == 100
    assert nearest(vectors[299]) == _entry(299)
    assert nearest(vectors[150]) is None  # among the oldest, left out
    # Entry 299 written again with another vector: the old one is no longer found.
    entries.add([_entry(299)], vectors[:1], [metadata(1000.0)])
    assert nearest(vectors[299]) is None
    assert nearest(vectors[0]) == _entry(299)
    assert entries.nearest(vectors[0], 1, 0.99, "e" * 64, now=0.0) == []  # another conversation
    assert len(entries) == 100  # the oldest was dropped to make room
