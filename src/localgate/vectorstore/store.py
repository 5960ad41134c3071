"""The vector store: ChromaDB, embedded (a directory) or a Chroma server (several replicas).

localgate keeps one collection per tenant, purpose (the cache, or one named retrieval
collection) and embedding space, so tenants never share an index and vectors of two
embedders never mix. Collection names carry a digest of the tenant, never the tenant
itself; the collection's metadata says whose it is.

Chroma calls run on three worker threads, one reading (lookups, retrieval), one
writing (storing answers) and one for slow background reads (loading the cache's key
sets), so a lookup never waits behind a write or a background read; the event loop
waits on the first two no longer than ``cache.timeout_s``. A store that failed to open
or ran out of time is left alone for a few seconds: calls fail at once (the cache
misses) instead of each waiting. An embedded store written by another process (``localgate
rag ingest`` beside a running gateway) is noticed through a generation file the writer
touches, and reopened with no call in flight. The gateway opens an embedded store in a
child process of its own (``isolated.py``): chromadb's embedded writes hold the GIL
for their whole duration, which would stall every request in flight.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from localgate.config import Settings
from localgate.errors import InvalidArgument, LocalgateError, ServiceUnavailable
from localgate.vectorstore.isolated import IsolatedChroma, Listing, listing, open_embedded

__all__ = ["CollectionInfo", "VectorStore", "VectorStoreUnavailable", "check_collection_name"]

logger = logging.getLogger("localgate.vectorstore")
T = TypeVar("T")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_GENERATION_FILE = "localgate.generation"
_RETRY_S = 5.0
# Background reads list a whole collection's ids, a few pages at a time.
_BACKGROUND_BUDGET_S = 60.0
# How many writes Chroma applies before it saves a collection's vector index; each write
# until then re-reads all of them (chromadb's default, 1,000: 8.1 ms per one-entry upsert
# on average over 1,200 writes, against 4.9 ms at 100; a save every 100 writes costs
# ~20 ms). Collections made before are changed when opened; Chroma applies the change
# the next time the store is opened.
_SYNC_THRESHOLD = 100


def check_collection_name(name: str) -> str:
    """``name`` if it is a valid retrieval collection name, else ``InvalidArgument``."""
    if not _NAME.match(name):
        raise InvalidArgument(
            f"Collection name {name!r} is not valid: use 1-63 letters, digits, '_' or '-', "
            "starting with a letter or digit."
        )
    return name


@dataclass(frozen=True, slots=True)
class CollectionInfo:
    """One of localgate's collections, as ``cache stats`` and ``rag list`` show it."""

    name: str
    tenant: str
    purpose: str  # "cache" or "rag"
    collection: str | None  # the retrieval collection's name
    space: str
    embedder: str
    count: int


