"""What the cache tests share: settings from a config text, requests as the cache stage
sees them, storing an answer and waiting for it, polling."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from localgate.cache.admin import cache_stats
from localgate.cache.stage import VectorCache
from localgate.config import Settings, load_settings
from localgate.exchange.context import RequestContext
from localgate.gemini.routes import match_route
from localgate.identity import Principal
from localgate.observability import GatewayMetrics
from localgate.policy import PolicySnapshot
from localgate.vectorstore.embedders import HashingEmbedder
from localgate.vectorstore.store import VectorStore
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, with_test_timeouts

T = TypeVar("T")
ROUTE = match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent")
QUICK = 0.05  # a key set's refresh interval in tests that wait for a refresh


def settings_from(tmp_path: Path, config: str) -> Settings:
    """Settings from this configuration text, state under ``tmp_path/data``, with the
    tests' generous infrastructure timeouts where the text sets none."""
    path = tmp_path / "localgate.yaml"
    path.write_text(config)
    settings, _ = load_settings(path, {"LOCALGATE_DATA_DIR": str(tmp_path / "data")})
    return with_test_timeouts(settings)


def ask(text: str, tenant: str = "acme", temperature: float | None = None) -> RequestContext:
    """A redacted generateContent request of ``tenant``, as the cache stage sees it."""
    body: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
    if temperature is not None:
        body["generationConfig"] = {"temperature": temperature}
    return RequestContext(
        request_id=f"{time.monotonic_ns():x}",
        route=ROUTE,
        principal=Principal(tenant, "tests"),
        body=body,
    )


def new_cache(settings: Settings, store: VectorStore, refresh_s: float = 5.0) -> VectorCache:
    """A cache over ``store`` with the builtin embedder."""
    cache = VectorCache(
        settings, store, HashingEmbedder(), GatewayMetrics(), key_refresh_s=refresh_s
    )
    _POLICIES[cache] = PolicySnapshot.build(settings)
    return cache


# The policies of each cache new_cache made, as the identity stage hands them to requests.
_POLICIES: weakref.WeakKeyDictionary[VectorCache, PolicySnapshot] = weakref.WeakKeyDictionary()


async def look_up(cache: VectorCache, ctx: RequestContext) -> None:
    """``cache.lookup(ctx)`` with the request's tenant policy set, as the pipeline does."""
    assert ctx.principal is not None
    ctx.policy = _POLICIES[cache].for_tenant(ctx.principal.tenant)
    await cache.lookup(ctx)


async def store_answer(
    cache: VectorCache,
    store: VectorStore,
    text: str,
    tenant: str = "acme",
    temperature: float | None = None,
) -> None:
    """Ask, have the upstream answer, and wait until the answer is in the store."""
    ctx = ask(text, tenant, temperature)
    await look_up(cache, ctx)
    before = await entries(store, tenant)
    answer = {
        "candidates": [
            {
                "content": {"parts": [{"text": f"echo: {text}"}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "modelVersion": "gemini-2.5-flash",
    }
    cache.keep(ctx, orjson.dumps(answer))
    cache.complete(ctx)
    await poll(lambda: entries(store, tenant), lambda count: count > before)


async def entries(store: VectorStore, tenant: str) -> int:
    """Entries in the tenant's cache."""
    return sum(stats.entries for stats in await store.run(cache_stats, store, tenant))


async def poll(probe: Callable[[], Awaitable[T]], done: Callable[[T], bool]) -> T:
    """Await ``probe()`` until ``done`` holds for its result, or fail at the deadline."""
    deadline = time.monotonic() + INFRASTRUCTURE_TIMEOUT_S
    while True:
        value = await probe()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met before the deadline (last: {value!r})")
        await asyncio.sleep(0.01)
