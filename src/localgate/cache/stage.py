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

The keys are made in ``cache_keys``. Three mechanisms spare lookups a trip to the store:
the tenant's key sets (``key_sets``) tell an exact miss at once, the answers this
gateway stored or read lately (``recent``) serve an exact hit from memory, and the
tenant's semantic index (``semantic_index``) finds a semantic layer's candidates in
memory, so the store is asked only to read one that passes. Answers are stored by the
cache's writer (``writer``), in batches, after the client has them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from localgate.cache.key_sets import KeySets
from localgate.cache.keys import CacheKey, cache_key
from localgate.cache.mirror import REFRESH_S
from localgate.cache.recent import RecentAnswers
from localgate.cache.semantic_index import SemanticIndex
from localgate.cache.writer import CacheWriter, QueuedAnswer
from localgate.config import CacheSettings, Settings
from localgate.exchange.context import RequestContext
from localgate.exchange.replies import UnaryReply
from localgate.gemini.routes import GeminiMethod
from localgate.gemini.streams import merge_stream
from localgate.observability import GatewayMetrics
from localgate.vectorstore.embedders import Embedder, HashingEmbedder, Vectors
from localgate.vectorstore.store import VectorStore

__all__ = ["CACHE_PURPOSE", "VectorCache"]

logger = logging.getLogger("localgate.cache")

# The store's collections of the cache (the retrieval library's are "rag").
CACHE_PURPOSE = "cache"
_PURPOSE = CACHE_PURPOSE
_CACHEABLE = frozenset({GeminiMethod.GENERATE_CONTENT, GeminiMethod.STREAM_GENERATE_CONTENT})
# Finish reasons of an answer worth replaying; anything else (SAFETY, RECITATION,
# MAX_TOKENS, ...) is served once and not kept.
_COMPLETE = frozenset({"STOP"})


