"""The vector store: ChromaDB, embedded (a directory) or a Chroma server (several replicas).

localgate keeps one collection per tenant, purpose (the cache, or one named retrieval
collection) and embedding space, so tenants never share an index and vectors of two
embedders never mix. Collection names carry a digest of the tenant, never the tenant
itself; the collection's metadata says whose it is.

Every Chroma call runs on one worker thread of the store: the event loop never waits
on it, and the embedded client is never used from two threads at once. An embedded
store written by another process (``localgate rag ingest`` beside a running gateway)
is noticed through a generation file the writer touches, and reopened.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from localgate.config import Settings
from localgate.errors import InvalidArgument, ServiceUnavailable

__all__ = ["CollectionInfo", "VectorStore", "check_collection_name"]

logger = logging.getLogger("localgate.vector")
T = TypeVar("T")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_GENERATION_FILE = "localgate.generation"
_RETRY_OPEN_S = 5.0


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

    def __init__(self, settings: Settings) -> None:
        self._url = settings.cache.chroma_url
        self._path = settings.vector_store_path
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="localgate-vector")
        self._lock = threading.Lock()
        self._client: Any = None
        self._collections: dict[str, Any] = {}
        self._generation: float | None = None
        self._retry_at = 0.0
        self._down = ""

    @property
    def where(self) -> str:
        """The server URL or the directory, for messages."""
        return self._url or str(self._path)

    # -- running calls -------------------------------------------------------

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """Run ``call(*args)`` on the store's thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._guarded, call, *args)

    def _guarded(self, call: Callable[..., T], *args: Any) -> T:
        with self._lock:
            self._refresh_if_changed()
            return call(*args)

    def sync(self, call: Callable[..., T], *args: Any) -> T:
        """Run ``call(*args)`` here (for the CLI, which has no event loop)."""
        return self._guarded(call, *args)

    async def check(self) -> str | None:
        """None when the store answers, else why not (for ``/readyz``)."""
        try:
            await self.run(lambda: self._open().heartbeat())
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready", said plainly
            return f"the vector store at {self.where} does not answer: {exc}"
        return None

    def close(self) -> None:
        """Finish queued calls and stop the worker thread."""
        self._executor.shutdown(wait=True)
        self._collections.clear()
        self._client = None

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
                configuration={"hnsw": {"space": "cosine"}},
            )
        else:
            try:
                found = client.get_collection(name, embedding_function=None)
            except Exception:  # noqa: BLE001 - chroma raises several kinds for "not found"
                return None
        self._collections[name] = found
        return found

    def collections(
        self, tenant: str | None = None, purpose: str | None = None
    ) -> list[CollectionInfo]:
        """localgate's collections, optionally of one tenant and purpose."""
        client = self._open()
        found = []
        for model in client.list_collections():
            metadata = model.metadata or {}
            if metadata.get("localgate") != 1:
                continue
            if tenant is not None and metadata.get("tenant") != tenant:
                continue
            if purpose is not None and metadata.get("purpose") != purpose:
                continue
            found.append(
                CollectionInfo(
                    name=model.name,
                    tenant=str(metadata.get("tenant")),
                    purpose=str(metadata.get("purpose")),
                    collection=metadata.get("collection"),
                    space=str(metadata.get("space")),
                    embedder=str(metadata.get("embedder")),
                    count=model.count(),
                )
            )
        return sorted(found, key=lambda info: (info.tenant, info.purpose, info.collection or ""))

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
            # After a failed open, wait before trying again: a store that is down must
            # not add a connection attempt to every request.
            if time.monotonic() < self._retry_at:
                raise ServiceUnavailable(self._down)
            try:
                self._client = self._connect()
            except ServiceUnavailable as exc:
                self._retry_at = time.monotonic() + _RETRY_OPEN_S
                self._down = exc.message
                raise
        return self._client

    def _connect(self) -> Any:
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        # A data-localization gateway phones home to nobody.
        chroma_settings = ChromaSettings(anonymized_telemetry=False)
        try:
            if self._url is not None:
                parts = urlsplit(self._url)
                return chromadb.HttpClient(
                    host=parts.hostname or "localhost",
                    port=parts.port or (443 if parts.scheme == "https" else 8000),
                    ssl=parts.scheme == "https",
                    settings=chroma_settings,
                )
            self._path.mkdir(parents=True, exist_ok=True)
            self._generation = self._stat_generation()
            return chromadb.PersistentClient(path=str(self._path), settings=chroma_settings)
        except Exception as exc:
            raise ServiceUnavailable(
                f"The vector store at {self.where} cannot be opened: {exc}"
            ) from exc

    def _stat_generation(self) -> float | None:
        try:
            return os.stat(self._path / _GENERATION_FILE).st_mtime
        except FileNotFoundError:
            return None

    def _refresh_if_changed(self) -> None:
        if self._url is not None or self._client is None:
            return
        generation = self._stat_generation()
        if generation == self._generation:
            return
        # Another process wrote to the embedded store: the in-memory indexes are stale.
        from chromadb.api.shared_system_client import SharedSystemClient

        logger.info("vector store %s changed on disk; reopening it", self._path)
        SharedSystemClient.clear_system_cache()
        self._collections.clear()
        self._client = None
        self._open()
        self._generation = generation


def _collection_name(tenant: str, purpose: str, space: str, collection: str | None) -> str:
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:16]
    if collection is None:
        return f"lg.{purpose}.{digest}.{space}"
    return f"lg.{purpose}.{check_collection_name(collection)}.{digest}.{space}"
