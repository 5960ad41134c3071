"""The cache stage: repeated requests answered from the local store, keyed on the REDACTED request.

Keying on the redacted request is what makes the cache correct: the upstream only ever
saw placeholders, so its answer depends on nothing but the redacted request, and a
cached answer restored with THIS request's placeholder table is the answer this
request would have got. The store holds the upstream's answer as it came back
(placeholders, not values), so it never holds a value the redactor removed.

Two layers, both per tenant and per embedding space:

- exact: the hash of the whole redacted request (model, contents, system instruction,
  tools, generation and safety settings, retrieved context);
- semantic: for requests whose settings make a replay sensible (temperature at most
  ``cache.semantic.max_temperature``, no tools unless allowed), the last turn is
  compared by embedding similarity, while everything else must match exactly: the
  earlier turns, the system instruction and settings, and the numbers and
  placeholders of the last turn (so "orders over 100" never gets the answer for
  "orders under 500", and a question about [PERSON_2] never the one about [PERSON_1]).

An entry is served only before its TTL ends and while its model version is the newest
the gateway has seen from the upstream for that model. A failing store never fails
the request: the lookup counts as a miss and the error is logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from localgate.config import CacheSettings, Settings
from localgate.frontdoor.routes import GeminiMethod
from localgate.observability import GatewayMetrics
from localgate.pipeline.context import RequestContext
from localgate.upstream.base import UnaryReply
from localgate.vector.embedders import Embedder, Vectors
from localgate.vector.store import CollectionInfo, VectorStore, VectorStoreUnavailable

__all__ = [
    "CacheKey",
    "CacheStats",
    "VectorCache",
    "cache_key",
    "cache_stats",
    "clear_cache",
    "last_turn_text",
    "merge_stream",
]

logger = logging.getLogger("localgate.vector")

_PURPOSE = "cache"
_CACHEABLE = frozenset({GeminiMethod.GENERATE_CONTENT, GeminiMethod.STREAM_GENERATE_CONTENT})
# Placeholders and numbers: the parts of a question a paraphrase must not change.
_ANCHORS = re.compile(r"\[[A-Z][A-Z0-9_]*_[0-9]+\]|[0-9]+(?:[.,][0-9]+)*")
# Finish reasons of an answer worth replaying; anything else (SAFETY, RECITATION,
# MAX_TOKENS, ...) is served once and not kept.
_COMPLETE = frozenset({"STOP"})
_PURGE_EVERY = 1000
# Answers waiting to be stored beyond this are not stored (a store that cannot keep up
# must not grow the gateway's memory); counted as store errors.
_MAX_QUEUED = 10_000
_CLOSE_WAIT_S = 5.0
_LINGER_S = 0.25
# The key sets (``_KeyIndex``). Hex digits of an exact key kept in memory (60 bits).
_SHORT_KEY_DIGITS = 15
# Ids per page when a tenant's set is loaded: Chroma sorts the whole collection for
# each page, so fewer, larger pages are faster (100,000 ids: about 1 s in all).
_KEY_PAGE = 20_000
# How often a set asks for the entries created since; it is trusted (its "absent"
# acted on) for this many refresh intervals after its last refresh started.
_KEY_REFRESH_S = 5.0
_KEY_TRUSTED_FOR = 3
# An entry reaches the store after its ``created`` time (the write's linger, the queue,
# clock differences between replicas): refreshes look back this far. Later ones are
# read by the next full reload, which also forgets entries deleted elsewhere.
_KEY_LATE_S = 60.0
_KEY_RELOAD_S = 600.0
# A set's loads and refreshes keep the background thread busy 1/_KEY_REST of the time
# at most: a slower store is asked less often.
_KEY_REST = 100


@dataclass(slots=True)
class CacheKey:
    """What identifies a request to each layer."""

    model: str
    exact: str
    fingerprint: str
    last_turn: str
    semantic: bool
    vector: Vectors | None = None


def cache_key(
    body: dict[str, Any],
    model: str,
    settings: CacheSettings,
    kept: Collection[str] = (),
) -> CacheKey:
    """The keys of a (redacted) generateContent body.

    ``kept`` are personal data the policy let through in clear (``allow``): like
    placeholders and numbers, they must be the same, in the same order, for a
    semantic hit.
    """
    exact = _digest({"model": model, "body": body})
    contents = body.get("contents")
    turns = contents if isinstance(contents, list) else []
    last = turns[-1] if turns and isinstance(turns[-1], dict) else {}
    parts = last.get("parts")
    parts = parts if isinstance(parts, list) else []
    last_turn = last_turn_text(body)
    rest = {name: value for name, value in body.items() if name != "contents"}
    fingerprint = _digest(
        {
            "model": model,
            "rest": rest,
            "earlier": turns[:-1],
            "role": last.get("role"),
            "other_parts": [part for part in parts if not _is_text(part)],
            "anchors": _anchors(last_turn, kept),
        }
    )
    return CacheKey(
        model=model,
        exact=exact,
        fingerprint=fingerprint,
        last_turn=last_turn,
        semantic=bool(last_turn.strip()) and _replayable(body, settings),
    )


def last_turn_text(body: dict[str, Any]) -> str:
    """The text parts of the conversation's last turn (thoughts included), joined."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents or not isinstance(contents[-1], dict):
        return ""
    parts = contents[-1].get("parts")
    if not isinstance(parts, list):
        return ""
    return "\n".join(part["text"] for part in parts if _is_text(part))