class VectorStore:
    """Opens ChromaDB once and hands out per-tenant collections."""

    def __init__(
        self, settings: Settings, *, timeout_s: float | None = None, isolate: bool = False
    ) -> None:
        """``isolate``: open an embedded store in a child process (the gateway does)."""
        self._url = settings.cache.chroma_url
        self._isolate = isolate
        self._token = settings.chroma_token
        self._path = settings.vector_store_path
        self._timeout_s = timeout_s if timeout_s is not None else settings.cache.timeout_s
        # Reads (lookups, retrieval) never wait behind writes (storing answers).
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="localgate-vector-read")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="localgate-vector-write")
        self._background = ThreadPoolExecutor(1, thread_name_prefix="localgate-vector-background")
        self._lock = _SharedLock()
        self._opening = threading.Lock()
        self._client: Any = None
        self._closed = False
        self._collections: dict[str, Any] = {}
        self._generation: float | None = None
        # While the store is down (failed to open, or a call ran out of time), calls
        # fail at once instead of each waiting for it.
        self._down_until = 0.0
        self._down = ""

    @property
    def where(self) -> str:
        """The server URL or the directory, for operators (never sent to clients)."""
        return self._url or str(self._path)

    # -- running calls -------------------------------------------------------

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """Run ``call(*args)`` on the reading thread, within the store's time budget."""
        return await self._within_budget(self._reader, call, *args)

    async def write(self, call: Callable[..., T], *args: Any) -> T:
        """Run ``call(*args)`` on the writing thread, within the store's time budget."""
        return await self._within_budget(self._writer, call, *args)

    async def background(self, call: Callable[..., T], *args: Any) -> T:
        """Run ``call(*args)`` on the background thread, for reads that may take seconds;
        neither lookups nor writes wait behind it."""
        return await self._within_budget(self._background, call, *args, background=True)

    def open_soon(self) -> None:
        """Start opening the store on the background thread, so the first lookup does not
        wait for it (an embedded store's process takes a second or two to start)."""

        def open_store() -> None:
            try:
                self._open()
            except VectorStoreUnavailable as exc:
                if not self._closed:
                    logger.error("%s", exc.reason)

        self._background.submit(open_store)

    def sync(self, call: Callable[..., T], *args: Any) -> T:
        """Run ``call(*args)`` here, without a time budget (for the CLI)."""
        return self._guarded(call, *args)

    async def _within_budget(
        self,
        executor: ThreadPoolExecutor,
        call: Callable[..., T],
        *args: Any,
        background: bool = False,
    ) -> T:
        if time.monotonic() < self._down_until:
            raise VectorStoreUnavailable(self._down)
        budget_s = max(self._timeout_s, _BACKGROUND_BUDGET_S) if background else self._timeout_s
        future = asyncio.get_running_loop().run_in_executor(executor, self._guarded, call, *args)
        try:
            return await asyncio.wait_for(future, budget_s)
        except TimeoutError:
            reason = f"the vector store at {self.where} did not answer in {budget_s:g} s"
            if background:
                # A slow background read does not make the store down: the lookups judge.
                raise VectorStoreUnavailable(reason) from None
            self._mark_down(reason)
            client = self._client
            if isinstance(client, IsolatedChroma):
                # A child that does not answer is ended: the threads waiting on it get
                # an error, and the next call after the pause starts a new one.
                client.kill()
            raise VectorStoreUnavailable(self._down) from None

    def _guarded(self, call: Callable[..., T], *args: Any) -> T:
        try:
            self._refresh_if_changed()
        except Exception as exc:
            self._after_child_error(exc)
            reason = f"the vector store at {self.where} could not be reopened: {exc}"
            raise VectorStoreUnavailable(reason) from exc
        try:
            return self._call(call, args, stale_ok=True)
        except _StaleHandle:
            # A collection deleted and made again by another client (a shared server,
            # the CLI): our handle is stale. Forget the handles and try once more.
            self._collections.clear()
            return self._call(call, args, stale_ok=False)

    def _call(self, call: Callable[..., T], args: tuple[Any, ...], *, stale_ok: bool) -> T:
        with self._lock.shared():
            try:
                return call(*args)
            except LocalgateError:
                raise
            except Exception as exc:
                if stale_ok and _is_not_found(exc):
                    raise _StaleHandle from exc
                self._after_child_error(exc)
                logger.exception("vector store call failed (%s)", self.where)
                reason = f"the vector store at {self.where} failed: {exc}"
                raise VectorStoreUnavailable(reason) from exc

    def _mark_down(self, reason: str) -> None:
        self._down = reason
        self._down_until = time.monotonic() + _RETRY_S
        logger.error("%s; calls fail at once for %g s", reason, _RETRY_S)

    async def check(self) -> str | None:
        """None when the store answers, else why not (for ``/readyz``)."""
        try:
            await self.run(lambda: self._open().heartbeat())
        except VectorStoreUnavailable as exc:
            return exc.reason
        return None

    def close(self) -> None:
        """Stop the worker threads (a call stuck in a hung store is abandoned) and the
        child process, if any."""
        self._reader.shutdown(wait=False, cancel_futures=True)
        self._writer.shutdown(wait=False, cancel_futures=True)
        self._background.shutdown(wait=False, cancel_futures=True)
        self._closed = True
        self._collections.clear()
        client, self._client = self._client, None
        if isinstance(client, IsolatedChroma):
            client.close()

    def child_pid(self) -> int | None:
        """The process that holds an embedded store for this gateway, once opened (None:
        not open, a server, or in this process)."""
        client = self._client
        return client.pid if isinstance(client, IsolatedChroma) else None

    def _after_child_error(self, exc: Exception) -> None:
        """After a failed call to the store's child: if the child is gone, forget it (the
        next open starts a new one); else forget the collection handles, which may be
        proxies of a child that was replaced."""
        client = self._client
        if not isinstance(client, IsolatedChroma) or not isinstance(exc, EOFError | OSError):
            return
        if client.answers():
            self._collections.clear()
            return
        with self._opening:
            if self._client is client:
                self._client = None
                self._collections.clear()
        client.close()

    # -- collections (call these through run/sync) ----------------------------

    def collection(
        self,
        tenant: str,
        purpose: str,
        space: str,
        embedder: str,
        collection: str | None = None,
        *,
        create: bool = True,
    ) -> Any:
        """The tenant's collection for ``purpose`` in ``space``; None if absent and not created."""
        name = _collection_name(tenant, purpose, space, collection)
        found = self._collections.get(name)
        if found is not None:
            return found
        client = self._open()
        if create:
            metadata = {
                "localgate": 1,
                "tenant": tenant,
                "purpose": purpose,
                "space": space,
                "embedder": embedder,
            }
            if collection is not None:
                metadata["collection"] = collection
            found = client.get_or_create_collection(
                name,
                embedding_function=None,
                metadata=metadata,
                configuration={"hnsw": {"space": "cosine", "sync_threshold": _SYNC_THRESHOLD}},
            )
            _settle_sync_threshold(found)
        else:
            try:
                found = client.get_collection(name, embedding_function=None)
            except Exception as exc:
                if _is_not_found(exc):
                    return None
                raise
        if self._client is client:  # not replaced meanwhile
            self._collections[name] = found
        return found

    def collections(
        self, tenant: str | None = None, purpose: str | None = None
    ) -> list[CollectionInfo]:
        """localgate's collections, optionally of one tenant and purpose."""
        found = []
        for name, metadata, count in self._listing():
            if metadata.get("localgate") != 1:
                continue
            if tenant is not None and metadata.get("tenant") != tenant:
                continue
            if purpose is not None and metadata.get("purpose") != purpose:
                continue
            found.append(
                CollectionInfo(
                    name=name,
                    tenant=str(metadata.get("tenant")),
                    purpose=str(metadata.get("purpose")),
                    collection=metadata.get("collection"),
                    space=str(metadata.get("space")),
                    embedder=str(metadata.get("embedder")),
                    count=count,
                )
            )
        return sorted(found, key=lambda info: (info.tenant, info.purpose, info.collection or ""))

    def _listing(self) -> list[Listing]:
        client = self._open()
        return client.listing() if isinstance(client, IsolatedChroma) else listing(client)

    def drop(self, name: str) -> None:
        """Delete one collection (by its Chroma name) and say so to other processes."""
        self._open().delete_collection(name)
        self._collections.pop(name, None)
        self.touch()

    def touch(self) -> None:
        """Tell gateways sharing this embedded store that its contents changed."""
        if self._url is not None:
            return  # a server is shared by design; nothing to tell
        marker = self._path / _GENERATION_FILE
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        self._generation = marker.stat().st_mtime

    # -- opening -------------------------------------------------------------

    def _open(self) -> Any:
        if self._client is None:
            with self._opening:  # the reading, writing and background threads may all ask
                if self._client is None:
                    self._client = self._first_open()
                if self._closed:  # closed while it opened: nobody will close it later
                    client, self._client = self._client, None
                    if isinstance(client, IsolatedChroma):
                        client.close()
                    raise VectorStoreUnavailable(f"the vector store at {self.where} is closed")
        return self._client

    def _first_open(self) -> Any:
        if time.monotonic() < self._down_until:
            raise VectorStoreUnavailable(self._down)
        try:
            return self._connect()
        except VectorStoreUnavailable as exc:
            self._mark_down(exc.reason)
            raise

    def _connect(self) -> Any:
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        # A data-localization gateway phones home to nobody.
        chroma_settings = ChromaSettings(anonymized_telemetry=False)
        try:
            if self._url is not None:
                parts = urlsplit(self._url)
                headers = (
                    {"Authorization": f"Bearer {self._token.reveal()}"} if self._token else None
                )
                client = chromadb.HttpClient(
                    host=parts.hostname or "localhost",
                    port=parts.port or (443 if parts.scheme == "https" else 8000),
                    ssl=parts.scheme == "https",
                    headers=headers,
                    settings=chroma_settings,
                )
                _bound_http_wait(client, self._timeout_s)
                return client
            self._path.mkdir(parents=True, exist_ok=True)
            self._generation = self._stat_generation()
            if self._isolate:
                isolated = IsolatedChroma(self._path)
                logger.info("vector store %s: opened in process %d", self._path, isolated.pid)
                return isolated
            return open_embedded(self._path)
        except Exception as exc:
            raise VectorStoreUnavailable(
                f"the vector store at {self.where} cannot be opened: {exc}"
            ) from exc

    def disk_generation(self) -> float | None:
        """When another process last changed the embedded store (None: never, or a server)."""
        return None if self._url is not None else self._stat_generation()

    def _stat_generation(self) -> float | None:
        try:
            return os.stat(self._path / _GENERATION_FILE).st_mtime
        except FileNotFoundError:
            return None

    def _refresh_if_changed(self) -> None:
        if self._url is not None or self._client is None:
            return
        if self._stat_generation() == self._generation:
            return
        # Another process wrote to the embedded store: the in-memory indexes are stale.
        # Reopened with no call in flight on either thread.
        from chromadb.api.shared_system_client import SharedSystemClient

        with self._lock.exclusive():
            generation = self._stat_generation()
            if generation == self._generation:
                return
            logger.info("vector store %s changed on disk; reopening it", self._path)
            self._collections.clear()
            if isinstance(self._client, IsolatedChroma):
                self._client.reopen()
            else:
                SharedSystemClient.clear_system_cache()
                self._client = None
                self._open()
            self._generation = generation


