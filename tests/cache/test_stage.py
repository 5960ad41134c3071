"""The cache's key sets, on a real embedded ChromaDB: misses without a trip to the store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localgate.cache.admin import clear_cache
from localgate.cache.stage import VectorCache
from localgate.config import Settings
from localgate.vectorstore.store import VectorStore
from tests.cache.helpers import (
    QUICK,
    T,
    ask,
    look_up,
    new_cache,
    poll,
    settings_from,
    store_answer,
)

CONFIG = "cache:\n  enabled: true\n  semantic: {enabled: true, threshold: 0.95}\n"


class CountingStore(VectorStore):
    """The real store, counting the calls made on its reading thread (lookups)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.reads = 0

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """Count, then run on the reading thread."""
        self.reads += 1
        return await super().run(call, *args)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_from(tmp_path, CONFIG)


@pytest.fixture
def store(settings: Settings) -> Iterator[CountingStore]:
    store = CountingStore(settings)
    yield store
    store.close()


async def lookup(cache: VectorCache, text: str, **request: Any) -> str:
    """The lookup's outcome: ``miss`` or ``hit; layer=...``."""
    ctx = ask(text, **request)
    await look_up(cache, ctx)
    return str(ctx.cache_status)


def test_once_the_keys_are_loaded_a_miss_makes_no_trip_to_the_store(
    settings: Settings, store: CountingStore
) -> None:
    async def scenario() -> None:
        writer = new_cache(settings, store)
        await store_answer(writer, store, "What is the parking policy?")
        await writer.close()
        cache = new_cache(settings, store)

        # Not loaded yet: the store is asked, and the set is loaded in the background.
        reads = store.reads
        assert await lookup(cache, "Never asked before") == "miss"
        assert store.reads == reads + 1
        await poll(lambda: _value(cache.key_sets.size("acme")), lambda size: size == 1)

        reads = store.reads
        never = [await lookup(cache, f"Never asked before, number {i}") for i in range(20)]
        assert never == ["miss"] * 20
        assert store.reads == reads
        # A key the set holds is fetched: a hit is worth its trip.
        assert await lookup(cache, "What is the parking policy?") == "hit; layer=exact"
        assert store.reads == reads + 1
        # Semantic-eligible: the exact key is known to be absent; only the nearest
        # neighbours are asked for (one trip), and they find the stored question.
        assert await lookup(cache, "what is the parking policy", temperature=0) == "miss"
        assert store.reads == reads + 2
        await cache.close()

    asyncio.run(scenario())


def test_own_writes_join_the_key_set(settings: Settings, store: CountingStore) -> None:
    async def scenario() -> None:
        cache = new_cache(settings, store)
        assert await cache.key_sets.load("acme") == 0
        await store_answer(cache, store, "Name three rivers")
        store.touch()  # as a CLI would: the gateway forgets the answers it remembers

        reads = store.reads
        assert cache.key_sets.size("acme") == 1
        assert await lookup(cache, "Name three rivers") == "hit; layer=exact"
        assert store.reads == reads + 1  # from the store, not from memory
        await cache.close()

    asyncio.run(scenario())


def test_an_entry_written_by_another_replica_is_found_after_a_refresh(
    settings: Settings, store: CountingStore
) -> None:
    async def scenario() -> None:
        cache = new_cache(settings, store, refresh_s=QUICK)
        assert await cache.key_sets.load("acme") == 0
        # Another gateway sharing the store (a Chroma server, in production).
        other_store = VectorStore(settings)
        other = new_cache(settings, other_store)
        await store_answer(other, other_store, "Which floor is the canteen on?")

        # A refresh asks for the entries created since the last one.
        await poll(lambda: _known_after_lookup(cache, "Never asked before"), lambda size: size == 1)
        reads = store.reads

        assert await lookup(cache, "Which floor is the canteen on?") == "hit; layer=exact"
        assert store.reads == reads + 1
        await other.close()
        other_store.close()
        await cache.close()

    asyncio.run(scenario())


def test_a_cleared_cache_empties_the_key_set(settings: Settings, store: CountingStore) -> None:
    async def scenario() -> None:
        cache = new_cache(settings, store, refresh_s=QUICK)
        for question in ("Name three oceans", "Name three deserts"):
            await store_answer(cache, store, question)
        assert await cache.key_sets.load("acme") == 2
        # ``localgate cache clear`` in another process.
        cli = VectorStore(settings)
        cli.sync(clear_cache, cli, "acme")
        cli.close()

        # The next refresh finds a new, empty collection.
        await poll(
            lambda: _known_after_lookup(cache, "Never asked before"),
            lambda size: size == 0,
        )
        reads = store.reads
        assert await lookup(cache, "Name three deserts") == "miss"
        assert store.reads == reads
        await cache.close()

    asyncio.run(scenario())


def test_a_tenant_never_hits_another_tenants_entries(
    settings: Settings, store: CountingStore
) -> None:
    async def scenario() -> None:
        writer = new_cache(settings, store)
        await store_answer(writer, store, "What is your refund policy?", tenant="acme")
        await writer.close()
        cache = new_cache(settings, store)
        assert await cache.key_sets.load("acme") == 1
        assert await cache.key_sets.load("globex") == 0

        reads = store.reads
        globex = await lookup(cache, "What is your refund policy?", tenant="globex")
        acme = await lookup(cache, "What is your refund policy?", tenant="acme")

        assert (globex, acme) == ("miss", "hit; layer=exact")
        assert store.reads == reads + 1  # acme's hit only
        assert cache.key_sets.size("globex") == 0
        await cache.close()

    asyncio.run(scenario())


async def _value(value: T) -> T:
    return value


async def _known_after_lookup(cache: VectorCache, text: str) -> int | None:
    """Look up (which keeps the set refreshed), then the set's size."""
    await lookup(cache, text)
    return cache.key_sets.size("acme")