def _anchors(text: str, kept: Collection[str]) -> list[str]:
    """Placeholders, numbers and values let through, in the order they appear."""
    found = [(match.start(), match.group()) for match in _ANCHORS.finditer(text)]
    for value in kept:
        at = text.find(value)
        while at >= 0:
            found.append((at, value))
            at = text.find(value, at + 1)
    return [token for _, token in sorted(found)]


def _is_text(part: Any) -> bool:
    return (
        isinstance(part, dict)
        and set(part) <= {"text", "thought"}
        and isinstance(part.get("text"), str)
    )


def _replayable(body: dict[str, Any], settings: CacheSettings) -> bool:
    config = _field(body, "generationConfig", "generation_config")
    temperature = config.get("temperature") if isinstance(config, dict) else None
    # No temperature means the model's default, which samples: not a replay.
    if not isinstance(temperature, int | float) or temperature > settings.semantic.max_temperature:
        return False
    return settings.semantic.allow_tools or not body.get("tools")


def _field(body: dict[str, Any], camel: str, snake: str) -> Any:
    return body.get(camel, body.get(snake))


def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def merge_stream(events: list[Any]) -> dict[str, Any]:
    """One ``GenerateContentResponse`` holding what a stream's events said, in order."""
    merged: dict[str, Any] = {}
    candidates: dict[int, dict[str, Any]] = {}
    for event in events:
        if not isinstance(event, dict):
            continue
        for name, value in event.items():
            if name != "candidates":
                merged[name] = value  # usageMetadata, modelVersion, ...: the last wins
        for candidate in event.get("candidates") or ():
            if not isinstance(candidate, dict):
                continue
            index = candidate.get("index", 0)
            slot = candidates.setdefault(index if isinstance(index, int) else 0, {})
            for name, value in candidate.items():
                if name == "content" and isinstance(value, dict):
                    _merge_content(slot, value)
                else:
                    slot[name] = value
    if candidates:
        merged["candidates"] = [candidates[index] for index in sorted(candidates)]
    return merged


def _merge_content(slot: dict[str, Any], content: dict[str, Any]) -> None:
    merged = slot.setdefault("content", {})
    for name, value in content.items():
        if name != "parts":
            merged[name] = value
    parts: list[Any] = merged.setdefault("parts", [])
    for part in content.get("parts") or ():
        previous: dict[str, Any] = parts[-1] if parts else {}
        if _is_text(part) and _is_text(previous) and previous.get("thought") == part.get("thought"):
            parts[-1] = {**previous, "text": previous["text"] + part["text"]}
        else:
            parts.append(part)