class VectorStoreUnavailable(ServiceUnavailable):
    """The store cannot be used now. Clients are told so without its address or the
    driver's words; ``reason`` (for logs and ``/readyz``) has both."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            "The gateway's local vector store is unavailable; try again shortly. If it "
            "persists, tell the gateway operator."
        )
        self.reason = reason


class _StaleHandle(Exception):
    """A collection handle that no longer names a collection."""


class _SharedLock:
    """Many holders at once, or one exclusive holder (to reopen the store)."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._holders = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._condition:
            self._holders += 1
        try:
            yield
        finally:
            with self._condition:
                self._holders -= 1
                self._condition.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._condition:  # held throughout: no new shared holder can start
            self._condition.wait_for(lambda: self._holders == 0)
            yield


def _settle_sync_threshold(collection: Any) -> None:
    """Give a collection made with Chroma's default sync threshold ours."""
    try:
        hnsw = (collection.configuration_json or {}).get("hnsw") or {}
        if hnsw.get("sync_threshold", _SYNC_THRESHOLD) != _SYNC_THRESHOLD:
            collection.modify(configuration={"hnsw": {"sync_threshold": _SYNC_THRESHOLD}})
            logger.info(
                "vector store: collection %s now saves its index every %d writes",
                collection.name,
                _SYNC_THRESHOLD,
            )
    except Exception:  # an older collection works as it is; only its writes are slower
        logger.warning(
            "vector store: could not change %s's sync threshold", collection.name, exc_info=True
        )


def _is_not_found(exc: Exception) -> bool:
    from chromadb.errors import NotFoundError

    return isinstance(exc, NotFoundError)


def _bound_http_wait(client: Any, timeout_s: float) -> None:
    """Give the Chroma HTTP client's connection a timeout (it has none by default).

    chromadb 1.x builds its httpx client with ``timeout=None`` and has no setting for
    it; without one, a server that accepts but never answers holds a worker thread
    forever. The attribute path is chromadb's own; if it moves, the store's time budget
    still bounds what a request waits.
    """
    session = getattr(getattr(client, "_server", None), "_session", None)
    if session is not None and hasattr(session, "timeout"):
        import httpx

        session.timeout = httpx.Timeout(timeout_s * 4, connect=timeout_s)


def _collection_name(tenant: str, purpose: str, space: str, collection: str | None) -> str:
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:16]
    if collection is None:
        return f"lg.{purpose}.{digest}.{space}"
    return f"lg.{purpose}.{check_collection_name(collection)}.{digest}.{space}"
