"""CacheAdmin on a real embedded ChromaDB, filled by the real cache stage."""

from __future__ import annotations

import asyncio
from pathlib import Path

from localgate.admin.cache import CacheAdmin
from localgate.vectorstore.embedders import HashingEmbedder
from localgate.vectorstore.store import VectorStore
from tests.cache.helpers import new_cache, settings_from, store_answer


def test_stats_and_clear_per_tenant(tmp_path: Path) -> None:
    settings = settings_from(tmp_path, "cache: {enabled: true}\n")
    store = VectorStore(settings)

    async def fill() -> None:
        cache = new_cache(settings, store)
        await store_answer(cache, store, "What are the opening hours?")
        await store_answer(cache, store, "Where is the office?")
        await store_answer(cache, store, "Who signs expenses?", tenant="globex")
        await cache.close()

    asyncio.run(fill())
    admin = CacheAdmin(store)
    every = admin.stats()
    of_globex = admin.stats("globex")
    dropped = admin.clear("acme")
    left = admin.stats()
    admin.close()  # not its store: still open
    emptied = admin.clear()
    store.close()

    assert [(s.tenant, s.entries, s.expired) for s in every] == [("acme", 2, 0), ("globex", 1, 0)]
    assert every[0].models == {"models/gemini-2.5-flash": 2}
    assert every[0].embedder == HashingEmbedder().name
    assert [s.tenant for s in of_globex] == ["globex"]
    assert [info.tenant for info in dropped] == ["acme"]
    assert [s.tenant for s in left] == ["globex"]
    assert [info.tenant for info in emptied] == ["globex"]


def test_opened_from_the_settings_it_closes_its_own_store(tmp_path: Path) -> None:
    settings = settings_from(tmp_path, "cache: {enabled: true}\n")

    with CacheAdmin.open(settings) as admin:
        assert admin.stats() == []
        assert admin.clear() == []