class _Recent:
    """Entries this gateway stored or read lately, in memory, for exact hits.

    A hit among them needs no trip to the store: no thread hop, and no wait behind a
    Chroma write (which holds reads up for tens of milliseconds). Bounded in number, and
    in age, so that a ``cache clear`` made through another gateway of a shared server
    reaches this one within ``max_age_s`` (an embedded store's clear, at once).
    """

    def __init__(self, size: int = 2048, max_age_s: float = 60.0) -> None:
        self._size = size
        self._max_age_s = max_age_s
        self._entries: OrderedDict[tuple[str, str], tuple[float, dict[str, Any], str]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()  # filled from the store's threads, read on the loop

    def get(self, tenant: str, entry: str) -> tuple[dict[str, Any], str] | None:
        """The entry's metadata and answer (JSON), if remembered and not too old."""
        with self._lock:
            found = self._entries.get((tenant, entry))
            if found is None:
                return None
            if time.monotonic() - found[0] > self._max_age_s:
                del self._entries[(tenant, entry)]
                return None
            self._entries.move_to_end((tenant, entry))
            return found[1], found[2]

    def put(self, tenant: str, entry: str, metadata: dict[str, Any], document: str) -> None:
        """Remember an entry, forgetting the least recently used beyond the size."""
        with self._lock:
            self._entries[(tenant, entry)] = (time.monotonic(), metadata, document)
            self._entries.move_to_end((tenant, entry))
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._entries.clear()

    def forget(self, tenant: str) -> None:
        """Forget one tenant's entries (its cache was cleared)."""
        with self._lock:
            for remembered in [key for key in self._entries if key[0] == tenant]:
                del self._entries[remembered]


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
class _KeySet:
    """The exact keys in one tenant's cache collection, as this gateway last read them."""

    keys: set[int] | None = None  # None until the first load is complete
    collection: str = ""  # the id of the collection they were read from
    loading: set[int] | None = None  # what a load in progress has read so far
    refreshed_at: float = -math.inf  # monotonic: when the last load or refresh started
    since: float = 0.0  # wall clock: the next refresh asks for entries created from here
    refresh_due: float = -math.inf  # monotonic
    reload_due: float = -math.inf  # monotonic
    pause_s: float = _KEY_REFRESH_S
    task: asyncio.Task[None] | None = None

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


class _KeyIndex:
    """Per tenant, the exact keys in the store, so that a miss needs no trip to it.

    A tenant's set is loaded on the background thread on its first lookup (ids only, in
    pages); it then learns this gateway's writes, and every few seconds asks the store for
    the entries created since the last time, so entries written by other replicas of a
    shared Chroma server are found too. Only "absent" is acted on: a present key is still
    fetched. A key missing by mistake costs a miss (the answer is then stored again); one
    kept by mistake costs a fetch, after which it is dropped. A set that has not been
    refreshed lately (an idle tenant), or not loaded yet, is not used: the store is asked.
    """

    def __init__(
        self,
        store: VectorStore,
        collection: Callable[[str], Any],
        metrics: GatewayMetrics,
        cleared: Callable[[str], None],
        refresh_s: float,
    ) -> None:
        self._store = store
        self._collection = collection
        self._metrics = metrics
        self._cleared = cleared
        self._refresh_s = refresh_s
        self._sets: dict[str, _KeySet] = {}

    def maintain(self, tenant: str) -> None:
        """Start loading or refreshing the tenant's set, when that is due (on its lookups)."""
        keys = self._sets.get(tenant)
        if keys is None:
            keys = self._sets[tenant] = _KeySet(pause_s=self._refresh_s)
        if keys.task is not None and not keys.task.done():
            return
        now = time.monotonic()
        if keys.keys is None or now >= keys.reload_due:
            if now >= keys.refresh_due:  # after a failure, no sooner than a refresh
                keys.task = asyncio.get_running_loop().create_task(self._load(tenant, keys))
        elif now >= keys.refresh_due:
            keys.task = asyncio.get_running_loop().create_task(self._refresh(tenant, keys))

    def holds(self, tenant: str, entry: str) -> bool | None:
        """Whether the tenant's store may hold ``entry``; None when the set cannot tell."""
        keys = self._sets.get(tenant)
        if keys is None or keys.keys is None:
            return None
        if time.monotonic() - keys.refreshed_at > _KEY_TRUSTED_FOR * keys.pause_s:
            return None  # not refreshed lately: entries of other replicas may be missing
        return _short_key(entry) in keys.keys

    def add(self, tenant: str, entries: Iterable[str]) -> None:
        """Note entries this gateway wrote."""
        keys = self._sets.get(tenant)
        if keys is not None:  # else its load will read them
            keys.add(_short_keys(entries))

    def discard(self, tenant: str, entry: str) -> None:
        """Drop an entry the store turned out not to hold."""
        keys, short = self._sets.get(tenant), _short_key(entry)
        if keys is not None and short is not None:
            keys.discard(short)

    def size(self, tenant: str) -> int | None:
        """How many keys the tenant's set holds; None until it is loaded."""
        keys = self._sets.get(tenant)
        return None if keys is None or keys.keys is None else len(keys.keys)

    def refresh_soon(self) -> None:
        """Another process changed the store: refresh every set on its next lookup."""
        for keys in self._sets.values():
            keys.refresh_due = -math.inf

    async def load(self, tenant: str) -> int:
        """Load the tenant's set now, after any load or refresh under way; its size."""
        keys = self._sets.setdefault(tenant, _KeySet(pause_s=self._refresh_s))
        if keys.task is not None and not keys.task.done():
            await asyncio.shield(keys.task)
        keys.task = asyncio.get_running_loop().create_task(self._load(tenant, keys))
        await asyncio.shield(keys.task)
        return len(keys.keys or ())

    async def close(self) -> None:
        """Stop loading and refreshing."""
        tasks = [keys.task for keys in self._sets.values() if keys.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _load(self, tenant: str, keys: _KeySet) -> None:
        """Read every id of the tenant's collection, then use the new set."""
        started, wall = time.monotonic(), time.time()
        found: set[int] = set()
        keys.loading = found  # this gateway's writes meanwhile are added to it
        try:
            collection = await self._read_all(tenant, found)
        except VectorStoreUnavailable as exc:
            self._failed(keys, "be loaded", exc.reason)
            return
        finally:
            keys.loading = None
        if keys.collection and collection != keys.collection:
            self._cleared(tenant)
        keys.keys, keys.collection = found, collection
        keys.refreshed_at, keys.since = started, wall - _KEY_LATE_S
        took = time.monotonic() - started
        keys.reload_due = started + max(_KEY_RELOAD_S, _KEY_REST * took)
        keys.refresh_due = started + keys.pause_s

    async def _read_all(self, tenant: str, found: set[int]) -> str:
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
            if len(entries) < _KEY_PAGE:
                return collection
            offset += _KEY_PAGE

    async def _refresh(self, tenant: str, keys: _KeySet) -> None:
        """Add the entries created since the last refresh; notice a cleared collection."""
        started, wall = time.monotonic(), time.time()
        try:
            collection, entries = await self._store.background(
                self._created_since, tenant, keys.since
            )
        except VectorStoreUnavailable as exc:
            self._failed(keys, "be refreshed", exc.reason)
            return
        if collection != keys.collection:
            # Dropped and made again since the last refresh (``localgate cache clear``, here
            # or on another replica): what it holds was created since, and has just been read.
            keys.keys, keys.collection = set(), collection
            self._cleared(tenant)
        keys.add(_short_keys(entries))
        keys.refreshed_at, keys.since = started, wall - _KEY_LATE_S
        took = time.monotonic() - started
        keys.pause_s = max(self._refresh_s, _KEY_REST * took)
        keys.refresh_due = started + keys.pause_s

    def _failed(self, keys: _KeySet, what: str, reason: str) -> None:
        """Count and log a failure, and try again a refresh interval later."""
        logger.warning("cache: a key set could not %s: %s", what, reason)
        self._metrics.cache_errors.labels("keys").inc()
        keys.refresh_due = time.monotonic() + keys.pause_s

    # -- on the store's background thread -------------------------------------

    def _ids(self, tenant: str, offset: int) -> tuple[str, list[str]]:
        """One page of the collection's ids, and the collection's id."""
        collection = self._collection(tenant)
        found = collection.get(include=[], limit=_KEY_PAGE, offset=offset)
        return str(collection.id), list(found["ids"])

    def _created_since(self, tenant: str, since: float) -> tuple[str, list[str]]:
        """The ids of the entries created at ``since`` or later, and the collection's id."""
        collection = self._collection(tenant)
        found = collection.get(where={"created": {"$gte": since}}, include=[])
        return str(collection.id), list(found["ids"])


@dataclass(slots=True)
class _Ticket:
    """A miss that may be stored once its answer is complete."""

    tenant: str
    key: CacheKey
    settings: CacheSettings
    events: list[bytes] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Entry:
    """An answer on its way into the store."""

    tenant: str
    key: CacheKey
    document: str
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Hit:
    layer: str
    entry: str
    similarity: float
    answer: Any


@dataclass(frozen=True, slots=True)
class _Found:
    """What a trip to the store found: a hit, and whether the exact key was absent."""

    hit: _Hit | None
    absent: bool = False


class VectorCache:
    """The cache stage on a ChromaDB store."""

    def __init__(
        self,
        settings: Settings,
        store: VectorStore,
        embedder: Embedder,
        metrics: GatewayMetrics,
        *,
        key_refresh_s: float = _KEY_REFRESH_S,
    ) -> None:
        self._settings = settings
        self._store = store
        self._embedder = embedder
        self._metrics = metrics
        self._policies: dict[str, CacheSettings] = {}
        # Per model, each modelVersion the upstream answered with and when it was first
        # seen: an entry is stale once another version has appeared after it was stored
        # (so a rollout that alternates two versions does not empty the cache). Learnt
        # from traffic: a restart forgets it; the TTL still bounds an answer's age.
        self._versions: dict[str, dict[str, float]] = {}
        # Answers waiting to be stored, written in batches on the store's writing thread.
        self._queue: list[_Entry] = []
        self._draining: asyncio.Task[None] | None = None
        self._stored: dict[str, int] = {}
        self._recent = _Recent()
        self._keys = _KeyIndex(store, self._collection, metrics, self._recent.forget, key_refresh_s)
        self._generation = store.disk_generation()

    # -- request path --------------------------------------------------------

    async def lookup(self, ctx: RequestContext) -> UnaryReply | None:
        """A stored answer for this request (placeholders not yet restored), or None."""
        route = ctx.route
        if route is None or route.method not in _CACHEABLE or ctx.principal is None:
            return None
        if not isinstance(ctx.body, dict) or route.model is None:
            return None
        tenant = ctx.principal.tenant
        policy = self._policy(tenant)
        if not policy.enabled or not (policy.exact or policy.semantic.enabled):
            return None
        control = (ctx.cache_control or "").strip().lower()
        if control == "bypass":
            ctx.cache_status = "bypass"
            return None
        key = cache_key(ctx.body, route.model, policy, ctx.allowed_values)
        ctx.cache = _Ticket(tenant, key, policy)
        ctx.cache_status = "miss"
        if control == "refresh":
            ctx.cache_status = "refresh"
            return None
        started = time.perf_counter()
        try:
            if policy.exact:
                self._keys.maintain(tenant)
            hit = self._recent_hit(tenant, key, policy)
            if hit is None:
                hit = await self._stored_hit(tenant, key, policy)
        except Exception:
            logger.exception("cache lookup failed for request %s", ctx.request_id)
            self._metrics.cache_errors.labels("lookup").inc()
            return None
        finally:
            self._metrics.cache_lookup_seconds.observe(time.perf_counter() - started)
        if hit is None:
            return None
        ctx.cache = None
        ctx.cache_status = f"hit; layer={hit.layer}"
        ctx.served_from = {
            "cache": hit.layer,
            "entry": hit.entry,
            "similarity": round(hit.similarity, 4),
        }
        return UnaryReply(body=hit.answer, headers={})

    def keep(self, ctx: RequestContext, answer: bytes) -> None:
        """Note one upstream answer or stream event, serialised as the upstream sent it.

        Bytes, not the object: restoration rewrites the answer in place, and only the
        answer as sent (placeholders, never values) may be stored.
        """
        ticket = ctx.cache
        if isinstance(ticket, _Ticket):
            ticket.events.append(answer)

    def complete(self, ctx: RequestContext) -> None:
        """The upstream's answer is complete and good: learn its version, store it."""
        route = ctx.route
        if route is not None and route.method in _CACHEABLE and route.model and ctx.model_version:
            self._versions.setdefault(route.model, {}).setdefault(ctx.model_version, time.time())
        ticket = ctx.cache
        ctx.cache = None
        if not isinstance(ticket, _Ticket) or not ticket.events:
            return
        if ctx.answer_masked:
            # The answer scan masked personal data the model produced: the client got the
            # masked text, and the raw answer must not be kept.
            return
        events = [orjson.loads(event) for event in ticket.events]
        answer = events[0] if len(events) == 1 else merge_stream(events)
        if not _worth_keeping(answer):
            return
        if len(self._queue) >= _MAX_QUEUED:
            self._metrics.cache_errors.labels("store").inc()
            return
        now = time.time()
        entry = _Entry(
            tenant=ticket.tenant,
            key=ticket.key,
            document=orjson.dumps(answer).decode(),
            metadata={
                "fingerprint": ticket.key.fingerprint,
                "semantic": ticket.key.semantic,
                "model": ticket.key.model,
                "version": ctx.model_version or "",
                "created": now,
                "expires": now + ticket.settings.ttl_s,
            },
        )
        # Served from memory at once, before the (lingering) write reaches the store.
        self._recent.put(entry.tenant, entry.key.exact, entry.metadata, entry.document)
        self._queue.append(entry)
        if self._draining is None or self._draining.done():
            self._draining = asyncio.get_running_loop().create_task(self._drain())

    async def load_keys(self, tenant: str) -> int:
        """Load the tenant's key set now and return its size (lookups load it by themselves,
        in the background; the benchmark and tests wait for it here)."""
        return await self._keys.load(tenant)

    def known_keys(self, tenant: str) -> int | None:
        """How many exact keys the tenant's key set holds; None until it is loaded."""
        return self._keys.size(tenant)

    async def close(self) -> None:
        """Give answers still queued a moment to be stored; stop the key sets' upkeep."""
        await self._keys.close()
        if self._draining is not None and not self._draining.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._draining), _CLOSE_WAIT_S)

    def _recent_hit(self, tenant: str, key: CacheKey, policy: CacheSettings) -> _Hit | None:
        """An exact hit among the entries this gateway stored or read lately."""
        generation = self._store.disk_generation()
        if generation != self._generation:
            # Another process changed the store (cache clear): forget what we remember.
            self._generation = generation
            self._recent.clear()
            self._keys.refresh_soon()
        if not policy.exact:
            return None
        found = self._recent.get(tenant, key.exact)
        if found is None or not self._fresh(found[0], key.model, time.time()):
            return None
        self._metrics.cache_lookups.labels("exact", "hit").inc()
        return _Hit("exact", key.exact, 1.0, orjson.loads(found[1]))

    async def _stored_hit(self, tenant: str, key: CacheKey, policy: CacheSettings) -> _Hit | None:
        """A hit from the store; an exact key its key set says is absent is not asked for."""
        known = self._keys.holds(tenant, key.exact) if policy.exact else None
        if known is False:
            self._metrics.cache_lookups.labels("exact", "miss").inc()
        exact = policy.exact and known is not False
        if not exact and not (policy.semantic.enabled and key.semantic):
            return None  # no trip to the store: a miss in microseconds
        found = await self._store.run(self._find, tenant, key, policy, exact)
        if found.absent:
            self._keys.discard(tenant, key.exact)
        return found.hit

    # -- on the store's thread -------------------------------------------------

    def _collection(self, tenant: str) -> Any:
        return self._store.collection(tenant, _PURPOSE, self._embedder.space, self._embedder.name)

    def _find(self, tenant: str, key: CacheKey, policy: CacheSettings, exact: bool) -> _Found:
        collection = self._collection(tenant)
        now = time.time()
        absent = False
        if exact:
            found = collection.get(ids=[key.exact], include=["metadatas", "documents"])
            absent = not found["ids"]
            if not absent:
                metadata, document = found["metadatas"][0], found["documents"][0]
                # A stale entry is not deleted here (no writes on the reading thread):
                # this request's answer will replace it.
                if self._fresh(metadata, key.model, now):
                    self._metrics.cache_lookups.labels("exact", "hit").inc()
                    self._recent.put(tenant, key.exact, metadata, document)
                    return _Found(_Hit("exact", key.exact, 1.0, orjson.loads(document)))
            self._metrics.cache_lookups.labels("exact", "miss").inc()
        if not (policy.semantic.enabled and key.semantic):
            return _Found(None, absent)
        return _Found(self._similar(collection, key, policy, now), absent)

    def _similar(
        self, collection: Any, key: CacheKey, policy: CacheSettings, now: float
    ) -> _Hit | None:
        """The semantic layer: the nearest entries, then the closest of this conversation."""
        key.vector = self._embedder.embed([key.last_turn])[0]
        # Distances only: most lookups find no candidate above the threshold, and read
        # nothing more. Chroma returns fewer than n_results when the collection is smaller.
        found = collection.query(
            query_embeddings=[key.vector],
            n_results=policy.semantic.candidates,
            include=["distances"],
        )
        close = [
            (entry, 1.0 - float(distance))
            for entry, distance in zip(found["ids"][0], found["distances"][0], strict=True)
            if 1.0 - float(distance) >= policy.semantic.threshold
        ]
        hit = self._closest(collection, key, close, now) if close else None
        self._metrics.cache_lookups.labels("semantic", "hit" if hit else "miss").inc()
        return hit

    def _closest(
        self, collection: Any, key: CacheKey, close: list[tuple[str, float]], now: float
    ) -> _Hit | None:
        """The most similar of ``close`` whose conversation is this one's and which is fresh.

        One read for all of them, answers included: there are rarely more than one or two.
        """
        found = collection.get(
            ids=[entry for entry, _ in close], include=["metadatas", "documents"]
        )
        stored = dict(
            zip(found["ids"], zip(found["metadatas"], found["documents"], strict=True), strict=True)
        )
        for entry, similarity in sorted(close, key=lambda candidate: -candidate[1]):
            metadata, document = stored.get(entry, (None, ""))
            if (
                metadata is not None
                and metadata.get("fingerprint") == key.fingerprint
                and metadata.get("semantic") is True
                and self._fresh(metadata, key.model, now)
            ):
                return _Hit("semantic", entry, similarity, orjson.loads(document))
        return None

    def _fresh(self, metadata: dict[str, Any], model: str, now: float) -> bool:
        if float(metadata.get("expires", 0)) <= now:
            return False
        version = metadata.get("version") or None
        created = float(metadata.get("created", 0))
        return version is None or not any(
            other != version and first_seen > created
            for other, first_seen in self._versions.get(model, {}).items()
        )

    async def _drain(self) -> None:
        # A write holds up reads in Chroma: gather answers for a moment, write them
        # together, so a burst of misses costs the lookups one pause, not one each.
        await asyncio.sleep(_LINGER_S)
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                await self._store.write(self._write, batch)
            except Exception:
                logger.exception("cache: %d answers could not be stored", len(batch))
                self._metrics.cache_errors.labels("store").inc(len(batch))
            else:
                self._metrics.cache_stores.inc(len(batch))
                for entry in batch:
                    self._keys.add(entry.tenant, (entry.key.exact,))

    def _write(self, batch: list[_Entry]) -> None:
        """Store a batch: one upsert per tenant (on the store's writing thread)."""
        by_tenant: dict[str, dict[str, _Entry]] = {}
        for entry in batch:  # the same request twice: the later answer wins
            by_tenant.setdefault(entry.tenant, {})[entry.key.exact] = entry
        now = time.time()
        for tenant, items in by_tenant.items():
            entries = list(items.values())
            collection = self._collection(tenant)
            collection.upsert(
                ids=[entry.key.exact for entry in entries],
                embeddings=self._vectors([entry.key for entry in entries]),
                documents=[entry.document for entry in entries],
                metadatas=[entry.metadata for entry in entries],
            )
            stored = self._stored.get(tenant, 0)
            self._stored[tenant] = stored + len(entries)
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

    def _policy(self, tenant: str) -> CacheSettings:
        policy = self._policies.get(tenant)
        if policy is None:
            policy = self._policies[tenant] = self._settings.cache_for(tenant)
        return policy


def _worth_keeping(answer: Any) -> bool:
    """A complete answer with something in it: every candidate finished, none empty."""
    if not isinstance(answer, dict):
        return False
    feedback = answer.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason"):
        return False
    candidates = answer.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        return False
    return all(
        isinstance(candidate, dict)
        and candidate.get("finishReason") in _COMPLETE
        and _has_content(candidate)
        for candidate in candidates
    )


def _has_content(candidate: dict[str, Any]) -> bool:
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return isinstance(parts, list) and any(
        isinstance(part, dict) and (part.get("text") or "functionCall" in part) for part in parts
    )


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