@dataclass(slots=True)
class _Ticket:
    """A miss that may be stored once its answer is complete."""

    tenant: str
    key: CacheKey
    settings: CacheSettings
    events: list[bytes] = field(default_factory=list)


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
        key_refresh_s: float = REFRESH_S,
    ) -> None:
        self._settings = settings
        self._store = store
        self._embedder = embedder
        self._metrics = metrics
        # Per model, each modelVersion the upstream answered with and when it was first
        # seen: an entry is stale once another version has appeared after it was stored
        # (so a rollout that alternates two versions does not empty the cache). Learnt
        # from traffic: a restart forgets it; the TTL still bounds an answer's age.
        self._versions: dict[str, dict[str, float]] = {}
        self._recent = RecentAnswers()
        # The tenants' in-memory copies of the store: lookups load them by themselves, in
        # the background; the benchmark and tests load and measure them here.
        self.key_sets = KeySets(
            store, self._collection, metrics, self._recent.forget, key_refresh_s
        )
        self.semantic_index = SemanticIndex(
            store,
            self._collection,
            metrics,
            embedder.dimensions,
            settings.cache.semantic.max_index_entries,
            key_refresh_s,
        )
        # Answers waiting to be stored, written in batches on the store's writing thread.
        self._writer = CacheWriter(
            store, embedder, metrics, self._collection, self.key_sets, self.semantic_index
        )
        # The built-in embedder takes about 0.2 ms: a semantic miss is then answered on the
        # event loop, with no thread hop. A model's embedding runs on the store's thread.
        self._embeds_inline = isinstance(embedder, HashingEmbedder)
        self._generation = store.disk_generation()

    # -- request path --------------------------------------------------------

    async def lookup(self, ctx: RequestContext) -> UnaryReply | None:
        """A stored answer for this request (placeholders not yet restored), or None."""
        route = ctx.route
        if route is None or route.method not in _CACHEABLE or ctx.principal is None:
            return None
        if not isinstance(ctx.body, dict) or route.model is None:
            return None
        if ctx.policy is None:
            return None
        tenant = ctx.principal.tenant
        policy = ctx.policy.cache
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
                self.key_sets.maintain(tenant)
            if policy.semantic.enabled and key.semantic:
                self.semantic_index.maintain(tenant)
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
        now = time.time()
        entry = QueuedAnswer(
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
        if self._writer.put(entry):
            # Served from memory at once, before the (lingering) write reaches the store.
            self._recent.put(entry.tenant, entry.key.exact, entry.metadata, entry.document)

    async def close(self) -> None:
        """Give answers still queued a moment to be stored; stop the indexes' upkeep."""
        await self.key_sets.close()
        await self.semantic_index.close()
        await self._writer.close()

    def _recent_hit(self, tenant: str, key: CacheKey, policy: CacheSettings) -> _Hit | None:
        """An exact hit among the entries this gateway stored or read lately."""
        generation = self._store.disk_generation()
        if generation != self._generation:
            # Another process changed the store (cache clear): forget what we remember.
            self._generation = generation
            self._recent.clear()
            self.key_sets.refresh_soon()
            self.semantic_index.refresh_soon()
        if not policy.exact:
            return None
        found = self._recent.get(tenant, key.exact)
        if found is None or not self._fresh(found[0], key.model, time.time()):
            return None
        self._metrics.cache_lookups.labels("exact", "hit").inc()
        return _Hit("exact", key.exact, 1.0, orjson.loads(found[1]))

    async def _stored_hit(self, tenant: str, key: CacheKey, policy: CacheSettings) -> _Hit | None:
        """A hit from the store; an exact key its key set says is absent is not asked for."""
        known = self.key_sets.holds(tenant, key.exact) if policy.exact else None
        if known is False:
            self._metrics.cache_lookups.labels("exact", "miss").inc()
        exact = policy.exact and known is not False
        semantic = policy.semantic.enabled and key.semantic
        if not exact and not semantic:
            return None  # no trip to the store: a miss in microseconds
        close = None
        if semantic and not exact and self._embeds_inline:
            close = self._nearby(tenant, key, policy, time.time())
            if close == []:
                self._metrics.cache_lookups.labels("semantic", "miss").inc()
                return None  # no candidate in the semantic index: no trip either
        found = await self._store.run(self._find, tenant, key, policy, exact, close)
        if found.absent:
            self.key_sets.discard(tenant, key.exact)
        return found.hit

    # -- on the store's thread -------------------------------------------------

    def _collection(self, tenant: str) -> Any:
        return self._store.collection(tenant, _PURPOSE, self._embedder.space, self._embedder.name)

    def _find(
        self,
        tenant: str,
        key: CacheKey,
        policy: CacheSettings,
        exact: bool,
        close: list[tuple[str, float]] | None = None,
    ) -> _Found:
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
        return _Found(self._similar(tenant, collection, key, policy, now, close), absent)

    def _similar(
        self,
        tenant: str,
        collection: Any,
        key: CacheKey,
        policy: CacheSettings,
        now: float,
        close: list[tuple[str, float]] | None,
    ) -> _Hit | None:
        """The semantic layer: the nearest entries, then the closest of this conversation."""
        threshold: float | None = policy.semantic.threshold
        if close is None:
            close = self._nearby(tenant, key, policy, now)
        if close is None:  # no semantic index yet: ask the store
            # Distances only: most lookups find no candidate above the threshold, and read
            # nothing more. Chroma returns fewer than n_results when the collection is smaller.
            found = collection.query(
                query_embeddings=[self._vector(key)],
                n_results=policy.semantic.candidates,
                include=["distances"],
            )
            close = [
                (entry, 1.0 - float(distance))
                for entry, distance in zip(found["ids"][0], found["distances"][0], strict=True)
                if 1.0 - float(distance) >= policy.semantic.threshold
            ]
            threshold = None  # Chroma's similarities are exact
        hit = self._closest(collection, key, close, now, threshold) if close else None
        self._metrics.cache_lookups.labels("semantic", "hit" if hit else "miss").inc()
        return hit

    def _vector(self, key: CacheKey) -> Vectors:
        if key.vector is None:
            key.vector = self._embedder.embed([key.last_turn])[0]
        return key.vector

    def _nearby(
        self, tenant: str, key: CacheKey, policy: CacheSettings, now: float
    ) -> list[tuple[str, float]] | None:
        """Candidates from the tenant's semantic index: near enough (approximately), of this
        conversation and fresh; None when the index cannot tell."""
        found = self.semantic_index.nearest(
            tenant,
            self._vector(key),
            key.fingerprint,
            policy.semantic.candidates,
            policy.semantic.threshold,
            now,
        )
        if found is None:
            return None
        return [
            (candidate.entry, candidate.similarity)
            for candidate in found
            if self._fresh(candidate.metadata, key.model, now)
        ]

    def _closest(
        self,
        collection: Any,
        key: CacheKey,
        close: list[tuple[str, float]],
        now: float,
        threshold: float | None = None,
    ) -> _Hit | None:
        """The most similar of ``close`` whose conversation is this one's and which is fresh.

        One read for all of them, answers included: there are rarely more than one or two.
        With a ``threshold``, the similarities are the index's approximations: they are
        computed again from the stored vectors, and the threshold applied to those.
        """
        include = ["metadatas", "documents"] + (["embeddings"] if threshold is not None else [])
        found = collection.get(ids=[entry for entry, _ in close], include=include)
        stored = dict(
            zip(found["ids"], zip(found["metadatas"], found["documents"], strict=True), strict=True)
        )
        if threshold is not None:
            vector = self._vector(key)
            exact = {
                entry: float(np.dot(np.asarray(stored_vector, dtype=np.float32), vector))
                for entry, stored_vector in zip(found["ids"], found["embeddings"], strict=True)
            }
            close = [
                (entry, exact[entry])
                for entry, _ in close
                if entry in exact and exact[entry] >= threshold
            ]
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
