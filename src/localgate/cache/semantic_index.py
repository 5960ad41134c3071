"""The semantic layer's index: per tenant, its semantic entries' vectors in memory.

Chroma's nearest-neighbour query costs about 2 ms whatever the collection holds (per-call
overhead), more than a whole lookup may add. Each gateway therefore keeps, per tenant, an
HNSW graph (faiss, vectors stored as float16, inner product: the vectors are unit length,
so this is the cosine similarity, 1 - Chroma's cosine distance) of the entries the semantic
layer may serve, with what the semantic check needs besides the vector: the first 64 bits of
the entry's id and fingerprint, its creation and expiry times and its model version. A
semantic lookup then asks the store nothing unless a candidate passes; the answer is read
from the store by id, and checked again there (fingerprint, the threshold on the stored
float32 vector, freshness), so a stale or missing vector costs a miss, never a wrong answer.

A tenant's index is loaded on the store's background thread on its first semantic lookup
(ids, vectors and metadata of the semantic entries, in pages; the graph is then built in
steps), like the exact layer's key sets (``key_sets``): meanwhile, and whenever it has not
been refreshed lately, lookups ask Chroma as before. It learns this gateway's writes at
once, asks the store every few seconds for the entries created since, is read again whole
every ten minutes (forgetting entries deleted elsewhere) and is emptied when the collection
was made anew (``localgate cache clear``). It holds at most ``max_entries`` per tenant: past
that the oldest are dropped from the search at once, and their memory is freed by the next
full reload, which keeps the newest.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from localgate.cache.mirror import REFRESH_S, TenantMirror, Upkeep
from localgate.observability import GatewayMetrics
from localgate.vectorstore.embedders import Vectors
from localgate.vectorstore.store import VectorStore, VectorStoreUnavailable

__all__ = ["Candidate", "SemanticIndex"]

# Entries per page when a tenant's index is loaded (a page of 512-d vectors is 20 MB).
_PAGE = 10_000
# Vectors added to a graph being built per call on the background thread, and to a graph
# in use per hold of its lock (a search waits for at most that many).
_BUILD_STEP = 10_000
_ADD_STEP = 8
# HNSW: links per node, and the search breadth when building and when searching. On the
# benchmark's 80,000 semantic entries (many near-duplicates), a search of breadth 128 misses
# a stored question's own entry 1.6% of the time (64: 3.6%), about as often as Chroma's query.
_LINKS = 16
_BUILD_BREADTH = 64
_SEARCH_BREADTH = 128
# The float16 similarity may be this far below the float32 one: candidates this close to
# the threshold are read, and the threshold applied to the stored vector.
MARGIN = 0.005
_ID_BYTES = 32


@dataclass(frozen=True, slots=True)
class Candidate:
    """An entry whose vector is close to the question's, with its approximate similarity."""

    entry: str
    similarity: float
    created: float
    expires: float
    version: str

    @property
    def metadata(self) -> dict[str, Any]:
        """The fields of the entry's metadata that freshness depends on."""
        return {"created": self.created, "expires": self.expires, "version": self.version}


def _prefix(digest: Any) -> int | None:
    """The first 64 bits of a hex digest (an id or a fingerprint); None if it is not one."""
    if not isinstance(digest, str) or len(digest) != 2 * _ID_BYTES:
        return None
    try:
        return int(digest[:16], 16)
    except ValueError:
        return None


