"""Retrieval collections: ingest documents, search them, list and delete collections.

A collection belongs to a tenant, or (``tenant=None``) is shared by every tenant: a tenant's
query searches its own collection of the name asked for, else the shared one. Documents
are redacted by their owner's policy before they are embedded (``rag.library``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from localgate.admin.closing import ClosingService
from localgate.admin.tenants import is_tenant_name
from localgate.config import Settings
from localgate.errors import InvalidArgument, NotFound
from localgate.rag.documents import SUPPORTED_SUFFIXES, find_documents
from localgate.rag.library import SHARED, FileProblem, IngestReport, Library, Passage, Progress
from localgate.vectorstore.embedders import Embedder, build_embedder
from localgate.vectorstore.store import CollectionInfo, VectorStore, check_collection_name

__all__ = [
    "SHARED",
    "CollectionInfo",
    "FileProblem",
    "IngestReport",
    "Passage",
    "Progress",
    "RagAdmin",
    "RetrievalCollection",
    "check_collection_name",
    "describe_owner",
    "documents_in",
]


@dataclass(frozen=True, slots=True)
class RetrievalCollection:
    """A retrieval collection: its owner (``SHARED`` for every tenant), name and size."""

    tenant: str
    collection: str
    chunks: int  # over every embedding space it has


def describe_owner(tenant: str) -> str:
    """Whose a collection is, as messages say it: "of tenant acme", "shared by every tenant"."""
    return "shared by every tenant" if tenant == SHARED else f"of tenant {tenant}"


def documents_in(paths: Iterable[Path]) -> list[Path]:
    """The files ``ingest`` would read (folders walked); ``InvalidArgument`` if none."""
    files = find_documents(paths)
    if not files:
        raise InvalidArgument(
            f"no documents found; supported types are {', '.join(SUPPORTED_SUFFIXES)}"
        )
    return files


class RagAdmin(ClosingService):
    """Manages the retrieval collections in the vector store."""

    def __init__(
        self,
        settings: Settings,
        store: VectorStore,
        embedder: Embedder,
        *,
        owns_store: bool = False,
    ) -> None:
        """On ``store`` with ``embedder``; ``owns_store``: ``close`` closes the store too."""
        self._store = store
        self._library = Library(settings, store, embedder)
        self._owns_store = owns_store

    @classmethod
    def open(cls, settings: Settings) -> RagAdmin:
        """On the configured store and embedder, opened for this admin alone; close it after.

        ``ConfigError`` if the embedder cannot be built (a model directory that is not one).
        """
        embedder = build_embedder(settings.embeddings)
        return cls(settings, VectorStore(settings), embedder, owns_store=True)

    def close(self) -> None:
        """Close the store, if this admin opened it."""
        if self._owns_store:
            self._store.close()

    def ingest(
        self,
        paths: Iterable[Path],
        collection: str,
        tenant: str | None = None,
        progress: Progress | None = None,
    ) -> IngestReport:
        """Redact, embed and store the documents (folders walked) in the collection.

        A file stored before is replaced; a file in which the owner's policy blocks
        something is refused whole. The report lists what was refused or unreadable.
        """
        files = documents_in(paths)
        owner = _owner(tenant)
        return self._store.sync(
            self._library.ingest, owner, check_collection_name(collection), files, progress
        )

    def query(
        self,
        text: str,
        collection: str,
        tenant: str | None = None,
        top_k: int | None = None,
        min_similarity: float | None = None,
    ) -> list[Passage]:
        """The passages most similar to ``text`` (redacted first, by the tenant's policy),
        best first, as the gateway would retrieve them for ``tenant``."""
        owner = _owner(tenant)
        return self._store.sync(self._library.query, owner, collection, text, top_k, min_similarity)

    def collections(self, tenant: str | None = None) -> list[CollectionInfo]:
        """Every retrieval collection, or those ``tenant`` searches (its own and shared)."""
        return self._store.sync(self._library.collections, tenant)

    def collection(self, collection: str, tenant: str | None = None) -> RetrievalCollection:
        """One collection of its owner (not a shared one in its place); ``NotFound`` if none."""
        owner = _owner(tenant)
        check_collection_name(collection)
        found = [
            info
            for info in self._store.sync(self._library.collections, owner)
            if info.tenant == owner and info.collection == collection
        ]
        if not found:
            raise NotFound(f"no retrieval collection {collection!r} {describe_owner(owner)}")
        return RetrievalCollection(owner, collection, sum(info.count for info in found))

    def delete(self, collection: str, tenant: str | None = None) -> None:
        """Delete the collection and every passage in it, in every embedding space;
        ``NotFound`` if it does not exist."""
        owner = _owner(tenant)
        if not self._store.sync(self._library.delete, owner, collection):
            raise NotFound(f"no retrieval collection {collection!r} {describe_owner(owner)}")


def _owner(tenant: str | None) -> str:
    """The owner a collection is stored under; an empty or malformed name is refused rather
    than taken for "shared"."""
    if tenant is None or tenant == SHARED:
        return SHARED
    if not is_tenant_name(tenant):
        raise InvalidArgument(
            f"{tenant!r} is not a tenant name: 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return tenant