class _Entries:
    """One tenant's semantic entries: their graph, and per slot what the check needs.

    Slot ``i`` is the graph's vector ``i``. Until sealed (while loading) the vectors wait in a
    buffer, so that only the newest ``capacity`` are put into the graph. Used from several
    threads: every method takes the lock; additions also take their own, so that they go
    into the graph in the order of their slots, a few at a time between searches.
    """

    def __init__(self, dimensions: int, collection: str, capacity: int) -> None:
        faiss = _faiss()
        self.collection = collection
        self._dimensions = dimensions
        self._capacity = capacity
        graph = faiss.IndexHNSWSQ(
            dimensions, faiss.ScalarQuantizer.QT_fp16, _LINKS, faiss.METRIC_INNER_PRODUCT
        )
        graph.hnsw.efConstruction = _BUILD_BREADTH
        self._graph: Any = graph
        self._lock = threading.Lock()
        self._adding = threading.Lock()
        self._count = 0  # slots used, live or dropped
        self._live = 0
        self._in_graph = 0  # slots whose vector is in the graph (all, once sealed)
        self._ids = np.zeros((0, _ID_BYTES), dtype=np.uint8)
        self._fingerprints = np.zeros(0, dtype=np.uint64)
        self._created = np.zeros(0, dtype=np.float64)
        self._expires = np.zeros(0, dtype=np.float64)
        self._version = np.zeros(0, dtype=np.uint16)
        self._alive = np.zeros(0, dtype=bool)
        # The vectors of the slots while loading, in pieces (None once sealed).
        self._buffer: list[Any] | None = []
        self._slots: dict[int, int] = {}  # the first 64 bits of an id -> its slot
        self._versions: list[str] = []
        self._version_codes: dict[str, int] = {}

    def __len__(self) -> int:
        with self._lock:
            return self._live

    def memory_bytes(self) -> int:
        """About the memory the entries take: graph, vectors, columns and id map."""
        with self._lock:
            graph = self._graph
            hnsw = graph.hnsw
            total = int(graph.ntotal) * int(graph.storage.sa_code_size())
            total += 4 * (int(hnsw.neighbors.size()) + int(hnsw.levels.size()))
            total += 8 * int(hnsw.offsets.size())
            total += sum(getattr(self, name).nbytes for name in _COLUMNS)
            # Each key of the id map: two ints (32 and 28 bytes) besides the table.
            total += sys.getsizeof(self._slots) + 60 * len(self._slots)
            total += sum(piece.nbytes for piece in self._buffer or ())
            return int(total)

    def add(
        self, ids: Sequence[str], vectors: Any, metadatas: Sequence[dict[str, Any] | None]
    ) -> None:
        """Note entries in the store (a non-semantic one replaces a semantic one's slot)."""
        with self._adding:
            self._add(ids, vectors, metadatas)

    def _add(
        self, ids: Sequence[str], vectors: Any, metadatas: Sequence[dict[str, Any] | None]
    ) -> None:
        rows: list[int] = []
        with self._lock:
            sealed = self._buffer is None
            for row, (entry, metadata) in enumerate(zip(ids, metadatas, strict=True)):
                key = _prefix(entry)
                if key is None or metadata is None:
                    continue
                old = self._slots.pop(key, None)
                if old is not None:
                    if float(metadata.get("created", 0)) == self._created[old]:
                        self._slots[key] = old  # known as it is
                        continue
                    self._drop(old)
                fingerprint = _prefix(metadata.get("fingerprint"))
                if metadata.get("semantic") is not True or fingerprint is None:
                    continue
                self._slots[key] = self._append(entry, fingerprint, metadata)
                rows.append(row)
            added = np.asarray(vectors, dtype=np.float32)[rows] if rows else None
            if added is not None and self._buffer is not None:
                self._buffer.append(added.astype(np.float16))
            if not sealed or added is None:
                if self._live > self._capacity:
                    self._trim()
                return
        # Slots are taken: searches skip them until their vectors are in the graph.
        for start in range(0, len(added), _ADD_STEP):
            with self._lock:
                self._graph.add(added[start : start + _ADD_STEP])
                self._in_graph += len(added[start : start + _ADD_STEP])
        with self._lock:
            if self._live > self._capacity:
                self._trim()

    def seal_step(self) -> bool:
        """Put the next vectors of the buffer into the graph; True once all are in.

        Additions meanwhile only join the buffer, so they do not wait for the graph.
        """
        with self._lock:
            if self._buffer is None:
                return True
            if self._in_graph == 0:
                self._drop_oldest()
                self._compact()
            buffer = self._joined()
            upto = min(self._in_graph + _BUILD_STEP, self._count)
            step = buffer[self._in_graph : upto].astype(np.float32)
        if len(step):
            # Nothing searches a graph before it is sealed, and only this thread adds to it.
            self._graph.add(step)
        with self._lock:
            self._in_graph = upto
            if self._in_graph < self._count:
                return False
            self._buffer = None
            return True

    def nearest(
        self, vector: Vectors, count: int, floor: float, fingerprint: str, now: float
    ) -> list[Candidate]:
        """The ``count`` nearest entries of this fingerprint, at ``floor`` or above and not
        expired, among the nearest the search visits."""
        wanted = _prefix(fingerprint)
        query = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        with self._lock:
            if not self._live or not self._in_graph or wanted is None or self._buffer is not None:
                return []
            # The search visits this many entries anyway: returning them all costs nothing,
            # and keeps entries of other conversations (the same question with another
            # number, often as close) or dropped ones from crowding this one's out.
            breadth = max(_SEARCH_BREADTH, 2 * count)
            self._graph.hnsw.efSearch = breadth
            similarities, slots = self._graph.search(query, min(breadth, self._in_graph))
            close = []
            for similarity, slot in zip(similarities[0], slots[0], strict=True):
                if slot < 0 or slot >= self._in_graph:
                    continue
                if similarity < floor or not self._alive[slot]:
                    continue
                if self._fingerprints[slot] != wanted or self._expires[slot] <= now:
                    continue
                close.append(
                    Candidate(
                        entry=self._ids[slot].tobytes().hex(),
                        similarity=float(similarity),
                        created=float(self._created[slot]),
                        expires=float(self._expires[slot]),
                        version=self._versions[self._version[slot]],
                    )
                )
            return close[:count]

    # -- under the lock ------------------------------------------------------

    def _append(self, entry: str, fingerprint: int, metadata: dict[str, Any]) -> int:
        if self._count == len(self._ids):
            self._resize(max(1024, 2 * self._count))
        slot = self._count
        version = str(metadata.get("version") or "")
        code = self._version_codes.get(version)
        if code is None:
            code = self._version_codes[version] = len(self._versions)
            self._versions.append(version)
        self._ids[slot] = np.frombuffer(bytes.fromhex(entry), dtype=np.uint8)
        self._fingerprints[slot] = fingerprint
        self._created[slot] = float(metadata.get("created", 0))
        self._expires[slot] = float(metadata.get("expires", 0))
        self._version[slot] = code
        self._alive[slot] = True
        self._count += 1
        self._live += 1
        return slot

    def _resize(self, size: int) -> None:
        for name in _COLUMNS:
            old = getattr(self, name)
            new = np.zeros((size, *old.shape[1:]), dtype=old.dtype)
            new[: min(size, len(old))] = old[:size]
            setattr(self, name, new)

    def _drop(self, slot: int) -> None:
        if self._alive[slot]:
            self._alive[slot] = False
            self._live -= 1

    def _drop_oldest(self) -> None:
        """Drop the oldest live entries beyond the capacity."""
        excess = self._live - self._capacity
        if excess <= 0:
            return
        alive = np.flatnonzero(self._alive[: self._count])
        for slot in alive[np.argpartition(self._created[alive], excess - 1)[:excess]]:
            self._drop(int(slot))

    def _trim(self) -> None:
        """Past the capacity: once sealed, drop the oldest from the search (their memory is
        freed by the next load); while loading, every page or so, forget them."""
        if self._buffer is None:
            self._drop_oldest()
        elif self._in_graph == 0 and self._live >= self._capacity + _PAGE:
            self._drop_oldest()
            self._compact()

    def _joined(self) -> Any:
        """The buffer in one piece."""
        buffer = self._buffer or [np.zeros((0, self._dimensions), dtype=np.float16)]
        if len(buffer) > 1:
            buffer = [np.concatenate(buffer)]
        self._buffer = buffer
        return buffer[0]

    def _compact(self) -> None:
        """Forget dropped slots; only before any vector is in the graph (slots move)."""
        keep = np.flatnonzero(self._alive[: self._count])
        if len(keep) == self._count:
            return
        for name in _COLUMNS:
            setattr(self, name, getattr(self, name)[keep])
        self._buffer = [self._joined()[keep]]
        self._count = self._live = len(keep)
        self._slots = {
            int.from_bytes(entry[:8].tobytes(), "big"): slot for slot, entry in enumerate(self._ids)
        }


_COLUMNS = ("_ids", "_fingerprints", "_created", "_expires", "_version", "_alive")
_FAISS: list[Any] = []


def _faiss() -> Any:
    """faiss, imported on first use, adding vectors on one thread: a tenant's load in the
    background must not take every CPU from the requests."""
    if not _FAISS:
        import faiss

        faiss.omp_set_num_threads(1)
        _FAISS.append(faiss)
    return _FAISS[0]


@dataclass(slots=True)
class _Tenant(Upkeep):
    """One tenant's index, kept up as the key sets keep theirs."""

    entries: _Entries | None = None  # None until the first load is complete
    loading: _Entries | None = None
    reloading: bool = False  # a full reload is under way: the index in use stays trusted


class SemanticIndex(TenantMirror[_Tenant]):
    """Per tenant, the semantic entries' vectors in memory, kept up to date in the background.

    ``collection`` opens a tenant's cache collection (on the store's threads).
    """

    _what = "a semantic index"

    def __init__(
        self,
        store: VectorStore,
        collection: Callable[[str], Any],
        metrics: GatewayMetrics,
        dimensions: int,
        max_entries: int,
        refresh_s: float = REFRESH_S,
    ) -> None:
        super().__init__(store, metrics, _Tenant, refresh_s)
        self._collection = collection
        self._dimensions = dimensions
        self._max_entries = max_entries

    def nearest(
        self,
        tenant: str,
        vector: Vectors,
        fingerprint: str,
        count: int,
        threshold: float,
        now: float,
    ) -> list[Candidate] | None:
        """Candidates of this fingerprint near ``vector``; None when the index cannot tell
        (not loaded, or not refreshed lately: entries of other replicas may be missing)."""
        state = self._tenants.get(tenant)
        if state is None or state.entries is None:
            return None
        # During a full reload (seconds), refreshes wait for it: only misses are risked.
        if not state.trusted() and not state.reloading:
            return None
        return state.entries.nearest(vector, count, threshold - MARGIN, fingerprint, now)

    def add(
        self,
        tenant: str,
        ids: Sequence[str],
        vectors: Any,
        metadatas: Sequence[dict[str, Any]],
    ) -> None:
        """Note entries this gateway wrote (from the store's writing thread)."""
        state = self._tenants.get(tenant)
        if state is None:
            return  # its load will read them
        for entries in (state.entries, state.loading):
            if entries is not None:
                entries.add(ids, vectors, metadatas)

    def size(self, tenant: str) -> int | None:
        """How many entries the tenant's index holds; None until it is loaded."""
        state = self._tenants.get(tenant)
        return None if state is None or state.entries is None else len(state.entries)

    def memory_bytes(self, tenant: str) -> int | None:
        """About the memory the tenant's index takes; None until it is loaded."""
        state = self._tenants.get(tenant)
        return None if state is None or state.entries is None else state.entries.memory_bytes()

    # -- the mirror's hooks ---------------------------------------------------------

    def _enabled(self) -> bool:
        return self._max_entries > 0

    def _is_loaded(self, state: _Tenant) -> bool:
        return state.entries is not None

    def _size(self, state: _Tenant) -> int:
        return len(state.entries) if state.entries is not None else 0

    async def _read_all(self, tenant: str, state: _Tenant) -> None:
        """Read the tenant's semantic entries page by page, build the graph, then use it."""
        state.reloading = state.entries is not None
        try:
            entries = await self._read_pages(tenant, state)
            while not await self._store.background(entries.seal_step):
                pass
        except VectorStoreUnavailable:
            state.loading = None
            raise
        finally:
            state.reloading = False
        # In this order: a write meanwhile (on the writing thread) reaches one or the other.
        state.entries = entries
        state.loading = None

    async def _read_pages(self, tenant: str, state: _Tenant) -> _Entries:
        offset = 0
        entries: _Entries | None = None
        while True:
            ident, page = await self._store.background(self._page, tenant, offset)
            if entries is None or ident != entries.collection:
                # The first page, or the collection was made anew between two pages.
                entries = state.loading = await self._new_entries(ident)
                if offset:
                    offset = 0
                    continue
            ids, vectors, metadatas = page
            if ids:
                entries.add(ids, vectors, metadatas)
            if len(ids) < _PAGE:
                return entries
            offset += _PAGE

    async def _read_since(self, tenant: str, state: _Tenant) -> None:
        """Add the entries created since the last refresh; notice a cleared collection."""
        entries = state.entries
        ident, page = await self._store.background(self._created_since, tenant, state.since)
        if entries is not None and ident != entries.collection:
            # Made anew since the last refresh: what it holds was created since, and is
            # in this page.
            entries = await self._new_entries(ident)
            entries.seal_step()  # empty: sealed at once
            state.entries = entries
        if entries is None:
            return
        ids, vectors, metadatas = page
        if ids:
            entries.add(ids, vectors, metadatas)

    async def _new_entries(self, collection: str) -> _Entries:
        # Made on the background thread: the first imports faiss (a quarter of a second).
        return await self._store.background(
            _Entries, self._dimensions, collection, self._max_entries
        )

    # -- on the store's background thread -------------------------------------

    def _page(self, tenant: str, offset: int) -> tuple[str, _Rows]:
        """One page of the collection's semantic entries, and the collection's id."""
        collection = self._collection(tenant)
        found = collection.get(
            where={"semantic": True},
            include=["embeddings", "metadatas"],
            limit=_PAGE,
            offset=offset,
        )
        return str(collection.id), _rows(found)

    def _created_since(self, tenant: str, since: float) -> tuple[str, _Rows]:
        """The semantic entries created at ``since`` or later, and the collection's id."""
        collection = self._collection(tenant)
        found = collection.get(
            where={"$and": [{"created": {"$gte": since}}, {"semantic": True}]},
            include=["embeddings", "metadatas"],
        )
        return str(collection.id), _rows(found)


_Rows = tuple[list[str], Any, list[dict[str, Any] | None]]


def _rows(found: Any) -> _Rows:
    ids = list(found["ids"])
    embeddings = found.get("embeddings")
    if embeddings is None or not ids:
        return [], None, []
    return ids, np.asarray(embeddings, dtype=np.float32), list(found["metadatas"] or [])
